//! A host-resident gemm made beside other BLAS calls does its host copies outside the GPU's
//! lock: it copies op(A) and op(B) into pinned memory of its own before it queues for the
//! GPU ([`Operands`]), and takes C home in a pinned buffer of its own, which it writes into
//! the caller's memory after giving the GPU up ([`take`]).
//!
//! The copies between the caller's (pageable) memory and pinned memory are host work: they
//! need no GPU, only the caller's share of the cores. Inside the lock they made every caller
//! behind it wait for them. PySCF's CCSD calls `dgemm` from 16 OpenMP threads at once; its
//! 1953 x 122 x 1953 products held the GPU 3.6-6.8 ms each (0.04 ms of product, the rest
//! moving the 30.5 MB of A through the pinned ring on the one copy thread its share of the
//! cores allows) and queued 6-65 ms behind one another (H100 host, BENCHMARKS.md "Real
//! programs under the shim"). With the copies outside, a call holds the GPU for its DMA and
//! its product, and each caller's copies run beside the others' GPU work.
//!
//! A call does so when another BLAS call is in flight ([`super::tuning`]'s sharers) and its
//! C is small enough (`ozaki_core::host_pipeline::hands_off_c`, which the engine prices with
//! too); it copies its operands apart only up to `copies_operands_apart`'s size. C then comes
//! home whole into the GPU's C staging, which the call takes with it, leaving a spare buffer
//! of the pool in its place; after the write it gives the buffer back ([`give_back`]). A
//! single caller keeps the early writes (`early_write`), which overlap the write with the
//! download of a large C, and the pinned ring.
//!
//! The pool holds buffers of the default GPU's context (the only one `gemm_c` runs on), at
//! most [`POOL_BYTES`] together; a buffer beyond that is freed. A buffer for the operands is
//! allocated outside the lock once the GPU is up (portable, so the GPU's context DMAs from
//! it whichever context is current). A thread with no context current binds the GPU's
//! first, as its call would inside the lock, so that its first call copies apart too.
//! Page-locking is slow and the driver serialises it, so the GPU start's warm-up puts the
//! buffers for the callers that started it into the pool beforehand ([`reserve`]). Before
//! the GPU is up the call stages its operands through the ring as a single caller does.

use super::compact::columns;
use crate::device::Gpu;
use crate::error::GpuError;
use crate::memory::PinnedBuffer;
use ozaki_core::blas::GemmArgs;
use std::sync::Mutex;

/// The most pinned memory the spare buffers keep together.
const POOL_BYTES: usize = 1 << 30;

/// Spare C buffers, in no order.
static SPARE: Mutex<Vec<PinnedBuffer>> = Mutex::new(Vec::new());

/// A call's op(A) and op(B), each packed (leading dimension = its rows) into one pinned
/// buffer of the pool before the call queues for the GPU; the buffer goes back to the pool
/// with [`Operands::give_back`] once the call's transfers are done.
pub(super) struct Operands {
    buf: PinnedBuffer,
    /// op(A)'s stored rows and columns (A's, before the transpose).
    a: (usize, usize),
    /// op(B)'s, likewise; B starts right after A.
    b: (usize, usize),
}

impl Operands {
    /// `args`'s A and B copied into a pinned buffer on this thread, or `None` when no
    /// buffer can be had here: none in the pool big enough and no CUDA context current on
    /// this thread to allocate one (a thread's first GPU call makes it current).
    pub(super) fn stage(args: &GemmArgs) -> Option<Operands> {
        let (a, b) = (args.a_dims(), args.b_dims());
        let elems = a.0 * a.1 + b.0 * b.1;
        let mut buf = pinned_at_least(elems * 8)?;
        // SAFETY: the buffer holds at least `elems` doubles and is this call's alone.
        let dst = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut f64, elems) };
        // A's columns, then B's, each packed (leading dimension = its rows)
        let mut at = 0;
        for col in columns(args.a, a, args.lda).chain(columns(args.b, b, args.ldb)) {
            dst[at..at + col.len()].copy_from_slice(col);
            at += col.len();
        }
        Some(Operands { buf, a, b })
    }

    /// `args` with A and B read from the pinned copies.
    pub(super) fn args<'s>(&'s self, args: &GemmArgs<'_>) -> GemmArgs<'s> {
        let na = self.a.0 * self.a.1;
        // SAFETY: `stage` wrote na doubles of A and then B's doubles at the buffer's start;
        // the buffer lives as long as `self`.
        let all = unsafe {
            std::slice::from_raw_parts(self.buf.as_ptr() as *const f64, na + self.b.0 * self.b.1)
        };
        let (a, b) = all.split_at(na);
        GemmArgs {
            a,
            lda: self.a.0.max(1),
            b,
            ldb: self.b.0.max(1),
            ..*args
        }
    }

    /// The buffer back to the pool (the call's uploads are done).
    pub(super) fn give_back(self) {
        give_back(self.buf);
    }
}

/// A pinned buffer of at least `bytes`: the pool's smallest that fits, else a new one,
/// allocated in the context current on this thread or, when there is none, the GPU's;
/// none before the GPU was initialised (the call then finds out whether there is one,
/// staging through the ring).
fn pinned_at_least(bytes: usize) -> Option<PinnedBuffer> {
    if !crate::device::default_ready() {
        return None;
    }
    {
        let mut spare = lock();
        if let Some(i) = index_for(&lens(&spare), bytes).filter(|&i| spare[i].len() >= bytes) {
            return Some(spare.swap_remove(i));
        }
    }
    context_here().then(|| PinnedBuffer::portable(bytes).ok())?
}

/// Whether a context is current on this thread to allocate pinned memory in, binding the
/// GPU's when there is none (a thread that has not called on the GPU yet). The buffers are
/// portable: pinned for the GPU's context whichever context is current here.
fn context_here() -> bool {
    match crate::device::current_context() {
        Ok(current) => !current.is_null() || crate::device::bind_default_context(),
        Err(_) => false,
    }
}

/// Puts `count` new pinned buffers of `bytes` into the pool, or as many as [`POOL_BYTES`]
/// leaves room for; returns how many it allocated. The GPU start's warm-up
/// does this for the calls that started it, off their path: page-locking is slow and the
/// driver serialises it, so 16 callers growing a buffer each at once wait for one another
/// (PySCF's first round of 1953 x 122 x 1953 products on the GPU: up to 220 ms a call
/// against 27-30 ms in later rounds; H100 host, BENCHMARKS.md "The start narrowing and the
/// vendor's spin, side by side").
pub(super) fn reserve(bytes: usize, count: usize) -> usize {
    if !context_here() {
        return 0;
    }
    let mut added = 0;
    while added < count {
        let held: usize = lens(&lock()).iter().sum();
        if held + bytes > POOL_BYTES {
            break;
        }
        let Ok(buf) = PinnedBuffer::portable(bytes) else {
            break;
        };
        give_back(buf);
        added += 1;
    }
    added
}

fn lens(spare: &[PinnedBuffer]) -> Vec<usize> {
    spare.iter().map(PinnedBuffer::len).collect()
}

/// The GPU's staging buffer `slot`, which holds the call's C, in exchange for a spare one
/// (the smallest spare that holds `bytes`, else the largest; a 64-byte one when there is
/// none: the GPU's next call grows it).
pub(super) fn take(gpu: &mut Gpu, slot: usize, bytes: usize) -> Result<PinnedBuffer, GpuError> {
    let spare = match pick(&mut lock(), bytes) {
        Some(b) => b,
        None => PinnedBuffer::new(64)?,
    };
    gpu.swap_staging(slot, spare).map_err(|spare| {
        give_back(spare);
        GpuError::Cuda("no staged C to hand off".into())
    })
}

/// Returns a buffer taken with [`take`] to the pool, or frees it when the pool is full.
pub(super) fn give_back(buf: PinnedBuffer) {
    let mut spare = lock();
    let held: usize = lens(&spare).iter().sum();
    if held + buf.len() <= POOL_BYTES {
        spare.push(buf);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<PinnedBuffer>> {
    SPARE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes out of `spare` the smallest buffer of at least `bytes`, else the largest.
fn pick(spare: &mut Vec<PinnedBuffer>, bytes: usize) -> Option<PinnedBuffer> {
    let i = index_for(&lens(spare), bytes)?;
    Some(spare.swap_remove(i))
}

/// Of buffers of `lens` bytes, the one [`pick`] takes for `bytes`.
fn index_for(lens: &[usize], bytes: usize) -> Option<usize> {
    let fits = lens
        .iter()
        .enumerate()
        .filter(|(_, l)| **l >= bytes)
        .min_by_key(|(_, l)| **l);
    fits.or_else(|| lens.iter().enumerate().max_by_key(|(_, l)| **l))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_spare_that_holds_c_is_taken_else_the_largest() {
        let lens = [64, 40 << 20, 31 << 20, 8 << 20];
        assert_eq!(index_for(&lens, 30 << 20), Some(2));
        assert_eq!(index_for(&lens, 35 << 20), Some(1));
        assert_eq!(index_for(&lens, 50 << 20), Some(1));
        assert_eq!(index_for(&lens, 1), Some(0));
        assert_eq!(index_for(&[], 1), None);
    }
}
