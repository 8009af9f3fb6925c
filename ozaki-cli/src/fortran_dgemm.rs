//! A Fortran `dgemm_` loaded at run time (the vendor BLAS that `calibrate` times, NVBLAS in
//! `bench`), typed for either integer width, and the one call both tools make through it:
//! a plain C = A B.

use std::ffi::c_char;

/// `dgemm_(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, len_transa,
/// len_transb)` with integers of type `I` (`i32`: LP64, `i64`: ILP64).
pub type Dgemm<I> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const I,
    *const I,
    *const I,
    *const f64,
    *const f64,
    *const I,
    *const f64,
    *const I,
    *const f64,
    *mut f64,
    *const I,
    usize,
    usize,
);

/// C = A B through `f`, for column-major A (m x k), B (k x n) and C (m x n) with leading
/// dimensions m, k and m.
///
/// # Safety
/// `f` must be a Fortran `dgemm_` taking `I` integers; `a`, `b` and `c` must hold at least
/// m k, k n and m n elements, and m, n, k must fit `I` (callers pass sizes they allocated).
pub unsafe fn plain_nn<I>(f: Dgemm<I>, m: I, n: I, k: I, a: &[f64], b: &[f64], c: &mut [f64]) {
    let (alpha, beta) = (1.0f64, 0.0f64);
    let nt = b"N".as_ptr().cast::<c_char>();
    // SAFETY: the caller's contract above; the character arguments are 1-byte strings of
    // length 1, passed with their hidden lengths.
    unsafe {
        f(
            nt,
            nt,
            &m,
            &n,
            &k,
            &alpha,
            a.as_ptr(),
            &m,
            b.as_ptr(),
            &k,
            &beta,
            c.as_mut_ptr(),
            &m,
            1,
            1,
        )
    }
}
