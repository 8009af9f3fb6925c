//! Writing C into the caller's memory while the rest of a host-resident call still runs
//! (the host-resident path and the split over several GPUs).
//!
//! The pipelined host path ([`crate::host::staged_gemm`]) can leave C in pinned staging for
//! the caller to copy into its own memory afterwards: at 32768² that serial tail is 8.6 GB,
//! about 0.1 s of a 0.85 s split, and 7-8 ms of a 40 ms call at 8192 (BENCHMARKS.md,
//! "Host-resident path and split"). When beta == 0 the call never reads C, so each column
//! block can be written as soon as it is downloaded and the call may write it:
//! - **gpu-native writes at once**: it has no data-dependent failure.
//! - **gpu-ozaki writes once the whole call is accepted** (by default): after its whole
//!   call's accuracy rule accepted the operands (NaN/Inf, exponent range, accuracy), which it
//!   knows once the last part was uploaded and converted; in a split only when every tile
//!   got that far ([`Gate`]). So every failure the data can cause leaves C untouched. The
//!   blocks written after that overlap the remaining products. Writing each block as it
//!   arrives instead (`Tuning::ozaki_write`, `downloaded`) made the uploads' staging copies
//!   share the host's memory with the writes, and the calls slower (BENCHMARKS.md,
//!   "Host-resident calls at the link bound").
//! - **A failure after writing began** (a CUDA error at a later synchronisation, or a data
//!   decline under `downloaded`) can leave C partly written. With beta == 0 that C is no
//!   input: the shim's fallback computes the whole call again from A and B
//!   (`shim::route::execute`) and writes all of C, so the program receives one complete
//!   result, never a mixture.
//!
//! With beta != 0, C is an input of the fallback and is written only after success.
//!
//! The blocks come home through C's download ring (`crate::host::c_ring`): a few pinned
//! slots the writer empties into the caller's C, not a pinned buffer the size of C. Until
//! the go the writer holds the slots it got, so the download waits with the rest of C still
//! on the device.

use crate::error::{Context, GpuError};
use crate::host::{CRing, Filled, Giver, Handle, HostC, empty_slots, write_c};
use cudarc::driver::sys;
use std::sync::mpsc::Receiver;
use std::sync::{Condvar, Mutex};

/// Where a call may write C early: the caller's C (the call's or the tile's, whose blocks
/// `host::CBlock` places) and the host threads a tail write-back of it would use.
#[derive(Clone, Copy)]
pub(crate) struct EarlyC<'g> {
    pub c: HostC<'g>,
    pub threads: usize,
    /// Says whether the whole call (every tile of a split) may write; called once by the
    /// compute thread when its own tile may, blocking until the others say.
    pub gate: Option<&'g Gate>,
}

/// The meeting of a split's tiles: each tile arrives once it may write (at once, or once
/// its own units passed their checks); writing may start when all arrived, never when one
/// failed.
pub(crate) struct Gate {
    state: Mutex<(usize, bool)>,
    all: Condvar,
    tiles: usize,
}

impl Gate {
    pub fn new(tiles: usize) -> Gate {
        Gate {
            state: Mutex::new((0, false)),
            all: Condvar::new(),
            tiles,
        }
    }

    /// This tile passed; waits for the others. True when all passed, false when one failed.
    pub fn arrive(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        self.all.notify_all();
        while s.0 < self.tiles && !s.1 {
            s = self.all.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        !s.1
    }

    /// A tile failed: nobody writes early, and nobody waits for it any more.
    pub fn fail(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.all.notify_all();
    }
}

impl EarlyC<'_> {
    /// The writer's go (see the module doc), sent when this call may write (in a split, after
    /// waiting for every tile): `None` when writing must not start, else the
    /// threads to write with: half of [`EarlyC::threads`] while the upload's copy threads
    /// still run beside the writer (both are host-memory bound), all once every upload is
    /// done.
    pub fn go(&self, uploads_done: bool) -> Option<usize> {
        let threads = if uploads_done {
            self.threads
        } else {
            (self.threads / 2).max(1)
        };
        self.gate.is_none_or(Gate::arrive).then_some(threads)
    }
}

/// The writer thread: waits for the go ([`EarlyC::go`]; a dropped sender means the call
/// failed first), then has go's number of threads write the filled slots of C's ring into
/// the caller's C, each piece as soon as its download event fired and by one thread, giving
/// each slot back once it is written; a later `Some(n)` on `go` grows the writers to `n`
/// (the uploads' copy threads are done), and the writer returns only once `go`'s sender is
/// gone. Without a go, or after a failed wait, the slots are given back unwritten (so the
/// download never waits for ever). Returns whether every piece was written.
pub(crate) fn writer(
    ctx: Handle<sys::CUcontext>,
    early: EarlyC<'_>,
    ring: &CRing,
    go: Receiver<Option<usize>>,
    filled: Receiver<Filled>,
    free: Giver,
) -> Result<bool, GpuError> {
    let Some(threads) = go.recv().ok().flatten() else {
        empty_slots(filled, free, 1, None, &|_| false);
        return Ok(false);
    };
    let failure = Mutex::new(None);
    // whole values into the closure (its fields alone are raw pointers, not Sync)
    let (ctx, c) = (&ctx, &early.c);
    empty_slots(filled, free, threads, Some(go), &|f| {
        let ctx = *ctx;
        // SAFETY: the caller's context, retained for the process.
        let synced = unsafe { sys::cuCtxSetCurrent(ctx.0) }
            .result()
            .ctx("cuCtxSetCurrent")
            .and_then(|()| {
                // SAFETY: recorded by the download thread after the copy into this slot,
                // which is not refilled before it is given back.
                unsafe { sys::cuEventSynchronize(ring.ready(f.slot)) }
                    .result()
                    .ctx("cuEventSynchronize")
            });
        if let Err(e) = synced {
            *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            return false;
        }
        let b = f.block;
        let Some(part) = c.part(0, b.col0, b.rows, b.cols) else {
            *failure.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(GpuError::Cuda("a block of C outside the caller's C".into()));
            return false;
        };
        // SAFETY: the slot holds the piece's rows x cols values (a slot holds at least
        // `piece_bytes`, and pieces are cut to fit), downloaded (its event fired above); it
        // is not refilled before it is given back.
        let staged =
            unsafe { std::slice::from_raw_parts(ring.slot(f.slot) as *const f64, b.rows * b.cols) };
        // pieces are disjoint columns and only the writer threads write the caller's C
        // during the call
        write_c(&part, staged, None, 1);
        true
    });
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn gate_opens_only_when_every_tile_arrives_and_never_after_a_failure() {
        let g = Arc::new(Gate::new(3));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || g.arrive())
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(waiters.iter().all(|w| !w.is_finished()), "opened early");
        assert!(g.arrive());
        assert!(waiters.into_iter().all(|w| w.join().unwrap()));

        let g = Arc::new(Gate::new(2));
        let w = {
            let g = g.clone();
            std::thread::spawn(move || g.arrive())
        };
        g.fail();
        assert!(!w.join().unwrap(), "a failed tile must close the gate");
        assert!(!g.arrive());
    }
}
