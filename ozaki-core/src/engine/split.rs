//! Pricing one host-resident dgemm split over several GPUs ("the engine's cost
//! model knows the device count and prices the split").
//!
//! A split runs each tile of C ([`crate::devices::split_c`]) as an ordinary host-resident
//! call on its own device, so a tile is priced with the engine's usual route model
//! ([`super::model::predict`]) on a per-device copy of the profile in which
//!
//! - the fp64 and INT8 work models are scaled by the device's surveyed rate relative to
//!   `devices[0]`, the device the full model was measured on ([`DeviceProfile`]);
//! - the host link is what this device gets **while the others copy too**: its own staged
//!   bandwidth times `min(1, aggregate / (d x single))`, where `aggregate` is what `d`
//!   devices reached together in calibration ([`HostShare`]). A host whose devices share
//!   one link (aggregate about one device's bandwidth) sees every tile's transfers slow
//!   down by the device count, which is what decides whether a split pays for these
//!   transfer-heavy calls.
//!
//! [`crate::devices::price_split`] takes the busiest device (tiles sharing an ordinal add
//! up), and the executor's own host work is added explicitly: a fixed cost per split call
//! and a cost per byte of C assembled from the tiles, both fitted by calibration from a
//! measured split. Without a survey (a version-1 profile) every device is priced like the
//! profiled one and the link is assumed shared: the conservative guess, since an unmeasured
//! split should not be taken.

use super::model::{Term, predict};
use super::profile::{DeviceProfile, GpuProfile, HostShare, Profile};
use super::{CallShape, Residency};
use crate::devices::{SplitParams, SplitPlan, SplitPrice, Tile, price_split, split_c};
use crate::route::Route;
use crate::trace::Routine;

/// A priced split of one call on one GPU route.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitEstimate {
    /// The GPU route every tile runs.
    pub route: Route,
    /// The tiles.
    pub plan: SplitPlan,
    /// Busy seconds per device, without the host terms.
    pub price: SplitPrice,
    /// Predicted seconds of the whole split call: the busiest device plus the host terms.
    pub seconds: f64,
    /// The same route's one-device price.
    pub single_s: f64,
    /// Whether the split beats one device by the profile's switch margin, i.e. whether the
    /// engine takes it.
    pub pays: bool,
    /// Whether the devices were priced as sharing one host link.
    pub link_shared: bool,
    /// The priced pieces, for `ozaki explain` (per-device busy time, link share, host work).
    pub terms: Vec<Term>,
}

impl SplitEstimate {
    /// Ordinal of each tile, in tile order (the trace's `devices`).
    pub fn devices(&self) -> Vec<u32> {
        self.plan.tiles.iter().map(|t| t.device).collect()
    }
}

/// Whether a call can be split at all: a host-resident dgemm with a product to compute
/// (dsyrk's triangle and device-resident calls are not split).
pub fn splittable(shape: &CallShape) -> bool {
    shape.routine == Routine::Dgemm && shape.residency == Residency::Host && !shape.no_product()
}

/// The rate of `d` relative to the reference device (`devices[0]`): >1 means slower.
fn slowdown(reference: f64, own: f64) -> f64 {
    if reference > 0.0 && own > 0.0 {
        reference / own
    } else {
        1.0
    }
}

/// The profile a tile on `ordinal` is priced with, when `active` distinct devices copy at
/// once. Returns the profile and the link-share factor applied.
fn device_profile(profile: &Profile, ordinal: u32, active: usize) -> (Profile, f64) {
    let mut p = profile.clone();
    let reference = profile.devices.first();
    let own = profile.device(ordinal);
    let share = link_share(profile, active);
    if let Some(g) = p.gpu.as_mut() {
        if let (Some(r), Some(d)) = (reference, own) {
            scale_rates(g, r, d);
        }
        g.link.h2d_staged *= share;
        g.link.d2h_staged *= share;
    }
    (p, share)
}

/// Scales the work models and the staged link of `g` (measured on `r`) to device `d`.
fn scale_rates(g: &mut GpuProfile, r: &DeviceProfile, d: &DeviceProfile) {
    let fp = slowdown(r.fp64_flops, d.fp64_flops);
    let i8 = slowdown(r.int8_ops, d.int8_ops);
    for (m, f) in [(&mut g.fp64, fp), (&mut g.int8, i8)] {
        m.s_per_mnk *= f;
        m.s_per_nk *= f;
        m.s_per_mk *= f;
        m.s_per_mn *= f;
    }
    g.link.h2d_staged /= slowdown(r.h2d_staged, d.h2d_staged);
    g.link.d2h_staged /= slowdown(r.d2h_staged, d.d2h_staged);
}

/// Fraction of its own staged bandwidth each of `active` devices gets while all copy:
/// `min(1, aggregate / (active x single))`, the aggregate measured for the calibrated
/// device count (fewer active devices than measured are given the same aggregate; more get
/// no more). Without a measurement the link is taken as shared: `1 / active`.
pub fn link_share(profile: &Profile, active: usize) -> f64 {
    let active = active.max(1) as f64;
    if active <= 1.0 {
        return 1.0;
    }
    let single = single_h2d(profile);
    match &profile.host_share {
        Some(HostShare {
            fitted_share: Some(f),
            ..
        }) => f.clamp(1.0 / active, 1.0),
        Some(h) if h.h2d_staged_all > 0.0 && single > 0.0 => {
            (h.h2d_staged_all / (active * single)).min(1.0)
        }
        _ => 1.0 / active,
    }
}

/// The staged host → device bandwidth of the fastest surveyed device alone (the profile's
/// own link when nothing was surveyed).
fn single_h2d(profile: &Profile) -> f64 {
    profile
        .devices
        .iter()
        .map(|d| d.h2d_staged)
        .fold(0.0, f64::max)
        .max(if profile.devices.is_empty() {
            profile.gpu.as_ref().map_or(0.0, |g| g.link.h2d_staged)
        } else {
            0.0
        })
}

/// Whether the profile says the devices share one host link (no measurement: yes).
pub fn shared_link(profile: &Profile) -> bool {
    profile
        .host_share
        .as_ref()
        .is_none_or(|h: &HostShare| match h.fitted_share {
            Some(f) => f < 0.75,
            None => h.shared(single_h2d(profile)),
        })
}

/// The executor's host work for a split of an `m x n` C: (fixed s, per-byte s).
fn host_terms(profile: &Profile, shape: &CallShape) -> Vec<Term> {
    let Some(h) = &profile.host_share else {
        return Vec::new();
    };
    let bytes = 8.0 * shape.output_elems();
    vec![
        Term {
            name: "split-overhead",
            seconds: h.split_overhead_s,
            how:
                "fixed host cost per split call (tile threads, slot set-up), from a measured split"
                    .into(),
        },
        Term {
            name: "assemble",
            seconds: bytes * h.assemble_s_per_byte,
            how: format!(
                "{:.1} MB of C assembled from the tiles at {:.2} ns/B, from a measured split",
                bytes / 1e6,
                h.assemble_s_per_byte * 1e9
            ),
        },
    ]
}

/// Prices `route` for `shape` split over `slots` (`None`: not splittable, fewer than two
/// slots, C too small for two tiles, or the route cannot take a tile).
pub fn price(
    profile: &Profile,
    shape: &CallShape,
    route: Route,
    moduli: Option<u32>,
    slots: &[u32],
    params: &SplitParams,
) -> Option<SplitEstimate> {
    if slots.len() < 2 || !splittable(shape) || profile.gpu.is_none() {
        return None;
    }
    let plan = split_c(shape.m, shape.n, slots, params);
    if !plan.is_split() {
        return None;
    }
    let mut ordinals: Vec<u32> = plan.tiles.iter().map(|t| t.device).collect();
    ordinals.sort_unstable();
    ordinals.dedup();
    let active = ordinals.len();
    let per_device: Vec<(u32, Profile, f64)> = ordinals
        .iter()
        .map(|&d| {
            let (p, share) = device_profile(profile, d, active);
            (d, p, share)
        })
        .collect();
    let mut excluded = false;
    let tile_shape = |t: &Tile| CallShape {
        m: t.rows,
        n: t.cols,
        ..*shape
    };
    let price = price_split(&plan, |t| {
        let p = per_device
            .iter()
            .find(|(d, ..)| *d == t.device)
            .map(|(_, p, _)| p)
            .unwrap_or(profile);
        let e = predict(p, &tile_shape(t), route, moduli, 0);
        if e.excluded.is_some() || !e.seconds.is_finite() {
            excluded = true;
        }
        e.seconds
    });
    if excluded {
        return None;
    }
    let share = per_device.first().map_or(1.0, |x| x.2);
    let mut terms: Vec<Term> = price
        .per_device_s
        .iter()
        .map(|(d, s)| {
            let tiles: Vec<String> = plan
                .tiles
                .iter()
                .filter(|t| t.device == *d)
                .map(|t| format!("{}x{}", t.rows, t.cols))
                .collect();
            let rel = profile
                .device(*d)
                .map_or("not surveyed: priced as the profiled GPU".to_string(), |x| {
                    format!("{:.1} TFLOP/s fp64 surveyed", x.fp64_flops / 1e12)
                });
            Term {
                name: "device",
                seconds: *s,
                how: format!(
                    "GPU {d}: tile(s) {} x k={} priced by the {route} model ({rel}), host link at {:.0}% of its own",
                    tiles.join(", "),
                    shape.k,
                    share * 100.0
                ),
            }
        })
        .collect();
    let host = host_terms(profile, shape);
    let seconds = price.total_s + host.iter().map(|t| t.seconds).sum::<f64>();
    terms.extend(host);
    let single_s = predict(profile, shape, route, moduli, 0).seconds;
    Some(SplitEstimate {
        route,
        plan,
        price,
        seconds,
        single_s,
        pays: seconds * profile.choice.min_gain <= single_s,
        link_shared: shared_link(profile),
        terms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::profile::{DeviceId, HostShare};

    fn h200() -> Profile {
        Profile::built_in("h200").expect("ships")
    }

    fn survey(p: &mut Profile, ordinals: &[u32], fp64: f64) {
        let g = p.gpu.clone().unwrap();
        p.devices = ordinals
            .iter()
            .map(|&o| DeviceProfile {
                id: DeviceId {
                    ordinal: o,
                    name: g.name.clone(),
                    ..Default::default()
                },
                fp64_flops: fp64,
                int8_ops: 1.4e15,
                h2d_staged: g.link.h2d_staged,
                d2h_staged: g.link.d2h_staged,
            })
            .collect();
    }

    /// gpu-native split over GPUs 0 and 1 with the default tile limits.
    fn native_on_two(p: &Profile, shape: &CallShape) -> SplitEstimate {
        price(
            p,
            shape,
            Route::GpuNative,
            None,
            &[0, 1],
            &SplitParams::default(),
        )
        .unwrap()
    }

    fn with_links(aggregate_factor: f64) -> Profile {
        let mut p = h200();
        survey(&mut p, &[0, 1], 50e12);
        let single = p.gpu.as_ref().unwrap().link.h2d_staged;
        p.host_share = Some(HostShare {
            devices: vec![0, 1],
            h2d_staged_all: aggregate_factor * single,
            d2h_staged_all: aggregate_factor * single,
            ..Default::default()
        });
        p
    }

    #[test]
    fn independent_links_make_a_large_split_nearly_twice_as_fast() {
        let p = with_links(2.0);
        let shape = CallShape::gemm(32768, 32768, 32768);
        let single = predict(&p, &shape, Route::GpuNative, None, 0).seconds;
        let s = native_on_two(&p, &shape);
        let speedup = single / s.seconds;
        assert!(!s.link_shared);
        assert!(speedup > 1.5 && speedup < 2.05, "speed-up {speedup}");
        assert_eq!(s.devices(), vec![0, 1]);
        assert_eq!(s.price.per_device_s.len(), 2);
    }

    #[test]
    fn a_shared_host_link_and_host_assembly_can_make_the_split_lose() {
        let free = with_links(2.0);
        let mut shared = with_links(1.0);
        let shape = CallShape::gemm(16384, 16384, 2048);
        let a = native_on_two(&free, &shape);
        let b = native_on_two(&shared, &shape);
        assert!(
            b.link_shared && b.seconds > a.seconds,
            "{} vs {}",
            b.seconds,
            a.seconds
        );
        // The measured assembly cost is an explicit term and can outweigh the gain.
        shared.host_share.as_mut().unwrap().assemble_s_per_byte = 1.0 / 2e9;
        let c = native_on_two(&shared, &shape);
        let single = predict(&shared, &shape, Route::GpuNative, None, 0).seconds;
        assert!(
            c.seconds > single,
            "split {} vs one GPU {single}",
            c.seconds
        );
        assert!(
            c.terms
                .iter()
                .any(|t| t.name == "assemble" && t.seconds > 0.9)
        );
    }

    #[test]
    fn a_slower_device_is_the_busiest_and_sets_the_price() {
        let mut p = with_links(2.0);
        p.devices[1].fp64_flops = 5e12;
        let shape = CallShape::gemm(32768, 32768, 32768);
        let s = native_on_two(&p, &shape);
        assert!(
            s.price.per_device_s[&1] > 1.2 * s.price.per_device_s[&0],
            "{:?} {:?}",
            s.price,
            s.terms
        );
        assert_eq!(s.price.total_s, s.price.per_device_s[&1]);
    }

    #[test]
    fn without_a_survey_the_link_counts_as_shared() {
        let mut p = h200();
        (p.devices, p.host_share) = (Vec::new(), None);
        assert!(shared_link(&p));
        assert_eq!(link_share(&p, 2), 0.5);
        assert_eq!(link_share(&p, 1), 1.0);
    }

    #[test]
    fn only_large_host_dgemms_with_two_slots_are_split() {
        let p = with_links(2.0);
        let params = SplitParams::default();
        let big = CallShape::gemm(16384, 16384, 16384);
        assert!(price(&p, &big, Route::GpuOzaki, Some(14), &[0], &params).is_none());
        assert!(
            price(
                &p,
                &CallShape::gemm(1024, 1024, 1024),
                Route::GpuNative,
                None,
                &[0, 1],
                &params
            )
            .is_none()
        );
        assert!(
            price(
                &p,
                &CallShape::syrk(16384, 16384),
                Route::GpuNative,
                None,
                &[0, 1],
                &params
            )
            .is_none()
        );
        let dev = big.with_residency(Residency::Device);
        assert!(price(&p, &dev, Route::GpuNative, None, &[0, 1], &params).is_none());
        // No moduli count meets the contract: the tiles cannot run gpu-ozaki either.
        assert!(price(&p, &big, Route::GpuOzaki, None, &[0, 1], &params).is_none());
        assert!(price(&p, &big, Route::GpuOzaki, Some(14), &[0, 1], &params).is_some());
    }
}
