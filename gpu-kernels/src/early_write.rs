//! Writing C into the caller's memory while the rest of a host-resident call still runs
//! (issue #4's host-resident bound, issue #7's split).
//!
//! The pipelined host path ([`crate::host::staged_gemm`]) leaves C in pinned staging and the
//! caller copies it into its own memory afterwards: at 32768² that serial tail is 8.6 GB, about
//! 0.1 s of a 0.85 s split, and 7-8 ms of a 40 ms call at 8192 (session 3, helper host3).
//! When beta == 0 the call never reads C, so each column block can be written as soon as it is
//! in staging, under two rules that keep what the program sees exactly as before:
//! - **No write before the whole call is accepted.** Writing starts only once every
//!   data-dependent check of the call has passed: at once for gpu-native (which has none),
//!   and for gpu-ozaki after the last unit's moduli plan accepted its operands (NaN/Inf,
//!   exponent range, accuracy), and in a split only when every tile got that far ([`Gate`]).
//!   So every failure the data can cause still leaves C untouched, whatever beta is.
//! - **A device fault after that** (a CUDA error at a later synchronisation) can leave C
//!   partly written. With beta == 0 that C is never read: the shim's fallback computes the
//!   whole call again from A and B (`shim::route::execute`), so the program still receives
//!   one complete result, never a mixture.
//!
//! With beta != 0, C is an input of the fallback and is written only after success, as before.

use crate::error::{Context, GpuError};
use crate::host::{Handle, SendPtr, write_columns};
use cudarc::driver::sys;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Condvar, Mutex};

/// Where a call may write C early: the caller's span of C (the call's or the tile's, same
/// leading dimension as staging) and the host threads a tail write-back of it would use.
#[derive(Clone, Copy)]
pub(crate) struct EarlyC<'g> {
    pub c: SendPtr<f64>,
    pub threads: usize,
    /// Says whether the whole call (every tile of a split) was accepted; called once by the
    /// compute thread when its own units were, blocking until the others say.
    pub gate: Option<&'g Gate>,
}

/// One column block in staging, ready once `ready` fired: `cols` columns of `rows` rows from
/// element offset `off` (leading dimension `ld`) of staging and of the caller's C.
pub(crate) struct Block {
    pub ready: Handle<sys::CUevent>,
    pub off: usize,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

/// The acceptance meeting of a split's tiles: each tile arrives once its own units passed
/// their checks; writing may start when all arrived, never when one failed.
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
    /// The writer's go (see the module doc), sent once this call's own units passed (in a
    /// split, after waiting for every tile): `None` when writing must not start, else the
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
/// failed first), then writes each block from `staged` into the caller's C as
/// soon as its download event fired. Returns whether every block was written. Every event
/// received is destroyed, written or not.
pub(crate) fn writer(
    ctx: Handle<sys::CUcontext>,
    early: EarlyC<'_>,
    staged: SendPtr<f64>,
    go: Receiver<Option<usize>>,
    blocks: Receiver<Block>,
) -> Result<bool, GpuError> {
    // SAFETY: the caller's context, retained for the process.
    unsafe { sys::cuCtxSetCurrent(ctx.0) }
        .result()
        .ctx("cuCtxSetCurrent")?;
    let threads = go.recv().ok().flatten();
    let mut write = threads.is_some();
    let threads = threads.unwrap_or(1);
    let mut result = Ok(write);
    for b in blocks {
        if write {
            // SAFETY: recorded by the download thread after the block's last piece.
            let synced = unsafe { sys::cuEventSynchronize(b.ready.0) }
                .result()
                .ctx("cuEventSynchronize");
            match synced {
                // SAFETY: the block lies inside both spans (the caller's C and staging, same
                // leading dimension); its download completed; blocks are disjoint and only
                // this thread writes the caller's C during the call.
                Ok(()) => unsafe {
                    write_columns(
                        early.c.0.add(b.off),
                        staged.0.add(b.off),
                        (b.rows, b.cols, b.ld),
                        None,
                        threads,
                    )
                },
                Err(e) => {
                    write = false;
                    result = Err(e);
                }
            }
        }
        // SAFETY: created for this block and no longer used by anyone.
        unsafe {
            let _ = sys::cuEventDestroy_v2(b.ready.0);
        }
    }
    result
}

/// Sender side of [`writer`]'s blocks, for the download thread.
pub(crate) type BlockSender = Sender<Block>;

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
