//! What a call's route costs the program's own work after it, until its next call: the time
//! from a call's return to the next call's entry, per shape class and per side (the vendor
//! BLAS or a GPU route), as the process measured it ([`Follow`]).
//!
//! Why it matters: a vendor call leaves its thread pool spinning ([`super::wake`]), and the
//! program's own work in the gap to its next call (NumPy and SciPy's single-threaded
//! operations, a sparse product) shares the cores with it. A call's measured time does not
//! show that. In SciPy's LOBPCG (block 128, 16-core H100 host) the program's work after a
//! vendor call took 18 ms longer on average than the same work after the same call in a run
//! with every call on the GPU, 1.2 s over 66 vendor calls whose own times were 10-36 ms; the
//! GPU calls' measured times matched the vendor's, so call by call the vendor looked as good
//! (BENCHMARKS.md, "Real programs under the shim"). A GPU call leaves no pool spinning.
//!
//! So the engine prices a vendor run of a class with the gap it measured after the class's
//! vendor runs beyond the gap after its GPU runs ([`Follow::vendor_extra_s`]), once both
//! have been seen: the difference is measured, so a program whose work after its calls is
//! itself vendor BLAS (LAPACK's panels between its trailing updates) shows none, and a
//! class never run on the GPU gets none.

use super::correct::ClassKey;
use crate::trace::Routine;
use std::sync::Mutex;

/// Gaps each side needs before the difference is priced.
pub const MIN_GAPS: u32 = 3;

/// Calls over which a side's mean weighs the past: each new gap weighs 1/FOLLOW_SPAN once
/// this many were seen (a running mean before).
pub const FOLLOW_SPAN: u32 = 16;

/// Gaps longer than this are not noted: the program is idle or in another phase, not doing
/// the work that follows its call.
pub const GAP_CAP_S: f64 = 1.0;

/// Classes kept; a new class beyond them replaces the one noted longest ago.
const CLASSES: usize = 64;

/// The class of the call a gap follows: routine and log2 of m, n, k (the route is the side;
/// only calls made alone are noted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FollowKey {
    routine: Routine,
    log2: [u8; 3],
}

impl FollowKey {
    /// The class of a call whose correction class is `k`.
    pub fn of(k: &ClassKey) -> FollowKey {
        FollowKey {
            routine: k.routine,
            log2: k.log2,
        }
    }
}

/// A running mean of gaps, seconds.
#[derive(Debug, Clone, Copy, Default)]
struct Mean {
    mean_s: f64,
    n: u32,
}

impl Mean {
    fn add(&mut self, gap_s: f64) {
        self.n = self.n.saturating_add(1);
        let w = 1.0 / f64::from(self.n.min(FOLLOW_SPAN));
        self.mean_s += w * (gap_s - self.mean_s);
    }
}

#[derive(Debug, Clone, Copy)]
struct Class {
    key: FollowKey,
    vendor: Mean,
    gpu: Mean,
    /// When the class was last noted (a counter), for replacement.
    noted: u64,
}

/// The process's gaps after its calls, per class and side.
#[derive(Debug, Default)]
pub struct Follow {
    classes: Mutex<(Vec<Class>, u64)>,
}

impl Follow {
    /// Notes that the program's next call came `gap_s` seconds after a call of class `key`
    /// returned from the vendor (`vendor`) or a GPU route. Gaps that are not finite,
    /// negative or over [`GAP_CAP_S`] are ignored; so is a note made while another thread
    /// notes (the ledger never waits).
    pub fn note(&self, key: FollowKey, vendor: bool, gap_s: f64) {
        if !(gap_s.is_finite() && (0.0..=GAP_CAP_S).contains(&gap_s)) {
            return;
        }
        let Ok(mut guard) = self.classes.try_lock() else {
            return;
        };
        let (classes, clock) = &mut *guard;
        *clock += 1;
        let at = match classes.iter().position(|c| c.key == key) {
            Some(i) => i,
            None if classes.len() < CLASSES => {
                classes.push(Class {
                    key,
                    vendor: Mean::default(),
                    gpu: Mean::default(),
                    noted: 0,
                });
                classes.len() - 1
            }
            None => {
                let oldest = (0..classes.len())
                    .min_by_key(|&i| classes[i].noted)
                    .unwrap_or(0);
                classes[oldest] = Class {
                    key,
                    vendor: Mean::default(),
                    gpu: Mean::default(),
                    noted: 0,
                };
                oldest
            }
        };
        let c = &mut classes[at];
        c.noted = *clock;
        if vendor {
            c.vendor.add(gap_s);
        } else {
            c.gpu.add(gap_s);
        }
    }

    /// What a vendor run of a call of class `key` adds to the program's work after it
    /// beyond a GPU run: the mean gap after its vendor runs less the mean gap after its GPU
    /// runs, once each side has [`MIN_GAPS`]; 0 before, when the GPU's gaps are the longer,
    /// or while another thread notes.
    pub fn vendor_extra_s(&self, key: FollowKey) -> f64 {
        let Ok(guard) = self.classes.try_lock() else {
            return 0.0;
        };
        guard
            .0
            .iter()
            .find(|c| c.key == key)
            .filter(|c| c.vendor.n >= MIN_GAPS && c.gpu.n >= MIN_GAPS)
            .map_or(0.0, |c| (c.vendor.mean_s - c.gpu.mean_s).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::Route;

    fn key(m: u64) -> FollowKey {
        FollowKey::of(&ClassKey::new(
            Route::Vendor,
            Routine::Dgemm,
            m,
            128,
            128,
            1,
        ))
    }

    /// LOBPCG-like: the work after a vendor run takes 38 ms, after a GPU run 20 ms; the
    /// difference is priced once both sides were seen three times, not before.
    #[test]
    fn the_extra_gap_after_vendor_runs_is_priced_once_both_sides_were_seen() {
        let f = Follow::default();
        let k = key(110592);
        for _ in 0..MIN_GAPS {
            f.note(k, true, 0.038);
        }
        assert_eq!(f.vendor_extra_s(k), 0.0, "no GPU run seen yet");
        for _ in 0..MIN_GAPS - 1 {
            f.note(k, false, 0.020);
        }
        assert_eq!(f.vendor_extra_s(k), 0.0, "too few GPU runs");
        f.note(k, false, 0.020);
        assert!((f.vendor_extra_s(k) - 0.018).abs() < 1e-12);
        assert_eq!(f.vendor_extra_s(key(4096)), 0.0, "another class");
    }

    /// Work after the call that is itself the vendor's (LAPACK's panels between updates)
    /// runs no slower after a vendor run: nothing is priced, nor for a GPU run's longer gaps;
    /// idle gaps and bad values are not noted.
    #[test]
    fn no_extra_without_a_measured_difference_and_idle_gaps_are_ignored() {
        let f = Follow::default();
        let k = key(4096);
        for _ in 0..MIN_GAPS {
            f.note(k, true, 0.004);
            f.note(k, false, 0.005);
        }
        assert_eq!(f.vendor_extra_s(k), 0.0);
        for bad in [f64::NAN, -0.001, GAP_CAP_S * 2.0, f64::INFINITY] {
            f.note(k, true, bad);
        }
        assert_eq!(f.vendor_extra_s(k), 0.0);
    }

    /// The mean follows the recent gaps: a program whose work after vendor runs stops being
    /// slow (another phase) stops being priced for it within a couple of spans.
    #[test]
    fn the_mean_forgets_old_gaps() {
        let f = Follow::default();
        let k = key(65536);
        for _ in 0..FOLLOW_SPAN {
            f.note(k, true, 0.050);
            f.note(k, false, 0.010);
        }
        assert!((f.vendor_extra_s(k) - 0.040).abs() < 1e-9);
        for _ in 0..4 * FOLLOW_SPAN {
            f.note(k, true, 0.010);
        }
        assert!(f.vendor_extra_s(k) < 0.002, "{}", f.vendor_extra_s(k));
    }

    /// More classes than the ledger keeps: the one noted longest ago gives way.
    #[test]
    fn a_new_class_replaces_the_oldest_when_full() {
        let f = Follow::default();
        for i in 0..CLASSES as u64 {
            let k = key(1 << (i % 40 + 1)).with_k(i);
            for _ in 0..MIN_GAPS {
                f.note(k, true, 0.03);
                f.note(k, false, 0.01);
            }
        }
        let first = key(2).with_k(0);
        assert!(f.vendor_extra_s(first) > 0.0);
        let new = key(8).with_k(200);
        f.note(new, true, 0.03);
        assert_eq!(f.vendor_extra_s(first), 0.0, "replaced");
    }

    impl FollowKey {
        fn with_k(mut self, k: u64) -> FollowKey {
            self.log2[2] = (k % 64) as u8;
            self
        }
    }
}
