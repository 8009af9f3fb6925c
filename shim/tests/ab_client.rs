//! `OZAKI_AB` end to end (issue #6), with the shim preloaded under a C client
//! (`tests/apps/ab_client.c`: one dgemm_ and one dsyrk_ with beta != 0 against the
//! reference BLAS, printing every element's bits):
//! - `OZAKI_AB=1` records an `ab` field per call with both times and a small, nonzero
//!   difference between the built-in route and the vendor, and the program gets the route's
//!   result (which differs from the vendor's in the last bits);
//! - `OZAKI_AB_KEEP=vendor` hands the program the vendor's result bit for bit, and leaves
//!   the parts of C outside the call's region untouched;
//! - `OZAKI_AB_MAX_MB=0` skips every call, says why in the record, and still computes C.
//!
//! Skips itself visibly when gcc or the reference BLAS (libblas-dev) is missing.

use ozaki_core::trace::{CallRecord, Trace};
use std::path::{Path, PathBuf};
use std::process::Command;

fn shim() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_ozaki")).parent().unwrap().join("libozaki_shim.so")
}

fn work_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("ozaki-ab-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Builds the client; `None` (after saying why) when the toolchain or BLAS is missing.
fn client(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/apps/ab_client.c");
    let exe = dir.join("ab_client");
    match Command::new("gcc").args(["-O2"]).arg(&src).arg("-o").arg(&exe).arg("-lblas").output() {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => {
            eprintln!("skipped: cannot build the C client against -lblas (apt-get install gcc libblas-dev): {}", String::from_utf8_lossy(&o.stderr));
            None
        }
        Err(e) => {
            eprintln!("skipped: no gcc ({e})");
            None
        }
    }
}

/// Runs the client, with the shim and these variables when `env` is `Some`; returns its lines.
fn run(exe: &Path, env: Option<&[(&str, &str)]>) -> Vec<String> {
    let mut cmd = Command::new(exe);
    // Reference BLAS for the vendor whatever the system default is.
    cmd.env("LD_LIBRARY_PATH", "/usr/lib/x86_64-linux-gnu/blas:/usr/lib/x86_64-linux-gnu/lapack");
    if let Some(env) = env {
        cmd.env("LD_PRELOAD", shim());
        for (k, v) in env {
            cmd.env(k, v);
        }
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "client failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().lines().map(String::from).collect()
}

fn trace(path: &Path) -> Vec<CallRecord> {
    let t = Trace::read(std::io::BufReader::new(std::fs::File::open(path).unwrap())).unwrap();
    t.calls
}

#[test]
fn ab_records_differences_and_keep_vendor_returns_the_vendors_bits() {
    let dir = work_dir();
    let Some(exe) = client(&dir) else { return };
    let plain = run(&exe, None);

    // 1. Compare every call; the program keeps the route's result.
    let t1 = dir.join("route.jsonl");
    let with_route = run(&exe, Some(&[("OZAKI_ROUTE", "builtin"), ("OZAKI_AB", "1"), ("OZAKI_TRACE", t1.to_str().unwrap())]));
    let calls = trace(&t1);
    assert_eq!(calls.len(), 2, "one dgemm_ and one dsyrk_");
    for c in &calls {
        assert_eq!(c.route, "builtin");
        let ab = c.ab.as_ref().unwrap_or_else(|| panic!("no ab field in {c:?}"));
        assert_eq!((ab.kept.as_str(), ab.skipped.as_deref()), ("route", None));
        assert!(ab.vendor_ns > 0 && ab.route_ns > 0, "{ab:?}");
        // Two correct fp64 results: close, measured (not both exact zero unless equal).
        assert!(ab.rel_norm < 1e-13 && ab.max_rel_comp < 1e-6, "{ab:?}");
    }
    assert_ne!(with_route, plain, "the built-in route rounds differently from the reference BLAS; otherwise this test proves nothing");
    assert!(calls.iter().any(|c| c.ab.as_ref().unwrap().rel_norm > 0.0), "the differences were measured");

    // 2. Same, but the program receives the vendor's result: bit-identical to no shim.
    let t2 = dir.join("vendor.jsonl");
    let with_vendor = run(
        &exe,
        Some(&[("OZAKI_ROUTE", "builtin"), ("OZAKI_AB", "1"), ("OZAKI_AB_KEEP", "vendor"), ("OZAKI_TRACE", t2.to_str().unwrap())]),
    );
    assert_eq!(with_vendor, plain, "OZAKI_AB_KEEP=vendor must return the vendor's bits (and leave the rest of C alone)");
    assert!(trace(&t2).iter().all(|c| c.ab.as_ref().is_some_and(|a| a.kept == "vendor")));

    // 3. No memory for copies: skipped, counted, and C is still the route's.
    let t3 = dir.join("skipped.jsonl");
    let skipped = run(
        &exe,
        Some(&[("OZAKI_ROUTE", "builtin"), ("OZAKI_AB", "1"), ("OZAKI_AB_MAX_MB", "0"), ("OZAKI_TRACE", t3.to_str().unwrap())]),
    );
    assert_eq!(skipped, with_route);
    for c in trace(&t3) {
        let why = c.ab.as_ref().and_then(|a| a.skipped.clone()).unwrap_or_default();
        assert!(why.contains("OZAKI_AB_MAX_MB"), "skip reason: {why:?}");
    }

    // 4. ozaki ab-report reads it: the built-in route passes, the skips are counted.
    let o = Command::new(env!("CARGO_BIN_EXE_ozaki")).arg("ab-report").arg(&t1).arg(&t3).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("builtin: PASS") && text.contains("2 calls skipped"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn vendor_route_is_not_compared_with_itself() {
    let dir = work_dir().join("vendor-route");
    std::fs::create_dir_all(&dir).unwrap();
    let Some(exe) = client(&dir) else { return };
    let t = dir.join("t.jsonl");
    let out = run(&exe, Some(&[("OZAKI_ROUTE", "vendor"), ("OZAKI_AB", "1"), ("OZAKI_TRACE", t.to_str().unwrap())]));
    assert_eq!(out, run(&exe, None));
    assert!(trace(&t).iter().all(|c| c.ab.is_none()));
    std::fs::remove_dir_all(&dir).unwrap();
}
