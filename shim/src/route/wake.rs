//! The vendor's wake as this process sees it (`ozaki_core::engine::wake`): when the last
//! calls big enough to run on the vendor's threads returned, from the vendor and from the
//! GPU, and what that adds to the call decided now.
//!
//! The wake is a cost of switching between the two. A GPU call decided right after a vendor
//! call stages its operands beside the vendor's spinning threads, so its host copies are
//! priced stretched. A vendor call decided right after a GPU call leaves those threads
//! spinning for the next GPU call, so the vendor is priced with what that call would lose.
//! A program whose calls follow one another thus keeps to the side it is on unless the other
//! wins by more than the switch costs, and a process whose GPU calls come far apart pays
//! nothing.
//!
//! Only products of at least [`THREADED_MNK`] multiply-adds are noted: smaller ones run on
//! the caller's thread, leave no pool spinning, and skip the clock read, so the small calls
//! that dominate call counts pay nothing for this.

use ozaki_core::engine::choose::Decision;
use ozaki_core::engine::wake::{THREADED_MNK, VendorWake};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Nanoseconds after [`anchor`] at which the last threaded vendor call returned, plus one
/// (0: none yet).
static VENDOR_NS: AtomicU64 = AtomicU64::new(0);

/// The same for the last GPU call of that size.
static GPU_NS: AtomicU64 = AtomicU64::new(0);

fn anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    anchor().elapsed().as_nanos() as u64 + 1
}

/// Whether a call of `mnk` multiply-adds is taken to run on the vendor's threads.
fn threaded(mnk: u64) -> bool {
    mnk >= THREADED_MNK
}

/// A vendor call of `mnk` multiply-adds has just returned.
pub fn vendor_returned(mnk: u64) {
    if threaded(mnk) {
        VENDOR_NS.fetch_max(now_ns(), Ordering::Relaxed);
    }
}

/// A GPU call of `mnk` multiply-adds has just returned.
pub fn gpu_returned(mnk: u64) {
    if threaded(mnk) {
        GPU_NS.fetch_max(now_ns(), Ordering::Relaxed);
    }
}

/// Which side the last threaded call ran on, and how many seconds ago it returned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Last {
    /// No threaded call yet.
    None,
    /// A vendor call.
    Vendor(f64),
    /// A GPU call.
    Gpu(f64),
}

/// The side and age of the last threaded call.
pub fn last() -> Last {
    side(
        VENDOR_NS.load(Ordering::Relaxed),
        GPU_NS.load(Ordering::Relaxed),
        now_ns(),
    )
}

/// [`last`] from the two return times and the time now (0: no return yet).
fn side(vendor_ns: u64, gpu_ns: u64, now_ns: u64) -> Last {
    let age = |at: u64| now_ns.saturating_sub(at) as f64 * 1e-9;
    match (vendor_ns, gpu_ns) {
        (0, 0) => Last::None,
        (v, g) if v >= g => Last::Vendor(age(v)),
        (_, g) => Last::Gpu(age(g)),
    }
}

/// What the wake adds to each side of the decision `d` after `last`, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Priced {
    /// Added to the GPU route: its host copies beside the vendor's spinning threads.
    pub on_gpu_s: f64,
    /// Added to the vendor: what its threads would cost the next GPU call's copies.
    pub on_vendor_s: f64,
}

/// The wake `wake` puts on `d` after `last`: the GPU route's host copies stretched by the
/// slowdown when a threaded vendor call returned within the window, the same amount on the
/// vendor when a GPU call did, nothing on a quiet host, without a measured wake or without
/// host copies.
pub fn priced(wake: Option<&VendorWake>, d: &Decision, last: Last) -> Priced {
    let Some(w) = wake else {
        return Priced::default();
    };
    let extra = w.extra_s(d.gpu_host_s);
    match last {
        Last::Vendor(s) if w.covers(s) => Priced {
            on_gpu_s: extra,
            on_vendor_s: 0.0,
        },
        Last::Gpu(s) if w.covers(s) => Priced {
            on_gpu_s: 0.0,
            on_vendor_s: extra,
        },
        _ => Priced::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::engine::CallShape;
    use ozaki_core::engine::choose::Engine;
    use ozaki_core::engine::profile::Profile;

    /// Right after a vendor call the GPU route's host copies are stretched; right after a GPU
    /// call the vendor carries the same amount; outside the window, without a wake or on a
    /// device-resident call (no host copies) nothing is added.
    #[test]
    fn the_wake_lands_on_the_side_the_last_call_did_not_run_on() {
        let e = Engine::new(Profile::built_in("h200").unwrap(), 16);
        let d = e.decide(&CallShape::gemm(4096, 4096, 4096), Some(14));
        assert!(d.gpu_host_s > 0.0, "{d:?}");
        let w = VendorWake {
            window_s: 0.1,
            copy_slowdown: 3.0,
        };
        let extra = 2.0 * d.gpu_host_s;
        let after_vendor = priced(Some(&w), &d, Last::Vendor(0.05));
        assert!((after_vendor.on_gpu_s - extra).abs() < 1e-12 && after_vendor.on_vendor_s == 0.0);
        let after_gpu = priced(Some(&w), &d, Last::Gpu(0.05));
        assert!((after_gpu.on_vendor_s - extra).abs() < 1e-12 && after_gpu.on_gpu_s == 0.0);
        for quiet in [Last::Vendor(0.2), Last::Gpu(0.2), Last::None] {
            assert_eq!(priced(Some(&w), &d, quiet), Priced::default());
        }
        assert_eq!(priced(None, &d, Last::Vendor(0.0)), Priced::default());
        let dev = e.decide_device(&CallShape::gemm(4096, 4096, 4096), Some(14));
        assert_eq!(priced(Some(&w), &dev, Last::Vendor(0.0)), Priced::default());
    }

    /// Small calls leave no wake behind; the latest threaded return names the side.
    #[test]
    fn the_latest_threaded_return_names_the_side() {
        assert!(!threaded(THREADED_MNK - 1) && threaded(THREADED_MNK));
        assert_eq!(side(0, 0, 5), Last::None);
        assert_eq!(side(2_000_000_000, 1, 3_000_000_000), Last::Vendor(1.0));
        assert_eq!(side(1, 2_500_000_000, 3_000_000_000), Last::Gpu(0.5));
        vendor_returned(THREADED_MNK);
        assert!(!matches!(last(), Last::None));
    }
}
