//! Warm-up after the GPU start: what the first real call would otherwise pay on top of its
//! work.
//!
//! The first host-resident 4096² gpu-native call of a NumPy process spent 58 ms in its
//! products phase against 2.4 ms later (H200, BENCHMARKS.md "GPU start-up off the first call"): cuBLAS loads the
//! kernels it picks on their first launch (CUDA lazy loading), and the host path's events,
//! streams and small buffers are set up on first use. The shim's background start
//! (`route::start`) runs [`warm_up`] on its thread after the initialisation, while calls still
//! go to the vendor BLAS, so that cost leaves the first GPU call. It does not grow the pinned
//! staging to a large call's size (the staging is grown by the call that needs it), but it
//! does allocate the pinned buffers concurrent callers copy their operands into, one per
//! caller that started the GPU: they would all page-lock at once on their first GPU call.

use crate::device::Gpu;
use crate::error::GpuError;
use crate::memory::DeviceBuffer;
use crate::start_gate::step;
use ozaki_core::blas::{GemmArgs, Trans};

/// Largest dimension of the warm-up DGEMM: its kernel is the one cuBLAS picks for large
/// products (the host path's units are at most this wide in practice), and its buffers stay
/// under 400 MiB of device memory.
pub const MAX_DIM: usize = 4096;

/// Side of the host-resident warm-up products (each GPU route once: staging, events, both
/// streams, the emulation's kernels and cuBLASLt's INT8 product).
pub const HOST_SIDE: usize = 256;

/// Warms the default GPU up for calls like `(m, n, k)` made by `callers` at once: both
/// host-resident routes once on [`HOST_SIDE`]² operands, then one device-resident DGEMM of
/// the call's shape capped at [`MAX_DIM`], then, when such calls copy their operands apart
/// ([`crate::host::reserve_operands`]), pinned buffers for `callers` of them. Each part is a
/// step of the start gate (a process exit waits for it, or it does not start). Never panics
/// (cudarc's panics are contained).
pub fn warm_up((m, n, k): (usize, usize, usize), callers: u32) -> Result<(), GpuError> {
    step("warm-up: host routes", || {
        crate::probe::contain("warm-up", || {
            let mut g = crate::gpu()?;
            host_routes(&mut g)
        })
    })?;
    step("warm-up: DGEMM", || {
        crate::probe::contain("warm-up", || {
            let g = crate::gpu()?;
            dgemm((m.min(MAX_DIM), n.min(MAX_DIM), k.min(MAX_DIM)), &g)
        })
    })?;
    step("warm-up: pinned operands", || {
        crate::probe::contain("warm-up", || {
            let added = crate::host::reserve_operands(m, n, k, callers);
            tracing::debug!(added, callers, "warm-up: pinned operand buffers");
            Ok(())
        })
    })
}

/// Each host-resident route once on small operands (gpu-ozaki only when it can run here).
fn host_routes(g: &mut Gpu) -> Result<(), GpuError> {
    let s = HOST_SIDE;
    let a: Vec<f64> = (0..s * s)
        .map(|i| ((i * 7919) % 1000) as f64 / 999.0 - 0.5)
        .collect();
    let mut c = vec![0.0; s * s];
    let args = GemmArgs {
        transa: Trans::No,
        transb: Trans::No,
        m: s,
        n: s,
        k: s,
        alpha: 1.0,
        a: &a,
        lda: s,
        b: &a,
        ldb: s,
        beta: 0.0,
        ldc: s,
    };
    crate::host::gemm_on(g, &args, &mut c, crate::host::Engine::Native)?;
    if g.ozaki_ready().is_ok() {
        let opts = crate::ozaki::Options::default();
        crate::host::gemm_on(g, &args, &mut c, crate::host::Engine::Ozaki(opts))?;
    }
    Ok(())
}

/// One device-resident DGEMM of `(m, n, k)` on zeroed scratch buffers, waited for.
fn dgemm((m, n, k): (usize, usize, usize), g: &Gpu) -> Result<(), GpuError> {
    let (m, n, k) = (m.max(1), n.max(1), k.max(1));
    let a = zeroed(m * k)?;
    let b = zeroed(k * n)?;
    let c = zeroed(m * n)?;
    let s = g.stream();
    // SAFETY: three live buffers of m x k, k x n and m x n on the current context, waited for below.
    unsafe { crate::native::dgemm_packed(g, s, (m, n, k), [a.ptr(), b.ptr(), c.ptr()]) }?;
    crate::device::sync(s)
}

/// A device buffer of `len` doubles, zero.
fn zeroed(len: usize) -> Result<DeviceBuffer, GpuError> {
    use crate::error::Context;
    let buf = DeviceBuffer::new(len * 8)?;
    // SAFETY: the buffer holds len * 8 bytes; a context is current (the caller holds the GPU).
    unsafe { cudarc::driver::sys::cuMemsetD8_v2(buf.ptr(), 0, len * 8) }
        .result()
        .ctx("cuMemsetD8")?;
    Ok(buf)
}
