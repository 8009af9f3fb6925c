//! What the client tests share: build the C/Fortran clients, run a program with and
//! without the shim, read its trace and compare it with what the program says it called.
//!
//! A client that needs a system package which is not installed skips with a visible
//! "skipped: ..." line; with `OZAKI_TEST_REQUIRE_ALL=1` (set by `scripts/test-all`, so in
//! CI) a missing package fails the test instead, so CI can never pass by skipping.
#![allow(dead_code)]

use ozaki_core::trace::{CallRecord, Layout, Routine, Trace};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `ozaki` binary cargo built for this test run. Only the tests of the `ozaki-cli`
/// package, which builds the binary, may call this: the shim's tests share this module but
/// have no such binary, so the name cannot be `env!` (their build would fail) and a call
/// from them panics with the reason.
#[allow(clippy::option_env_unwrap)]
pub fn ozaki_bin() -> PathBuf {
    PathBuf::from(
        option_env!("CARGO_BIN_EXE_ozaki").expect("only ozaki-cli's tests run the ozaki binary"),
    )
}

/// `target/<profile>/`: the test executable runs from its `deps/` folder.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/TEST")
        .to_path_buf()
}

/// The shim library of this build. `cargo test` rebuilds the cdylib in `target/<profile>/deps/`
/// but only `cargo build` copies it up to `target/<profile>/`, so the newer of the two
/// is the one that matches the code under test.
pub fn shim_lib() -> PathBuf {
    let lib = newest_build("libozaki_shim.so");
    assert!(lib.is_file(), "{} not built", lib.display());
    lib
}

/// The audit library (`ozaki-audit`) of this build, when the workspace built it (`cargo
/// build --workspace`, as `scripts/test-all` does; `cargo test -p ozaki-shim` alone does
/// not): the newer of its two copies, as for [`shim_lib`].
pub fn audit_lib() -> Option<PathBuf> {
    Some(newest_build("libozaki_audit.so")).filter(|p| p.is_file())
}

/// The newer of `target/<profile>/NAME` and `target/<profile>/deps/NAME` (see [`shim_lib`]).
fn newest_build(name: &str) -> PathBuf {
    let up = profile_dir().join(name);
    let deps = profile_dir().join("deps").join(name);
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (mtime(&up), mtime(&deps)) {
        (Some(a), Some(b)) if b > a => deps,
        (None, Some(_)) => deps,
        _ => up,
    }
}

/// Installs the `ozaki` binary and the shim (and the audit library, when built) into `dir/bin`
/// and `dir/lib`, the layout of an installed prefix, and returns the binary: `ozaki run` must
/// find `../lib/libozaki_shim.so`, and the copy is sure to be the library under test (see
/// [`shim_lib`]).
pub fn install_ozaki(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    let bin = dir.join("bin/ozaki");
    std::fs::copy(ozaki_bin(), &bin).unwrap();
    std::fs::copy(shim_lib(), dir.join("lib/libozaki_shim.so")).unwrap();
    if let Some(audit) = audit_lib() {
        std::fs::copy(audit, dir.join("lib/libozaki_audit.so")).unwrap();
    }
    bin
}

/// A fresh, empty directory for one test.
pub fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("ozaki-clients")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether a prerequisite is there; prints a visible skip line when it is not, and panics
/// instead under `OZAKI_TEST_REQUIRE_ALL=1`.
pub fn require(ok: bool, what: &str, install: &str) -> bool {
    if ok {
        return true;
    }
    let msg = format!("{what} is not available (install: {install})");
    if std::env::var("OZAKI_TEST_REQUIRE_ALL").is_ok_and(|v| v == "1") {
        panic!("{msg}; OZAKI_TEST_REQUIRE_ALL=1 forbids skipping");
    }
    // Written straight to stderr, not with eprintln!, which the test harness captures:
    // a skip has to be visible in a passing run.
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "skipped: {msg}");
    false
}

/// Whether `prog --version` (or the given probe arguments) runs.
pub fn runs(prog: &str, args: &[&str]) -> bool {
    Command::new(prog)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The reference BLAS development files (`-lblas`).
pub fn have_blas_dev() -> bool {
    Path::new("/usr/lib/x86_64-linux-gnu/libblas.so").exists()
        || Path::new("/usr/lib/libblas.so").exists()
}

/// Compiles a C client from `tests/c/NAME.c` into `dir`; `None` (after a visible skip) when
/// the compiler or the reference BLAS is missing.
pub fn build_c(dir: &Path, name: &str, libs: &[&str]) -> Option<PathBuf> {
    if !require(
        runs("cc", &["--version"]),
        "a C compiler (cc)",
        "apt-get install gcc",
    ) || !require(
        have_blas_dev(),
        "the reference BLAS (-lblas)",
        "apt-get install libblas-dev",
    ) {
        return None;
    }
    let src = repo_root().join("tests/c").join(format!("{name}.c"));
    let out = dir.join(name);
    let mut cmd = Command::new("cc");
    cmd.args(["-O2", "-Wall", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .args(libs)
        .args(["-lm", "-ldl"]);
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "compiling {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(out)
}

/// Runs `cmd` and returns its output, failing the test with its stderr if it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed ({}):\nstdout (tail): {}\nstderr: {}",
        o.status,
        tail(&String::from_utf8_lossy(&o.stdout), 2000),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Directories of Debian's reference BLAS and LAPACK. Installing an OpenBLAS package makes
/// it the system-wide `libblas.so.3` (update-alternatives); the clients are pinned to the
/// reference per process instead, so the expected behaviour (reference CBLAS calling
/// `dgemm_`, reference error reporting) does not depend on what else is installed.
pub const REFERENCE_BLAS_PATH: &str =
    "/usr/lib/x86_64-linux-gnu/blas:/usr/lib/x86_64-linux-gnu/lapack";

/// The vendor BLAS libraries the vendor-matrix clients run over: the reference BLAS, and
/// Debian's OpenBLAS (a visible skip without it, a failure in CI).
pub fn vendors() -> Vec<(&'static str, &'static str)> {
    let mut v = vec![("reference", "/usr/lib/x86_64-linux-gnu/blas")];
    let openblas = "/usr/lib/x86_64-linux-gnu/openblas-pthread";
    if require(
        Path::new(openblas).join("libblas.so.3").exists(),
        "Debian's OpenBLAS",
        "apt-get install libopenblas0-pthread",
    ) {
        v.push(("openblas", openblas));
    }
    v
}

/// `cmd` with `vendor`'s folder as the only library path (so its libblas.so.3 is the BLAS).
pub fn over(mut cmd: Command, vendor: &str) -> Command {
    cmd.env("LD_LIBRARY_PATH", vendor)
        .env("OPENBLAS_NUM_THREADS", "1");
    cmd
}

/// A command without the shim, with every OZAKI_* and LD_PRELOAD variable removed, and the
/// reference BLAS first on the library path.
pub fn plain(prog: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(prog);
    cmd.env_remove("LD_PRELOAD");
    let mut path = std::ffi::OsString::from(REFERENCE_BLAS_PATH);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    cmd.env("LD_LIBRARY_PATH", path);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OZAKI_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// The same command with the shim preloaded and tracing to `trace` (when given).
pub fn shimmed(prog: impl AsRef<std::ffi::OsStr>, trace: Option<&Path>) -> Command {
    let mut cmd = plain(prog);
    cmd.env("LD_PRELOAD", shim_lib());
    if let Some(t) = trace {
        cmd.env("OZAKI_TRACE", t);
    }
    cmd
}

/// Asserts two outputs are byte-identical, showing the first differing line.
pub fn assert_same_output(what: &str, without: &[u8], with: &[u8]) {
    if without == with {
        return;
    }
    let (a, b) = (
        String::from_utf8_lossy(without),
        String::from_utf8_lossy(with),
    );
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let i = la
        .iter()
        .zip(&lb)
        .position(|(x, y)| x != y)
        .unwrap_or(la.len().min(lb.len()));
    panic!(
        "{what}: output differs with the shim at line {} ({} vs {} lines):\n  without: {}\n  with:    {}",
        i + 1,
        la.len(),
        lb.len(),
        la.get(i).unwrap_or(&"<end>"),
        lb.get(i).unwrap_or(&"<end>")
    );
}

/// Reads a whole trace, failing the test on any malformed line.
pub fn read_trace(path: &Path) -> Trace {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("trace {}: {e}", path.display()));
    Trace::read(std::io::BufReader::new(f))
        .unwrap_or_else(|e| panic!("trace {}: {e}", path.display()))
}

/// Call records in `seq` order, after checking that `seq` runs 0, 1, 2, ... with no gap.
pub fn calls_in_order(trace: &Trace) -> Vec<&CallRecord> {
    let mut calls: Vec<&CallRecord> = trace.calls.iter().collect();
    calls.sort_by_key(|c| c.seq);
    for (i, c) in calls.iter().enumerate() {
        assert_eq!(
            c.seq, i as u64,
            "trace seq numbers have a gap or a duplicate near {i}"
        );
    }
    calls
}

/// One `expect` line of a client: the record the shim must write for one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    pub sym: String,
    pub routine: String,
    pub layout: String,
    pub op1: String,
    pub op2: String,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub lda: u64,
    pub ldb: u64,
    pub ldc: u64,
    pub alpha: f64,
    pub beta: f64,
    pub ilp64: bool,
}

/// Parses the `expect ...` lines of a client's stdout (format in tests/c/common.h).
pub fn expectations(stdout: &str) -> Vec<Expect> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("expect "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 14, "bad expect line: {l}");
            let num = |i: usize| {
                f[i].parse::<u64>()
                    .unwrap_or_else(|_| panic!("bad number in {l}"))
            };
            let real = |i: usize| {
                f[i].parse::<f64>()
                    .unwrap_or_else(|_| panic!("bad real in {l}"))
            };
            Expect {
                sym: f[0].into(),
                routine: f[1].into(),
                layout: f[2].into(),
                op1: f[3].into(),
                op2: f[4].into(),
                m: num(5),
                n: num(6),
                k: num(7),
                lda: num(8),
                ldb: num(9),
                ldc: num(10),
                alpha: real(11),
                beta: real(12),
                ilp64: f[13] == "1",
            }
        })
        .collect()
}

/// What a record says, in the same form as an [`Expect`].
pub fn observed(c: &CallRecord) -> Expect {
    let flag = |f: &Option<String>| f.as_deref().unwrap_or("?").to_ascii_uppercase();
    let (op1, op2, routine) = match c.routine {
        Routine::Dgemm => (flag(&c.transa), flag(&c.transb), "dgemm"),
        Routine::Dsyrk => (flag(&c.uplo), flag(&c.trans), "dsyrk"),
    };
    Expect {
        sym: c.sym.clone(),
        routine: routine.into(),
        layout: match c.layout {
            Layout::Col => "col".into(),
            Layout::Row => "row".into(),
        },
        op1,
        op2,
        m: c.m,
        n: c.n,
        k: c.k,
        lda: c.lda,
        ldb: c.ldb,
        ldc: c.ldc,
        alpha: c.alpha,
        beta: c.beta,
        ilp64: c.ilp64,
    }
}

/// Asserts the trace holds exactly the expected calls, in order (flags compared without
/// regard to case, since Fortran accepts `n` for `N`).
pub fn assert_trace_matches(what: &str, trace: &Trace, expected: &[Expect]) {
    let calls = calls_in_order(trace);
    assert_eq!(
        calls.len(),
        expected.len(),
        "{what}: {} records for {} calls",
        calls.len(),
        expected.len()
    );
    for (i, (c, e)) in calls.iter().zip(expected).enumerate() {
        let mut e = e.clone();
        e.op1 = e.op1.to_ascii_uppercase();
        e.op2 = e.op2.to_ascii_uppercase();
        let o = observed(c);
        assert_eq!(
            o, e,
            "{what}: record {i} (seq {}) does not describe the call",
            c.seq
        );
    }
}

/// Runs a client without and with the shim (tracing to `dir/trace.jsonl`), asserts the
/// outputs are identical and returns (stdout, trace).
pub fn run_both(what: &str, dir: &Path, prog: &Path, args: &[&str]) -> (String, Trace) {
    let without = run_ok(plain(prog).args(args).current_dir(dir));
    let trace_path = dir.join("trace.jsonl");
    let with = run_ok(shimmed(prog, Some(&trace_path)).args(args).current_dir(dir));
    assert_same_output(what, &without.stdout, &with.stdout);
    let trace = read_trace(&trace_path);
    assert_eq!(trace.headers.len(), 1, "{what}: one header per trace file");
    (String::from_utf8(with.stdout).unwrap(), trace)
}

/// The lines a reference Level 3 tester's summary prints for `routines` (as the tester pads
/// them, e.g. `"DGEMM "`) when they pass: the error-exit tests (when `error_exits`) and the
/// computational tests, once per layout for the CBLAS tester (`cblas`).
pub fn tester_pass_lines(routines: &[&str], cblas: bool, error_exits: bool) -> Vec<String> {
    let mut lines = Vec::new();
    for routine in routines {
        if error_exits {
            lines.push(format!(" {routine} PASSED THE TESTS OF ERROR-EXITS"));
        }
        if cblas {
            for layout in ["COLUMN-MAJOR", "ROW-MAJOR   "] {
                lines.push(format!(
                    " {routine} PASSED THE {layout} COMPUTATIONAL TESTS"
                ));
            }
        } else {
            lines.push(format!(" {routine} PASSED THE COMPUTATIONAL TESTS"));
        }
    }
    lines
}

/// The tester's summary shows every line of `expected` and no failed or suspect result.
pub fn assert_tester_passed(summary: &str, expected: &[String]) {
    for line in expected {
        assert!(
            summary.contains(line.as_str()),
            "{line:?} missing:\n{summary}"
        );
    }
    assert!(
        !summary.contains("FAIL") && !summary.contains("SUSPECT"),
        "{summary}"
    );
}

/// A property-test runner with this run's seed: `OZAKI_TEST_SEED=N` replays a run, otherwise
/// the seed comes from the clock. Returns the seed, for the failure message.
pub fn seeded_runner(cases: u32) -> (u64, proptest::test_runner::TestRunner) {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let seed = std::env::var("OZAKI_TEST_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        let word = seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    (
        seed,
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)),
    )
}

/// The first line of `text` that starts with `prefix`, without it, and the numbers among its
/// whitespace-separated words: how the C programs and stand-ins of these tests report.
pub fn numbers_after<'a>(text: &'a str, prefix: &str) -> Option<(&'a str, Vec<i64>)> {
    let line = text.lines().find_map(|l| l.strip_prefix(prefix))?;
    let numbers = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    Some((line, numbers))
}

/// Compiles `tests/c/<src>` with `compiler` into `dir/<out>`; `None` after a visible skip when
/// the compiler is missing.
pub fn compile(dir: &Path, compiler: &str, src: &str, out: &str, args: &[&str]) -> Option<PathBuf> {
    if !require(
        runs(compiler, &["--version"]),
        &format!("the compiler {compiler}"),
        "apt-get install build-essential",
    ) || !require(
        have_blas_dev(),
        "the reference BLAS (-lblas)",
        "apt-get install libblas-dev",
    ) {
        return None;
    }
    let c_dir = repo_root().join("tests/c");
    let target = dir.join(out);
    let o = Command::new(compiler)
        .args(["-O2", "-Wall", "-pthread", "-I"])
        .arg(&c_dir)
        .arg("-o")
        .arg(&target)
        .arg(c_dir.join(src))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "compiling {src}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(target)
}

/// Builds `tests/c/<src>` as a shared library `dir/<out>`.
pub fn shared_lib(dir: &Path, src: &str, out: &str, libs: &[&str]) -> Option<PathBuf> {
    let mut args = vec!["-shared", "-fPIC"];
    args.extend_from_slice(libs);
    compile(dir, "cc", src, out, &args)
}
