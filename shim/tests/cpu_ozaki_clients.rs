//! The reference BLAS Level-3 testers (Debian's `libblas-test`) under the shim with
//! `OZAKI_ROUTE=cpu-ozaki`: every computational dgemm/dsyrk call is emulated by
//! Ozaki scheme II, and the testers' own accuracy checks must all pass. The trace must show
//! the route, the moduli used and no fallback (the testers' data is finite and benign).

mod common;

use common::*;
use std::path::Path;

const TESTERS: &str = "/usr/lib/x86_64-linux-gnu/blas";

/// Runs `tester` under the shim with cpu-ozaki (and `extra` env), returns (summary, trace).
fn run_cpu_ozaki(
    name: &str,
    tester: &str,
    input: &str,
    summary_file: Option<&str>,
    extra: &[(&str, &str)],
) -> Option<(String, ozaki_core::trace::Trace)> {
    let exe = Path::new(TESTERS).join(tester);
    if !require(
        exe.is_file(),
        &format!("the reference tester {tester}"),
        "apt-get install libblas-test",
    ) {
        return None;
    }
    let dir = work_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    let trace_path = dir.join("trace.jsonl");
    let _ = std::fs::remove_file(&trace_path);
    let mut cmd = shimmed(&exe, Some(&trace_path));
    cmd.env("OZAKI_ROUTE", "cpu-ozaki")
        .stdin(std::fs::File::open(Path::new(TESTERS).join(input)).unwrap())
        .current_dir(&dir);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = run_ok(&mut cmd);
    let summary = match summary_file {
        Some(f) => std::fs::read_to_string(dir.join(f)).unwrap(),
        None => String::from_utf8(out.stdout).unwrap(),
    };
    Some((summary, read_trace(&trace_path)))
}

/// Every record that reached a route ran on cpu-ozaki without fallback; returns how many
/// computed a product, and the moduli counts seen.
fn assert_all_emulated(trace: &ozaki_core::trace::Trace) -> (usize, Vec<u32>) {
    let mut moduli = Vec::new();
    for c in &trace.calls {
        if c.route == "xerbla" || c.route == "quick" {
            continue;
        }
        assert_eq!(
            c.route, "cpu-ozaki",
            "seq {}: route {} (fallback {:?})",
            c.seq, c.route, c.fallback
        );
        assert!(
            c.fallback.is_none(),
            "seq {}: fallback {:?}",
            c.seq,
            c.fallback
        );
        moduli.extend(c.moduli);
    }
    let n = moduli.len();
    moduli.sort_unstable();
    moduli.dedup();
    (n, moduli)
}

#[test]
fn xblat3d_passes_on_cpu_ozaki() {
    let Some((summary, trace)) = run_cpu_ozaki(
        "cpu-ozaki-xblat3d",
        "xblat3d",
        "dblat3.in",
        Some("dblat3.out"),
        &[],
    ) else {
        return;
    };
    assert_tester_passed(
        &summary,
        &tester_pass_lines(&["DGEMM ", "DSYRK "], false, true),
    );
    let (products, moduli) = assert_all_emulated(&trace);
    assert!(products > 5000, "only {products} emulated products");
    assert!(moduli.iter().all(|r| (2..=20).contains(r)), "{moduli:?}");
}

#[test]
fn xdcblat3_passes_on_cpu_ozaki_in_both_layouts() {
    let Some((summary, trace)) = run_cpu_ozaki("cpu-ozaki-xdcblat3", "xdcblat3", "din3", None, &[])
    else {
        return;
    };
    assert_tester_passed(
        &summary,
        &tester_pass_lines(&["cblas_dgemm ", "cblas_dsyrk "], true, false),
    );
    let (products, _) = assert_all_emulated(&trace);
    assert!(products > 10000, "only {products} emulated products");
}

#[test]
fn ozaki_moduli_forces_the_count_in_the_trace() {
    let Some((summary, trace)) = run_cpu_ozaki(
        "cpu-ozaki-xblat3d-m20",
        "xblat3d",
        "dblat3.in",
        Some("dblat3.out"),
        &[("OZAKI_MODULI", "20")],
    ) else {
        return;
    };
    assert_tester_passed(&summary, &[]);
    let (products, moduli) = assert_all_emulated(&trace);
    assert!(products > 5000);
    assert_eq!(moduli, vec![20]);
}
