//! Device-resident C entry points: `ozaki_dgemm_device` and `ozaki_dsyrk_device`
//! for programs whose matrices already live on the GPU. They take device pointers
//! (column-major, as cuBLAS) and a CUDA stream, and run on that stream either Ozaki-II on
//! the INT8 tensor cores or cuBLAS fp64: the engine's decision for the device-resident call
//! (emulation only where it is priced faster and the accuracy rule allows; a tall-skinny
//! 110592x64x64 product, 0.03x of cuBLAS emulated, runs on cuBLAS), or the route forced with
//! `OZAKI_ROUTE=gpu-ozaki` / `gpu-native`. `OZAKI_MODULI` forces the moduli count.
//!
//! Return values: `0` C computed by emulation; `1` C computed by cuBLAS fp64 (requested,
//! chosen by the engine, or the emulation declined: NaN/Inf input, alpha = 0, k = 0 or k > 2^17); `-i` argument `i`
//! (1-based, reference-BLAS numbering) is illegal, nothing done; `2` no GPU route could run
//! (no driver or device, out of memory, a CUDA error; C untouched except after a failure in
//! the final kernel, which the message on stderr says). The call returns when C is ready
//! (the stream is synchronised), so the caller may read C right after it. Never panics.

use crate::abi::{Canon, Verdict, decode_fortran_gemm, decode_fortran_syrk};
use crate::config;
use core::ffi::{c_char, c_int, c_void};
use gpu_kernels::ozaki::{self, DeviceCall, Op};
use gpu_kernels::{GpuError, gpu};
use ozaki_core::route::{Route, RouteRequest};

/// Runs an entry point's body; a panic anywhere in it (configuration, logging, the FP-flag
/// guard, the stderr notice) returns 2, "no GPU route ran", as [`run`]'s error path does,
/// instead of unwinding into C (the GPU work itself is contained inside [`run`]).
fn never_panics(body: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(2)
}

/// Whether a device-resident call is emulated: `OZAKI_ROUTE=gpu-ozaki` always,
/// `gpu-native` never, otherwise where the engine's decision for the device-resident call
/// (`decided`, computed only then) is gpu-ozaki: priced faster than cuBLAS by the switch
/// margin, with a moduli count the accuracy rule allows.
fn emulates(request: RouteRequest, decided: impl FnOnce() -> Route) -> bool {
    match request {
        RouteRequest::Forced(Route::GpuOzaki) => true,
        RouteRequest::Forced(Route::GpuNative) => false,
        _ => decided() == Route::GpuOzaki,
    }
}

/// The engine's route for a device-resident call (`Engine::decide_device`, cached per shape).
fn device_decision(canon: &Canon, moduli: Option<u32>) -> Route {
    use crate::route::choose::{canonical_shape, engine};
    use ozaki_core::engine::priced_moduli::priced_moduli;
    let shape = canonical_shape(canon);
    engine()
        .decide_device(&shape, Some(priced_moduli(shape.k, moduli)))
        .route
}

/// What an emulation attempt on a device-resident call did.
#[derive(Debug)]
pub(crate) enum Emulation {
    /// C computed on the stream by Ozaki-II.
    Done(ozaki::Outcome),
    /// The emulation declined the call (NaN/Inf input, a shape it does not handle): why. C
    /// untouched.
    Declined(String),
}

/// The one decision of every device-resident call (these entry points and the cuBLAS hook),
/// [`emulates`]: alpha = 0 and k = 0 are never emulated. Taken before the GPU lock: the
/// engine's first build looks up the GPU's name through that same lock, so deciding under it
/// would deadlock the first call.
pub(crate) fn emulation_chosen(canon: &Canon, call: &DeviceCall) -> bool {
    let cfg = config::get();
    call.alpha != 0.0 && call.k != 0 && emulates(cfg.route, || device_decision(canon, cfg.moduli))
}

/// What an emulation attempt left on the stream, not waited for.
pub(crate) enum Queued {
    /// The plan accepted the call; its products and reconstruction are enqueued.
    Running(ozaki::Pending),
    /// The emulation declined the call: why. C untouched, nothing of it left running.
    Declined(String),
}

/// Ozaki-II enqueued on `stream` with the configured options: returns once the plan is made
/// and the rest of the call is enqueued (`ozaki::enqueue`).
///
/// # Safety
/// - `call`'s addresses are device memory of `g`'s context (current under its lock) covering
///   the checked matrices, valid until the stream has passed the call, and `stream` is a
///   stream of that context.
pub(crate) unsafe fn enqueue_emulation(
    g: &mut gpu_kernels::Gpu,
    stream: gpu_kernels::device::Stream,
    call: &DeviceCall,
) -> Result<Queued, GpuError> {
    let opts = crate::route::gpu::ozaki_options(config::get());
    // SAFETY: the caller's contract.
    match unsafe { ozaki::enqueue(g, stream, call, opts) } {
        Ok(p) => Ok(Queued::Running(p)),
        Err(e @ (GpuError::NonFinite | GpuError::Unsupported(_))) => {
            Ok(Queued::Declined(e.to_string()))
        }
        Err(e) => Err(e),
    }
}

/// Ozaki-II on `stream` with the configured options, waited for.
///
/// # Safety
/// - `call`'s addresses are device memory of `g`'s context (current under its lock) covering
///   the checked matrices, valid for the call, and `stream` is a stream of that context.
pub(crate) unsafe fn run_emulation(
    g: &mut gpu_kernels::Gpu,
    stream: gpu_kernels::device::Stream,
    call: &DeviceCall,
) -> Result<Emulation, GpuError> {
    // SAFETY: the caller's contract; the wait below keeps the operands in use no longer.
    match unsafe { enqueue_emulation(g, stream, call) }? {
        Queued::Running(p) => {
            gpu_kernels::device::sync(stream)?;
            Ok(Emulation::Done(p.finish()?))
        }
        Queued::Declined(why) => Ok(Emulation::Declined(why)),
    }
}

/// Runs the call on the GPU: emulation where [`emulation_chosen`] unless declined, else
/// cuBLAS.
fn run(canon: &Canon, call: DeviceCall, stream: *mut c_void) -> c_int {
    let _flags = fp_flags::KeepFpFlags::new();
    // cuBLAS calls made meanwhile on this thread are this call's own (the cuBLAS hook sends
    // them straight to cuBLAS).
    let _own = crate::cublas_hook::reentry::enter();
    let stream = stream as gpu_kernels::device::Stream;
    let emulate = emulation_chosen(canon, &call);
    let attempt = gpu_kernels::probe::contain("device entry point", || {
        let mut g = gpu()?;
        // The device entry point's contract (both calls): the caller's device pointers cover
        // the checked matrices on this context and stay valid for the call.
        if emulate {
            // SAFETY: as above.
            let ran = unsafe { run_emulation(&mut g, stream, &call) }?;
            if let Emulation::Done(_) = ran {
                return Ok(0);
            }
        }
        // SAFETY: as above.
        unsafe { gpu_kernels::native::device_call(&g, stream, &call) }?;
        gpu_kernels::device::sync(stream)?;
        Ok(1)
    });
    attempt.unwrap_or_else(|e| {
        config::notice(&format!("ozaki device entry point: {e}"));
        2
    })
}

/// The verdict of the BLAS entry points' own decoder ([`crate::abi`]: the reference
/// argument checks and positions, and the reference quick return) as a return value: `-i`
/// for an illegal argument `i`, 1 for a quick return (C untouched), else [`run`].
fn answer(verdict: Verdict, stream: *mut c_void) -> c_int {
    match verdict {
        Verdict::Illegal(bad) => -(bad.info as c_int),
        Verdict::Quick => 1,
        Verdict::Compute(call) => run(&call, device_call(call), stream),
    }
}

/// A checked call on device addresses.
pub(crate) fn device_call(call: Canon) -> DeviceCall {
    let (op, (m, n, k), (alpha, a, lda), (beta, c, ldc)) = match call {
        Canon::Gemm {
            transa,
            transb,
            m,
            n,
            k,
            alpha,
            a,
            lda,
            b,
            ldb,
            beta,
            c,
            ldc,
        } => {
            let b = b as u64;
            let op = Op::Gemm {
                transa,
                transb,
                b,
                ldb,
            };
            (op, (m, n, k), (alpha, a, lda), (beta, c, ldc))
        }
        Canon::Syrk {
            uplo,
            trans,
            n,
            k,
            alpha,
            a,
            lda,
            beta,
            c,
            ldc,
        } => (
            Op::Syrk { uplo, trans },
            (n, n, k),
            (alpha, a, lda),
            (beta, c, ldc),
        ),
    };
    DeviceCall {
        op,
        m,
        n,
        k,
        alpha,
        a: a as u64,
        lda,
        beta,
        c: c as u64,
        ldc,
    }
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
    never_panics(|| {
        // Decoded as Fortran dgemm_ (the same argument list, 64-bit integers).
        let d = decode_fortran_gemm(
            transa as u8,
            transb as u8,
            m,
            n,
            k,
            alpha,
            a,
            lda,
            b,
            ldb,
            beta,
            c,
            ldc,
            true,
        );
        answer(d.verdict, stream)
    })
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
    never_panics(|| {
        // Decoded as Fortran dsyrk_ (the same argument list, 64-bit integers).
        let d = decode_fortran_syrk(
            uplo as u8,
            trans as u8,
            n,
            k,
            alpha,
            a,
            lda,
            beta,
            c,
            ldc,
            true,
        );
        answer(d.verdict, stream)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ptr::{null, null_mut};
    use ozaki_core::engine::CallShape;
    use ozaki_core::engine::choose::Engine;
    use ozaki_core::engine::profile::Profile;

    #[test]
    fn forced_routes_decide_alone_and_auto_follows_the_device_decision() {
        let never = || -> Route { panic!("a forced route asks no engine") };
        assert!(emulates(RouteRequest::Forced(Route::GpuOzaki), never));
        assert!(!emulates(RouteRequest::Forced(Route::GpuNative), never));
        // With the built-in H200 profile: a tall-skinny product (emulated at 0.03x of cuBLAS
        // on the H200) stays on cuBLAS, a large square one is emulated.
        let e = Engine::new(Profile::built_in("h200").unwrap(), 16);
        let route = |m, n, k| e.decide_device(&CallShape::gemm(m, n, k), Some(14)).route;
        assert!(!emulates(RouteRequest::Auto, || route(110592, 64, 64)));
        assert!(emulates(RouteRequest::Auto, || route(16384, 16384, 16384)));
        // Without a moduli count meeting the accuracy rule, never emulated.
        let none = e
            .decide_device(&CallShape::gemm(16384, 16384, 16384), None)
            .route;
        assert!(!emulates(RouteRequest::Auto, || none));
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm(ta: u8, tb: u8, m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64) -> c_int {
        // SAFETY: every case below has an illegal argument, so the entry point returns
        // before any pointer (all null) or the stream is touched.
        unsafe {
            ozaki_dgemm_device(
                ta as c_char,
                tb as c_char,
                m,
                n,
                k,
                1.0,
                null(),
                lda,
                null(),
                ldb,
                0.0,
                null_mut(),
                ldc,
                null_mut(),
            )
        }
    }

    fn syrk(ul: u8, tr: u8, n: i64, k: i64, lda: i64, ldc: i64) -> c_int {
        // SAFETY: as in `gemm`: illegal arguments return before anything is dereferenced.
        unsafe {
            ozaki_dsyrk_device(
                ul as c_char,
                tr as c_char,
                n,
                k,
                1.0,
                null(),
                lda,
                0.0,
                null_mut(),
                ldc,
                null_mut(),
            )
        }
    }

    #[test]
    fn illegal_arguments_return_the_reference_parameter_position() {
        assert_eq!(gemm(b'X', b'N', 2, 2, 2, 2, 2, 2), -1);
        assert_eq!(gemm(b'n', b'?', 2, 2, 2, 2, 2, 2), -2);
        assert_eq!(gemm(b'N', b'N', -1, 2, 2, 2, 2, 2), -3);
        assert_eq!(gemm(b'N', b'N', 2, 2, -1, 2, 2, 2), -5);
        assert_eq!(gemm(b'T', b'N', 3, 2, 4, 3, 4, 3), -8); // op(A) = A^T: lda >= k = 4
        assert_eq!(gemm(b'N', b't', 2, 5, 2, 2, 4, 2), -10); // op(B) = B^T: ldb >= n = 5
        assert_eq!(gemm(b'N', b'N', 3, 2, 2, 3, 2, 2), -13);
        assert_eq!(syrk(b'x', b'N', 2, 2, 2, 2), -1);
        assert_eq!(syrk(b'u', b'Q', 2, 2, 2, 2), -2);
        assert_eq!(syrk(b'L', b'N', -1, 2, 2, 2), -3);
        assert_eq!(syrk(b'L', b'C', 2, 5, 4, 2), -7); // A^T A: lda >= k = 5
        assert_eq!(syrk(b'U', b'N', 3, 2, 3, 2), -10);
        // the remaining dimension checks, in the reference's order
        assert_eq!(gemm(b'N', b'N', 2, -1, 2, 2, 2, 2), -4);
        assert_eq!(gemm(b'N', b'N', -1, -1, -1, 0, 0, 0), -3); // first illegal wins
        assert_eq!(gemm(b'C', b'N', 2, 2, 2, 1, 2, 2), -8); // 'C' is a transpose: lda >= k
        assert_eq!(syrk(b'U', b'T', 2, -1, 2, 2), -4);
        assert_eq!(syrk(b'L', b'N', 4, 2, 3, 4), -7); // A A^T: lda >= n = 4
    }

    /// The reference quick returns (C empty, or alpha = 0 / k = 0 with beta = 1) answer 1, C
    /// untouched, before anything reaches the GPU: the pointers are null and no driver is
    /// needed.
    #[test]
    fn quick_returns_touch_nothing() {
        let call = |ta: u8, m: i64, n: i64, k: i64, alpha: f64, beta: f64| {
            // SAFETY: every case is a reference quick return: nothing is dereferenced.
            unsafe {
                ozaki_dgemm_device(
                    ta as c_char,
                    b'N' as c_char,
                    m,
                    n,
                    k,
                    alpha,
                    null(),
                    m.max(1),
                    null(),
                    k.max(1),
                    beta,
                    null_mut(),
                    m.max(1),
                    null_mut(),
                )
            }
        };
        assert_eq!(call(b'N', 0, 5, 5, 1.0, 0.0), 1);
        assert_eq!(call(b'n', 5, 0, 5, 1.0, 0.0), 1);
        assert_eq!(call(b'N', 5, 5, 0, 1.0, 1.0), 1);
        assert_eq!(call(b'N', 5, 5, 5, 0.0, 1.0), 1);
        // an illegal argument is reported even when the call would be a quick return
        assert_eq!(call(b'X', 0, 5, 5, 1.0, 0.0), -1);
        // SAFETY: as above (n = 0).
        let s = unsafe {
            ozaki_dsyrk_device(
                b'U' as c_char,
                b'N' as c_char,
                0,
                3,
                1.0,
                null(),
                1,
                0.0,
                null_mut(),
                1,
                null_mut(),
            )
        };
        assert_eq!(s, 1);
        // SAFETY: as above (alpha = 0, beta = 1).
        let s = unsafe {
            ozaki_dsyrk_device(
                b'l' as c_char,
                b'c' as c_char,
                3,
                2,
                0.0,
                null(),
                2,
                1.0,
                null_mut(),
                3,
                null_mut(),
            )
        };
        assert_eq!(s, 1);
    }
}
