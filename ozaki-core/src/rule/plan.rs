//! A call's plan from its line statistics alone: the accuracy rule's moduli count (or its
//! decline), the bits of the scaled maxima and the per-line power-of-two shifts, through a
//! per-class shift table (what a device turns into the same shifts without the lines making
//! a round trip). The GPU route plans this way from the statistics its kernels form; for the
//! same statistics the count is [`super::choose`]'s and the shifts are
//! [`crate::scaling::Scaling::new`]'s, so it chooses as `cpu-ozaki` does.
//!
//! Line statistics bound the shifts of fast scaling (`4096 k` for every line) and of norm
//! scaling (each line's `S`); accurate scaling needs the coarse product, which they do not
//! hold, so a plan asked for it is made with norm scaling ([`planned_scaling`]).

use super::{Accuracy, KeyParams, Lines, Request, SideSummary, SummaryView};
use crate::fallback::Fallback;
use crate::moduli::{CrtPlan, MAX_MODULI};
use crate::scaling::{COARSE_BITS, SHIFT_CLASSES, ScalingMode, norm_class};

/// Moduli count and shifts of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Number of moduli (the first `moduli` of `crate::moduli::INT8_MODULI`).
    pub moduli: usize,
    /// Most bits a scaled row / column maximum keeps: `|a'| <= 2^bits`; at most 62 (shifts
    /// cap p at 56).
    pub bits: i32,
    /// Row shifts of op(A): a'_il = rint(a_il 2^sigma_i) (empty from [`plan_summarised`]).
    pub sigma: Vec<i32>,
    /// Column shifts of op(B) (empty from [`plan_summarised`]).
    pub tau: Vec<i32>,
    /// How the shifts were bounded (`Fast` or `Norm`).
    pub scaling: ScalingMode,
    /// The rule's estimate at this count (`super::Choice::estimate`).
    pub estimate: f64,
}

/// The scaling a plan from line statistics runs when `scaling` is asked for: accurate
/// scaling runs as norm (module doc), the others as asked.
pub fn planned_scaling(scaling: ScalingMode) -> ScalingMode {
    match scaling {
        ScalingMode::Accurate => ScalingMode::Norm,
        s => s,
    }
}

/// The rule's request for a call of inner dimension `k` planned from line statistics.
pub fn request(
    k: usize,
    (forced, accuracy): (Option<usize>, Accuracy),
    scaling: ScalingMode,
) -> Request<'static> {
    Request {
        forced,
        accuracy,
        ..Request::new(k, planned_scaling(scaling))
    }
}

/// What a reduction of line statistics to the rule's summaries needs for a call: the
/// request's key parameters and, for fast scaling, every line's shift class (`None`: each
/// line's class from its `S`).
pub fn summary_keys(
    k: usize,
    accuracy: Accuracy,
    scaling: ScalingMode,
) -> (KeyParams, Option<usize>) {
    let req = request(k, (None, accuracy), scaling);
    let fixed = match req.scaling {
        ScalingMode::Fast => Some(norm_class(4096 * k.max(1) as u64)),
        _ => None,
    };
    (KeyParams::new(&req), fixed)
}

/// The plan from the line statistics of op(A) rows and op(B) columns: their summaries
/// ([`SideSummary::of`]), then [`plan_summarised`], then the shifts `table[class] - e` per
/// line ([`shift_table`]).
///
/// # Errors
/// The rule's decline ([`super::choose_summarised`]).
pub fn plan(
    a: Lines,
    b: Lines,
    k: usize,
    (forced, accuracy): (Option<usize>, Accuracy),
    scaling: ScalingMode,
) -> Result<Plan, Fallback> {
    let req = request(k, (forced, accuracy), scaling);
    let (sa, sb) = (SideSummary::of(&a, &req), SideSummary::of(&b, &req));
    let head = plan_summarised(sa.view(), sb.view(), k, (forced, accuracy), scaling)?;
    let table = shift_table(head.scaling, head.moduli, k);
    let shifts = |s: &Lines| -> Vec<i32> {
        (0..s.len())
            .map(|l| {
                let class = match head.scaling {
                    ScalingMode::Fast => 0,
                    _ => norm_class(s.coarse_sq[l]),
                };
                super::exponent_of_bits(s.maxbits[l]).map_or(0, |e| table[class] - e)
            })
            .collect()
    };
    Ok(Plan {
        sigma: shifts(&a),
        tau: shifts(&b),
        ..head
    })
}

/// The plan from the two sides' summaries: the rule's count
/// ([`super::choose_summarised`]) and the bits of the scaled maxima; `sigma` and `tau` are
/// empty (whoever holds the lines forms them from [`shift_table`]).
///
/// # Errors
/// The rule's decline.
pub fn plan_summarised(
    a: SummaryView,
    b: SummaryView,
    k: usize,
    (forced, accuracy): (Option<usize>, Accuracy),
    scaling: ScalingMode,
) -> Result<Plan, Fallback> {
    let req = request(k, (forced, accuracy), scaling);
    let choice = super::choose_summarised(a, b, &req)?;
    let moduli = choice.moduli;
    let budget = req.scaling.budget_bits(CrtPlan::get(moduli));
    let table = shift_table(req.scaling, moduli, k);
    // |a'| <= 2^(p + 6) on each line (p <= 56: |z| <= 2^62); fast scaling's table is the same
    // for every class
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

/// The per-class table of a plan with `moduli` moduli: a line of class `c` and exponent `e`
/// gets the shift `table[c] - e` (`crate::scaling::shift_table` for that count's budget).
pub fn shift_table(scaling: ScalingMode, moduli: usize, k: usize) -> [i32; SHIFT_CLASSES] {
    let budget = scaling.budget_bits(CrtPlan::get(moduli.clamp(2, MAX_MODULI)));
    crate::scaling::shift_table(scaling, budget, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::{LineTable, exponent_of_bits};
    use crate::scaling::{CoarseBounds, Exponents, Scaling};
    use crate::testutil::{Family, Rng, matrix};

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
                let Ok(p) = plan(
                    ta.view(),
                    tb.view(),
                    k,
                    (Some(r), Accuracy::Default),
                    scaling,
                ) else {
                    continue;
                };
                let core = Scaling::new(
                    scaling.budget_bits(CrtPlan::get(r)),
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

    /// The shifts a device forms from the table (`table[class(S)] - e` per line, as the
    /// GPU's `line_shifts`) are the plan's.
    #[test]
    fn shift_table_gives_the_plans_shifts() {
        let k = 1000;
        let x = lines(k, 11);
        let t = LineTable::of_packed(&x, 6, k);
        for scaling in [ScalingMode::Fast, ScalingMode::Norm] {
            for r in [8usize, 14, 17, 20] {
                let Ok(p) = plan(t.view(), t.view(), k, (Some(r), Accuracy::Default), scaling)
                else {
                    continue;
                };
                let table = shift_table(scaling, r, k);
                let from_table: Vec<i32> = t
                    .maxbits
                    .iter()
                    .zip(&t.coarse_sq)
                    .map(|(&mb, &q)| exponent_of_bits(mb).map_or(0, |e| table[norm_class(q)] - e))
                    .collect();
                assert_eq!(from_table, p.sigma, "{scaling:?} r = {r}");
            }
        }
    }

    #[test]
    fn non_finite_and_overflowing_inputs_are_declined() {
        let nan = LineTable::of_packed(&[1.0, f64::NAN], 1, 2);
        let one = LineTable::of_packed(&[1.0, 2.0], 1, 2);
        let auto = (None, Accuracy::Default);
        for (a, b) in [(&nan, &one), (&one, &nan)] {
            assert_eq!(
                plan(a.view(), b.view(), 2, auto, ScalingMode::Norm),
                Err(Fallback::NonFinite)
            );
        }
        let big = LineTable::of_packed(&[1e300, 1.0], 1, 2);
        assert_eq!(
            plan(big.view(), big.view(), 2, auto, ScalingMode::Norm),
            Err(Fallback::ExponentRange)
        );
    }

    /// Accurate scaling asked of a plan from line statistics runs as norm, with norm's
    /// count and shifts.
    #[test]
    fn accurate_plans_as_norm() {
        let k = 1000;
        let t = LineTable::of_packed(&matrix(Family::Spread(1.0), k, 4, &mut Rng::new(5)), 4, k);
        let auto = (None, Accuracy::Default);
        let norm = plan(t.view(), t.view(), k, auto, ScalingMode::Norm).unwrap();
        let accurate = plan(t.view(), t.view(), k, auto, ScalingMode::Accurate).unwrap();
        assert_eq!(accurate, norm);
        assert_eq!(accurate.scaling, ScalingMode::Norm);
    }
}
