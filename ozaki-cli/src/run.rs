//! `ozaki run [--trace FILE] [--route ROUTE] -- CMD ARGS...`: run an unmodified program with
//! the shim preloaded, then summarise its BLAS calls.
//!
//! The shim library is found next to this executable (`preload.rs`) and prepended to
//! `LD_PRELOAD`. The program's stdout is left alone: the summary goes to
//! stderr, after the program has exited, and the program's exit status is passed through
//! (a death by signal N becomes 128 + N, as in a shell), so `ozaki run` can stand in front
//! of any command in a script.
//!
//! Without `--trace` (and without `OZAKI_TRACE` in the environment) the trace goes to a
//! private temporary directory that is removed afterwards, so the summary is always
//! available. Trace files are named with `%p`, so a program that forks leaves one file per
//! process, and all of them are summarised together.
//!
//! A trace path is made absolute before the program starts (a program that changes
//! directory still writes where the user asked). A plain `--trace FILE` (no `%` field) is
//! written per process under the hood, as `FILE.<pid>`, so several processes (a script
//! running two programs, a pool of workers) never truncate or interleave one file; after
//! the run they are joined into `FILE`, one header per process, and the parts are removed.
//! A part whose process is still running is left in place and named. A program killed by a
//! signal is said to have a trace that may be incomplete.
//!
//! The program's OpenBLAS pools are given the shim's spin timeout (`OPENBLAS_THREAD_TIMEOUT`,
//! `OZAKI_VENDOR_SPIN`, `ozaki_core::engine::spin`) before it starts, unless the user set
//! one: a program linked with OpenBLAS initialises it before the shim's constructor runs.
//!
//! MPI: both `mpirun -n 4 ozaki run -- ./prog` (each rank summarises its own
//! trace) and `ozaki run -- mpirun -n 4 ./prog` (one summary of every rank's trace) work;
//! see `launcher.rs` for how the environment crosses Open MPI's launcher.

use anyhow::Context as _;
use clap::Parser;
use ozaki_core::engine::spin::OPENBLAS_TIMEOUT_VAR;
use ozaki_core::route::RouteRequest;
use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::launcher;
use crate::preload::{audit, find_shim, prepend_preload, vendor_spin_timeout};
use crate::summary;

/// Run a program with the ozaki shim preloaded, then print a summary of its BLAS calls.
#[derive(Debug, Parser)]
#[command(override_usage = "ozaki run [OPTIONS] -- <CMD> [ARGS]...")]
#[command(
    after_help = "The program's own output and exit code are untouched; the summary goes to stderr.\n\n\
                  Examples:\n  \
                  ozaki run -- python3 -c 'import numpy as np; a = np.ones((500, 500)); a @ a'\n  \
                  ozaki run --trace app-%p.jsonl -- ./my_solver input.dat\n  \
                  ozaki summary app-*.jsonl"
)]
struct Args {
    /// Keep the trace in FILE (`%p` becomes the pid, `%h` the host name, `%r` the MPI rank). A
    /// plain FILE collects every process of the program (each writes FILE.<pid>, joined into
    /// FILE at the end); a relative FILE is taken from the current directory. Without it the
    /// trace goes to a temporary file that is deleted after the summary (or to
    /// OZAKI_TRACE when that is set).
    #[arg(long, value_name = "FILE")]
    trace: Option<OsString>,
    /// Route for every call (sets OZAKI_ROUTE): auto, vendor, builtin, cpu-ozaki,
    /// gpu-native, gpu-ozaki.
    #[arg(long, value_name = "ROUTE")]
    route: Option<String>,
    /// Don't print the summary at the end.
    #[arg(long)]
    no_summary: bool,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

pub fn main(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let args = Args::parse_from(args);
    if let Some(route) = &args.route {
        route.parse::<RouteRequest>().with_context(|| "--route")?;
    }
    let shim = find_shim()?;

    // Where the trace goes: --trace, else the caller's OZAKI_TRACE, else a private temp dir.
    let (pattern, temp_dir) = match (&args.trace, ozaki_core::env::var_os(ozaki_core::env::TRACE)) {
        (Some(p), _) => (absolute(Path::new(p))?, None),
        (None, Some(p)) if !p.is_empty() => (absolute(Path::new(&p))?, None),
        _ => {
            let dir = private_temp_dir()?;
            (dir.join("trace-%p.jsonl"), Some(dir))
        }
    };
    // Several MPI ranks must not share one trace file.
    let (pattern, joined) =
        match launcher::per_rank_pattern(&pattern.to_string_lossy(), &args.command[0]) {
            Some(p) => {
                eprintln!("ozaki run: MPI ranks write one trace each: {p}");
                (PathBuf::from(p), None)
            }
            None => per_process(pattern),
        };

    let spin = vendor_spin_timeout();
    let audit = audit(&shim)?;
    // An Open MPI launcher is told to forward these to ranks on other hosts (launcher.rs).
    let mut forwarded = vec!["LD_PRELOAD", "OZAKI_TRACE"];
    if audit.is_some() {
        forwarded.push("LD_AUDIT");
    }
    if args.route.is_some() {
        forwarded.push("OZAKI_ROUTE");
    }
    if spin.is_some() {
        forwarded.push(OPENBLAS_TIMEOUT_VAR);
    }
    let mut cmd = launcher::command(&args.command, &forwarded);
    cmd.env(
        "LD_PRELOAD",
        prepend_preload(&shim, ozaki_core::env::var_os("LD_PRELOAD").as_deref()),
    );
    if let Some(a) = &audit {
        cmd.env("LD_AUDIT", a);
    }
    cmd.env("OZAKI_TRACE", &pattern);
    if let Some(route) = &args.route {
        cmd.env("OZAKI_ROUTE", route);
    }
    if let Some(n) = spin {
        cmd.env(OPENBLAS_TIMEOUT_VAR, n.to_string());
    }

    let started = std::time::SystemTime::now();
    forward_signals_while_waiting();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {:?}", args.command[0]))?;
    CHILD_PID.store(child.id() as i32, Ordering::SeqCst);
    let status = child.wait().context("waiting for the program")?;
    CHILD_PID.store(0, Ordering::SeqCst);
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c & 0xff,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    };

    if let Some(sig) = status.signal() {
        eprintln!(
            "ozaki run: the program was killed by signal {sig}; its trace may be incomplete \
             (records made in its last half second may be missing)"
        );
    }
    let pattern = match &joined {
        Some(file) => {
            join_parts(&pattern, file, started);
            file.clone()
        }
        None => pattern,
    };
    if !args.no_summary {
        let run = Finished {
            program: &args.command[0],
            code,
        };
        print_summary(&pattern, started, temp_dir.is_none(), &run);
    }
    if let Some(dir) = temp_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(ExitCode::from(code as u8))
}

/// `path` from the current directory when it is relative (the program may change directory
/// before it writes its trace).
fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("--trace {}", path.display()))
}

/// The pattern the processes write and, for a plain file name, the file their parts are
/// joined into afterwards (`FILE.%p` -> `FILE`).
fn per_process(pattern: PathBuf) -> (PathBuf, Option<PathBuf>) {
    if pattern.to_string_lossy().contains('%') {
        return (pattern, None);
    }
    let mut parts = pattern.clone().into_os_string();
    parts.push(".%p");
    (PathBuf::from(parts), Some(pattern))
}

/// Joins the per-process files of `parts` written since `since` into `file` (created 0600,
/// a symlink at `file` refused), oldest process first, and removes them. A part whose
/// process is still alive is left alone and named, since it is still being written.
fn join_parts(parts: &Path, file: &Path, since: std::time::SystemTime) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let since = since - std::time::Duration::from_secs(2);
    let mut found: Vec<(u32, PathBuf)> = trace_files(parts, since)
        .into_iter()
        .filter_map(|p| {
            let pid = p.extension()?.to_str()?.parse().ok()?;
            Some((pid, p))
        })
        .collect();
    if found.is_empty() {
        return;
    }
    found.sort_by_key(|(_, p)| {
        std::fs::metadata(p)
            .and_then(|m| m.created().or_else(|_| m.modified()))
            .ok()
    });
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .and_then(|f| {
            // The file that was opened must be ours alone before it is emptied (the shim's
            // own rule for trace files).
            // SAFETY: geteuid has no preconditions.
            let euid = unsafe { libc::geteuid() };
            ozaki_core::private_path::check_owned_file(&f.metadata()?, euid, 0o077)
                .map_err(|why| std::io::Error::other(format!("existing file refused: {why}")))?;
            f.set_len(0)?;
            Ok(f)
        });
    let mut out = match out {
        Ok(f) => std::io::BufWriter::new(f),
        Err(e) => {
            eprintln!(
                "ozaki run: cannot write {}: {e}; the per-process traces are kept",
                file.display()
            );
            return;
        }
    };
    for (pid, part) in found {
        // SAFETY: kill with signal 0 only checks that the process exists.
        if unsafe { libc::kill(pid as libc::pid_t, 0) } == 0 {
            eprintln!(
                "ozaki run: process {pid} is still running; its trace {} may be incomplete and is kept apart",
                part.display()
            );
            continue;
        }
        let copied = std::fs::File::open(&part).and_then(|mut f| {
            let n = std::io::copy(&mut f, &mut out)?;
            // A part cut short by a kill: end its last line so the next header starts one.
            if n > 0 {
                use std::io::{Read as _, Seek as _};
                let mut last = [0u8; 1];
                f.seek(std::io::SeekFrom::End(-1))?;
                f.read_exact(&mut last)?;
                if last[0] != b'\n' {
                    out.write_all(b"\n")?;
                }
            }
            Ok(())
        });
        match copied {
            Ok(()) => {
                let _ = std::fs::remove_file(&part);
            }
            Err(e) => eprintln!("ozaki run: cannot read {}: {e}; kept", part.display()),
        }
    }
    if let Err(e) = out.flush() {
        eprintln!("ozaki run: cannot write {}: {e}", file.display());
    }
}

/// A fresh directory only this user can enter, so nobody can plant files where the trace goes.
fn private_temp_dir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for attempt in 0..100u32 {
        let dir = base.join(format!(
            "ozaki-run-{}-{}",
            std::process::id(),
            nanos.wrapping_add(attempt)
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
        }
    }
    anyhow::bail!("cannot create a temporary directory in {}", base.display())
}

/// The pid of the running program, for the signal handler (0 when none).
static CHILD_PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Ctrl-C and Ctrl-\ already reach the program through the terminal's process group;
    // termination requests sent to ozaki alone are passed on. Either way ozaki stays alive
    // to print the summary once the program is gone (as `time` does).
    if sig == libc::SIGTERM || sig == libc::SIGHUP {
        let pid = CHILD_PID.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe and takes plain integers.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Installs [`on_signal`] for SIGINT, SIGQUIT, SIGTERM and SIGHUP. A handler (not SIG_IGN)
/// is used because handlers are reset by exec, so the program sees default dispositions.
fn forward_signals_while_waiting() {
    for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a valid handler and an empty mask is a valid
        // argument; the handler only reads an atomic and calls kill.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Trace files the run produced: the files in the pattern's directory whose names match it
/// (see [`name_matches`]), modified since `since`.
fn trace_files(pattern: &Path, since: std::time::SystemTime) -> Vec<PathBuf> {
    // Inside an MPI rank (`mpirun -n 4 ozaki run -- ...`), only this rank's own files.
    let text = launcher::with_own_rank(&pattern.to_string_lossy());
    let (dir, name) = match text.rfind('/') {
        Some(i) => (
            PathBuf::from(if i == 0 { "/" } else { &text[..i] }),
            text[i + 1..].to_string(),
        ),
        None => (PathBuf::from("."), text.clone()),
    };
    let host = host_name();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| name_matches(&name, &host, &e.file_name().to_string_lossy()))
        .filter(|e| {
            e.metadata()
                .is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| t >= since))
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Whether `name` is a file the shim writes for the trace template `pattern`: `%p` and `%r`
/// stand for a decimal number (pid, MPI rank), `%h` for the host name, `%%` for `%`. A
/// template without `%p` also matches `NAME.<pid>`, the file of a forked child
/// (`trace_sink.rs`, "What survives what").
fn name_matches(pattern: &str, host: &str, name: &str) -> bool {
    /// A template piece: literal text, or a run of decimal digits.
    enum Tok {
        Lit(String),
        Number,
    }
    let mut toks = vec![Tok::Lit(String::new())];
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        let piece = match (c, chars.peek()) {
            ('%', Some('p' | 'r')) => None,
            ('%', Some('h')) => Some(host.to_string()),
            ('%', Some('%')) => Some("%".to_string()),
            _ => {
                toks.push(Tok::Lit(c.to_string()));
                continue;
            }
        };
        chars.next();
        toks.push(piece.map_or(Tok::Number, Tok::Lit));
    }
    fn matches(toks: &[Tok], mut rest: &str) -> bool {
        for t in toks {
            match t {
                Tok::Lit(l) => match rest.strip_prefix(l.as_str()) {
                    Some(r) => rest = r,
                    None => return false,
                },
                Tok::Number => {
                    let digits =
                        rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                    if digits == 0 {
                        return false;
                    }
                    rest = &rest[digits..];
                }
            }
        }
        rest.is_empty()
    }
    if matches(&toks, name) {
        return true;
    }
    // Without %p a forked child writes the template plus ".<pid>".
    !pattern.contains("%p") && {
        toks.push(Tok::Lit(".".into()));
        toks.push(Tok::Number);
        matches(&toks, name)
    }
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is what we pass.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The program `ozaki run` started, once it has exited.
struct Finished<'a> {
    /// The command as given (`python3`, `./solver`).
    program: &'a std::ffi::OsStr,
    /// Its exit status (128 + N after a death by signal N).
    code: i32,
}

/// What to say when no trace file appeared. A trace in the private temporary folder is not
/// named (it never existed, and the folder is gone by the time the user reads this); a
/// program that failed is the likely reason, and a Python program the likely failure: a
/// `python3` on `PATH` without NumPy, whose calls then never reach any BLAS.
fn no_trace_message(pattern: &Path, keep: bool, run: &Finished<'_>) -> String {
    let mut m = String::from("ozaki run: no BLAS call was traced");
    if keep {
        m.push_str(&format!(" (no file matches {})", pattern.display()));
    }
    if run.code == 0 {
        m.push_str(
            ": the program made no dgemm/dsyrk call, or the shim could not create the trace \
             (see any message above)",
        );
    } else {
        m.push_str(&format!(
            ": the program exited with status {} before any dgemm/dsyrk call (see its own \
             messages above)",
            run.code
        ));
        let name = Path::new(run.program)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with("python") {
            m.push_str(&format!(
                ". If it could not import NumPy or SciPy, this {name} lacks them: check with \
                 `{0} -c 'import numpy'`, and use a Python that has them (Debian's is \
                 /usr/bin/python3 with python3-numpy; or a venv's bin/python)",
                run.program.to_string_lossy()
            ));
        }
    }
    m
}

/// Prints the summary of the run's traces to stderr; problems are reported, never fatal,
/// because the program's exit code is what the caller is waiting for.
fn print_summary(pattern: &Path, since: std::time::SystemTime, keep: bool, run: &Finished<'_>) {
    let stderr = std::io::stderr();
    let mut err = stderr.lock();
    use std::io::Write as _;
    // File times have coarse granularity on some file systems; allow a little slack.
    let since = since - std::time::Duration::from_secs(2);
    let files = trace_files(pattern, since);
    if files.is_empty() {
        let _ = writeln!(err, "{}", no_trace_message(pattern, keep, run));
        return;
    }
    let mut all = summary::Summary::default();
    for f in &files {
        if let Err(e) = all.add_path(f) {
            let _ = writeln!(err, "ozaki run: {e:#}");
        }
    }
    let _ = writeln!(err);
    let _ = all.write(&mut err, 10);
    if keep {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        let _ = writeln!(err, "\ntrace: {}", names.join(" "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_names_match_their_template() {
        let m = |p: &str, n: &str| name_matches(p, "node7", n);
        assert!(m("trace-%p.jsonl", "trace-123.jsonl"));
        assert!(!m("trace-%p.jsonl", "trace-.jsonl"));
        assert!(!m("trace-%p.jsonl", "trace-12x.jsonl"));
        assert!(!m("trace-%p.jsonl", "trace-12.jsonl.tmp"));
        assert!(m("%p", "77"));
        assert!(m("a%pb%r", "a1b22"));
        assert!(!m("a%pb%p", "a1b"));
        assert!(m("t-%h-%p.jsonl", "t-node7-5.jsonl"));
        assert!(!m("t-%h-%p.jsonl", "t-node8-5.jsonl"));
        assert!(m("100%%-%p", "100%-5"));
        // Without %p: the file itself and forked children's FILE.<pid>.
        assert!(m("app.jsonl", "app.jsonl"));
        assert!(m("app.jsonl", "app.jsonl.4242"));
        assert!(!m("app.jsonl", "app.jsonl.x"));
        assert!(!m("app.jsonl", "app.json"));
    }
}
