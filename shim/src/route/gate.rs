//! Calls too small for any GPU route, recognised without a decision.
//!
//! Most BLAS calls of a real program are small (reference LAPACK's panels, PySCF's integral
//! blocks), and for them the vendor BLAS wins by orders of magnitude: a GPU route pays a
//! launch and a round trip over the link whatever the size. Looking up such a call's decision
//! ([`super::memo`]), checking its margin and copying it into the trace costs a few hundred
//! nanoseconds, a third of what an 8 x 8 x 8 product itself takes. The gate answers the same
//! question with a table look-up.
//!
//! A slot of the table is a size class: the routine, the flags the engine prices by (the
//! transposes, beta or alpha zero, a C with gaps) and m, n, k rounded up to powers of two (the
//! class's *bound*), and the concurrency class (calls in flight, rounded down to a power of
//! two, up to [`MAX_CONCURRENT`]). It is computed once, at the class's first call: the class is
//! the vendor's when the engine prices every other route at least the gate's margin times the
//! vendor on the bound at that concurrency. `auto`'s margin is the
//! pre-engine's "clearly faster" factor times the largest correction this process's
//! measurements can apply to the vendor's price, so a call through the gate is one the
//! decision would send to the vendor as "clearly the vendor's" whatever the process measures,
//! and one it would not time (its prices are further apart than a correction reaches). That a
//! call below its class's bound is cheaper still on the vendor relative to the GPU is the
//! size-class argument the decision cache already prices with (`choose`: a small call priced
//! at its class's bound).
//!
//! The trace still records the engine's prediction for a gated call: the record names the
//! engine and the call, and the trace's writer prices it when it writes the line
//! ([`super::choose_note::Pricing::Gated`]), so the caller pays for no decision.

use super::memo::{Margin, ahead_by};
use ozaki_core::engine::CallShape;
use ozaki_core::engine::choose::Decision;
use ozaki_core::engine::load::concurrency_class;
use ozaki_core::trace::Routine;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// Calls with more calls in flight than this take the decision.
pub const MAX_CONCURRENT: u32 = 64;
/// Concurrency classes: 1, 2, 4, ..., [`MAX_CONCURRENT`].
const CONCURRENCY: usize = MAX_CONCURRENT.trailing_zeros() as usize + 1;

/// Dimensions up to 2^this have a class; a larger one takes the decision (such a call runs
/// long enough for a decision's cost not to matter).
const MAX_LOG2: usize = 13;
/// Size classes per dimension.
const SIZES: usize = MAX_LOG2 + 1;
/// Flag combinations of a call shape ([`flags`]).
const FLAGS: usize = 32;
/// Slots of a gate: routine x flags x m, n, k classes x concurrency classes (1.2 MB, of
/// which a process touches the pages of the classes it calls).
const SLOTS: usize = 2 * FLAGS * SIZES * SIZES * SIZES * CONCURRENCY;

/// A slot not computed yet.
const UNKNOWN: u8 = 0;
/// A class that is the vendor's.
const VENDOR: u8 = 1;
/// A class whose calls take the decision.
const DECIDE: u8 = 2;

/// One engine's size classes (module doc).
pub struct Gate {
    /// How many times the vendor's price every other route's price must be on a class's
    /// bound (module doc).
    margin: f64,
    slots: [AtomicU8; SLOTS],
}

impl Gate {
    /// A gate with no class computed yet, for prices `margin` apart.
    pub const fn new(margin: f64) -> Gate {
        Gate {
            margin,
            slots: [const { AtomicU8::new(UNKNOWN) }; SLOTS],
        }
    }

    /// Whether `cs`, with `in_flight` calls in flight, is the vendor's without a decision.
    /// `price(shape, class)` is the engine's decision for a shape at a concurrency class; a
    /// gate must be asked with one engine's prices for its whole life.
    pub fn vendor(
        &self,
        cs: &CallShape,
        in_flight: u32,
        price: impl Fn(&CallShape, u32) -> Arc<Decision>,
    ) -> bool {
        let Some((slot, c)) = self.slot(cs, in_flight) else {
            return false;
        };
        match slot.load(Ordering::Relaxed) {
            UNKNOWN => {
                let v = if ahead_by(Margin::of(&price(&size_class_bound(cs), c)), self.margin) {
                    VENDOR
                } else {
                    DECIDE
                };
                slot.store(v, Ordering::Relaxed);
                v == VENDOR
            }
            v => v == VENDOR,
        }
    }

    /// Whether `cs`, with `in_flight` calls in flight, is in a class already computed as the
    /// vendor's (a class not computed yet is not: computing it needs the engine's prices).
    pub fn known_vendor(&self, cs: &CallShape, in_flight: u32) -> bool {
        self.slot(cs, in_flight)
            .is_some_and(|(slot, _)| slot.load(Ordering::Relaxed) == VENDOR)
    }

    /// The slot of `cs` with `in_flight` calls in flight and its concurrency class, if the
    /// call has a class.
    fn slot(&self, cs: &CallShape, in_flight: u32) -> Option<(&AtomicU8, u32)> {
        if in_flight > MAX_CONCURRENT {
            return None;
        }
        let c = concurrency_class(in_flight);
        Some((&self.slots[index(cs, c)?], c))
    }
}

/// log2 of `x` rounded up to a power of two (0 and 1: 0), if within [`MAX_LOG2`].
fn size_class(x: u64) -> Option<usize> {
    let c = (u64::BITS - x.saturating_sub(1).leading_zeros()) as usize;
    (c <= MAX_LOG2).then_some(c)
}

/// The slot of `cs` at concurrency class `c`, if its dimensions have a class (the
/// concurrency classes of one size class side by side).
fn index(cs: &CallShape, c: u32) -> Option<usize> {
    let routine = match cs.routine {
        Routine::Dgemm => 0,
        Routine::Dsyrk => 1,
    };
    let (m, n, k) = (size_class(cs.m)?, size_class(cs.n)?, size_class(cs.k)?);
    let size = (((routine * FLAGS + flags(cs)) * SIZES + m) * SIZES + n) * SIZES + k;
    Some(size * CONCURRENCY + c.trailing_zeros() as usize)
}

/// The flags that select a class: what the engine prices differently at one size.
fn flags(cs: &CallShape) -> usize {
    (cs.transa as usize)
        | (cs.transb as usize) << 1
        | (cs.beta_zero as usize) << 2
        | (cs.alpha_zero as usize) << 3
        | (cs.c_gaps as usize) << 4
}

/// The bound of `cs`'s size class: its dimensions rounded up to powers of two (0 to 1). The
/// decision cache prices small calls at the same bound (`super::choose`).
pub fn size_class_bound(cs: &CallShape) -> CallShape {
    CallShape {
        m: cs.m.max(1).next_power_of_two(),
        n: cs.n.max(1).next_power_of_two(),
        k: cs.k.max(1).next_power_of_two(),
        ..*cs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::adjust::CORRECTABLE;
    use crate::route::choose::CLEARLY;
    use ozaki_core::engine::choose::Engine;
    use ozaki_core::engine::priced_moduli::priced_moduli;
    use ozaki_core::engine::profile::Profile;

    const MARGIN: f64 = CLEARLY * CORRECTABLE;

    fn engine(name: &str) -> Engine {
        Engine::new(Profile::built_in(name).unwrap(), 16)
    }

    fn price(e: &Engine) -> impl Fn(&CallShape, u32) -> Arc<Decision> + '_ {
        |s, c| e.decide_loaded(s, None, || Some(priced_moduli(s.k, None)), c)
    }

    /// Every call the gate passes is one the engine prices "clearly the vendor's" even with
    /// the vendor's price at the largest correction, at its own shape and concurrency (which
    /// also checks the size-class argument on these shapes); the gate passes the small and
    /// skinny calls of real programs and refuses those the GPU wins.
    #[test]
    fn the_gate_passes_only_calls_the_engine_prices_clearly_the_vendors() {
        let e = engine("h200");
        let gate = Box::new(Gate::new(MARGIN));
        let shapes = [
            (1, 1, 1),
            (8, 8, 8),
            (3, 64, 17),
            (64, 64, 64),
            (65, 2, 2),
            (4095, 1, 1),
            (4094, 2, 2),
            (4032, 64, 64),
            (18, 114, 114),
            (123, 1953, 1953),
            (110592, 64, 64),
            (8192, 8192, 8),
            (1024, 1024, 1024),
            (4096, 4096, 4096),
        ];
        let mut passed = Vec::new();
        for in_flight in [1u32, 3, 16, 40] {
            for &(m, n, k) in &shapes {
                for (transa, beta_zero, c_gaps) in [
                    (false, true, false),
                    (true, false, true),
                    (false, false, false),
                ] {
                    let cs = CallShape {
                        transa,
                        beta_zero,
                        c_gaps,
                        ..CallShape::gemm(m, n, k)
                    };
                    if gate.vendor(&cs, in_flight, price(&e)) {
                        passed.push((m, n, k));
                        let d = price(&e)(&cs, in_flight);
                        assert!(
                            ahead_by(Margin::of(&d), MARGIN),
                            "{m}x{n}x{k} at {in_flight}: {:?}",
                            d.prediction.predicted_s
                        );
                    }
                }
            }
        }
        for tiny in [(8, 8, 8), (4095, 1, 1), (4094, 2, 2), (3, 64, 17)] {
            assert!(passed.contains(&tiny), "{tiny:?} passes: {passed:?}");
        }
        assert!(
            !passed.contains(&(4096, 4096, 4096)),
            "the GPU's calls take the decision"
        );
        assert!(!gate.vendor(&CallShape::gemm(8, 8, 8), MAX_CONCURRENT + 1, price(&e)));
    }

    /// An engine that prices the GPU routes as fast as the vendor on small calls has no
    /// class of the vendor's: every call takes the decision.
    #[test]
    fn a_gpu_priced_close_to_the_vendor_closes_the_gate() {
        let mut p = Profile::built_in("h200").unwrap();
        for b in &mut p.cpu.blas {
            b.model.s_per_mnk *= 1e6;
            b.model.s_fixed += 1.0;
        }
        let e = Engine::new(p, 16);
        let gate = Box::new(Gate::new(MARGIN));
        assert!(!gate.vendor(&CallShape::gemm(1, 1, 1), 1, price(&e)));
        assert!(!gate.vendor(&CallShape::gemm(8, 8, 8), 1, price(&e)));
    }

    /// A class is known as the vendor's only once a call computed it so, at that call's
    /// concurrency class: an unpriced class, a class of the GPU's and a call without a class
    /// are not known (the lane that asks must leave them to the decision).
    #[test]
    fn only_classes_computed_as_the_vendors_are_known_to_be() {
        let e = engine("h200");
        let gate = Box::new(Gate::new(MARGIN));
        let small = CallShape::gemm(8, 8, 8);
        assert!(!gate.known_vendor(&small, 1), "not priced yet");
        assert!(gate.vendor(&small, 1, price(&e)));
        assert!(gate.known_vendor(&small, 1));
        assert!(
            gate.known_vendor(&CallShape::gemm(5, 7, 6), 1),
            "same size class"
        );
        assert!(!gate.known_vendor(&small, 16), "another concurrency class");
        assert!(
            !gate.known_vendor(
                &CallShape {
                    transa: true,
                    ..small
                },
                1
            ),
            "other flags"
        );
        let big = CallShape::gemm(4096, 4096, 4096);
        assert!(!gate.vendor(&big, 1, price(&e)));
        assert!(!gate.known_vendor(&big, 1), "the GPU's class");
        assert!(!gate.known_vendor(&small, MAX_CONCURRENT + 1));
        assert!(
            !gate.known_vendor(&CallShape::gemm(8193, 8, 8), 1),
            "no class"
        );
    }

    /// The size class is log2 of the dimension rounded up to a power of two.
    #[test]
    fn size_classes_round_up_to_powers_of_two() {
        let want = |x: u64| x.max(1).next_power_of_two().trailing_zeros() as usize;
        for x in (0..=9000).chain([1 << 13, (1 << 13) + 1, 1 << 40]) {
            let c = size_class(x);
            assert_eq!(c, Some(want(x)).filter(|&c| c <= MAX_LOG2), "{x}");
        }
    }

    /// A profile without a GPU has nothing to choose: every call with a class passes.
    #[test]
    fn without_a_gpu_every_call_with_a_class_passes() {
        let e = engine("cpu-only");
        let gate = Box::new(Gate::new(MARGIN));
        for in_flight in [1u32, 2, 64] {
            assert!(gate.vendor(&CallShape::gemm(4096, 4096, 4096), in_flight, price(&e)));
            assert!(gate.vendor(&CallShape::syrk(7, 8192), in_flight, price(&e)));
        }
        assert!(
            !gate.vendor(&CallShape::gemm(8193, 8, 8), 1, price(&e)),
            "no class"
        );
    }
}
