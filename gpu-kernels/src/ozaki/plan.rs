//! The host step of every call: from the line statistics to the [`Plan`] (moduli count,
//! bits), by ozaki-core's accuracy rule (`ozaki_core::rule`), and the per-class shift table
//! the device turns into the same shifts. The scaling modes' defaults live here too, since
//! the plan is where a mode takes effect.

use crate::error::GpuError;
use ozaki_core::fallback::Fallback;
use ozaki_core::moduli::MAX_MODULI;
use ozaki_core::rule::{self, Accuracy, KeyParams, Lines, SideSummary, SummaryView};
use ozaki_core::scaling::{COARSE_BITS, SHIFT_CLASSES};

pub use ozaki_core::scaling::ScalingMode;

/// The GPU route's scaling when none is asked for: the norm bound (no extra product, about
/// one modulus fewer than fast on normal data and two on phi = 2; ACCURACY.md).
pub const DEFAULT_SCALING: ScalingMode = ScalingMode::Norm;

/// The scaling a call asking for `requested` runs ([`Options::scaling`]): the default when
/// none, and norm for accurate (which needs the coarse product, not implemented here).
///
/// [`Options::scaling`]: super::Options::scaling
pub fn effective_scaling(requested: Option<ScalingMode>) -> ScalingMode {
    match requested.unwrap_or(DEFAULT_SCALING) {
        ScalingMode::Accurate => ScalingMode::Norm,
        s => s,
    }
}

/// Moduli count and shifts of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Number of moduli (the first `moduli` of [`MODULI`]).
    ///
    /// [`MODULI`]: super::MODULI
    pub moduli: usize,
    /// Most bits a scaled row / column maximum keeps: `|a'| <= 2^bits`; at most 62 (shifts
    /// cap p at 56), the range the residue kernel's formula covers.
    pub bits: i32,
    /// Row shifts of op(A): a'_il = rint(a_il 2^sigma_i).
    pub sigma: Vec<i32>,
    /// Column shifts of op(B).
    pub tau: Vec<i32>,
    /// How the shifts were bounded (`Fast` or `Norm`).
    pub scaling: ScalingMode,
    /// The rule's estimate at this count (`ozaki_core::rule::Choice::estimate`).
    pub estimate: f64,
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

/// The rule's request for a call of inner dimension `k`.
fn request(
    k: usize,
    (forced, accuracy): (Option<usize>, Accuracy),
    scaling: ScalingMode,
) -> rule::Request<'static> {
    rule::Request {
        forced,
        accuracy,
        ..rule::Request::new(k, effective_scaling(Some(scaling)))
    }
}

/// What the device's `line_summary` kernel needs to reduce a call's line statistics to the
/// rule's summaries: the request's key parameters and, for fast scaling, every line's class.
pub(crate) fn summary_params(
    k: usize,
    accuracy: Accuracy,
    scaling: ScalingMode,
) -> crate::kernels::SummaryParams {
    let req = request(k, (None, accuracy), scaling);
    let fixed = match req.scaling {
        ScalingMode::Fast => Some(ozaki_core::scaling::norm_class(4096 * k.max(1) as u64)),
        _ => None,
    };
    crate::kernels::SummaryParams::new(&KeyParams::new(&req), fixed)
}

/// Makes the plan from the line statistics of op(A) rows and op(B) columns: their summaries
/// ([`SideSummary::of`], what the device's `line_summary` kernel forms), then
/// [`plan_summarised`], then the shifts.
///
/// `scaling` is [`ScalingMode::Fast`] (bound `4096 k` for every line) or
/// [`ScalingMode::Norm`] (the lines' own `S`, the default); the shifts are
/// `ozaki_core::scaling::Scaling::new`'s for the same bounds, so CPU and GPU agree bit for bit,
/// and the count is `ozaki_core::rule::choose`'s for the same statistics, so they choose alike.
/// `Accurate` (which needs the coarse product) is not implemented here and runs as `Norm`.
pub fn plan(
    a: Lines,
    b: Lines,
    k: usize,
    forced: Option<usize>,
    scaling: ScalingMode,
    accuracy: Accuracy,
) -> Result<Plan, GpuError> {
    let req = request(k, (forced, accuracy), scaling);
    let (sa, sb) = (SideSummary::of(&a, &req), SideSummary::of(&b, &req));
    let head = plan_summarised(sa.view(), sb.view(), k, (forced, accuracy), scaling)?;
    let table = shift_table(head.scaling, head.moduli, k);
    let shifts = |s: &Lines| -> Vec<i32> {
        (0..s.len())
            .map(|l| {
                let class = match head.scaling {
                    ScalingMode::Fast => 0,
                    _ => ozaki_core::scaling::norm_class(s.coarse_sq[l]),
                };
                rule::exponent_of_bits(s.maxbits[l]).map_or(0, |e| table[class] - e)
            })
            .collect()
    };
    Ok(Plan {
        sigma: shifts(&a),
        tau: shifts(&b),
        ..head
    })
}

/// The plan from the two sides' summaries (the device route's download): the rule's count
/// (`ozaki_core::rule::choose_summarised`) and the bits of the scaled maxima; `sigma` and `tau`
/// are empty (the device forms the shifts, `line_shifts`).
pub fn plan_summarised(
    a: SummaryView,
    b: SummaryView,
    k: usize,
    (forced, accuracy): (Option<usize>, Accuracy),
    scaling: ScalingMode,
) -> Result<Plan, GpuError> {
    let req = request(k, (forced, accuracy), scaling);
    let choice = rule::choose_summarised(a, b, &req).map_err(decline)?;
    let moduli = choice.moduli;
    let budget = req
        .scaling
        .budget_bits(ozaki_core::moduli::CrtPlan::get(moduli));
    let table = shift_table(req.scaling, moduli, k);
    // |a'| <= 2^(p + 6) on each line (p <= 56: within the residue kernel's |z| <= 2^62); fast
    // scaling's table is the same for every class
    let bits = a
        .classes()
        .chain(b.classes())
        .map(|c| table[c] - (COARSE_BITS - 1) + COARSE_BITS)
        .max()
        .unwrap_or(0);
    debug_assert!(bits <= 62 && budget > 0);
    Ok(Plan {
        moduli,
        bits,
        sigma: Vec::new(),
        tau: Vec::new(),
        scaling: req.scaling,
        estimate: choice.estimate,
    })
}

/// The table kernel `line_shifts` turns into per-line shifts, `sigma = table[class] - e`
/// (`ozaki_core::scaling::shift_table` for r moduli).
pub(super) fn shift_table(scaling: ScalingMode, moduli: usize, k: usize) -> [i32; SHIFT_CLASSES] {
    let budget = scaling.budget_bits(ozaki_core::moduli::CrtPlan::get(
        moduli.clamp(2, MAX_MODULI),
    ));
    ozaki_core::scaling::shift_table(scaling, budget, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::rule::{LineTable, exponent_of_bits};
    use ozaki_core::scaling::{CoarseBounds, Exponents, Scaling, norm_class};
    use ozaki_core::testutil::{Family, Rng, matrix};

    fn exps(a: &LineTable, b: &LineTable) -> Exponents {
        Exponents {
            rows: a.view().exponents(),
            cols: b.view().exponents(),
        }
    }

    /// Lines: normal, a zero line, subnormal entries, exponent spread, one large entry.
    fn lines(k: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        let mut a = matrix(Family::Normal, k, 2, &mut rng);
        a.extend(vec![0.0; k]);
        a.extend(
            matrix(Family::Normal, k, 1, &mut rng)
                .iter()
                .map(|x| x * 1e-310),
        );
        a.extend(matrix(Family::Spread(2.0), k, 1, &mut rng));
        let mut one = matrix(Family::Normal, k, 1, &mut rng);
        one[3] = 1e6;
        a.extend(one);
        a
    }

    #[test]
    fn shifts_are_ozaki_cores_scaling_for_both_modes_and_every_count() {
        let k = 1000;
        let (x, y) = (lines(k, 3), matrix(Family::Normal, k, 3, &mut Rng::new(4)));
        let (ta, tb) = (
            LineTable::of_packed(&x, 6, k),
            LineTable::of_packed(&y, 3, k),
        );
        let mut planned = 0;
        for scaling in [ScalingMode::Fast, ScalingMode::Norm] {
            let bounds = match scaling {
                ScalingMode::Fast => CoarseBounds::fast(6, 3, k),
                _ => CoarseBounds::norm(&exps(&ta, &tb), &x, &y, k),
            };
            for r in 2..=MAX_MODULI {
                let Ok(p) = plan(ta.view(), tb.view(), k, Some(r), scaling, Accuracy::Default)
                else {
                    continue;
                };
                let core = Scaling::new(
                    scaling.budget_bits(ozaki_core::moduli::CrtPlan::get(r)),
                    &exps(&ta, &tb),
                    &bounds,
                );
                assert_eq!(
                    (&p.sigma, &p.tau),
                    (&core.sigma, &core.tau),
                    "{scaling:?} r = {r}"
                );
                assert_eq!(p.sigma[2], 0, "zero line keeps shift 0");
                assert!(p.bits <= 62);
                planned += 1;
            }
        }
        assert!(planned > 20, "only {planned} plans");
    }

    /// The device's shifts (`line_shifts`: `table[class(S)] - e`) are the plan's.
    #[test]
    fn device_shift_table_gives_the_plans_shifts() {
        let k = 1000;
        let x = lines(k, 11);
        let t = LineTable::of_packed(&x, 6, k);
        for scaling in [ScalingMode::Fast, ScalingMode::Norm] {
            for r in [8usize, 14, 17, 20] {
                let Ok(p) = plan(t.view(), t.view(), k, Some(r), scaling, Accuracy::Default) else {
                    continue;
                };
                let table = shift_table(scaling, r, k);
                let kernel: Vec<i32> = t
                    .maxbits
                    .iter()
                    .zip(&t.coarse_sq)
                    .map(|(&mb, &q)| exponent_of_bits(mb).map_or(0, |e| table[norm_class(q)] - e))
                    .collect();
                assert_eq!(kernel, p.sigma, "{scaling:?} r = {r}");
            }
        }
    }

    #[test]
    fn non_finite_and_overflowing_inputs_are_refused() {
        let nan = LineTable::of_packed(&[1.0, f64::NAN], 1, 2);
        let one = LineTable::of_packed(&[1.0, 2.0], 1, 2);
        let auto = (None, Accuracy::Default);
        for (a, b) in [(&nan, &one), (&one, &nan)] {
            assert_eq!(
                plan(a.view(), b.view(), 2, auto.0, ScalingMode::Norm, auto.1),
                Err(GpuError::NonFinite)
            );
        }
        let big = LineTable::of_packed(&[1e300, 1.0], 1, 2);
        assert_eq!(
            plan(
                big.view(),
                big.view(),
                2,
                None,
                ScalingMode::Norm,
                Accuracy::Default
            ),
            Err(GpuError::NonFinite)
        );
    }
}
