//! How a host-resident gemm is pipelined on a GPU, as pure arithmetic: how many column
//! blocks of C and row panels of op(A) it is cut into ([`column_blocks`], [`Cut`]) and what
//! the pipelined call costs ([`pipelined_seconds`]). The GPU route (`gpu_kernels::host`)
//! cuts its calls with these functions under its tuning; the engine prices host-resident
//! calls with the same cut under the default tuning ([`DEFAULT_CUTS`]).
//!
//! The schedule: uploads of op(A)'s panels and op(B)'s (and C's) column blocks on a copy
//! stream, each panel x block product as soon as both parts are on the device, each block of
//! C downloaded as soon as its last product is done. So the call takes the first group's
//! upload (fill), then whichever of the link and the GPU is busier, then the last unit's
//! product and the last block's download (drain).

/// Smallest host-resident gemm (bytes of A, B and C) that is pipelined: below it a call is
/// over in a few milliseconds and the extra stream, events and copy threads cost more than
/// the overlap gains.
pub const PIPELINE_MIN_BYTES: usize = 96 << 20;

/// Whether the host path page-locks the caller's op(A) and op(B) of an m x n x k gemm
/// when registration is on (`OZAKI_HOST_REGISTER`): from [`PIPELINE_MIN_BYTES`] up, where
/// the page-locking's fixed cost per call is small against the staging copies it saves.
pub fn registers_operands(m: usize, n: usize, k: usize) -> bool {
    let elems = (m.saturating_mul(k))
        .saturating_add(k.saturating_mul(n))
        .saturating_add(m.saturating_mul(n));
    elems.saturating_mul(8) >= PIPELINE_MIN_BYTES
}

/// The largest C, in bytes, that a host-resident gemm made beside other BLAS calls hands off
/// ([`hands_off_c`]).
pub const HANDOFF_MAX_BYTES: usize = 64 << 20;

/// Whether a host-resident gemm with an `m x n` C, made with `concurrent` BLAS calls in
/// flight (itself included), hands its C off: it gives up the GPU once C is in pinned
/// memory of its own and writes it into the caller's memory after, so that the callers
/// queued behind it wait only for its GPU work (`gpu_kernels::host`). A larger C belongs to
/// a call long enough that overlapping the write with the download matters more.
pub fn hands_off_c(m: usize, n: usize, concurrent: u32) -> bool {
    concurrent > 1 && m.saturating_mul(n).saturating_mul(8) <= HANDOFF_MAX_BYTES
}

/// The most bytes of op(A) and op(B) together that a call handing off its C copies into
/// pinned memory of its own ([`copies_operands_apart`]): pinned memory is allocated for the
/// call when the pool has none that fits, and a larger pair stages through the pinned ring
/// inside the call as before.
pub const HANDOFF_MAX_OPERAND_BYTES: usize = 256 << 20;

/// Whether an `m x n x k` gemm made with `concurrent` calls in flight copies its op(A) and
/// op(B) into pinned memory of its own before it queues for the GPU: it hands off its C
/// ([`hands_off_c`]) and the operands take at most [`HANDOFF_MAX_OPERAND_BYTES`].
pub fn copies_operands_apart(m: usize, n: usize, k: usize, concurrent: u32) -> bool {
    let elems = m.saturating_mul(k).saturating_add(k.saturating_mul(n));
    hands_off_c(m, n, concurrent) && elems.saturating_mul(8) <= HANDOFF_MAX_OPERAND_BYTES
}

/// Fewest columns of a column block.
pub const BLOCK_MIN_COLS: usize = 256;

/// Fewest rows of a row panel of op(A).
pub const PANEL_MIN_ROWS: usize = 256;

/// How one route cuts its pipelined calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutRule {
    /// Target bytes of op(B) per column block.
    pub block_bytes: usize,
    /// Most column blocks.
    pub max_blocks: usize,
    /// Row panels of op(A) wanted.
    pub panels: usize,
    /// Fewest rows of a panel (at least [`PANEL_MIN_ROWS`]).
    pub panel_rows: usize,
}

/// The cut rules of `gpu-native` and `gpu-ozaki` in the host path's default tuning (what
/// `ozaki bench --pipeline` measured best on the H200 host, BENCHMARKS.md "Host-resident
/// path and split" and "Host-resident calls at the link bound"). gpu-ozaki converts each
/// part once, so its cut follows the link: at 16384 8 blocks x 4 panels took 150 ms against
/// 173 ms for 4 x 1, while at 8192 8 x 4 (panels of 2048 rows, whose strided uploads ran at
/// under 20 GB/s) took 94 ms against 46 ms for 4 x 1; so its blocks hold 128 MiB of op(B)
/// (4 at 8192) and its panels at least 4096 rows.
pub const DEFAULT_CUTS: (CutRule, CutRule) = (
    CutRule {
        block_bytes: 64 << 20,
        max_blocks: 16,
        panels: 4,
        panel_rows: PANEL_MIN_ROWS,
    },
    CutRule {
        block_bytes: 128 << 20,
        max_blocks: 8,
        panels: 4,
        panel_rows: 4096,
    },
);

/// Column blocks an m x n x k host-resident gemm is pipelined over: 1 below
/// [`PIPELINE_MIN_BYTES`] or for n < 512, else enough for blocks of op(B) of about
/// `rule.block_bytes` (small enough that the first product starts soon and the last block's
/// download is a short tail, large enough that each block's product keeps the GPU busy), at
/// least 2, at most `rule.max_blocks`, and never narrower than [`BLOCK_MIN_COLS`] columns.
pub fn column_blocks(m: usize, n: usize, k: usize, rule: &CutRule) -> usize {
    let bytes = 8 * (m * k + k * n + m * n);
    if bytes < PIPELINE_MIN_BYTES || n < 2 * BLOCK_MIN_COLS {
        return 1;
    }
    let cap = rule.max_blocks.max(1);
    (8 * k * n)
        .div_ceil(rule.block_bytes.max(1))
        .clamp(2.min(cap), cap)
        .min(n / BLOCK_MIN_COLS)
}

/// A pipelined call's cut: `blocks` column blocks of C and `panels` row panels of op(A).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Column blocks (1: not pipelined).
    pub blocks: usize,
    /// Row panels of op(A).
    pub panels: usize,
}

impl Cut {
    /// The cut of an m x n x k gemm under `rule`: [`column_blocks`], and the rule's panels
    /// (each at least `rule.panel_rows` rows) when it is pipelined, else one.
    pub fn of(m: usize, n: usize, k: usize, rule: &CutRule) -> Cut {
        let blocks = column_blocks(m, n, k, rule);
        let panels = if blocks == 1 {
            1
        } else {
            rule.panels
                .min(m / rule.panel_rows.max(PANEL_MIN_ROWS))
                .max(1)
        };
        Cut { blocks, panels }
    }
}

/// What a host-resident call moves and computes, in seconds, each as if alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stages {
    /// Uploading op(A).
    pub upload_a: f64,
    /// Uploading op(B) and, when it is read, C.
    pub upload_rest: f64,
    /// Downloading C.
    pub download: f64,
    /// The device work.
    pub compute: f64,
}

/// The time of a call cut as `cut` with the stages `s`: the first group's upload (the first
/// panel of op(A) with the first block of op(B) and C), then the busier of the link (uploads
/// and downloads share it) and the device for the rest, then the last unit's compute and the
/// last block's download. Uncut (one block, one panel), that is the stages one after the
/// other; cut finely, it tends to the larger of the link and the device.
pub fn pipelined_seconds(s: &Stages, cut: Cut) -> f64 {
    let (blocks, panels) = (cut.blocks.max(1) as f64, cut.panels.max(1) as f64);
    let fill = s.upload_a / panels + s.upload_rest / blocks;
    let last_download = s.download / blocks;
    let last_unit = s.compute / (blocks * panels);
    let link = s.upload_a + s.upload_rest + s.download;
    let middle = (link - fill - last_download).max(s.compute - last_unit);
    fill + middle + last_unit + last_download
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PySCF's 1953 x 1953 C (30.5 MB) from 16 threads is handed off; the same call alone,
    /// and a 4096 x 4096 C (134 MB) beside others, keep the early writes.
    #[test]
    fn only_a_c_up_to_the_limit_made_beside_other_calls_is_handed_off() {
        assert!(hands_off_c(1953, 1953, 16));
        assert!(hands_off_c(1953, 1953, 2));
        assert!(!hands_off_c(1953, 1953, 1));
        assert!(!hands_off_c(4096, 4096, 16));
        assert!(hands_off_c(HANDOFF_MAX_BYTES / 8, 1, 2));
        assert!(!hands_off_c(HANDOFF_MAX_BYTES / 8 + 1, 1, 2));
    }

    /// PySCF's 30.5 MB of A is copied apart; a small C over a 1.6 GB A stages through the
    /// ring, and nothing is copied apart by a call made alone.
    #[test]
    fn operands_are_copied_apart_up_to_their_limit() {
        assert!(copies_operands_apart(1953, 122, 1953, 16));
        assert!(!copies_operands_apart(1024, 1024, 100_000, 16));
        assert!(!copies_operands_apart(1953, 122, 1953, 1));
        assert!(
            !copies_operands_apart(4096, 4096, 64, 16),
            "C too large to hand off"
        );
    }

    fn cut(m: usize, n: usize, k: usize, native: bool) -> Cut {
        let rule = if native {
            DEFAULT_CUTS.0
        } else {
            DEFAULT_CUTS.1
        };
        Cut::of(m, n, k, &rule)
    }

    /// Small calls are not pipelined; large ones get blocks of about 64 MiB of B (capped
    /// per route) and the route's panels.
    #[test]
    fn cuts_follow_the_size() {
        assert_eq!(
            cut(1024, 1024, 1024, true),
            Cut {
                blocks: 1,
                panels: 1
            }
        );
        assert_eq!(cut(110592, 64, 64, true).blocks, 1);
        assert_eq!(
            cut(8192, 8192, 8192, true),
            Cut {
                blocks: 8,
                panels: 4
            }
        );
        assert_eq!(
            cut(8192, 8192, 8192, false),
            Cut {
                blocks: 4,
                panels: 2
            }
        );
        assert_eq!(cut(16384, 16384, 16384, true).blocks, 16);
        assert_eq!(
            cut(16384, 16384, 16384, false),
            Cut {
                blocks: 8,
                panels: 4
            }
        );
        assert_eq!(cut(4096, 600, 65536, true).blocks, 2);
        assert_eq!(
            cut(300, 65536, 8192, true),
            Cut {
                blocks: 16,
                panels: 1
            }
        );
    }

    /// Uncut, the stages add up; cut finely, the call takes about the larger of the link and
    /// the device; in between, never less than either, never more than their sum.
    #[test]
    fn the_pipelined_time_lies_between_the_bound_and_the_serial_sum() {
        let s = Stages {
            upload_a: 0.04,
            upload_rest: 0.04,
            download: 0.04,
            compute: 0.1,
        };
        let link = 0.12;
        let serial = link + s.compute;
        let one = Cut {
            blocks: 1,
            panels: 1,
        };
        assert!((pipelined_seconds(&s, one) - serial).abs() < 1e-12);
        let fine = Cut {
            blocks: 4096,
            panels: 4096,
        };
        assert!((pipelined_seconds(&s, fine) - link).abs() < 1e-3);
        let mut last = serial;
        for (blocks, panels) in [(2, 1), (4, 1), (4, 4), (16, 4), (64, 16)] {
            let t = pipelined_seconds(&s, Cut { blocks, panels });
            assert!(t >= link.max(s.compute) - 1e-12 && t <= serial + 1e-12);
            assert!(t <= last + 1e-12, "a finer cut must not cost more");
            last = t;
        }
        // one panel: all of A is in the fill, so panels shorten a call of many blocks
        let one_panel = pipelined_seconds(
            &s,
            Cut {
                blocks: 64,
                panels: 1,
            },
        );
        assert!(
            one_panel
                > pipelined_seconds(
                    &s,
                    Cut {
                        blocks: 64,
                        panels: 4
                    }
                )
        );
    }

    /// When the device is the bottleneck, the pipelined time is compute plus the fill and
    /// the last download; a faster device (the emulation) then wins by its compute.
    #[test]
    fn a_compute_bound_call_pays_compute_plus_fill_and_drain() {
        let s = Stages {
            upload_a: 0.01,
            upload_rest: 0.01,
            download: 0.01,
            compute: 0.16,
        };
        let c = Cut {
            blocks: 16,
            panels: 4,
        };
        let fill = 0.01 / 4.0 + 0.01 / 16.0;
        let want = fill + 0.16 + 0.01 / 16.0;
        assert!((pipelined_seconds(&s, c) - want).abs() < 1e-12);
        let faster = Stages { compute: 0.10, ..s };
        assert!(pipelined_seconds(&faster, c) < pipelined_seconds(&s, c) - 0.05);
    }
}
