//! Measuring emulation error against an exact reference: the measure shared by the
//! contract tests, the `accuracy` example that writes ACCURACY.md, and the adversarial
//! suite behind `ozaki accuracy` ([`families`] of inputs, [`suite`] of measurements).
//!
//! The error of an entry is `|ĉ_ij - c_ij| / (|A||B|)_ij`, the componentwise measure the
//! standard bound `|ĉ - c| <= γ_k |A||B|` is stated in; `c_ij` is exact ([`ExactAcc`]),
//! `(|A||B|)_ij` is evaluated in fp64 (a scale, its rounding does not matter). Entries with
//! `(|A||B|)_ij = 0` are exact in every method and skipped.
//!
//! "Native" is a straightforward fp64 dot product in the standard order
//! (`s = 0; for l in 0..k { s = s + a_il * b_lj }`, no fma): the classic DGEMM a reference
//! BLAS computes, not a tuned vendor kernel (those block the sum and are usually a little
//! more accurate).

use crate::exact::ExactAcc;

pub mod families;
pub mod suite;

/// The exact product, its scale and native's result for one problem (column-major m x n).
#[derive(Debug, Clone)]
pub struct Reference {
    /// Rows.
    pub m: usize,
    /// Columns.
    pub n: usize,
    /// Exact accumulators per entry.
    pub exact: Vec<ExactAcc>,
    /// `(|A||B|)_ij` in fp64.
    pub scale: Vec<f64>,
    /// Native fp64 result per entry.
    pub native: Vec<f64>,
}

/// Max and median of the componentwise errors of one method.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStats {
    /// Largest `|ĉ - c| / (|A||B|)`.
    pub max: f64,
    /// Median of the same.
    pub median: f64,
    /// Largest `|ĉ - c| / (γ_k (|A||B|))`: <= 1 means within the standard fp64 bound.
    pub max_over_gamma: f64,
}

/// `γ_k = k u / (1 - k u)`, `u = 2^-53`; infinite once `k u >= 1`, where no bound holds.
pub fn gamma(k: usize) -> f64 {
    let ku = k.max(1) as f64 * f64::EPSILON / 2.0;
    if ku >= 1.0 {
        f64::INFINITY
    } else {
        ku / (1.0 - ku)
    }
}

impl Reference {
    /// Builds the reference for column-major `a` (m x k) and `b` (k x n).
    pub fn new(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Self {
        let mut exact = Vec::with_capacity(m * n);
        let mut scale = vec![0.0; m * n];
        let mut native = vec![0.0; m * n];
        for j in 0..n {
            for i in 0..m {
                let mut acc = ExactAcc::new();
                let (mut s, mut sc) = (0.0f64, 0.0f64);
                for l in 0..k {
                    let (x, y) = (a[i + l * m], b[l + j * k]);
                    acc.add_product(x, y);
                    s += x * y;
                    sc += (x * y).abs();
                }
                exact.push(acc);
                scale[i + j * m] = sc;
                native[i + j * m] = s;
            }
        }
        Reference {
            m,
            n,
            exact,
            scale,
            native,
        }
    }

    /// Error statistics of `c` (column-major m x n) over the entries where `keep(i, j)`. A
    /// non-finite entry of `c` (the exact product is always finite), or a wrong one where
    /// the scale is zero (an exactly zero product), has an infinite error.
    pub fn errors(&self, c: &[f64], k: usize, keep: impl Fn(usize, usize) -> bool) -> ErrorStats {
        let mut errs = Vec::with_capacity(self.m * self.n);
        for j in 0..self.n {
            for i in 0..self.m {
                let t = i + j * self.m;
                if !keep(i, j) {
                    continue;
                }
                let diff = if c[t].is_finite() {
                    self.exact[t].abs_diff(c[t])
                } else {
                    f64::INFINITY
                };
                if self.scale[t] != 0.0 {
                    errs.push(diff / self.scale[t]);
                } else if diff != 0.0 {
                    errs.push(f64::INFINITY);
                }
            }
        }
        stats(errs, k)
    }

    /// Error statistics of native.
    pub fn native_errors(&self, k: usize, keep: impl Fn(usize, usize) -> bool) -> ErrorStats {
        self.errors(&self.native, k, keep)
    }
}

fn stats(mut errs: Vec<f64>, k: usize) -> ErrorStats {
    if errs.is_empty() {
        return ErrorStats {
            max: 0.0,
            median: 0.0,
            max_over_gamma: 0.0,
        };
    }
    errs.sort_by(f64::total_cmp);
    let max = *errs.last().unwrap();
    ErrorStats {
        max,
        median: errs[errs.len() / 2],
        max_over_gamma: max / gamma(k),
    }
}
