//! Device-to-host transfers of a pipelined gemm: the download thread ([`drain`]) copies each
//! finished block of C home in pieces of whole columns (so the emulated route's small copies
//! are not stuck behind a block): into C's pinned staging, or with early writes through C's
//! download ring to the writer ([`super::c_ring`]).

use super::c_ring::{CRing, Filled, Taker, fill_slot};
use super::grid::CBlock;
use super::{Handle, SendPtr, record, wait};
use crate::error::{Context, GpuError};
use cudarc::driver::sys;
use std::sync::mpsc::{Receiver, Sender};

/// Bytes per download piece of C into staging: the download thread keeps at most two
/// queued, or as many smaller ring pieces as make the same bytes (see [`drain`]).
const D2H_CHUNK: usize = 16 << 20;

/// One block's download: once `done` (recorded on the compute stream) has fired, `block`
/// of the device's C.
pub(super) struct Download {
    pub(super) done: Handle<sys::CUevent>,
    pub(super) block: CBlock,
}

/// Where the blocks of C go.
pub(super) enum Sink<'r> {
    /// C's pinned staging, laid out like the device's C (contiguous; beta != 0: written
    /// into the caller's C after success).
    Staging(SendPtr<f64>),
    /// C's download ring, each filled slot handed on to the early writer.
    Ring {
        ring: &'r CRing,
        free: Taker,
        filled: Sender<Filled>,
    },
}

/// The download thread: copies each block of C, from device address `dev_c` (the call's C),
/// on `stream` in pieces of whole columns ([`D2H_CHUNK`], or a ring slot) with at most
/// 2 [`D2H_CHUNK`] queued (at least two pieces), so a small copy of the emulated route's next
/// plan (same copy engine) waits behind about that instead of a whole block. Into the ring, each piece first waits for a
/// free slot, and after its copy the slot's event is recorded and the slot handed on.
pub(super) fn drain(
    (ctx, stream): (Handle<sys::CUcontext>, Handle<sys::CUstream>),
    dev_c: u64,
    jobs: Receiver<Download>,
    sink: Sink<'_>,
) -> Result<(), GpuError> {
    let stream = stream.0;
    // SAFETY: the caller's context, retained for the process.
    unsafe { sys::cuCtxSetCurrent(ctx.0) }
        .result()
        .ctx("cuCtxSetCurrent")?;
    let piece_bytes = match &sink {
        Sink::Staging(_) => D2H_CHUNK,
        Sink::Ring { ring, .. } => ring.piece_bytes,
    };
    let queued = (2 * D2H_CHUNK / piece_bytes.max(1)).clamp(2, 16);
    let mut evs: Vec<sys::CUevent> = Vec::with_capacity(queued);
    let r = (|| -> Result<(), GpuError> {
        for _ in 0..queued {
            evs.push(
                cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                    .ctx("cuEventCreate")?,
            );
        }
        let mut issued = 0usize;
        // copies `piece` to pinned `dst`, at most `queued` pieces queued
        let mut copy = |piece: CBlock, dst: *mut u8| -> Result<(), GpuError> {
            let slot = issued % queued;
            if issued >= queued {
                // SAFETY: recorded after the piece issued `queued` before this one.
                unsafe { sys::cuEventSynchronize(evs[slot]) }
                    .result()
                    .ctx("cuEventSynchronize")?;
            }
            // SAFETY: the piece lies inside the device's C and `dst` holds its bytes (pinned
            // staging at the same offset, or a ring slot of at least `piece_bytes`);
            // stream-ordered after the block's compute.
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    dst as *mut _,
                    dev_c + 8 * piece.off() as u64,
                    piece.bytes(),
                    stream,
                )
            }
            .result()
            .ctx("cuMemcpyDtoHAsync")?;
            record(evs[slot], stream)?;
            issued += 1;
            Ok(())
        };
        for job in jobs {
            wait(stream, job.done.0)?;
            match &sink {
                Sink::Staging(c) => {
                    for piece in job.block.pieces(piece_bytes) {
                        // SAFETY: the staging holds the call's m x n C.
                        copy(piece, unsafe { c.0.add(piece.off()) } as *mut u8)?;
                    }
                }
                Sink::Ring { ring, free, filled } => {
                    for piece in job.block.pieces(piece_bytes) {
                        fill_slot(free, piece, filled, |slot| {
                            copy(piece, ring.slot(slot))?;
                            record(ring.ready(slot), stream)
                        })?;
                    }
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
