//! The GPU routes `gpu-native` (cuBLAS fp64) and `gpu-ozaki` (Ozaki-II on INT8 tensor
//! cores), issue #4, for the host-resident operands every intercepted call has.
//!
//! The work is `gpu_kernels::host`: operands staged through reused pinned buffers, computed
//! on the device, C copied back into the caller's memory only after the device work succeeded
//! (the route contract of [`crate::route`]). A missing driver, GPU, library or memory is said
//! once on stderr and the call (and every later one) goes to the vendor BLAS; `gpu_kernels`
//! checks library presence before any cudarc call and contains cudarc's panics.

use super::{RouteError, RouteOutcome};
use crate::config::{Config, notice};
use gpu_kernels::GpuError;
use gpu_kernels::host::{self, Engine, HostOutcome};
use gpu_kernels::ozaki::Options;
use ozaki_core::blas::{GemmArgs, SyrkArgs};
use ozaki_core::route::Route;
use std::sync::Once;

fn engine(route: Route, config: &Config) -> Engine {
    match route {
        Route::GpuNative => Engine::Native,
        _ => Engine::Ozaki(Options {
            moduli: config.moduli.map(|r| r as usize),
            scaling: config.scaling,
            ..Default::default()
        }),
    }
}

/// Maps a GPU failure to the route error, saying once per process when there is no GPU.
fn error(route: Route, e: GpuError) -> RouteError {
    match e {
        GpuError::Unavailable(why) => {
            static SAID: Once = Once::new();
            SAID.call_once(|| {
                notice(&format!(
                    "{route}: no usable GPU ({why}); calls go to the vendor BLAS"
                ))
            });
            RouteError::Unavailable(why)
        }
        e @ GpuError::OutOfMemory { .. } => RouteError::Unavailable(e.to_string()),
        GpuError::NonFinite => RouteError::NonFinite,
        GpuError::Unsupported(why) => RouteError::Failed(why),
        GpuError::Cuda(what) => RouteError::Failed(what),
    }
}

fn outcome(o: HostOutcome) -> RouteOutcome {
    RouteOutcome {
        moduli: o.moduli,
        device: Some(o.device),
        phases: Some(o.phases),
    }
}

/// C = alpha op(A) op(B) + beta C on the GPU; `route` is `GpuNative` or `GpuOzaki`.
///
/// # Errors
/// - [`RouteError::Unavailable`]: no driver, GPU, CUDA library or device memory;
/// - [`RouteError::NonFinite`]: NaN/Inf in A or B (gpu-ozaki);
/// - [`RouteError::Failed`]: alpha = 0 or k = 0 (left to the vendor BLAS, which scales C
///   without reading A and B), a shape the emulation does not handle, or a CUDA error.
pub fn gemm(
    route: Route,
    args: &GemmArgs<'_>,
    c: &mut [f64],
    config: &Config,
) -> Result<RouteOutcome, RouteError> {
    if args.alpha == 0.0 || args.k == 0 {
        return Err(RouteError::Failed(
            "alpha = 0 or k = 0: C = beta C left to the vendor BLAS".into(),
        ));
    }
    let engine = engine(route, config);
    // Issue #7: with OZAKI_SPLIT=1 (opt-in: measured slower than one GPU so far, see
    // BENCHMARKS.md), a large call in a process that owns several device slots is split into
    // C tiles, one per slot (gpu_kernels::multi; threshold multi::SPLIT_MIN_VOLUME). The
    // trace records the first tile's device; the split itself is logged (OZAKI_LOG=info).
    if let Some(plan) = gpu_kernels::multi::split_for(args.m, args.n, args.k) {
        let o = gpu_kernels::multi::gemm(args, c, engine, &plan).map_err(|e| error(route, e))?;
        tracing::info!(devices = ?o.devices, grid = ?(plan.grid_rows, plan.grid_cols), "dgemm split across device slots");
        return Ok(RouteOutcome {
            moduli: o.moduli,
            device: o.devices.first().copied(),
            phases: Some(o.phases),
        });
    }
    host::gemm(args, c, engine)
        .map(outcome)
        .map_err(|e| error(route, e))
}

/// C = alpha A A^T + beta C (one triangle) on the GPU.
///
/// # Errors
/// - as [`gemm`].
pub fn syrk(
    route: Route,
    args: &SyrkArgs<'_>,
    c: &mut [f64],
    config: &Config,
) -> Result<RouteOutcome, RouteError> {
    if args.alpha == 0.0 || args.k == 0 {
        return Err(RouteError::Failed(
            "alpha = 0 or k = 0: C = beta C left to the vendor BLAS".into(),
        ));
    }
    host::syrk(args, c, engine(route, config))
        .map(outcome)
        .map_err(|e| error(route, e))
}
