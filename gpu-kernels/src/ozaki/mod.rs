//! The `gpu-ozaki` route on device-resident operands: Ozaki scheme II with byte moduli on the
//! INT8 tensor cores (paper brief §1 and §9.3-9.5).
//!
//! Stages, all on the caller's stream:
//! 1. exponent scan of op(A) rows and op(B) columns (NaN/Inf detected) and each line's
//!    statistics: norm scaling's coarse square sum `S_i` and the accuracy rule's sums
//!    (`ozaki_core::rule`, "Line statistics"), in one read of each operand where its lines
//!    fit in registers ([`ScanStats`]), else a scan and a second pass; then `line_summary`
//!    reduces them to the rule's two side summaries (`ozaki_core::rule::summary`, a fixed
//!    65 KiB each, whatever m and n);
//! 2. the host reads the two summaries (one small copy) and makes the [`Plan`]: the accuracy
//!    rule's moduli count or decline (`ozaki_core::rule::choose_summarised`, what
//!    `cpu-ozaki`'s `choose` calls on the summaries of the same statistics, a few
//!    microseconds); the power-of-two shifts are formed
//!    on the device from the same statistics (`line_shifts`, from a per-class table of the
//!    plan's shift rule). A declined call stops here, before any product and with C
//!    untouched;
//! 3. one pass over each fp64 operand forms the residues of all moduli (convert once). The
//!    GPU runs the shifts of 2 and 3 for the expected moduli count while the host plans, and
//!    again when the plan chooses another count. So a declined call has paid stage 1 and,
//!    where it speculated, stage 3: the host knows of the decline only once the summaries
//!    are downloaded. After an automatic call declined, the next one of that scaling does
//!    not speculate (`moduli_guess`), and a run of declined calls pays stage 1 alone;
//! 4. one cuBLASLt strided-batched int8 GEMM per column block of C covers all moduli;
//! 5. CRT reconstruction, single rounding, unscaling and the alpha/beta epilogue write C.
//!
//! C is written only in stage 5, after every earlier stage succeeded; a failure before it
//! leaves C untouched, so the caller can still run the native route on the same memory.
//!
//! # Same numerics as `ozaki-core`, and where they differ
//! Moduli ([`MODULI`] = `ozaki_core::moduli::INT8_MODULI`), shifts (ozaki-core's *norm*
//! scaling by default, or its *fast* scaling, [`Options::scaling`] / `OZAKI_SCALING`),
//! quantiser (round to nearest even, `rint`) and reconstruction (exact CRT, one correctly
//! rounded conversion, then `alpha c + beta C` with separately rounded operations) are those
//! of `ozaki_core::emulate`; for the same moduli count and scaling mode its output with
//! `Reconstruction::Exact` equals ours bit for bit (`tests/device.rs`,
//! `equals_the_cpu_reference_route_bit_for_bit` for fast, `norm_scaling_equals_...` for
//! norm). Three differences remain, on purpose:
//! - **scaling mode**: both routes default to norm scaling; `Accurate` asked of the GPU runs
//!   as norm (it needs the coarse product). The moduli count is the accuracy rule's on both
//!   routes, from the same line statistics.
//! - **subnormal results**: the GPU rounds C' 2^-(sigma+tau) to 53 bits and then scales, which
//!   rounds a second time when the result is subnormal (below 2^-1022); normal results are
//!   correctly rounded.

use crate::device::{Gpu, sync};
use crate::error::{Context, GpuError};
use crate::kernels::PerLine;
pub use crate::kernels::ScanStats;
use crate::lt_int8::{self, MAX_K, Shape};
use crate::timing::{Marks, Phase};
use cudarc::driver::sys;
use ozaki_core::blas::{Trans, Uplo};
use ozaki_core::crt_tables::{CrtTable, ResidueTable};
use ozaki_core::moduli::MAX_MODULI;
use ozaki_core::rule::summary::SUMMARY_WORDS;
use ozaki_core::trace::Phases;

mod moduli_guess;
pub mod padding;
pub(crate) mod pieces;
mod plan;

pub use ozaki_core::rule::{Accuracy, LineTable, Lines, SideSummary, SummaryView};
pub use ozaki_core::scaling::SHIFT_CLASSES;
pub use plan::{
    DEFAULT_SCALING, Plan, ScalingMode, decline, effective_scaling, plan, plan_summarised,
};

/// The INT8 modulus set of `ozaki-core`, in the order moduli are taken: a call with r moduli
/// uses the first r, so GPU and CPU routes share residues and CRT.
pub const MODULI: [u32; MAX_MODULI] = ozaki_core::moduli::INT8_MODULI;

/// u64 slots per line of the statistics buffer: max |x| bits, sum |x| (the scan), then
/// `ozaki_core::rule::LineTable`'s fields from `coarse_sq` on (`line_stats_*`).
pub const STAT_SLOTS: usize = 9;

pub(crate) use moduli_guess::{
    expected_moduli, remember_decline, remember_moduli, speculative_moduli,
};
use plan::{shift_table, summary_params};

/// From this many rows and columns of C on, the products and reconstruction run in column
/// blocks of [`LARGE_BLOCK`]: the int8 products run under the board's power cap (SM clock
/// down to 1.4 GHz at 16384^3), and the memory-bound reconstruction of one block between the
/// products of the next lets them run faster: 105.1 ms instead of 112-113 ms at 16384^3,
/// r = 15 (1.50x native instead of 1.38-1.40x; BENCHMARKS.md, "Kernel tuning").
pub const LARGE: usize = 16384;

/// Column block of C for calls with m, n >= [`LARGE`].
pub const LARGE_BLOCK: usize = 4096;

/// What the device pipeline computes.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// C = alpha op(A) op(B) + beta C.
    Gemm {
        /// op(A).
        transa: Trans,
        /// op(B).
        transb: Trans,
        /// Device address of B.
        b: u64,
        /// Leading dimension of B.
        ldb: usize,
    },
    /// C = alpha op(A) op(A)^T + beta C, one triangle (op(A) = A for `No`, A^T for `Yes`).
    Syrk {
        /// Triangle of C.
        uplo: Uplo,
        /// Whether A is transposed.
        trans: Trans,
    },
}

/// One call on device memory (column-major; BLAS argument checks already passed).
#[derive(Debug, Clone, Copy)]
pub struct DeviceCall {
    /// The operation.
    pub op: Op,
    /// Rows of C (syrk: n).
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// alpha (callers handle alpha == 0 and k == 0 themselves).
    pub alpha: f64,
    /// Device address of A.
    pub a: u64,
    /// Leading dimension of A.
    pub lda: usize,
    /// beta (0: C is not read).
    pub beta: f64,
    /// Device address of C.
    pub c: u64,
    /// Leading dimension of C.
    pub ldc: usize,
}

impl DeviceCall {
    /// C = alpha A B + beta C on packed column-major device buffers (A `m x k`, B `k x n`, C
    /// `m x n`, no transposes, leading dimensions m, k, m): the call `ozaki bench`, the
    /// calibration and the device tests time and check (as `GemmArgs::product` on the host).
    pub fn product(
        (m, n, k): (usize, usize, usize),
        alpha: f64,
        (a, b): (u64, u64),
        beta: f64,
        c: u64,
    ) -> DeviceCall {
        DeviceCall {
            op: Op::Gemm {
                transa: Trans::No,
                transb: Trans::No,
                b,
                ldb: k,
            },
            m,
            n,
            k,
            alpha,
            a,
            lda: m,
            beta,
            c,
            ldc: m,
        }
    }
}

/// What one emulated call did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Moduli used (trace field `moduli`).
    pub moduli: u32,
    /// Measured phases (trace field `phases`).
    pub phases: Phases,
    /// The accuracy rule's estimate at the count used (`ozaki_core::rule::Choice::estimate`).
    pub estimate: f64,
    /// The scaling the call used (`None` only in `Outcome::default()`).
    pub scaling: Option<ScalingMode>,
}

/// Options of one emulated call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Force this many moduli (`OZAKI_MODULI`).
    pub moduli: Option<usize>,
    /// Scaling bound (`OZAKI_SCALING`); `None` is [`DEFAULT_SCALING`].
    pub scaling: Option<ScalingMode>,
    /// How strict the accuracy rule is (`OZAKI_ACCURACY`).
    pub accuracy: Accuracy,
    /// Largest column block (for tests of the blocked path; 0 = as memory allows).
    pub max_block: usize,
    /// Alignment of the int8 products' m, n and k ([`padding::alignment`]: 0 is the
    /// default, 128 for large calls and 16 for the rest; 1 leaves m and n unpadded); the
    /// result is the same bits at any.
    pub align: usize,
}

/// Residue and CRT tables for r = 0..=20 moduli (index r), built once per process.
fn tables() -> &'static [(ResidueTable, CrtTable)] {
    static T: std::sync::OnceLock<Vec<(ResidueTable, CrtTable)>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        (0..=MAX_MODULI)
            .map(|r| {
                let r = r.max(1);
                (ResidueTable::new(&MODULI[..r]), CrtTable::new(&MODULI[..r]))
            })
            .collect()
    })
}

/// An error from a column block after an earlier block's reconstruction wrote C: the kinds
/// that mean "declined, C untouched" become `Cuda`, so no caller runs another route on C.
fn written_c(e: GpuError) -> GpuError {
    match e {
        GpuError::NonFinite | GpuError::Unsupported(_) => {
            GpuError::Cuda(format!("{e} (after part of C was written)"))
        }
        e => e,
    }
}

/// Runs the emulated call on `stream` and waits for it. On error C is untouched unless the
/// error came from the reconstruction launches themselves (reported as `Cuda`).
///
/// # Safety
/// - `gpu`'s context is current on this thread and `stream` belongs to it;
/// - `call`'s addresses are device memory of that context covering A, B and C with their
///   leading dimensions, valid (and C touched by nobody else) until the stream has passed
///   the work.
pub unsafe fn gemm(
    gpu: &mut Gpu,
    stream: sys::CUstream,
    call: &DeviceCall,
    opts: Options,
) -> Result<Outcome, GpuError> {
    // SAFETY: the caller's contract; the wait below keeps the operands in use no longer.
    let pending = unsafe { enqueue(gpu, stream, call, opts) }?;
    sync(stream)?;
    pending.finish()
}

/// An emulated call whose plan accepted its operands and whose work is all enqueued on its
/// stream, not yet waited for.
pub struct Pending {
    outcome: Outcome,
    marks: Marks,
}

impl Pending {
    /// The call's outcome with its phase times, once its stream has passed its work (the
    /// caller synchronised it).
    pub fn finish(self) -> Result<Outcome, GpuError> {
        Ok(Outcome {
            phases: self.marks.phases()?,
            ..self.outcome
        })
    }

    /// The call's outcome as planned (moduli, scaling, estimate), its phase times not yet
    /// measured: known while its work still runs.
    pub fn planned(&self) -> &Outcome {
        &self.outcome
    }
}

/// Whether op(A)'s rows are contiguous (A transposed), and op(B) as (address, leading
/// dimension, columns contiguous) for gemm (syrk: none, op(B) = op(A)^T).
fn operands(call: &DeviceCall) -> (bool, Option<(u64, usize, bool)>) {
    match call.op {
        Op::Gemm {
            transa,
            transb,
            b,
            ldb,
        } => (transa == Trans::Yes, Some((b, ldb, transb == Trans::No))),
        Op::Syrk { trans, .. } => (trans == Trans::Yes, None),
    }
}

/// How stage 1 reads the operands' lines ([`line_statistics`], [`lines_cost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinePass {
    /// As the route: one read where the lines fit ([`ScanStats::for_lines`]), else the scan
    /// then the statistics pass.
    Route,
    /// The scan, then the statistics pass, for every operand.
    TwoPass,
    /// `kind` for the operands it fits, the route's choice for the others.
    With(ScanStats),
    /// The exponent scan alone (`scan_rows_*`), no statistics: what the call would read
    /// without the rule.
    ScanOnly,
    /// The exponent scan alone in the route's one-read kernel where one fits (its
    /// statistics skipped), else as [`LinePass::ScanOnly`]: the same without the rule in
    /// the one-read form.
    ScanOnlyOneRead,
}

/// Stage 1 of a call: the exponent scan and the line statistics of op(A)'s rows and op(B)'s
/// columns into `stats` (device memory of [`STAT_SLOTS`] u64 slots of m (+ n) lines, op(A)'s
/// rows first), read as `pass` says, enqueued on `stream`; `marks` (if any) gets a mark after
/// each operand.
///
/// # Safety
/// - as [`line_statistics`], and `stats` is device memory of that context of
///   `8 * STAT_SLOTS * (m + n)` bytes (syrk: m lines), written by nobody else until the
///   stream has passed the work.
unsafe fn scan_lines(
    gpu: &mut Gpu,
    stream: sys::CUstream,
    call: &DeviceCall,
    stats: u64,
    pass: LinePass,
    mut marks: Option<&mut Marks>,
) -> Result<(), GpuError> {
    let (m, n, k) = (call.m, call.n, call.k);
    let (a_contig, b_operand) = operands(call);
    let nb_rows = if b_operand.is_some() { m + n } else { m };
    let (maxbits, abssum, coarse_sq) = (
        stats,
        stats + 8 * nb_rows as u64,
        stats + 16 * nb_rows as u64,
    );
    // SAFETY: stats holds STAT_SLOTS u64 slots of nb_rows lines on this device.
    unsafe { sys::cuMemsetD8Async(stats, 0, 8 * STAT_SLOTS * nb_rows, stream) }
        .result()
        .ctx("cuMemsetD8Async")?;
    let kern = gpu.kernels()?;
    // (address, leading dimension, row contiguous, rows, first stats slot) per operand
    let mut operands = vec![(call.a, call.lda as i64, a_contig, m as i32, 0u64)];
    if let Some((b, ldb, contig)) = b_operand {
        operands.push((b, ldb as i64, contig, n as i32, m as u64));
    }
    for (x, ld, contig, rows, slot) in operands {
        let operand = (x, ld, contig, rows, k as i32);
        let outputs = (maxbits + 8 * slot, abssum + 8 * slot);
        let lines = (coarse_sq + 8 * slot, nb_rows as i64);
        // SAFETY: A (and B) cover the BLAS-checked extents for their leading dimensions;
        // the stats have m (+ n) lines in every slot, zeroed above.
        unsafe {
            match pass {
                LinePass::Route => kern.scan_and_stats(stream, operand, outputs, lines)?,
                LinePass::With(kind) if kind.fits(contig, k) => {
                    kern.scan_stats(kind, stream, operand, outputs, lines, true)?
                }
                LinePass::With(_) => kern.scan_and_stats(stream, operand, outputs, lines)?,
                LinePass::ScanOnlyOneRead if ScanStats::for_lines(contig, k).is_some() => {
                    let kind = ScanStats::for_lines(contig, k).expect("checked");
                    kern.scan_stats(kind, stream, operand, outputs, lines, false)?
                }
                LinePass::TwoPass | LinePass::ScanOnly | LinePass::ScanOnlyOneRead => {
                    kern.per_line(PerLine::Scan, stream, operand, outputs.0, (outputs.1, 0))?;
                    if pass == LinePass::TwoPass {
                        kern.per_line(PerLine::LineStats, stream, operand, outputs.0, lines)?;
                    }
                }
            }
        }
        if let Some(m) = marks.as_deref_mut() {
            m.mark(Phase::Convert)?;
        }
    }
    Ok(())
}

/// Seconds stage 1's per-line work takes on `stream` per operand (op(A), then gemm's op(B);
/// zeroing the buffer counts to the first) when read as `pass` (CUDA events, one run after
/// one untimed run): [`LinePass::ScanOnly`] and [`LinePass::ScanOnlyOneRead`] are what the
/// call would pay without the rule, so what [`LinePass::Route`] takes beyond the faster of
/// the two is what the rule's statistics add.
///
/// # Safety
/// As [`line_statistics`].
pub unsafe fn lines_cost(
    gpu: &mut Gpu,
    stream: sys::CUstream,
    call: &DeviceCall,
    pass: LinePass,
) -> Result<Vec<f64>, GpuError> {
    let syrk = matches!(call.op, Op::Syrk { .. });
    let nb_rows = if syrk { call.m } else { call.m + call.n };
    let stats = gpu.workspace.get("scan", 8 * STAT_SLOTS * nb_rows)?;
    // SAFETY: the caller's contract; `stats` is the workspace slot sized for the call.
    unsafe { scan_lines(gpu, stream, call, stats, pass, None) }?;
    let mut marks = Marks::start(stream)?;
    // SAFETY: as above.
    unsafe { scan_lines(gpu, stream, call, stats, pass, Some(&mut marks)) }?;
    sync(stream)?;
    marks.spans()
}

/// Bytes of the two side summaries (`ozaki_core::rule::summary`) on the device.
const SUMMARY_BYTES: usize = 2 * 4 * SUMMARY_WORDS;

/// Stage 1's reduction: the side summaries of the statistics `scan_lines` wrote into
/// `stats` (`nb_rows` lines, op(A)'s `m` rows first), into `summaries` (zeroed here), for a
/// call of inner dimension `k` under `accuracy` and `scaling`.
///
/// # Safety
/// - `stream` belongs to `gpu`'s context, current on this thread; `stats` holds the
///   [`STAT_SLOTS`] slots of `nb_rows` lines the statistics pass writes before this on
///   `stream`, and `summaries` is device memory of [`SUMMARY_BYTES`] bytes written by
///   nobody else until the stream has passed the work.
unsafe fn summarise(
    gpu: &mut Gpu,
    stream: sys::CUstream,
    (stats, nb_rows, m): (u64, usize, usize),
    (k, accuracy, scaling): (usize, Accuracy, ScalingMode),
    summaries: u64,
) -> Result<(), GpuError> {
    // SAFETY: summaries holds SUMMARY_BYTES bytes on this device.
    unsafe { sys::cuMemsetD8Async(summaries, 0, SUMMARY_BYTES, stream) }
        .result()
        .ctx("cuMemsetD8Async")?;
    let params = summary_params(k, accuracy, scaling);
    let kern = gpu.kernels()?;
    // SAFETY: the caller's contract.
    unsafe {
        kern.line_summary(
            stream,
            (stats, nb_rows as i64),
            (nb_rows as i32, m as i32),
            &params,
            summaries,
        )
    }
}

/// The two side summaries in `words` (2 [`SUMMARY_WORDS`] u32s, op(A)'s first; syrk: op(B)
/// is op(A)).
fn summary_views(words: &[u32], syrk: bool) -> (SummaryView<'_>, SummaryView<'_>) {
    let (a, b) = words.split_at(SUMMARY_WORDS);
    let a = SummaryView::new(a).expect("SUMMARY_WORDS words");
    (
        a,
        if syrk {
            a
        } else {
            SummaryView::new(b).expect("SUMMARY_WORDS words")
        },
    )
}

/// The rule's view of the statistics buffer the scan kernels fill: [`STAT_SLOTS`] slots of
/// `nb_rows` u64s each, one per statistic (slot 1, the scan's sum |x|, is not the rule's).
fn stat_lines(slots: &[u64], nb_rows: usize) -> Lines<'_> {
    let slot = |s: usize| &slots[s * nb_rows..(s + 1) * nb_rows];
    Lines {
        maxbits: slot(0),
        coarse_sq: slot(2),
        abs1: slot(3),
        abs2: slot(4),
        log_depth: slot(5),
        log_depth_sq: slot(6),
        nonzeros: slot(7),
        range: slot(8),
    }
}

/// What stage 1 of a call cost on the GPU, in seconds (CUDA events on the call's stream).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageOneCost {
    /// The per-line work: zeroing the buffer, the exponent scan and the statistics (norm
    /// scaling's `S` and the accuracy rule's sums), read as the [`LinePass`] asked.
    pub lines: f64,
    /// The reduction of the statistics to the two side summaries (`line_summary`).
    pub summary: f64,
    /// The summaries' copy to pinned host memory, as the route makes it.
    pub download: f64,
}

/// What stage 1 computes for a call, read back: the per-line statistics (op(A)'s rows,
/// op(B)'s columns; syrk: the same table twice), the side summaries the route downloads
/// instead, and what each step cost.
#[derive(Debug, Clone)]
pub struct StageOne {
    /// Rows of op(A).
    pub a: LineTable,
    /// Columns of op(B).
    pub b: LineTable,
    /// The summaries of `a` and `b` for the options' accuracy and scaling.
    pub summaries: (SideSummary, SideSummary),
    /// The cost of the route's steps.
    pub cost: StageOneCost,
}

/// The line statistics and summaries the GPU computes for a call, its lines read as `pass`
/// says ([`LinePass::Route`]: as the route does it), and what computing and downloading them
/// cost (the per-line table is copied as well, after the timed steps): what the accuracy
/// rule reads, for tests against the host mirror (`ozaki_core::rule::LineTable::push`,
/// `SideSummary::of`) and for measuring what the rule costs. The scan-only passes form no
/// statistics: they are refused (`Unsupported`).
///
/// # Safety
/// - `gpu`'s context is current on this thread and `stream` belongs to it;
/// - `call.a` (and gemm's B) are device memory of that context covering op(A) (and op(B))
///   with their leading dimensions, valid until this returns (it synchronises `stream`);
///   C is not touched.
pub unsafe fn line_statistics(
    gpu: &mut Gpu,
    stream: sys::CUstream,
    call: &DeviceCall,
    opts: &Options,
    pass: LinePass,
) -> Result<StageOne, GpuError> {
    if matches!(pass, LinePass::ScanOnly | LinePass::ScanOnlyOneRead) {
        return Err(GpuError::Unsupported(
            "the exponent scan alone forms no statistics".into(),
        ));
    }
    let syrk = matches!(call.op, Op::Syrk { .. });
    let nb_rows = if syrk { call.m } else { call.m + call.n };
    let bytes = 8 * STAT_SLOTS * nb_rows;
    let stats = gpu.workspace.get("scan", bytes)?;
    let summaries = gpu.workspace.get("summaries", SUMMARY_BYTES)?;
    let mut pinned = crate::memory::PinnedBuffer::new(bytes + SUMMARY_BYTES)?;
    let mut marks = Marks::start(stream)?;
    // SAFETY: the caller's contract; `stats` is the workspace slot sized for the call.
    unsafe { scan_lines(gpu, stream, call, stats, pass, None) }?;
    marks.mark(Phase::Convert)?;
    let scaling = effective_scaling(opts.scaling);
    // SAFETY: as above; `summaries` is the workspace slot of SUMMARY_BYTES.
    unsafe {
        summarise(
            gpu,
            stream,
            (stats, nb_rows, call.m),
            (call.k, opts.accuracy, scaling),
            summaries,
        )
    }?;
    marks.mark(Phase::Convert)?;
    let host = pinned.as_mut_ptr();
    // SAFETY: pinned holds bytes + SUMMARY_BYTES bytes and outlives both copies
    // (synchronised below).
    unsafe {
        sys::cuMemcpyDtoHAsync_v2(host.add(bytes) as *mut _, summaries, SUMMARY_BYTES, stream)
    }
    .result()
    .ctx("cuMemcpyDtoH")?;
    marks.mark(Phase::Convert)?;
    // SAFETY: as above.
    unsafe { sys::cuMemcpyDtoHAsync_v2(host as *mut _, stats, bytes, stream) }
        .result()
        .ctx("cuMemcpyDtoH")?;
    sync(stream)?;
    let spans = marks.spans()?;
    let cost = StageOneCost {
        lines: spans[0],
        summary: spans[1],
        download: spans[2],
    };
    // SAFETY: the copies have completed; the buffer is page-aligned and holds STAT_SLOTS
    // slots of nb_rows u64s, then the summaries' u32s.
    let (lines, words) = unsafe {
        (
            std::slice::from_raw_parts(host as *const u64, bytes / 8),
            std::slice::from_raw_parts(host.add(bytes) as *const u32, SUMMARY_BYTES / 4),
        )
    };
    let all = stat_lines(lines, nb_rows);
    let a = all.slice(0..call.m).to_table();
    let b = if syrk {
        a.clone()
    } else {
        all.slice(call.m..nb_rows).to_table()
    };
    let (sa, sb) = summary_views(words, syrk);
    let owned = |v: SummaryView| SideSummary::from_words(v.words()).expect("summary words");
    Ok(StageOne {
        a,
        b,
        summaries: (owned(sa), owned(sb)),
        cost,
    })
}

/// [`gemm`] without the final wait: returns once the plan accepted the operands and the
/// products and reconstruction are enqueued, so a host pipeline (`host::staged_gemm`) plans
/// its next unit while the GPU still computes this one. Errors as [`gemm`]; the operands and
/// C must stay valid until the stream has passed the work.
///
/// # Safety
/// - `gpu`'s context is current on this thread and `stream` belongs to it;
/// - `call`'s addresses are device memory of that context covering A, B and C with their
///   leading dimensions, valid (and C touched by nobody else) until the stream has passed
///   the work.
pub unsafe fn enqueue(
    gpu: &mut Gpu,
    stream: sys::CUstream,
    call: &DeviceCall,
    opts: Options,
) -> Result<Pending, GpuError> {
    let (m, n, k) = (call.m, call.n, call.k);
    if m == 0 || n == 0 || k == 0 || call.alpha == 0.0 {
        return Err(GpuError::Unsupported(
            "empty product (handled by the caller)".into(),
        ));
    }
    if k > MAX_K {
        return Err(GpuError::Unsupported(format!(
            "k = {k} > {MAX_K} would overflow the int32 sums"
        )));
    }
    if m > i32::MAX as usize || n > i32::MAX as usize {
        return Err(GpuError::Unsupported("dimension beyond int32".into()));
    }
    let pad = padding::padded(m, n, k, padding::alignment(opts.align, m, n, k));
    let kpad = pad.k;
    let syrk = matches!(call.op, Op::Syrk { .. });
    // Element (i, l) of op(A) is contiguous along l when A is transposed.
    let (a_contig, b_operand) = operands(call);
    let uplo = match call.op {
        Op::Syrk {
            uplo: Uplo::Upper, ..
        } => 1,
        Op::Syrk {
            uplo: Uplo::Lower, ..
        } => 2,
        Op::Gemm { .. } => 0,
    };
    let nb_rows = if syrk { m } else { m + n };
    let scaling = effective_scaling(opts.scaling);
    // per line: u64 max bit pattern, f64 sum |x|, then the rule's statistics (S_i first)
    const STATS: usize = 8 * STAT_SLOTS;

    let mut marks = Marks::start(stream)?;
    // 1. exponent scan and the line statistics (norm scaling's S_i and the accuracy rule's
    //    sums, from the lines' exponents)
    let stats = gpu.workspace.get("scan", STATS * nb_rows)?;
    let (maxbits, coarse_sq) = (stats, stats + 16 * nb_rows as u64);
    // SAFETY: the caller's contract; `stats` is the workspace slot sized for the call.
    unsafe { scan_lines(gpu, stream, call, stats, LinePass::Route, None) }?;
    // 2. The statistics go to the host for the plan; meanwhile the GPU already forms the shifts
    //    and residues for the moduli count the plan is expected to choose (forced, or this
    //    scaling's last automatic choice), so the host's plan no longer leaves the GPU idle
    //    between the scan and the residues (BENCHMARKS.md, "Kernel tuning"). When the plan
    //    chooses another count, both are formed again; C is written only after the plan.
    //    A declined call has paid the statistics and these speculative residues, never a
    //    product; after an automatic call declined, the next one forms no residues before
    //    its plan (`moduli_guess`).
    let summaries = gpu.workspace.get("summaries", SUMMARY_BYTES)?;
    // SAFETY: as above; `summaries` is the workspace slot of SUMMARY_BYTES.
    unsafe {
        summarise(
            gpu,
            stream,
            (stats, nb_rows, m),
            (k, opts.accuracy, scaling),
            summaries,
        )
    }?;
    let table_at = SUMMARY_BYTES;
    let table_bytes = 4 * SHIFT_CLASSES;
    if gpu.small.len() < table_at + table_bytes {
        // an upload from the old buffer may still be pending
        gpu.small_idle()?;
        gpu.small = crate::memory::PinnedBuffer::new(table_at + table_bytes)?;
    }
    let host = gpu.small.as_mut_ptr();
    // SAFETY: host is pinned memory of >= SUMMARY_BYTES bytes; the copy completes at the
    // fence.
    unsafe { sys::cuMemcpyDtoHAsync_v2(host as *mut _, summaries, SUMMARY_BYTES, stream) }
        .result()
        .ctx("cuMemcpyDtoH")?;
    let fence = crate::timing::Fence::record(stream)?;
    let shifts_dev = gpu.workspace.get("shifts", 4 * nb_rows + table_bytes)?;
    let table_dev = shifts_dev + 4 * nb_rows as u64;
    let sigma_dev = shifts_dev;
    let tau_dev = if syrk {
        shifts_dev
    } else {
        shifts_dev + 4 * m as u64
    };
    let plane_a = pad.m * kpad;
    let plane_b = pad.n * kpad;
    // 3. shifts and residues of all moduli for r moduli; returns the plane buffers
    let convert = |gpu: &mut Gpu, r: usize| -> Result<(u64, u64), GpuError> {
        // the previous upload of the table (this call's guess, or an earlier call's) is done
        gpu.small_idle()?;
        // SAFETY: the table area follows the statistics in the pinned buffer; no upload from
        // it is pending (waited above).
        let table = unsafe {
            std::slice::from_raw_parts_mut(host.add(table_at) as *mut i32, SHIFT_CLASSES)
        };
        table.copy_from_slice(&shift_table(scaling, r, k));
        // SAFETY: pinned source, device destination of table_bytes; ordered before its user.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(table_dev, table.as_ptr() as *const _, table_bytes, stream)
        }
        .result()
        .ctx("cuMemcpyHtoD")?;
        gpu.small_busy = Some(crate::timing::Fence::record(stream)?);
        let planes_a = gpu.workspace.get("planes_a", r * plane_a)?;
        let planes_b = if syrk {
            planes_a
        } else {
            gpu.workspace.get("planes_b", r * plane_b)?
        };
        let rtab = &tables()[r].0;
        let kern = gpu.kernels()?;
        // SAFETY: the statistics hold nb_rows lines, the shifts slot nb_rows shifts and the
        // table; plane buffers hold r planes of padded rows x kpad bytes.
        unsafe {
            kern.line_shifts(
                stream,
                (maxbits, coarse_sq),
                nb_rows as i32,
                table_dev,
                shifts_dev,
            )?;
            kern.residues(
                stream,
                call.a,
                call.lda as i64,
                a_contig,
                (m as i32, pad.m as i32),
                k as i32,
                kpad as i32,
                sigma_dev,
                rtab,
                planes_a,
                plane_a as i64,
            )?;
            if let Some((b, ldb, contig)) = b_operand {
                kern.residues(
                    stream,
                    b,
                    ldb as i64,
                    contig,
                    (n as i32, pad.n as i32),
                    k as i32,
                    kpad as i32,
                    tau_dev,
                    rtab,
                    planes_b,
                    plane_b as i64,
                )?;
            }
        }
        Ok((planes_a, planes_b))
    };
    // No guess after an automatic call declined (`moduli_guess`): a run of declined calls
    // then pays the statistics alone.
    let guess = speculative_moduli(opts.moduli, scaling, k).map(|r| r.clamp(2, MAX_MODULI));
    let planes = match guess {
        Some(r) => Some(convert(gpu, r)?),
        None => None,
    };
    fence.wait()?;
    // SAFETY: the copy has completed; the buffer is page-aligned and holds the two summaries.
    let words = unsafe { std::slice::from_raw_parts(host as *const u32, SUMMARY_BYTES / 4) };
    let (a_summary, b_summary) = summary_views(words, syrk);
    // the shifts themselves come from the device (`line_shifts`, the same function of the lines)
    let plan = match plan_summarised(
        a_summary,
        b_summary,
        k,
        (opts.moduli, opts.accuracy),
        scaling,
    ) {
        Ok(p) => p,
        Err(e) => {
            if opts.moduli.is_none() {
                remember_decline(scaling);
            }
            // the speculative residues still read A and B: the caller may free them next
            sync(stream)?;
            return Err(e);
        }
    };
    let r = plan.moduli;
    if opts.moduli.is_none() {
        remember_moduli(scaling, r);
    }
    let (planes_a, planes_b) = match planes {
        Some(formed) if guess == Some(r) => formed,
        _ => convert(gpu, r)?,
    };
    marks.mark(Phase::Convert)?;

    // 4 + 5. products and reconstruction per column block, as large as free memory allows
    let per_col = r * pad.m * 4;
    let mut nb = n;
    if syrk && n >= 2048 {
        nb = nb.div_ceil(4); // triangle blocks skip the other triangle's products
    }
    if !syrk && m >= LARGE && n >= LARGE {
        nb = nb.min(LARGE_BLOCK);
    }
    if opts.max_block > 0 {
        nb = nb.min(opts.max_block);
    }
    nb = pad.block_width(nb, n);
    // a block's products cover its padded columns
    let block_cols = |nb: usize| pad.extent(0, nb.min(n), pad.n);
    let prod = match gpu.workspace.get("products", per_col * block_cols(nb)) {
        Ok(p) => p,
        Err(GpuError::OutOfMemory { .. }) => {
            // measure what is really free now (the slot was released) and tile to fit
            let (free, _) = crate::memory::mem_info()?;
            let budget = free.saturating_sub(crate::memory::DEVICE_RESERVE + (64 << 20));
            nb = nb.min(budget / per_col.max(1));
            if nb > 256 {
                nb = nb / 256 * 256;
            }
            nb = nb / pad.align * pad.align;
            if nb == 0 {
                return Err(GpuError::OutOfMemory {
                    needed: per_col * pad.align + crate::memory::DEVICE_RESERVE,
                    free,
                });
            }
            gpu.workspace.get("products", per_col * block_cols(nb))?
        }
        Err(e) => return Err(e),
    };
    let ctab = &tables()[r].1;
    // One column block: its products, then its reconstruction into C. Blocks after the
    // first run once C is partly written, so their errors must not read as "declined"
    // (NonFinite / Unsupported send the device entry points to cuBLAS on the same C):
    // [`written_c`] reports them as `Cuda`, as this function's contract says.
    let mut block = |j0: usize, cols: usize| -> Result<(), GpuError> {
        // rows of C this block needs: all, or for a triangle only those at or above/below it
        let (row0, rows) = match uplo {
            1 => (0, (j0 + cols).min(m)),
            2 => (j0, m - j0),
            _ => (0, m),
        };
        // the products run at the padded extents (zero rows and columns), the
        // reconstruction reads their real block
        let (rows_pad, cols_pad) = (pad.extent(row0, rows, pad.m), pad.extent(j0, cols, pad.n));
        let plane_d = rows_pad * cols_pad;
        let shape = Shape {
            m: rows_pad as u64,
            n: cols_pad as u64,
            k: kpad as u64,
            batch: r as u32,
            strides: (plane_a as i64, plane_b as i64, plane_d as i64),
        };
        // SAFETY: the plane buffers hold r planes of kpad x m (n) int8 at these strides,
        // prod r planes of rows x cols int32, all on this context, kept until the stream is
        // passed (the caller's contract).
        unsafe {
            lt_int8::batched(
                &mut gpu.lt,
                stream,
                shape,
                planes_a + (row0 * kpad) as u64,
                planes_b + (j0 * kpad) as u64,
                prod,
            )
        }?;
        marks.mark(Phase::Products)?;
        let kern = gpu.kernels()?;
        // SAFETY: prod holds r planes of rows_pad x cols_pad int32; C covers ldc x n doubles.
        unsafe {
            kern.reconstruct(
                stream,
                prod,
                (plane_d as i64, rows_pad as i32),
                rows as i32,
                cols as i32,
                sigma_dev + 4 * row0 as u64,
                tau_dev + 4 * j0 as u64,
                ctab,
                call.alpha,
                call.beta,
                call.c + 8 * (row0 + j0 * call.ldc) as u64,
                call.ldc as i64,
                uplo,
                (row0 as i32, j0 as i32),
            )?;
        }
        marks.mark(Phase::Reconstruct)?;
        Ok(())
    };
    let mut j0 = 0;
    while j0 < n {
        let cols = nb.min(n - j0);
        block(j0, cols).map_err(|e| if j0 > 0 { written_c(e) } else { e })?;
        j0 += cols;
    }
    Ok(Pending {
        outcome: Outcome {
            moduli: r as u32,
            phases: Phases::default(),
            estimate: plan.estimate,
            scaling: Some(plan.scaling),
        },
        marks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block that fails after C was partly written never reads as "declined" (which would
    /// let the device entry points run cuBLAS on that C); other kinds keep their meaning.
    #[test]
    fn errors_after_c_was_written_are_not_declines() {
        for e in [
            GpuError::NonFinite,
            GpuError::Unsupported("no algorithm".into()),
        ] {
            assert!(matches!(written_c(e), GpuError::Cuda(_)));
        }
        let oom = GpuError::OutOfMemory { needed: 1, free: 0 };
        assert!(matches!(written_c(oom), GpuError::OutOfMemory { .. }));
    }
}
