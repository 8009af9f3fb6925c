//! The GPU routes `gpu-native` (cuBLAS fp64) and `gpu-ozaki` (Ozaki-II on INT8 tensor
//! cores), issue #4.
//!
//! Extension point: until the GPU code lands, both functions return
//! [`RouteError::NotInBuild`], so the call falls back to the vendor BLAS with the reason in
//! the trace. Contract: see [`crate::route`]; probe the driver before the first cudarc call
//! (cudarc panics without libcuda) and return [`RouteError::Unavailable`] with a clear
//! message when a GPU, driver, library or memory is missing; report the device and phase
//! times in [`RouteOutcome`].

use super::{RouteError, RouteOutcome};
use crate::config::Config;
use ozaki_core::blas::{GemmArgs, SyrkArgs};
use ozaki_core::route::Route;

/// C = alpha op(A) op(B) + beta C on the GPU; `route` is `GpuNative` or `GpuOzaki`.
///
/// # Errors
/// - [`RouteError::NotInBuild`] until issue #4 fills this in.
pub fn gemm(route: Route, _args: &GemmArgs<'_>, _c: &mut [f64], _config: &Config) -> Result<RouteOutcome, RouteError> {
    Err(RouteError::NotInBuild(route))
}

/// C = alpha A A^T + beta C (one triangle) on the GPU.
///
/// # Errors
/// - [`RouteError::NotInBuild`] until issue #4 fills this in.
pub fn syrk(route: Route, _args: &SyrkArgs<'_>, _c: &mut [f64], _config: &Config) -> Result<RouteOutcome, RouteError> {
    Err(RouteError::NotInBuild(route))
}
