//! The write-back: copies a result from pinned staging into the caller's C, only the call's
//! rows of each column (or one triangle), on several threads. Every write into the caller's
//! C (here, early writes, a split's commit) goes through [`write_c`].

use super::caller_c::HostC;
use super::tuning::{tuning, write_threads};
use crate::device::{Gpu, sync};
use crate::error::{Context, GpuError};
use cudarc::driver::sys;
use ozaki_core::blas::Uplo;

/// Copies C from the device (contiguous at `src`, leading dimension = its rows) into pinned
/// staging, waits, and only then writes the call's result (or its `uplo` triangle) into the
/// caller's C: nothing of C is touched unless the whole download succeeded.
pub(super) fn copy_out(
    gpu: &mut Gpu,
    src: u64,
    c: &HostC,
    uplo: Option<Uplo>,
) -> Result<(), GpuError> {
    let elems = c.rows() * c.cols();
    let stage = gpu.staging(2, elems * 8)?;
    // SAFETY: staging buffer 2 holds elems doubles; src spans elems doubles on the device.
    unsafe { sys::cuMemcpyDtoHAsync_v2(stage as *mut _, src, elems * 8, gpu.stream) }
        .result()
        .ctx("cuMemcpyDtoHAsync")?;
    sync(gpu.stream)?;
    // SAFETY: staging holds elems doubles just copied from the device, synchronised.
    let staged = unsafe { std::slice::from_raw_parts(stage as *const f64, elems) };
    write_back(c, staged, uplo);
    Ok(())
}

/// Writes C's result (or one triangle of it) from staging (contiguous) into the caller's C:
/// on one thread for a small C, else on [`write_threads`].
pub(super) fn write_back(c: &HostC, staged: &[f64], uplo: Option<Uplo>) {
    let t = if c.rows() * c.cols() < (1 << 19) {
        1
    } else {
        write_threads()
    };
    write_c(c, staged, uplo, t);
}

/// Writes `staged` (C's values, contiguous) into the caller's C on `threads` threads with
/// the tuning's copy kind: rows `0..rows` of each column (or the `uplo` triangle), never the
/// rows between C's columns.
pub(crate) fn write_c(c: &HostC, staged: &[f64], uplo: Option<Uplo>, threads: usize) {
    c.write_from(staged, uplo, threads, tuning().write_back);
}
