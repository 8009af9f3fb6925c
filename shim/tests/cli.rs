//! `ozaki run` and `ozaki summary` as a user runs them (issue #2): the program's output and
//! exit status pass through untouched, the summary lands on stderr, and bad input gives a
//! message with file and line and exit status 2, never a panic.

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
