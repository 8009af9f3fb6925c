//! The `cpu-ozaki` route: Ozaki scheme II emulation on the CPU (issue #3).
//!
//! Extension point: until the numerics land, both functions return
//! [`RouteError::NotInBuild`], so a call with `OZAKI_ROUTE=cpu-ozaki` falls back to the vendor
//! BLAS with the trace's `fallback` saying so. Contract: see [`crate::route`] (write C only
//! when the whole result is ready; `config.moduli` is `OZAKI_MODULI`; NaN/Inf inputs ->
//! [`RouteError::NonFinite`]; report the moduli used in [`RouteOutcome::moduli`]).

use super::{RouteError, RouteOutcome};
use crate::config::Config;
use ozaki_core::blas::{GemmArgs, SyrkArgs};
use ozaki_core::route::Route;

/// C = alpha op(A) op(B) + beta C by Ozaki-II on the CPU.
///
/// # Errors
/// - [`RouteError::NotInBuild`] until issue #3 fills this in.
pub fn gemm(_args: &GemmArgs<'_>, _c: &mut [f64], _config: &Config) -> Result<RouteOutcome, RouteError> {
    Err(RouteError::NotInBuild(Route::CpuOzaki))
}

/// C = alpha A A^T + beta C (one triangle) by Ozaki-II on the CPU.
///
/// # Errors
/// - [`RouteError::NotInBuild`] until issue #3 fills this in.
pub fn syrk(_args: &SyrkArgs<'_>, _c: &mut [f64], _config: &Config) -> Result<RouteOutcome, RouteError> {
    Err(RouteError::NotInBuild(Route::CpuOzaki))
}
