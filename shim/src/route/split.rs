//! Whether a GPU dgemm runs split over this process's GPU slots.
//!
//! The slots are `gpu_kernels::multi::slots()`: `OZAKI_DEVICES` (or every visible GPU),
//! dealt out by MPI local rank (`ozaki_core::devices`); a process with one slot, or with
//! `OZAKI_GPU` pinning one device, never splits. With two or more, `OZAKI_SPLIT` says who
//! decides ([`SplitMode`]): by default the engine, which prices the split with each
//! device's calibrated rates and the host link shared among them and takes it only when it
//! beats one GPU by the switch margin (`ozaki_core::engine::split`); `OZAKI_SPLIT=0` never
//! splits, `OZAKI_SPLIT=1` always does when C holds two tiles of the minimum size. The
//! engine's split is the one in the call's [`Choice`]: the decision `auto` made on the
//! canonical call, or for a forced GPU route the same cached decision, taken once when the
//! route is chosen ([`decision`]); the route never asks the engine again.

use super::Choice;
use super::choose::{canonical_shape, engine};
use crate::abi::Canon;
use crate::config::{Config, SplitMode};
use ozaki_core::devices::{SplitParams, SplitPlan, split_c};
use ozaki_core::engine::choose::Decision;
use ozaki_core::engine::priced_moduli::priced_moduli;
use ozaki_core::route::Route;
use std::sync::Arc;

/// The engine's decision for a call on a forced GPU route, when the split depends on it
/// (two or more slots, `OZAKI_SPLIT` unset): the same cached decision `auto` makes for the
/// canonical call.
pub fn decision(canon: &Canon, config: &Config) -> Option<Arc<Decision>> {
    if config.split != SplitMode::Engine
        || !matches!(canon, Canon::Gemm { .. })
        || gpu_kernels::multi::slots().len() < 2
    {
        return None;
    }
    let shape = canonical_shape(canon);
    Some(engine().decide_with(&shape, config.moduli, || {
        Some(priced_moduli(shape.k, config.moduli))
    }))
}

/// The split plan for the route `choice` runs on `canon`, or `None` to run on one device.
pub fn plan(choice: &Choice, canon: &Canon, config: &Config) -> Option<SplitPlan> {
    let Canon::Gemm { m, n, .. } = *canon else {
        return None;
    };
    if !matches!(choice.route, Route::GpuNative | Route::GpuOzaki) {
        return None;
    }
    plan_for(
        choice,
        (m as u64, n as u64),
        config.split,
        gpu_kernels::multi::slots(),
    )
}

/// [`plan`] with C's dimensions, the mode and the slots given (tests pass them; the shim
/// reads them once).
pub fn plan_for(
    choice: &Choice,
    (m, n): (u64, u64),
    mode: SplitMode,
    slots: &[u32],
) -> Option<SplitPlan> {
    if slots.len() < 2 {
        return None;
    }
    match mode {
        SplitMode::Off => None,
        SplitMode::On => {
            let plan = split_c(m, n, slots, &SplitParams::default());
            plan.is_split().then_some(plan)
        }
        SplitMode::Engine => choice.split(choice.route).cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::engine::CallShape;
    use ozaki_core::engine::choose::Engine;
    use ozaki_core::engine::profile::Profile;

    /// A choice of `route` carrying the decision of an engine over two H200 slots.
    fn choice(route: Route, shape: CallShape) -> Choice {
        let e = Engine::new(Profile::built_in("h200").unwrap(), 16).with_slots(vec![0, 1]);
        Choice {
            route,
            engine: None,
            decision: Some(e.decide(&shape, Some(14))),
            feedback: None,
            start_credit: None,
            flight: None,
            on_decline: Route::Vendor,
            decline_key: None,
            beside_start: false,
        }
    }

    #[test]
    fn one_slot_or_off_never_splits_and_on_splits_what_fits_two_tiles() {
        let big = choice(Route::GpuNative, CallShape::gemm(16384, 16384, 16384));
        for mode in [SplitMode::Off, SplitMode::On, SplitMode::Engine] {
            assert_eq!(plan_for(&big, (16384, 16384), mode, &[0]), None);
        }
        assert_eq!(
            plan_for(&big, (16384, 16384), SplitMode::Off, &[0, 1]),
            None
        );
        let p = plan_for(&big, (16384, 16384), SplitMode::On, &[0, 1]).unwrap();
        assert_eq!(
            p.tiles.iter().map(|t| t.device).collect::<Vec<_>>(),
            vec![0, 1]
        );
        // Forced on still needs room for two minimum-size tiles.
        assert_eq!(plan_for(&big, (3000, 3000), SplitMode::On, &[0, 1]), None);
    }

    #[test]
    fn the_engine_mode_runs_the_split_of_the_decision_carried_down() {
        let shape = CallShape::gemm(16384, 16384, 16384);
        for route in [Route::GpuNative, Route::GpuOzaki] {
            let c = choice(route, shape);
            let want = c
                .decision
                .as_ref()
                .unwrap()
                .split(route)
                .map(|s| s.plan.clone());
            assert_eq!(
                plan_for(&c, (16384, 16384), SplitMode::Engine, &[0, 1]),
                want
            );
        }
        // Without a decision (a forced route in a one-slot process) nothing is split.
        let mut c = choice(Route::GpuNative, shape);
        c.decision = None;
        assert_eq!(
            plan_for(&c, (16384, 16384), SplitMode::Engine, &[0, 1]),
            None
        );
    }
}
