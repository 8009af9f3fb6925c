//! Host-resident calls (everything LD_PRELOAD sees): operands are staged through pinned
//! buffers reused across calls, moved to the device, computed by the native or emulated
//! route, and C is copied back into the caller's memory only once the device work
//! succeeded, or with beta = 0 block by block as it arrives (`early_write`). A failure the
//! data can cause leaves the caller's C untouched, so the shim can still run the vendor
//! BLAS on the original data; with beta = 0, where C is no input of the call or of that
//! fallback, a later device fault can leave blocks written that the fallback overwrites.
//!
//! Host copies into and out of pinned memory run on several threads and overlap the DMA of
//! the previous chunk (two staging buffers alternate).
//!
//! The caller's C is a raw-pointer strided matrix ([`HostC`]): only its call's rows of each
//! column are read (copied straight into the pinned upload ring) or written (straight from
//! pinned staging or C's download ring); on the device and in pinned memory C is contiguous.
//!
//! What lives where: `caller_c` (the caller's C, [`HostC`]), `tuning` (the knobs), `grid`
//! (how a call is cut into column blocks and row panels, `CBlock`), `upload` (the pinned ring
//! and the upload thread), `download` (the download thread), `c_ring` (C's download ring for
//! early writes), `write_back` (staging into the caller's C), `compact` (A and B that are
//! small blocks of larger arrays), `share` (a split's shared A), `register` (page-locking the
//! caller's operands for a call, `OZAKI_HOST_REGISTER`), `handoff` (a call beside other
//! BLAS calls makes its host copies outside the GPU's lock); this module holds the entry
//! points and the pipeline that drives them.

mod c_ring;
mod caller_c;
mod compact;
mod download;
pub(crate) mod early_write;
mod grid;
mod handoff;
mod register;
mod share;
mod tuning;
mod upload;
mod whole_rule;
mod write_back;

use crate::device::{Gpu, gpu_queued, sync};
use crate::error::{Context, GpuError};
use crate::memory;
use crate::ozaki::pieces::{Operand, Pieces};
use crate::ozaki::{self, DeviceCall, Op, Options};
use crate::timing::{Marks, Phase};
use c_ring::free_slots;
pub(crate) use c_ring::{CRing, Filled, Giver, empty_slots};
pub use caller_c::HostC;
use cudarc::driver::sys;
use download::{Download, Sink, drain};
use early_write::EarlyC;
pub(crate) use grid::{CBlock, shared_panels};
pub use grid::{Grid, PANEL_MIN_ROWS, PIPELINE_MIN_BYTES, pipeline_blocks, pipeline_panels};
use grid::{panel_places, row_panels};
use ozaki_core::blas::{GemmArgs, SyrkArgs, Trans, span};
use ozaki_core::host_pipeline::{copies_operands_apart, hands_off_c, registers_operands};
use ozaki_core::trace::Phases;
use register::Registration;
pub(crate) use share::{PanelBoard, Share};
pub(crate) use tuning::write_threads;
pub use tuning::{
    Tuning, UploadOrder, WriteStart, set_cpu_sharers, set_register, set_tuning, tuning,
};
pub(crate) use upload::upload;
use upload::{Piece, feed, panel_piece, ring, upload_piece};
use whole_rule::Verdict;
pub(crate) use write_back::write_c;
use write_back::{copy_out, write_back};

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
    /// op(A) and op(B) were page-locked for the call and uploaded from the caller's memory
    /// (`OZAKI_HOST_REGISTER`), not staged.
    pub page_locked: bool,
    /// C was handed off ([`handoff`]): written into the caller's memory after the call gave
    /// up the GPU.
    pub handed_off: bool,
    /// op(A) and op(B) were copied into pinned memory of the call's own before it queued
    /// for the GPU ([`handoff`]), not staged through the ring.
    pub operands_pinned: bool,
}

/// When each stage of a pipelined host-resident gemm was done, in ms after it began staging
/// (CUDA events on its streams; the write-back is host-timed): `ozaki bench --pipeline`
/// prints it to show which stage bounds the call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// Host time from the call's start to its first queued upload: device buffers (the
    /// emulation's parts included), pinned staging grown on first use, page-locking, streams
    /// and events. The other marks count from there.
    pub setup_ms: f32,
    /// Per column block: its operands were on the device.
    pub uploaded_ms: Vec<f32>,
    /// Per column block: its part of C was computed on the device.
    pub computed_ms: Vec<f32>,
    /// All of C was downloaded (into its pinned staging or, with beta = 0, its ring).
    pub downloaded_ms: f32,
    /// Host time spent writing C into the caller's memory after the download: from staging,
    /// or with beta = 0 the early writer's rest.
    pub write_ms: f32,
}

/// Uploads A (and C when `read_c`, contiguous on the device) for a syrk; returns their
/// device addresses.
fn stage_operands(
    gpu: &mut Gpu,
    a: &[f64],
    c: &HostC,
    read_c: bool,
) -> Result<(u64, u64), GpuError> {
    let da = gpu.workspace.get("host_a", a.len() * 8)?;
    let dc = gpu.workspace.get("host_c", c.rows() * c.cols() * 8)?;
    upload(gpu, da, a)?;
    if read_c {
        for p in Piece::columns(dc, c, tuning().ring_chunk) {
            upload_piece(gpu, &p)?;
        }
    }
    Ok((da, dc))
}

/// `Err` unless `c` is the `rows x cols` C stored `ld` apart that the call describes.
fn matches(c: &HostC, rows: usize, cols: usize, ld: usize) -> Result<(), GpuError> {
    if (c.rows(), c.cols(), c.ld()) == (rows, cols, ld) {
        return Ok(());
    }
    Err(GpuError::Unsupported(format!(
        "C of {} x {} stored {} apart for a call on {rows} x {cols} stored {ld} apart",
        c.rows(),
        c.cols(),
        c.ld()
    )))
}

/// Readies pinned memory for `callers` host-resident gemms of `m x n x k` made at once, each
/// copying its operands into a buffer of its own before it queues for the GPU and taking
/// its C home in another ([`handoff`]): allocates a buffer of each kind per caller into the
/// pool, within its bound, so that their first round does not page-lock them. Returns how
/// many buffers it allocated; none when such calls would not copy their operands apart or
/// the GPU is not up.
pub fn reserve_operands(m: usize, n: usize, k: usize, callers: u32) -> usize {
    if !copies_operands_apart(m, n, k, callers) {
        return 0;
    }
    let operands = m.saturating_mul(k).saturating_add(k.saturating_mul(n));
    let c = m.saturating_mul(n);
    [c, operands]
        .iter()
        .map(|elems| handoff::reserve(elems.saturating_mul(8), callers as usize))
        .sum()
}

/// C = alpha op(A) op(B) + beta C on the GPU for host-resident operands, C held in `c`
/// (leading dimension `args.ldc`); see [`gemm_c`].
pub fn gemm(args: &GemmArgs, c: &mut [f64], engine: Engine) -> Result<HostOutcome, GpuError> {
    gemm_c(args, HostC::of_slice(c, args.m, args.n, args.ldc)?, engine)
}

/// C = alpha op(A) op(B) + beta C on the GPU for host-resident operands and the caller's
/// strided C (`m x n` stored `ldc` apart). A call made beside other BLAS calls hands its C
/// off ([`handoff`]): it gives up the GPU before writing C into the caller's memory.
pub fn gemm_c(args: &GemmArgs, c: HostC, engine: Engine) -> Result<HostOutcome, GpuError> {
    let _flags = fp_flags::KeepFpFlags::new();
    matches(&c, args.m, args.n, args.ldc)?;
    let pinned_before = crate::memory::pinned_alloc_ns();
    let sharers = tuning::sharers();
    let hand_off = hands_off_c(args.m, args.n, sharers);
    // op(A) and op(B) copied into pinned memory of the call's own before it queues for the
    // GPU, when it hands off, they are not too large and a buffer can be had
    let t = std::time::Instant::now();
    let pinned = copies_operands_apart(args.m, args.n, args.k, sharers)
        .then(|| handoff::Operands::stage(args))
        .flatten();
    let staging_ns = t.elapsed().as_nanos() as u64;
    let (mut g, waited_ns) = gpu_queued()?;
    let mut run = |p: &GemmArgs| {
        let grid = Grid::of(p, engine);
        if let Some(ops) = &pinned {
            handed_off(&mut g, &ops.args(p), c, engine, (grid, Tile::Pinned))
                .map(|(out, buf)| (out, Some(buf)))
        } else if hand_off {
            handed_off(&mut g, p, c, engine, (grid, Tile::Whole)).map(|(out, buf)| (out, Some(buf)))
        } else {
            grid_c(&mut g, p, c, engine, grid).map(|out| (out, None))
        }
    };
    // pinned operands are packed already; others are packed here where wasteful (`compact`)
    let (mut out, taken) = match pinned.is_none().then(|| compact::gemm(args, &mut run)) {
        Some(Some(packed)) => packed?,
        _ => run(args)?,
    };
    drop(g);
    if let Some(ops) = pinned {
        ops.give_back();
        out.phases.transfer_ns += staging_ns;
        out.operands_pinned = true;
        out.page_locked = false;
    }
    if let Some(mut buf) = taken {
        let t = std::time::Instant::now();
        // SAFETY: the buffer holds the call's m n doubles of C, downloaded and synchronised
        // by `handed_off`; it is this call's alone until it goes back to the pool below.
        let staged =
            unsafe { std::slice::from_raw_parts(buf.as_mut_ptr() as *const f64, args.m * args.n) };
        write_back(&c, staged, None);
        handoff::give_back(buf);
        out.phases.transfer_ns += t.elapsed().as_nanos() as u64;
        out.handed_off = true;
    }
    out.phases.wait_ns = waited_ns;
    out.phases.pinned_ns = crate::memory::pinned_alloc_ns() - pinned_before;
    Ok(out)
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

/// [`gemm_on`] cut into a given [`Grid`]; for tests and benchmarks of the pipeline itself.
/// The result does not depend on the grid for `gpu-native` up to cuBLAS's choice of kernel
/// per unit shape, and not at all for `gpu-ozaki`: each entry depends only on its row of
/// op(A), its column of op(B) and the moduli count, which is the whole call's (`whole_rule`).
/// When the whole call's rule chooses another count than the units ran with, the call runs
/// again with that count (C untouched until then, unless beta = 0 wrote blocks early: the
/// second run writes every block again).
pub fn gemm_grid(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: &mut [f64],
    engine: Engine,
    grid: Grid,
) -> Result<HostOutcome, GpuError> {
    let c = HostC::of_slice(c, args.m, args.n, args.ldc)?;
    grid_c(gpu, args, c, engine, grid)
}

/// [`gemm_grid`] on the caller's strided C.
///
/// With beta != 0 the result waits in pinned staging until the whole call succeeded and only
/// then is written into `c` ([`write_back`]), so a failure leaves C as it was; with beta = 0
/// blocks are written as they arrive once the call may write them, and a failure after that
/// leaves a C the vendor fallback overwrites whole without reading it ([`early_write`]).
fn grid_c(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: HostC,
    engine: Engine,
    grid: Grid,
) -> Result<HostOutcome, GpuError> {
    // beta == 0: blocks go into C as they arrive (early_write); C is not read
    let early = (args.beta == 0.0).then(|| EarlyC {
        c,
        threads: write_threads(),
        gate: None,
    });
    let (mut out, ptr) = match whole_call(gpu, args, c, engine, (grid, Tile::Whole), early)? {
        (out, StagedC::Written) => return Ok(out),
        (out, StagedC::Staged(ptr)) => (out, ptr),
        _ => return Err(GpuError::Cuda("early writes withheld".into())),
    };
    let t = std::time::Instant::now();
    // SAFETY: ptr points at m n doubles of pinned staging owned by `gpu`, which this
    // function still borrows mutably, filled by the successful call above.
    let staged = unsafe { std::slice::from_raw_parts(ptr, args.m * args.n) };
    write_back(&c, staged, None);
    out.phases.transfer_ns += t.elapsed().as_nanos() as u64;
    if let Some(tl) = out.timeline.as_mut() {
        tl.write_ms = t.elapsed().as_secs_f32() * 1e3;
    }
    Ok(out)
}

/// [`grid_c`] for a C handed off ([`handoff`]): C comes home whole into pinned staging (no
/// early writes), which the call takes with it; the caller writes it into `c` once it has
/// given up the GPU, and gives the buffer back. `tile` is [`Tile::Pinned`] when op(A) and
/// op(B) lie in pinned memory of the call's own.
fn handed_off(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: HostC,
    engine: Engine,
    (grid, tile): (Grid, Tile<'_>),
) -> Result<(HostOutcome, memory::PinnedBuffer), GpuError> {
    match whole_call(gpu, args, c, engine, (grid, tile), None)? {
        (out, StagedC::Staged(_)) => Ok((out, handoff::take(gpu, C_SLOT, args.m * args.n * 8)?)),
        _ => Err(GpuError::Cuda("C was not staged".into())),
    }
}

/// The whole call through [`staged_gemm`], run again with the whole call's moduli count when
/// its rule chose another than the units ran with; says where C is.
fn whole_call(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: HostC,
    engine: Engine,
    (grid, tile): (Grid, Tile<'_>),
    early: Option<EarlyC<'_>>,
) -> Result<(HostOutcome, StagedC), GpuError> {
    let (mut out, mut staged) = staged_gemm(gpu, args, c, engine, grid, tile, early)?;
    if let (StagedC::Rerun(r), Engine::Ozaki(opts)) = (staged, engine) {
        // the whole call's rule chose another count than its units ran with (`whole_rule`):
        // the same cut again with that count; it writes every block of C again
        let forced = Engine::Ozaki(Options {
            moduli: Some(r),
            ..opts
        });
        let first = out.phases;
        (out, staged) = staged_gemm(gpu, args, c, forced, grid, tile, early)?;
        out.phases.transfer_ns += first.transfer_ns;
        out.phases.convert_ns += first.convert_ns;
        out.phases.products_ns += first.products_ns;
        out.phases.reconstruct_ns += first.reconstruct_ns;
    }
    match staged {
        StagedC::Rerun(_) => Err(GpuError::Cuda("early writes withheld".into())),
        s => Ok((out, s)),
    }
}

/// Where [`staged_gemm`] left C.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StagedC {
    /// Every block is in the caller's C (early writes, [`early_write`]).
    Written,
    /// The call's `m x n` C, contiguous (leading dimension m), in the GPU's staging buffer
    /// [`C_SLOT`]; valid until the next call on that GPU (beta != 0).
    Staged(*const f64),
    /// Neither: the early writes were not allowed to start (another tile of a split
    /// failed), so the call cannot be committed.
    Withheld,
    /// Neither: the whole call's accuracy rule chose this other moduli count than its units
    /// ran with (`whole_rule`); the call must run again with it (C is untouched, or with
    /// beta = 0 may hold early blocks the second run overwrites).
    Rerun(usize),
}

/// What part of a host-resident call a pipeline runs.
#[derive(Clone, Copy)]
pub(crate) enum Tile<'a> {
    /// The whole call: gpu-ozaki converts each part of op(A) and op(B) once
    /// (`ozaki::pieces`) and runs the accuracy rule once on all of it (`whole_rule`), so C
    /// does not depend on the cut.
    Whole,
    /// The whole call, its op(A) and op(B) already in pinned memory of its own
    /// ([`handoff::Operands`]): uploaded straight from there, without the staging copy.
    Pinned,
    /// One tile of a split over several devices (its own call, with its own rule), with
    /// the split's shared A when it has one.
    Split(Option<&'a Share<'a>>),
}

/// Staging buffer that receives C when beta != 0 (with beta = 0, C comes home through its
/// ring, [`c_ring`]).
const C_SLOT: usize = 2;

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

/// Events and the download stream of one pipelined call, destroyed on drop (after the
/// streams were synchronised or the call failed: destroying a pending event is allowed).
struct CallResources {
    d2h: sys::CUstream,
    /// gpu-ozaki's conversions of the parts of op(A) and op(B) (`ozaki::pieces`), beside
    /// the products on the compute stream.
    side: sys::CUstream,
    events: Vec<sys::CUevent>,
}

/// A non-blocking stream of the current context.
fn new_stream() -> Result<sys::CUstream, GpuError> {
    let mut s = std::ptr::null_mut();
    // SAFETY: out-parameter; the GPU's context is current.
    unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) }
        .result()
        .ctx("cuStreamCreate")?;
    Ok(s)
}

impl CallResources {
    fn new() -> Result<CallResources, GpuError> {
        let d2h = new_stream()?;
        let side = match new_stream() {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: created above, nothing enqueued on it.
                let _ = unsafe { sys::cuStreamDestroy_v2(d2h) };
                return Err(e);
            }
        };
        Ok(CallResources {
            d2h,
            side,
            events: Vec::new(),
        })
    }

    /// A timing event (for [`Timeline`]), destroyed with the call.
    fn event(&mut self) -> Result<sys::CUevent, GpuError> {
        self.event_with(sys::CUevent_flags::CU_EVENT_DEFAULT)
    }

    /// An event only waited for (no timing), destroyed with the call.
    fn sync_event(&mut self) -> Result<sys::CUevent, GpuError> {
        self.event_with(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
    }

    fn event_with(&mut self, flags: sys::CUevent_flags) -> Result<sys::CUevent, GpuError> {
        let e = cudarc::driver::result::event::create(flags).ctx("cuEventCreate")?;
        self.events.push(e);
        Ok(e)
    }
}

impl Drop for CallResources {
    fn drop(&mut self) {
        // SAFETY: the streams are drained first; each handle is destroyed once.
        unsafe {
            for s in [self.d2h, self.side] {
                let _ = sys::cuStreamSynchronize(s);
                let _ = sys::cuStreamDestroy_v2(s);
            }
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

/// Runs C = alpha op(A) op(B) + beta C on `gpu`. With beta != 0 the result is left in pinned
/// staging (the caller writes it into its C only once it knows the whole call, or every
/// tile of a split, succeeded: the route's contract); `c` is the caller's C, read only when
/// beta != 0 (its rows of each column, into the upload ring). On the device and in pinned
/// memory C is contiguous (leading dimension m). With `early` and beta == 0, the blocks come home through C's download ring
/// ([`c_ring`]) and are written into the caller's C as they arrive once the call is accepted
/// ([`early_write`]); the returned [`StagedC`] says where C is.
///
/// The pipeline ("transfers tiled and overlapped with conversion and compute"):
/// C is cut into `grid.blocks` column blocks and op(A) into `grid.panels` row panels. An
/// upload thread stages, through a ring of pinned buffers onto the copy stream, the first
/// panel of A with the first block's columns of op(B) (all of B at once when B is
/// transposed: its rows are not contiguous) and of C, then the other panels, then per block
/// the columns of op(B) and C, with an event after each group. The compute stream computes
/// each panel x block unit as soon as its group's event has fired (cuBLAS; or for the whole
/// call's emulation the int8 products of the unit's panel and block, each part converted
/// once on a side stream when it arrived, `ozaki::pieces`, with the rule run once on all
/// lines, `whole_rule`; a tile of a split runs the emulated route on each unit's
/// sub-problem, each choosing its own count, the outcome reporting the largest), and a
/// download stream copies C_j home (into pinned
/// staging, or through C's ring into the caller's C) while block j + 1 is computed. So host copies, both link directions and the GPU
/// all run at once; what is left serial is the first panel's upload and the last block's
/// download (and with beta != 0 the write-back from staging). In a split (`share`), this
/// slot uploads only its own panels of A and copies them on to the other devices, and waits
/// for the others' panels on the split's board.
pub(crate) fn staged_gemm(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: HostC,
    engine: Engine,
    grid: Grid,
    tile: Tile<'_>,
    early: Option<EarlyC<'_>>,
) -> Result<(HostOutcome, StagedC), GpuError> {
    matches(&c, args.m, args.n, args.ldc)?;
    let share = match tile {
        Tile::Whole | Tile::Pinned => None,
        Tile::Split(share) => share,
    };
    let t0 = std::time::Instant::now();
    let (m, n, k) = (args.m, args.n, args.k);
    let ((ra, ca), (rb, cb)) = (args.a_dims(), args.b_dims());
    let a = &args.a[..span(ra, ca, args.lda)];
    let b = &args.b[..span(rb, cb, args.ldb)];
    let c_elems = m * n;
    let read_c = args.beta != 0.0;
    // a large whole call page-locks op(A) and op(B) when registration is on, so they upload
    // without the staging copy; unlocked when this function returns, after its streams
    // were synchronised (on success by the pipeline, on failure below)
    let locked = match tile {
        Tile::Pinned => Registration::pinned(2),
        Tile::Whole if tuning::register_on() && registers_operands(m, n, k) => {
            Registration::lock(&[a, b])
        }
        _ => Registration::none(2),
    };
    // early writes only when C is not an input (early_write's module doc)
    let early = early.filter(|_| !read_c);
    let da = match share {
        Some(sh) => sh.a_dev,
        None => gpu.workspace.get("host_a", a.len() * 8)?,
    };
    let db = gpu.workspace.get("host_b", b.len() * 8)?;
    let dc = gpu.workspace.get("host_c", c_elems * 8)?;
    let ring = ring(gpu)?;
    let mut res = CallResources::new()?;
    // beta = 0: C's ring, sized by the tuning; else C's full staging (grow-only)
    let (c_ring, c_stage) = match early {
        Some(_) => (Some(CRing::new(gpu, m, &mut res)?), std::ptr::null_mut()),
        None => (None, gpu.staging(C_SLOT, c_elems * 8)? as *mut f64),
    };

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
        let piece =
            panel_piece(args, a, da, &places[p], places.len() == 1).direct(locked.locked(0));
        match share {
            Some(sh) => piece.shared(gpu.ctx, &sh.peers, places[p].off, p),
            None => piece,
        }
    };
    let b_and_c = |j: usize, (c0, w): (usize, usize)| {
        let mut g = Vec::new();
        if args.transb == Trans::No {
            let s = c0 * args.ldb;
            g.push(
                Piece::new(db + 8 * s as u64, &b[s..s + span(k, w, args.ldb)])
                    .direct(locked.locked(1)),
            );
        } else if j == 0 {
            g.push(Piece::new(db, b).direct(locked.locked(1)));
        }
        if read_c {
            let block = c.part(0, c0, m, w).expect("a column block lies inside C");
            g.extend(Piece::columns(dc + 8 * (c0 * m) as u64, &block, ring.chunk));
        }
        g
    };
    // Upload order (`grid::upload_order`): panels and blocks interleaved, so the work that
    // can start (a unit needs its panel and its block) grows with both from the first panel
    // and block on. Panel p is its owner's q(p)-th; the other slots upload in the same
    // order, so their q-th panels arrive about with this slot's.
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
    let parts = grid::upload_order(panels_per_slot, cols.len(), tuning().order);
    for (rank, part) in parts.into_iter().enumerate() {
        match part {
            grid::Part::Panel(q) => {
                rank_panel[q] = rank;
                if let Some(p) = (0..places.len()).find(|&p| q_of[p] == q && own(p)) {
                    panel_group[p] = groups.len();
                    groups.push(vec![piece_of(p)]);
                }
            }
            grid::Part::Block(j) => {
                rank_block[j] = rank;
                block_group[j] = groups.len();
                groups.push(b_and_c(j, cols[j]));
            }
        }
    }
    // units (panel, block) in the order their operands arrive
    let mut units: Vec<(usize, usize)> = (0..cols.len())
        .flat_map(|j| (0..places.len()).map(move |p| (p, j)))
        .collect();
    units.sort_by_key(|&(p, j)| (rank_panel[q_of[p]].max(rank_block[j]), j, p));
    let mut left_in_block = vec![places.len(); cols.len()];
    // gpu-ozaki on the whole call, in more than one unit: each part converted once (alpha
    // = 0 is refused by the unit's own emulated call, as for any call)
    let side = res.side;
    let mut pieces = match (tile, engine) {
        (Tile::Whole | Tile::Pinned, Engine::Ozaki(opts))
            if units.len() > 1 && args.alpha != 0.0 =>
        {
            let panels: Vec<(usize, usize)> = places.iter().map(|p| (p.r0, p.rows)).collect();
            // SAFETY: the GPU's context is current; its earlier calls were synchronised.
            Some(unsafe {
                Pieces::new(
                    gpu,
                    (side, gpu.stream),
                    (m, n, k),
                    &panels,
                    &cols,
                    whole_rule::unit_moduli(opts, k),
                    opts,
                )
            }?)
        }
        _ => None,
    };
    let mut rerun = None;

    let (ctx, copy_stream, stream) = (gpu.ctx, gpu.copy_stream, gpu.stream);
    let begin = res.event()?;
    record(begin, copy_stream)?;
    let setup_ms = t0.elapsed().as_secs_f32() * 1e3;
    let (mut ups, mut dones) = (Vec::new(), Vec::new());
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut out = HostOutcome {
        device: gpu.ordinal,
        page_locked: locked.locked(0) && locked.locked(1),
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
        let (sink, writer) = match (early, &c_ring) {
            (Some(e), Some(ring)) => {
                let (filled, filled_rx) = std::sync::mpsc::channel();
                // the writer holds the only giver: once it is gone the download stops
                let (free, giver) = free_slots(ring.len());
                let context = Handle(ctx);
                let w =
                    s.spawn(move || early_write::writer(context, e, ring, go_rx, filled_rx, giver));
                (Sink::Ring { ring, free, filled }, Some(w))
            }
            _ => (Sink::Staging(SendPtr(c_stage)), None),
        };
        let down = s.spawn(move || drain(d2h, dc, down_rx, sink));
        let r = (|| -> Result<(), GpuError> {
            // dropped on every way out (and before the writer is joined), so the writer never
            // waits for a message that cannot come
            let go = go_tx;
            // blocks written as they are downloaded (early_write's module doc): gpu-native's
            // always, gpu-ozaki's only when the tuning says so (by default they wait for the
            // whole call's rule)
            let at_once = match engine {
                Engine::Native => true,
                Engine::Ozaki(_) => tuning().ozaki_write == WriteStart::Downloaded,
            };
            let went = match &early {
                Some(e) if at_once => {
                    let _ = go.send(e.go(false));
                    true
                }
                _ => false,
            };
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
                    if pieces.is_some() {
                        wait(side, ups[g])?;
                    }
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
                // C on the device: contiguous, leading dimension m
                let (c_off, ldc) = (8 * (c0 * m + place.r0) as u64, m.max(1));
                match engine {
                    Engine::Native => {
                        let mut mk = Marks::start(stream)?;
                        // SAFETY: the staged device buffers hold this unit's A panel, B and C
                        // at these offsets and stay alive until the stream is waited for.
                        unsafe {
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
                                (dc + c_off, ldc),
                            )
                        }?;
                        mk.mark(Phase::Products)?;
                        marks.push(mk);
                    }
                    Engine::Ozaki(_) if pieces.is_some() => {
                        let pc = pieces.as_mut().expect("checked");
                        let a_part = Operand {
                            x: a_p,
                            ld: place.ld,
                            contig: args.transa == Trans::Yes,
                        };
                        let b_part = Operand {
                            x: db + b_off,
                            ld: args.ldb,
                            contig: args.transb == Trans::No,
                        };
                        // SAFETY: the staged device buffers hold this unit's A panel, B block
                        // and C at these offsets, uploaded before the waits above, and stay
                        // alive until the streams are waited for.
                        unsafe {
                            pc.unit(
                                gpu,
                                (side, stream),
                                (p, a_part),
                                (j, b_part),
                                (args.alpha, args.beta),
                                (dc + c_off, ldc),
                            )
                        }?;
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
                            ldc,
                        };
                        // not waited for: the next unit's plan overlaps this unit's work
                        // SAFETY: as for the native product above.
                        pending.push(unsafe { ozaki::enqueue(gpu, stream, &call, opts) }?);
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
                let job = Download {
                    done: Handle(done),
                    block: CBlock {
                        col0: c0,
                        rows: m,
                        cols: w,
                    },
                };
                down_tx
                    .send(job)
                    .map_err(|_| GpuError::Cuda("download thread ended early".into()))?;
            }
            drop(down_tx);
            // every group's host copy is done: writers already at work get every thread
            if let (Some(e), true) = (&early, went) {
                let _ = go.send(Some(e.threads));
            }
            // the whole call's rule, once every part's statistics are on the host (not
            // waiting for the products); a decline is the call's error
            if let (Some(pc), Engine::Ozaki(opts)) = (pieces.as_mut(), engine) {
                let plan = pc.plan(gpu, opts.moduli)?;
                if let Verdict::Rerun(r) = whole_rule::verdict(opts, pc.moduli(), plan.moduli) {
                    rerun = Some(r);
                }
            }
            // a go that waited for the rule: every unit's plan accepted its operands, and
            // every group was uploaded before its units were enqueued
            if let (Some(e), false) = (&early, went) {
                let _ = go.send(if rerun.is_none() { e.go(true) } else { None });
            }
            drop(go);
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
                setup_ms,
                uploaded_ms: ups.iter().map(|&e| at(e)).collect::<Result<_, _>>()?,
                computed_ms: dones.iter().map(|&e| at(e)).collect::<Result<_, _>>()?,
                downloaded_ms: at(downloaded)?,
                write_ms,
            });
            for mk in &marks {
                let p = mk.phases()?;
                out.phases.products_ns += p.products_ns;
            }
            if let Some(pc) = &pieces {
                sync(side)?;
                let p = pc.phases()?;
                out.moduli = Some(pc.moduli() as u32);
                out.phases.convert_ns += p.convert_ns;
                out.phases.products_ns += p.products_ns;
                out.phases.reconstruct_ns += p.reconstruct_ns;
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
        let _ = sync(side);
    }
    result?;
    let device_ns = out.phases.convert_ns + out.phases.products_ns + out.phases.reconstruct_ns;
    out.phases.transfer_ns = (t0.elapsed().as_nanos() as u64).saturating_sub(device_ns);
    let staged = match (rerun, c_ring.is_some(), written) {
        (Some(r), _, _) => StagedC::Rerun(r),
        (None, false, _) => StagedC::Staged(c_stage),
        (None, true, true) => StagedC::Written,
        (None, true, false) => StagedC::Withheld,
    };
    Ok((out, staged))
}

/// C = alpha op(A) op(A)^T + beta C (one triangle) on the GPU for host-resident operands, C
/// held in `c` (leading dimension `args.ldc`); see [`syrk_c`].
pub fn syrk(args: &SyrkArgs, c: &mut [f64], engine: Engine) -> Result<HostOutcome, GpuError> {
    syrk_c(args, HostC::of_slice(c, args.n, args.n, args.ldc)?, engine)
}

/// C = alpha op(A) op(A)^T + beta C (one triangle) on the GPU for host-resident operands and
/// the caller's strided C (`n x n` stored `ldc` apart). With beta != 0 rows `0..n` of each
/// column are uploaded (the other triangle is part of the call's C argument, which dsyrk
/// leaves unreferenced); only the `uplo` triangle is written, after the device work
/// succeeded ([`copy_out`]).
pub fn syrk_c(args: &SyrkArgs, c: HostC, engine: Engine) -> Result<HostOutcome, GpuError> {
    let _flags = fp_flags::KeepFpFlags::new();
    matches(&c, args.n, args.n, args.ldc)?;
    let pinned_before = crate::memory::pinned_alloc_ns();
    let (mut g, waited_ns) = gpu_queued()?;
    let mut out = match compact::syrk(args, |p| syrk_on(&mut g, p, c, engine)) {
        Some(packed) => packed?,
        None => syrk_on(&mut g, args, c, engine)?,
    };
    out.phases.wait_ns = waited_ns;
    out.phases.pinned_ns = crate::memory::pinned_alloc_ns() - pinned_before;
    Ok(out)
}

/// [`syrk_c`] on a locked GPU, operands as given; C is contiguous on the device.
fn syrk_on(
    gpu: &mut Gpu,
    args: &SyrkArgs,
    c: HostC,
    engine: Engine,
) -> Result<HostOutcome, GpuError> {
    let (ra, ca) = args.a_dims();
    let a = &args.a[..span(ra, ca, args.lda)];
    let ldc = args.n.max(1);
    let t0 = std::time::Instant::now();
    let (st_a, st_c) = stage_operands(gpu, a, &c, args.beta != 0.0)?;
    let up_ns = t0.elapsed().as_nanos() as u64;
    let stream = gpu.stream;
    let mut out = HostOutcome {
        device: gpu.ordinal,
        ..Default::default()
    };
    match engine {
        Engine::Native => {
            let mut mk = Marks::start(stream)?;
            // SAFETY: st_a and st_c are the staged copies of A and C, alive until the sync.
            unsafe {
                crate::native::dsyrk(
                    gpu,
                    stream,
                    args.uplo,
                    args.trans,
                    (args.n, args.k),
                    args.alpha,
                    (st_a, args.lda),
                    args.beta,
                    (st_c, ldc),
                )
            }?;
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
                ldc,
            };
            // SAFETY: as for the native call above (gemm waits for its stream).
            let o = unsafe { ozaki::gemm(gpu, stream, &call, opts) }?;
            out.moduli = Some(o.moduli);
            out.phases = o.phases;
        }
    }
    let t1 = std::time::Instant::now();
    copy_out(gpu, st_c, &c, Some(args.uplo))?;
    out.phases.transfer_ns += up_ns + t1.elapsed().as_nanos() as u64;
    Ok(out)
}
