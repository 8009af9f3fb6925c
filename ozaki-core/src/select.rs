//! Per-call choice of the moduli count, and the error estimate it rests on (issue #3).
//!
//! # The estimate
//! Rounding `a_il 2^σ_i` to an integer moves it by `δ_il` (`|δ_il| <= 1/2` for RN, `< 1`
//! for truncation, 0 when the scaled entry is already an integer), so the emulated entry
//! carries the quantisation error `sum_l δ_il 2^-σ_i b_lj + a_il δ'_lj 2^-τ_j` (+ a
//! negligible cross term). The `δ` are known exactly once the shifts are fixed; with
//! `d_i = ||δ_i·||_2` ([`crate::scaling::quantization_error_norm`]) and treating the signs
//! of the terms as independent, `E|sum_l δ_il b_lj|^2 ≈ d_i^2 ||b_j||_2^2 / k`, and the
//! estimate is 3.5 standard deviations of each side, added:
//!
//! ```text
//! est_ij = 3.5 (2^-σ_i d_i ||b_j||_2 + 2^-τ_j d'_j ||a_i||_2) / sqrt(k)
//! ```
//!
//! (the worst case is `2^(-σ_i-1) ||b_j||_1 + 2^(-τ_j-1) ||a_i||_1`, [`crate::scaling`]).
//! Lines whose entries all scale exactly contribute nothing, which is what lets integer
//! and low-precision data run with few moduli.
//! The estimate is measured against the scale of the entry, `(|A||B|)_ij`, the quantity the
//! standard fp64 error bound `γ_k (|A||B|)_ij` is stated in. That scale comes from the
//! *exponent product* `H_ij = sum_l 2^(E(a_il) - e_i) 2^(E(b_lj) - f_j)` (one fp64 product of
//! powers of two, `E` as in [`crate::scaling`]; entries below 2^-1074 count as 0), which
//! satisfies `2^(e_i + f_j) H_ij <= (|A||B|)_ij < 4 · 2^(e_i + f_j) H_ij` whatever the spread
//! of the data (unlike the 6-bit coarse product, whose rounding up hides small entries).
//! With the scaled norms `â_i = ||a_i||_2 2^-e_i`, `b̂_j = ||b_j||_2 2^-f_j` and
//! `σ_i = p_i + 5 - e_i` the exponents cancel:
//!
//! ```text
//! ρ_ij = 3.5 · 2^-5 · (2^-p_i d_i b̂_j + 2^-q_j d'_j â_i) / (sqrt(k) · 2 H_ij)   (H_ij > 0)
//! ```
//!
//! (`2 H_ij` is the geometric middle of the bracket for `|A||B|`). Entries with `H_ij = 0`
//! (every product `a_il b_lj` is zero) and zero lines are exact and not counted. The
//! call's estimate is `ρ = max_ij ρ_ij`, reported in units of `u = 2^-53`
//! ([`Selection::estimate`]). It does not depend on the scaling mode except through the
//! shifts `p_i`, `q_j`. Because `p_i <= 56`, lines with a dynamic range beyond about
//! `56 - 53 + 6` bits cannot reach fp64 accuracy for entries dominated by their small
//! elements at any `r`: such calls fall back.
//!
//! # The choice: "no worse than native"
//! Native fp64 DGEMM (standard-order summation) makes rounding errors in its partial sums
//! `s_l`; for terms `x_l = a_il b_lj` of random sign `E s_l^2 ≈ (l/k) ||x||_2^2`, so about
//! 3.5 standard deviations of its error are `u ||x||_2 sqrt(k/6) · 3.5`. With
//! `H2_ij = sum_l 4^(E(a_il) - e_i + E(b_lj) - f_j)` (computed in the same pass as `H`) and
//! the mean binade factor 1.44 this is, relative to `(|A||B|)_ij` and in units of `u`,
//!
//! ```text
//! ν_ij = 3.5 · 1.44 · sqrt(k/6) · sqrt(H2_ij) / (2 H_ij)                ([`native_estimate`])
//! ```
//!
//! (about 2 u on normal data, more on spread data, whose terms are dominated by a few large
//! products). The default choice requires, for every entry, `ρ_ij <= max(T, ν_ij)` with
//! `T = 4 u` ([`DEFAULT_TARGET_ULPS`]): the emulation's estimated error may not exceed
//! native's (nor 4 u, the level native reaches on benign data). The smallest `r` in
//! `2..=20` whose scaling covers every line ([`crate::scaling::Scaling::covers`]) and meets
//! this is chosen (`ρ` never increases with `r`, so a binary search); if even 20 moduli
//! miss it, the call goes to native fp64
//! ([`crate::emulate::Fallback::AccuracyUnreachable`]). A forced count (`OZAKI_MODULI`) is
//! used as given unless it cannot cover the exponent spread
//! ([`crate::emulate::Fallback::SpreadNotCoverable`]). `ρ` over-estimates the measured
//! maximum error by a factor of about 2 (normal data) to 6 (φ = 2-4); ACCURACY.md has the
//! measured errors next to the estimates.
//!
//! The estimate is statistical (3.5 standard deviations of independent rounding errors),
//! not a bound; the accuracy suite (ACCURACY.md) compares it with measured errors.

use crate::emulate::Fallback;
use crate::moduli::{CrtPlan, MAX_MODULI, MIN_MODULI};
use crate::scaling::{CoarseBounds, Exponents, Quantizer, Scaling, ScalingMode};

/// Default accuracy floor `T`: `ρ_ij <= max(T, ν_ij)` with `T = 4 u` (module doc).
pub const DEFAULT_TARGET_ULPS: f64 = 4.0;

const U: f64 = 1.0 / (1u64 << 53) as f64;

/// What the estimate needs about one call (built by [`crate::emulate`]).
#[derive(Debug)]
pub struct CallStats<'a> {
    /// Inner dimension.
    pub k: usize,
    /// op(A) packed by rows (`a[i * k + l]`).
    pub a: &'a [f64],
    /// op(B) packed by columns (`b[j * k + l]`).
    pub b: &'a [f64],
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Line exponents.
    pub exps: &'a Exponents,
    /// `R_i`, `K_j` of the scaling mode (coarse product maxima, coarse line norms or the
    /// fast bounds; [`crate::scaling`] step 3).
    pub bounds: &'a CoarseBounds,
    /// The exponent product `H` (column-major m x n; module doc).
    pub scale: &'a [f64],
    /// `H2_ij = sum_l 4^(E(a_il) - e_i + E(b_lj) - f_j)` (module doc, native's estimate).
    pub scale2: &'a [f64],
    /// Scaled row norms `â_i` (0 for zero rows).
    pub row_norms: &'a [f64],
    /// Scaled column norms `b̂_j` (0 for zero columns).
    pub col_norms: &'a [f64],
    /// Only this triangle of C matters (dsyrk).
    pub tri: Option<crate::blas::Uplo>,
    /// The mode `bounds` come from (it sets the budget, [`ScalingMode::budget_bits`]).
    pub scaling: ScalingMode,
}

/// The moduli count and scaling chosen for a call.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Number of moduli.
    pub moduli: usize,
    /// The shifts for that count.
    pub scaling: Scaling,
    /// The estimate `ρ` in units of `u` (module doc).
    pub estimate: f64,
}

/// Native fp64's estimated error for entry `(i, j)` in units of `u` (module doc):
/// `ν_ij = 3.5 · 1.44 · sqrt(k/6) · sqrt(H2_ij) / (2 H_ij)`.
#[inline]
pub fn native_estimate(k: usize, h: f64, h2: f64) -> f64 {
    3.5 * 1.44 * (k as f64 / 6.0).sqrt() * h2.sqrt() / (2.0 * h)
}

/// The call's estimate: `(max_ij ρ_ij / u, max_ij ρ_ij / (u · max(target, ν_ij)))`.
#[allow(clippy::needless_range_loop)] // i and j index several per-line arrays at once
pub fn estimate(
    stats: &CallStats<'_>,
    scaling: &Scaling,
    quantizer: Quantizer,
    target_ulps: f64,
) -> (f64, f64) {
    let k = stats.k;
    let line_err = |x: &[f64], shifts: &[i32]| -> Vec<f64> {
        shifts
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                crate::scaling::quantization_error_norm(&x[i * k..(i + 1) * k], s, quantizer)
            })
            .collect()
    };
    let da = line_err(stats.a, &scaling.sigma);
    let db = line_err(stats.b, &scaling.tau);
    let kappa = 3.5 / (k.max(1) as f64).sqrt();
    let pw = |p: i32| 2f64.powi(-p);
    let mut worst = 0.0f64;
    let mut worst_rel = 0.0f64;
    for j in 0..stats.n {
        let Some(q) = scaling.q[j] else { continue };
        let (tq, nb) = (pw(q) * db[j], stats.col_norms[j]);
        for i in 0..stats.m {
            let h = stats.scale[i + j * stats.m];
            if h == 0.0 {
                continue;
            }
            let within = match stats.tri {
                None => true,
                Some(crate::blas::Uplo::Upper) => i <= j,
                Some(crate::blas::Uplo::Lower) => i >= j,
            };
            let Some(p) = scaling.p[i] else { continue };
            if within {
                let rho = kappa * (pw(p) * da[i] * nb + tq * stats.row_norms[i]) / (64.0 * h) / U;
                let allowed = target_ulps.max(native_estimate(k, h, stats.scale2[i + j * stats.m]));
                worst = worst.max(rho);
                worst_rel = worst_rel.max(rho / allowed);
            }
        }
    }
    (worst, worst_rel)
}

/// Chooses the moduli count (module doc): `forced` is `OZAKI_MODULI`, `target_ulps` the
/// accuracy target in units of `u`.
pub fn choose(
    stats: &CallStats<'_>,
    quantizer: Quantizer,
    forced: Option<usize>,
    target_ulps: f64,
) -> Result<Selection, Fallback> {
    let at = |r: usize| {
        let budget = stats.scaling.budget_bits(CrtPlan::get(r));
        let scaling = Scaling::new(budget, stats.exps, stats.bounds);
        let ok = scaling.covers(stats.bounds);
        (scaling, ok)
    };
    if let Some(r) = forced {
        let (scaling, ok) = at(r);
        if !ok {
            return Err(Fallback::SpreadNotCoverable { moduli: r });
        }
        let (estimate, _) = estimate(stats, &scaling, quantizer, target_ulps);
        return Ok(Selection {
            moduli: r,
            scaling,
            estimate,
        });
    }
    let meets = |r: usize| -> Option<Selection> {
        let (scaling, ok) = at(r);
        if !ok {
            return None;
        }
        let (estimate, rel) = estimate(stats, &scaling, quantizer, target_ulps);
        (rel <= 1.0).then_some(Selection {
            moduli: r,
            scaling,
            estimate,
        })
    };
    let Some(best) = meets(MAX_MODULI) else {
        let (scaling, ok) = at(MAX_MODULI);
        let est = if ok {
            estimate(stats, &scaling, quantizer, target_ulps).0
        } else {
            f64::INFINITY
        };
        return Err(Fallback::AccuracyUnreachable { estimate_ulps: est });
    };
    // Binary search for the smallest r that meets the target (monotone in r).
    let (mut lo, mut hi, mut found) = (MIN_MODULI, MAX_MODULI, best);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match meets(mid) {
            Some(sel) => {
                hi = mid;
                found = sel;
            }
            None => lo = mid + 1,
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats_for<'a>(
        exps: &'a Exponents,
        bounds: &'a CoarseBounds,
        h: &'a [f64],
        norms: &'a [f64],
        x: &'a [f64],
        k: usize,
    ) -> CallStats<'a> {
        // scale2 = 0: native's own estimate is 0, the target alone decides.
        CallStats {
            k,
            a: x,
            b: x,
            m: exps.rows.len(),
            n: exps.cols.len(),
            exps,
            bounds,
            scale: h,
            scale2: &[0.0],
            row_norms: norms,
            col_norms: norms,
            tri: None,
            scaling: ScalingMode::Fast,
        }
    }

    #[test]
    fn forced_count_that_cannot_cover_falls_back_and_targets_can_be_unreachable() {
        let k = 1 << 16;
        // Entries near 1 and near 1e-13 (the latter never scale exactly: p <= 56).
        let x: Vec<f64> = (0..k)
            .map(|l| (1.0 + (l as f64) * f64::EPSILON * 3.0) * if l % 2 == 0 { 1.0 } else { 1e-13 })
            .collect();
        let exps = Exponents {
            rows: vec![Some(0)],
            cols: vec![Some(0)],
        };
        let bounds = CoarseBounds::fast(1, 1, k);
        let norms = [(k as f64).sqrt()];
        let h = [k as f64];
        let st = stats_for(&exps, &bounds, &h, &norms, &x, k);
        assert!(matches!(
            choose(&st, Quantizer::Nearest, Some(3), 2.0),
            Err(Fallback::SpreadNotCoverable { moduli: 3 })
        ));
        let sel = choose(&st, Quantizer::Nearest, Some(14), 2.0).unwrap();
        assert_eq!(sel.moduli, 14);
        assert!(sel.estimate > 0.0);
        assert!(matches!(
            choose(&st, Quantizer::Nearest, None, 1e-30),
            Err(Fallback::AccuracyUnreachable { .. })
        ));
        // Truncation errs more than rounding for the same shifts.
        let tz = choose(&st, Quantizer::Truncate, Some(14), 2.0).unwrap();
        assert!(tz.estimate > sel.estimate);
    }
}
