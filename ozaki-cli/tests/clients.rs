//! Real C and Fortran programs under the shim: results bit-identical to the run
//! without the shim, and a trace that holds exactly one correct record per call.
//!
//! The clients live in `tests/c/` and `tests/fortran/`; each prints a hash of every result
//! and an `expect` line per call (format in `tests/c/common.h`). Also here: the reference
//! BLAS Level-3 testers from Debian's `libblas-test`, error exits included.

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use common::*;
use ozaki_core::trace::Routine;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[test]
fn fortran_abi_every_transpose_uplo_and_edge_size() {
    let dir = work_dir("combos-fortran");
    let Some(prog) = build_c(&dir, "combos", &["-lblas"]) else {
        return;
    };
    let (out, trace) = run_both("combos fortran", &dir, &prog, &["fortran"]);
    let expected = expectations(&out);
    assert_eq!(
        expected.len(),
        1296 + 648,
        "the client's own call count changed"
    );
    assert_trace_matches("combos fortran", &trace, &expected);
    let h = &trace.headers[0];
    assert!(h.exe.ends_with("/combos"), "header exe {:?}", h.exe);
    assert_eq!(
        h.argv.as_deref().map(|a| a[1..].to_vec()),
        Some(vec!["fortran".to_string()]),
        "header argv"
    );
    assert_vendor_named(&dir.join("trace.jsonl"), "dgemm_", "libblas.so");
}

/// The trace names the library `sym` was forwarded to: in the header's `vendor` map when the
/// symbol was resolved before the header was written, else in the `vendor` field of the
/// first record after it was resolved (`shim/src/trace_sink.rs`; quick returns, which never
/// reach the vendor, come before that).
fn assert_vendor_named(trace: &Path, sym: &str, lib: &str) {
    let text = std::fs::read_to_string(trace).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let in_header = lines[0]["vendor"][sym].as_str().map(str::to_string);
    let named = in_header.or_else(|| {
        let first = lines
            .iter()
            .find(|v| v["type"] == "call" && v["sym"] == sym && v["vendor"].is_string())?;
        first["vendor"].as_str().map(str::to_string)
    });
    assert!(
        named.as_deref().is_some_and(|l| l.contains(lib)),
        "{sym}: vendor library {named:?}, want {lib}"
    );
}

#[test]
fn cblas_both_layouts_and_reference_reentry_recorded_once() {
    let dir = work_dir("combos-cblas");
    let Some(prog) = build_c(&dir, "combos", &["-lblas"]) else {
        return;
    };
    let (out, trace) = run_both("combos cblas", &dir, &prog, &["cblas"]);
    let expected = expectations(&out);
    assert_eq!(expected.len(), 2 * (1296 + 648));
    // Reference cblas_dgemm calls dgemm_ (and cblas_dsyrk dsyrk_): the nested call must go
    // straight through, so there is exactly one record per CBLAS call and no Fortran one.
    let fortran = trace
        .calls
        .iter()
        .filter(|c| c.sym == "dgemm_" || c.sym == "dsyrk_")
        .count();
    assert_eq!(
        fortran, 0,
        "nested Fortran calls from the reference CBLAS were recorded"
    );
    assert_trace_matches("combos cblas", &trace, &expected);
}

#[test]
fn fortran_program_compiled_with_gfortran() {
    if !require(
        runs("gfortran", &["--version"]),
        "gfortran",
        "apt-get install gfortran",
    ) || !require(
        have_blas_dev(),
        "the reference BLAS (-lblas)",
        "apt-get install libblas-dev",
    ) {
        return;
    }
    let dir = work_dir("fortran");
    let prog = dir.join("fclient");
    let src = repo_root().join("tests/fortran/fclient.f90");
    run_ok(
        std::process::Command::new("gfortran")
            .args(["-O2", "-o"])
            .arg(&prog)
            .arg(&src)
            .arg("-lblas"),
    );
    let (out, trace) = run_both("fclient", &dir, &prog, &[]);
    let expected = expectations(&out);
    assert_eq!(expected.len(), 240);
    assert_trace_matches("fclient", &trace, &expected);
}

#[test]
fn ilp64_names_take_64_bit_integers() {
    let dir = work_dir("ilp64");
    let Some(prog) = build_c(&dir, "ilp64", &[]) else {
        return;
    };
    if !require(
        Path::new("/usr/lib/x86_64-linux-gnu/libblas64.so.3").exists(),
        "the ILP64 reference BLAS (libblas64.so.3)",
        "apt-get install libblas64-dev",
    ) {
        return;
    }
    let trace_path = dir.join("trace.jsonl");
    let out = run_ok(shimmed(&prog, Some(&trace_path)).current_dir(&dir));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("ilp64 ok 65"),
        "ILP64 results differ from Debian's ILP64 reference BLAS:\n{stdout}"
    );
    let trace = read_trace(&trace_path);
    assert_trace_matches("ilp64", &trace, &expectations(&stdout));
}

#[test]
fn illegal_arguments_reach_the_programs_own_xerbla() {
    let dir = work_dir("xerbla");
    let Some(prog) = build_c(&dir, "xerbla", &["-lblas"]) else {
        return;
    };
    let (out, trace) = run_both("xerbla", &dir, &prog, &[]);
    assert!(
        !out.contains("MODIFIED"),
        "C was written by an illegal call:\n{out}"
    );
    assert!(
        out.contains("illegal 38 reports 38"),
        "every illegal call must be reported once:\n{out}"
    );
    let illegal = out.lines().filter(|l| *l == "expect-xerbla").count();
    let calls = calls_in_order(&trace);
    let rejected = calls.iter().filter(|c| c.route == "xerbla").count();
    assert_eq!(
        rejected, illegal,
        "each illegal call is one record with route \"xerbla\""
    );
    let legal: Vec<_> = calls
        .iter()
        .filter(|c| c.route != "xerbla")
        .map(|c| observed(c))
        .collect();
    assert_eq!(legal, expectations(&out), "the legal call after the errors");
}

#[test]
fn eight_threads_ten_thousand_calls_each_are_all_recorded() {
    let dir = work_dir("threads");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    let (_, trace) = run_both("threads", &dir, &prog, &["8", "10000"]);
    let calls = calls_in_order(&trace);
    assert_eq!(calls.len(), 80_000, "records lost");
    let mut per_tid: BTreeMap<u64, Vec<&&ozaki_core::trace::CallRecord>> = BTreeMap::new();
    for c in &calls {
        per_tid.entry(c.tid).or_default().push(c);
    }
    assert_eq!(per_tid.len(), 8, "one tid per thread");
    let mut ms = BTreeSet::new();
    for (tid, recs) in &per_tid {
        assert_eq!(recs.len(), 10_000, "thread {tid}");
        let m = recs[0].m;
        ms.insert(m);
        for (i, c) in recs.iter().enumerate() {
            let want = (m, 1 + i as u64 % 5, 1 + i as u64 % 3);
            assert_eq!(
                (c.m, c.n, c.k),
                want,
                "thread {tid}: call {i} out of order or wrong"
            );
        }
    }
    assert_eq!(ms, (1..=8).collect(), "each thread's own shape");
}

#[test]
fn forked_child_writes_its_own_trace() {
    let dir = work_dir("fork");
    let Some(prog) = build_c(&dir, "fork", &["-lblas"]) else {
        return;
    };
    let hashes = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split_whitespace().last().unwrap_or("").to_string())
            .collect()
    };
    let without = run_ok(plain(&prog).current_dir(&dir));
    let pattern = dir.join("t-%p-%h.jsonl");
    let with = run_ok(shimmed(&prog, Some(&pattern)).current_dir(&dir));
    let (a, b) = (
        String::from_utf8(without.stdout).unwrap(),
        String::from_utf8(with.stdout).unwrap(),
    );
    assert_eq!(
        hashes(&a),
        hashes(&b),
        "results differ with the shim:\n{a}\n{b}"
    );
    let pid_of = |who: &str| -> u32 {
        let line = b.lines().find(|l| l.starts_with(who)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let (parent, child) = (pid_of("parent"), pid_of("child"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let file = |pid: u32| dir.join(format!("t-{pid}-{}.jsonl", host.trim()));
    let pt = read_trace(&file(parent));
    let ct = read_trace(&file(child));
    assert_eq!(pt.headers.len(), 1);
    assert_eq!(
        ct.headers.len(),
        1,
        "the child's file starts with its own header"
    );
    assert_eq!(pt.headers[0].pid, parent);
    assert_eq!(ct.headers[0].pid, child);
    assert_eq!(
        ct.headers[0].parent_pid,
        Some(parent),
        "child header names its parent"
    );
    let ms =
        |t: &ozaki_core::trace::Trace| calls_in_order(t).iter().map(|c| c.m).collect::<Vec<_>>();
    assert_eq!(
        ms(&pt),
        vec![1, 1, 1],
        "parent: 1 call before the fork, 2 after"
    );
    assert_eq!(ms(&ct), vec![2, 2, 2], "child: only its own 3 calls");
    let files = std::fs::read_dir(&dir).unwrap().filter(|e| {
        e.as_ref()
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".jsonl")
    });
    assert_eq!(files.count(), 2, "exactly one trace file per process");
}

#[test]
fn exit_from_a_worker_thread_keeps_every_record() {
    let dir = work_dir("thread-exit");
    let Some(prog) = build_c(&dir, "thread_exit", &["-lblas"]) else {
        return;
    };
    let (out, trace) = run_both("thread_exit", &dir, &prog, &["500"]);
    assert!(out.contains("worker done 500"));
    let calls = calls_in_order(&trace);
    assert_eq!(
        calls.len(),
        500,
        "records lost on exit() from a non-main thread"
    );
    assert!(
        calls
            .iter()
            .all(|c| c.routine == Routine::Dgemm && (c.m, c.n, c.k) == (4, 4, 4))
    );
}

#[test]
fn symlink_planted_at_the_trace_path_is_not_followed() {
    let dir = work_dir("symlink");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    let trace_path = dir.join("trace.jsonl");
    std::os::unix::fs::symlink(&victim, &trace_path).unwrap();
    let without = run_ok(plain(&prog).args(["2", "10"]));
    let with = run_ok(shimmed(&prog, Some(&trace_path)).args(["2", "10"]));
    assert_same_output(
        "threads under a refused trace",
        &without.stdout,
        &with.stdout,
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "the shim wrote through a planted symlink"
    );
    assert!(
        std::fs::symlink_metadata(&trace_path)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the planted link was replaced"
    );
}

#[test]
fn argv_stays_out_of_the_header_with_trace_argv_0() {
    let dir = work_dir("argv");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    let trace_path = dir.join("trace.jsonl");
    run_ok(
        shimmed(&prog, Some(&trace_path))
            .args(["1", "3", "--password=hunter2"])
            .env("OZAKI_TRACE_ARGV", "0"),
    );
    let text = std::fs::read_to_string(&trace_path).unwrap();
    assert!(!text.contains("hunter2"), "argv leaked into the trace");
    let trace = read_trace(&trace_path);
    assert_eq!(trace.headers[0].argv, None);
    assert_eq!(trace.calls.len(), 3);
}

#[test]
fn untraced_shim_changes_nothing_and_writes_nothing() {
    let dir = work_dir("untraced");
    let Some(prog) = build_c(&dir, "combos", &["-lblas"]) else {
        return;
    };
    let without = run_ok(plain(&prog).arg("cblas").current_dir(&dir));
    let with = run_ok(shimmed(&prog, None).arg("cblas").current_dir(&dir));
    assert_same_output("combos cblas, no trace", &without.stdout, &with.stdout);
    assert!(
        with.stderr.is_empty(),
        "the shim is silent by default: {}",
        String::from_utf8_lossy(&with.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("combos")],
        "files appeared without OZAKI_TRACE"
    );
}

/// Where Debian's `libblas-test` puts the reference testers and their input files.
const TESTERS: &str = "/usr/lib/x86_64-linux-gnu/blas";

/// Runs a reference tester without and with the shim in separate directories (it writes its
/// summary file into the current directory) and returns (summary text, trace).
fn run_tester(
    name: &str,
    input: &str,
    summary_file: Option<&str>,
) -> Option<(String, ozaki_core::trace::Trace)> {
    let exe = Path::new(TESTERS).join(name);
    if !require(
        exe.is_file(),
        &format!("the reference tester {name}"),
        "apt-get install libblas-test",
    ) {
        return None;
    }
    let stdin = || std::fs::File::open(Path::new(TESTERS).join(input)).unwrap();
    let base = work_dir(name);
    let (d0, d1) = (base.join("without"), base.join("with"));
    std::fs::create_dir_all(&d0).unwrap();
    std::fs::create_dir_all(&d1).unwrap();
    let without = run_ok(plain(&exe).stdin(stdin()).current_dir(&d0));
    let trace_path = base.join("trace.jsonl");
    let with = run_ok(
        shimmed(&exe, Some(&trace_path))
            .stdin(stdin())
            .current_dir(&d1),
    );
    let (s0, s1) = match summary_file {
        Some(f) => (
            std::fs::read(d0.join(f)).unwrap(),
            std::fs::read(d1.join(f)).unwrap(),
        ),
        None => (without.stdout, with.stdout),
    };
    assert_same_output(name, &s0, &s1);
    Some((String::from_utf8(s1).unwrap(), read_trace(&trace_path)))
}

fn count(trace: &ozaki_core::trace::Trace, sym: &str, xerbla: bool) -> usize {
    trace
        .calls
        .iter()
        .filter(|c| c.sym == sym && (c.route == "xerbla") == xerbla)
        .count()
}

#[test]
fn reference_level3_tester_xblat3d_passes() {
    let Some((summary, trace)) = run_tester("xblat3d", "dblat3.in", Some("dblat3.out")) else {
        return;
    };
    assert_tester_passed(
        &summary,
        &tester_pass_lines(&["DGEMM ", "DSYRK "], false, true),
    );
    assert_eq!(
        count(&trace, "dgemm_", false),
        17496,
        "computational dgemm_ calls traced"
    );
    assert_eq!(
        count(&trace, "dsyrk_", false),
        1944,
        "computational dsyrk_ calls traced"
    );
    assert!(
        count(&trace, "dgemm_", true) > 0 && count(&trace, "dsyrk_", true) > 0,
        "error exits traced"
    );
}

#[test]
fn reference_cblas_level3_tester_xdcblat3_passes() {
    let Some((summary, trace)) = run_tester("xdcblat3", "din3", None) else {
        return;
    };
    assert_tester_passed(
        &summary,
        &tester_pass_lines(&["cblas_dgemm ", "cblas_dsyrk "], true, true),
    );
    assert_eq!(
        count(&trace, "cblas_dgemm", false),
        2 * 17496,
        "computational cblas_dgemm calls traced"
    );
    assert_eq!(
        count(&trace, "cblas_dsyrk", false),
        2 * 1944,
        "computational cblas_dsyrk calls traced"
    );
    assert_eq!(
        count(&trace, "dgemm_", false) + count(&trace, "dgemm_", true),
        0,
        "nested dgemm_ recorded"
    );
}

/// A process killed without warning right after a burst of calls keeps every record the
/// trace thread had written, as whole lines that `ozaki summary` reads, in order (the last
/// line may be cut short by the kill, and `ozaki summary` skips it with a note); what it
/// loses is bounded by the queue: a caller that finds 2048 records queued writes them itself
/// (`shim/src/trace_sink.rs`, `MAX_QUEUED`), so a burst of tiny calls faster than the thread
/// formats them (3x3 products, about a microsecond each) loses at most that many and the
/// batch being written, never the whole burst.
#[test]
fn sigkill_loses_at_most_the_queued_records() {
    let dir = work_dir("crash");
    let Some(prog) = build_c(&dir, "crash", &["-lblas"]) else {
        return;
    };
    let trace_path = dir.join("trace.jsonl");
    let calls = 10_000;
    let o = shimmed(&prog, Some(&trace_path))
        .arg(calls.to_string())
        .output()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&o.status),
        Some(9)
    );
    // A kill in the middle of the batch being written can cut that write short (Linux stops
    // a write to a file between pages once the process has a fatal signal): the file may end
    // inside its last line, never elsewhere. Every line before is whole.
    let text = std::fs::read(&trace_path).unwrap_or_default();
    let (trace, skipped) = ozaki_core::trace::Trace::read_lenient(&text[..])
        .unwrap_or_else(|e| panic!("the trace a killed process left: {e}"));
    assert!(
        skipped.iter().all(|line| !line.terminated),
        "a torn line before the last: {skipped:?}"
    );
    let kept = trace.calls.len();
    // MAX_QUEUED records queued, plus the batch the thread or a caller is writing (FLUSH_BYTES
    // of lines, under 64 records).
    let lost = calls - kept;
    assert!(
        lost <= 2048 + 64,
        "lost {lost} of {calls} records: more than the queue holds"
    );
    assert!(
        trace
            .calls
            .iter()
            .enumerate()
            .all(|(i, c)| c.seq == i as u64),
        "kept records are a prefix"
    );
    // `ozaki summary` reads what a killed process left.
    let s = run_ok(plain(ozaki_bin()).arg("summary").arg(&trace_path));
    assert!(String::from_utf8_lossy(&s.stdout).contains(&format!("{kept} call(s)")));
}
