//! The host step of every call, as the GPU route takes it: ozaki-core's plan from the line
//! statistics (`ozaki_core::rule::plan`: the accuracy rule's moduli count, the bits of the
//! scaled maxima and the per-class shift table the device turns into the same shifts), with
//! the route's default scaling and its errors, and the parameters of the device's summary
//! kernel.

use crate::error::GpuError;
use ozaki_core::fallback::Fallback;
use ozaki_core::rule::plan as core_plan;
use ozaki_core::rule::{Accuracy, Lines, SummaryView};
use ozaki_core::scaling::SHIFT_CLASSES;

pub use ozaki_core::rule::plan::Plan;
pub use ozaki_core::scaling::ScalingMode;

/// The GPU route's scaling when none is asked for
/// (`ozaki_core::scaling::GPU_DEFAULT_SCALING`, which the engine prices at).
pub const DEFAULT_SCALING: ScalingMode = ozaki_core::scaling::GPU_DEFAULT_SCALING;

/// The scaling a call asking for `requested` runs ([`Options::scaling`]): the default when
/// none, and norm for accurate (a plan from line statistics cannot bound it,
/// `ozaki_core::rule::plan::planned_scaling`).
///
/// [`Options::scaling`]: super::Options::scaling
pub fn effective_scaling(requested: Option<ScalingMode>) -> ScalingMode {
    core_plan::planned_scaling(requested.unwrap_or(DEFAULT_SCALING))
}

/// The rule's decline as the route's error: NaN/Inf and a product that could overflow are
/// [`GpuError::NonFinite`] (native must run, as on `cpu-ozaki`), every other reason
/// [`GpuError::Unsupported`] with the same text `cpu-ozaki` records.
pub fn decline(f: Fallback) -> GpuError {
    match f {
        Fallback::NonFinite | Fallback::ExponentRange => GpuError::NonFinite,
        other => GpuError::Unsupported(other.to_string()),
    }
}

/// What the device's `line_summary` kernel needs to reduce a call's line statistics to the
/// rule's summaries (`ozaki_core::rule::plan::summary_keys`).
pub(crate) fn summary_params(
    k: usize,
    accuracy: Accuracy,
    scaling: ScalingMode,
) -> crate::kernels::SummaryParams {
    let (keys, fixed) = core_plan::summary_keys(k, accuracy, scaling);
    crate::kernels::SummaryParams::new(&keys, fixed)
}

/// The plan from the line statistics of op(A) rows and op(B) columns
/// (`ozaki_core::rule::plan::plan`): the count is `ozaki_core::rule::choose`'s for the same
/// statistics and the shifts `ozaki_core::scaling::Scaling::new`'s, so CPU and GPU agree bit
/// for bit. `scaling` is [`ScalingMode::Fast`] (bound `4096 k` for every line) or
/// [`ScalingMode::Norm`] (the lines' own `S`, the default); `Accurate` runs as `Norm`.
pub fn plan(
    a: Lines,
    b: Lines,
    k: usize,
    forced: Option<usize>,
    scaling: ScalingMode,
    accuracy: Accuracy,
) -> Result<Plan, GpuError> {
    core_plan::plan(a, b, k, (forced, accuracy), scaling).map_err(decline)
}

/// The plan from the two sides' summaries (the device route's download,
/// `ozaki_core::rule::plan::plan_summarised`); `sigma` and `tau` are empty (the device forms
/// the shifts, `line_shifts`).
pub fn plan_summarised(
    a: SummaryView,
    b: SummaryView,
    k: usize,
    (forced, accuracy): (Option<usize>, Accuracy),
    scaling: ScalingMode,
) -> Result<Plan, GpuError> {
    core_plan::plan_summarised(a, b, k, (forced, accuracy), scaling).map_err(decline)
}

/// The table kernel `line_shifts` turns into per-line shifts, `sigma = table[class] - e`
/// (`ozaki_core::rule::plan::shift_table` for r moduli).
pub(super) fn shift_table(scaling: ScalingMode, moduli: usize, k: usize) -> [i32; SHIFT_CLASSES] {
    core_plan::shift_table(scaling, moduli, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::rule::LineTable;

    /// NaN/Inf and inputs whose product could overflow are the route's `NonFinite` (the
    /// device entry points then run native), other declines `Unsupported`.
    #[test]
    fn non_finite_and_overflowing_inputs_are_refused_as_non_finite() {
        let nan = LineTable::of_packed(&[1.0, f64::NAN], 1, 2);
        let one = LineTable::of_packed(&[1.0, 2.0], 1, 2);
        let big = LineTable::of_packed(&[1e300, 1.0], 1, 2);
        for (a, b) in [(&nan, &one), (&one, &nan), (&big, &big)] {
            assert_eq!(
                plan(
                    a.view(),
                    b.view(),
                    2,
                    None,
                    ScalingMode::Norm,
                    Accuracy::Default
                ),
                Err(GpuError::NonFinite)
            );
        }
        assert!(matches!(
            decline(Fallback::AccuracyUnreachable { estimate_ulps: 1e9 }),
            GpuError::Unsupported(_)
        ));
    }
}
