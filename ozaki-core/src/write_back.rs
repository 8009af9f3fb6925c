//! The last step of an emulated call, `C = alpha ĉ + beta C`, with the reference BLAS's
//! semantics where ĉ alone does not decide the result: the sign of a zero.
//!
//! The emulation computes each entry's exact product and rounds it once, so it has no
//! rounding order; but which zero (+0 or -0) the reference BLAS returns depends on its loop:
//! - **axpy form** (dgemm with `op(A) = A`; dsyrk with `trans = N`): C starts as `+0`
//!   (beta = 0), `C` (beta = 1) or `beta C`, then adds `(alpha op(B)_lj) op(A)_il` for
//!   l = 0..k-1 (dsyrk skips the l where `op(A)_jl = 0`). A zero result is -0 only when the
//!   start is -0 and every term added is -0; a start of +0, or any nonzero term on the way
//!   (`x + (-x) = +0`), gives +0.
//! - **dot form** (dgemm with `op(A) = A^T`; dsyrk with `trans = T`): `temp = +0 + sum of
//!   products` (+0 when the exact sum is zero), then `C = alpha temp` (beta = 0) or
//!   `alpha temp + beta C`: -0 for a negative alpha, for instance.
//!
//! Each operation is one IEEE rounding (no fma), as in the reference loops, so a value that
//! overflows or underflows there does here, and raises the same flag. An exact zero ĉ is
//! taken as +0 (the exact sum has no sign). alpha and beta are finite: calls with a
//! non-finite one go to native fp64 before any of this.

use crate::blas::{Trans, Uplo};

/// Which reference loop the call's zero signs follow (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Column axpys: dgemm with `transa = N`.
    Axpy,
    /// Column axpys skipping zero multipliers: dsyrk with `trans = N`.
    AxpySkippingZeros,
    /// Dot products: dgemm with `transa = T`, dsyrk with `trans = T`.
    Dot,
}

impl Form {
    /// The form of a dgemm with this `transa`.
    pub fn gemm(transa: Trans) -> Form {
        match transa {
            Trans::No => Form::Axpy,
            Trans::Yes => Form::Dot,
        }
    }

    /// The form of a dsyrk with this `trans`.
    pub fn syrk(trans: Trans) -> Form {
        match trans {
            Trans::No => Form::AxpySkippingZeros,
            Trans::Yes => Form::Dot,
        }
    }
}

/// The computed product and what the sign rule needs to know about the call.
pub struct Product<'a> {
    /// ĉ, column-major `m x n` (dsyrk: the `uplo` triangle is read).
    pub c: &'a [f64],
    /// op(A) by rows: row i is `a[i k..(i + 1) k]`.
    pub a_rows: &'a [f64],
    /// op(B) by columns: column j is `b[j k..(j + 1) k]` (dsyrk: `a_rows`).
    pub b_cols: &'a [f64],
    /// Inner dimension.
    pub k: usize,
    /// The reference loop.
    pub form: Form,
}

impl Product<'_> {
    /// Whether every term the axpy loop adds to entry (i, j) is -0.
    fn all_terms_negative_zero(&self, i: usize, j: usize, alpha: f64) -> bool {
        let k = self.k;
        let (a, b) = (
            &self.a_rows[i * k..(i + 1) * k],
            &self.b_cols[j * k..(j + 1) * k],
        );
        let skip = self.form == Form::AxpySkippingZeros;
        a.iter().zip(b).all(|(&x, &y)| {
            if skip && y == 0.0 {
                return true;
            }
            let t = (alpha * y) * x;
            t == 0.0 && t.is_sign_negative()
        })
    }

    /// `alpha ĉ_ij + beta c` with the reference form's zero sign.
    fn entry(&self, i: usize, j: usize, m: usize, alpha: f64, beta: f64, old: f64) -> f64 {
        let p = self.c[i + j * m];
        let p = if p == 0.0 { 0.0 } else { p };
        match self.form {
            Form::Dot => {
                let t = alpha * p;
                if beta == 0.0 { t } else { t + beta * old }
            }
            Form::Axpy | Form::AxpySkippingZeros => {
                let start = if beta == 0.0 {
                    0.0
                } else if beta == 1.0 {
                    old
                } else {
                    beta * old
                };
                if p != 0.0 {
                    alpha * p + start
                } else if start == 0.0
                    && start.is_sign_negative()
                    && self.all_terms_negative_zero(i, j, alpha)
                {
                    -0.0
                } else {
                    start + 0.0
                }
            }
        }
    }
}

/// `C = alpha ĉ + beta C` on the wanted entries (all of C, or one triangle); with no
/// product (alpha = 0 or k = 0), `C = beta C`, and `C = 0` without reading C when beta = 0.
#[allow(clippy::too_many_arguments)]
pub fn write_back(
    c: &mut [f64],
    ldc: usize,
    m: usize,
    n: usize,
    tri: Option<Uplo>,
    alpha: f64,
    beta: f64,
    prod: Option<&Product<'_>>,
) {
    for j in 0..n {
        for i in crate::blas::column_rows(j, m, tri) {
            let cij = &mut c[i + j * ldc];
            *cij = match prod {
                None if beta == 0.0 => 0.0,
                None => beta * *cij,
                Some(p) => p.entry(i, j, m, alpha, beta, *cij),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(form: Form, a: &[f64], b: &[f64], alpha: f64, beta: f64, old: f64) -> f64 {
        let p = Product {
            c: &[0.0],
            a_rows: a,
            b_cols: b,
            k: a.len(),
            form,
        };
        let mut c = [old];
        write_back(&mut c, 1, 1, 1, None, alpha, beta, Some(&p));
        c[0]
    }

    fn bits(x: f64) -> (bool, f64) {
        (x.is_sign_negative(), x)
    }

    #[test]
    fn zero_results_take_the_reference_loops_sign() {
        let (pos, neg) = ([0.0, 0.0], [-0.0, -0.0]);
        let ones = [1.0, 2.0];
        // dot form: alpha * (+0), then + beta C.
        assert_eq!(
            bits(one(Form::Dot, &pos, &ones, -1.0, 0.0, 7.0)),
            (true, 0.0)
        );
        assert_eq!(
            bits(one(Form::Dot, &pos, &ones, 2.0, 0.0, 7.0)),
            (false, 0.0)
        );
        assert_eq!(
            bits(one(Form::Dot, &neg, &ones, -1.0, 1.0, -0.0)),
            (true, 0.0)
        );
        assert_eq!(
            bits(one(Form::Dot, &neg, &ones, -1.0, 1.0, 0.0)),
            (false, 0.0)
        );
        // axpy form: beta = 0 starts at +0 whatever the terms.
        assert_eq!(
            bits(one(Form::Axpy, &neg, &ones, 1.0, 0.0, -0.0)),
            (false, 0.0)
        );
        // a start of -0 stays -0 only if every term is -0 ...
        assert_eq!(
            bits(one(Form::Axpy, &neg, &ones, 1.0, 1.0, -0.0)),
            (true, 0.0)
        );
        assert_eq!(
            bits(one(Form::Axpy, &pos, &ones, -1.0, -1.0, 0.0)),
            (true, 0.0)
        );
        assert_eq!(
            bits(one(Form::Axpy, &[-0.0, 0.0], &ones, 1.0, 1.0, -0.0)),
            (false, 0.0)
        );
        // ... and a nonzero start is kept.
        assert_eq!(one(Form::Axpy, &neg, &ones, 1.0, 2.0, 1.5), 3.0);
        // dsyrk skips zero multipliers: a +0 term that is skipped cannot turn -0 into +0.
        let skip = one(
            Form::AxpySkippingZeros,
            &[0.0, -0.0],
            &[0.0, 1.0],
            1.0,
            1.0,
            -0.0,
        );
        assert_eq!(bits(skip), (true, 0.0));
        assert_eq!(
            bits(one(Form::Axpy, &[0.0, -0.0], &[0.0, 1.0], 1.0, 1.0, -0.0)),
            (false, 0.0)
        );
    }
}
