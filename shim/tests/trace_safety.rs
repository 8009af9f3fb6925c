//! The trace file and the settings under adversity: files planted by another user, a full
//! disk, a kill after a pause, settings spelled in the usual ways or wrongly. In every case
//! the program's results are what they are without the shim, and what went wrong is said
//! once on stderr.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Output;

/// Uid of `nobody`, the other user these tests play when they run as root.
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn stderr_lines(o: &Output, needle: &str) -> usize {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// Runs `threads 2 10` without the shim and with it tracing to `trace`; asserts the same
/// results and exactly one `cannot create` line naming `why`.
fn assert_refused(what: &str, dir: &Path, trace: &Path, why: &str) {
    let Some(prog) = build_c(dir, "threads", &["-lblas"]) else {
        return;
    };
    let without = run_ok(plain(&prog).args(["2", "10"]));
    let with = run_ok(shimmed(&prog, Some(trace)).args(["2", "10"]));
    assert_same_output(what, &without.stdout, &with.stdout);
    let err = String::from_utf8_lossy(&with.stderr);
    assert_eq!(
        stderr_lines(&with, "ozaki-shim: OZAKI_TRACE: cannot create"),
        1,
        "{what}: want one clear line:\n{err}"
    );
    assert!(
        err.contains(why),
        "{what}: the line should say {why:?}:\n{err}"
    );
}

fn private_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn a_file_planted_by_another_user_is_refused_and_kept() {
    if !is_root() {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: a_file_planted_by_another_user_is_refused_and_kept: needs root to play another user"
        );
        return;
    }
    let dir = work_dir("safety-planted");
    let trace = dir.join("trace.jsonl");
    private_file(&trace, "planted\n");
    std::os::unix::fs::chown(&trace, Some(NOBODY), Some(NOBODY)).unwrap();
    assert_refused("planted file", &dir, &trace, "owned by uid 65534");
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), "planted\n");
    let meta = std::fs::metadata(&trace).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        NOBODY,
        "owner kept"
    );
}

#[test]
fn a_hard_link_at_the_trace_path_is_refused_and_its_target_kept() {
    let dir = work_dir("safety-hardlink");
    let victim = dir.join("victim.txt");
    private_file(&victim, "precious\n");
    let trace = dir.join("trace.jsonl");
    std::fs::hard_link(&victim, &trace).unwrap();
    assert_refused("hard link", &dir, &trace, "2 hard links");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

#[test]
fn a_symlinked_folder_of_another_user_is_not_followed() {
    if !is_root() {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: a_symlinked_folder_of_another_user_is_not_followed: needs root to play another user"
        );
        return;
    }
    let dir = work_dir("safety-dirlink");
    let target = dir.join("victim-dir");
    std::fs::create_dir(&target).unwrap();
    let link = dir.join("shared");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(NOBODY), Some(NOBODY)).unwrap();
    assert_refused(
        "symlinked folder",
        &dir,
        &link.join("trace.jsonl"),
        "symbolic link owned by another user",
    );
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "written through the link"
    );
}

#[test]
fn an_earlier_trace_of_ours_is_replaced() {
    let dir = work_dir("safety-rerun");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    let trace = dir.join("trace.jsonl");
    run_ok(shimmed(&prog, Some(&trace)).args(["1", "5"]));
    let again = run_ok(shimmed(&prog, Some(&trace)).args(["1", "3"]));
    assert_eq!(stderr_lines(&again, "ozaki-shim"), 0);
    assert_eq!(read_trace(&trace).calls.len(), 3);
}

#[test]
fn a_failed_write_is_reported_once() {
    let dir = work_dir("safety-full");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    // 4 x 200 records: several buffer writes, every one failing.
    let without = run_ok(plain(&prog).args(["4", "200"]));
    let with = run_ok(shimmed(&prog, Some(Path::new("/dev/full"))).args(["4", "200"]));
    assert_same_output("/dev/full", &without.stdout, &with.stdout);
    assert_eq!(
        stderr_lines(&with, "ozaki-shim: OZAKI_TRACE: cannot write /dev/full"),
        1,
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
}

#[test]
fn a_kill_after_a_pause_loses_no_record() {
    let dir = work_dir("safety-pause");
    let Some(prog) = build_c(&dir, "crash", &["-lblas"]) else {
        return;
    };
    for sig in ["term", "int"] {
        let trace = dir.join(format!("{sig}.jsonl"));
        let o = shimmed(&prog, Some(&trace))
            .args(["7", "1200", sig])
            .output()
            .unwrap();
        assert!(!o.status.success());
        assert_eq!(
            read_trace(&trace).calls.len(),
            7,
            "SIG{} 1.2 s after the last call lost buffered records",
            sig.to_uppercase()
        );
    }
}

#[test]
fn trace_argv_off_in_any_usual_spelling_keeps_argv_out() {
    let dir = work_dir("safety-argv");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    for value in ["false", "no", "OFF", "garbage"] {
        let trace = dir.join(format!("argv-{value}.jsonl"));
        let o = run_ok(
            shimmed(&prog, Some(&trace))
                .args(["1", "2", "--password=hunter2"])
                .env("OZAKI_TRACE_ARGV", value),
        );
        let text = std::fs::read_to_string(&trace).unwrap();
        assert!(
            !text.contains("hunter2"),
            "OZAKI_TRACE_ARGV={value} leaked argv"
        );
        let complaints = stderr_lines(&o, "OZAKI_TRACE_ARGV");
        assert_eq!(complaints, usize::from(value == "garbage"), "{value}");
    }
}

#[test]
fn a_vendor_library_without_blas_is_reported_and_the_real_one_used() {
    let dir = work_dir("safety-vendor");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    let trace = dir.join("trace.jsonl");
    let without = run_ok(plain(&prog).args(["2", "5"]));
    let with = run_ok(
        shimmed(&prog, Some(&trace))
            .args(["2", "5"])
            .env("OZAKI_VENDOR_BLAS", "libm.so.6"),
    );
    assert_same_output("OZAKI_VENDOR_BLAS=libm", &without.stdout, &with.stdout);
    assert_eq!(
        stderr_lines(&with, "OZAKI_VENDOR_BLAS=libm.so.6: defines none of"),
        1,
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(
        text.contains("libblas.so"),
        "the reference BLAS was not named"
    );
}

#[test]
fn moduli_out_of_range_are_rejected_not_applied_to_every_call() {
    let dir = work_dir("safety-moduli");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    let trace = dir.join("trace.jsonl");
    let o = run_ok(
        shimmed(&prog, Some(&trace))
            .args(["1", "4"])
            .env("OZAKI_ROUTE", "cpu-ozaki")
            .env("OZAKI_MODULI", "25"),
    );
    assert_eq!(stderr_lines(&o, "OZAKI_MODULI=\"25\""), 1);
    let t = read_trace(&trace);
    assert!(
        t.calls
            .iter()
            .all(|c| c.route == "cpu-ozaki" && c.fallback.is_none()),
        "calls fell back: {:?}",
        t.calls.iter().map(|c| &c.fallback).collect::<Vec<_>>()
    );
}

/// The worker-thread counts the shim's debug log says `cpu-ozaki` used, call by call.
fn logged_threads(err: &str) -> Vec<String> {
    // Without the colour codes a terminal-style log may carry.
    let mut plain = String::new();
    let mut chars = err.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            plain.push(c);
        }
    }
    plain
        .lines()
        .filter(|l| l.contains("cpu-ozaki worker threads"))
        .filter_map(|l| l.split("threads=").nth(1))
        .map(|v| v.trim().to_string())
        .collect()
}

#[test]
fn cpu_ozaki_uses_the_thread_count_the_program_set() {
    let dir = work_dir("safety-threads");
    let Some(prog) = build_c(&dir, "threads", &["-lblas"]) else {
        return;
    };
    let run = |vars: &[(&str, &str)]| {
        let mut cmd = shimmed(&prog, None);
        cmd.args(["1", "1"])
            .env("OZAKI_ROUTE", "cpu-ozaki")
            .env("OZAKI_LOG", "ozaki_shim=debug");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        String::from_utf8_lossy(&run_ok(&mut cmd).stderr).into_owned()
    };
    let picked = |err: &str| logged_threads(err).into_iter().next();
    let err = run(&[("OMP_NUM_THREADS", "1")]);
    assert_eq!(picked(&err).as_deref(), Some("1"), "{err}");
    let err = run(&[("OPENBLAS_NUM_THREADS", "2"), ("OMP_NUM_THREADS", "1")]);
    assert_eq!(picked(&err).as_deref(), Some("2"), "{err}");
    let err = run(&[("OZAKI_THREADS", "3"), ("OMP_NUM_THREADS", "1")]);
    assert_eq!(picked(&err).as_deref(), Some("3"), "{err}");
}

/// Under Debian's OpenBLAS, a program that lowers the thread limit at run time
/// (`openblas_set_num_threads(1)`, after starting with `OPENBLAS_NUM_THREADS=2`) and then
/// raises it again: each `cpu-ozaki` call uses the limit OpenBLAS has at that call, not the
/// environment's.
#[test]
fn cpu_ozaki_follows_openblas_set_num_threads_at_run_time() {
    let dir = work_dir("safety-openblas-threads");
    let Some(prog) = build_c(&dir, "blas_threads", &["-lblas"]) else {
        return;
    };
    let Some((_, openblas)) = vendors().into_iter().find(|(name, _)| *name == "openblas") else {
        return; // vendors() said why
    };
    let mut cmd = over(shimmed(&prog, None), openblas);
    cmd.args(["1", "2"])
        .env("OPENBLAS_NUM_THREADS", "2")
        .env("OZAKI_ROUTE", "cpu-ozaki")
        .env("OZAKI_LOG", "ozaki_shim=debug");
    let o = run_ok(&mut cmd);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    // What OpenBLAS itself reports after each change (it may cap a count at its cores).
    let set: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("set "))
        .filter_map(|l| l.split(" get ").nth(1))
        .map(|v| v.trim().to_string())
        .collect();
    assert_eq!(
        set.first().map(String::as_str),
        Some("1"),
        "OpenBLAS took the lowered limit: {out}"
    );
    assert_eq!(
        logged_threads(&err),
        set,
        "cpu-ozaki's worker threads per call, against OpenBLAS's limit at that call (the \
         environment says 2):\n{out}\n{err}"
    );
}
