//! The cuBLAS entry points the shim exports, with the cuBLAS headers' C signatures. Each
//! hands its arguments to [`super::dispatch`] with a closure that makes the same call on the
//! real cuBLAS ([`super::real`]). `cublasGemmEx` and its relatives with any data type or
//! compute type other than fp64 go to cuBLAS at once.

#![allow(non_snake_case, clippy::too_many_arguments)]

use super::decode::{self, Batch};
use super::lt;
use super::real::{CUBLASLT, real};
use super::{Call, Handle, NOT_INITIALIZED, Status, dispatch};
use crate::abi::{decode_fortran_gemm, decode_fortran_syrk};
use core::ffi::{c_int, c_void};

/// No loaded cuBLAS defines `name` (the program called a cuBLAS it did not load).
fn missing(name: &str) -> Status {
    crate::config::notice(&format!("cuBLAS hook: no loaded cuBLAS defines {name}"));
    NOT_INITIALIZED
}

/// A gemm-shaped call (column-major, cuBLAS's operation enums) through the hook.
fn gemm(
    name: &'static str,
    handle: Handle,
    ops: [c_int; 2],
    [m, n, k]: [i64; 3],
    (alpha, beta): (*const f64, *const f64),
    (a, lda): (*const c_void, i64),
    (b, ldb): (*const c_void, i64),
    (c, ldc): (*mut c_void, i64),
    (ilp64, batch): (bool, Batch),
    forward: &dyn Fn() -> Status,
) -> Status {
    let decode = |al, be| {
        let (a, b, c) = (a.cast(), b.cast(), c.cast());
        let [ta, tb] = ops.map(decode::op);
        decode_fortran_gemm(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc, ilp64)
    };
    let state = || super::handle::state(handle);
    dispatch(&Call { name, state: &state, scalars: (alpha, beta), batch, decode: &decode, forward, refused: None, copy_c: None })
}

type Dgemm = unsafe extern "C" fn(Handle, c_int, c_int, c_int, c_int, c_int, *const f64, *const f64, c_int, *const f64, c_int, *const f64, *mut f64, c_int) -> Status;
type Dgemm64 = unsafe extern "C" fn(Handle, c_int, c_int, i64, i64, i64, *const f64, *const f64, i64, *const f64, i64, *const f64, *mut f64, i64) -> Status;
type GemmEx = unsafe extern "C" fn(Handle, c_int, c_int, c_int, c_int, c_int, *const c_void, *const c_void, c_int, c_int, *const c_void, c_int, c_int, *const c_void, *mut c_void, c_int, c_int, c_int, c_int) -> Status;
type GemmEx64 = unsafe extern "C" fn(Handle, c_int, c_int, i64, i64, i64, *const c_void, *const c_void, c_int, i64, *const c_void, c_int, i64, *const c_void, *mut c_void, c_int, i64, c_int, c_int) -> Status;
type DgemmStrided = unsafe extern "C" fn(Handle, c_int, c_int, c_int, c_int, c_int, *const f64, *const f64, c_int, i64, *const f64, c_int, i64, *const f64, *mut f64, c_int, i64, c_int) -> Status;
type DgemmStrided64 = unsafe extern "C" fn(Handle, c_int, c_int, i64, i64, i64, *const f64, *const f64, i64, i64, *const f64, i64, i64, *const f64, *mut f64, i64, i64, i64) -> Status;
type GemmStridedEx = unsafe extern "C" fn(Handle, c_int, c_int, c_int, c_int, c_int, *const c_void, *const c_void, c_int, c_int, i64, *const c_void, c_int, c_int, i64, *const c_void, *mut c_void, c_int, c_int, i64, c_int, c_int, c_int) -> Status;
type GemmStridedEx64 = unsafe extern "C" fn(Handle, c_int, c_int, i64, i64, i64, *const c_void, *const c_void, c_int, i64, i64, *const c_void, c_int, i64, i64, *const c_void, *mut c_void, c_int, i64, i64, i64, c_int, c_int) -> Status;
type LtMatmul = unsafe extern "C" fn(Handle, lt::Desc, *const c_void, *const c_void, lt::Layout, *const c_void, lt::Layout, *const c_void, *const c_void, lt::Layout, *mut c_void, lt::Layout, *const c_void, *mut c_void, usize, *mut c_void) -> Status;
type Dsyrk = unsafe extern "C" fn(Handle, c_int, c_int, c_int, c_int, *const f64, *const f64, c_int, *const f64, *mut f64, c_int) -> Status;
type Dsyrk64 = unsafe extern "C" fn(Handle, c_int, c_int, i64, i64, *const f64, *const f64, i64, *const f64, *mut f64, i64) -> Status;

/// `cublasDgemm_v2`: C = alpha op(A) op(B) + beta C.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasDgemm_v2(handle: Handle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const f64, a: *const f64, lda: c_int, b: *const f64, ldb: c_int, beta: *const f64, c: *mut f64, ldc: c_int) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasDgemm_v2: Dgemm).map_or_else(|| missing("cublasDgemm_v2"), |f| unsafe { f(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) });
    gemm("cublasDgemm_v2", handle, [transa, transb], [m, n, k].map(i64::from), (alpha, beta), (a.cast(), lda.into()), (b.cast(), ldb.into()), (c.cast(), ldc.into()), (false, Batch::ONE), &forward)
}

/// `cublasDgemm_v2_64`: as [`cublasDgemm_v2`] with 64-bit integers.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasDgemm_v2_64(handle: Handle, transa: c_int, transb: c_int, m: i64, n: i64, k: i64, alpha: *const f64, a: *const f64, lda: i64, b: *const f64, ldb: i64, beta: *const f64, c: *mut f64, ldc: i64) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasDgemm_v2_64: Dgemm64).map_or_else(|| missing("cublasDgemm_v2_64"), |f| unsafe { f(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) });
    gemm("cublasDgemm_v2_64", handle, [transa, transb], [m, n, k], (alpha, beta), (a.cast(), lda), (b.cast(), ldb), (c.cast(), ldc), (true, Batch::ONE), &forward)
}

/// `cublasGemmEx`: routed only with A, B, C `CUDA_R_64F` and `CUBLAS_COMPUTE_64F`.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGemmEx(handle: Handle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const c_void, a: *const c_void, atype: c_int, lda: c_int, b: *const c_void, btype: c_int, ldb: c_int, beta: *const c_void, c: *mut c_void, ctype: c_int, ldc: c_int, compute: c_int, algo: c_int) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasGemmEx: GemmEx).map_or_else(|| missing("cublasGemmEx"), |f| unsafe { f(handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc, compute, algo) });
    if !decode::fp64(atype, btype, ctype, compute) {
        return forward();
    }
    gemm("cublasGemmEx", handle, [transa, transb], [m, n, k].map(i64::from), (alpha.cast(), beta.cast()), (a, lda.into()), (b, ldb.into()), (c, ldc.into()), (false, Batch::ONE), &forward)
}

/// `cublasGemmEx_64`: as [`cublasGemmEx`] with 64-bit integers.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGemmEx_64(handle: Handle, transa: c_int, transb: c_int, m: i64, n: i64, k: i64, alpha: *const c_void, a: *const c_void, atype: c_int, lda: i64, b: *const c_void, btype: c_int, ldb: i64, beta: *const c_void, c: *mut c_void, ctype: c_int, ldc: i64, compute: c_int, algo: c_int) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasGemmEx_64: GemmEx64).map_or_else(|| missing("cublasGemmEx_64"), |f| unsafe { f(handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc, compute, algo) });
    if !decode::fp64(atype, btype, ctype, compute) {
        return forward();
    }
    gemm("cublasGemmEx_64", handle, [transa, transb], [m, n, k], (alpha.cast(), beta.cast()), (a, lda), (b, ldb), (c, ldc), (true, Batch::ONE), &forward)
}

/// `cublasDgemmStridedBatched`: `batch` products, member i's operands `i * stride` elements
/// on.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasDgemmStridedBatched(handle: Handle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const f64, a: *const f64, lda: c_int, sa: i64, b: *const f64, ldb: c_int, sb: i64, beta: *const f64, c: *mut f64, ldc: c_int, sc: i64, count: c_int) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasDgemmStridedBatched: DgemmStrided).map_or_else(|| missing("cublasDgemmStridedBatched"), |f| unsafe { f(handle, transa, transb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count) });
    let batch = Batch { count: count.into(), strides: [sa, sb, sc] };
    gemm("cublasDgemmStridedBatched", handle, [transa, transb], [m, n, k].map(i64::from), (alpha, beta), (a.cast(), lda.into()), (b.cast(), ldb.into()), (c.cast(), ldc.into()), (false, batch), &forward)
}

/// `cublasDgemmStridedBatched_64`: as [`cublasDgemmStridedBatched`] with 64-bit integers.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasDgemmStridedBatched_64(handle: Handle, transa: c_int, transb: c_int, m: i64, n: i64, k: i64, alpha: *const f64, a: *const f64, lda: i64, sa: i64, b: *const f64, ldb: i64, sb: i64, beta: *const f64, c: *mut f64, ldc: i64, sc: i64, count: i64) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasDgemmStridedBatched_64: DgemmStrided64).map_or_else(|| missing("cublasDgemmStridedBatched_64"), |f| unsafe { f(handle, transa, transb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count) });
    let batch = Batch { count, strides: [sa, sb, sc] };
    gemm("cublasDgemmStridedBatched_64", handle, [transa, transb], [m, n, k], (alpha, beta), (a.cast(), lda), (b.cast(), ldb), (c.cast(), ldc), (true, batch), &forward)
}

/// `cublasGemmStridedBatchedEx`: routed only with fp64 types and compute.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGemmStridedBatchedEx(handle: Handle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const c_void, a: *const c_void, atype: c_int, lda: c_int, sa: i64, b: *const c_void, btype: c_int, ldb: c_int, sb: i64, beta: *const c_void, c: *mut c_void, ctype: c_int, ldc: c_int, sc: i64, count: c_int, compute: c_int, algo: c_int) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasGemmStridedBatchedEx: GemmStridedEx).map_or_else(|| missing("cublasGemmStridedBatchedEx"), |f| unsafe { f(handle, transa, transb, m, n, k, alpha, a, atype, lda, sa, b, btype, ldb, sb, beta, c, ctype, ldc, sc, count, compute, algo) });
    if !decode::fp64(atype, btype, ctype, compute) {
        return forward();
    }
    let batch = Batch { count: count.into(), strides: [sa, sb, sc] };
    gemm("cublasGemmStridedBatchedEx", handle, [transa, transb], [m, n, k].map(i64::from), (alpha.cast(), beta.cast()), (a, lda.into()), (b, ldb.into()), (c, ldc.into()), (false, batch), &forward)
}

/// `cublasGemmStridedBatchedEx_64`: as [`cublasGemmStridedBatchedEx`] with 64-bit integers.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGemmStridedBatchedEx_64(handle: Handle, transa: c_int, transb: c_int, m: i64, n: i64, k: i64, alpha: *const c_void, a: *const c_void, atype: c_int, lda: i64, sa: i64, b: *const c_void, btype: c_int, ldb: i64, sb: i64, beta: *const c_void, c: *mut c_void, ctype: c_int, ldc: i64, sc: i64, count: i64, compute: c_int, algo: c_int) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasGemmStridedBatchedEx_64: GemmStridedEx64).map_or_else(|| missing("cublasGemmStridedBatchedEx_64"), |f| unsafe { f(handle, transa, transb, m, n, k, alpha, a, atype, lda, sa, b, btype, ldb, sb, beta, c, ctype, ldc, sc, count, compute, algo) });
    if !decode::fp64(atype, btype, ctype, compute) {
        return forward();
    }
    let batch = Batch { count, strides: [sa, sb, sc] };
    gemm("cublasGemmStridedBatchedEx_64", handle, [transa, transb], [m, n, k], (alpha.cast(), beta.cast()), (a, lda), (b, ldb), (c, ldc), (true, batch), &forward)
}

/// A syrk call through the hook.
fn syrk(name: &'static str, handle: Handle, [uplo, trans]: [c_int; 2], [n, k]: [i64; 2], scalars: (*const f64, *const f64), (a, lda): (*const f64, i64), (c, ldc): (*mut f64, i64), ilp64: bool, forward: &dyn Fn() -> Status) -> Status {
    let decode = |al, be| decode_fortran_syrk(decode::fill(uplo), decode::op(trans), n, k, al, a, lda, be, c, ldc, ilp64);
    let state = || super::handle::state(handle);
    dispatch(&Call { name, state: &state, scalars, batch: Batch::ONE, decode: &decode, forward, refused: None, copy_c: None })
}

/// `cublasDsyrk_v2`: C = alpha op(A) op(A)^T + beta C, one triangle.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasDsyrk_v2(handle: Handle, uplo: c_int, trans: c_int, n: c_int, k: c_int, alpha: *const f64, a: *const f64, lda: c_int, beta: *const f64, c: *mut f64, ldc: c_int) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasDsyrk_v2: Dsyrk).map_or_else(|| missing("cublasDsyrk_v2"), |f| unsafe { f(handle, uplo, trans, n, k, alpha, a, lda, beta, c, ldc) });
    syrk("cublasDsyrk_v2", handle, [uplo, trans], [n, k].map(i64::from), (alpha, beta), (a, lda.into()), (c, ldc.into()), false, &forward)
}

/// `cublasDsyrk_v2_64`: as [`cublasDsyrk_v2`] with 64-bit integers.
///
/// # Safety
/// cuBLAS's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasDsyrk_v2_64(handle: Handle, uplo: c_int, trans: c_int, n: i64, k: i64, alpha: *const f64, a: *const f64, lda: i64, beta: *const f64, c: *mut f64, ldc: i64) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasDsyrk_v2_64: Dsyrk64).map_or_else(|| missing("cublasDsyrk_v2_64"), |f| unsafe { f(handle, uplo, trans, n, k, alpha, a, lda, beta, c, ldc) });
    syrk("cublasDsyrk_v2_64", handle, [uplo, trans], [n, k], (alpha, beta), (a, lda), (c, ldc), true, &forward)
}

/// `cublasLtMatmul`: D = alpha op(A) op(B) + beta C with the operation and layouts its
/// descriptors say; routed only as a plain fp64 product ([`lt`]), on the `stream` argument.
///
/// # Safety
/// cuBLASLt's contract for this entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasLtMatmul(handle: Handle, desc: lt::Desc, alpha: *const c_void, a: *const c_void, adesc: lt::Layout, b: *const c_void, bdesc: lt::Layout, beta: *const c_void, c: *const c_void, cdesc: lt::Layout, d: *mut c_void, ddesc: lt::Layout, algo: *const c_void, workspace: *mut c_void, workspace_bytes: usize, stream: *mut c_void) -> Status {
    // SAFETY: the caller's arguments, unchanged, to the real entry point of this name.
    let forward = || real!(cublasLtMatmul: LtMatmul, in CUBLASLT).map_or_else(|| missing("cublasLtMatmul"), |f| unsafe { f(handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, workspace, workspace_bytes, stream) });
    let (Some(attrs), Some(la), Some(lb), Some(lc), Some(ld)) = (lt::desc(desc), lt::layout(adesc), lt::layout(bdesc), lt::layout(cdesc), lt::layout(ddesc)) else {
        return forward();
    };
    let layouts = [la, lb, lc, ld];
    if !lt::fp64(&attrs, &layouts) {
        return forward();
    }
    let host_scalars = attrs.pointer_mode == lt::POINTER_MODE_HOST;
    // SAFETY: host pointer mode: beta is a host fp64 scalar (the scale type is 64F).
    let beta_zero = host_scalars && !beta.is_null() && unsafe { *beta.cast::<f64>() } == 0.0;
    let p = lt::product(&attrs, &layouts, (c as u64, d as u64), beta_zero);
    let decode = |al, be| {
        let [ta, tb] = p.ops.map(decode::op);
        decode_fortran_gemm(ta, tb, p.m, p.n, p.k, al, a.cast(), p.lda, b.cast(), p.ldb, be, d.cast(), p.ldd, true)
    };
    let state = || Ok(super::handle::HandleState { stream, device_scalars: !host_scalars, math_forbids: false });
    dispatch(&Call { name: "cublasLtMatmul", state: &state, scalars: (alpha.cast(), beta.cast()), batch: p.batch, decode: &decode, forward: &forward, refused: p.refused, copy_c: p.copy_c.map(|l| (c as u64, l)) })
}
