//! Host-resident calls (everything LD_PRELOAD sees): operands are staged through pinned
//! buffers reused across calls, moved to the device, computed by the native or emulated
//! route, and C is copied back into the caller's memory only after the device work
//! succeeded (issue #4). Any error leaves the caller's C untouched, so the shim can still run
//! the vendor BLAS on the original data.
//!
//! Host copies into and out of pinned memory run on several threads and overlap the DMA of
//! the previous chunk (two staging buffers alternate).

use crate::device::{Gpu, gpu, sync};
use crate::error::{Context, GpuError};
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
}

const CHUNK: usize = 64 << 20;

/// Threads that write a result from pinned staging into the caller's C: every core (the
/// write-back is the call's tail, nothing else runs beside it; 61 GB/s with 32 threads against
/// 39 GB/s with 16 on the H200 host, BENCHMARKS.md).
pub(crate) fn write_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 32)
}

/// dst[..] = src[..] on several threads (large copies between pageable and pinned memory
/// are limited by one core's bandwidth otherwise).
fn par_copy(dst: &mut [u8], src: &[u8]) {
    let t = if src.len() < (4 << 20) {
        1
    } else {
        copy_threads()
    };
    let per = src.len().div_ceil(t);
    std::thread::scope(|s| {
        for (d, c) in dst.chunks_mut(per).zip(src.chunks(per)) {
            s.spawn(move || d.copy_from_slice(c));
        }
    });
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
    let cols_per = n.div_ceil(t).max(1);
    std::thread::scope(|s| {
        let mut rest = c;
        let mut j0 = 0;
        while j0 < n {
            let cols = cols_per.min(n - j0);
            let all = std::mem::take(&mut rest);
            let take = if j0 + cols == n {
                all.len()
            } else {
                (cols * ldc).min(all.len())
            };
            let (mine, tail) = all.split_at_mut(take);
            rest = tail;
            let base = j0;
            s.spawn(move || {
                for jj in 0..cols {
                    let j = base + jj;
                    let (lo, hi) = match uplo {
                        None => (0, m),
                        Some(Uplo::Upper) => (0, (j + 1).min(m)),
                        Some(Uplo::Lower) => (j.min(m), m),
                    };
                    let off = jj * ldc;
                    mine[off + lo..off + hi].copy_from_slice(&staged[j * ldc + lo..j * ldc + hi]);
                }
            });
            j0 += cols;
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

/// [`gemm`] on a given GPU, with [`pipeline_blocks`] column blocks.
pub fn gemm_on(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: &mut [f64],
    engine: Engine,
) -> Result<HostOutcome, GpuError> {
    gemm_blocks(gpu, args, c, engine, pipeline_blocks(args, engine))
}

/// [`gemm_on`] with C cut into `blocks` column blocks (1: no pipeline); for tests and
/// benchmarks of the pipeline itself. The result does not depend on `blocks` for
/// `gpu-native` up to cuBLAS's choice of kernel per block shape, and not at all for
/// `gpu-ozaki` with a fixed moduli count (each entry depends only on its row of op(A) and
/// column of op(B)); with the automatic count each block chooses its own (see
/// [`staged_gemm`]).
pub fn gemm_blocks(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: &mut [f64],
    engine: Engine,
    blocks: usize,
) -> Result<HostOutcome, GpuError> {
    let c_span = span(args.m, args.n, args.ldc);
    let (mut out, staged) = staged_gemm(gpu, args, &c[..c_span], engine, blocks, None)?;
    let t = std::time::Instant::now();
    // SAFETY: staged points at c_span doubles of pinned staging owned by `gpu`, which this
    // function still borrows mutably, filled by the successful call above.
    let staged = unsafe { std::slice::from_raw_parts(staged.0, c_span) };
    write_back(&mut c[..c_span], staged, args.m, args.n, args.ldc, None);
    out.phases.transfer_ns += t.elapsed().as_nanos() as u64;
    Ok(out)
}

/// Smallest host-resident gemm (bytes of A, B and C) that [`pipeline_blocks`] pipelines:
/// below it a call is over in a few milliseconds and the extra stream, events and copy
/// threads cost more than the overlap gains.
pub const PIPELINE_MIN_BYTES: usize = 96 << 20;

/// Target bytes of op(B) per column block: small enough that the first product starts soon
/// after A is on the device and the last block's download is a short tail, large enough
/// that each block's product keeps the GPU busy.
const BLOCK_B_BYTES: usize = 128 << 20;

/// Column blocks a host-resident gemm is pipelined over: 1 below [`PIPELINE_MIN_BYTES`],
/// else enough for blocks of op(B) of about [`BLOCK_B_BYTES`], at least 2, at most 8 for
/// `gpu-native` and 4 for `gpu-ozaki` (whose every block converts all of op(A) again), and
/// never narrower than 256 columns.
pub fn pipeline_blocks(args: &GemmArgs, engine: Engine) -> usize {
    let (m, n, k) = (args.m, args.n, args.k);
    let bytes = 8 * (m * k + k * n + m * n);
    if bytes < PIPELINE_MIN_BYTES || n < 512 {
        return 1;
    }
    let cap = match engine {
        Engine::Native => 8,
        Engine::Ozaki(_) => 4,
    };
    (8 * k * n)
        .div_ceil(BLOCK_B_BYTES)
        .clamp(2, cap)
        .min(n / 256)
}

/// Pinned result of [`staged_gemm`]: the call's span of C, laid out with its `ldc`, in the
/// GPU's staging buffer [`C_SLOT`]; valid until the next call on that GPU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StagedC(pub(crate) *const f64);

/// Staging buffer that receives C.
const C_SLOT: usize = 2;
/// Staging buffers of the upload ring (slot 2 holds C).
const RING: [usize; 3] = [0, 1, 3];
/// Bytes per ring slot: small enough that a small copy of the emulated route's plan (same
/// copy engine) waits at most about 2 ms behind the queued chunks, large enough that the
/// copy threads' hand-over costs little.
const RING_CHUNK: usize = 32 << 20;
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

/// One contiguous host span to copy to a device address, and from there on to the same
/// offset of other devices' buffers (a split's shared A, `crate::multi`).
#[derive(Clone)]
pub(crate) struct Piece {
    dst: u64,
    src: SendPtr<u8>,
    bytes: usize,
    /// (device address, context) of each peer copy, and the uploading device's context.
    peers: Vec<(u64, Handle<sys::CUcontext>)>,
    ctx: Handle<sys::CUcontext>,
}

impl Piece {
    pub(crate) fn new(dst: u64, src: &[f64]) -> Piece {
        Piece {
            dst,
            src: SendPtr(src.as_ptr() as *mut u8),
            bytes: std::mem::size_of_val(src),
            peers: Vec::new(),
            ctx: Handle(std::ptr::null_mut()),
        }
    }

    /// After upload, copy the piece device to device into `peers` (address in its
    /// context) at the same offsets; `ctx` is the uploading device's context.
    pub(crate) fn with_peers(
        mut self,
        ctx: sys::CUcontext,
        peers: impl IntoIterator<Item = (u64, sys::CUcontext)>,
    ) -> Piece {
        self.ctx = Handle(ctx);
        self.peers = peers.into_iter().map(|(d, c)| (d, Handle(c))).collect();
        self
    }
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

    fn event(&mut self) -> Result<sys::CUevent, GpuError> {
        let e = cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
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

/// Copy threads of the upload ring.
pub(crate) fn copy_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 16)
}

/// The pinned ring of `gpu`'s upload thread.
fn ring(gpu: &mut Gpu) -> Result<[SendPtr<u8>; 3], GpuError> {
    Ok([
        SendPtr(gpu.staging(RING[0], RING_CHUNK)?),
        SendPtr(gpu.staging(RING[1], RING_CHUNK)?),
        SendPtr(gpu.staging(RING[2], RING_CHUNK)?),
    ])
}

/// Uploads `pieces` (and their peer copies) on `gpu`'s copy stream through its pinned ring
/// and waits for all of it: the shared-A phase of a split (`crate::multi`).
pub(crate) fn upload_pieces(gpu: &mut Gpu, pieces: Vec<Piece>) -> Result<(), GpuError> {
    let ring = ring(gpu)?;
    let handles = (Handle(gpu.ctx), Handle(gpu.copy_stream));
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let cancel = &cancel;
        s.spawn(move || feed(handles, ring, vec![pieces], cancel, tx));
    });
    let mut result = Ok(());
    for r in rx.iter() {
        match r {
            // SAFETY: the group event, ours to destroy; the feed drained the stream.
            Ok(e) => unsafe {
                let _ = sys::cuEventDestroy_v2(e.0);
            },
            Err(e) => result = Err(e),
        }
    }
    result?;
    sync(gpu.copy_stream)
}

/// The upload thread: copies each group of pieces through the pinned ring (`copy_threads()`
/// workers fill a ring slot while the copy engine drains the previous ones) onto
/// `stream`, and after each group records an event and sends it, so the compute loop can
/// start block j as soon as its operands are on the device. Stops early when `cancel` is
/// set. Runs with `ctx` current.
fn feed(
    (ctx, stream): (Handle<sys::CUcontext>, Handle<sys::CUstream>),
    ring: [SendPtr<u8>; 3],
    groups: Vec<Vec<Piece>>,
    cancel: &std::sync::atomic::AtomicBool,
    tx: std::sync::mpsc::Sender<Result<Handle<sys::CUevent>, GpuError>>,
) {
    let (ctx, stream) = (ctx.0, stream.0);
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::{Barrier, Mutex};
    let workers = copy_threads();
    // (destination, source, bytes) of the chunk being copied; None ends the workers.
    type Job = Option<(SendPtr<u8>, SendPtr<u8>, usize)>;
    let job: Mutex<Job> = Mutex::new(None);
    let (start, done) = (Barrier::new(workers + 1), Barrier::new(workers + 1));
    std::thread::scope(|s| {
        for w in 0..workers {
            let (job, start, done) = (&job, &start, &done);
            s.spawn(move || {
                loop {
                    start.wait();
                    let Some((d, src, bytes)) = *job.lock().unwrap_or_else(|p| p.into_inner())
                    else {
                        break;
                    };
                    let per = bytes.div_ceil(workers);
                    let (lo, hi) = ((w * per).min(bytes), ((w + 1) * per).min(bytes));
                    // SAFETY: [lo, hi) of a live source and a ring slot no DMA is reading.
                    unsafe { std::ptr::copy_nonoverlapping(src.0.add(lo), d.0.add(lo), hi - lo) };
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
                            let len = RING_CHUNK.min(p.bytes - off);
                            // SAFETY: off + len <= p.bytes of the live source.
                            let src = SendPtr(unsafe { p.src.0.add(off) });
                            *job.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some((ring[slot], src, len));
                            start.wait();
                            done.wait();
                            // SAFETY: pinned ring slot of >= len bytes; destination inside
                            // the device buffer the piece was made for.
                            unsafe {
                                sys::cuMemcpyHtoDAsync_v2(
                                    p.dst + off as u64,
                                    ring[slot].0 as *const _,
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
                    }
                    let e = cudarc::driver::result::event::create(
                        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                    )
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
}

/// The download thread: copies each block of C to pinned staging on `stream` in
/// [`D2H_CHUNK`] pieces with at most two queued, so a small copy of the emulated route's next
/// plan (same copy engine) waits behind at most two pieces instead of a whole block.
fn drain(
    (ctx, stream): (Handle<sys::CUcontext>, Handle<sys::CUstream>),
    jobs: std::sync::mpsc::Receiver<Download>,
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
/// when beta != 0).
///
/// The pipeline (issue #4, "transfers tiled and overlapped with conversion and compute"):
/// C is cut into `blocks` column blocks. An upload thread stages A, then per block the
/// columns of op(B) (all of B at once when B is transposed: its rows are not contiguous)
/// and of C, through a ring of pinned buffers onto the copy stream, with an event per
/// block. The compute stream waits for block j's event, computes C_j on the device (cuBLAS,
/// or the emulated route on the sub-problem: each block chooses its own moduli count when
/// it is automatic, and the outcome reports the largest), and a download stream copies C_j
/// into pinned staging while block j + 1 is computed. So host copies, both link directions
/// and the GPU all run at once; what is left serial is A's upload before the first block
/// and the last block's download.
pub(crate) fn staged_gemm(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c_in: &[f64],
    engine: Engine,
    blocks: usize,
    a_dev: Option<u64>,
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
    let da = match a_dev {
        Some(d) => d,
        None => gpu.workspace.get("host_a", a.len() * 8)?,
    };
    let db = gpu.workspace.get("host_b", b.len() * 8)?;
    let dc = gpu.workspace.get("host_c", c_span * 8)?;
    let ring = ring(gpu)?;
    let c_stage = gpu.staging(C_SLOT, c_span * 8)? as *mut f64;

    // column blocks of C, multiples of 64 columns
    let blocks = blocks.clamp(1, n.max(1));
    let width = n.div_ceil(blocks).div_ceil(64) * 64;
    let cols: Vec<(usize, usize)> = (0..n)
        .step_by(width.max(1))
        .map(|c0| (c0, width.min(n - c0)))
        .collect();
    // upload groups: group j holds what block j needs beyond the earlier groups
    let groups: Vec<Vec<Piece>> = cols
        .iter()
        .enumerate()
        .map(|(j, &(c0, w))| {
            let mut g = Vec::new();
            if j == 0 && a_dev.is_none() {
                g.push(Piece::new(da, a));
            }
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
        })
        .collect();

    let mut res = CallResources::new()?;
    let (ctx, copy_stream, stream) = (gpu.ctx, gpu.copy_stream, gpu.stream);
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut out = HostOutcome {
        device: gpu.ordinal,
        ..Default::default()
    };
    let result = std::thread::scope(|s| {
        let cancel_ref = &cancel;
        let handles = (Handle(ctx), Handle(copy_stream));
        s.spawn(move || feed(handles, ring, groups, cancel_ref, tx));
        let (down_tx, down_rx) = std::sync::mpsc::channel();
        let d2h = (Handle(ctx), Handle(res.d2h));
        let down = s.spawn(move || drain(d2h, down_rx));
        let r = (|| -> Result<(), GpuError> {
            let mut marks = Vec::new();
            for &(c0, w) in &cols {
                let up = rx
                    .recv()
                    .map_err(|_| GpuError::Cuda("upload thread ended early".into()))??
                    .0;
                res.events.push(up);
                wait(stream, up)?;
                let b_off = 8 * if args.transb == Trans::No {
                    c0 * args.ldb
                } else {
                    c0
                } as u64;
                let c_off = 8 * (c0 * args.ldc) as u64;
                match engine {
                    Engine::Native => {
                        let mut mk = Marks::start(stream)?;
                        crate::native::dgemm(
                            gpu,
                            stream,
                            args.transa,
                            args.transb,
                            (m, w, k),
                            args.alpha,
                            (da, args.lda),
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
                            m,
                            n: w,
                            k,
                            alpha: args.alpha,
                            a: da,
                            lda: args.lda,
                            beta: args.beta,
                            c: dc + c_off,
                            ldc: args.ldc,
                        };
                        let o = ozaki::gemm(gpu, stream, &call, opts)?;
                        out.moduli = Some(out.moduli.map_or(o.moduli, |r| r.max(o.moduli)));
                        out.phases.convert_ns += o.phases.convert_ns;
                        out.phases.products_ns += o.phases.products_ns;
                        out.phases.reconstruct_ns += o.phases.reconstruct_ns;
                    }
                }
                let done = res.event()?;
                record(done, stream)?;
                let job = Download {
                    done: Handle(done),
                    src: dc + c_off,
                    // SAFETY: the block's span lies inside the pinned staging of c_span.
                    dst: SendPtr(unsafe { c_stage.add(c0 * args.ldc) } as *mut u8),
                    bytes: 8 * span(m, w, args.ldc),
                };
                down_tx
                    .send(job)
                    .map_err(|_| GpuError::Cuda("download thread ended early".into()))?;
            }
            drop(down_tx);
            sync(stream)?;
            down.join()
                .unwrap_or_else(|_| Err(GpuError::Cuda("download thread panicked".into())))?;
            sync(res.d2h)?;
            for mk in &marks {
                let p = mk.phases()?;
                out.phases.products_ns += p.products_ns;
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
    Ok((out, StagedC(c_stage)))
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

    /// Small calls are not pipelined; large ones get blocks of about 128 MiB of B, capped
    /// lower for the emulated route (each block converts all of A again).
    #[test]
    fn pipeline_blocks_follow_the_size() {
        let oz = Engine::Ozaki(Options::default());
        assert_eq!(blocks(1024, 1024, 1024, Engine::Native), 1);
        assert_eq!(blocks(110592, 64, 64, Engine::Native), 1);
        assert_eq!(blocks(8192, 8192, 8192, Engine::Native), 4);
        assert_eq!(blocks(8192, 8192, 8192, oz), 4);
        assert_eq!(blocks(16384, 16384, 16384, Engine::Native), 8);
        assert_eq!(blocks(16384, 16384, 16384, oz), 4);
        assert_eq!(blocks(4096, 600, 65536, Engine::Native), 2);
    }
}
