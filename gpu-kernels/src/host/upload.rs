//! Host-to-device transfers: the pinned upload ring, the upload thread ([`feed`]) that fills
//! it on several copy threads while the copy engine drains it, and the pieces it moves
//! (including a split's panels of A copied on to the peer devices).

use super::grid::PanelPlace;
use super::tuning::{copy_threads, tuning};
use super::{Handle, PanelBoard, SendPtr, record};
use crate::device::{Gpu, sync};
use crate::error::{Context, GpuError};
use crate::host_copy;
use cudarc::driver::sys;
use ozaki_core::blas::{GemmArgs, Trans, span};

const CHUNK: usize = 64 << 20;

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
    /// The source is page-locked for the call (`super::register`): the DMA reads it where
    /// it is instead of from a ring slot filled by the copy threads.
    direct: bool,
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
            direct: false,
        }
    }

    /// The same piece, uploaded straight from its source when `locked` (the source is
    /// page-locked until the call's streams are synchronised).
    pub(super) fn direct(self, locked: bool) -> Piece {
        Piece {
            direct: locked,
            ..self
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
    pub(super) fn shared(
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

/// The upload of one panel of `a` (the call's span of A) to device buffer `da`.
pub(super) fn panel_piece(
    args: &GemmArgs,
    a: &[f64],
    da: u64,
    place: &PanelPlace,
    single: bool,
) -> Piece {
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

/// Staging buffers of the upload ring (slot 2 holds C).
const RING: [usize; 3] = [0, 1, 3];

/// The pinned ring of `gpu`'s upload thread: three slots of [`Tuning::ring_chunk`] bytes
/// (small enough that a small copy of the emulated route's plan, same copy engine, waits at
/// most about 2 ms behind the queued chunks, large enough that the copy threads' hand-over
/// costs little).
///
/// [`Tuning::ring_chunk`]: super::Tuning::ring_chunk
#[derive(Clone, Copy)]
pub(super) struct Ring {
    slots: [SendPtr<u8>; 3],
    pub(super) chunk: usize,
}

pub(super) fn ring(gpu: &mut Gpu) -> Result<Ring, GpuError> {
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
pub(super) fn feed(
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
                            if p.direct {
                                // paced by the slot events like a staged chunk, so a small
                                // copy on the same engine never queues behind all of it
                                // SAFETY: bytes [off, off + len) of a piece whose source
                                // stays page-locked and alive until this stream is
                                // synchronised below.
                                unsafe { dma_from_source(p, off, len, stream) }?;
                            } else {
                                *job.lock().unwrap_or_else(|p| p.into_inner()) =
                                    Some((ring.slots[slot], p.src_at(off), len, p.runs));
                                start.wait();
                                done.wait();
                                // SAFETY: pinned ring slot of >= len bytes; destination
                                // inside the device buffer the piece was made for.
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
                            }
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

/// Enqueues on `stream` the DMA of bytes [off, off + len) of `p` straight from its source:
/// one copy for a contiguous piece, a 2D copy of whole runs for a strided one (`off` and
/// `len` are whole runs, [`Piece::step`]).
///
/// # Safety
/// The piece's source range must stay alive and unwritten until `stream` has run the copy;
/// its destination must be device memory of the current context.
unsafe fn dma_from_source(
    p: &Piece,
    off: usize,
    len: usize,
    stream: sys::CUstream,
) -> Result<(), GpuError> {
    let src = p.src_at(off).0 as *const std::ffi::c_void;
    let dst = p.dst + off as u64;
    match p.runs {
        // SAFETY: len bytes of the live source and of the destination (the contract).
        None => unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src, len, stream) }
            .result()
            .ctx("cuMemcpyHtoDAsync"),
        Some((width, pitch)) => {
            let copy = sys::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
                srcHost: src,
                srcDevice: 0,
                srcArray: std::ptr::null_mut(),
                srcPitch: pitch,
                dstXInBytes: 0,
                dstY: 0,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: dst,
                dstArray: std::ptr::null_mut(),
                dstPitch: width,
                WidthInBytes: width,
                Height: len / width,
            };
            // SAFETY: len / width runs of width bytes, pitch apart in the live source and
            // packed at the destination (the contract).
            unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream) }
                .result()
                .ctx("cuMemcpy2DAsync")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::grid::{panel_places, row_panels};

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
}
