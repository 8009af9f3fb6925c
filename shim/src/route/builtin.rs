//! The built-in route: `ozaki_core::blas`'s cache-blocked fp64 kernels, for programs in which
//! no vendor BLAS exists (and as the last fallback). It computes into a scratch copy of C and
//! copies out last, like every route, so a panic never leaves a half-written C.

use super::RouteOutcome;
use crate::ab::Region;
use crate::abi::{Canon, Operands};
use ozaki_core::blas::{GemmArgs, SyrkArgs};

/// dgemm into a scratch copy of `c`, then its m x n elements copied out (only those: the
/// rows between may be another thread's C, see [`Region`]).
pub fn gemm(args: &GemmArgs<'_>, c: &mut [f64]) -> RouteOutcome {
    let mut scratch = c.to_vec();
    ozaki_core::blas::gemm(args, &mut scratch);
    Region::gemm(args.m, args.n, args.ldc).copy(&scratch, c);
    RouteOutcome::default()
}

/// dsyrk into a scratch copy of `c`, then its `uplo` triangle copied out.
pub fn syrk(args: &SyrkArgs<'_>, c: &mut [f64]) -> RouteOutcome {
    let mut scratch = c.to_vec();
    ozaki_core::blas::syrk(args, &mut scratch);
    Region::syrk(args.n, args.ldc, args.uplo).copy(&scratch, c);
    RouteOutcome::default()
}

/// Runs a decoded call on the built-in kernels.
///
/// # Safety
/// - as [`Canon::operands`].
pub unsafe fn run(canon: &Canon) -> RouteOutcome {
    // SAFETY: the caller's contract.
    match unsafe { canon.operands() } {
        Operands::Gemm(args, c) => gemm(&args, c),
        Operands::Syrk(args, c) => syrk(&args, c),
    }
}
