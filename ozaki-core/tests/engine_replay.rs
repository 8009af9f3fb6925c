//! Trace replay: per-record rows, composites and the CSV.

use ozaki_core::engine::choose::Engine;
use ozaki_core::engine::platforms;
use ozaki_core::engine::profile::Profile;
use ozaki_core::engine::reduced::RateOptions;
use ozaki_core::engine::replay::{self, ReplayModel};
use ozaki_core::trace::{CallRecord, Trace};

fn trace(shapes: &[(u64, u64, u64)]) -> Vec<CallRecord> {
    let mut text = String::from(
        r#"{"type":"header","schema":1,"pid":1,"exe":"x","shim_version":"0","start_unix_s":0}"#,
    );
    text.push('\n');
    for (i, (m, n, k)) in shapes.iter().enumerate() {
        text.push_str(&format!(
            r#"{{"type":"call","seq":{i},"t_ns":0,"dur_ns":1,"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"N","transb":"N","m":{m},"n":{n},"k":{k},"lda":{m},"ldb":{k},"ldc":{m},"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}}"#
        ));
        text.push('\n');
    }
    Trace::read(text.as_bytes()).unwrap().calls
}

#[test]
fn measured_replay_rows_composites_and_csv_agree() {
    let calls = trace(&[
        (8, 8, 8),
        (64, 64, 64),
        (4096, 4096, 4096),
        (110592, 64, 64),
        (8192, 8192, 8192),
        (8, 8, 8),
    ]);
    let engine = Engine::new(Profile::built_in("h200").unwrap(), 16);
    let moduli = |_: &ozaki_core::engine::CallShape| Some(14);
    let (rows, c) = replay::replay(
        &calls,
        &ReplayModel::Measured {
            engine: &engine,
            moduli: &moduli,
        },
    );
    assert_eq!(rows.len(), 6);
    assert_eq!(rows[0].route, "vendor", "tiny call: {}", rows[0].reason);
    assert_ne!(rows[4].route, "vendor", "8192³: {}", rows[4].reason);
    // Composite = Σ t_baseline / Σ t_auto, from the rows themselves.
    let sum = |name: &str| {
        rows.iter()
            .map(|r| r.predicted_s.iter().find(|(n, _)| n == name).unwrap().1)
            .sum::<f64>()
    };
    let auto: f64 = rows.iter().map(|r| r.chosen_seconds()).sum();
    assert!((c.auto_seconds - auto).abs() < 1e-12 * auto.max(1.0));
    let sv = c.speedup_vs.iter().find(|(n, _)| n == "vendor").unwrap().1;
    assert!((sv - sum("vendor") / auto).abs() < 1e-9 * sv);
    let sn = c
        .speedup_vs
        .iter()
        .find(|(n, _)| n == "gpu-native")
        .unwrap()
        .1;
    assert!((sn - sum("gpu-native") / auto).abs() < 1e-9 * sn);
    // Auto is never slower than any all-one-route baseline (it picks per record, margin aside).
    assert!(sv >= 1.0 && sn >= 1.0, "vs vendor {sv}, vs native {sn}");
    let share: f64 = c.work_share.iter().map(|x| x.1).sum();
    assert!((share - 1.0).abs() < 1e-12);
    assert_eq!(
        c.nbar_quartiles.1, 8192.0,
        "the 8192³ call carries most of the work"
    );
    let mut csv = Vec::new();
    replay::write_csv(&rows, &mut csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 7);
    for col in [
        "route",
        "storage",
        "recon_host",
        "rate_gflops",
        "t_vendor_s",
        "t_gpu-native_s",
        "t_gpu-ozaki_s",
    ] {
        assert!(
            lines[0].split(',').any(|h| h == col),
            "missing column {col}: {}",
            lines[0]
        );
    }
}

#[test]
fn reduced_replay_on_gb300_picks_the_paper_routes_by_nbar() {
    // Brief §4.8: on GB300 tensor A wins below n̄ ≈ 178, S ties on the roof from ≈ 287; large
    // k so that the Garner term is negligible and storage fits one cluster or L2.
    let calls = trace(&[(110592, 64, 110592), (4096, 4096, 65536)]);
    let pl = platforms::gb300();
    let (rows, c) = replay::replay(
        &calls,
        &ReplayModel::Reduced {
            platform: &pl,
            options: RateOptions::default(),
        },
    );
    assert_eq!(rows[0].route, "At", "{}", rows[0].reason);
    assert!(
        ["S2L", "L1d"].contains(&rows[1].route.as_str()),
        "{}",
        rows[1].reason
    );
    // Versus the flat 1.4-TF native, every record gains rate/1.4.
    let vs_native = c.speedup_vs.iter().find(|(n, _)| n == "native").unwrap().1;
    let expect = rows.iter().map(|r| r.flops / 1.4e12).sum::<f64>()
        / rows.iter().map(|r| r.flops / r.rate).sum::<f64>();
    assert!((vs_native / expect - 1.0).abs() < 1e-9);
    let vs_ship = c.speedup_vs.iter().find(|(n, _)| n == "S0").unwrap().1;
    assert!(vs_ship >= 1.0);
}
