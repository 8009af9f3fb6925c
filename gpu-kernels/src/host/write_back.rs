//! The write-back: copies a result from pinned staging into the caller's C, only the m x n
//! result (or one triangle), on several threads. Separate because every write into the
//! caller's C (here, early writes, a split's commit) goes through [`write_columns`].

use super::SendPtr;
use super::tuning::{tuning, write_threads};
use crate::device::{Gpu, sync};
use crate::error::{Context, GpuError};
use crate::host_copy;
use cudarc::driver::sys;
use ozaki_core::blas::{Uplo, span};

/// Copies the device span of C back into staging, waits, and only then writes the call's
/// m x n result (or its `uplo` triangle) into the caller's C: nothing of C is touched unless
/// the whole download succeeded. `c` is exactly the call's span of C.
pub(super) fn copy_out(
    gpu: &mut Gpu,
    src: u64,
    c: &mut [f64],
    m: usize,
    n: usize,
    ldc: usize,
    uplo: Option<Uplo>,
) -> Result<(), GpuError> {
    let elems = c.len();
    let stage = gpu.staging(2, elems * 8)?;
    // SAFETY: staging buffer 2 holds elems doubles; src spans elems doubles on the device.
    unsafe { sys::cuMemcpyDtoHAsync_v2(stage as *mut _, src, elems * 8, gpu.stream) }
        .result()
        .ctx("cuMemcpyDtoHAsync")?;
    sync(gpu.stream)?;
    // SAFETY: staging holds elems doubles just copied from the device, synchronised.
    let staged = unsafe { std::slice::from_raw_parts(stage as *const f64, elems) };
    write_back(c, staged, m, n, ldc, uplo);
    Ok(())
}

/// Writes the m x n result (or one triangle of it) from staging into the caller's C.
pub(super) fn write_back(
    c: &mut [f64],
    staged: &[f64],
    m: usize,
    n: usize,
    ldc: usize,
    uplo: Option<Uplo>,
) {
    let t = if m * n < (1 << 19) {
        1
    } else {
        write_threads()
    };
    let len = span(m, n, ldc);
    assert!(
        c.len() >= len && staged.len() >= len,
        "C shorter than its span"
    );
    // SAFETY: both hold the m x n span with leading dimension ldc (checked above); c is
    // borrowed mutably, so nobody else touches it.
    unsafe { write_columns(c.as_mut_ptr(), staged.as_ptr(), (m, n, ldc), uplo, t) }
}

/// Rows `lo..hi` of column `j` of an `m`-row block that a write touches: all of them, or
/// those of the `uplo` triangle.
fn rows_of(j: usize, m: usize, uplo: Option<Uplo>) -> (usize, usize) {
    match uplo {
        None => (0, m),
        Some(Uplo::Upper) => (0, (j + 1).min(m)),
        Some(Uplo::Lower) => (j.min(m), m),
    }
}

/// Writes an `m x n` result stored contiguously (leading dimension `m`, `super::compact`)
/// into the caller's C, stored `ldc` apart: rows `0..m` of each column (or the `uplo`
/// triangle), never the rows between C's columns.
pub(super) fn write_back_rows(
    c: &mut [f64],
    ldc: usize,
    packed: &[f64],
    m: usize,
    n: usize,
    uplo: Option<Uplo>,
) {
    for j in 0..n {
        let (lo, hi) = rows_of(j, m, uplo);
        c[j * ldc + lo..j * ldc + hi].copy_from_slice(&packed[j * m + lo..j * m + hi]);
    }
}

/// Copies rows `0..m` (or the `uplo` triangle) of columns `0..n` of a column-major block with
/// leading dimension `ld` from `src` (pinned staging) to `dst` (the caller's C), never touching
/// the padding rows `m..ld`, on `threads` threads with the tuning's copy kind. When the
/// columns are the whole block (no triangle, `m == ld`) the span is one contiguous copy.
///
/// # Safety
/// `src` and `dst` must each cover the span `(n - 1) ld + m` and not overlap; no other thread
/// may access those elements of `dst` meanwhile.
pub(crate) unsafe fn write_columns(
    dst: *mut f64,
    src: *const f64,
    (m, n, ld): (usize, usize, usize),
    uplo: Option<Uplo>,
    threads: usize,
) {
    let kind = tuning().write_back;
    if n == 0 || m == 0 {
        return;
    }
    if uplo.is_none() && m == ld {
        // SAFETY: the caller's contract; the span is (n - 1) ld + m = n m doubles.
        unsafe { host_copy::par_copy(dst as *mut u8, src as *const u8, 8 * m * n, threads, kind) };
        return;
    }
    let (d, s) = (SendPtr(dst), SendPtr(src as *mut f64));
    // Every column exactly once, on this thread and up to `threads - 1` others.
    ozaki_core::spawn::by_parts(n, threads, &|cols| {
        // the whole wrappers, not their raw-pointer fields, are what the closure captures
        let (d, s) = (&d, &s);
        for j in cols {
            let (lo, hi) = rows_of(j, m, uplo);
            let at = j * ld + lo;
            // SAFETY: rows lo..hi of column j lie inside both spans; columns are split
            // among threads, so this range is this thread's alone.
            unsafe {
                host_copy::copy(
                    d.0.add(at) as *mut u8,
                    s.0.add(at) as *const u8,
                    8 * (hi - lo),
                    kind,
                )
            };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The write-back copies exactly the m rows (or the triangle) of each column and never
    /// the padding rows of a padded C, on one or several threads, contiguous or not.
    #[test]
    fn write_back_touches_only_the_result() {
        let (m, n) = (37usize, 23usize);
        for (ldc, uplo) in [
            (m, None),
            (m + 3, None),
            (m + 1, Some(Uplo::Upper)),
            (m, Some(Uplo::Lower)),
        ] {
            let staged: Vec<f64> = (0..ldc * n).map(|i| i as f64).collect();
            for threads in [1, 4] {
                let mut c = vec![-1.0; ldc * n];
                // SAFETY: both hold ldc n doubles.
                unsafe {
                    write_columns(c.as_mut_ptr(), staged.as_ptr(), (m, n, ldc), uplo, threads)
                };
                for j in 0..n {
                    for i in 0..ldc {
                        let inside = i < m
                            && match uplo {
                                None => true,
                                Some(Uplo::Upper) => i <= j,
                                Some(Uplo::Lower) => i >= j,
                            };
                        let want = if inside { staged[i + j * ldc] } else { -1.0 };
                        assert_eq!(c[i + j * ldc], want, "{ldc} {uplo:?} {threads} ({i}, {j})");
                    }
                }
            }
        }
    }
}
