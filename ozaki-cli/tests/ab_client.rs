//! `OZAKI_AB` end to end, with the shim preloaded under a C client
//! (`tests/apps/ab_client.c`: one dgemm_ and one dsyrk_ with beta != 0, printing every
//! element's bits, including the parts of C the calls must not touch).
//!
//! The vendor is a stand-in (`tests/apps/ab_vendor.c`, named by `OZAKI_VENDOR_BLAS`) that
//! sums in reverse order, so its last bits differ from the `builtin` route's and "the
//! program got the vendor's result" is visible bit for bit:
//! - `OZAKI_AB=1` records an `ab` field per call with both times and a small, nonzero
//!   difference, and the program gets the route's result;
//! - `OZAKI_AB_KEEP=vendor` hands the program exactly what the vendor alone computes;
//! - `OZAKI_AB_MAX_MB=0` skips every call, says why in the record, and still computes C;
//! - the vendor route is never compared with itself.
//!
//! Skips itself visibly when gcc or the reference BLAS (libblas-dev) is missing.

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use ozaki_core::trace::{CallRecord, Trace};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Fixture {
    client: PathBuf,
    vendor: PathBuf,
    dir: PathBuf,
}

/// Builds the client and the stand-in vendor; `None` after a visible skip.
fn fixture(name: &str) -> Option<Fixture> {
    if !common::require(
        common::runs("gcc", &["--version"]),
        "gcc",
        "apt-get install gcc",
    ) || !common::require(
        common::have_blas_dev(),
        "the reference BLAS (-lblas)",
        "apt-get install libblas-dev",
    ) {
        return None;
    }
    let dir = common::work_dir(name);
    let apps = common::repo_root().join("tests/apps");
    let client = dir.join("ab_client");
    let vendor = dir.join("libab_vendor.so");
    for args in [
        vec![
            "-O2".into(),
            apps.join("ab_client.c").into_os_string(),
            "-o".into(),
            client.clone().into_os_string(),
            "-lblas".into(),
        ],
        vec![
            "-O2".into(),
            "-shared".into(),
            "-fPIC".into(),
            apps.join("ab_vendor.c").into_os_string(),
            "-o".into(),
            vendor.clone().into_os_string(),
        ],
    ] {
        let o = Command::new("gcc").args(&args).output().unwrap();
        assert!(
            o.status.success(),
            "gcc {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Some(Fixture {
        client,
        vendor,
        dir,
    })
}

impl Fixture {
    /// Runs the client with `preload` and `env`; returns its output lines.
    fn run(&self, preload: &Path, env: &[(&str, &str)]) -> Vec<String> {
        let mut cmd = Command::new(&self.client);
        cmd.env("LD_PRELOAD", preload)
            .env("OZAKI_VENDOR_BLAS", &self.vendor);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        assert!(
            o.status.success(),
            "client failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }

    /// The vendor alone, no shim.
    fn vendor_alone(&self) -> Vec<String> {
        self.run(&self.vendor, &[])
    }

    /// Under the shim with a trace; returns (output, records).
    fn shimmed(&self, tag: &str, env: &[(&str, &str)]) -> (Vec<String>, Vec<CallRecord>) {
        let t = self.dir.join(format!("{tag}.jsonl"));
        let mut env = env.to_vec();
        let ts = t.to_str().unwrap().to_string();
        env.push(("OZAKI_TRACE", &ts));
        let out = self.run(&common::shim_lib(), &env);
        let trace = Trace::read(std::io::BufReader::new(std::fs::File::open(&t).unwrap())).unwrap();
        (out, trace.calls)
    }
}

#[test]
fn ab_records_differences_and_keep_vendor_returns_the_vendors_bits() {
    let Some(fx) = fixture("ab-keep") else { return };
    let vendor = fx.vendor_alone();

    // 1. Compare every call; the program keeps the built-in route's result.
    let (with_route, calls) = fx.shimmed("route", &[("OZAKI_ROUTE", "builtin"), ("OZAKI_AB", "1")]);
    assert_eq!(calls.len(), 2, "one dgemm_ and one dsyrk_");
    for c in &calls {
        assert_eq!(c.route, "builtin");
        let ab =
            c.ab.as_ref()
                .unwrap_or_else(|| panic!("no ab field in {c:?}"));
        assert_eq!((ab.kept.as_str(), ab.skipped.as_deref()), ("route", None));
        assert!(ab.vendor_ns > 0 && ab.route_ns > 0, "{ab:?}");
        // Two correct fp64 results that round differently: close, and measured as different.
        assert!(ab.rel_norm > 0.0 && ab.rel_norm < 1e-13, "{ab:?}");
        assert!(
            ab.max_rel_comp >= ab.rel_norm && ab.max_rel_comp < 1e-6,
            "{ab:?}"
        );
        let scaled = ab
            .rel_scaled
            .expect("difference on the data's scale recorded");
        assert!(
            scaled > 0.0 && scaled <= ozaki_core::trace::ab_scaled_bound(c.k),
            "{ab:?}"
        );
    }
    assert_ne!(
        with_route, vendor,
        "the program got the route's result, not the vendor's"
    );

    // 2. Same, but the program receives the vendor's result: bit-identical to the vendor
    //    alone, and the parts of C outside the calls' regions are as the vendor left them.
    let (with_vendor, calls) = fx.shimmed(
        "vendor",
        &[
            ("OZAKI_ROUTE", "builtin"),
            ("OZAKI_AB", "1"),
            ("OZAKI_AB_KEEP", "vendor"),
        ],
    );
    assert_eq!(
        with_vendor, vendor,
        "OZAKI_AB_KEEP=vendor must return the vendor's bits"
    );
    assert!(calls.iter().all(|c| {
        c.ab.as_ref()
            .is_some_and(|a| a.kept == "vendor" && a.rel_norm > 0.0)
    }));

    // 3. No memory for copies: skipped, counted, and C is still the route's.
    let (skipped, calls) = fx.shimmed(
        "skipped",
        &[
            ("OZAKI_ROUTE", "builtin"),
            ("OZAKI_AB", "1"),
            ("OZAKI_AB_MAX_MB", "0"),
        ],
    );
    assert_eq!(skipped, with_route);
    for c in &calls {
        let why =
            c.ab.as_ref()
                .and_then(|a| a.skipped.clone())
                .unwrap_or_default();
        assert!(why.contains("OZAKI_AB_MAX_MB"), "skip reason: {why:?}");
    }

    // 4. ozaki ab-report reads it: the built-in route passes, the skips are counted.
    let o = Command::new(common::ozaki_bin())
        .arg("ab-report")
        .arg(fx.dir.join("route.jsonl"))
        .arg(fx.dir.join("skipped.jsonl"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("builtin: PASS, agrees") && text.contains("2 calls skipped"),
        "{text}"
    );
}

#[test]
fn concurrent_calls_on_one_c_keep_each_others_rows() {
    // Four threads update disjoint row blocks of one C (same ldc), 300 rounds each. The
    // built-in route and the A/B copies must write only their own rows: any write-back of a
    // call's whole span would overwrite the other threads' rows with stale values.
    let Some(fx) = fixture("ab-threads") else {
        return;
    };
    let exe = fx.dir.join("ab_threads");
    let src = common::repo_root().join("tests/apps/ab_threads.c");
    let o = Command::new("gcc")
        .args(["-O2", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-lblas")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = |preload: Option<&Path>, env: &[(&str, &str)]| {
        let mut cmd = Command::new(&exe);
        cmd.env(
            "LD_LIBRARY_PATH",
            "/usr/lib/x86_64-linux-gnu/blas:/usr/lib/x86_64-linux-gnu/lapack",
        );
        if let Some(p) = preload {
            cmd.env("LD_PRELOAD", p);
        }
        cmd.envs(env.iter().copied());
        let o = cmd.output().unwrap();
        assert!(o.status.success());
        o.stdout
    };
    let reference = run(None, &[]);
    // The built-in kernel sums in the reference BLAS's order, so it must match bit for bit.
    assert!(
        run(Some(&common::shim_lib()), &[("OZAKI_ROUTE", "builtin")]) == reference,
        "built-in route under threads"
    );
    let keep = [
        ("OZAKI_ROUTE", "builtin"),
        ("OZAKI_AB", "1"),
        ("OZAKI_AB_KEEP", "vendor"),
    ];
    assert!(
        run(Some(&common::shim_lib()), &keep) == reference,
        "A/B with KEEP=vendor under threads"
    );
}

#[test]
fn a_sampled_fraction_picks_the_same_calls_every_run() {
    let Some(fx) = fixture("ab-sample") else {
        return;
    };
    // Two calls per run; at 0.5 the deterministic sample picks a fixed subset.
    let (_, a) = fx.shimmed("a", &[("OZAKI_ROUTE", "builtin"), ("OZAKI_AB", "0.5")]);
    let (_, b) = fx.shimmed("b", &[("OZAKI_ROUTE", "builtin"), ("OZAKI_AB", "0.5")]);
    let chosen = |calls: &[CallRecord]| calls.iter().map(|c| c.ab.is_some()).collect::<Vec<_>>();
    assert_eq!(chosen(&a), chosen(&b), "the sample is repeatable");
}

#[test]
fn vendor_route_is_not_compared_with_itself() {
    let Some(fx) = fixture("ab-vendor-route") else {
        return;
    };
    let (out, calls) = fx.shimmed("t", &[("OZAKI_ROUTE", "vendor"), ("OZAKI_AB", "1")]);
    assert_eq!(out, fx.vendor_alone());
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c.ab.is_none()));
}
