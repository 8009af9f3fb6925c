//! The write-back: copies a result from pinned staging into the caller's C, only the m x n
//! result (or one triangle), on several threads. Separate because every write into the
//! caller's C (here, early writes, a split's commit) is a [`Columns`] job.

use super::SendPtr;
use super::crew::{crew, share};
use super::tuning::{tuning, write_threads};
use crate::device::{Gpu, sync};
use crate::error::{Context, GpuError};
use crate::host_copy::{self, CopyKind};
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

/// Copies rows `0..m` (or the `uplo` triangle) of columns `0..n` of a column-major block with
/// leading dimension `ld` from `src` (pinned staging) to `dst` (the caller's C), never touching
/// the padding rows `m..ld`, on `threads` threads with the tuning's copy kind. When the
/// columns are the whole block (no triangle, `m == ld`) the span is one contiguous copy.
///
/// # Safety
/// As [`Columns::new`].
pub(crate) unsafe fn write_columns(
    dst: *mut f64,
    src: *const f64,
    geometry: (usize, usize, usize),
    uplo: Option<Uplo>,
    threads: usize,
) {
    // SAFETY: the caller's contract.
    let job = unsafe { Columns::new(dst, src, geometry, uplo) };
    crew(threads, &|j: Columns, w, n| j.write_part(w, n), |run| {
        run(job)
    });
}

/// One [`write_columns`] job, which a [`crew`] of threads shares out ([`Columns::write_part`]):
/// the early writer keeps one crew for all pieces of C.
#[derive(Clone, Copy)]
pub(crate) struct Columns {
    dst: SendPtr<f64>,
    src: SendPtr<f64>,
    rows: usize,
    cols: usize,
    ld: usize,
    uplo: Option<Uplo>,
    kind: CopyKind,
}

/// Bytes of a contiguous copy below which one more thread does not pay (as `host_copy`'s).
const SHARE_MIN: usize = 64 << 10;

impl Columns {
    /// Rows `0..m` (or the `uplo` triangle) of columns `0..n`, leading dimension `ld`, from
    /// `src` to `dst`, with the tuning's write-back copy kind.
    ///
    /// # Safety
    /// `src` and `dst` must each cover the span `(n - 1) ld + m` and not overlap, and stay
    /// valid while the job runs; no other thread may access those elements of `dst`
    /// meanwhile.
    pub(crate) unsafe fn new(
        dst: *mut f64,
        src: *const f64,
        (rows, cols, ld): (usize, usize, usize),
        uplo: Option<Uplo>,
    ) -> Columns {
        Columns {
            dst: SendPtr(dst),
            src: SendPtr(src as *mut f64),
            rows,
            cols,
            ld,
            uplo,
            kind: tuning().write_back,
        }
    }

    /// Worker `w` of `n`'s part: a range of 64 KiB pieces of a contiguous span (no triangle,
    /// `rows == ld`), else a range of columns.
    pub(crate) fn write_part(self, w: usize, n: usize) {
        let (m, ld) = (self.rows, self.ld);
        if self.cols == 0 || m == 0 {
            return;
        }
        let (d, s) = (self.dst.0 as *mut u8, self.src.0 as *const u8);
        if self.uplo.is_none() && m == ld {
            let bytes = 8 * m * self.cols;
            let (lo, hi) = share(bytes.div_ceil(SHARE_MIN), w, n);
            let (lo, hi) = (lo * SHARE_MIN, (hi * SHARE_MIN).min(bytes));
            if lo < hi {
                // SAFETY: [lo, hi) lies inside the span (Columns::new's contract), and
                // is this worker's alone.
                unsafe { host_copy::copy(d.add(lo), s.add(lo), hi - lo, self.kind) };
            }
            return;
        }
        let (j0, j1) = share(self.cols, w, n);
        for j in j0..j1 {
            let (lo, hi) = match self.uplo {
                None => (0, m),
                Some(Uplo::Upper) => (0, (j + 1).min(m)),
                Some(Uplo::Lower) => (j.min(m), m),
            };
            let at = 8 * (j * ld + lo);
            // SAFETY: rows lo..hi of column j lie inside both spans; columns are shared out
            // among workers, so this range is this worker's alone.
            unsafe { host_copy::copy(d.add(at), s.add(at), 8 * (hi - lo), self.kind) };
        }
    }
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
