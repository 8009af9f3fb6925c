//! How a pipelined host-resident gemm is cut ([`Grid`]): column blocks of C and row panels
//! of op(A), and where each panel lives on the device. Pure arithmetic on the call's shape
//! and the tuning, kept apart from the CUDA work so it can be tested without a GPU.

use super::Engine;
use super::tuning::{UploadOrder, tuning};
use ozaki_core::blas::{GemmArgs, Trans};
use ozaki_core::host_pipeline::{CutRule, column_blocks};

/// How a pipelined gemm is cut: C into `blocks` column blocks, op(A) into `panels` row
/// panels. One panel times one block is a unit of device work, started as soon as both are
/// on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    /// Column blocks of C (1: no pipeline).
    pub blocks: usize,
    /// Row panels of op(A).
    pub panels: usize,
}

impl Grid {
    /// The pipeline's own choice: [`pipeline_blocks`] and [`pipeline_panels`].
    pub fn of(args: &GemmArgs, engine: Engine) -> Grid {
        Grid {
            blocks: pipeline_blocks(args, engine),
            panels: pipeline_panels(args, engine),
        }
    }
}

pub use ozaki_core::host_pipeline::{PANEL_MIN_ROWS, PIPELINE_MIN_BYTES};

/// Column blocks a host-resident gemm is pipelined over:
/// `ozaki_core::host_pipeline::column_blocks` under the route's [`Tuning::block_bytes`] and
/// the route's [`Tuning::max_blocks`] (the engine prices the same cut under the default
/// tuning).
///
/// [`Tuning::block_bytes`]: super::Tuning::block_bytes
/// [`Tuning::max_blocks`]: super::Tuning::max_blocks
pub fn pipeline_blocks(args: &GemmArgs, engine: Engine) -> usize {
    let t = tuning();
    let (block_bytes, max_blocks) = match engine {
        Engine::Native => (t.block_bytes.0, t.max_blocks.0),
        Engine::Ozaki(_) => (t.block_bytes.1, t.max_blocks.1),
    };
    let rule = CutRule {
        block_bytes,
        max_blocks,
        panels: 1,
        panel_rows: PANEL_MIN_ROWS,
    };
    column_blocks(args.m, args.n, args.k, &rule)
}

/// Row panels of op(A) a pipelined gemm uploads one after the other, so that the first
/// products start once the first panel and the first block of op(B) are on the device
/// instead of all of A (at 8192 the GPU waited about 15 ms for A): 1 for calls
/// that are not pipelined, else [`Tuning::panels`] for the route, each panel at least
/// [`PANEL_MIN_ROWS`] rows.
///
/// [`Tuning::panels`]: super::Tuning::panels
pub fn pipeline_panels(args: &GemmArgs, engine: Engine) -> usize {
    if pipeline_blocks(args, engine) == 1 {
        return 1;
    }
    let t = tuning();
    let (want, rows) = match engine {
        Engine::Native => (t.panels.0, t.panel_rows.0),
        Engine::Ozaki(_) => (t.panels.1, t.panel_rows.1),
    };
    fit_panels(args.m, want.min(args.m / rows.max(PANEL_MIN_ROWS)), 1)
}

/// Panels of a split's shared A over `slots` devices (`crate::multi`): the route's
/// [`pipeline_panels`] per slot (slot i uploads panels i, i + slots, ...), at most one per
/// row. Each slot thus uploads as many panels as one GPU alone would: with 2 GPUs at
/// 32768, 8 panels for `gpu-native` took the split from 0.886 to 0.847 s (BENCHMARKS.md,
/// "Host-resident path and split").
pub(crate) fn shared_panels(args: &GemmArgs, engine: Engine, slots: usize) -> usize {
    let slots = slots.max(1);
    let want = pipeline_panels(args, engine) * slots;
    fit_panels(args.m, want.min(args.m), slots)
}

/// One part of a pipelined gemm's upload: this slot's q-th own row panel of op(A), or
/// column block j of op(B) (with C's block when the call reads C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Panel(usize),
    Block(usize),
}

/// The order of a pipelined gemm's parts ([`Tuning::order`]): `panels` of op(A) per slot
/// and `blocks` of op(B), each kind in its own order. A unit (panel, block) can start once
/// both are on the device, so each order keeps the uploaded shares of A and B close.
///
/// [`Tuning::order`]: super::Tuning::order
pub(super) fn upload_order(panels: usize, blocks: usize, order: UploadOrder) -> Vec<Part> {
    let mut parts = Vec::with_capacity(panels + blocks);
    match order {
        UploadOrder::Alternate => {
            for q in 0..panels.max(blocks) {
                if q < panels {
                    parts.push(Part::Panel(q));
                }
                if q < blocks {
                    parts.push(Part::Block(q));
                }
            }
        }
        UploadOrder::Balanced => {
            let (mut q, mut j) = (0, 0);
            while q < panels || j < blocks {
                // the next panel when A's uploaded share q / panels is at most B's j / blocks
                if q < panels && (j == blocks || q * blocks <= j * panels) {
                    parts.push(Part::Panel(q));
                    q += 1;
                } else {
                    parts.push(Part::Block(j));
                    j += 1;
                }
            }
        }
    }
    parts
}

/// `want` panels (at least 1); when a panel of a transpose-free A, which is copied as `k`
/// strided columns of its rows, would have columns longer than a ring slot, as many more as
/// needed (a multiple of `multiple`).
fn fit_panels(m: usize, want: usize, multiple: usize) -> usize {
    let want = want.max(1);
    if want == 1 {
        return 1;
    }
    let need = (8 * m).div_ceil(tuning().ring_chunk) + 1;
    want.max(need.div_ceil(multiple) * multiple).min(m.max(1))
}

/// Row panels (first row, rows) of op(A) with `count` panels: equal heights, the remainder
/// spread over the first ones. Every slot of a split computes the same list.
pub(super) fn row_panels(m: usize, count: usize) -> Vec<(usize, usize)> {
    let count = count.clamp(1, m.max(1));
    let (h, extra) = (m / count, m % count);
    let mut r0 = 0;
    (0..count)
        .map(|p| {
            let rows = h + usize::from(p < extra);
            let panel = (r0, rows);
            r0 += rows;
            panel
        })
        .collect()
}

/// Where a row panel of op(A) lives in the device buffer of A: `off` bytes in, with leading
/// dimension `ld`. One panel is A as the caller laid it out; several panels of a transposed
/// A are its column ranges in place; several panels of A (rows of a column-major matrix, not
/// contiguous) are packed one after the other, each `rows` x `k` with `ld = rows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PanelPlace {
    pub(super) r0: usize,
    pub(super) rows: usize,
    pub(super) off: u64,
    pub(super) ld: usize,
}

pub(super) fn panel_places(args: &GemmArgs, panels: &[(usize, usize)]) -> Vec<PanelPlace> {
    panels
        .iter()
        .map(|&(r0, rows)| {
            let (off, ld) = if panels.len() == 1 {
                (0, args.lda)
            } else if args.transa == Trans::Yes {
                (8 * (r0 * args.lda) as u64, args.lda)
            } else {
                (8 * (r0 * args.k) as u64, rows)
            };
            PanelPlace { r0, rows, off, ld }
        })
        .collect()
}

/// A block of C as the host path moves it: columns `col0..col0 + cols` of the call's C of
/// `rows` rows. On the device and in C's pinned staging C is contiguous (leading dimension =
/// its rows), so there the block is the `rows x cols` elements from [`CBlock::off`]; in the
/// caller's C it is rows `0..rows` of those columns (`HostC::part`); a piece of it in C's
/// download ring starts at the slot's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CBlock {
    pub(crate) col0: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl CBlock {
    /// Index of the block's first element in C on the device and in pinned staging.
    pub(crate) fn off(&self) -> usize {
        self.col0 * self.rows
    }

    /// Bytes of the block.
    pub(crate) fn bytes(&self) -> usize {
        8 * self.rows * self.cols
    }

    /// The block cut, in order, into pieces of whole columns, each of at most `max_bytes`
    /// (a piece has at least one column, so a column longer than `max_bytes` is one piece).
    pub(crate) fn pieces(self, max_bytes: usize) -> impl Iterator<Item = CBlock> {
        let fit = (max_bytes / 8 / self.rows.max(1)).max(1);
        (0..self.cols).step_by(fit).map(move |j| CBlock {
            col0: self.col0 + j,
            cols: fit.min(self.cols - j),
            ..self
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ozaki::Options;

    fn blocks(m: usize, n: usize, k: usize, engine: Engine) -> usize {
        let (a, b) = (vec![0.0; 1], vec![0.0; 1]);
        pipeline_blocks(&GemmArgs::product(m, n, k, &a, &b), engine)
    }

    /// Panel counts: none for unpipelined calls, the tuning's count for large ones, at least
    /// PANEL_MIN_ROWS rows each; a split's count is that per slot, at most one per row.
    #[test]
    fn panel_counts_follow_the_size_and_the_slots() {
        let oz = Engine::Ozaki(Options::default());
        let (a, b) = (vec![0.0; 1], vec![0.0; 1]);
        let args = |m, n, k| GemmArgs::product(m, n, k, &a, &b);
        assert_eq!(pipeline_panels(&args(1024, 1024, 1024), Engine::Native), 1);
        assert_eq!(pipeline_panels(&args(8192, 8192, 8192), Engine::Native), 4);
        assert_eq!(pipeline_panels(&args(8192, 8192, 8192), oz), 2);
        assert_eq!(pipeline_panels(&args(600, 65536, 8192), Engine::Native), 2);
        assert_eq!(
            shared_panels(&args(32768, 16384, 32768), Engine::Native, 2),
            8
        );
        assert_eq!(shared_panels(&args(32768, 16384, 32768), oz, 2), 8);
        assert_eq!(
            shared_panels(&args(32768, 16384, 32768), Engine::Native, 3),
            12
        );
        assert_eq!(shared_panels(&args(512, 512, 64), oz, 2), 2);
        assert_eq!(shared_panels(&args(1, 512, 64), oz, 2), 1);
    }

    /// Small calls are not pipelined; large ones get blocks of about 64 MiB of B, capped
    /// lower for the emulated route (each block converts all of A again).
    #[test]
    fn pipeline_blocks_follow_the_size() {
        let oz = Engine::Ozaki(Options::default());
        assert_eq!(blocks(1024, 1024, 1024, Engine::Native), 1);
        assert_eq!(blocks(110592, 64, 64, Engine::Native), 1);
        assert_eq!(blocks(8192, 8192, 8192, Engine::Native), 8);
        assert_eq!(blocks(8192, 8192, 8192, oz), 4);
        assert_eq!(blocks(16384, 16384, 16384, Engine::Native), 16);
        assert_eq!(blocks(16384, 16384, 16384, oz), 8);
        assert_eq!(blocks(4096, 600, 65536, Engine::Native), 2);
    }

    /// A block's pieces cover its columns in order, each whole columns within the limit
    /// (or one column when a column alone exceeds it), and lie one after the other in the
    /// contiguous C.
    #[test]
    fn pieces_are_whole_columns_in_order_within_the_limit() {
        for (rows, cols, max) in [
            (100, 37, 8 * 1000),
            (100, 37, 8 * 50),
            (100, 1, 8),
            (100, 37, 1 << 30),
            (5, 0, 64),
        ] {
            let b = CBlock {
                col0: 17,
                rows,
                cols,
            };
            let mut next = 0;
            for p in b.pieces(max) {
                assert_eq!((p.col0, p.rows), (b.col0 + next, rows));
                assert_eq!(p.off(), b.off() + next * rows);
                assert!(p.cols >= 1);
                assert!(p.bytes() <= max || p.cols == 1, "{p:?} over {max}");
                next += p.cols;
            }
            assert_eq!(next, cols, "{b:?} / {max}");
            if let Some(first) = b.pieces(max).next() {
                // as many columns as fit
                let more = CBlock {
                    cols: first.cols + 1,
                    ..first
                };
                assert!(
                    first.cols == cols || more.bytes() > max,
                    "{first:?} / {max}"
                );
            }
        }
    }

    fn names(parts: &[Part]) -> String {
        parts
            .iter()
            .map(|p| match p {
                Part::Panel(q) => format!("P{q}"),
                Part::Block(j) => format!("B{j}"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Both orders send every panel and block once, each kind in its own order; alternate
    /// pairs panel q with block q, balanced keeps A's uploaded share at most one panel ahead
    /// of B's.
    #[test]
    fn upload_orders() {
        use UploadOrder::{Alternate, Balanced};
        assert_eq!(
            names(&upload_order(4, 8, Alternate)),
            "P0 B0 P1 B1 P2 B2 P3 B3 B4 B5 B6 B7"
        );
        assert_eq!(
            names(&upload_order(4, 8, Balanced)),
            "P0 B0 B1 P1 B2 B3 P2 B4 B5 P3 B6 B7"
        );
        assert_eq!(names(&upload_order(2, 4, Balanced)), "P0 B0 B1 P1 B2 B3");
        assert_eq!(names(&upload_order(4, 2, Balanced)), "P0 B0 P1 P2 B1 P3");
        assert_eq!(names(&upload_order(1, 3, Alternate)), "P0 B0 B1 B2");
        assert_eq!(names(&upload_order(0, 2, Balanced)), "B0 B1");
        for (p, b) in [(1, 1), (3, 7), (8, 4), (5, 5), (16, 3)] {
            for order in [Alternate, Balanced] {
                let parts = upload_order(p, b, order);
                let (mut panels, mut blocks) = (Vec::new(), Vec::new());
                for part in &parts {
                    match *part {
                        Part::Panel(q) => panels.push(q),
                        Part::Block(j) => blocks.push(j),
                    }
                }
                assert_eq!(panels, (0..p).collect::<Vec<_>>(), "{p} x {b} {order:?}");
                assert_eq!(blocks, (0..b).collect::<Vec<_>>(), "{p} x {b} {order:?}");
                assert!(matches!(parts[0], Part::Panel(0)), "{p} x {b} {order:?}");
            }
        }
    }
}
