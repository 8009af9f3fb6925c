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
///
/// # Safety
/// - `gpu`'s context is current on this thread and `stream` belongs to it;
/// - every address is device memory of that context covering its matrix (`ld` apart, the
///   BLAS-checked extents), valid until the stream has passed the work;
/// - nothing else writes C, or reads it, until then.
#[allow(clippy::too_many_arguments)]
pub unsafe fn dgemm(
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
    // SAFETY: live handle; the stream and the device memory as the caller's contract says.
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
///
/// # Safety
/// - `gpu`'s context is current on this thread and `stream` belongs to it;
/// - every address is device memory of that context covering its matrix (`ld` apart, the
///   BLAS-checked extents), valid until the stream has passed the work;
/// - nothing else writes C, or reads it, until then.
pub unsafe fn dgemm_packed(
    gpu: &Gpu,
    stream: CUstream,
    (m, n, k): (usize, usize, usize),
    [a, b, c]: [u64; 3],
) -> Result<(), GpuError> {
    // SAFETY: the caller's contract, for these packed extents.
    unsafe {
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
}

/// C = alpha op(A) op(A)^T + beta C, `uplo` triangle only, on `stream` (device pointers).
///
/// # Safety
/// - `gpu`'s context is current on this thread and `stream` belongs to it;
/// - every address is device memory of that context covering its matrix (`ld` apart, the
///   BLAS-checked extents), valid until the stream has passed the work;
/// - nothing else writes C, or reads it, until then.
#[allow(clippy::too_many_arguments)]
pub unsafe fn dsyrk(
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
///
/// # Safety
/// - as [`crate::ozaki::gemm`]: `call`'s addresses are device memory of `gpu`'s current
///   context covering their matrices, and nothing else touches C meanwhile.
pub unsafe fn device_call(
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
        } => {
            // SAFETY: the caller's contract.
            unsafe {
                dgemm(
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
                )
            }
        }
        crate::ozaki::Op::Syrk { uplo, trans } => {
            // SAFETY: the caller's contract.
            unsafe {
                dsyrk(
                    gpu,
                    stream,
                    uplo,
                    trans,
                    (call.n, call.k),
                    call.alpha,
                    (call.a, call.lda),
                    call.beta,
                    (call.c, call.ldc),
                )
            }
        }
    }
}
