//! The extents the int8 products run at: m, n and k rounded up to a multiple of the
//! alignment the tensor-core kernels want, with zero residues in the padding.
//!
//! cuBLASLt's fast int8 kernels on Hopper want every leading dimension and batch offset a
//! multiple of 16 bytes; an int32 product plane with an odd number of rows (ld = m) is not,
//! and the heuristic falls back to a kernel that ran the products at half the rate (odd m, n
//! measured at about half the ratio of their aligned neighbours). Beyond that, the kernels
//! run whole 128 x 128 tiles: on an H100, sizes that are multiples of 16 but not of 128
//! (4100, 4112, 5000) ran the whole emulation at 0.79-0.85x cuBLAS padded to 16 and at
//! 1.04-1.06x padded to 128 (BENCHMARKS.md, "Shapes and energy"). So a call whose m, n and k
//! are all at least [`LARGE_FROM`] pads to [`LARGE_ALIGN`] (at most 1/8 more of each
//! dimension, usually a few percent), and smaller calls to [`ALIGN`], where a 128 round-up
//! could double the work.
//!
//! Zero rows of op(A), zero columns of op(B) and zero inner indices add nothing to any sum,
//! so the padded products hold the same integers in the real block, and the reconstruction
//! reads only that block: padding changes no bit of C.

/// The smallest alignment of m, n and k (elements): 16 int8 entries are 16 bytes, and an
/// int32 plane with a multiple of 16 rows keeps every row quad of the reconstruction and
/// every plane offset 16-byte aligned.
pub const ALIGN: usize = 16;

/// The default alignment of a large call: the int8 kernels' tile edge.
pub const LARGE_ALIGN: usize = 128;

/// A call pads to [`LARGE_ALIGN`] by default when m, n and k are all at least this.
pub const LARGE_FROM: usize = 1024;

/// k is always padded to at least this: the residue kernel stores four residues per 32-bit
/// word and the int8 planes' rows must start 16-byte aligned.
pub const MIN_K_ALIGN: usize = 16;

/// Padded extents of one call's products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Padded {
    /// Rows of the op(A) planes (m rounded up).
    pub m: usize,
    /// Columns of the op(B) planes (n rounded up).
    pub n: usize,
    /// Inner dimension of both planes (k rounded up).
    pub k: usize,
    /// The alignment used for m and n (the column blocks' starts are multiples of it).
    pub align: usize,
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// The alignment of an m x n x k call that asks for `requested` (`Options::align`): 0 is
/// the default, [`LARGE_ALIGN`] when m, n and k are all at least [`LARGE_FROM`] and
/// [`ALIGN`] otherwise; anything else is rounded up to a power of two (1 leaves m and n as
/// they are).
pub fn alignment(requested: usize, m: usize, n: usize, k: usize) -> usize {
    match requested {
        0 if m.min(n).min(k) >= LARGE_FROM => LARGE_ALIGN,
        0 => ALIGN,
        a => a.next_power_of_two(),
    }
}

/// The padded extents of an m x n x k call at alignment `align` (see [`alignment`]); k is
/// padded to at least [`MIN_K_ALIGN`].
pub fn padded(m: usize, n: usize, k: usize, align: usize) -> Padded {
    let align = align.max(1);
    Padded {
        m: round_up(m, align),
        n: round_up(n, align),
        k: round_up(k, align.max(MIN_K_ALIGN)),
        align,
    }
}

impl Padded {
    /// Column block width for a block of at most `nb` columns: a multiple of the alignment,
    /// so every block starts at an aligned column and its padded width stays inside the
    /// op(B) planes; the whole width when `nb` covers it.
    pub fn block_width(&self, nb: usize, n: usize) -> usize {
        if nb >= n {
            n
        } else {
            round_up(nb.max(1), self.align)
        }
    }

    /// The padded extent of a block of `len` real rows (or columns) starting at the aligned
    /// offset `start` of a dimension padded to `padded_len`: `len` rounded up, never beyond
    /// the planes.
    pub fn extent(&self, start: usize, len: usize, padded_len: usize) -> usize {
        debug_assert!(start.is_multiple_of(self.align) && start + len <= padded_len);
        round_up(len, self.align).min(padded_len - start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By default large calls pad to the tile edge and small or skinny ones to 16 bytes;
    /// an explicit request wins either way.
    #[test]
    fn the_default_alignment_is_the_tile_edge_for_large_calls_only() {
        assert_eq!(alignment(0, 5000, 5000, 5000), LARGE_ALIGN);
        let p = padded(5000, 4100, 4097, alignment(0, 5000, 4100, 4097));
        assert_eq!((p.m, p.n, p.k), (5120, 4224, 4224));
        assert_eq!(alignment(0, 1024, 1024, 65536), LARGE_ALIGN);
        for (m, n, k) in [
            (110592, 64, 64),
            (64, 64, 110592),
            (1023, 4096, 4096),
            (600, 600, 600),
        ] {
            assert_eq!(alignment(0, m, n, k), ALIGN, "{m}x{n}x{k}");
        }
        assert_eq!(alignment(16, 5000, 5000, 5000), 16);
        assert_eq!(alignment(1, 5000, 5000, 5000), 1);
    }

    #[test]
    fn odd_sizes_pad_to_their_aligned_neighbour_and_aligned_ones_stay() {
        let p = padded(4095, 4099, 4097, ALIGN);
        assert_eq!((p.m, p.n, p.k), (4096, 4112, 4112));
        let q = padded(4096, 8192, 4096, ALIGN);
        assert_eq!((q.m, q.n, q.k), (4096, 8192, 4096));
        // alignment 1 leaves m and n, k still takes the residue kernel's 16
        let r = padded(4095, 7, 33, alignment(1, 4095, 7, 33));
        assert_eq!((r.m, r.n, r.k), (4095, 7, 48));
        assert_eq!(alignment(24, 4095, 4095, 4095), 32);
        assert_eq!(padded(5, 5, 5, 64).k, 64);
    }

    /// Every block's padded rows and columns stay inside the padded planes, cover the real
    /// ones, and the blocks tile all n columns (syrk triangles start rows at the block's
    /// column).
    #[test]
    fn blocks_cover_the_real_extent_and_stay_inside_the_planes() {
        for (m, n, nb_req, align) in [
            (4095, 4097, 1000, 16),
            (300, 300, 75, 16),
            (17, 1000, 64, 32),
            (4097, 4097, 4097, 16),
            (33, 65, 7, 1),
        ] {
            let p = padded(m, n, 10, align);
            let nb = p.block_width(nb_req, n);
            assert!(nb >= nb_req.min(n));
            let mut j0 = 0;
            while j0 < n {
                let cols = nb.min(n - j0);
                let cols_pad = p.extent(j0, cols, p.n);
                assert!(cols_pad >= cols && j0 + cols_pad <= p.n, "{m} {n} {j0}");
                assert_eq!(cols_pad % align, 0);
                // rows of a lower triangle block: from row j0 (m == n there)
                if m == n {
                    let rows_pad = p.extent(j0, m - j0, p.m);
                    assert!(rows_pad >= m - j0 && j0 + rows_pad <= p.m);
                }
                let upper = (j0 + cols).min(m);
                assert!(p.extent(0, upper, p.m) >= upper);
                j0 += cols;
            }
        }
    }
}
