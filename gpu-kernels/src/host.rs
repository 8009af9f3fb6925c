//! Host-resident calls (everything LD_PRELOAD sees): operands are staged through pinned
//! buffers reused across calls, moved to the device, computed by the native or emulated
//! route, and C is copied back into the caller's memory only after the device work
//! succeeded (issue #4). Any error leaves the caller's C untouched, so the shim can still run
//! the vendor BLAS on the original data.
//!
//! Host copies into and out of pinned memory run on several threads and overlap the DMA of
//! the previous chunk (two staging buffers alternate).

use crate::device::{Gpu, gpu, sync};
use crate::early_write::{self, EarlyC};
use crate::error::{Context, GpuError};
use crate::host_copy::{self, CopyKind};
use crate::ozaki::{self, DeviceCall, Op, Options};
use crate::timing::{Marks, Phase};
use cudarc::driver::sys;
use ozaki_core::blas::{GemmArgs, SyrkArgs, Trans, Uplo, span};
use ozaki_core::trace::Phases;

/// Which device computation a host-resident call runs.
#[derive(Debug, Clone, Copy)]
pub enum Engine {
    /// cuBLAS DGEMM / DSYRK (`gpu-native`).
    Native,
    /// Ozaki scheme II on the INT8 tensor cores (`gpu-ozaki`).
    Ozaki(Options),
}

/// What a host-resident call did (trace fields `device`, `moduli`, `phases`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostOutcome {
    /// Device ordinal.
    pub device: u32,
    /// Moduli used, for the emulated route.
    pub moduli: Option<u32>,
    /// Measured phases; `transfer_ns` is host-to-device plus device-to-host time.
    pub phases: Phases,
    /// Where a pipelined gemm's time went (`None` for syrk).
    pub timeline: Option<Timeline>,
}

/// When each stage of a pipelined host-resident gemm was done, in ms after it began staging
/// (CUDA events on its streams; the write-back is host-timed): `ozaki bench --pipeline`
/// prints it to show which stage bounds the call (issue #4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// Per column block: its operands were on the device.
    pub uploaded_ms: Vec<f32>,
    /// Per column block: its part of C was computed on the device.
    pub computed_ms: Vec<f32>,
    /// All of C was in pinned staging.
    pub downloaded_ms: f32,
    /// Host time spent writing C from staging into the caller's memory.
    pub write_ms: f32,
}

const CHUNK: usize = 64 << 20;

/// Knobs of the host-resident path. The defaults are what `ozaki bench --pipeline` and
/// `--split` measured best on the H200 host (BENCHMARKS.md, "Session 3 host path and
/// split"); `--tuning` runs those benchmarks under other values side by side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// How the upload ring's copies from the caller's memory write pinned staging
    /// (`crate::host_copy`). `memcpy`: its lines stay in the host's cache (the H200 host has
    /// 300 MiB of L3, the ring 96 MiB) for the DMA to read; streaming them to memory made the
    /// uploads slower (BENCHMARKS.md, "Session 3 host path and split").
    pub upload: CopyKind,
    /// How C is written from pinned staging into the caller's memory. Streaming: nothing reads
    /// it soon, and skipping the read for ownership made the write-back 1.1-1.45x faster.
    pub write_back: CopyKind,
    /// Copy threads of the upload ring (0: one per core, at most 16).
    pub copy_threads: usize,
    /// Threads writing C from staging into the caller's memory, per call; a split divides
    /// them among its tiles (0: one per core, at most 32: 61 GB/s with 32 threads against
    /// 39 GB/s with 16 on the H200 host, BENCHMARKS.md).
    pub write_threads: usize,
    /// Bytes per slot of the upload ring.
    pub ring_chunk: usize,
    /// Target bytes of op(B) per column block of the pipeline.
    pub block_bytes: usize,
    /// Most column blocks for `gpu-native` and for `gpu-ozaki` (whose every block converts
    /// all of op(A) again).
    pub max_blocks: (usize, usize),
    /// Row panels of op(A) for `gpu-native` and for `gpu-ozaki` (whose every unit of work
    /// scans, plans and converts its operands again), see [`pipeline_panels`].
    pub panels: (usize, usize),
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            upload: CopyKind::Memcpy,
            write_back: CopyKind::Stream,
            copy_threads: 0,
            write_threads: 0,
            ring_chunk: 32 << 20,
            block_bytes: 64 << 20,
            max_blocks: (16, 4),
            panels: (4, 1),
        }
    }
}

impl std::str::FromStr for Tuning {
    type Err = String;
    /// `key=value` pairs, comma separated, over the defaults: `up=memcpy|stream` (upload
    /// copies), `back=memcpy|stream` (write-back), `copy=...` (both), `threads=N`, `write=N`,
    /// `ring=MiB`, `block=MiB`, `native=N`, `ozaki=N` (most blocks), `panels=N`,
    /// `ozaki_panels=N`
    /// (`default` alone: the defaults).
    fn from_str(spec: &str) -> Result<Tuning, String> {
        let mut t = Tuning::default();
        for kv in spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "default")
        {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("tuning {kv:?} is not key=value"))?;
            let num = || {
                v.parse::<usize>()
                    .map_err(|e| format!("tuning {kv:?}: {e}"))
            };
            match k {
                "up" => t.upload = v.parse()?,
                "back" => t.write_back = v.parse()?,
                "copy" => (t.upload, t.write_back) = (v.parse()?, v.parse()?),
                "threads" => t.copy_threads = num()?,
                "write" => t.write_threads = num()?,
                "ring" => t.ring_chunk = num()?.max(1) << 20,
                "block" => t.block_bytes = num()?.max(1) << 20,
                "native" => t.max_blocks.0 = num()?.max(1),
                "ozaki" => t.max_blocks.1 = num()?.max(1),
                "panels" => t.panels.0 = num()?.max(1),
                "ozaki_panels" => t.panels.1 = num()?.max(1),
                _ => return Err(format!("unknown tuning key {k:?}")),
            }
        }
        Ok(t)
    }
}

static TUNING: std::sync::RwLock<Option<Tuning>> = std::sync::RwLock::new(None);

/// Replaces the process's host-path tuning (benchmarks; `None`: the defaults).
pub fn set_tuning(t: Option<Tuning>) {
    *TUNING.write().unwrap_or_else(|p| p.into_inner()) = t;
}

/// The host-path tuning in force.
pub fn tuning() -> Tuning {
    TUNING
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or_default()
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Threads that write a result from pinned staging into the caller's C (the write-back is
/// the call's tail, nothing else runs beside it).
pub(crate) fn write_threads() -> usize {
    match tuning().write_threads {
        0 => cores().clamp(1, 32),
        t => t,
    }
}

/// Copy threads of the upload ring and of [`upload`].
pub(crate) fn copy_threads() -> usize {
    match tuning().copy_threads {
        0 => cores().clamp(1, 16),
        t => t,
    }
}

/// dst[..] = src[..] on several threads (large copies between pageable and pinned memory
/// are limited by one core's bandwidth otherwise).
fn par_copy(dst: &mut [u8], src: &[u8]) {
    let t = if src.len() < (4 << 20) {
        1
    } else {
        copy_threads()
    };
    let len = src.len().min(dst.len());
    // SAFETY: both slices hold len bytes and, being & and &mut, do not overlap.
    unsafe { host_copy::par_copy(dst.as_mut_ptr(), src.as_ptr(), len, t, tuning().upload) }
}

fn as_bytes(x: &[f64]) -> &[u8] {
    // SAFETY: f64 has no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(x.as_ptr() as *const u8, std::mem::size_of_val(x)) }
}

/// Copies `src` to device address `dst` through the two pinned staging buffers.
pub(crate) fn upload(gpu: &mut Gpu, dst: u64, src: &[f64]) -> Result<(), GpuError> {
    let bytes = as_bytes(src);
    let stream = gpu.copy_stream;
    let mut events: [Option<sys::CUevent>; 2] = [None, None];
    let result = (|| {
        for (i, chunk) in bytes.chunks(CHUNK).enumerate() {
            let slot = i % 2;
            if let Some(e) = events[slot] {
                // SAFETY: e was recorded after the copy that last read this staging buffer.
                unsafe { sys::cuEventSynchronize(e) }
                    .result()
                    .ctx("cuEventSynchronize")?;
            }
            let stage = gpu.staging(slot, CHUNK)?;
            // SAFETY: staging holds CHUNK bytes and no copy is reading it (waited above).
            par_copy(
                unsafe { std::slice::from_raw_parts_mut(stage, chunk.len()) },
                chunk,
            );
            // SAFETY: pinned source of chunk.len() bytes, device destination inside dst's span.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    dst + (i * CHUNK) as u64,
                    stage as *const _,
                    chunk.len(),
                    stream,
                )
            }
            .result()
            .ctx("cuMemcpyHtoDAsync")?;
            let e = match events[slot] {
                Some(e) => e,
                None => cudarc::driver::result::event::create(
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                )
                .ctx("cuEventCreate")?,
            };
            events[slot] = Some(e);
            // SAFETY: live event and stream.
            unsafe { sys::cuEventRecord(e, stream) }
                .result()
                .ctx("cuEventRecord")?;
        }
        sync(stream)
    })();
    for e in events.into_iter().flatten() {
        // SAFETY: each event destroyed once.
        let _ = unsafe { sys::cuEventDestroy_v2(e) };
    }
    result
}

/// Copies the device span of C back into staging, waits, and only then writes the call's
/// m x n result (or its `uplo` triangle) into the caller's C: nothing of C is touched unless
/// the whole download succeeded. `c` is exactly the call's span of C.
fn copy_out(
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
fn write_back(c: &mut [f64], staged: &[f64], m: usize, n: usize, ldc: usize, uplo: Option<Uplo>) {
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
    let per = n.div_ceil(threads.max(1)).max(1);
    let (d, s) = (SendPtr(dst), SendPtr(src as *mut f64));
    std::thread::scope(|sc| {
        for j0 in (0..n).step_by(per) {
            sc.spawn(move || {
                let (d, s) = (d, s);
                for j in j0..(j0 + per).min(n) {
                    let (lo, hi) = match uplo {
                        None => (0, m),
                        Some(Uplo::Upper) => (0, (j + 1).min(m)),
                        Some(Uplo::Lower) => (j.min(m), m),
                    };
                    let at = j * ld + lo;
                    // SAFETY: rows lo..hi of column j lie inside both spans; columns are
                    // split among threads, so this range is this thread's alone.
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
    });
}

/// Uploads A (and C when `read_c`) for a syrk; returns their device addresses.
fn stage_operands(
    gpu: &mut Gpu,
    a: &[f64],
    c: &[f64],
    c_span: usize,
    read_c: bool,
) -> Result<(u64, u64), GpuError> {
    let da = gpu.workspace.get("host_a", a.len() * 8)?;
    let dc = gpu.workspace.get("host_c", c_span * 8)?;
    upload(gpu, da, a)?;
    if read_c {
        upload(gpu, dc, &c[..c_span])?;
    }
    Ok((da, dc))
}

/// C = alpha op(A) op(B) + beta C on the GPU for host-resident operands.
pub fn gemm(args: &GemmArgs, c: &mut [f64], engine: Engine) -> Result<HostOutcome, GpuError> {
    let _flags = crate::fpenv::KeepFpFlags::new();
    gemm_on(&mut *gpu()?, args, c, engine)
}

/// [`gemm`] on a given GPU, cut as the pipeline chooses ([`Grid::of`]).
pub fn gemm_on(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: &mut [f64],
    engine: Engine,
) -> Result<HostOutcome, GpuError> {
    gemm_grid(gpu, args, c, engine, Grid::of(args, engine))
}

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

/// [`gemm_on`] cut into a given [`Grid`]; for tests and benchmarks of the pipeline itself.
/// The result does not depend on the grid for `gpu-native` up to cuBLAS's choice of kernel
/// per unit shape, and not at all for `gpu-ozaki` with a fixed moduli count (each entry
/// depends only on its row of op(A) and column of op(B)); with the automatic count each
/// unit chooses its own (see [`staged_gemm`]).
pub fn gemm_grid(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: &mut [f64],
    engine: Engine,
    grid: Grid,
) -> Result<HostOutcome, GpuError> {
    let c_span = span(args.m, args.n, args.ldc);
    assert!(c.len() >= c_span, "C shorter than its span");
    // beta == 0: blocks go into C as they arrive (early_write); C is not read, so no view
    // of it is lent to the pipeline meanwhile
    let early = (args.beta == 0.0).then(|| EarlyC {
        c: SendPtr(c.as_mut_ptr()),
        threads: write_threads(),
        gate: None,
    });
    let c_in: &[f64] = if early.is_some() { &[] } else { &c[..c_span] };
    let (mut out, staged) = staged_gemm(gpu, args, c_in, engine, grid, None, early)?;
    if staged.written {
        return Ok(out);
    }
    let t = std::time::Instant::now();
    // SAFETY: staged points at c_span doubles of pinned staging owned by `gpu`, which this
    // function still borrows mutably, filled by the successful call above.
    let staged = unsafe { std::slice::from_raw_parts(staged.ptr, c_span) };
    write_back(&mut c[..c_span], staged, args.m, args.n, args.ldc, None);
    out.phases.transfer_ns += t.elapsed().as_nanos() as u64;
    if let Some(tl) = out.timeline.as_mut() {
        tl.write_ms = t.elapsed().as_secs_f32() * 1e3;
    }
    Ok(out)
}

/// Smallest host-resident gemm (bytes of A, B and C) that [`pipeline_blocks`] pipelines:
/// below it a call is over in a few milliseconds and the extra stream, events and copy
/// threads cost more than the overlap gains.
pub const PIPELINE_MIN_BYTES: usize = 96 << 20;

/// Column blocks a host-resident gemm is pipelined over: 1 below [`PIPELINE_MIN_BYTES`],
/// else enough for blocks of op(B) of about [`Tuning::block_bytes`] (small enough that the
/// first product starts soon after A is on the device and the last block's download is a
/// short tail, large enough that each block's product keeps the GPU busy), at least 2, at
/// most [`Tuning::max_blocks`], and never narrower than 256 columns.
pub fn pipeline_blocks(args: &GemmArgs, engine: Engine) -> usize {
    let (m, n, k) = (args.m, args.n, args.k);
    let bytes = 8 * (m * k + k * n + m * n);
    if bytes < PIPELINE_MIN_BYTES || n < 512 {
        return 1;
    }
    let t = tuning();
    let cap = match engine {
        Engine::Native => t.max_blocks.0,
        Engine::Ozaki(_) => t.max_blocks.1,
    };
    (8 * k * n)
        .div_ceil(t.block_bytes)
        .clamp(2, cap)
        .min(n / 256)
}

/// Fewest rows of a row panel of op(A) that [`pipeline_panels`] cuts.
pub const PANEL_MIN_ROWS: usize = 256;

/// Row panels of op(A) a pipelined gemm uploads one after the other, so that the first
/// products start once the first panel and the first block of op(B) are on the device
/// instead of all of A (issue #4: at 8192 the GPU waited about 15 ms for A): 1 for calls
/// that are not pipelined, else [`Tuning::panels`] for the route, each panel at least
/// [`PANEL_MIN_ROWS`] rows.
pub fn pipeline_panels(args: &GemmArgs, engine: Engine) -> usize {
    if pipeline_blocks(args, engine) == 1 {
        return 1;
    }
    let t = tuning();
    let want = match engine {
        Engine::Native => t.panels.0,
        Engine::Ozaki(_) => t.panels.1,
    };
    fit_panels(args.m, want.min(args.m / PANEL_MIN_ROWS), 1)
}

/// Panels of a split's shared A over `slots` devices (`crate::multi`): the route's
/// [`pipeline_panels`] per slot (slot i uploads panels i, i + slots, ...), at most one per
/// row. Each slot thus uploads as many panels as one GPU alone would: with 2 GPUs at
/// 32768, 8 panels for `gpu-native` took the split from 0.886 to 0.847 s (BENCHMARKS.md,
/// "Session 3 host path and split").
pub(crate) fn shared_panels(args: &GemmArgs, engine: Engine, slots: usize) -> usize {
    let slots = slots.max(1);
    let want = pipeline_panels(args, engine) * slots;
    fit_panels(args.m, want.min(args.m), slots)
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
fn row_panels(m: usize, count: usize) -> Vec<(usize, usize)> {
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
struct PanelPlace {
    r0: usize,
    rows: usize,
    off: u64,
    ld: usize,
}

fn panel_places(args: &GemmArgs, panels: &[(usize, usize)]) -> Vec<PanelPlace> {
    panels
        .iter()
        .map(|&(r0, rows)| {
            if panels.len() == 1 {
                PanelPlace {
                    r0,
                    rows,
                    off: 0,
                    ld: args.lda,
                }
            } else if args.transa == Trans::Yes {
                PanelPlace {
                    r0,
                    rows,
                    off: 8 * (r0 * args.lda) as u64,
                    ld: args.lda,
                }
            } else {
                PanelPlace {
                    r0,
                    rows,
                    off: 8 * (r0 * args.k) as u64,
                    ld: rows,
                }
            }
        })
        .collect()
}

/// The upload of one panel of `a` (the call's span of A) to device buffer `da`.
fn panel_piece(args: &GemmArgs, a: &[f64], da: u64, place: &PanelPlace, single: bool) -> Piece {
    let (r0, rows, k, lda) = (place.r0, place.rows, args.k, args.lda);
    if single {
        Piece::new(da, a)
    } else if args.transa == Trans::Yes {
        Piece::new(da + place.off, &a[r0 * lda..r0 * lda + span(k, rows, lda)])
    } else {
        Piece::strided(
            da + place.off,
            &a[r0..r0 + span(rows, k, lda)],
            8 * rows,
            8 * lda,
            k,
        )
    }
}

/// Pinned result of [`staged_gemm`]: the call's span of C, laid out with its `ldc`, in the
/// GPU's staging buffer [`C_SLOT`]; valid until the next call on that GPU. `written`: every
/// block is already in the caller's C too (early writes, [`early_write`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StagedC {
    pub(crate) ptr: *const f64,
    pub(crate) written: bool,
}

/// Staging buffer that receives C.
const C_SLOT: usize = 2;
/// Staging buffers of the upload ring (slot 2 holds C).
const RING: [usize; 3] = [0, 1, 3];
/// Bytes per download chunk of C: the download thread keeps at most two queued (see
/// [`drain`]).
const D2H_CHUNK: usize = 16 << 20;

/// A raw pointer handed to the upload thread; the ranges it covers outlive the thread
/// (scoped) and are not written by anyone else meanwhile.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
// SAFETY: see the type's doc.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

/// A CUDA handle (context, stream or event) handed to or from the upload thread: handles are
/// plain values the driver accepts from any thread.
#[derive(Clone, Copy)]
pub(crate) struct Handle<T>(pub(crate) T);
// SAFETY: see the type's doc.
unsafe impl<T> Send for Handle<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Handle<T> {}

/// One host span to copy to a contiguous device range, and from there on to the same offset
/// of other devices' buffers (a split's shared A, `crate::multi`). The span is contiguous,
/// or `count` runs of `width` bytes `pitch` bytes apart (rows of a column-major matrix).
#[derive(Clone)]
pub(crate) struct Piece {
    dst: u64,
    src: SendPtr<u8>,
    bytes: usize,
    /// (run width, source pitch) of a strided span, both in bytes.
    runs: Option<(usize, usize)>,
    /// (device address, context) of each peer copy, and the uploading device's context.
    peers: Vec<(u64, Handle<sys::CUcontext>)>,
    ctx: Handle<sys::CUcontext>,
    /// Row panel of a shared A this piece completes: its arrival on every device is
    /// published on the split's [`PanelBoard`].
    publish: Option<usize>,
}

impl Piece {
    pub(crate) fn new(dst: u64, src: &[f64]) -> Piece {
        Piece {
            dst,
            src: SendPtr(src.as_ptr() as *mut u8),
            bytes: std::mem::size_of_val(src),
            runs: None,
            peers: Vec::new(),
            ctx: Handle(std::ptr::null_mut()),
            publish: None,
        }
    }

    /// `count` runs of `width` bytes, `pitch` bytes apart from the start of `src` (which
    /// covers them all), packed one after the other at `dst`.
    fn strided(dst: u64, src: &[f64], width: usize, pitch: usize, count: usize) -> Piece {
        debug_assert!(count == 0 || (count - 1) * pitch + width <= std::mem::size_of_val(src));
        Piece {
            bytes: width * count,
            runs: (width != pitch).then_some((width, pitch)),
            ..Piece::new(dst, src)
        }
    }

    /// Source address of destination byte `off` (a run boundary for strided spans).
    fn src_at(&self, off: usize) -> SendPtr<u8> {
        let at = match self.runs {
            None => off,
            Some((w, pitch)) => off / w * pitch + off % w,
        };
        // SAFETY: off < bytes, so the address lies inside the piece's source span.
        SendPtr(unsafe { self.src.0.add(at) })
    }

    /// Bytes per ring chunk: the ring slot, in whole runs for a strided span.
    fn step(&self, chunk: usize) -> usize {
        match self.runs {
            None => chunk,
            Some((w, _)) => (chunk / w).max(1) * w,
        }
    }

    /// After upload, copy the piece device to device to `off` bytes into each of `peers`
    /// (buffer address, its context) and publish `panel`; `ctx` is the uploading device's
    /// context.
    fn shared(
        mut self,
        ctx: sys::CUcontext,
        peers: &[(u64, Handle<sys::CUcontext>)],
        off: u64,
        panel: usize,
    ) -> Piece {
        self.ctx = Handle(ctx);
        self.peers = peers.iter().map(|&(d, c)| (d + off, c)).collect();
        self.publish = Some(panel);
        self
    }
}

/// The arrival of each row panel of a split's shared A on every device (`crate::multi`):
/// the slot that uploads a panel copies it on to the others over NVLink and publishes an
/// event recorded after those copies; the other slots' compute streams wait for it, so
/// products start while later panels are still on their way (no barrier before compute).
pub(crate) struct PanelBoard {
    events: std::sync::Mutex<Vec<Option<Handle<sys::CUevent>>>>,
    ready: std::sync::Condvar,
    failed: std::sync::atomic::AtomicBool,
}

impl PanelBoard {
    pub(crate) fn new(panels: usize) -> PanelBoard {
        PanelBoard {
            events: std::sync::Mutex::new(vec![None; panels]),
            ready: std::sync::Condvar::new(),
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn publish(&self, panel: usize, e: sys::CUevent) {
        self.events.lock().unwrap_or_else(|p| p.into_inner())[panel] = Some(Handle(e));
        self.ready.notify_all();
    }

    /// Some slot failed: every wait returns an error from now on.
    pub(crate) fn fail(&self) {
        self.failed.store(true, std::sync::atomic::Ordering::SeqCst);
        let _g = self.events.lock().unwrap_or_else(|p| p.into_inner());
        self.ready.notify_all();
    }

    /// The event of `panel`, once its slot has published it.
    fn wait(&self, panel: usize) -> Result<sys::CUevent, GpuError> {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(e) = ev[panel] {
                return Ok(e.0);
            }
            if self.failed.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(GpuError::Cuda(
                    "another slot of the split failed before sharing its panel of A".into(),
                ));
            }
            ev = self
                .ready
                .wait_timeout(ev, std::time::Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Destroys the published events of the panels `owned` says are this slot's; call on
    /// that slot's thread (its context current) once no slot waits any more.
    pub(crate) fn release(&self, owned: impl Fn(usize) -> bool) {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let mine = ev.iter_mut().enumerate().filter(|(p, _)| owned(*p));
        for e in mine.filter_map(|(_, e)| e.take()) {
            // SAFETY: created by this slot's upload thread, destroyed once; every stream
            // that waited on it has been synchronised.
            let _ = unsafe { sys::cuEventDestroy_v2(e.0) };
        }
    }
}

/// One slot's part in a split's shared A: it uploads the row panels `owner` gives it into
/// its buffer `a_dev` and on to `peers` (the other slots' buffers of A), and waits on
/// `board` for the others' panels.
pub(crate) struct Share<'a> {
    pub(crate) slot: usize,
    pub(crate) owner: &'a [usize],
    pub(crate) a_dev: u64,
    pub(crate) peers: Vec<(u64, Handle<sys::CUcontext>)>,
    pub(crate) board: &'a PanelBoard,
}

/// Events and the download stream of one pipelined call, destroyed on drop (after the
/// streams were synchronised or the call failed: destroying a pending event is allowed).
struct CallResources {
    d2h: sys::CUstream,
    events: Vec<sys::CUevent>,
}

impl CallResources {
    fn new() -> Result<CallResources, GpuError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: out-parameter; the GPU's context is current.
        unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) }
            .result()
            .ctx("cuStreamCreate")?;
        Ok(CallResources {
            d2h: s,
            events: Vec::new(),
        })
    }

    /// A timing event (for [`Timeline`]), destroyed with the call.
    fn event(&mut self) -> Result<sys::CUevent, GpuError> {
        let e = cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .ctx("cuEventCreate")?;
        self.events.push(e);
        Ok(e)
    }
}

impl Drop for CallResources {
    fn drop(&mut self) {
        // SAFETY: the stream is drained first; each handle is destroyed once.
        unsafe {
            let _ = sys::cuStreamSynchronize(self.d2h);
            let _ = sys::cuStreamDestroy_v2(self.d2h);
            for &e in &self.events {
                let _ = sys::cuEventDestroy_v2(e);
            }
        }
    }
}

fn record(e: sys::CUevent, stream: sys::CUstream) -> Result<(), GpuError> {
    // SAFETY: live event and stream of the current context.
    unsafe { sys::cuEventRecord(e, stream) }
        .result()
        .ctx("cuEventRecord")
}

fn wait(stream: sys::CUstream, e: sys::CUevent) -> Result<(), GpuError> {
    // SAFETY: live stream and an event already recorded (callers record before waiting).
    unsafe { sys::cuStreamWaitEvent(stream, e, 0) }
        .result()
        .ctx("cuStreamWaitEvent")
}

/// The pinned ring of `gpu`'s upload thread: three slots of [`Tuning::ring_chunk`] bytes
/// (small enough that a small copy of the emulated route's plan, same copy engine, waits at
/// most about 2 ms behind the queued chunks, large enough that the copy threads' hand-over
/// costs little).
#[derive(Clone, Copy)]
struct Ring {
    slots: [SendPtr<u8>; 3],
    chunk: usize,
}

fn ring(gpu: &mut Gpu) -> Result<Ring, GpuError> {
    let chunk = tuning().ring_chunk;
    Ok(Ring {
        slots: [
            SendPtr(gpu.staging(RING[0], chunk)?),
            SendPtr(gpu.staging(RING[1], chunk)?),
            SendPtr(gpu.staging(RING[2], chunk)?),
        ],
        chunk,
    })
}

/// The upload thread: copies each group of pieces through the pinned ring (`copy_threads()`
/// workers fill a ring slot while the copy engine drains the previous ones) onto
/// `stream`, and after each group records an event and sends it, so the compute loop can
/// start block j as soon as its operands are on the device; a piece that completes a panel
/// of a split's shared A is published on `board` after its peer copies. Stops early when
/// `cancel` is set. Runs with `ctx` current.
fn feed(
    (ctx, stream): (Handle<sys::CUcontext>, Handle<sys::CUstream>),
    ring: Ring,
    groups: Vec<Vec<Piece>>,
    board: Option<&PanelBoard>,
    cancel: &std::sync::atomic::AtomicBool,
    tx: std::sync::mpsc::Sender<Result<Handle<sys::CUevent>, GpuError>>,
) {
    let (ctx, stream) = (ctx.0, stream.0);
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::{Barrier, Mutex};
    let workers = copy_threads();
    let kind = tuning().upload;
    // (destination, source, bytes, runs of a strided source) of the chunk being copied;
    // None ends the workers.
    type Job = Option<(SendPtr<u8>, SendPtr<u8>, usize, Option<(usize, usize)>)>;
    let job: Mutex<Job> = Mutex::new(None);
    let (start, done) = (Barrier::new(workers + 1), Barrier::new(workers + 1));
    std::thread::scope(|s| {
        for w in 0..workers {
            let (job, start, done) = (&job, &start, &done);
            s.spawn(move || {
                loop {
                    start.wait();
                    let Some((d, src, bytes, runs)) =
                        *job.lock().unwrap_or_else(|p| p.into_inner())
                    else {
                        break;
                    };
                    if let Some((width, pitch)) = runs {
                        // whole runs per worker: run r goes from src + r pitch to d + r width
                        let n = bytes / width;
                        let per = n.div_ceil(workers);
                        for r in (w * per).min(n)..((w + 1) * per).min(n) {
                            // SAFETY: run r lies inside the live strided source and the ring
                            // slot no DMA is reading; streaming copies are fenced.
                            unsafe {
                                host_copy::copy(
                                    d.0.add(r * width),
                                    src.0.add(r * pitch),
                                    width,
                                    kind,
                                )
                            };
                        }
                        done.wait();
                        continue;
                    }
                    let per = bytes.div_ceil(workers);
                    let (lo, hi) = ((w * per).min(bytes), ((w + 1) * per).min(bytes));
                    // SAFETY: [lo, hi) of a live source and a ring slot no DMA is reading; a
                    // streaming copy is fenced before `done` hands the slot to the DMA.
                    unsafe { host_copy::copy(d.0.add(lo), src.0.add(lo), hi - lo, kind) };
                    done.wait();
                }
            });
        }
        let result = (|| -> Result<(), GpuError> {
            // SAFETY: the caller's context, retained for the process.
            unsafe { sys::cuCtxSetCurrent(ctx) }
                .result()
                .ctx("cuCtxSetCurrent")?;
            let mut slot_events: [Option<sys::CUevent>; 3] = [None; 3];
            let mut own: Vec<sys::CUevent> = Vec::new();
            let r = (|| -> Result<(), GpuError> {
                let mut i = 0usize;
                for group in &groups {
                    for p in group {
                        let mut off = 0;
                        while off < p.bytes {
                            if cancel.load(Relaxed) {
                                return Err(GpuError::Cuda("upload cancelled".into()));
                            }
                            let slot = i % 3;
                            i += 1;
                            if let Some(e) = slot_events[slot] {
                                // SAFETY: recorded after the DMA that last read this slot.
                                unsafe { sys::cuEventSynchronize(e) }
                                    .result()
                                    .ctx("cuEventSynchronize")?;
                            }
                            let len = p.step(ring.chunk).min(p.bytes - off);
                            *job.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some((ring.slots[slot], p.src_at(off), len, p.runs));
                            start.wait();
                            done.wait();
                            // SAFETY: pinned ring slot of >= len bytes; destination inside
                            // the device buffer the piece was made for.
                            unsafe {
                                sys::cuMemcpyHtoDAsync_v2(
                                    p.dst + off as u64,
                                    ring.slots[slot].0 as *const _,
                                    len,
                                    stream,
                                )
                            }
                            .result()
                            .ctx("cuMemcpyHtoDAsync")?;
                            for &(dst, peer) in &p.peers {
                                // SAFETY: both device ranges hold len bytes at this offset;
                                // stream-ordered after the upload above.
                                unsafe {
                                    sys::cuMemcpyPeerAsync(
                                        dst + off as u64,
                                        peer.0,
                                        p.dst + off as u64,
                                        p.ctx.0,
                                        len,
                                        stream,
                                    )
                                }
                                .result()
                                .ctx("cuMemcpyPeerAsync")?;
                            }
                            let e = match slot_events[slot] {
                                Some(e) => e,
                                None => {
                                    let e = cudarc::driver::result::event::create(
                                        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                                    )
                                    .ctx("cuEventCreate")?;
                                    own.push(e);
                                    e
                                }
                            };
                            slot_events[slot] = Some(e);
                            record(e, stream)?;
                            off += len;
                        }
                        if let (Some(panel), Some(board)) = (p.publish, board) {
                            // the board owns the event; the slot releases it at the end
                            let e = cudarc::driver::result::event::create(
                                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                            )
                            .ctx("cuEventCreate")?;
                            if let Err(err) = record(e, stream) {
                                // SAFETY: nobody else has the event.
                                let _ = unsafe { sys::cuEventDestroy_v2(e) };
                                return Err(err);
                            }
                            board.publish(panel, e);
                        }
                    }
                    // a timing event: the receiver's [`Timeline`] reads it
                    let e =
                        cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                            .ctx("cuEventCreate")?;
                    record(e, stream)?;
                    // the receiver owns (and destroys) the group event
                    if tx.send(Ok(Handle(e))).is_err() {
                        // SAFETY: nobody else has the event.
                        let _ = unsafe { sys::cuEventDestroy_v2(e) };
                        return Ok(());
                    }
                }
                Ok(())
            })();
            // SAFETY: ring events destroyed once, after the stream drained them.
            unsafe {
                let _ = sys::cuStreamSynchronize(stream);
                for e in own {
                    let _ = sys::cuEventDestroy_v2(e);
                }
            }
            r
        })();
        *job.lock().unwrap_or_else(|p| p.into_inner()) = None;
        start.wait(); // release the workers
        if let Err(e) = result {
            let _ = tx.send(Err(e));
        }
    });
}

/// One block's download: once `done` (recorded on the compute stream) has fired, `bytes`
/// from device address `src` to pinned `dst`.
struct Download {
    done: Handle<sys::CUevent>,
    src: u64,
    dst: SendPtr<u8>,
    bytes: usize,
    /// The block's place in C (element offset, rows, columns, leading dimension), for the
    /// early writer.
    place: (usize, usize, usize, usize),
}

/// The download thread: copies each block of C to pinned staging on `stream` in
/// [`D2H_CHUNK`] pieces with at most two queued, so a small copy of the emulated route's next
/// plan (same copy engine) waits behind at most two pieces instead of a whole block.
/// With `early`, each block's completion is handed on to the early writer
/// ([`early_write::writer`]) as an event recorded after its last piece.
fn drain(
    (ctx, stream): (Handle<sys::CUcontext>, Handle<sys::CUstream>),
    jobs: std::sync::mpsc::Receiver<Download>,
    early: Option<early_write::BlockSender>,
) -> Result<(), GpuError> {
    let stream = stream.0;
    // SAFETY: the caller's context, retained for the process.
    unsafe { sys::cuCtxSetCurrent(ctx.0) }
        .result()
        .ctx("cuCtxSetCurrent")?;
    let mut evs: Vec<sys::CUevent> = Vec::with_capacity(2);
    let r = (|| -> Result<(), GpuError> {
        for _ in 0..2 {
            evs.push(
                cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                    .ctx("cuEventCreate")?,
            );
        }
        let mut issued = 0usize;
        for job in jobs {
            wait(stream, job.done.0)?;
            let mut off = 0;
            while off < job.bytes {
                let slot = issued % 2;
                if issued >= 2 {
                    // SAFETY: recorded after the piece issued two before this one.
                    unsafe { sys::cuEventSynchronize(evs[slot]) }
                        .result()
                        .ctx("cuEventSynchronize")?;
                }
                let len = D2H_CHUNK.min(job.bytes - off);
                // SAFETY: [off, off + len) lies inside the block on the device and in the
                // pinned staging; stream-ordered after the block's compute.
                unsafe {
                    sys::cuMemcpyDtoHAsync_v2(
                        job.dst.0.add(off) as *mut _,
                        job.src + off as u64,
                        len,
                        stream,
                    )
                }
                .result()
                .ctx("cuMemcpyDtoHAsync")?;
                record(evs[slot], stream)?;
                issued += 1;
                off += len;
            }
            if let Some(tx) = &early {
                let ready = cudarc::driver::result::event::create(
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                )
                .ctx("cuEventCreate")?;
                let (off, rows, cols, ld) = job.place;
                let block = early_write::Block {
                    ready: Handle(ready),
                    off,
                    rows,
                    cols,
                    ld,
                };
                // an event never recorded would read as fired: only a recorded one is sent
                if let Err(e) = record(ready, stream) {
                    // SAFETY: created above, used by nobody.
                    let _ = unsafe { sys::cuEventDestroy_v2(ready) };
                    return Err(e);
                }
                // the writer owns (and destroys) the event from here on
                if let Err(std::sync::mpsc::SendError(b)) = tx.send(block) {
                    // SAFETY: the writer is gone; nobody else holds the event.
                    let _ = unsafe { sys::cuEventDestroy_v2(b.ready.0) };
                    return Err(GpuError::Cuda("early writer ended early".into()));
                }
            }
        }
        Ok(())
    })();
    // SAFETY: the stream is drained before its events are destroyed.
    unsafe {
        let _ = sys::cuStreamSynchronize(stream);
        for e in evs {
            let _ = sys::cuEventDestroy_v2(e);
        }
    }
    r
}

/// Runs C = alpha op(A) op(B) + beta C on `gpu` with the result left in pinned staging (the
/// caller writes it into its C only once it knows the whole call, or every tile of a split,
/// succeeded: issue #4's contract). `c_in` is the call's span of the caller's C (read only
/// when beta != 0). With `early` and beta == 0, the blocks are also written into the
/// caller's C as they arrive once the call is accepted ([`early_write`]); the returned
/// [`StagedC::written`] says whether all were.
///
/// The pipeline (issue #4, "transfers tiled and overlapped with conversion and compute"):
/// C is cut into `grid.blocks` column blocks and op(A) into `grid.panels` row panels. An
/// upload thread stages, through a ring of pinned buffers onto the copy stream, the first
/// panel of A with the first block's columns of op(B) (all of B at once when B is
/// transposed: its rows are not contiguous) and of C, then the other panels, then per block
/// the columns of op(B) and C, with an event after each group. The compute stream computes
/// each panel x block unit as soon as its group's event has fired (cuBLAS, or the emulated
/// route on the sub-problem: each unit chooses its own moduli count when it is automatic,
/// and the outcome reports the largest), and a download stream copies C_j into pinned
/// staging while block j + 1 is computed. So host copies, both link directions and the GPU
/// all run at once; what is left serial is the first panel's upload and the last block's
/// download. In a split (`share`), this slot uploads only its own panels of A and copies
/// them on to the other devices, and waits for the others' panels on the split's board.
pub(crate) fn staged_gemm(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c_in: &[f64],
    engine: Engine,
    grid: Grid,
    share: Option<&Share>,
    early: Option<EarlyC<'_>>,
) -> Result<(HostOutcome, StagedC), GpuError> {
    let t0 = std::time::Instant::now();
    let (m, n, k) = (args.m, args.n, args.k);
    let (ra, ca) = if args.transa == Trans::No {
        (m, k)
    } else {
        (k, m)
    };
    let (rb, cb) = if args.transb == Trans::No {
        (k, n)
    } else {
        (n, k)
    };
    let a = &args.a[..span(ra, ca, args.lda)];
    let b = &args.b[..span(rb, cb, args.ldb)];
    let c_span = span(m, n, args.ldc);
    let read_c = args.beta != 0.0;
    // early writes only when C is not an input (early_write's module doc)
    let early = early.filter(|_| !read_c);
    let da = match share {
        Some(sh) => sh.a_dev,
        None => gpu.workspace.get("host_a", a.len() * 8)?,
    };
    let db = gpu.workspace.get("host_b", b.len() * 8)?;
    let dc = gpu.workspace.get("host_c", c_span * 8)?;
    let ring = ring(gpu)?;
    let c_stage = gpu.staging(C_SLOT, c_span * 8)? as *mut f64;

    // column blocks of C, multiples of 64 columns; row panels of op(A)
    let blocks = grid.blocks.clamp(1, n.max(1));
    let width = n.div_ceil(blocks).div_ceil(64) * 64;
    let cols: Vec<(usize, usize)> = (0..n)
        .step_by(width.max(1))
        .map(|c0| (c0, width.min(n - c0)))
        .collect();
    // a strided panel's rows (transa = N) must fit one ring slot: more panels if not (a
    // split's count already does, `shared_panels`, so every slot keeps the same panels)
    let count = match (args.transa, grid.panels) {
        (Trans::No, p) if p > 1 => p.max((8 * m).div_ceil(ring.chunk) + 1),
        (_, p) => p,
    };
    let places = panel_places(args, &row_panels(m, count));
    let own = |p: usize| share.is_none_or(|sh| sh.owner[p] == sh.slot);
    let piece_of = |p: usize| {
        let piece = panel_piece(args, a, da, &places[p], places.len() == 1);
        match share {
            Some(sh) => piece.shared(gpu.ctx, &sh.peers, places[p].off, p),
            None => piece,
        }
    };
    let b_and_c = |j: usize, (c0, w): (usize, usize)| {
        let mut g = Vec::new();
        if args.transb == Trans::No {
            let s = c0 * args.ldb;
            g.push(Piece::new(
                db + 8 * s as u64,
                &b[s..s + span(k, w, args.ldb)],
            ));
        } else if j == 0 {
            g.push(Piece::new(db, b));
        }
        if read_c {
            let s = c0 * args.ldc;
            g.push(Piece::new(
                dc + 8 * s as u64,
                &c_in[s..s + span(m, w, args.ldc)],
            ));
        }
        g
    };
    // Upload order: panels and blocks alternate (this slot's q-th own panel, then block q,
    // ...), so the work that can start (a unit needs its panel and its block) grows with
    // both from the first panel and block on. Panel p is its owner's q(p)-th; the other
    // slots upload in the same order, so their q-th panels arrive about with this slot's.
    let nq = |p: usize| {
        share.map_or(p, |sh| {
            (0..p).filter(|&u| sh.owner[u] == sh.owner[p]).count()
        })
    };
    let q_of: Vec<usize> = (0..places.len()).map(nq).collect();
    let panels_per_slot = q_of.iter().map(|&q| q + 1).max().unwrap_or(0);
    let (mut rank_panel, mut rank_block) =
        (vec![0usize; panels_per_slot], vec![0usize; cols.len()]);
    let mut groups: Vec<Vec<Piece>> = Vec::new();
    let mut panel_group = vec![0usize; places.len()];
    let mut block_group = vec![0usize; cols.len()];
    let mut rank = 0;
    for q in 0..panels_per_slot.max(cols.len()) {
        if q < panels_per_slot {
            rank_panel[q] = rank;
            rank += 1;
            if let Some(p) = (0..places.len()).find(|&p| q_of[p] == q && own(p)) {
                panel_group[p] = groups.len();
                groups.push(vec![piece_of(p)]);
            }
        }
        if let Some(&cw) = cols.get(q) {
            rank_block[q] = rank;
            rank += 1;
            block_group[q] = groups.len();
            groups.push(b_and_c(q, cw));
        }
    }
    // units (panel, block) in the order their operands arrive
    let mut units: Vec<(usize, usize)> = (0..cols.len())
        .flat_map(|j| (0..places.len()).map(move |p| (p, j)))
        .collect();
    units.sort_by_key(|&(p, j)| (rank_panel[q_of[p]].max(rank_block[j]), j, p));
    let mut left_in_block = vec![places.len(); cols.len()];

    let mut res = CallResources::new()?;
    let (ctx, copy_stream, stream) = (gpu.ctx, gpu.copy_stream, gpu.stream);
    let begin = res.event()?;
    record(begin, copy_stream)?;
    let (mut ups, mut dones) = (Vec::new(), Vec::new());
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut out = HostOutcome {
        device: gpu.ordinal,
        ..Default::default()
    };
    let board = share.map(|sh| sh.board);
    let mut written = false;
    let result = std::thread::scope(|s| {
        let cancel_ref = &cancel;
        let handles = (Handle(ctx), Handle(copy_stream));
        s.spawn(move || feed(handles, ring, groups, board, cancel_ref, tx));
        let (down_tx, down_rx) = std::sync::mpsc::channel();
        let d2h = (Handle(ctx), Handle(res.d2h));
        let (go_tx, go_rx) = std::sync::mpsc::channel();
        let (blocks_tx, writer) = match early {
            Some(e) => {
                let (tx, rx) = std::sync::mpsc::channel();
                let (staged, context) = (SendPtr(c_stage), Handle(ctx));
                let w = s.spawn(move || early_write::writer(context, e, staged, go_rx, rx));
                (Some(tx), Some(w))
            }
            None => (None, None),
        };
        let down = s.spawn(move || drain(d2h, down_rx, blocks_tx));
        let r = (|| -> Result<(), GpuError> {
            // dropped on every way out, so the writer never waits for a go that cannot come
            let go = go_tx;
            // gpu-native has no data-dependent failure: its blocks may be written at once
            if let (Some(e), Engine::Native) = (&early, engine) {
                let _ = go.send(e.go(false));
            }
            let mut marks = Vec::new();
            let mut pending = Vec::new();
            // the compute stream has waited for groups ..= waited, and for these panels of
            // other slots
            let mut waited: Option<usize> = None;
            let mut peer_waited = vec![false; places.len()];
            for &(p, j) in &units {
                let ((c0, w), place) = (cols[j], &places[p]);
                let g = block_group[j].max(if own(p) { panel_group[p] } else { 0 });
                if waited.is_none_or(|w| w < g) {
                    while ups.len() <= g {
                        let up = rx
                            .recv()
                            .map_err(|_| GpuError::Cuda("upload thread ended early".into()))??
                            .0;
                        res.events.push(up);
                        ups.push(up);
                    }
                    // groups are recorded in order on one copy stream
                    wait(stream, ups[g])?;
                    waited = Some(g);
                }
                if let (false, false, Some(sh)) = (own(p), peer_waited[p], share) {
                    wait(stream, sh.board.wait(p)?)?;
                    peer_waited[p] = true;
                }
                let a_p = da + place.off;
                let b_off = 8 * if args.transb == Trans::No {
                    c0 * args.ldb
                } else {
                    c0
                } as u64;
                let c_off = 8 * (c0 * args.ldc + place.r0) as u64;
                match engine {
                    Engine::Native => {
                        let mut mk = Marks::start(stream)?;
                        crate::native::dgemm(
                            gpu,
                            stream,
                            args.transa,
                            args.transb,
                            (place.rows, w, k),
                            args.alpha,
                            (a_p, place.ld),
                            (db + b_off, args.ldb),
                            args.beta,
                            (dc + c_off, args.ldc),
                        )?;
                        mk.mark(Phase::Products)?;
                        marks.push(mk);
                    }
                    Engine::Ozaki(opts) => {
                        let call = DeviceCall {
                            op: Op::Gemm {
                                transa: args.transa,
                                transb: args.transb,
                                b: db + b_off,
                                ldb: args.ldb,
                            },
                            m: place.rows,
                            n: w,
                            k,
                            alpha: args.alpha,
                            a: a_p,
                            lda: place.ld,
                            beta: args.beta,
                            c: dc + c_off,
                            ldc: args.ldc,
                        };
                        // not waited for: the next unit's plan overlaps this unit's work
                        pending.push(ozaki::enqueue(gpu, stream, &call, opts)?);
                    }
                }
                left_in_block[j] -= 1;
                if left_in_block[j] > 0 {
                    continue;
                }
                // block j complete: download it while the next units compute
                let done = res.event()?;
                record(done, stream)?;
                dones.push(done);
                let c_off = 8 * (c0 * args.ldc) as u64;
                let job = Download {
                    done: Handle(done),
                    src: dc + c_off,
                    // SAFETY: the block's span lies inside the pinned staging of c_span.
                    dst: SendPtr(unsafe { c_stage.add(c0 * args.ldc) } as *mut u8),
                    bytes: 8 * span(m, w, args.ldc),
                    place: (c0 * args.ldc, m, w, args.ldc),
                };
                down_tx
                    .send(job)
                    .map_err(|_| GpuError::Cuda("download thread ended early".into()))?;
            }
            drop(down_tx);
            // gpu-ozaki: every unit's plan accepted its operands (early_write's module doc);
            // every group was uploaded before its units were enqueued
            if let (Some(e), Engine::Ozaki(_)) = (&early, engine) {
                let _ = go.send(e.go(true));
            }
            sync(stream)?;
            down.join()
                .unwrap_or_else(|_| Err(GpuError::Cuda("download thread panicked".into())))?;
            let downloaded = res.event()?;
            record(downloaded, res.d2h)?;
            sync(res.d2h)?;
            let tail = std::time::Instant::now();
            if let Some(w) = writer {
                written = w
                    .join()
                    .unwrap_or_else(|_| Err(GpuError::Cuda("early writer panicked".into())))?;
            }
            let write_ms = tail.elapsed().as_secs_f32() * 1e3;
            let at = |e: sys::CUevent| {
                // SAFETY: both events were recorded and have completed (streams synchronised).
                unsafe { cudarc::driver::result::event::elapsed(begin, e) }
                    .ctx("cuEventElapsedTime")
            };
            out.timeline = Some(Timeline {
                uploaded_ms: ups.iter().map(|&e| at(e)).collect::<Result<_, _>>()?,
                computed_ms: dones.iter().map(|&e| at(e)).collect::<Result<_, _>>()?,
                downloaded_ms: at(downloaded)?,
                write_ms,
            });
            for mk in &marks {
                let p = mk.phases()?;
                out.phases.products_ns += p.products_ns;
            }
            for p in pending {
                let o = p.finish()?;
                out.moduli = Some(out.moduli.map_or(o.moduli, |r| r.max(o.moduli)));
                out.phases.convert_ns += o.phases.convert_ns;
                out.phases.products_ns += o.phases.products_ns;
                out.phases.reconstruct_ns += o.phases.reconstruct_ns;
            }
            Ok(())
        })();
        if r.is_err() {
            cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        // drain the upload thread's remaining events (it ends on its own)
        for e in rx.iter().flatten() {
            res.events.push(e.0);
        }
        r
    });
    if result.is_err() {
        // leave the streams idle before the staging buffers are reused
        let _ = sync(stream);
        let _ = sync(copy_stream);
    }
    result?;
    let device_ns = out.phases.convert_ns + out.phases.products_ns + out.phases.reconstruct_ns;
    out.phases.transfer_ns = (t0.elapsed().as_nanos() as u64).saturating_sub(device_ns);
    Ok((
        out,
        StagedC {
            ptr: c_stage,
            written,
        },
    ))
}

/// C = alpha op(A) op(A)^T + beta C (one triangle) on the GPU for host-resident operands.
pub fn syrk(args: &SyrkArgs, c: &mut [f64], engine: Engine) -> Result<HostOutcome, GpuError> {
    let _flags = crate::fpenv::KeepFpFlags::new();
    let mut g = gpu()?;
    let gpu = &mut *g;
    let (ra, ca) = if args.trans == Trans::No {
        (args.n, args.k)
    } else {
        (args.k, args.n)
    };
    let a = &args.a[..span(ra, ca, args.lda)];
    let c_span = span(args.n, args.n, args.ldc);
    let t0 = std::time::Instant::now();
    let (st_a, st_c) = stage_operands(gpu, a, c, c_span, args.beta != 0.0)?;
    let up_ns = t0.elapsed().as_nanos() as u64;
    let stream = gpu.stream;
    let mut out = HostOutcome {
        device: gpu.ordinal,
        ..Default::default()
    };
    match engine {
        Engine::Native => {
            let mut mk = Marks::start(stream)?;
            crate::native::dsyrk(
                gpu,
                stream,
                args.uplo,
                args.trans,
                (args.n, args.k),
                args.alpha,
                (st_a, args.lda),
                args.beta,
                (st_c, args.ldc),
            )?;
            mk.mark(Phase::Products)?;
            sync(stream)?;
            out.phases = mk.phases()?;
        }
        Engine::Ozaki(opts) => {
            let call = DeviceCall {
                op: Op::Syrk {
                    uplo: args.uplo,
                    trans: args.trans,
                },
                m: args.n,
                n: args.n,
                k: args.k,
                alpha: args.alpha,
                a: st_a,
                lda: args.lda,
                beta: args.beta,
                c: st_c,
                ldc: args.ldc,
            };
            let o = ozaki::gemm(gpu, stream, &call, opts)?;
            out.moduli = Some(o.moduli);
            out.phases = o.phases;
        }
    }
    let t1 = std::time::Instant::now();
    copy_out(
        gpu,
        st_c,
        &mut c[..c_span],
        args.n,
        args.n,
        args.ldc,
        Some(args.uplo),
    )?;
    out.phases.transfer_ns += up_ns + t1.elapsed().as_nanos() as u64;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(m: usize, n: usize, k: usize, engine: Engine) -> usize {
        let (a, b) = (vec![0.0; 1], vec![0.0; 1]);
        pipeline_blocks(&GemmArgs::product(m, n, k, &a, &b), engine)
    }

    /// Tunings parse as key=value pairs over the defaults; bad keys and values are refused.
    #[test]
    fn tunings_parse_over_the_defaults() {
        assert_eq!("default".parse(), Ok(Tuning::default()));
        let t: Tuning =
            "up=stream,back=memcpy,threads=24,write=8,ring=16,block=64,native=16,ozaki=2"
                .parse()
                .unwrap();
        assert_eq!(
            (t.upload, t.write_back),
            (CopyKind::Stream, CopyKind::Memcpy)
        );
        let both: Tuning = "copy=memcpy".parse().unwrap();
        assert_eq!(
            (both.upload, both.write_back),
            (CopyKind::Memcpy, CopyKind::Memcpy)
        );
        assert_eq!((t.copy_threads, t.write_threads), (24, 8));
        assert_eq!((t.ring_chunk, t.block_bytes), (16 << 20, 64 << 20));
        assert_eq!(t.max_blocks, (16, 2));
        assert!("copy=fast".parse::<Tuning>().is_err());
        assert!("threads".parse::<Tuning>().is_err());
        assert!("color=red".parse::<Tuning>().is_err());
    }

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

    /// Emulates a piece's upload into `dev` (a device buffer starting at address `base`).
    fn land(piece: &Piece, base: u64, dev: &mut [f64]) {
        let at = ((piece.dst - base) / 8) as usize;
        let (w, pitch) = piece.runs.unwrap_or((piece.bytes, piece.bytes));
        for r in 0..piece.bytes / w.max(1) {
            // SAFETY: run r lies inside the piece's source span (see Piece::strided).
            let run = unsafe {
                std::slice::from_raw_parts(piece.src.0.add(r * pitch) as *const f64, w / 8)
            };
            dev[at + r * w / 8..at + (r + 1) * w / 8].copy_from_slice(run);
        }
    }

    /// Every panel layout puts op(A)'s rows where the unit's call reads them: panel p's
    /// element (i, l) at `off + 8 (i + l ld)` (or `l + i ld` transposed) holds op(A)(r0 + i,
    /// l), for one and several (ragged) panels, both transposes, padded lda; the panels'
    /// uploads never overlap.
    #[test]
    fn row_panels_land_where_the_units_read_them() {
        let (m, k) = (37usize, 11usize);
        for transa in [Trans::No, Trans::Yes] {
            let (ra, ca) = if transa == Trans::No { (m, k) } else { (k, m) };
            let lda = ra + 3;
            let a: Vec<f64> = (0..lda * ca).map(|i| i as f64 + 0.5).collect();
            let b = vec![0.0; 1];
            let args = GemmArgs {
                transa,
                lda,
                ..GemmArgs::product(m, 1, k, &a, &b)
            };
            let op_a = |i: usize, l: usize| {
                if transa == Trans::No {
                    a[i + l * lda]
                } else {
                    a[l + i * lda]
                }
            };
            for count in [1usize, 2, 5, 37] {
                let panels = row_panels(m, count);
                assert_eq!(panels.len(), count);
                assert_eq!(panels.iter().map(|p| p.1).sum::<usize>(), m);
                let places = panel_places(&args, &panels);
                let base = 1u64 << 20;
                let mut dev = vec![f64::NAN; a.len()];
                let mut written = vec![0u8; a.len()];
                for place in &places {
                    let piece = panel_piece(&args, &a, base, place, places.len() == 1);
                    let before = dev.clone();
                    land(&piece, base, &mut dev);
                    for (i, (x, y)) in before.iter().zip(&dev).enumerate() {
                        if x.to_bits() != y.to_bits() {
                            written[i] += 1;
                        }
                    }
                }
                assert!(
                    written.iter().all(|&w| w <= 1),
                    "panels overlap ({transa:?}, {count})"
                );
                for place in &places {
                    let at = (place.off / 8) as usize;
                    for i in 0..place.rows {
                        for l in 0..k {
                            let e = if transa == Trans::No {
                                at + i + l * place.ld
                            } else {
                                at + l + i * place.ld
                            };
                            assert_eq!(
                                dev[e],
                                op_a(place.r0 + i, l),
                                "{transa:?} {count} ({i}, {l})"
                            );
                        }
                    }
                }
            }
        }
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
        assert_eq!(pipeline_panels(&args(8192, 8192, 8192), oz), 1);
        assert_eq!(pipeline_panels(&args(600, 65536, 8192), Engine::Native), 2);
        assert_eq!(
            shared_panels(&args(32768, 16384, 32768), Engine::Native, 2),
            8
        );
        assert_eq!(shared_panels(&args(32768, 16384, 32768), oz, 2), 2);
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
        assert_eq!(blocks(16384, 16384, 16384, oz), 4);
        assert_eq!(blocks(4096, 600, 65536, Engine::Native), 2);
    }
}
