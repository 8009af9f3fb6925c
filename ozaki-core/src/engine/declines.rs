//! What the emulation's accuracy rule said about a class of calls: once it declined one, the
//! next calls of the class are priced without GPU Ozaki for a while.
//!
//! The rule decides from the operands' line statistics, which only the route sees, after
//! it staged and scanned them: a declined host-resident call has paid its upload and scan
//! and then runs native fp64. A program's calls of one shape usually carry one kind of data
//! (the integrals of one CCSD contraction, the panels of one factorization), so a class that
//! declined once will most likely decline again. After `d` declines in a row the class skips
//! the emulation for its next `BASE_SKIP << (d - 1)` calls (at most [`MAX_SKIP`]), then one
//! call tries it again; a call the rule accepts clears the class. Data that changes kind is
//! therefore found again within a bounded number of calls, and data that never fits costs a
//! wasted scan only once every [`MAX_SKIP`] calls.
//!
//! Classes are [`ClassKey`]s without the concurrency class (what the data is does not depend
//! on what runs beside it). The table is lock-free like [`super::correct`]'s: 64-bit slots
//! packing the class tag, the run of declines and the calls left to skip, updated by
//! compare-and-swap; two classes sharing a slot take turns, which costs a scan, never a
//! wrong result (the route still applies the rule on every call it runs).

use super::correct::ClassKey;
use std::sync::atomic::{AtomicU64, Ordering};

/// Calls skipped after the first decline of a class.
pub const BASE_SKIP: u32 = 8;

/// The most calls skipped after a run of declines.
pub const MAX_SKIP: u32 = 1024;

/// Slots in the table (a power of two).
const SLOTS: usize = 1024;

/// The table (see the module docs).
pub struct Declines {
    slots: Box<[AtomicU64]>,
}

impl std::fmt::Debug for Declines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declines").finish_non_exhaustive()
    }
}

impl Default for Declines {
    fn default() -> Self {
        Declines {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// (tag, declines in a row, calls left to skip) of a slot.
fn unpack(x: u64) -> (u64, u32, u32) {
    (x >> 48, ((x >> 32) & 0xffff) as u32, x as u32)
}

fn pack(tag: u64, run: u32, skip: u32) -> u64 {
    (tag << 48) | ((run.min(0xffff) as u64) << 32) | skip as u64
}

/// The class a decline is remembered for: the call's class without its concurrency or the
/// vendor's wake (the accuracy rule declines on the data, not the load).
fn class(key: &ClassKey) -> ClassKey {
    ClassKey {
        concurrent: 0,
        awake: false,
        ..*key
    }
}

impl Declines {
    fn slot(&self, key: &ClassKey) -> (&AtomicU64, u64) {
        let (i, tag) = class(key).place();
        (&self.slots[i % SLOTS], tag)
    }

    /// Updates `key`'s slot with `f(run, skip)` (its current values, 0 for another class).
    fn update(&self, key: &ClassKey, f: impl Fn(u32, u32) -> Option<(u32, u32)>) -> bool {
        let (slot, tag) = self.slot(key);
        let mut old = slot.load(Ordering::Relaxed);
        loop {
            let (t, run, skip) = unpack(old);
            let (run, skip) = if t == tag { (run, skip) } else { (0, 0) };
            let Some((run, skip)) = f(run, skip) else {
                return false;
            };
            match slot.compare_exchange_weak(
                old,
                pack(tag, run, skip),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(cur) => old = cur,
            }
        }
    }

    /// The rule declined a call of `key`'s class.
    pub fn declined(&self, key: &ClassKey) {
        self.update(key, |run, _| {
            let run = run.saturating_add(1);
            let skip = BASE_SKIP
                .checked_shl(run - 1)
                .unwrap_or(MAX_SKIP)
                .min(MAX_SKIP);
            Some((run, skip))
        });
    }

    /// The rule accepted a call of `key`'s class: the class is clear again.
    pub fn accepted(&self, key: &ClassKey) {
        let (slot, tag) = self.slot(key);
        let old = slot.load(Ordering::Relaxed);
        if unpack(old).0 == tag {
            // Lost to a concurrent update: that update is about this class too, and the
            // next accepted call clears it.
            let _ = slot.compare_exchange(old, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Whether this call of `key`'s class skips the emulation (counts it against the class's
    /// skips; false once they are used up: that call tries the emulation again).
    pub fn skips(&self, key: &ClassKey) -> bool {
        self.update(key, |run, skip| (skip > 0).then(|| (run, skip - 1)))
    }

    /// Declines in a row of `key`'s class (0: none remembered).
    pub fn run(&self, key: &ClassKey) -> u32 {
        let (slot, tag) = self.slot(key);
        let (t, run, _) = unpack(slot.load(Ordering::Relaxed));
        if t == tag { run } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::Route;
    use crate::trace::Routine;

    fn key(m: u64, concurrent: u32) -> ClassKey {
        ClassKey::new(Route::GpuOzaki, Routine::Dgemm, m, 441, 441, concurrent)
    }

    /// Counts how many calls in a row skip the emulation.
    fn skipped(d: &Declines, k: &ClassKey) -> u32 {
        let mut n = 0;
        while d.skips(k) {
            n += 1;
            assert!(n <= MAX_SKIP, "skips never end");
        }
        n
    }

    #[test]
    fn a_class_never_declined_always_tries_the_emulation() {
        let d = Declines::default();
        assert!(!d.skips(&key(540, 1)));
        assert_eq!(d.run(&key(540, 1)), 0);
    }

    #[test]
    fn declines_in_a_row_skip_longer_up_to_the_limit_and_then_try_again() {
        let d = Declines::default();
        let k = key(540, 4);
        d.declined(&k);
        assert_eq!(skipped(&d, &k), BASE_SKIP);
        d.declined(&k);
        assert_eq!(skipped(&d, &k), 2 * BASE_SKIP);
        for _ in 0..20 {
            d.declined(&k);
        }
        assert_eq!(skipped(&d, &k), MAX_SKIP);
        assert_eq!(d.run(&k), 22);
    }

    #[test]
    fn concurrency_does_not_split_a_class_and_an_accepted_call_clears_it() {
        let d = Declines::default();
        d.declined(&key(540, 1));
        // The same shape class under 16 callers: the same data, the same memory.
        assert!(d.skips(&key(540, 16)));
        // Another shape class is unaffected.
        assert!(!d.skips(&key(4096, 1)));
        d.accepted(&key(540, 3));
        assert!(!d.skips(&key(540, 1)));
        assert_eq!(d.run(&key(540, 1)), 0);
    }
}
