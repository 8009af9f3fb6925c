//! Calls too small for any GPU route, recognised without a decision.
//!
//! Most BLAS calls of a real program are tiny (reference LAPACK's panels, PySCF's integral
//! blocks), and for them the vendor BLAS wins by orders of magnitude: a GPU route pays a
//! launch and a round trip over the link whatever the size. Looking up such a call's decision
//! ([`super::memo`]), checking its margin and copying it into the trace costs a few hundred
//! nanoseconds, a third of what an 8 x 8 x 8 product itself takes. The gate answers the same
//! question with a comparison: a call whose every dimension is at most its class's *floor*
//! goes to the vendor.
//!
//! A class is (routine, the transposes and beta/alpha/C-gap flags, concurrency class), and its
//! floor is the largest power of two `D <=` [`MAX_FLOOR`] for which the engine prices every
//! other route at least the gate's margin times the vendor on the `D x D x D` product of the
//! class (`D x D` for dsyrk), computed once per class at its first call. `auto`'s margin is
//! the pre-engine's "clearly faster" factor times the largest correction this process's
//! measurements can apply to the vendor's price, so a call through the gate is one the decision would send to the
//! vendor as "clearly the vendor's" whatever the process measures, and one it would not time
//! (its prices are further apart than a correction reaches). That the smaller calls of the
//! class are cheaper still on the vendor relative to the GPU is the size-class argument the
//! decision cache already prices with (`choose`: a small call priced at its class's bound).
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

/// The largest floor tried: calls above it take the decision (its first check is one compare).
pub const MAX_FLOOR: u64 = 64;

/// Concurrency classes kept apart (powers of two; larger ones share the last).
const CLASSES: usize = 16;
/// Flag combinations of a call shape ([`flags`]).
const FLAGS: usize = 32;
/// Slots of a gate: routine x flags x concurrency class.
const SLOTS: usize = 2 * FLAGS * CLASSES;

/// A slot not computed yet.
const UNKNOWN: u8 = u8::MAX;
/// A slot whose class has no floor (even 1 x 1 x 1 is not clearly the vendor's).
const NONE: u8 = u8::MAX - 1;

/// One engine's floors, per class; a slot holds `log2(floor)`, [`NONE`] or [`UNKNOWN`].
pub struct Gate {
    /// How many times the vendor's price every other route's price must be on a class's
    /// floor product (module doc).
    margin: f64,
    slots: [AtomicU8; SLOTS],
}

impl Gate {
    /// A gate with no floor computed yet, for prices `margin` apart.
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
        let largest = cs.m.max(cs.n).max(cs.k);
        if largest > MAX_FLOOR {
            return false;
        }
        let c = concurrency_class(in_flight);
        let slot = &self.slots[index(cs, c)];
        let log2 = match slot.load(Ordering::Relaxed) {
            UNKNOWN => {
                let f = floor(cs, c, self.margin, price).map_or(NONE, |d| d.trailing_zeros() as u8);
                slot.store(f, Ordering::Relaxed);
                f
            }
            f => f,
        };
        log2 != NONE && largest <= 1 << log2
    }
}

/// The slot of `cs` at concurrency class `c`.
fn index(cs: &CallShape, c: u32) -> usize {
    let class = (c.trailing_zeros() as usize).min(CLASSES - 1);
    let routine = match cs.routine {
        Routine::Dgemm => 0,
        Routine::Dsyrk => 1,
    };
    (routine * FLAGS + flags(cs)) * CLASSES + class
}

/// The flags that select a class: what the engine prices differently at one size.
fn flags(cs: &CallShape) -> usize {
    (cs.transa as usize)
        | (cs.transb as usize) << 1
        | (cs.beta_zero as usize) << 2
        | (cs.alpha_zero as usize) << 3
        | (cs.c_gaps as usize) << 4
}

/// The floor of `cs`'s class at concurrency class `c` (module doc), if any.
fn floor(
    cs: &CallShape,
    c: u32,
    margin: f64,
    price: impl Fn(&CallShape, u32) -> Arc<Decision>,
) -> Option<u64> {
    let mut d = MAX_FLOOR;
    while d >= 1 {
        let bound = CallShape {
            m: d,
            n: d,
            k: d,
            ..*cs
        };
        if ahead_by(Margin::of(&price(&bound, c)), margin) {
            return Some(d);
        }
        d /= 2;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::adjust::CORRECTABLE;
    use crate::route::choose::{CLEARLY, priced_moduli};
    use ozaki_core::engine::choose::Engine;
    use ozaki_core::engine::profile::Profile;

    const MARGIN: f64 = CLEARLY * CORRECTABLE;

    fn engine(name: &str) -> Engine {
        Engine::new(Profile::built_in(name).unwrap(), 16)
    }

    fn price(e: &Engine) -> impl Fn(&CallShape, u32) -> Arc<Decision> + '_ {
        |s, c| e.decide_loaded(s, None, || Some(priced_moduli(s.k, None)), c)
    }

    /// Every call the gate passes is one the engine prices "clearly the vendor's" even with
    /// the vendor's price at the largest correction, at every concurrency; the gate passes
    /// tiny calls of the GPU profile and refuses calls above its floor.
    #[test]
    fn the_gate_passes_only_calls_the_engine_prices_clearly_the_vendors() {
        let e = engine("h200");
        let gate = Gate::new(MARGIN);
        let mut passed = 0;
        for in_flight in [1u32, 3, 16, 40] {
            for &(m, n, k) in &[
                (1, 1, 1),
                (8, 8, 8),
                (3, 64, 17),
                (64, 64, 64),
                (65, 2, 2),
                (2, 2, 200),
                (48, 33, 64),
            ] {
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
                    let d = e.decide_loaded(&cs, None, || Some(priced_moduli(k, None)), in_flight);
                    if gate.vendor(&cs, in_flight, price(&e)) {
                        passed += 1;
                        assert!(
                            ahead_by(Margin::of(&d), MARGIN),
                            "{m}x{n}x{k} at {in_flight}: {:?}",
                            d.prediction.predicted_s
                        );
                    }
                }
            }
        }
        assert!(passed > 0, "tiny calls pass the gate of the h200 profile");
        let tiny = CallShape::gemm(8, 8, 8);
        assert!(gate.vendor(&tiny, 1, price(&e)));
        assert!(!gate.vendor(&CallShape::gemm(65, 8, 8), 1, price(&e)));
    }

    /// An engine that prices the GPU routes as fast as the vendor on tiny calls has no floor:
    /// every call takes the decision.
    #[test]
    fn a_gpu_priced_close_to_the_vendor_closes_the_gate() {
        let mut p = Profile::built_in("h200").unwrap();
        for b in &mut p.cpu.blas {
            b.model.s_per_mnk *= 1e6;
            b.model.s_fixed += 1.0;
        }
        let e = Engine::new(p, 16);
        let gate = Gate::new(MARGIN);
        assert!(!gate.vendor(&CallShape::gemm(1, 1, 1), 1, price(&e)));
        assert!(!gate.vendor(&CallShape::gemm(8, 8, 8), 1, price(&e)));
    }

    /// A profile without a GPU has nothing to choose: every small call passes.
    #[test]
    fn without_a_gpu_every_small_call_passes() {
        let e = engine("cpu-only");
        let gate = Gate::new(MARGIN);
        for in_flight in [1u32, 2, 64] {
            assert!(gate.vendor(&CallShape::gemm(64, 64, 64), in_flight, price(&e)));
            assert!(gate.vendor(&CallShape::syrk(7, 64), in_flight, price(&e)));
        }
    }
}
