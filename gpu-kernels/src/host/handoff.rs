//! C handed off the GPU: a host-resident call made beside other BLAS calls leaves its result
//! in a pinned buffer of its own, so that the GPU's lock is given up before the copy into
//! the caller's C, not after it.
//!
//! The copy from pinned staging into the caller's (pageable) C is host work: it needs no
//! GPU, only the caller's share of the cores. Inside the lock it made every caller behind
//! it wait for it. PySCF's CCSD calls `dgemm` from 16 OpenMP threads at once; its 1953 x 122
//! x 1953 products held the GPU 2.4-6.1 ms each (0.04 ms of product, the rest moving 34 MB,
//! most of it the write of C on the one write thread its share of the cores allows) and
//! queued 6-65 ms behind one another (H100 host, BENCHMARKS.md "Real programs under the
//! shim"). Handed off, each caller writes its own C while the next one's DMA runs.
//!
//! A call hands its C off when another BLAS call is in flight ([`super::tuning`]'s sharers)
//! and its C is small enough (`ozaki_core::host_pipeline::hands_off_c`, which the engine
//! prices with too): C then comes home whole into the GPU's C staging,
//! which the call takes with it ([`take`]), leaving a spare buffer of the pool in its place;
//! after the write it gives the buffer back ([`give_back`]). A single caller keeps the early
//! writes (`early_write`), which overlap the write with the download of a large C.
//!
//! The pool holds buffers of the default GPU's context (the only one `gemm_c` runs on), at
//! most [`POOL_BYTES`] together; a buffer beyond that is freed.

use crate::device::Gpu;
use crate::error::GpuError;
use crate::memory::PinnedBuffer;
use std::sync::Mutex;

/// The most pinned memory the spare buffers keep together.
const POOL_BYTES: usize = 1 << 30;

/// Spare C buffers, in no order.
static SPARE: Mutex<Vec<PinnedBuffer>> = Mutex::new(Vec::new());

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
    let held: usize = spare.iter().map(PinnedBuffer::len).sum();
    if held + buf.len() <= POOL_BYTES {
        spare.push(buf);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<PinnedBuffer>> {
    SPARE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes out of `spare` the smallest buffer of at least `bytes`, else the largest.
fn pick(spare: &mut Vec<PinnedBuffer>, bytes: usize) -> Option<PinnedBuffer> {
    let i = index_for(
        &spare.iter().map(PinnedBuffer::len).collect::<Vec<_>>(),
        bytes,
    )?;
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
