//! Validated, FFI-free descriptions of one dgemm / dsyrk call, shared by every route
//! (built-in, `cpu-ozaki`, GPU), plus the built-in cache-blocked fp64 kernels.
//!
//! All matrices are column-major. The shim converts CBLAS row-major calls to column-major
//! before building these (a row-major C = op(A) op(B) is the column-major
//! C^T = op(B)^T op(A)^T; a row-major syrk flips `uplo` and `trans`), so routes see one
//! storage order. Arguments have already passed the reference-BLAS checks when a
//! [`GemmArgs`]/[`SyrkArgs`] exists: dimensions are non-negative and leading dimensions are
//! large enough, so indexing `a[i + j * lda]` inside the logical shape is in bounds.

/// op(X) for one operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trans {
    /// op(X) = X.
    No,
    /// op(X) = X^T (BLAS `T` and, for real matrices, `C`).
    Yes,
}

/// Which triangle of C a dsyrk reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Uplo {
    /// Upper triangle (i <= j).
    Upper,
    /// Lower triangle (i >= j).
    Lower,
}

/// C = alpha op(A) op(B) + beta C, column-major; C is m x n, op(A) m x k, op(B) k x n.
#[derive(Debug)]
pub struct GemmArgs<'a> {
    /// op(A).
    pub transa: Trans,
    /// op(B).
    pub transb: Trans,
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Scalar on the product.
    pub alpha: f64,
    /// A, stored `lda` apart; m x k if `transa == No`, else k x m.
    pub a: &'a [f64],
    /// Leading dimension of A.
    pub lda: usize,
    /// B, stored `ldb` apart; k x n if `transb == No`, else n x k.
    pub b: &'a [f64],
    /// Leading dimension of B.
    pub ldb: usize,
    /// Scalar on the old C (beta == 0 means C is not read: NaN in C does not propagate).
    pub beta: f64,
    /// Leading dimension of C.
    pub ldc: usize,
}

/// C = alpha A A^T + beta C (`trans == No`, A is n x k) or alpha A^T A + beta C
/// (`trans == Yes`, A is k x n); only the `uplo` triangle of C is referenced.
#[derive(Debug)]
pub struct SyrkArgs<'a> {
    /// Triangle of C.
    pub uplo: Uplo,
    /// Whether A is transposed.
    pub trans: Trans,
    /// Order of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Scalar on the product.
    pub alpha: f64,
    /// A, stored `lda` apart.
    pub a: &'a [f64],
    /// Leading dimension of A.
    pub lda: usize,
    /// Scalar on the old C (beta == 0 means C is not read).
    pub beta: f64,
    /// Leading dimension of C.
    pub ldc: usize,
}

impl GemmArgs<'_> {
    /// Element (i, l) of op(A), 0 <= i < m, 0 <= l < k.
    #[inline]
    pub fn op_a(&self, i: usize, l: usize) -> f64 {
        match self.transa {
            Trans::No => self.a[i + l * self.lda],
            Trans::Yes => self.a[l + i * self.lda],
        }
    }

    /// Element (l, j) of op(B), 0 <= l < k, 0 <= j < n.
    #[inline]
    pub fn op_b(&self, l: usize, j: usize) -> f64 {
        match self.transb {
            Trans::No => self.b[l + j * self.ldb],
            Trans::Yes => self.b[j + l * self.ldb],
        }
    }
}

impl SyrkArgs<'_> {
    /// Element (i, l) of the n x k operand op(A) (A if `trans == No`, else A^T).
    #[inline]
    pub fn op_a(&self, i: usize, l: usize) -> f64 {
        match self.trans {
            Trans::No => self.a[i + l * self.lda],
            Trans::Yes => self.a[l + i * self.lda],
        }
    }
}
