//! Host-to-device transfers: the pinned upload ring, the upload thread ([`feed`]) that fills
//! it on several copy threads while the copy engine drains it, and the pieces it moves
//! (including a split's panels of A copied on to the peer devices).

use super::caller_c::HostC;
use super::grid::PanelPlace;
use super::tuning::{Tuning, copy_threads, tuning};
use super::{Handle, PanelBoard, SendPtr, record};
use crate::device::{Gpu, sync};
use crate::error::{Context, GpuError};
use crate::host_copy::{self, CopyKind};
use cudarc::driver::sys;
use ozaki_core::blas::{GemmArgs, Trans, span};

/// Copies `src` to device address `dst` through the two pinned staging buffers.
pub(crate) fn upload(gpu: &mut Gpu, dst: u64, src: &[f64]) -> Result<(), GpuError> {
    upload_piece(gpu, &Piece::new(dst, src))
}

/// Copies the piece to its device range through the two pinned staging buffers, each chunk
/// filled on several threads (large copies between pageable and pinned memory are limited
/// by one core's bandwidth otherwise).
///
/// The two buffers are the upload ring's first two slots at the ring's size
/// ([`Tuning::ring_chunk`]), so an unpipelined call (a syrk's A, a small gemm's operands)
/// reuses what the warm-up and the pipelined calls allocated. Buffers of another size would
/// regrow the slots (`cuMemHostAlloc`, which page-locks every page) inside the first call
/// that asks for them: at 64 MiB beside the ring's 32 MiB, a LOBPCG run's first GPU `dsyrk`
/// spent 40-46 ms in transfers (about 5 ms for the next ones); at the ring's size it took
/// 7.5-21.9 ms (BENCHMARKS.md, "Real programs under the shim").
///
/// [`Tuning::ring_chunk`]: super::Tuning::ring_chunk
pub(super) fn upload_piece(gpu: &mut Gpu, p: &Piece) -> Result<(), GpuError> {
    let stream = gpu.copy_stream;
    let Tuning {
        ring_chunk: chunk,
        upload: kind,
        ..
    } = tuning();
    let step = p.step(chunk);
    let mut events: [Option<sys::CUevent>; 2] = [None, None];
    let result = (|| {
        for (i, off) in (0..p.bytes).step_by(step.max(1)).enumerate() {
            let len = step.min(p.bytes - off);
            let slot = i % 2;
            if let Some(e) = events[slot] {
                // SAFETY: e was recorded after the copy that last read this staging buffer.
                unsafe { sys::cuEventSynchronize(e) }
                    .result()
                    .ctx("cuEventSynchronize")?;
            }
            let stage = SendPtr(gpu.staging(RING[slot], chunk)?);
            let src = p.src_at(off);
            let t = if len < (4 << 20) { 1 } else { copy_threads() };
            ozaki_core::spawn::by_parts(t, t, &|parts| {
                let (stage, src) = (&stage, &src);
                for w in parts {
                    // SAFETY: staging holds chunk >= len bytes and no copy is reading it
                    // (waited above); [off, off + len) lies inside the piece's source.
                    unsafe { copy_part(stage.0, src.0, len, p.runs, (w, t), kind) };
                }
            });
            // SAFETY: pinned source of len bytes, device destination inside dst's span.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(p.dst + off as u64, stage.0 as *const _, len, stream)
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

/// Part `w` of `parts` of copying `len` bytes of a piece, from `src` (the piece's source at
/// a chunk's first byte, [`Piece::src_at`]) into `dst` (a ring slot or staging, filled in
/// order): for a strided source (`runs`: run width, source pitch) whole runs, run r from
/// `src + r pitch` to `dst + r width`, so nothing between the runs is read; otherwise an
/// equal share of the bytes.
///
/// # Safety
/// `dst..dst + len` is writable and read by no one meanwhile; the source bytes of the chunk
/// (`len / width` runs `pitch` apart, or `len` bytes) are readable and not written
/// meanwhile; `len` is whole runs for a strided source ([`Piece::step`]).
unsafe fn copy_part(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    runs: Option<(usize, usize)>,
    (w, parts): (usize, usize),
    kind: CopyKind,
) {
    match runs {
        Some((width, pitch)) => {
            let n = len / width;
            let per = n.div_ceil(parts);
            for r in (w * per).min(n)..((w + 1) * per).min(n) {
                // SAFETY: run r of the chunk (the contract); streaming copies are fenced.
                unsafe { host_copy::copy(dst.add(r * width), src.add(r * pitch), width, kind) };
            }
        }
        None => {
            let per = len.div_ceil(parts);
            let (lo, hi) = ((w * per).min(len), ((w + 1) * per).min(len));
            // SAFETY: [lo, hi) of the chunk (the contract); a streaming copy is fenced.
            unsafe { host_copy::copy(dst.add(lo), src.add(lo), hi - lo, kind) };
        }
    }
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

    /// The caller's C (or a block of its columns), packed one column after the other at
    /// `dst`: rows `0..rows` of each column, never the rows between them. A ring chunk holds
    /// whole columns ([`Piece::step`]), so a column longer than `chunk` bytes makes a piece
    /// of its own (contiguous, cut anywhere).
    pub(super) fn columns(dst: u64, c: &HostC, chunk: usize) -> Vec<Piece> {
        let (width, pitch) = (8 * c.rows(), 8 * c.ld());
        let piece = |dst: u64, src: *const f64, cols: usize| Piece {
            dst,
            src: SendPtr(src as *mut u8),
            bytes: width * cols,
            runs: (width != pitch && width > 0 && cols > 1).then_some((width, pitch)),
            peers: Vec::new(),
            ctx: Handle(std::ptr::null_mut()),
            publish: None,
            direct: false,
        };
        if width <= chunk {
            return vec![piece(dst, c.as_ptr(), c.cols())];
        }
        (0..c.cols())
            .map(|j| {
                // SAFETY: column j's first element lies inside C (j < cols).
                let at = unsafe { c.as_ptr().add(j * c.ld()) };
                piece(dst + (j * width) as u64, at, 1)
            })
            .collect()
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
                    // SAFETY: the chunk of a live source and a ring slot no DMA is reading;
                    // a streaming copy is fenced before `done` hands the slot to the DMA.
                    unsafe { copy_part(d.0, src.0, bytes, runs, (w, workers), kind) };
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

    /// Moves `piece` as the upload thread does, on plain host memory: chunk by chunk
    /// ([`Piece::step`] of a `chunk`-byte ring slot), each chunk filled by `workers` parts
    /// ([`copy_part`]) into a slot, which then "DMAs" into `dev` (a device buffer from
    /// address `base`).
    fn through_ring(piece: &Piece, chunk: usize, workers: usize, base: u64, dev: &mut [f64]) {
        let mut slot = vec![0f64; chunk / 8];
        let step = piece.step(chunk);
        let mut off = 0;
        while off < piece.bytes {
            let len = step.min(piece.bytes - off);
            assert!(len <= chunk, "a chunk overflows its slot");
            slot.fill(f64::NAN);
            let dst = slot.as_mut_ptr() as *mut u8;
            for w in 0..workers {
                // SAFETY: the slot holds len bytes; the chunk's source lies inside the
                // piece's (a live C).
                unsafe {
                    copy_part(
                        dst,
                        piece.src_at(off).0,
                        len,
                        piece.runs,
                        (w, workers),
                        CopyKind::Memcpy,
                    )
                };
            }
            let at = ((piece.dst - base) as usize + off) / 8;
            dev[at..at + len / 8].copy_from_slice(&slot[..len / 8]);
            off += len;
        }
    }

    /// The caller's C with gaps (NaN in rows m..ld) goes through the ring straight from its
    /// columns, as the pipeline uploads it (each column block's pieces, `Piece::columns` of
    /// `HostC::part`): with a slot holding several, one, or less than one column, and one or
    /// several workers per chunk, the device holds C contiguous (leading dimension m) and
    /// exactly, none of the gap rows (which would show as NaN), and C is unchanged.
    #[test]
    fn a_c_with_gaps_lands_contiguous_from_its_own_columns() {
        let (m, n, ld) = (13usize, 10usize, 17usize);
        let orig: Vec<f64> = (0..span(m, n, ld))
            .map(|i| if i % ld < m { i as f64 } else { f64::NAN })
            .collect();
        let want: Vec<f64> = (0..m * n).map(|e| orig[e % m + e / m * ld]).collect();
        for (chunk, workers) in [(8 * m * 3, 1), (8 * m * 3 + 40, 3), (8 * m, 2), (40, 2)] {
            for blocks in [vec![(0, n)], vec![(0, 4), (4, 4), (8, 2)]] {
                let mut c = orig.clone();
                let view = HostC::of_slice(&mut c, m, n, ld).unwrap();
                let base = 1u64 << 20;
                let mut dev = vec![f64::NAN; m * n];
                for &(c0, w) in &blocks {
                    let block = view.part(0, c0, m, w).unwrap();
                    for piece in Piece::columns(base + 8 * (c0 * m) as u64, &block, chunk) {
                        through_ring(&piece, chunk, workers, base, &mut dev);
                    }
                }
                assert_eq!(dev, want, "slot {chunk}, {workers} workers, {blocks:?}");
                for (x, y) in c.iter().zip(&orig) {
                    assert_eq!(x.to_bits(), y.to_bits(), "C changed");
                }
            }
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
