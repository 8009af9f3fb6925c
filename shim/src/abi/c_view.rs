//! The caller's C as a raw-pointer strided view: only the elements a call writes are ever
//! read or written.
//!
//! A C of `m x n` stored `ldc` apart spans `(n - 1) * ldc + m` elements, and the rows
//! `m..ldc` of each column are not the call's: an OpenMP program splits one C into row
//! blocks and updates them concurrently, and `ldc` may be huge (an 8 x 2000 update with
//! `ldc = 20000`). So no Rust reference ever covers that span. [`CView`] reads and writes the
//! call's [`Region`] element by element through the raw pointer, and [`CView::block`] gives a
//! route a contiguous `m x n` block: the caller's own memory when C has no gaps
//! (`ldc == m`), otherwise a packed private copy that [`CBlock::finish`] writes back. The GPU
//! routes take the view's pointer itself (`gpu_kernels::host::HostC`, [`CView::as_ptr`]):
//! they copy C's rows between the caller's memory and pinned staging directly, so a C with
//! gaps costs them no packed copy.

use super::Canon;
use ozaki_core::blas::Uplo;
use ozaki_core::spawn::by_parts;
use std::ops::Range;
use std::sync::Mutex;

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
    fn rows_of(&self, j: usize) -> Range<usize> {
        ozaki_core::blas::column_rows(j, self.rows, self.tri)
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

    /// The caller's pointer: the region's elements lie at `i + j * ld` from it (the
    /// constructor's contract covers exactly those).
    pub fn as_ptr(&self) -> *mut f64 {
        self.p
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
    /// A packed block is copied column by column (one `memcpy` per column, on several
    /// threads for a large C) into a buffer reused from the previous packed call
    /// ([`SPARE`]): for a 4032 x 4032 trailing update of an LU with `ldc = 4096`, copying
    /// element by element into a fresh, zero-filled allocation took about as long as the
    /// GPU call it fed (the fresh pages' first-touch faults alone cost tens of ms).
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
        let mut data = take_buffer(&SPARE, len).ok_or_else(|| {
            format!(
                "cannot allocate {} MiB for a packed copy of C",
                (len * 8) >> 20
            )
        })?;
        let (dst, src) = (Shared(data.as_mut_ptr()), Shared(self.p));
        by_parts(r.cols, copy_threads(len), &|cols| {
            for j in cols {
                let rows = r.rows_of(j);
                // SAFETY: column j of the buffer is `r.rows` elements from `j * r.rows`, inside
                // its capacity (`len`), and each column is written by one thread only; the
                // source rows are the region's elements of column j (the constructor's
                // contract), which nothing writes meanwhile. Zero bits are 0.0, so every
                // element of the column is initialised (outside a triangle: zeros).
                unsafe {
                    let d = dst.at(j * r.rows);
                    std::ptr::write_bytes(d, 0, rows.start);
                    std::ptr::copy_nonoverlapping(
                        src.at(j * r.ld + rows.start),
                        d.add(rows.start),
                        rows.len(),
                    );
                    std::ptr::write_bytes(d.add(rows.end), 0, r.rows - rows.end);
                }
            }
        });
        // SAFETY: the loop above initialised all `len` elements (capacity >= len).
        unsafe { data.set_len(len) };
        Ok(CBlock::Packed { view: *self, data })
    }
}

/// A packed block's buffer kept for the next packed call (empty when none is kept): a large
/// strided C (an LU's trailing updates) is packed at every call, and a fresh allocation of
/// that size is a fresh mapping whose pages fault in as they are first written. Taken and
/// given back with `try_lock` only, so a call never waits for it (nor a forked child for a
/// lock its parent's thread held): a call that finds it taken allocates its own.
static SPARE: Mutex<Vec<f64>> = Mutex::new(Vec::new());

/// The largest buffer kept in [`SPARE`], in elements (256 MiB).
const KEEP_ELEMS: usize = 32 << 20;

/// Packed blocks from this many elements are copied on several threads.
const PARALLEL_ELEMS: usize = 1 << 20;

/// Fewest elements per copy thread.
const PER_THREAD: usize = 1 << 19;

/// Most copy threads for one block.
const MAX_THREADS: usize = 8;

/// An empty buffer with room for `len` elements: the spare one when it is large enough and
/// free, else a new one; `None` when the memory cannot be had.
fn take_buffer(spare: &Mutex<Vec<f64>>, len: usize) -> Option<Vec<f64>> {
    let kept = match spare.try_lock() {
        Ok(mut s) if s.capacity() >= len => std::mem::take(&mut *s),
        _ => Vec::new(),
    };
    if kept.capacity() >= len {
        return Some(kept);
    }
    let mut fresh = Vec::new();
    fresh.try_reserve_exact(len).ok()?;
    Some(fresh)
}

/// Keeps `buf` as the spare when it is larger than the one kept (up to [`KEEP_ELEMS`]) and
/// the spare is free; otherwise `buf` is freed.
fn give_buffer(spare: &Mutex<Vec<f64>>, mut buf: Vec<f64>) {
    if buf.capacity() > KEEP_ELEMS {
        return;
    }
    if let Ok(mut s) = spare.try_lock()
        && buf.capacity() > s.capacity()
    {
        buf.clear();
        *s = buf;
    }
}

/// Copy threads for a packed block of `elems` elements: one up to [`PARALLEL_ELEMS`], then
/// at least [`PER_THREAD`] elements each, at most [`MAX_THREADS`], and no more than this
/// call's share of the cores among the calls in flight.
fn copy_threads(elems: usize) -> usize {
    if elems < PARALLEL_ELEMS {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sharers = (crate::lazy::calls_in_flight() as usize).max(1);
    (cores / sharers)
        .clamp(1, MAX_THREADS)
        .min(elems / PER_THREAD)
        .max(1)
}

/// A raw pointer into C or a packed buffer, shared by the copy threads of [`by_parts`],
/// each of which touches only its own columns.
#[derive(Clone, Copy)]
struct Shared(*mut f64);
// SAFETY: see the type's doc: the threads' accesses are disjoint, and all end before the
// scope that started them returns.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// The element `i` past the pointer (a method, so closures capture the whole wrapper).
    ///
    /// # Safety
    /// `i` lies inside the allocation the pointer points into.
    unsafe fn at(&self, i: usize) -> *mut f64 {
        // SAFETY: the caller's contract.
        unsafe { self.0.add(i) }
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

    /// Writes a packed block's region back into the caller's C (the route's result is final),
    /// column by column as [`CView::block`] packed it.
    pub fn finish(self) {
        if let CBlock::Packed { view, data } = &self {
            let r = view.region;
            let (dst, src) = (Shared(view.p), Shared(data.as_ptr() as *mut f64));
            by_parts(r.cols, copy_threads(data.len()), &|cols| {
                for j in cols {
                    let rows = r.rows_of(j);
                    // SAFETY: the destination rows are the region's elements of column j (the
                    // view's constructor's contract), written by this thread only; the source
                    // is column j of the packed block (`r.rows` elements from `j * r.rows`),
                    // which only these threads read.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src.at(j * r.rows + rows.start),
                            dst.at(j * r.ld + rows.start),
                            rows.len(),
                        )
                    };
                }
            });
        }
    }
}

impl Drop for CBlock<'_> {
    /// A packed block's buffer goes back to [`SPARE`] for the next call, written back or
    /// not (a failed route leaves C untouched).
    fn drop(&mut self) {
        if let CBlock::Packed { data, .. } = self {
            give_buffer(&SPARE, std::mem::take(data));
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

    /// A C above the parallel threshold (strided, with gap rows holding a guard value) packs
    /// to exactly its region's values and writes back exactly the region; a block dropped
    /// without `finish` (a failed route) leaves C as it was. Too large for Miri's time limit:
    /// under Miri the same pointer arithmetic runs in the small strided tests (on one thread).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_large_strided_block_round_trips_on_several_threads() {
        let (rows, cols, ld) = (1200, 1000, 1203);
        assert!(rows * cols >= PARALLEL_ELEMS);
        let guard = -7.0;
        let orig: Vec<f64> = (0..ld * cols)
            .map(|i| if i % ld < rows { i as f64 } else { guard })
            .collect();
        let mut c = orig.clone();
        // SAFETY: `c` outlives the view and nothing else touches it meanwhile.
        let view = unsafe { CView::new(c.as_mut_ptr(), Region::gemm(rows, cols, ld)) };
        {
            let mut block = view.block().unwrap();
            let s = block.as_mut_slice();
            for j in [0, 1, 499, 999] {
                assert_eq!(s[j * rows], (j * ld) as f64);
                assert_eq!(s[j * rows + rows - 1], (j * ld + rows - 1) as f64);
            }
            s.fill(1.0);
        }
        assert_eq!(c, orig, "dropped without finish: C untouched");
        let mut block = view.block().unwrap();
        for (i, v) in block.as_mut_slice().iter_mut().enumerate() {
            *v = -(i as f64);
        }
        block.finish();
        for j in 0..cols {
            for i in 0..ld.min(c.len() - j * ld) {
                let want = if i < rows {
                    -((i + j * rows) as f64)
                } else {
                    guard
                };
                assert_eq!(c[i + j * ld], want, "({i}, {j})");
            }
        }
    }

    /// Outside a packed triangle the block holds zeros (initialised, never the caller's).
    #[test]
    fn a_packed_triangle_is_zero_outside() {
        let mut c = strided();
        // SAFETY: as above.
        let view = unsafe { CView::new(c.as_mut_ptr(), Region::syrk(3, 5, Uplo::Lower)) };
        let mut block = view.block().unwrap();
        let s = block.as_mut_slice();
        assert_eq!(s, &[0.0, 1.0, 2.0, 0.0, 6.0, 7.0, 0.0, 0.0, 12.0]);
    }

    /// The spare buffer is reused when it is large enough, kept when a call needs more,
    /// replaced only by a larger one, and never kept above [`KEEP_ELEMS`].
    #[test]
    #[cfg_attr(miri, ignore)] // a 256 MiB allocation, and no unsafe code
    fn the_spare_buffer_is_reused_and_bounded() {
        let spare = Mutex::new(Vec::new());
        let first = take_buffer(&spare, 1000).unwrap();
        let at = first.as_ptr();
        give_buffer(&spare, first);
        let again = take_buffer(&spare, 800).unwrap();
        assert_eq!((again.as_ptr(), again.len()), (at, 0), "reused, empty");
        give_buffer(&spare, again);
        let bigger = take_buffer(&spare, 5000).unwrap();
        assert!(bigger.capacity() >= 5000);
        assert_eq!(
            spare.lock().unwrap().as_ptr(),
            at,
            "the small one stays meanwhile"
        );
        give_buffer(&spare, bigger);
        assert!(
            spare.lock().unwrap().capacity() >= 5000,
            "the larger one is kept"
        );
        give_buffer(&spare, Vec::with_capacity(10));
        assert!(
            spare.lock().unwrap().capacity() >= 5000,
            "not replaced by a smaller one"
        );
        give_buffer(&spare, Vec::with_capacity(KEEP_ELEMS + 1));
        assert!(
            spare.lock().unwrap().capacity() <= KEEP_ELEMS,
            "too large to keep"
        );
    }

    /// One thread up to the threshold, at most `MAX_THREADS`.
    #[test]
    fn small_blocks_are_copied_on_one_thread() {
        assert_eq!(copy_threads(PARALLEL_ELEMS - 1), 1);
        let t = copy_threads(16 << 20);
        assert!((1..=MAX_THREADS).contains(&t));
    }
}
