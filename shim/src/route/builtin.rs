//! The built-in route: `ozaki_core::blas`'s cache-blocked fp64 kernels, for programs in which
//! no vendor BLAS exists (and as the last fallback). It computes into a scratch copy of the
//! call's block of C and copies out last, like every route, so a panic never leaves a
//! half-written C.

use super::RouteOutcome;
use crate::abi::{Canon, Operands, Region};
use ozaki_core::blas::{GemmArgs, SyrkArgs};

/// dgemm into a scratch copy of `c` (a contiguous block, `args.ldc` apart), then copied out.
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

/// Runs a decoded call on the built-in kernels (only the elements of C it writes are touched;
/// without memory for a packed copy of a strided C, nothing is, and C stays as it was).
///
/// # Safety
/// - as [`Canon::operands`].
pub unsafe fn run(canon: &Canon) -> RouteOutcome {
    // SAFETY: the caller's contract.
    let done = match unsafe { canon.operands() } {
        Operands::Gemm(args, c) => super::on_block(&c, args, |a, c| Ok(gemm(a, c))),
        Operands::Syrk(args, c) => super::on_block(&c, args, |a, c| Ok(syrk(a, c))),
    };
    done.unwrap_or_default()
}
