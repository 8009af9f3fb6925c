//! Whether a GPU dgemm runs split over this process's GPU slots (issue #7).
//!
//! The slots are `gpu_kernels::multi::slots()`: `OZAKI_DEVICES` (or every visible GPU),
//! dealt out by MPI local rank (`ozaki_core::devices`); a process with one slot, or with
//! `OZAKI_GPU` pinning one device, never splits. With two or more, `OZAKI_SPLIT` says who
//! decides ([`SplitMode`]): by default the engine, which prices the split with each
//! device's calibrated rates and the host link shared among them and takes it only when it
//! beats one GPU by the switch margin (`ozaki_core::engine::split`); `OZAKI_SPLIT=0` never
//! splits, `OZAKI_SPLIT=1` always does when C holds two tiles of the minimum size. The
//! engine's decision is the cached one `auto` already made for this shape, so a forced GPU
//! route asks the same question at the cost of one cache lookup.

use super::choose::{engine, priced_moduli};
use crate::config::{Config, SplitMode};
use ozaki_core::blas::{GemmArgs, Trans};
use ozaki_core::devices::{SplitParams, SplitPlan, split_c};
use ozaki_core::engine::{CallShape, Residency};
use ozaki_core::route::Route;
use ozaki_core::trace::Routine;

/// The engine's view of a canonical dgemm.
fn call_shape(args: &GemmArgs<'_>) -> CallShape {
    CallShape {
        routine: Routine::Dgemm,
        m: args.m as u64,
        n: args.n as u64,
        k: args.k as u64,
        transa: args.transa == Trans::Yes,
        transb: args.transb == Trans::Yes,
        beta_zero: args.beta == 0.0,
        alpha_zero: args.alpha == 0.0,
        residency: Residency::Host,
    }
}

/// The split plan for `route` on this call, or `None` to run on one device.
pub fn plan(route: Route, args: &GemmArgs<'_>, config: &Config) -> Option<SplitPlan> {
    plan_for(
        route,
        args,
        config.split,
        config.moduli,
        gpu_kernels::multi::slots(),
    )
}

/// [`plan`] with the mode and slots given (tests pass them; the shim reads them once).
pub fn plan_for(
    route: Route,
    args: &GemmArgs<'_>,
    mode: SplitMode,
    moduli: Option<u32>,
    slots: &[u32],
) -> Option<SplitPlan> {
    if slots.len() < 2 {
        return None;
    }
    match mode {
        SplitMode::Off => None,
        SplitMode::On => {
            let plan = split_c(args.m as u64, args.n as u64, slots, &SplitParams::default());
            plan.is_split().then_some(plan)
        }
        SplitMode::Engine => {
            let shape = call_shape(args);
            let d = engine().decide_with(&shape, moduli, || Some(priced_moduli(shape.k, moduli)));
            d.split(route).map(|s| s.plan.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args<'a>(m: usize, n: usize, k: usize) -> GemmArgs<'a> {
        GemmArgs {
            transa: Trans::No,
            transb: Trans::No,
            m,
            n,
            k,
            alpha: 1.0,
            a: &[],
            lda: m,
            b: &[],
            ldb: k,
            beta: 0.0,
            ldc: m,
        }
    }

    #[test]
    fn one_slot_or_off_never_splits_and_on_splits_what_fits_two_tiles() {
        let big = args(16384, 16384, 16384);
        for mode in [SplitMode::Off, SplitMode::On, SplitMode::Engine] {
            assert_eq!(plan_for(Route::GpuNative, &big, mode, None, &[0]), None);
        }
        assert_eq!(
            plan_for(Route::GpuNative, &big, SplitMode::Off, None, &[0, 1]),
            None
        );
        let p = plan_for(Route::GpuOzaki, &big, SplitMode::On, None, &[0, 1]).unwrap();
        assert_eq!(
            p.tiles.iter().map(|t| t.device).collect::<Vec<_>>(),
            vec![0, 1]
        );
        // Forced on still needs room for two minimum-size tiles.
        let small = args(3000, 3000, 3000);
        assert_eq!(
            plan_for(Route::GpuNative, &small, SplitMode::On, None, &[0, 1]),
            None
        );
    }

    #[test]
    fn the_canonical_call_maps_to_the_engine_shape() {
        let mut a = args(30, 20, 10);
        a.transb = Trans::Yes;
        a.beta = 1.0;
        let s = call_shape(&a);
        assert_eq!(
            (s.m, s.n, s.k, s.transa, s.transb, s.beta_zero),
            (30, 20, 10, false, true, false)
        );
        assert_eq!(s.residency, Residency::Host);
    }
}
