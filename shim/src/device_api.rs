//! Device-resident C entry points (issue #4): `ozaki_dgemm_device` and `ozaki_dsyrk_device`
//! for programs whose matrices already live on the GPU. They take device pointers
//! (column-major, as cuBLAS) and a CUDA stream, and run Ozaki-II on the INT8 tensor cores, or
//! cuBLAS fp64 with `OZAKI_ROUTE=gpu-native`, on that stream. `OZAKI_MODULI` forces the
//! moduli count.
//!
//! Return values: `0` C computed by emulation; `1` C computed by cuBLAS fp64 (requested, or
//! the emulation declined: NaN/Inf input, alpha = 0, k = 0 or k > 2^17); `-i` argument `i`
//! (1-based, reference-BLAS numbering) is illegal, nothing done; `2` no GPU route could run
//! (no driver or device, out of memory, a CUDA error; C untouched except after a failure in
//! the final kernel, which the message on stderr says). The call returns when C is ready
//! (the stream is synchronised), so the caller may read C right after it. Never panics.

use crate::config;
use core::ffi::{c_char, c_int, c_void};
use gpu_kernels::ozaki::{self, DeviceCall, Op, Options};
use gpu_kernels::{GpuError, gpu};
use ozaki_core::blas::{Trans, Uplo};
use ozaki_core::route::{Route, RouteRequest};

fn trans_of(c: c_char) -> Option<Trans> {
    match c as u8 {
        b'N' | b'n' => Some(Trans::No),
        b'T' | b't' | b'C' | b'c' => Some(Trans::Yes),
        _ => None,
    }
}

fn uplo_of(c: c_char) -> Option<Uplo> {
    match c as u8 {
        b'U' | b'u' => Some(Uplo::Upper),
        b'L' | b'l' => Some(Uplo::Lower),
        _ => None,
    }
}

/// Runs the call on the GPU: emulation unless forced native or declined, then cuBLAS.
fn run(call: DeviceCall, stream: *mut c_void) -> c_int {
    let _flags = gpu_kernels::fpenv::KeepFpFlags::new();
    let cfg = config::get();
    let native_only = cfg.route == RouteRequest::Forced(Route::GpuNative);
    let opts = Options {
        moduli: cfg.moduli.map(|r| r as usize),
        ..Default::default()
    };
    let stream = stream as gpu_kernels::device::Stream;
    let attempt = gpu_kernels::probe::contain("device entry point", || {
        let mut g = gpu()?;
        if !native_only && call.alpha != 0.0 && call.k != 0 {
            match ozaki::gemm(&mut g, stream, &call, opts) {
                Ok(_) => return Ok(0),
                Err(GpuError::NonFinite | GpuError::Unsupported(_)) => {}
                Err(e) => return Err(e),
            }
        }
        gpu_kernels::native::device_call(&g, stream, &call)?;
        gpu_kernels::device::sync(stream)?;
        Ok(1)
    });
    attempt.unwrap_or_else(|e| {
        config::notice(&format!("ozaki device entry point: {e}"));
        2
    })
}

/// After the argument checks: the reference quick return (C empty, or nothing to add to an
/// unscaled C; reported as 1, C untouched), else [`run`] with C `m` x `n`.
#[allow(clippy::too_many_arguments)]
fn checked_call(
    op: Op,
    m: i64,
    n: i64,
    k: i64,
    alpha: f64,
    a: *const f64,
    lda: i64,
    beta: f64,
    c: *mut f64,
    ldc: i64,
    stream: *mut c_void,
) -> c_int {
    if m == 0 || n == 0 || ((alpha == 0.0 || k == 0) && beta == 1.0) {
        return 1;
    }
    run(
        DeviceCall {
            op,
            m: m as usize,
            n: n as usize,
            k: k as usize,
            alpha,
            a: a as u64,
            lda: lda as usize,
            beta,
            c: c as u64,
            ldc: ldc as usize,
        },
        stream,
    )
}

/// C = alpha op(A) op(B) + beta C with A, B, C in device memory (column-major, cuBLAS
/// conventions), ordered on `stream` (a `cudaStream_t`/`CUstream` of device `OZAKI_GPU`'s
/// primary context; NULL for the default stream). `transa`/`transb`: 'N', 'T' or 'C'.
/// Returns 0 (emulated), 1 (cuBLAS fp64), -i (argument i illegal) or 2 (no GPU route ran).
///
/// # Safety
/// A, B, C must be device allocations covering the shapes their leading dimensions imply,
/// and `stream` a live stream of that context (or NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ozaki_dgemm_device(
    transa: c_char,
    transb: c_char,
    m: i64,
    n: i64,
    k: i64,
    alpha: f64,
    a: *const f64,
    lda: i64,
    b: *const f64,
    ldb: i64,
    beta: f64,
    c: *mut f64,
    ldc: i64,
    stream: *mut c_void,
) -> c_int {
    let (Some(ta), Some(tb)) = (trans_of(transa), trans_of(transb)) else {
        return if trans_of(transa).is_none() { -1 } else { -2 };
    };
    let nrowa = if ta == Trans::No { m } else { k };
    let nrowb = if tb == Trans::No { k } else { n };
    let info = if m < 0 {
        3
    } else if n < 0 {
        4
    } else if k < 0 {
        5
    } else if lda < nrowa.max(1) {
        8
    } else if ldb < nrowb.max(1) {
        10
    } else if ldc < m.max(1) {
        13
    } else {
        0
    };
    if info != 0 {
        return -info;
    }
    let op = Op::Gemm {
        transa: ta,
        transb: tb,
        b: b as u64,
        ldb: ldb as usize,
    };
    checked_call(op, m, n, k, alpha, a, lda, beta, c, ldc, stream)
}

/// C = alpha A A^T + beta C (`trans` 'N', A n x k) or alpha A^T A + beta C (`trans` 'T'/'C',
/// A k x n), only the `uplo` ('U'/'L') triangle of C referenced, all in device memory, ordered
/// on `stream`. Returns as [`ozaki_dgemm_device`].
///
/// # Safety
/// As [`ozaki_dgemm_device`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ozaki_dsyrk_device(
    uplo: c_char,
    trans: c_char,
    n: i64,
    k: i64,
    alpha: f64,
    a: *const f64,
    lda: i64,
    beta: f64,
    c: *mut f64,
    ldc: i64,
    stream: *mut c_void,
) -> c_int {
    let Some(ul) = uplo_of(uplo) else { return -1 };
    let Some(t) = trans_of(trans) else { return -2 };
    let nrowa = if t == Trans::No { n } else { k };
    let info = if n < 0 {
        3
    } else if k < 0 {
        4
    } else if lda < nrowa.max(1) {
        7
    } else if ldc < n.max(1) {
        10
    } else {
        0
    };
    if info != 0 {
        return -info;
    }
    checked_call(
        Op::Syrk { uplo: ul, trans: t },
        n,
        n,
        k,
        alpha,
        a,
        lda,
        beta,
        c,
        ldc,
        stream,
    )
}
