//! The caller's C of a host-resident call, as a raw-pointer strided matrix ([`HostC`]).
//!
//! A C of `rows x cols` stored `ld` apart spans `(cols - 1) ld + rows` elements, and the rows
//! `rows..ld` of each column are not the call's: an OpenMP program updates row blocks of one
//! C concurrently, and reference LAPACK's trailing updates hand over a block of a larger
//! array. So the host path never forms a reference over that span. It reads C only to copy
//! the call's columns into pinned staging (rows `0..rows` of each column, the upload ring's
//! strided pieces, `upload::Piece::columns`), and writes it only from pinned staging
//! ([`HostC::write_from`]: rows `0..rows` of each column, or one triangle). On the device and
//! in every pinned buffer C is contiguous (leading dimension = its rows), so a C with gaps
//! costs one host copy each way, as a C without gaps does.

use crate::error::GpuError;
use crate::host_copy::{self, CopyKind};
use ozaki_core::blas::{Uplo, column_rows, span};
use std::marker::PhantomData;

/// The caller's C of one call (or one tile of a split): `rows x cols` stored `ld` apart from
/// a raw pointer. Copies of it are handed to the host path's threads, which read (before
/// any write) or write disjoint columns of it.
#[derive(Debug, Clone, Copy)]
pub struct HostC<'a> {
    p: *mut f64,
    rows: usize,
    cols: usize,
    ld: usize,
    _c: PhantomData<&'a mut f64>,
}

// SAFETY: the elements are valid and reserved to this call for 'a (the constructors'
// contract); the host path reads C (beta != 0) only before it writes any of it, and its
// writer threads write disjoint columns.
unsafe impl Send for HostC<'_> {}
// SAFETY: as above.
unsafe impl Sync for HostC<'_> {}

impl<'a> HostC<'a> {
    /// The C at `p`: `rows x cols` stored `ld` apart (`ld >= rows`).
    ///
    /// # Safety
    /// For `'a`, every element `p + i + j ld` with `i < rows`, `j < cols` is valid for reads
    /// and writes, and nothing else accesses those elements (the BLAS calling contract for C
    /// during the call); `ld >= rows`. The elements between the columns are never accessed.
    pub unsafe fn from_raw(p: *mut f64, rows: usize, cols: usize, ld: usize) -> HostC<'a> {
        HostC {
            p,
            rows,
            cols,
            ld,
            _c: PhantomData,
        }
    }

    /// The C held in `c`: `rows x cols` stored `ld` apart from its first element.
    ///
    /// # Errors
    /// [`GpuError::Unsupported`] when `ld < rows` or `c` is shorter than the span.
    pub fn of_slice(
        c: &'a mut [f64],
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Result<HostC<'a>, GpuError> {
        if ld < rows || c.len() < span(rows, cols, ld) {
            return Err(GpuError::Unsupported(format!(
                "C of {} elements cannot hold {rows} x {cols} stored {ld} apart",
                c.len()
            )));
        }
        // SAFETY: the span lies inside `c`, borrowed mutably for 'a.
        Ok(unsafe { HostC::from_raw(c.as_mut_ptr(), rows, cols, ld) })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Leading dimension.
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// The first element (an upload reads the columns from here, `ld` apart).
    pub(crate) fn as_ptr(&self) -> *const f64 {
        self.p
    }

    /// The `rows x cols` block from row `r0`, column `c0`; `None` when it is not inside C.
    pub(crate) fn part(&self, r0: usize, c0: usize, rows: usize, cols: usize) -> Option<Self> {
        if r0 + rows > self.rows || c0 + cols > self.cols {
            return None;
        }
        // SAFETY: the block lies inside C (checked above), whose contract it inherits.
        Some(unsafe { HostC::from_raw(self.p.add(r0 + c0 * self.ld), rows, cols, self.ld) })
    }

    /// Writes `src`, C's `rows x cols` values stored contiguously (leading dimension
    /// `rows`, as pinned staging holds them), into C: rows `0..rows` of each column, or the
    /// `uplo` triangle, never the rows between the columns; on `threads` threads with `kind`.
    ///
    /// # Panics
    /// When `src` holds fewer than `rows x cols` values.
    pub(crate) fn write_from(
        &self,
        src: &[f64],
        uplo: Option<Uplo>,
        threads: usize,
        kind: CopyKind,
    ) {
        let (m, n, ld) = (self.rows, self.cols, self.ld);
        assert!(src.len() >= m * n, "staging shorter than C");
        if m == 0 || n == 0 {
            return;
        }
        if uplo.is_none() && m == ld {
            // SAFETY: without gaps C's elements are the m n doubles from p (the contract);
            // src holds as many, and being borrowed shared it is not C's memory.
            unsafe {
                host_copy::par_copy(
                    self.p as *mut u8,
                    src.as_ptr() as *const u8,
                    8 * m * n,
                    threads,
                    kind,
                )
            };
            return;
        }
        let (d, s) = (Raw(self.p), Raw(src.as_ptr() as *mut f64));
        // Every column exactly once, on this thread and up to `threads - 1` others.
        ozaki_core::spawn::by_parts(n, threads, &|cols| {
            // the whole wrappers, not their raw-pointer fields, are what the closure captures
            let (d, s) = (&d, &s);
            for j in cols {
                let rows = column_rows(j, m, uplo);
                // SAFETY: these rows of column j are elements of C (the contract) and of the
                // contiguous source (checked above); columns are split among the threads,
                // so this range is this thread's alone.
                unsafe {
                    host_copy::copy(
                        d.0.add(j * ld + rows.start) as *mut u8,
                        s.0.add(j * m + rows.start) as *const u8,
                        8 * rows.len(),
                        kind,
                    )
                };
            }
        });
    }
}

/// A raw pointer shared by [`HostC::write_from`]'s threads, each of which touches only its
/// own columns.
struct Raw(*mut f64);
// SAFETY: see the type's doc.
unsafe impl Sync for Raw {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A C of `m x n` stored `ld` apart whose gap rows hold NaN.
    fn gapped(m: usize, n: usize, ld: usize) -> Vec<f64> {
        (0..span(m, n, ld))
            .map(|i| if i % ld < m { i as f64 } else { f64::NAN })
            .collect()
    }

    /// Writing a contiguous result into a C with gaps (on one and several threads, whole or
    /// one triangle, and into a part of C as a tile or a piece of an early write is) changes
    /// exactly the written rows of each column; the gap rows and the rest of C keep their
    /// bits.
    #[test]
    fn a_write_touches_only_its_rows_of_each_column() {
        let (m, n, ld) = (37usize, 23usize, 41usize);
        for (uplo, threads) in [
            (None, 1),
            (None, 4),
            (Some(Uplo::Upper), 1),
            (Some(Uplo::Lower), 3),
        ] {
            for (r0, c0, rows, cols) in [(0, 0, m, n), (5, 7, 20, 9), (0, 22, m, 1)] {
                let orig = gapped(m, n, ld);
                let mut c = orig.clone();
                let whole = HostC::of_slice(&mut c, m, n, ld).unwrap();
                let part = whole.part(r0, c0, rows, cols).unwrap();
                let src: Vec<f64> = (0..rows * cols).map(|i| -(i as f64) - 1.0).collect();
                part.write_from(&src, uplo, threads, CopyKind::Memcpy);
                for (at, (got, was)) in c.iter().zip(&orig).enumerate() {
                    let (i, j) = (at % ld, at / ld);
                    let inside = i >= r0 && i < r0 + rows && j >= c0 && j < c0 + cols && {
                        column_rows(j - c0, rows, uplo).contains(&(i - r0))
                    };
                    let want = if inside {
                        src[(i - r0) + (j - c0) * rows]
                    } else {
                        *was
                    };
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{uplo:?} {threads} part {r0},{c0} {rows}x{cols}: ({i}, {j})"
                    );
                }
            }
        }
    }

    /// A C without gaps is written as one contiguous range (streaming too).
    #[test]
    fn a_c_without_gaps_is_written_whole() {
        let (m, n) = (300usize, 40usize);
        let mut c = vec![0.0; m * n + 3];
        let src: Vec<f64> = (0..m * n).map(|i| i as f64).collect();
        let view = HostC::of_slice(&mut c, m, n, m).unwrap();
        view.write_from(&src, None, 2, CopyKind::Stream);
        assert_eq!(&c[..m * n], &src[..]);
        assert_eq!(&c[m * n..], &[0.0; 3]);
    }

    /// A slice too short for its span, a leading dimension below the rows and a part outside
    /// C are refused.
    #[test]
    fn c_outside_its_storage_is_refused() {
        let mut c = vec![0.0; 20];
        assert!(HostC::of_slice(&mut c, 3, 4, 5).is_ok());
        assert!(HostC::of_slice(&mut c, 3, 5, 5).is_err(), "span 23 > 20");
        assert!(HostC::of_slice(&mut c, 6, 2, 5).is_err(), "ld < rows");
        let view = HostC::of_slice(&mut c, 3, 4, 5).unwrap();
        assert!(view.part(1, 1, 2, 3).is_some());
        assert!(view.part(2, 0, 2, 1).is_none());
        assert!(view.part(0, 2, 1, 3).is_none());
    }
}
