//! Which side of the host/GPU split a program's recent work runs faster on, as the engine
//! priced it: exponentially weighted sums of the quiet GPU price and the vendor price of the
//! calls whose two prices were close enough to be compared ([`Sides::note`]).
//!
//! Why it matters: a vendor call leaves its thread pool spinning ([`super::wake`]), and a GPU
//! call made in that window stages its operands several times slower. Priced call by call,
//! that wake keeps a program on the vendor once it is there: each GPU-bound call comes right
//! after a vendor call and is priced with the wake, loses, runs on the vendor and leaves the
//! next wake. SciPy's LOBPCG (block 128) ran its 128 x 128 x 110592 products on the vendor at
//! 23 ms each that way, where the GPU takes 9-10 ms on a quiet host; with every call forced to
//! the GPU the program ran 1.16x, under `auto` 0.96x (BENCHMARKS.md, "Real programs under the
//! shim"). When the program's calls together run clearly faster on the GPU
//! ([`Sides::gpu_side`]), the wake is a cost of switching sides, paid by whichever route
//! leaves the vendor's threads spinning in front of the next GPU call: the shim then charges a
//! vendor run with the wake it leaves as well as the GPU run with the wake it finds.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Calls over which the sums weigh the past: each new price weighs 1/SIDE_SPAN.
pub const SIDE_SPAN: f64 = 32.0;

/// The program is on the GPU side when its vendor prices sum to at least this many times its
/// quiet GPU prices.
pub const GPU_SIDE: f64 = 1.5;

/// Calls noted before the sums are trusted.
pub const MIN_CALLS: u32 = 8;

/// The two sums (see the module docs). Updates from concurrent callers may interleave; each
/// sum stays a weighted sum of noted prices, which is all the comparison needs.
#[derive(Debug, Default)]
pub struct Sides {
    gpu_s: AtomicU64,
    vendor_s: AtomicU64,
    calls: AtomicU32,
}

fn decay(sum: &AtomicU64, add: f64) {
    let keep = 1.0 - 1.0 / SIDE_SPAN;
    let _ = sum.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
        Some((f64::from_bits(bits) * keep + add).to_bits())
    });
}

impl Sides {
    /// Notes one call priced `gpu_s` on a quiet host's GPU and `vendor_s` on the vendor (both
    /// corrected by what the process measured; no queue, no wake). Non-finite or non-positive
    /// prices are ignored.
    pub fn note(&self, gpu_s: f64, vendor_s: f64) {
        if !(gpu_s.is_finite() && vendor_s.is_finite() && gpu_s > 0.0 && vendor_s > 0.0) {
            return;
        }
        decay(&self.gpu_s, gpu_s);
        decay(&self.vendor_s, vendor_s);
        let _ = self
            .calls
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
    }

    /// Whether the recent calls run clearly faster on the GPU: at least [`MIN_CALLS`] noted
    /// and their vendor prices at least [`GPU_SIDE`] times their quiet GPU prices.
    pub fn gpu_side(&self) -> bool {
        self.calls.load(Ordering::Relaxed) >= MIN_CALLS
            && f64::from_bits(self.vendor_s.load(Ordering::Relaxed))
                >= GPU_SIDE * f64::from_bits(self.gpu_s.load(Ordering::Relaxed))
    }

    /// Whether a call the vendor would take goes to the GPU once both routes pay a wake: the
    /// program is on the GPU side and the vendor run leaves one (`switch_s` > 0), and the
    /// vendor's `vendor_s` plus `switch_s` is at least `margin` times the GPU's own price plus
    /// the wake it finds. `gpu_s` is the GPU's price with that wake (`wake_s`) in it.
    pub fn switches_to_gpu(
        &self,
        vendor_s: f64,
        switch_s: f64,
        gpu_s: f64,
        wake_s: f64,
        margin: f64,
    ) -> bool {
        switch_s > 0.0
            && self.gpu_side()
            && vendor_s + switch_s >= margin * (gpu_s - wake_s).max(0.0) + wake_s
    }

    /// The recent vendor prices over the quiet GPU prices (NaN before any call), for the
    /// trace's reasons.
    pub fn ratio(&self) -> f64 {
        f64::from_bits(self.vendor_s.load(Ordering::Relaxed))
            / f64::from_bits(self.gpu_s.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program whose calls run twice as fast on the GPU is on its side once enough calls
    /// were noted, and leaves it when its recent calls favour the vendor.
    #[test]
    fn the_side_follows_the_recent_calls() {
        let s = Sides::default();
        for _ in 0..MIN_CALLS - 1 {
            s.note(0.010, 0.023);
        }
        assert!(!s.gpu_side(), "too few calls to tell");
        s.note(0.010, 0.023);
        assert!(s.gpu_side());
        assert!((s.ratio() - 2.3).abs() < 1e-9);
        for _ in 0..2 * SIDE_SPAN as usize {
            s.note(0.020, 0.016);
        }
        assert!(!s.gpu_side(), "ratio {}", s.ratio());
    }

    /// The sums weigh time: one large GPU-bound call outweighs many small vendor-bound ones,
    /// and unusable prices change nothing.
    #[test]
    fn large_calls_weigh_more_and_bad_prices_are_ignored() {
        let s = Sides::default();
        for _ in 0..MIN_CALLS {
            s.note(0.0002, 0.0001);
        }
        assert!(!s.gpu_side());
        s.note(0.010, 0.050);
        assert!(s.gpu_side(), "ratio {}", s.ratio());
        let before = s.ratio();
        for bad in [f64::NAN, f64::INFINITY, 0.0, -1.0] {
            s.note(bad, 0.01);
            s.note(0.01, bad);
        }
        assert_eq!(s.ratio(), before);
    }
}
