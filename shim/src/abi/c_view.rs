//! The caller's C as a raw-pointer strided view: only the elements a call writes are ever
//! read or written.
//!
//! A C of `m x n` stored `ldc` apart spans `(n - 1) * ldc + m` elements, and the rows
//! `m..ldc` of each column are not the call's: an OpenMP program splits one C into row
//! blocks and updates them concurrently, and `ldc` may be huge (an 8 x 2000 update with
//! `ldc = 20000`). So no Rust reference ever covers that span. [`CView`] reads and writes the
//! call's [`Region`] element by element through the raw pointer, and [`CView::block`] gives a
//! route a contiguous `m x n` block: the caller's own memory when C has no gaps
//! (`ldc == m`), otherwise a packed private copy that [`CBlock::finish`] writes back.

use super::Canon;
use ozaki_core::blas::Uplo;

/// The elements of C a call writes: `rows x cols` stored `ld` apart, or one triangle.
///
/// Everything between them (rows `rows..ld` of each column, the other triangle) may belong
/// to another thread's concurrent call (OpenMP programs split one C into row blocks), so
/// whoever writes C writes exactly these elements: the A/B copies here, and every route that
/// computes C ([`CView`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Region {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Leading dimension.
    pub ld: usize,
    /// For dsyrk, the triangle (of a square region).
    pub tri: Option<Uplo>,
}

impl Region {
    /// The written part of C of a checked call.
    pub fn of(canon: &Canon) -> Region {
        match *canon {
            Canon::Gemm { m, n, ldc, .. } => Region::gemm(m, n, ldc),
            Canon::Syrk { uplo, n, ldc, .. } => Region::syrk(n, ldc, uplo),
        }
    }

    /// The written part of C of a dgemm.
    pub fn gemm(m: usize, n: usize, ldc: usize) -> Region {
        Region {
            rows: m,
            cols: n,
            ld: ldc,
            tri: None,
        }
    }

    /// The written part of C of a dsyrk.
    pub fn syrk(n: usize, ldc: usize, uplo: Uplo) -> Region {
        Region {
            rows: n,
            cols: n,
            ld: ldc,
            tri: Some(uplo),
        }
    }

    /// Copies the region's elements from `src` to `dst` (same layout), nothing else.
    pub fn copy(&self, src: &[f64], dst: &mut [f64]) {
        for i in self.indices() {
            dst[i] = src[i];
        }
    }

    /// Row range of column `j`.
    fn rows_of(&self, j: usize) -> std::ops::Range<usize> {
        match self.tri {
            None => 0..self.rows,
            Some(Uplo::Upper) => 0..(j + 1).min(self.rows),
            Some(Uplo::Lower) => j.min(self.rows)..self.rows,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        (0..self.cols).map(|j| self.rows_of(j).len()).sum()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Indices into C of the region's elements, column by column.
    pub fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.cols).flat_map(move |j| self.rows_of(j).map(move |i| i + j * self.ld))
    }
}

/// The written part of a call's C, addressed through the caller's raw pointer.
#[derive(Debug, Clone, Copy)]
pub struct CView {
    p: *mut f64,
    region: Region,
}

impl CView {
    /// A view of `region` of the C at `p`.
    ///
    /// # Safety
    /// - every element of `region` of the array at `p` is valid for reads and writes, and no
    ///   one else accesses those elements, for as long as the view (or a copy of it) is used:
    ///   the BLAS calling contract for C during the call. Nothing else of the array is touched.
    pub unsafe fn new(p: *mut f64, region: Region) -> CView {
        CView { p, region }
    }

    /// The elements the call writes.
    pub fn region(&self) -> Region {
        self.region
    }

    /// The region's values, column by column.
    pub fn values(&self) -> impl Iterator<Item = f64> + '_ {
        // SAFETY: indices of the region (the constructor's contract).
        self.region
            .indices()
            .map(|i| unsafe { self.p.add(i).read() })
    }

    /// Copies the region into `packed` (cleared first), column by column.
    pub fn pack(&self, packed: &mut Vec<f64>) {
        packed.clear();
        packed.extend(self.values());
    }

    /// Writes `packed` (as [`CView::pack`] lays it out) into the region.
    pub fn unpack(&self, packed: &[f64]) {
        for (v, i) in packed.iter().zip(self.region.indices()) {
            // SAFETY: an index of the region (the constructor's contract).
            unsafe { self.p.add(i).write(*v) };
        }
    }

    /// Exchanges the region with `packed`.
    pub fn swap(&self, packed: &mut [f64]) {
        for (v, i) in packed.iter_mut().zip(self.region.indices()) {
            // SAFETY: an index of the region (the constructor's contract).
            unsafe { std::ptr::swap(self.p.add(i), v) };
        }
    }

    /// A contiguous `rows x cols` block for a route (leading dimension [`CBlock::ld`]).
    ///
    /// # Errors
    /// When the packed copy cannot be allocated.
    pub fn block(&self) -> Result<CBlock<'_>, String> {
        let r = self.region;
        let len = r.rows * r.cols;
        if r.ld == r.rows || r.cols <= 1 {
            // No gaps: the span is exactly the block (dsyrk: the other triangle is part of
            // the call's own C argument, which the reference leaves unreferenced).
            let slice = if len == 0 {
                &mut [][..]
            } else {
                // SAFETY: with ld == rows (or one column) the region's bounding block is these
                // `len` elements, all of the call's C (the constructor's contract).
                unsafe { std::slice::from_raw_parts_mut(self.p, len) }
            };
            return Ok(CBlock::Caller {
                data: slice,
                rows: r.rows,
            });
        }
        let mut data = Vec::new();
        data.try_reserve_exact(len).map_err(|_| {
            format!(
                "cannot allocate {} MiB for a packed copy of C",
                (len * 8) >> 20
            )
        })?;
        data.resize(len, 0.0);
        let dense = Region { ld: r.rows, ..r };
        for (i, v) in dense.indices().zip(self.values()) {
            data[i] = v;
        }
        Ok(CBlock::Packed { view: *self, data })
    }
}

/// A contiguous block of C for a route: leading dimension = rows.
#[derive(Debug)]
pub enum CBlock<'a> {
    /// The caller's C itself (it has no gaps).
    Caller {
        /// The block.
        data: &'a mut [f64],
        /// Its rows.
        rows: usize,
    },
    /// A packed copy of the caller's region (outside the region: zeros).
    Packed {
        /// Where it goes back.
        view: CView,
        /// The block.
        data: Vec<f64>,
    },
}

impl CBlock<'_> {
    /// The block's elements, column by column.
    pub fn as_mut_slice(&mut self) -> &mut [f64] {
        match self {
            CBlock::Caller { data, .. } => data,
            CBlock::Packed { data, .. } => data,
        }
    }

    /// Leading dimension of the block (its rows; at least 1, as BLAS wants).
    pub fn ld(&self) -> usize {
        match self {
            CBlock::Caller { rows, .. } => *rows,
            CBlock::Packed { view, .. } => view.region.rows,
        }
        .max(1)
    }

    /// Writes a packed block's region back into the caller's C (the route's result is final).
    pub fn finish(self) {
        if let CBlock::Packed { view, data } = self {
            let dense = Region {
                ld: view.region.rows,
                ..view.region
            };
            for (src, dst) in dense.indices().zip(view.region.indices()) {
                // SAFETY: an index of the view's region (its constructor's contract).
                unsafe { view.p.add(dst).write(data[src]) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A C of 3 x 4 stored 5 apart, the gap rows holding a guard value.
    fn strided() -> Vec<f64> {
        (0..20)
            .map(|i| if i % 5 < 3 { i as f64 } else { -7.0 })
            .collect()
    }

    #[test]
    fn a_packed_block_round_trips_and_never_touches_the_gaps() {
        let mut c = strided();
        // SAFETY: `c` outlives the view and nothing else touches it meanwhile.
        let view = unsafe { CView::new(c.as_mut_ptr(), Region::gemm(3, 4, 5)) };
        let mut block = view.block().unwrap();
        assert!(matches!(block, CBlock::Packed { .. }));
        assert_eq!(block.ld(), 3);
        let s = block.as_mut_slice();
        assert_eq!(s.len(), 12);
        assert_eq!(&s[3..6], &[5.0, 6.0, 7.0]);
        for v in s.iter_mut() {
            *v += 100.0;
        }
        block.finish();
        for (i, v) in c.iter().enumerate() {
            let want = if i % 5 < 3 { i as f64 + 100.0 } else { -7.0 };
            assert_eq!(*v, want, "element {i}");
        }
    }

    #[test]
    fn a_triangle_is_all_that_is_packed_and_written_back() {
        let mut c = strided();
        // SAFETY: as above.
        let view = unsafe { CView::new(c.as_mut_ptr(), Region::syrk(3, 5, Uplo::Upper)) };
        assert_eq!(view.values().count(), 6);
        let mut block = view.block().unwrap();
        block.as_mut_slice().fill(1.5);
        block.finish();
        for j in 0..3 {
            for i in 0..5 {
                let want = if i <= j { 1.5 } else { strided()[i + 5 * j] };
                assert_eq!(c[i + 5 * j], want, "({i}, {j})");
            }
        }
    }

    #[test]
    fn a_gapless_c_is_handed_over_in_place() {
        let mut c = vec![2.0; 6];
        let p = c.as_mut_ptr();
        // SAFETY: as above.
        let view = unsafe { CView::new(p, Region::gemm(3, 2, 3)) };
        let mut block = view.block().unwrap();
        assert_eq!(block.ld(), 3);
        assert!(matches!(block, CBlock::Caller { .. }));
        block.as_mut_slice()[4] = 9.0;
        block.finish();
        assert_eq!(c[4], 9.0);
    }
}
