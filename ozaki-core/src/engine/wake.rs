//! What a vendor call leaves behind on the host: its thread pool keeps busy-waiting for new
//! work for a while after the call returned (OpenBLAS's threads spin about 2^28 cycles,
//! Intel OpenMP's `KMP_BLOCKTIME` is 200 ms), so a GPU call that starts in that window stages
//! its operands through pinned memory on cores the spinning threads hold, and its host copies
//! run several times slower than on a quiet host.
//!
//! `ozaki calibrate` measures it ([`fit`] over [`WakePoint`]s: a multi-threaded host copy of
//! the size the GPU routes stage, timed at several delays after a vendor call and on a quiet
//! host), and the profile keeps the fit ([`VendorWake`]). The shim then prices a GPU call
//! decided inside the window with its host copies stretched by the measured slowdown
//! ([`VendorWake::extra_s`]), so that a program alternating vendor and GPU calls in quick
//! succession is not sent to the GPU at quiet-host prices it does not get.

use serde::{Deserialize, Serialize};

/// Products from this many multiply-adds up are taken to run on the vendor's threads and so
/// to leave its pool spinning (OpenBLAS threads a gemm from m·n·k above 2^18); smaller ones
/// run on the caller's thread.
pub const THREADED_MNK: u64 = 1 << 18;

/// Whether a product of `mnk` multiply-adds is taken to run on the vendor's threads
/// ([`THREADED_MNK`]).
pub fn threaded(mnk: u64) -> bool {
    mnk >= THREADED_MNK
}

/// A copy within this factor of its quiet-host time counts as unaffected: the copies a
/// spinning pool slows run 2-8x their quiet time, and a quiet 16-core host's copies of this
/// size vary by up to 1.3x.
pub const QUIET_WITHIN: f64 = 1.5;

/// How a vendor call slows the host copies made after it returned.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VendorWake {
    /// Seconds after a vendor call returns during which host copies run slower: the first
    /// measured delay from which on every copy was within [`QUIET_WITHIN`] of quiet (the
    /// largest delay measured when none was: a lower bound).
    pub window_s: f64,
    /// A host copy's time inside the window over its time on a quiet host (the median of the
    /// delays measured inside the window; at least 1).
    pub copy_slowdown: f64,
}

impl VendorWake {
    /// Extra seconds host copies priced at `host_s` on a quiet host take inside the window.
    pub fn extra_s(&self, host_s: f64) -> f64 {
        if host_s.is_finite() && host_s > 0.0 {
            host_s * (self.copy_slowdown - 1.0).max(0.0)
        } else {
            0.0
        }
    }

    /// What a vendor run of a product of `mnk` multiply-adds leaves in front of a GPU call
    /// whose host copies are priced `host_s` on a quiet host: those copies stretched
    /// ([`VendorWake::extra_s`]) when the vendor runs it on its threads ([`threaded`]), else
    /// 0 (no pool left spinning).
    pub fn left_by(&self, mnk: u64, host_s: f64) -> f64 {
        if threaded(mnk) {
            self.extra_s(host_s)
        } else {
            0.0
        }
    }

    /// Whether a call decided `since_s` seconds after the last vendor call returned falls in
    /// the window.
    pub fn covers(&self, since_s: f64) -> bool {
        since_s >= 0.0 && since_s < self.window_s
    }
}

/// One measurement: a host copy `delay_s` after a vendor call returned, over the same copy on
/// a quiet host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WakePoint {
    /// Seconds between the vendor call's return and the copy's start.
    pub delay_s: f64,
    /// Copy time / quiet-host copy time.
    pub slowdown: f64,
}

/// A copy near the call this many times slower than the fastest copy at any delay shows a
/// wake above whatever else kept the host busy (see [`fit`]).
pub const WAKE_OVER_FLOOR: f64 = 2.0;

/// The wake shows in one of this many first delays or not at all: the copy made right as the
/// call returns can run nearly quiet while the pool settles into its spin (an H100 host: 1.20x
/// at 0 ms, then 1.65-1.74x from 10 to 100 ms, quiet from 150 ms).
pub const WAKE_SHOWS_WITHIN: usize = 2;

/// The wake measured by `points` (any order): the window runs from the vendor call's return
/// to the first delay, after the wake showed, whose copy ran within [`QUIET_WITHIN`] of quiet
/// (a pool that has gone to sleep does not wake by itself: a slow copy after that is another
/// process's noise), and the slowdown is the median of the slow copies before it. `None`
/// when none of the first [`WAKE_SHOWS_WITHIN`] delays' copies ran slow, or nothing usable
/// was measured.
///
/// "Quiet" is the host's level during the measurement: where other work slowed every copy
/// (a calibration beside another busy process), or slowed the quiet-host copies the
/// slowdowns are measured against, the fastest copy over all delays is that level, and the
/// window ends within [`QUIET_WITHIN`] of it, provided a copy among the first delays ran at
/// least [`WAKE_OVER_FLOOR`] times slower (else the level is taken as the quiet host's, and
/// copies slow at every delay make the window the largest delay).
pub fn fit(points: &[WakePoint]) -> Option<VendorWake> {
    let mut p: Vec<WakePoint> = points
        .iter()
        .copied()
        .filter(|p| p.delay_s.is_finite() && p.delay_s >= 0.0 && p.slowdown.is_finite())
        .collect();
    p.sort_by(|a, b| a.delay_s.total_cmp(&b.delay_s));
    let lead = &p[..p.len().min(WAKE_SHOWS_WITHIN)];
    let floor = p.iter().map(|q| q.slowdown).fold(f64::INFINITY, f64::min);
    let near = lead
        .iter()
        .map(|q| q.slowdown)
        .fold(f64::NEG_INFINITY, f64::max);
    let level = if near >= WAKE_OVER_FLOOR * floor {
        floor
    } else {
        1.0
    };
    let quiet = |q: &WakePoint| q.slowdown < QUIET_WITHIN * level;
    let start = lead.iter().position(|q| !quiet(q))?;
    let end = p[start..]
        .iter()
        .position(quiet)
        .map_or(p.len(), |i| start + i);
    let window_s = match p.get(end) {
        Some(q) => q.delay_s,
        None => p.last()?.delay_s,
    };
    let mut inside: Vec<f64> = p[start..end].iter().map(|q| q.slowdown).collect();
    inside.sort_by(f64::total_cmp);
    let copy_slowdown = inside[inside.len() / 2];
    (window_s > 0.0).then_some(VendorWake {
        window_s,
        copy_slowdown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(v: &[(f64, f64)]) -> Vec<WakePoint> {
        v.iter()
            .map(|&(delay_s, slowdown)| WakePoint { delay_s, slowdown })
            .collect()
    }

    /// OpenBLAS-like: copies within 0.1 s of the call run 3-4x slower, later ones quiet.
    #[test]
    fn the_window_ends_at_the_first_delay_from_which_copies_run_quiet() {
        let w = fit(&points(&[
            (0.2, 1.05),
            (0.0, 4.0),
            (0.01, 3.6),
            (0.05, 3.1),
            (0.1, 1.1),
            (0.4, 0.98),
            (0.025, 3.4),
        ]))
        .unwrap();
        assert_eq!(w.window_s, 0.1);
        assert_eq!(w.copy_slowdown, 3.6);
        assert!(w.covers(0.05) && !w.covers(0.1) && !w.covers(-1.0));
        assert!((w.extra_s(0.01) - 0.026).abs() < 1e-12);
    }

    /// A slow copy after the first quiet one is noise (another process on the machine): the
    /// window ends at the first quiet copy, and a vendor whose first copy ran quiet has none.
    #[test]
    fn the_first_quiet_copy_ends_the_window() {
        let w = fit(&points(&[(0.0, 2.0), (0.05, 1.0), (0.1, 1.9), (0.2, 1.0)])).unwrap();
        assert_eq!((w.window_s, w.copy_slowdown), (0.05, 2.0));
        let noisy = [(0.0, 1.02), (0.1, 1.0), (0.2, 2.1), (0.3, 1.8), (0.4, 2.5)];
        assert_eq!(fit(&points(&noisy)), None);
    }

    /// Measured on a 2-core machine beside another busy process (a pool spinning 0.12 s after
    /// each call): every copy ran at least 1.5x its quiet time, yet the wake still ends where
    /// the copies fall to that level, not at the largest delay.
    #[test]
    fn a_host_busy_at_every_delay_still_ends_the_window_where_the_pool_sleeps() {
        let busy = [
            (0.0, 3.87),
            (0.01, 2.80),
            (0.025, 2.90),
            (0.05, 2.67),
            (0.1, 1.74),
            (0.15, 1.92),
            (0.2, 1.53),
            (0.3, 2.11),
            (0.4, 1.86),
        ];
        let w = fit(&points(&busy)).unwrap();
        assert_eq!((w.window_s, w.copy_slowdown), (0.1, 2.90));
        // A busy moment slowed the quiet-host copies instead (the later copies ran 0.44-0.76x
        // of them): the window still ends where the copies fall to their level.
        let slow_reference = [
            (0.0, 1.63),
            (0.01, 1.39),
            (0.025, 1.50),
            (0.05, 1.45),
            (0.1, 0.74),
            (0.15, 0.44),
            (0.2, 0.76),
            (0.3, 0.64),
            (0.4, 0.67),
        ];
        let w = fit(&points(&slow_reference)).unwrap();
        assert_eq!((w.window_s, w.copy_slowdown), (0.15, 1.45));
        // The same copies without the clear step after the call: no level to measure from.
        let flat = [(0.0, 2.2), (0.1, 1.8), (0.2, 1.6), (0.4, 1.7)];
        assert_eq!(fit(&points(&flat)).unwrap().window_s, 0.4);
    }

    /// Measured by `ozaki calibrate` on an H100 host's OpenBLAS: the copy made as the call
    /// returned ran nearly quiet, the next ones 1.65-1.74x until 150 ms. That is a wake of
    /// 0.15 s, not none (the first copy alone had made it none).
    #[test]
    fn a_nearly_quiet_copy_at_the_return_does_not_hide_the_wake_after_it() {
        let h100 = [
            (0.0, 1.20),
            (0.01, 1.65),
            (0.025, 1.74),
            (0.05, 1.74),
            (0.1, 1.74),
            (0.15, 1.07),
            (0.2, 0.92),
            (0.3, 1.02),
            (0.4, 1.10),
        ];
        let w = fit(&points(&h100)).unwrap();
        assert_eq!((w.window_s, w.copy_slowdown), (0.15, 1.74));
        // The same slow copies from the third delay on are another process's, not a wake.
        let late = [
            (0.0, 1.2),
            (0.01, 1.1),
            (0.025, 1.7),
            (0.05, 1.7),
            (0.1, 1.1),
        ];
        assert_eq!(fit(&points(&late)), None);
    }

    /// A vendor that leaves nothing running prices nothing; one that never went quiet gets
    /// the largest delay measured as its window.
    #[test]
    fn quiet_vendors_price_nothing_and_busy_ones_get_a_lower_bound() {
        assert_eq!(fit(&points(&[(0.0, 1.1), (0.1, 0.9)])), None);
        assert_eq!(fit(&[]), None);
        let w = fit(&points(&[(0.0, 3.0), (0.4, 2.0)])).unwrap();
        assert_eq!(w.window_s, 0.4);
        assert_eq!(w.extra_s(f64::NAN), 0.0);
    }
}
