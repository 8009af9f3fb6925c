//! The vendor's wake as this process sees it (`ozaki_core::engine::wake`): when the last
//! vendor call big enough to run on the vendor's threads returned, and what that adds to a
//! GPU call decided now.
//!
//! Only products the vendor runs on its threads ([`threaded`]) are noted: smaller ones run on
//! the caller's thread, leave no pool spinning, and skip the clock read, so the small calls
//! that dominate call counts pay nothing for this.

use ozaki_core::engine::choose::Decision;
use ozaki_core::engine::profile::Profile;
use ozaki_core::engine::wake::{VendorWake, threaded};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Nanoseconds after [`anchor`] at which the last such vendor call returned, plus one (0:
/// none yet).
static LAST_RETURN_NS: AtomicU64 = AtomicU64::new(0);

fn anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    anchor().elapsed().as_nanos() as u64 + 1
}

/// The wake `profile` measured, as the vendor's pool of this process leaves it: its window no
/// longer than the pool's spin when the vendor is an OpenBLAS whose timeout the shim knows
/// (`ozaki_core::engine::spin`, [`crate::vendor_spin::vendor_timeout_log2`]).
pub fn measured(profile: &Profile) -> Option<VendorWake> {
    ozaki_core::engine::spin::bounded(profile.cpu.wake, crate::vendor_spin::vendor_timeout_log2())
}

/// A vendor call of `mnk` multiply-adds has just returned.
pub fn vendor_returned(mnk: u64) {
    if threaded(mnk) {
        LAST_RETURN_NS.fetch_max(now_ns(), Ordering::Relaxed);
    }
}

/// Seconds since the last vendor call of [`THREADED_MNK`](ozaki_core::engine::wake::THREADED_MNK)
/// or more returned; `None` before the first.
fn since_s() -> Option<f64> {
    match LAST_RETURN_NS.load(Ordering::Relaxed) {
        0 => None,
        at => Some(now_ns().saturating_sub(at) as f64 * 1e-9),
    }
}

/// Extra seconds the GPU route of `d` is priced with when decided now: [`extra_at`] the time
/// since the last threaded vendor call returned, read only when there is something to
/// stretch (a measured wake and host copies).
pub fn extra_s(wake: Option<&VendorWake>, d: &Decision) -> f64 {
    match wake {
        Some(w) if d.gpu_host_s > 0.0 => extra_at(w, d, since_s()),
        _ => 0.0,
    }
}

/// What a vendor run of the call of `mnk` multiply-adds decided as `d` would add to the host
/// copies of a GPU call like it made right after it returns: its GPU route's copies
/// stretched by the wake's slowdown when the vendor runs it on its threads ([`threaded`]),
/// else 0 (no pool left spinning). Reads no clock.
pub fn left_s(wake: Option<&VendorWake>, d: &Decision, mnk: u64) -> f64 {
    wake.map_or(0.0, |w| w.left_by(mnk, d.gpu_host_s))
}

/// Extra seconds the GPU route of `d` is priced with when decided `since_s` seconds after
/// the last threaded vendor call returned: its host copies stretched by `wake`'s slowdown
/// inside the window, 0 outside it or before any such call.
fn extra_at(wake: &VendorWake, d: &Decision, since_s: Option<f64>) -> f64 {
    match since_s {
        Some(s) if wake.covers(s) => wake.extra_s(d.gpu_host_s),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::engine::CallShape;
    use ozaki_core::engine::choose::Engine;
    use ozaki_core::engine::profile::Profile;
    use ozaki_core::engine::wake::THREADED_MNK;

    /// A host-resident GPU decision is priced with its staged copies stretched inside the
    /// window only; a device-resident one has no host copies to stretch.
    #[test]
    fn only_host_copies_inside_the_window_are_stretched() {
        let e = Engine::new(Profile::built_in("h200").unwrap(), 16);
        let d = e.decide(&CallShape::gemm(4096, 4096, 4096), Some(14));
        assert!(d.gpu_host_s > 0.0, "{d:?}");
        let w = VendorWake {
            window_s: 0.1,
            copy_slowdown: 3.0,
        };
        let extra = extra_at(&w, &d, Some(0.05));
        assert!((extra - 2.0 * d.gpu_host_s).abs() < 1e-12, "{extra}");
        assert_eq!(extra_at(&w, &d, Some(0.2)), 0.0);
        assert_eq!(extra_at(&w, &d, None), 0.0);
        assert_eq!(extra_s(None, &d), 0.0);
        let dev = e.decide_device(&CallShape::gemm(4096, 4096, 4096), Some(14));
        assert_eq!(extra_at(&w, &dev, Some(0.0)), 0.0);
        assert_eq!(extra_s(Some(&w), &dev), 0.0);
    }

    /// A threaded vendor run leaves the wake a GPU call of its shape would find; one on the
    /// caller's thread, or a profile without a measured wake, leaves none.
    #[test]
    fn a_threaded_vendor_run_leaves_its_shapes_wake() {
        let e = Engine::new(Profile::built_in("h200").unwrap(), 16);
        let d = e.decide(&CallShape::gemm(4096, 4096, 4096), Some(14));
        let w = VendorWake {
            window_s: 0.1,
            copy_slowdown: 3.0,
        };
        let left = left_s(Some(&w), &d, 4096 * 4096 * 4096);
        assert!((left - 2.0 * d.gpu_host_s).abs() < 1e-12, "{left}");
        assert_eq!(left_s(Some(&w), &d, THREADED_MNK - 1), 0.0);
        assert_eq!(left_s(None, &d, 4096 * 4096 * 4096), 0.0);
    }

    /// Small vendor calls leave no wake behind; a threaded one starts it now.
    #[test]
    fn only_threaded_vendor_calls_are_noted() {
        assert!(!threaded(THREADED_MNK - 1) && threaded(THREADED_MNK));
        vendor_returned(THREADED_MNK);
        let s = since_s().unwrap();
        assert!((0.0..1.0).contains(&s), "{s}");
    }
}
