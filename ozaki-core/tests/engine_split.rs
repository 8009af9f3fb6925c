//! Several GPUs in the engine: the profile's per-device survey (version 2, additive), its
//! parsing and merging from calibration measurements, and the engine's choice to split a
//! host-resident dgemm over the process's GPUs only when the priced split beats one GPU.

use ozaki_core::engine::CallShape;
use ozaki_core::engine::calibrate::{
    DeviceMeasurements, Direction, HostMemory, LinkSample, Measurements, ShareMeasurements,
    SplitSample, merge_devices,
};
use ozaki_core::engine::choose::{Engine, split_key};
use ozaki_core::engine::model::{Sample, predict};
use ozaki_core::engine::profile::{self, DeviceId, Profile};
use ozaki_core::route::Route;
use ozaki_core::trace::Routine;
use std::sync::Arc;

fn h200() -> Profile {
    Profile::built_in("h200").expect("h200 ships")
}

/// Staged-link samples: `bytes` moved in `bytes / bw` seconds, both directions.
fn link(bw: f64) -> Vec<LinkSample> {
    [1u64 << 26, 1 << 28, 1 << 30]
        .iter()
        .flat_map(|&bytes| {
            [Direction::H2d, Direction::D2h].map(|direction| LinkSample {
                direction,
                memory: HostMemory::Staged,
                bytes,
                seconds: bytes as f64 / bw,
            })
        })
        .collect()
}

fn rate_sample(n: u64, rate: f64) -> Sample {
    Sample {
        routine: Routine::Dgemm,
        m: n,
        n,
        k: n,
        seconds: 2.0 * (n * n * n) as f64 / rate,
    }
}

/// A survey of two devices with the given fp64 rates and per-device link, and the
/// aggregate link of both copying at once.
fn survey(
    fp64: [f64; 2],
    single: f64,
    together: f64,
) -> (Vec<DeviceMeasurements>, ShareMeasurements) {
    let devices = (0..2u32)
        .map(|o| DeviceMeasurements {
            id: DeviceId {
                ordinal: o,
                name: "NVIDIA H200".into(),
                memory_bytes: 141 << 30,
                free_bytes: 140 << 30,
            },
            fp64: vec![
                rate_sample(4096, fp64[o as usize] * 0.8),
                rate_sample(8192, fp64[o as usize]),
            ],
            int8: vec![rate_sample(8192, 1.4e15)],
            link: link(single),
        })
        .collect();
    let share = ShareMeasurements {
        devices: vec![0, 1],
        link: link(together),
        splits: Vec::new(),
    };
    (devices, share)
}

/// A measured gpu-native split of an n^3 dgemm over GPUs 0 and 1.
fn measured_split(n: u64, seconds: f64) -> SplitSample {
    SplitSample {
        route: "gpu-native".into(),
        m: n,
        n,
        k: n,
        moduli: None,
        devices: vec![0, 1],
        seconds,
    }
}

#[test]
fn a_version_1_profile_still_loads_without_devices() {
    // a profile in format 1, no survey keys
    let mut v1: serde_json::Value =
        serde_json::from_str(include_str!("../../profiles/h200.json")).unwrap();
    v1["version"] = 1.into();
    let obj = v1.as_object_mut().unwrap();
    obj.remove("devices");
    obj.remove("host_share");
    let text = serde_json::to_string_pretty(&v1).unwrap();
    let p = Profile::from_json(&text).unwrap();
    assert!(p.devices.is_empty() && p.host_share.is_none());
    assert!(p.version < profile::PROFILE_VERSION);
    // Saving it writes no empty version-2 fields (readers of version 1 see the same keys).
    let back = serde_json::to_string(&p).unwrap();
    assert!(!back.contains("\"devices\"") && !back.contains("host_share"));
    // A version newer than this build's is refused, as before.
    v1["version"] = (profile::PROFILE_VERSION + 1).into();
    assert!(
        Profile::from_json(&v1.to_string())
            .unwrap_err()
            .contains("newer")
    );
}

#[test]
fn measurements_written_before_the_survey_parse_and_fit_as_before() {
    let text = include_str!("data/h200-before-survey.measurements.json");
    let m: Measurements = serde_json::from_str(text).unwrap();
    assert!(m.devices.is_empty() && m.share.is_none());
    let p = ozaki_core::engine::calibrate::fit_profile(&m, "h200", "test").unwrap();
    assert!(p.devices.is_empty() && p.host_share.is_none());
    assert_eq!(p.version, profile::PROFILE_VERSION);
}

#[test]
fn a_survey_merges_into_the_profile_and_round_trips() {
    let mut p = h200();
    let (devices, share) = survey([50e12, 40e12], 20e9, 38e9);
    merge_devices(&mut p, &devices, Some(&share));
    assert_eq!(p.devices.len(), 2);
    let d1 = p.device(1).unwrap();
    assert!(
        (d1.fp64_flops / 40e12 - 1.0).abs() < 1e-9,
        "largest survey shape's rate"
    );
    assert!((d1.int8_ops / 1.4e15 - 1.0).abs() < 1e-9);
    assert!((d1.h2d_staged / 20e9 - 1.0).abs() < 1e-6);
    let h = p.host_share.clone().unwrap();
    assert!((h.h2d_staged_all / 38e9 - 1.0).abs() < 1e-6);
    assert!(
        !h.shared(20e9),
        "38 GB/s for two devices of 20 is two links"
    );
    assert!(h.shared(30e9));
    // Version 2 on disk, and back.
    p.version = profile::PROFILE_VERSION;
    let text = serde_json::to_string_pretty(&p).unwrap();
    assert!(text.contains("\"devices\"") && text.contains("\"host_share\""));
    // (serde_json's float parsing may move a fitted value by an ulp: compare the new parts.)
    let back = Profile::from_json(&text).unwrap();
    assert_eq!(back.devices, p.devices);
    let (a, b) = (back.host_share.unwrap(), p.host_share.clone().unwrap());
    assert_eq!(a.devices, b.devices);
    assert!((a.h2d_staged_all / b.h2d_staged_all - 1.0).abs() < 1e-12);
    // A later survey replaces the earlier one instead of adding to it.
    let (devices, _) = survey([60e12, 60e12], 20e9, 20e9);
    merge_devices(&mut p, &devices[..1], None);
    assert_eq!(p.devices.len(), 1);
    assert!(p.host_share.is_none());
}

#[test]
fn a_measured_split_fits_the_host_assembly_term() {
    let mut p = h200();
    let (devices, mut share) = survey([50e12, 50e12], 20e9, 40e9);
    merge_devices(&mut p, &devices, Some(&share));
    let params = ozaki_core::devices::SplitParams::default();
    // Splits measured 1 ns per byte of C slower than the engine's price of their tiles.
    for n in [8192u64, 16384] {
        let shape = CallShape::gemm(n, n, n);
        let e =
            ozaki_core::engine::split::price(&p, &shape, Route::GpuNative, None, &[0, 1], &params)
                .unwrap();
        share
            .splits
            .push(measured_split(n, e.seconds + 8.0 * (n * n) as f64 * 1e-9));
    }
    merge_devices(&mut p, &devices, Some(&share));
    let h = p.host_share.unwrap();
    assert!(
        (h.assemble_s_per_byte / 1e-9 - 1.0).abs() < 1e-6,
        "{}",
        h.assemble_s_per_byte
    );
    assert!(h.split_overhead_s < 1e-9);
}

#[test]
fn the_engine_splits_only_when_the_priced_split_beats_one_gpu() {
    let big = CallShape::gemm(32768, 32768, 32768);
    // Two independent host links: the split pays and is chosen, reason and trace say so.
    let mut free = h200();
    let (devices, share) = survey([50e12, 50e12], 20e9, 40e9);
    merge_devices(&mut free, &devices, Some(&share));
    let e = Engine::new(free.clone(), 16).with_slots(vec![0, 1]);
    let d = e.decide(&big, Some(14));
    let s = d.split(d.route).expect("split chosen");
    assert_eq!(s.devices(), vec![0, 1]);
    assert!(
        d.prediction.reason.contains("split over GPUs [0, 1]"),
        "{}",
        d.prediction.reason
    );
    assert!(
        d.prediction
            .predicted_s
            .contains_key(&split_key(d.route, &[0, 1]))
    );
    // The same call in a one-slot process is never split.
    let one = Engine::new(free.clone(), 16).with_slots(vec![0]);
    let d1 = one.decide(&big, Some(14));
    assert!(d1.splits.is_empty() && d1.split(d1.route).is_none());
    assert_eq!(d1.prediction.predicted_s.len(), 3);
    // One GPU used twice (OZAKI_DEVICES=0,0): the tiles serialise, no gain, no split.
    let twice = Engine::new(free.clone(), 16).with_slots(vec![0, 0]);
    let d2 = twice.decide(&big, Some(14));
    assert!(d2.split(d2.route).is_none(), "{}", d2.prediction.reason);
    // A shared host link and a costly assembly: priced, shown, not taken.
    let mut shared = free;
    let (_, share) = survey([50e12, 50e12], 20e9, 20e9);
    merge_devices(&mut shared, &devices, Some(&share));
    shared.host_share.as_mut().unwrap().assemble_s_per_byte = 2e-9;
    let e = Engine::new(shared, 16).with_slots(vec![0, 1]);
    let shape = CallShape::gemm(16384, 16384, 4096);
    let d = e.decide(&shape, Some(14));
    assert!(!d.splits.is_empty());
    assert!(d.split(d.route).is_none(), "{}", d.prediction.reason);
    assert!(
        d.prediction.reason.contains("not split"),
        "{}",
        d.prediction.reason
    );
}

#[test]
fn split_decisions_are_cached_like_any_other() {
    let mut p = h200();
    let (devices, share) = survey([50e12, 50e12], 20e9, 40e9);
    merge_devices(&mut p, &devices, Some(&share));
    let e = Engine::new(p.clone(), 16).with_slots(vec![0, 1]);
    let s = CallShape::gemm(32768, 32768, 16384);
    let a = e.decide(&s, Some(14));
    assert!(Arc::ptr_eq(&a, &e.decide(&s, Some(14))));
    // The split's price is the busiest tile's route price plus the host terms.
    let sp = a
        .splits
        .iter()
        .find(|x| x.route == Route::GpuNative)
        .unwrap();
    let tile = CallShape { n: 16384, ..s };
    let one_tile = predict(&p, &tile, Route::GpuNative, None, 16).seconds;
    assert!(sp.seconds >= one_tile, "{} vs {one_tile}", sp.seconds);
}

/// What `ozaki calibrate --survey-only` recorded on 2x H200 (BENCHMARKS.md, "Several GPUs and MPI"): one staged transfer
/// size per device and one for both at once. A single size must still fit a bandwidth
/// (it fitted none before, so the profile said 0 GB/s and no shared-link entry).
#[test]
fn a_survey_with_one_transfer_size_fits_every_link() {
    let one = |bytes: u64, seconds: f64| {
        [Direction::H2d, Direction::D2h]
            .map(|direction| LinkSample {
                direction,
                memory: HostMemory::Staged,
                bytes,
                seconds,
            })
            .to_vec()
    };
    let (mut devices, mut share) = survey([57.7e12, 61.4e12], 25e9, 40e9);
    devices[0].link = one(545_259_520, 0.021_502_439);
    devices[1].link = one(545_259_520, 0.021_641_581);
    share.link = one(3_271_557_120, 0.144_929_283);
    let mut p = h200();
    merge_devices(&mut p, &devices, Some(&share));
    for d in &p.devices {
        assert!(
            (d.h2d_staged / 25.2e9 - 1.0).abs() < 0.01,
            "{}",
            d.h2d_staged
        );
        assert!(d.d2h_staged > 0.0);
    }
    let h = p.host_share.as_ref().expect("shared-link entry");
    assert!(
        (h.h2d_staged_all / 22.57e9 - 1.0).abs() < 0.01,
        "{}",
        h.h2d_staged_all
    );
}

/// Splits measured faster than the two-link measurement prices them (2x H200, BENCHMARKS.md "Several GPUs and MPI":
/// the links said "shared", 22.6 GB/s together vs 25.4 alone, yet 16384^3 and 32768^3 split
/// ran in 0.168 s and 0.967 s, 1.48x and 1.73x one GPU): the fitted share believes the
/// splits, and the engine then takes the large split.
#[test]
fn splits_faster_than_the_link_measurement_fit_the_share() {
    let (devices, mut share) = survey([57.7e12, 61.4e12], 25.4e9, 22.6e9);
    let mut linked = h200();
    merge_devices(&mut linked, &devices, Some(&share));
    assert!(linked.host_share.as_ref().unwrap().fitted_share.is_none());
    let params = ozaki_core::devices::SplitParams::default();
    let big = CallShape::gemm(32768, 32768, 32768);
    let before =
        ozaki_core::engine::split::price(&linked, &big, Route::GpuNative, None, &[0, 1], &params)
            .unwrap();
    assert!(
        !before.pays,
        "the link measurement alone prices the split as a loss"
    );
    for (n, seconds) in [(16384u64, 0.168), (32768, 0.967)] {
        share.splits.push(measured_split(n, seconds));
    }
    let mut fitted = h200();
    merge_devices(&mut fitted, &devices, Some(&share));
    let f = fitted
        .host_share
        .as_ref()
        .unwrap()
        .fitted_share
        .expect("fitted");
    assert!(f > ozaki_core::engine::split::link_share(&linked, 2), "{f}");
    let after =
        ozaki_core::engine::split::price(&fitted, &big, Route::GpuNative, None, &[0, 1], &params)
            .unwrap();
    assert!(after.pays && after.seconds < before.seconds);
}

/// `ozaki replay` and `ozaki explain` price a call once and decide from those estimates
/// (`decide_priced`, `decide_from_estimates`): the decision must be the one `decide` makes
/// itself, splits and all, for calls that split, calls that do not, a dsyrk, a call without
/// a product and a moduli count the contract cannot meet; and `decide_priced` shares
/// `decide`'s cache.
#[test]
fn deciding_from_the_callers_estimates_equals_deciding_alone() {
    let mut p = h200();
    let (devices, share) = survey([50e12, 50e12], 20e9, 40e9);
    merge_devices(&mut p, &devices, Some(&share));
    let shapes = [
        CallShape::gemm(32768, 32768, 32768),
        CallShape::gemm(16384, 16384, 4096),
        CallShape::gemm(64, 64, 110592),
        CallShape::gemm(8, 8, 8),
        CallShape::syrk(4096, 512),
        CallShape::gemm(0, 64, 64),
    ];
    for slots in [vec![0], vec![0, 1]] {
        for shape in &shapes {
            for r in [Some(14), Some(8), None] {
                let alone = Engine::new(p.clone(), 16).with_slots(slots.clone());
                let want = alone.decide_uncached(shape, r);
                let priced = Engine::new(p.clone(), 16).with_slots(slots.clone());
                let est = priced.estimates(shape, r);
                assert_eq!(
                    priced.decide_from_estimates(shape, r, &est),
                    want,
                    "{shape:?} {r:?}"
                );
                let d = priced.decide_priced(shape, r, &est);
                assert_eq!(*d, want, "{shape:?} {r:?}");
                assert!(Arc::ptr_eq(&d, &priced.decide(shape, r)), "{shape:?}");
            }
        }
    }
}
