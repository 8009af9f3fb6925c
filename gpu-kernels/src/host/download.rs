//! Device-to-host transfers of a pipelined gemm: the download thread ([`drain`]) copies each
//! finished block of C into pinned staging in small pieces (so the emulated route's small
//! copies are not stuck behind a block) and, with early writes, hands it on to the writer.

use super::{Handle, SendPtr, record, wait};
use crate::early_write;
use crate::error::{Context, GpuError};
use cudarc::driver::sys;

/// Bytes per download chunk of C: the download thread keeps at most two queued (see
/// [`drain`]).
const D2H_CHUNK: usize = 16 << 20;

/// One block's download: once `done` (recorded on the compute stream) has fired, `bytes`
/// from device address `src` to pinned `dst`.
pub(super) struct Download {
    pub(super) done: Handle<sys::CUevent>,
    pub(super) src: u64,
    pub(super) dst: SendPtr<u8>,
    pub(super) bytes: usize,
    /// The block's place in C (element offset, rows, columns, leading dimension), for the
    /// early writer.
    pub(super) place: (usize, usize, usize, usize),
}

/// The download thread: copies each block of C to pinned staging on `stream` in
/// [`D2H_CHUNK`] pieces with at most two queued, so a small copy of the emulated route's next
/// plan (same copy engine) waits behind at most two pieces instead of a whole block.
/// With `early`, each block's completion is handed on to the early writer
/// ([`early_write::writer`]) as an event recorded after its last piece.
pub(super) fn drain(
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
