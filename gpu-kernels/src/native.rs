//! The `gpu-native` route: cuBLAS DGEMM / DSYRK on device pointers (64-bit-integer API, so
//! no dimension limit of its own).

use crate::device::Gpu;
use crate::error::{Context, GpuError};
use cudarc::cublas::sys as cb;
use cudarc::driver::sys::CUstream;
use ozaki_core::blas::{Trans, Uplo};

fn op(t: Trans) -> cb::cublasOperation_t {
    match t {
        Trans::No => cb::cublasOperation_t::CUBLAS_OP_N,
        Trans::Yes => cb::cublasOperation_t::CUBLAS_OP_T,
    }
}

/// C = alpha op(A) op(B) + beta C on `stream`, all pointers device addresses, column-major.
#[allow(clippy::too_many_arguments)]
pub fn dgemm(
    gpu: &Gpu,
    stream: CUstream,
    transa: Trans,
    transb: Trans,
    (m, n, k): (usize, usize, usize),
    alpha: f64,
    (a, lda): (u64, usize),
    (b, ldb): (u64, usize),
    beta: f64,
    (c, ldc): (u64, usize),
) -> Result<(), GpuError> {
    // SAFETY: live handle; the stream belongs to the current context; pointers are device
    // memory covering the BLAS-checked extents.
    unsafe {
        cb::cublasSetStream_v2(gpu.blas, stream as cb::cudaStream_t)
            .result()
            .ctx("cublasSetStream")?;
        cb::cublasDgemm_v2_64(
            gpu.blas,
            op(transa),
            op(transb),
            m as i64,
            n as i64,
            k as i64,
            &alpha,
            a as *const f64,
            lda as i64,
            b as *const f64,
            ldb as i64,
            &beta,
            c as *mut f64,
            ldc as i64,
        )
        .result()
        .ctx("cublasDgemm")
    }
}

/// C = A B on `stream` for packed column-major device operands (A m x k, B k x n, C m x n,
/// leading dimensions m, k, m): the plain product that the benchmarks, the calibration and
/// the warm-up run.
pub fn dgemm_packed(
    gpu: &Gpu,
    stream: CUstream,
    (m, n, k): (usize, usize, usize),
    [a, b, c]: [u64; 3],
) -> Result<(), GpuError> {
    dgemm(
        gpu,
        stream,
        Trans::No,
        Trans::No,
        (m, n, k),
        1.0,
        (a, m),
        (b, k),
        0.0,
        (c, m),
    )
}

/// C = alpha op(A) op(A)^T + beta C, `uplo` triangle only, on `stream` (device pointers).
#[allow(clippy::too_many_arguments)]
pub fn dsyrk(
    gpu: &Gpu,
    stream: CUstream,
    uplo: Uplo,
    trans: Trans,
    (n, k): (usize, usize),
    alpha: f64,
    (a, lda): (u64, usize),
    beta: f64,
    (c, ldc): (u64, usize),
) -> Result<(), GpuError> {
    let fill = match uplo {
        Uplo::Upper => cb::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER,
        Uplo::Lower => cb::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
    };
    // SAFETY: as in dgemm.
    unsafe {
        cb::cublasSetStream_v2(gpu.blas, stream as cb::cudaStream_t)
            .result()
            .ctx("cublasSetStream")?;
        cb::cublasDsyrk_v2_64(
            gpu.blas,
            fill,
            op(trans),
            n as i64,
            k as i64,
            &alpha,
            a as *const f64,
            lda as i64,
            &beta,
            c as *mut f64,
            ldc as i64,
        )
        .result()
        .ctx("cublasDsyrk")
    }
}

/// The native computation of a [`DeviceCall`](crate::ozaki::DeviceCall) (device-resident entry points: the fallback
/// when emulation declines the call).
pub fn device_call(
    gpu: &Gpu,
    stream: CUstream,
    call: &crate::ozaki::DeviceCall,
) -> Result<(), GpuError> {
    match call.op {
        crate::ozaki::Op::Gemm {
            transa,
            transb,
            b,
            ldb,
        } => dgemm(
            gpu,
            stream,
            transa,
            transb,
            (call.m, call.n, call.k),
            call.alpha,
            (call.a, call.lda),
            (b, ldb),
            call.beta,
            (call.c, call.ldc),
        ),
        crate::ozaki::Op::Syrk { uplo, trans } => dsyrk(
            gpu,
            stream,
            uplo,
            trans,
            (call.n, call.k),
            call.alpha,
            (call.a, call.lda),
            call.beta,
            (call.c, call.ldc),
        ),
    }
}
