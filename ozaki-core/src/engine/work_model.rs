//! Work models: the seconds of one kernel or call as a sum of priced work terms, fitted to
//! measured timings.
//!
//! A *work model* is `t = s_mnk·mnk + s_nk·nk + s_mk·mk + s_mn·mn + s_fixed` (see
//! [`super::WorkTerms`]), fitted to measured timings by non-negative least squares on relative
//! error ([`WorkModel::fit`]), times a local multiplicative correction interpolated from the
//! fit's residuals at the calibration shapes ([`Correction`]); far from every calibrated shape
//! the correction fades to 1 and the physical terms extrapolate. A [`super::profile::Profile`]
//! stores one per measured kernel; [`super::model`] sums them into route costs.

use super::{CallShape, WorkTerms};
use crate::trace::Routine;
use serde::{Deserialize, Serialize};

/// One timed run used to fit a [`WorkModel`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Routine of the timed call.
    #[serde(default = "dgemm")]
    pub routine: Routine,
    /// Rows of C.
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// Measured seconds (median of the repeats).
    pub seconds: f64,
}

fn dgemm() -> Routine {
    Routine::Dgemm
}

impl Sample {
    fn shape(&self) -> CallShape {
        match self.routine {
            Routine::Dgemm => CallShape::gemm(self.m, self.n, self.k),
            Routine::Dsyrk => CallShape::syrk(self.n, self.k),
        }
    }
}

/// A multiplicative correction `exp(Σ wᵢ·ln ratioᵢ / (Σ wᵢ + w₀))` with Gaussian weights in
/// (log₂ m, log₂ n, log₂ k): equal to the measured/modelled ratio at a calibrated shape, 1
/// far from all of them. It makes the model a measured lookup near measured shapes
/// (take-away 5: latency-bound shapes are better looked up than extrapolated).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Correction {
    /// Measured shapes and ln(measured / modelled) there.
    #[serde(default)]
    pub points: Vec<CorrectionPoint>,
}

/// One point of a [`Correction`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CorrectionPoint {
    /// Rows of C.
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// ln(measured seconds / modelled seconds).
    pub ln_ratio: f64,
}

/// Width of a correction point's influence, in log₂ units per dimension (a factor 2).
const CORRECTION_WIDTH_LOG2: f64 = 1.0;
/// Weight of "no correction" in the interpolation, so that a lone distant point fades out.
const CORRECTION_PRIOR_WEIGHT: f64 = 0.05;

/// Gaussian exponents beyond this give weights [`Correction::factor`] leaves out (a point
/// 7 octaves away in all: e^-25, 3e-10 of the prior's weight).
const NEGLIGIBLE_EXPONENT: f64 = 25.0;

/// log₂ of a dimension (at least 1): exact and without a libm call for powers of two, which
/// calibration shapes mostly are.
fn log2(x: u64) -> f64 {
    let x = x.max(1);
    if x.is_power_of_two() {
        x.trailing_zeros() as f64
    } else {
        (x as f64).log2()
    }
}

impl Correction {
    /// The multiplicative factor at (m, n, k).
    pub fn factor(&self, m: u64, n: u64, k: u64) -> f64 {
        if self.points.is_empty() {
            return 1.0;
        }
        let (lm, ln, lk) = (log2(m), log2(n), log2(k));
        let (mut num, mut den) = (0.0, CORRECTION_PRIOR_WEIGHT);
        for p in &self.points {
            let d2 = (lm - log2(p.m)).powi(2) + (ln - log2(p.n)).powi(2) + (lk - log2(p.k)).powi(2);
            let x = d2 / (2.0 * CORRECTION_WIDTH_LOG2 * CORRECTION_WIDTH_LOG2);
            // A point this far weighs under e^-25 (3e-10 of the prior's weight): skipping its
            // exp moves the factor by less than that, and most points are this far from a call.
            if x > NEGLIGIBLE_EXPONENT {
                continue;
            }
            let w = (-x).exp();
            num += w * p.ln_ratio;
            den += w;
        }
        if num == 0.0 {
            return 1.0;
        }
        (num / den).exp()
    }
}

/// Seconds of one kernel/call as a sum of priced work terms (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkModel {
    /// Seconds per multiply-add (1 / (half the sustained FLOP rate)).
    pub s_per_mnk: f64,
    /// Seconds per element of op(B) (operand traffic, packing).
    pub s_per_nk: f64,
    /// Seconds per element of op(A).
    pub s_per_mk: f64,
    /// Seconds per element of C.
    pub s_per_mn: f64,
    /// Fixed seconds per call (latency).
    pub s_fixed: f64,
    /// Local correction from the fit's residuals.
    #[serde(default)]
    pub correction: Correction,
}

impl WorkModel {
    /// A model of a pure rate `flops_per_s` (FLOP/s, 2 per multiply-add) plus a latency.
    pub fn from_rate(flops_per_s: f64, latency_s: f64) -> WorkModel {
        WorkModel {
            s_per_mnk: 2.0 / flops_per_s,
            s_fixed: latency_s,
            ..WorkModel::default()
        }
    }

    /// Uncorrected seconds for the given work terms.
    pub fn base_seconds(&self, w: &WorkTerms) -> f64 {
        self.s_per_mnk * w.mnk
            + self.s_per_nk * w.nk
            + self.s_per_mk * w.mk
            + self.s_per_mn * w.mn
            + self.s_fixed
    }

    /// Predicted seconds of one call of this shape.
    pub fn seconds(&self, shape: &CallShape) -> f64 {
        self.base_seconds(&shape.work()) * self.correction.factor(shape.m, shape.n, shape.k)
    }

    /// [`WorkModel::seconds`] with the work `factor` times slower: the fixed latency does not
    /// stretch (a loaded CPU or an unaligned cuBLAS kernel slows the work terms only).
    pub fn stretched_seconds(&self, shape: &CallShape, factor: f64) -> f64 {
        let t = self.seconds(shape);
        let fixed = self.s_fixed.min(t);
        fixed + (t - fixed) * factor
    }

    /// The factor [`WorkModel::stretched_seconds`] would need to give `measured_s` at
    /// `shape`; `None` where the model prices no work beyond its fixed latency there.
    pub fn stretch_of(&self, shape: &CallShape, measured_s: f64) -> Option<f64> {
        let t = self.seconds(shape);
        let fixed = self.s_fixed.min(t);
        (t - fixed > 0.0).then(|| (measured_s - fixed).max(0.0) / (t - fixed))
    }

    /// The sustained rate the `mnk` term alone implies (FLOP/s), for reports.
    pub fn peak_flops(&self) -> f64 {
        if self.s_per_mnk > 0.0 {
            2.0 / self.s_per_mnk
        } else {
            f64::INFINITY
        }
    }

    /// Fits the five coefficients to `samples` by non-negative least squares on relative
    /// error (each row divided by its measured time, so a 10 µs call counts as much as a
    /// 10 s call), then stores the residuals as the [`Correction`].
    ///
    /// NNLS over five unknowns is solved exactly by trying every subset of active
    /// coefficients (32 small normal-equation solves) and keeping the best feasible one.
    ///
    /// # Errors
    /// Fewer than two usable samples (positive time and non-empty shape).
    pub fn fit(samples: &[Sample]) -> Result<WorkModel, String> {
        let rows: Vec<([f64; 5], f64)> = samples
            .iter()
            .filter(|s| s.seconds > 0.0 && s.seconds.is_finite() && s.m > 0 && s.n > 0 && s.k > 0)
            .map(|s| {
                let w = s.shape().work();
                (
                    [
                        w.mnk / s.seconds,
                        w.nk / s.seconds,
                        w.mk / s.seconds,
                        w.mn / s.seconds,
                        1.0 / s.seconds,
                    ],
                    1.0,
                )
            })
            .collect();
        if rows.len() < 2 {
            return Err(format!(
                "need at least 2 timed shapes to fit a work model, got {}",
                rows.len()
            ));
        }
        let x = nnls_subsets(&rows);
        let mut model = WorkModel {
            s_per_mnk: x[0],
            s_per_nk: x[1],
            s_per_mk: x[2],
            s_per_mn: x[3],
            s_fixed: x[4],
            correction: Correction::default(),
        };
        model.correction.points = samples
            .iter()
            .filter(|s| s.seconds > 0.0 && s.seconds.is_finite() && s.m > 0 && s.n > 0 && s.k > 0)
            .map(|s| {
                let base = model.base_seconds(&s.shape().work());
                CorrectionPoint {
                    m: s.m,
                    n: s.n,
                    k: s.k,
                    ln_ratio: (s.seconds / base).ln(),
                }
            })
            .collect();
        Ok(model)
    }
}

/// Exact non-negative least squares for ≤ 5 unknowns: minimise Σ (a·x − b)² over x ≥ 0 by
/// solving the unconstrained problem on every subset of free variables.
fn nnls_subsets(rows: &[([f64; 5], f64)]) -> [f64; 5] {
    // Scale columns to unit norm so the tiny per-mnk and large per-element coefficients are
    // solved with comparable conditioning.
    let mut scale = [0.0f64; 5];
    for (a, _) in rows {
        for j in 0..5 {
            scale[j] += a[j] * a[j];
        }
    }
    for s in &mut scale {
        *s = if *s > 0.0 { s.sqrt() } else { 1.0 };
    }
    let mut best: ([f64; 5], f64) = ([0.0; 5], f64::INFINITY);
    for mask in 1u32..32 {
        let idx: Vec<usize> = (0..5).filter(|j| mask & (1 << j) != 0).collect();
        let p = idx.len();
        let mut ata = vec![vec![0.0f64; p]; p];
        let mut atb = vec![0.0f64; p];
        for (a, b) in rows {
            for (i, &ji) in idx.iter().enumerate() {
                let ai = a[ji] / scale[ji];
                atb[i] += ai * b;
                for (l, &jl) in idx.iter().enumerate() {
                    ata[i][l] += ai * a[jl] / scale[jl];
                }
            }
        }
        let Some(sol) = solve(ata, atb) else { continue };
        if sol.iter().any(|&v| v < 0.0 || !v.is_finite()) {
            continue;
        }
        let mut x = [0.0f64; 5];
        for (i, &j) in idx.iter().enumerate() {
            x[j] = sol[i] / scale[j];
        }
        let res: f64 = rows
            .iter()
            .map(|(a, b)| (a.iter().zip(&x).map(|(u, v)| u * v).sum::<f64>() - b).powi(2))
            .sum();
        if res < best.1 * (1.0 - 1e-12) {
            best = (x, res);
        }
    }
    best.0
}

/// Gaussian elimination with partial pivoting; `None` when singular.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for c in 0..n {
        let piv = (c..n).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[piv][c].abs() < 1e-12 {
            return None;
        }
        a.swap(c, piv);
        b.swap(c, piv);
        let (top, rest) = a.split_at_mut(c + 1);
        let pivot_row = &top[c];
        for (i, row) in rest.iter_mut().enumerate() {
            let f = row[c] / pivot_row[c];
            for (x, p) in row[c..].iter_mut().zip(&pivot_row[c..]) {
                *x -= f * p;
            }
            b[c + 1 + i] -= f * b[c];
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_known_model_exactly() {
        let truth = WorkModel {
            s_per_mnk: 2.0 / 50e12,
            s_per_mk: 1e-11,
            s_per_mn: 3e-11,
            s_fixed: 8e-6,
            ..WorkModel::default()
        };
        let shapes = [
            (64, 64, 64),
            (1024, 1024, 1024),
            (4096, 64, 4096),
            (110592, 64, 64),
            (2048, 2048, 256),
            (512, 8192, 512),
            (8192, 8192, 8192),
        ];
        let samples: Vec<Sample> = shapes
            .iter()
            .map(|&(m, n, k)| Sample {
                routine: Routine::Dgemm,
                m,
                n,
                k,
                seconds: truth.seconds(&CallShape::gemm(m, n, k)),
            })
            .collect();
        let fit = WorkModel::fit(&samples).unwrap();
        for &(m, n, k) in &[(300, 300, 300), (20000, 128, 128), (16384, 16384, 16384)] {
            let s = CallShape::gemm(m, n, k);
            let (a, b) = (fit.seconds(&s), truth.seconds(&s));
            assert!((a / b - 1.0).abs() < 1e-6, "{m}x{n}x{k}: fit {a} truth {b}");
        }
    }

    #[test]
    fn correction_is_exact_at_points_and_fades_far_away() {
        let c = Correction {
            points: vec![CorrectionPoint {
                m: 1024,
                n: 1024,
                k: 1024,
                ln_ratio: 0.5f64.ln(),
            }],
        };
        let at = c.factor(1024, 1024, 1024);
        assert!((at - 0.5).abs() < 0.03, "{at}");
        assert!((c.factor(1 << 20, 1 << 20, 1 << 20) - 1.0).abs() < 1e-9);
    }
}
