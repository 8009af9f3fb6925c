//! Per-call choice of the moduli count, and the error estimate it rests on (issue #3).
//!
//! # The estimate
//! Rounding `a_il 2^σ_i` to an integer moves it by `δ_il`, `|δ_il| <= 1/2` (RN; `< 1` for
//! truncation), so the emulated entry carries the quantisation error
//! `sum_l δ_il 2^-σ_i b_lj + a_il δ'_lj 2^-τ_j` (+ a negligible cross term). Treating the
//! `δ` as independent (uniform, standard deviation `1/sqrt(12)` for RN), about 3.5 standard
//! deviations of that sum is
//!
//! ```text
//! est_ij = κ (2^-σ_i ||b_j||_2 + 2^-τ_j ||a_i||_2),       κ = 1 (RN), 2 (truncation)
//! ```
//!
//! and the worst case is `2^(-σ_i-1) ||b_j||_1 + 2^(-τ_j-1) ||a_i||_1` ([`crate::scaling`]).
//! The estimate is measured against the scale of the entry, `(|A||B|)_ij`, the quantity the
//! standard fp64 error bound `γ_k (|A||B|)_ij` is stated in. In accurate mode that scale is
//! taken from the coarse product, `(|A||B|)_ij ≈ 2^(e_i + f_j - 10) G_ij`; with the scaled
//! norms `â_i = ||a_i 2^-e_i||_2`, `b̂_j = ||b_j 2^-f_j||_2` (both in `[1, 2 sqrt k)`) the
//! exponents cancel:
//!
//! ```text
//! accurate:  ρ_ij = κ · 32 · (2^-p_i b̂_j + 2^-q_j â_i) / G_ij          (G_ij > 0)
//! fast:      ρ_ij = κ · (2^(-p_i-5) / â_i + 2^(-q_j-5) / b̂_j)           (Cauchy-Schwarz scale)
//! ```
//!
//! Entries with `G_ij = 0` (every product `a_il b_lj` is zero) and zero lines are exact and
//! not counted. The call's estimate is `ρ = max_ij ρ_ij`, reported in units of
//! `u = 2^-53` ([`Selection::estimate`]).
//!
//! # The choice
//! Native fp64 DGEMM's componentwise error on such data is typically 0.5-3 `u (|A||B|)_ij`
//! (and at most `γ_k (|A||B|)_ij`). The default target is therefore `ρ <= 2 u`
//! ([`DEFAULT_TARGET_ULPS`]): "no worse than native". The smallest `r` in `2..=20` whose
//! scaling covers every line ([`crate::scaling::Scaling::covers`]) and meets the target is
//! chosen (`ρ` never increases with `r`, so this is a binary search); if even 20 moduli
//! miss it, the call goes to native fp64 ([`crate::emulate::Fallback::AccuracyUnreachable`]).
//! A forced count (`OZAKI_MODULI`) is used as given unless it cannot cover the exponent
//! spread ([`crate::emulate::Fallback::SpreadNotCoverable`]).
//!
//! The estimate is optimistic for entries whose `(|A||B|)_ij` is far below what the
//! 6-bit coarse magnitudes resolve (`2^(e_i + f_j - 10)` per term): extreme spreads such
//! as `φ = 8` can exceed it; the accuracy suite (ACCURACY.md) reports where.

use crate::emulate::Fallback;
use crate::moduli::{CrtPlan, MAX_MODULI, MIN_MODULI};
use crate::scaling::{CoarseBounds, Exponents, Quantizer, Scaling};

/// Default accuracy target: `ρ <= 2 u` (module doc).
pub const DEFAULT_TARGET_ULPS: f64 = 2.0;

const U: f64 = 1.0 / (1u64 << 53) as f64;

/// What the estimate needs about one call (built by [`crate::emulate`]).
#[derive(Debug)]
pub struct CallStats<'a> {
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Line exponents.
    pub exps: &'a Exponents,
    /// `R_i`, `K_j` (accurate) or the fast bounds.
    pub bounds: &'a CoarseBounds,
    /// The coarse product `G` (column-major m x n) in accurate mode, `None` in fast mode.
    pub coarse: Option<&'a [u64]>,
    /// Scaled row norms `â_i` (0 for zero rows).
    pub row_norms: &'a [f64],
    /// Scaled column norms `b̂_j` (0 for zero columns).
    pub col_norms: &'a [f64],
    /// Only this triangle of C matters (dsyrk).
    pub tri: Option<crate::blas::Uplo>,
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

/// `ρ / u` for a scaling (module doc).
pub fn estimate(stats: &CallStats<'_>, scaling: &Scaling, quantizer: Quantizer) -> f64 {
    let kappa = match quantizer {
        Quantizer::Nearest => 1.0,
        Quantizer::Truncate => 2.0,
    };
    let pw = |p: i32| 2f64.powi(-p);
    let mut worst = 0.0f64;
    match stats.coarse {
        None => {
            let rows = scaling.p.iter().zip(stats.row_norms).filter_map(|(p, &na)| p.map(|p| pw(p + 5) / na));
            let cols = scaling.q.iter().zip(stats.col_norms).filter_map(|(q, &nb)| q.map(|q| pw(q + 5) / nb));
            let (ra, cb) = (rows.fold(0.0f64, f64::max), cols.fold(0.0f64, f64::max));
            if ra > 0.0 && cb > 0.0 {
                worst = ra + cb;
            }
        }
        Some(g) => {
            for j in 0..stats.n {
                let Some(q) = scaling.q[j] else { continue };
                let (tq, nb) = (pw(q), stats.col_norms[j]);
                for i in 0..stats.m {
                    let gij = g[i + j * stats.m];
                    if gij == 0 {
                        continue;
                    }
                    let within = match stats.tri {
                        None => true,
                        Some(crate::blas::Uplo::Upper) => i <= j,
                        Some(crate::blas::Uplo::Lower) => i >= j,
                    };
                    let Some(p) = scaling.p[i] else { continue };
                    if within {
                        let rho = 32.0 * (pw(p) * nb + tq * stats.row_norms[i]) / gij as f64;
                        worst = worst.max(rho);
                    }
                }
            }
        }
    }
    kappa * worst / U
}

/// Chooses the moduli count (module doc): `forced` is `OZAKI_MODULI`, `target_ulps` the
/// accuracy target in units of `u`.
pub fn choose(stats: &CallStats<'_>, quantizer: Quantizer, forced: Option<usize>, target_ulps: f64) -> Result<Selection, Fallback> {
    let at = |r: usize| {
        let scaling = Scaling::new(CrtPlan::get(r).budget_bits, stats.exps, stats.bounds);
        let ok = scaling.covers(stats.bounds);
        (scaling, ok)
    };
    if let Some(r) = forced {
        let (scaling, ok) = at(r);
        if !ok {
            return Err(Fallback::SpreadNotCoverable { moduli: r });
        }
        let estimate = estimate(stats, &scaling, quantizer);
        return Ok(Selection { moduli: r, scaling, estimate });
    }
    let meets = |r: usize| -> Option<Selection> {
        let (scaling, ok) = at(r);
        if !ok {
            return None;
        }
        let estimate = estimate(stats, &scaling, quantizer);
        (estimate <= target_ulps).then_some(Selection { moduli: r, scaling, estimate })
    };
    let Some(best) = meets(MAX_MODULI) else {
        let (scaling, ok) = at(MAX_MODULI);
        let est = if ok { estimate(stats, &scaling, quantizer) } else { f64::INFINITY };
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

    fn stats_for<'a>(exps: &'a Exponents, bounds: &'a CoarseBounds, g: Option<&'a [u64]>, norms: &'a [f64]) -> CallStats<'a> {
        CallStats { m: exps.rows.len(), n: exps.cols.len(), exps, bounds, coarse: g, row_norms: norms, col_norms: norms, tri: None }
    }

    #[test]
    fn more_spread_needs_more_moduli() {
        let exps = Exponents { rows: vec![Some(0); 2], cols: vec![Some(0); 2] };
        for k in [64usize, 4096, 65536] {
            let norms = [(k as f64).sqrt(); 2];
            // Benign: G close to its maximum (no spread) ...
            let g = vec![(k as u64) * 2000; 4];
            let bounds = CoarseBounds::from_product(&g, 2, 2);
            let sel = choose(&stats_for(&exps, &bounds, Some(&g), &norms), Quantizer::Nearest, None, 2.0).unwrap();
            assert!((12..=16).contains(&sel.moduli), "k={k}: {}", sel.moduli);
            // ... spread: G much smaller than its row maximum for one entry.
            let g2 = vec![(k as u64) * 2000, (k as u64) * 2, (k as u64) * 2000, (k as u64) * 2000];
            let b2 = CoarseBounds::from_product(&g2, 2, 2);
            let sel2 = choose(&stats_for(&exps, &b2, Some(&g2), &norms), Quantizer::Nearest, None, 2.0).unwrap();
            assert!(sel2.moduli > sel.moduli, "k={k}: {} vs {}", sel2.moduli, sel.moduli);
        }
    }

    #[test]
    fn forced_count_that_cannot_cover_falls_back() {
        let exps = Exponents { rows: vec![Some(0)], cols: vec![Some(0)] };
        let bounds = CoarseBounds::fast(1, 1, 1 << 20);
        let norms = [1.0];
        let st = stats_for(&exps, &bounds, None, &norms);
        assert!(matches!(choose(&st, Quantizer::Nearest, Some(3), 2.0), Err(Fallback::SpreadNotCoverable { moduli: 3 })));
        assert!(choose(&st, Quantizer::Nearest, Some(14), 2.0).is_ok());
        // An unreachable target.
        assert!(matches!(choose(&st, Quantizer::Nearest, None, 1e-30), Err(Fallback::AccuracyUnreachable { .. })));
    }
}
