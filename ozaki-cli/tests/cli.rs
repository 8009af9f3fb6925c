//! `ozaki run` and `ozaki summary` as a user runs them: the program's output and
//! exit status pass through untouched, the summary lands on stderr, and bad input gives a
//! message with file and line and exit status 2, never a panic.

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use common::*;
use std::process::Command;

/// `ozaki` from an installed-prefix copy (bin/ + lib/), made once per test binary.
fn ozaki() -> Command {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let bin = BIN.get_or_init(|| install_ozaki(&work_dir("cli-prefix")));
    let mut cmd = plain(bin);
    cmd.env_remove("RUST_BACKTRACE");
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn run_passes_exit_status_and_signals_through() {
    let o = ozaki()
        .args(["run", "--", "sh", "-c", "echo out; echo err >&2; exit 7"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7));
    assert_eq!(text(&o.stdout), "out\n", "the program's stdout stays clean");
    assert!(text(&o.stderr).starts_with("err\n"), "{}", text(&o.stderr));
    let o = ozaki()
        .args(["run", "--", "sh", "-c", "kill -TERM $$"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(128 + 15),
        "death by SIGTERM becomes 143"
    );
    let o = ozaki()
        .args(["run", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("cannot start"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn run_rejects_an_unknown_route_before_starting_anything() {
    let o = ozaki()
        .args(["run", "--route", "gpu", "--", "sh", "-c", "echo started"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(
        text(&o.stderr).contains("unknown route \"gpu\""),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn run_preloads_the_shim_and_summarises_to_stderr() {
    let dir = work_dir("cli-run");
    let Some(prog) = build_c(&dir, "combos", &["-lblas"]) else {
        return;
    };
    let direct = run_ok(plain(&prog).arg("fortran"));
    let trace = dir.join("kept-%p.jsonl");
    let o = run_ok(
        ozaki()
            .arg("run")
            .arg("--trace")
            .arg(&trace)
            .arg("--")
            .arg(&prog)
            .arg("fortran"),
    );
    assert_same_output("combos under ozaki run", &direct.stdout, &o.stdout);
    let err = text(&o.stderr);
    assert!(
        err.contains("ozaki summary: 1 trace file(s), 1 process(es), 1944 call(s)"),
        "{err}"
    );
    for sym in ["dgemm_", "dsyrk_"] {
        assert!(
            err.lines().any(|l| l.trim_start().starts_with(sym)),
            "no {sym} row:\n{err}"
        );
    }
    assert!(
        err.contains("median") && err.contains("Top shapes"),
        "{err}"
    );
    let kept: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("kept-"))
        .collect();
    assert_eq!(
        kept.len(),
        1,
        "--trace keeps one file per process: {kept:?}"
    );
    assert!(
        err.contains(&kept[0]),
        "the summary names the kept trace:\n{err}"
    );

    // `ozaki summary` on the kept file prints the same numbers to stdout.
    let s = run_ok(ozaki().arg("summary").arg(dir.join(&kept[0])));
    let out = text(&s.stdout);
    assert!(out.contains("1944 call(s)"), "{out}");
    let dgemm = out
        .lines()
        .find(|l| l.trim_start().starts_with("dgemm "))
        .unwrap();
    assert_eq!(dgemm.split_whitespace().nth(1), Some("1296"), "{out}");
}

#[test]
fn run_without_trace_flag_leaves_no_files() {
    let dir = work_dir("cli-temp");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let o = run_ok(
        ozaki()
            .env("TMPDIR", &tmp)
            .args(["run", "--"])
            .arg(&prog)
            .args(["2", "5"]),
    );
    assert!(
        text(&o.stderr).contains("10 call(s)"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "the temporary trace was not removed"
    );
}

#[test]
fn summary_errors_name_file_and_line() {
    let dir = work_dir("cli-summary-errors");
    let missing = dir.join("missing.jsonl");
    let o = ozaki().arg("summary").arg(&missing).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("{}: cannot read trace", missing.display())),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    // Not a trace at all: an error naming the first bad line.
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "[1,2]\nmore\n").unwrap();
    let o = ozaki().arg("summary").arg(&bad).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains(&format!("{}:1: ", bad.display())), "{err}");

    // A trace with torn lines: summarised, each bad line named in a note.
    let torn = dir.join("torn.jsonl");
    std::fs::write(&torn, "{\"type\":\"header\",\"pid\":1,\"exe\":\"x\",\"shim_version\":\"0\",\"start_unix_s\":0}\n[1,2]\nmore\n").unwrap();
    let o = ozaki().arg("summary").arg(&torn).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for line in [2, 3] {
        assert!(
            out.contains(&format!(
                "{}:{line}: torn or invalid line skipped",
                torn.display()
            )),
            "{out}"
        );
    }

    let o = ozaki().arg("summary").output().unwrap();
    assert_eq!(o.status.code(), Some(2), "no file given is a usage error");
}

#[test]
fn help_explains_the_commands() {
    let o = run_ok(ozaki().arg("--help"));
    let out = text(&o.stdout);
    assert!(out.contains("run") && out.contains("summary"), "{out}");
    let o = run_ok(ozaki().args(["run", "--help"]));
    let out = text(&o.stdout);
    for word in ["--trace", "--route", "%p", "exit code"] {
        assert!(
            out.contains(word),
            "`ozaki run --help` lacks {word}:\n{out}"
        );
    }
}

#[test]
fn every_command_answers_help_with_success() {
    let o = run_ok(ozaki().arg("--help"));
    let commands: Vec<String> = text(&o.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(commands.len() >= 8, "too few commands listed: {commands:?}");
    for cmd in &commands {
        let o = ozaki().args([cmd.as_str(), "--help"]).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "`ozaki {cmd} --help` failed");
        assert!(!o.stdout.is_empty(), "`ozaki {cmd} --help` printed nothing");
    }
    // `ozaki help run` is `ozaki run --help`, not the top-level help.
    let o = run_ok(ozaki().args(["help", "run"]));
    assert!(text(&o.stdout).contains("--trace"), "{}", text(&o.stdout));
}

#[test]
fn run_summarises_every_process_of_a_forking_program() {
    let dir = work_dir("cli-fork");
    let Some(prog) = build_c(&dir, "fork", &["-lblas"]) else {
        return;
    };
    // No %p in the name: the forked child writes app.jsonl.<pid> (shim/src/trace_sink.rs).
    let o = run_ok(
        ozaki()
            .arg("run")
            .arg("--trace")
            .arg(dir.join("app.jsonl"))
            .arg("--")
            .arg(&prog),
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("1 trace file(s), 2 process(es), 6 call(s)"),
        "{err}"
    );
    let joined = read_trace(&dir.join("app.jsonl"));
    assert_eq!((joined.headers.len(), joined.calls.len()), (2, 6));
    assert!(
        err.contains("forked from"),
        "the child's header names its parent:\n{err}"
    );
}

/// `ozaki calibrate --from-trace`: the measured times of a trace's calls fold into the
/// profile's corrections, so the next run prices that shape as it ran.
#[test]
fn calibrate_from_trace_folds_measured_calls_into_the_profile() {
    let dir = work_dir("calibrate-from-trace");
    let trace = dir.join("t.jsonl");
    let call = |seq: u32| {
        format!(
            r#"{{"type":"call","seq":{seq},"t_ns":{},"dur_ns":8000000,"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","m":1953,"n":123,"k":1953,"lda":1953,"ldb":1953,"ldc":1953,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor","engine":{{"predicted_s":{{"vendor":0.002,"gpu-native":0.0025}},"reason":"r","concurrent":1}}}}"#,
            seq as u64 * 10_000_000
        )
    };
    let header = r#"{"type":"header","schema":3,"pid":1,"exe":"x","shim_version":"0","start_unix_s":0.0,"cpus":16,"blas_threads":16}"#;
    std::fs::write(&trace, format!("{header}\n{}\n{}\n", call(0), call(1))).unwrap();
    let out = dir.join("profile.json");
    let o = Command::new(ozaki_bin())
        .current_dir(repo_root())
        .args(["calibrate", "--from-trace"])
        .arg(&trace)
        .args(["--base", "profiles/h200.json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.contains("vendor: 2 measured calls folded into 1 correction points"),
        "{stdout}"
    );
    let before =
        ozaki_core::engine::profile::Profile::load(&repo_root().join("profiles/h200.json"))
            .unwrap();
    let after = ozaki_core::engine::profile::Profile::load(&out).unwrap();
    let f = |p: &ozaki_core::engine::profile::Profile| {
        p.corrections
            .get("vendor")
            .map_or(1.0, |c| c.factor(1953, 123, 1953))
    };
    assert!(
        f(&after) / f(&before) > 3.0,
        "{} -> {}",
        f(&before),
        f(&after)
    );
}
#[test]
fn run_with_a_relative_trace_keeps_every_process_of_a_program_that_changes_directory() {
    let dir = work_dir("cli-relative");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    // Two processes, one after the other, both after a `cd`: each must land in the file the
    // user named (relative to where `ozaki run` ran), neither truncating the other.
    let script = format!(
        "cd {}; {} 1 3; {} 2 2",
        elsewhere.display(),
        prog.display(),
        prog.display()
    );
    let o = run_ok(ozaki().current_dir(&dir).args([
        "run",
        "--trace",
        "rel.jsonl",
        "--",
        "sh",
        "-c",
        &script,
    ]));
    let err = text(&o.stderr);
    assert!(
        err.contains("1 trace file(s), 2 process(es), 7 call(s)"),
        "{err}"
    );
    let joined = read_trace(&dir.join("rel.jsonl"));
    assert_eq!((joined.headers.len(), joined.calls.len()), (2, 7));
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .chain(std::fs::read_dir(&elsewhere).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("rel.jsonl"))
        .collect();
    assert_eq!(
        left,
        ["rel.jsonl"],
        "parts left behind or written elsewhere"
    );
}

#[test]
fn run_says_the_trace_may_be_incomplete_when_the_program_is_killed() {
    let dir = work_dir("cli-killed");
    let Some(prog) = build_c(&dir, "crash", &["-lblas"]) else {
        return;
    };
    let o = ozaki()
        .arg("run")
        .arg("--trace")
        .arg(dir.join("killed.jsonl"))
        .arg("--")
        .arg(&prog)
        .arg("5")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(128 + 9));
    let err = text(&o.stderr);
    assert!(
        err.contains("killed by signal 9") && err.contains("may be incomplete"),
        "{err}"
    );
}

#[test]
fn ab_report_and_report_skip_a_record_with_a_negative_difference() {
    let dir = work_dir("cli-negative-ab");
    let header =
        r#"{"type":"header","schema":2,"pid":1,"exe":"x","shim_version":"0","start_unix_s":0}"#;
    let call = |seq: u32, diff: &str| {
        format!(
            r#"{{"type":"call","seq":{seq},"t_ns":0,"dur_ns":10,"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"N","transb":"N","m":8,"n":8,"k":8,"lda":8,"ldb":8,"ldc":8,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"builtin","ab":{{"max_rel_comp":{diff},"rel_norm":{diff},"vendor_ns":5,"route_ns":10,"kept":"route","rel_scaled":{diff}}}}}"#
        )
    };
    let trace = dir.join("ab.jsonl");
    std::fs::write(
        &trace,
        format!("{header}\n{}\n{}\n", call(0, "-1e-16"), call(1, "1e-17")),
    )
    .unwrap();
    let o = ozaki().arg("ab-report").arg(&trace).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "{}:2: torn or invalid line skipped",
            trace.display()
        )) && err.contains("ab.max_rel_comp"),
        "{err}"
    );
    let o = ozaki()
        .arg("report")
        .arg("--no-predict")
        .arg(&trace)
        .arg("--out")
        .arg(dir.join("page"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

#[test]
fn summary_streams_a_large_trace_in_a_fraction_of_its_size() {
    let _alone = timed_alone();
    let dir = work_dir("cli-large");
    let path = dir.join("large.jsonl");
    let header =
        r#"{"type":"header","schema":2,"pid":1,"exe":"x","shim_version":"0","start_unix_s":0}"#;
    // Written line by line: a child started with vfork (as `Command` does) inherits the
    // resident peak of this process, so it must stay small.
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(out, "{header}").unwrap();
    let mut seq = 0u64;
    let mut size = header.len() + 1;
    while size < 60 << 20 {
        // A few hundred distinct shapes, as in real traces (the summary keeps one row each).
        let (m, n, k) = (1 + seq % 97, 1 + seq % 97, 1 + seq % 5);
        let line = format!(
            r#"{{"type":"call","seq":{seq},"t_ns":{seq},"dur_ns":100,"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"N","transb":"T","m":{m},"n":{n},"k":{k},"lda":{m},"ldb":{n},"ldc":{m},"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}}"#
        );
        writeln!(out, "{line}").unwrap();
        size += line.len() + 1;
        seq += 1;
    }
    out.flush().unwrap();
    drop(out);
    // The child's data segment (heap, anonymous and private writable mappings) is capped at
    // half the trace's size: a summary that held the trace in memory fails to allocate. A
    // limit, not the child's measured peak: a child that `Command` starts with vfork
    // inherits the resident peak of this test process, however other tests left it.
    let limit_kib = size / 2 / 1024;
    let o = plain("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -d {limit_kib} && exec \"$0\" summary \"$1\""
        ))
        .arg(ozaki_bin())
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "ozaki summary of a {} MiB trace of {seq} calls within {} MiB of data: {}",
        size >> 20,
        limit_kib >> 10,
        text(&o.stderr)
    );
}

#[test]
fn explain_refuses_a_transpose_letter_blas_does_not_know() {
    for flag in ["--transa", "--transb"] {
        let o = ozaki()
            .args(["explain", "64", "64", "64", flag, "X"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flag} X: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("not a transpose letter"),
            "{flag} X: {}",
            text(&o.stderr)
        );
        assert!(o.stdout.is_empty(), "nothing priced for {flag} X");
    }
    // The letters BLAS accepts, in either case, still price the call.
    for letter in ["N", "t", "C"] {
        let o = ozaki()
            .args(["explain", "64", "64", "64", "--transa", letter, "--json"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{letter}: {}", text(&o.stderr));
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            json["shape"]["transa"],
            serde_json::Value::Bool(letter != "N"),
            "{letter}: {json}"
        );
    }
}

/// `ozaki explain ARGS --json` with the built-in H200 profile, run from the repository root:
/// its JSON.
fn explain_json(args: &[&str]) -> serde_json::Value {
    let o = ozaki()
        .current_dir(repo_root())
        .arg("explain")
        .args(args)
        .args(["--json", "--profile", "profiles/h200.json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `ozaki explain --ldc` prices a C with gaps the way `auto` does: LU's 4032 x 4032 x 64
/// trailing update with `ldc = 4096` is a C with gaps, and the GPU routes, which copy its
/// rows straight between the caller's memory and pinned staging, price it exactly as the
/// same call with C contiguous, term by term.
#[test]
fn explain_prices_a_c_with_gaps_as_a_contiguous_c_on_the_gpu_routes() {
    let routes = |extra: &[&str]| {
        let json = explain_json(&[&["4032", "4032", "64", "--beta"], extra].concat());
        let terms = |route: &str| {
            json["routes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["route"] == route)
                .map(|r| (r["seconds"].clone(), r["terms"].clone()))
        };
        (
            json["shape"]["c_gaps"].clone(),
            terms("gpu-native"),
            terms("gpu-ozaki"),
        )
    };
    let (gaps, native, ozaki) = routes(&["--ldc", "4096"]);
    assert_eq!(gaps, serde_json::Value::Bool(true));
    let (flat, native_flat, ozaki_flat) = routes(&["--ldc", "4032"]);
    assert_eq!(flat, serde_json::Value::Bool(false));
    let native = native.expect("gpu-native priced");
    let names: Vec<&str> = native
        .1
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"h2d") && names.contains(&"d2h"),
        "{names:?}"
    );
    assert_eq!(Some(native), native_flat);
    assert_eq!(ozaki, ozaki_flat);
}

/// `ozaki explain` prices GPU Ozaki at the count `auto` prices: the accuracy rule's for
/// normal data at the call's k, 14 moduli at k = 4096 and 15 at k = 8192 (a fixed 14 priced
/// 8192³ one modulus cheap, and so faster than the emulation the GPU then ran); `--moduli`
/// still overrides it.
#[test]
fn explain_prices_the_moduli_count_auto_prices() {
    let moduli = |n: &str, extra: &[&str]| {
        explain_json(&[&[n, n, n, "--device-resident"], extra].concat())["moduli"].as_u64()
    };
    assert_eq!(moduli("4096", &[]), Some(14));
    assert_eq!(moduli("8192", &[]), Some(15));
    assert_eq!(moduli("8192", &["--moduli", "14"]), Some(14));
}

/// `ozaki explain` prices cuBLAS at an odd size with the slowdown the profile measured there
/// and says so in the term, where the emulation (padded to the tile edge) is not slowed: the
/// shipped H200 profile sends a device-resident 4095³ to the emulation, and prices 4096³'s
/// cuBLAS product without a factor.
#[test]
fn explain_prices_cublas_slower_at_odd_sizes() {
    let explained = |n: &str| explain_json(&[n, n, n, "--device-resident"]);
    let fp64_term = |json: &serde_json::Value| {
        json["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["route"] == "gpu-native")
            .and_then(|r| {
                r["terms"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["name"] == "fp64-gemm")
            })
            .expect("gpu-native's cuBLAS term")["how"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let odd = explained("4095");
    assert_eq!(odd["choice"], "gpu-ozaki", "{odd}");
    let how = fp64_term(&odd);
    assert!(how.contains("multiples of 1 only"), "{how}");
    let aligned = fp64_term(&explained("4096"));
    assert!(!aligned.contains("multiples of"), "{aligned}");
}

#[test]
fn run_of_a_program_that_fails_before_any_blas_call_says_so_without_naming_a_deleted_file() {
    // A script that stops where a python3 without NumPy stops: before any BLAS call.
    let dir = work_dir("cli-no-numpy");
    let fake = dir.join("python3");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'numpy'\" >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = ozaki()
        .args(["run", "--"])
        .arg(&fake)
        .args(["-c", "import numpy"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("exited with status 1"), "{err}");
    assert!(err.contains("import numpy"), "says how to check: {err}");
    assert!(
        !err.contains("%p") && !err.contains("trace-"),
        "the private trace, never written and already removed, is not named: {err}"
    );
    // A kept trace is named, as the user wrote it.
    let kept = dir.join("kept-%p.jsonl");
    let o = ozaki()
        .args(["run", "--trace"])
        .arg(&kept)
        .args(["--", "sh", "-c", "exit 0"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(
        err.contains("no file matches") && err.contains("kept-%p.jsonl"),
        "{err}"
    );
    assert!(err.contains("made no dgemm/dsyrk call"), "{err}");
}

/// Held by the tests that time or weigh something while they run (the calibrations' copies
/// and products, the summary's resident peak): one at a time, so that none runs beside
/// another's load on a small CI machine.
fn timed_alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `ozaki calibrate --cpu-only --quick` over the stand-in vendor built from
/// `tests/c/<source>`: the profile and the raw measurements it wrote, with its stderr;
/// `None` without a C compiler (said as a skip).
fn calibrate_stand_in(
    name: &str,
    source: &str,
) -> Option<(serde_json::Value, serde_json::Value, String)> {
    let dir = work_dir(name);
    if !require(
        runs("cc", &["--version"]),
        "a C compiler (cc)",
        "apt-get install gcc",
    ) {
        return None;
    }
    let _alone = timed_alone();
    let lib = dir.join("libstand_in_blas.so");
    let o = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-pthread", "-o"])
        .arg(&lib)
        .arg(repo_root().join("tests/c").join(source))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (out, meas) = (dir.join("cpu.json"), dir.join("cpu.measurements.json"));
    let o = Command::new(ozaki_bin())
        .args(["calibrate", "--cpu-only", "--quick", "--blas"])
        .arg(&lib)
        .arg("--out")
        .arg(&out)
        .arg("--measurements")
        .arg(&meas)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    Some((read(&out), read(&meas), text(&o.stderr)))
}

/// Runs [`calibrate_stand_in`] until `check` accepts what it measured, three calibrations
/// at most, and fails with every rejection: the calibration times copies and products
/// beside whatever else the machine runs (the other tests of this binary, on CI's 2 cores),
/// and a run that load disturbed is repeated, not taken for the fit's answer.
fn calibrated_within_three(
    name: &str,
    source: &str,
    check: impl Fn(&serde_json::Value, &serde_json::Value) -> Result<(), String>,
) {
    let mut failed = Vec::new();
    for _ in 0..3 {
        let Some((profile, m, err)) = calibrate_stand_in(name, source) else {
            return;
        };
        match check(&profile, &m) {
            Ok(()) => return,
            Err(why) => failed.push(format!("{why}\n{err}")),
        }
    }
    panic!("three calibrations:\n{}", failed.join("\n"));
}

/// `ozaki calibrate --cpu-only` measures what a call costs its caller while others run: with
/// a vendor that serialises concurrent calls behind one lock (as OpenBLAS's level-3 lock
/// does), two callers released together take twice as long per call in flight. Timing each
/// caller's median alone missed it: the lock let one caller make all its calls while the
/// other waited inside one long untimed first call, and the profile said concurrency cost
/// nothing. That vendor leaves nothing running after a call, so no wake is priced.
#[test]
fn calibrate_measures_a_vendor_that_serialises_concurrent_calls() {
    calibrated_within_three("calibrate-serial", "serial_blas.c", |profile, m| {
        let points = m["concurrency"].as_array().expect("concurrency measured");
        let two = points
            .iter()
            .find(|p| p["callers"] == 2)
            .expect("two callers measured");
        let slowdown = two["slowdown"].as_f64().unwrap();
        if !(1.7..2.4).contains(&slowdown) {
            return Err(format!(
                "two callers of a serialising vendor: {slowdown:.2}x alone, want about 2x"
            ));
        }
        if let Some(wake) = profile["cpu"].get("wake") {
            return Err(format!(
                "a vendor that leaves nothing running after a call has no wake: {wake}"
            ));
        }
        Ok(())
    });
}

/// `ozaki calibrate --cpu-only` measures the vendor's wake: a vendor whose threads spin for
/// 0.12 s after each call (as OpenBLAS's pool does for about 0.1 s) slows host copies made
/// in that window, and the profile says for how long and by how much, so the engine prices
/// GPU staging made there.
#[test]
fn calibrate_measures_how_long_a_vendor_keeps_the_host_busy_after_a_call() {
    calibrated_within_three("calibrate-spin", "spin_blas.c", |profile, m| {
        let points = m["wake"].as_array().expect("wake measured");
        assert!(points.len() >= 5, "{points:?}");
        let wake = &profile["cpu"]["wake"];
        let window = wake["window_s"].as_f64().unwrap_or(0.0);
        let slowdown = wake["copy_slowdown"].as_f64().unwrap_or(0.0);
        if (0.1..=0.3).contains(&window) && slowdown > 1.3 {
            Ok(())
        } else {
            Err(format!(
                "a pool spinning 0.12 s after each call: window {window} s, copies {slowdown:.2}x"
            ))
        }
    });
}

/// The child a calibration times the GPU's start with: without a usable GPU it says so and
/// exits with an error status, never a panic and never a made-up time.
#[test]
fn timing_a_gpu_start_without_a_gpu_is_an_error_not_a_time() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        println!(
            "skipped: timing_a_gpu_start_without_a_gpu_is_an_error_not_a_time: this machine has a GPU"
        );
        return;
    }
    let o = Command::new(ozaki_bin())
        .args(["calibrate", "--time-start"])
        .output()
        .unwrap();
    assert!(!o.status.success() && o.status.code() != Some(101), "{o:?}");
    assert!(o.stdout.is_empty(), "no time printed: {}", text(&o.stdout));
}

/// `var` as a program under `ozaki run` sees it (`unset` when it is not set), with each of
/// `env` set to its value or removed (`None`), and `var` itself removed unless `env` sets it.
fn seen_by_program(var: &str, env: &[(&str, Option<&str>)]) -> String {
    let mut c = ozaki();
    let echo = format!("echo \"${{{var}-unset}}\"");
    c.args(["run", "--no-summary", "--", "sh", "-c", &echo]);
    c.env_remove(var);
    for (k, v) in env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    text(&run_ok(&mut c).stdout).trim().to_string()
}

/// `ozaki run` gives the program the shim's spin timeout before it starts (an OpenBLAS the
/// program links initialises before the shim's constructor), keeps the user's own, and sets
/// none with `OZAKI_VENDOR_SPIN=keep`; `ozaki env` prints the same.
#[test]
fn run_sets_the_vendors_spin_before_the_program_starts() {
    let seen = |spin: Option<&str>, user: Option<&str>| {
        seen_by_program(
            "OPENBLAS_THREAD_TIMEOUT",
            &[
                ("OZAKI_VENDOR_SPIN", spin),
                ("OPENBLAS_THREAD_TIMEOUT", user),
            ],
        )
    };
    assert_eq!(seen(None, None), "22");
    assert_eq!(seen(Some("18"), None), "18");
    assert_eq!(seen(None, Some("26")), "26");
    assert_eq!(seen(Some("keep"), None), "unset");
    // `ozaki env` prints what `ozaki run` sets, for a launcher to pass on.
    let printed = |spin: Option<&str>| {
        let mut c = ozaki();
        c.args(["env"]).env_remove("OPENBLAS_THREAD_TIMEOUT");
        if let Some(s) = spin {
            c.env("OZAKI_VENDOR_SPIN", s);
        }
        text(&run_ok(&mut c).stdout)
    };
    assert!(printed(None).contains("\nOPENBLAS_THREAD_TIMEOUT=22\n"));
    assert!(!printed(Some("keep")).contains("OPENBLAS_THREAD_TIMEOUT"));
}

/// With `OZAKI_CUBLAS_AUDIT=1`, `ozaki run` gives the program `LD_AUDIT` with the audit library
/// beside the shim in front of the user's own, and `ozaki env` prints it; without it, neither
/// sets `LD_AUDIT`.
#[test]
fn run_loads_the_audit_library_when_asked() {
    let Some(_) = audit_lib() else {
        require(
            false,
            "libozaki_audit.so of this build",
            "cargo build --workspace (scripts/test-all does)",
        );
        return;
    };
    let seen = |asked: bool, user: Option<&str>| {
        seen_by_program(
            "LD_AUDIT",
            &[
                ("OZAKI_CUBLAS_AUDIT", asked.then_some("1")),
                ("LD_AUDIT", user),
            ],
        )
    };
    assert_eq!(seen(false, None), "unset");
    let own = seen(true, None);
    assert!(
        own.ends_with("/libozaki_audit.so") && !own.contains(':'),
        "{own}"
    );
    let both = seen(true, Some("/u/libaudit.so"));
    assert_eq!(both, format!("{own}:/u/libaudit.so"));
    let printed = |asked: bool| {
        let mut c = ozaki();
        c.args(["env"])
            .env_remove("LD_AUDIT")
            .env_remove("OZAKI_CUBLAS_AUDIT");
        if asked {
            c.env("OZAKI_CUBLAS_AUDIT", "1");
        }
        text(&run_ok(&mut c).stdout)
    };
    assert!(
        printed(true).contains(&format!("\nLD_AUDIT={own}\n")),
        "{}",
        printed(true)
    );
    assert!(!printed(false).contains("LD_AUDIT"));
}
