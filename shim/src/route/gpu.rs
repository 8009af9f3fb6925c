//! The GPU routes `gpu-native` (cuBLAS fp64) and `gpu-ozaki` (Ozaki-II on INT8 tensor
//! cores), for the host-resident operands every intercepted call has.
//!
//! The work is `gpu_kernels::host`: operands staged through reused pinned buffers, computed
//! on the device, C copied back into the caller's memory only after the device work succeeded
//! (the route contract of [`crate::route`]; with beta == 0, block by block once every
//! data-dependent check passed, `gpu_kernels`' `early_write`: a later device fault then
//! leaves a C that the vendor fallback overwrites whole, since it does not read it). A missing driver, GPU, library or memory is said
//! once on stderr and the call (and every later one) goes to the vendor BLAS; `gpu_kernels`
//! checks library presence before any cudarc call and contains cudarc's panics.

use super::{RouteError, RouteOutcome};
use crate::abi::CView;
use crate::config::{Config, notice};
use gpu_kernels::GpuError;
use gpu_kernels::host::{self, Engine, HostC, HostOutcome};
use gpu_kernels::ozaki::Options;
use ozaki_core::blas::{GemmArgs, SyrkArgs};
use ozaki_core::devices::SplitPlan;
use ozaki_core::route::Route;
use std::sync::Once;

/// The emulation options the configuration asks for (`OZAKI_MODULI`, `OZAKI_SCALING`,
/// `OZAKI_ACCURACY`), for
/// the host-resident routes here and the device-resident entry points (`device_api`).
pub fn ozaki_options(config: &Config) -> Options {
    Options {
        moduli: config.moduli.map(|r| r as usize),
        scaling: config.scaling,
        accuracy: config.accuracy,
        ..Default::default()
    }
}

fn engine(route: Route, config: &Config) -> Engine {
    match route {
        Route::GpuNative => Engine::Native,
        _ => Engine::Ozaki(ozaki_options(config)),
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
        GpuError::Unsupported(why) => RouteError::Declined(why),
        GpuError::Cuda(what) => RouteError::Failed(what),
    }
}

/// The scaling an engine runs (trace field `scaling`; none for gpu-native).
fn scaling(engine: Engine) -> Option<&'static str> {
    match engine {
        Engine::Ozaki(opts) => Some(gpu_kernels::ozaki::effective_scaling(opts.scaling).name()),
        Engine::Native => None,
    }
}

fn outcome(o: HostOutcome, engine: Engine) -> RouteOutcome {
    // where a slow host-resident call spent its time (the trace keeps only the phases);
    // the fields are formatted only when the debug level is enabled
    if let Some(t) = &o.timeline {
        tracing::debug!(
            setup_ms = t.setup_ms,
            uploaded_ms = ?t.uploaded_ms,
            computed_ms = ?t.computed_ms,
            downloaded_ms = t.downloaded_ms,
            write_ms = t.write_ms,
            "host-resident call's timeline"
        );
    }
    RouteOutcome {
        moduli: o.moduli,
        scaling: scaling(engine),
        device: Some(o.device),
        devices: None,
        phases: Some(o.phases),
    }
}

/// Tells the host path how many BLAS calls share the CPU with a GPU call (the calls in
/// flight, [`crate::lazy::calls_in_flight`]), so that its copy and write-back pools take
/// that call's share of the cores (`gpu_kernels::host::set_cpu_sharers`).
fn share_cpu() {
    host::set_cpu_sharers(crate::lazy::calls_in_flight);
}

/// The calls the GPU routes leave to the vendor BLAS before any device work:
/// - nothing to multiply (alpha = 0 or k = 0): C = beta C, which the vendor scales without
///   reading A and B (the reference semantics);
/// - a NaN or infinite alpha or beta: where C then gets NaN rather than an infinity depends
///   on the loop order (the reference's column form gives NaN in every column of C whose
///   op(B) holds a zero, cuBLAS's `alpha (A B)` only where the sum is zero), so those IEEE
///   details are the vendor's, as on the emulated routes.
fn needs_product(alpha: f64, beta: f64, k: usize) -> Result<(), RouteError> {
    if alpha == 0.0 || k == 0 {
        return Err(RouteError::Failed(
            "alpha = 0 or k = 0: C = beta C left to the vendor BLAS".into(),
        ));
    }
    if !(alpha.is_finite() && beta.is_finite()) {
        return Err(RouteError::NonFinite);
    }
    Ok(())
}

/// The call's C as the host path takes it: rows x cols stored ld apart at the view's
/// pointer. The host path reads rows `0..rows` of each column (beta != 0) and writes only
/// the view's region (a dsyrk's triangle), never the rows between the columns; for a dsyrk
/// the rows it reads include the other triangle, part of the call's own C argument, which
/// the reference leaves unreferenced (as [`CView::block`] hands it to the other routes).
fn host_c(c: &CView) -> HostC<'_> {
    let r = c.region();
    // SAFETY: the view's constructor contract: the call's C, valid and the call's alone for
    // as long as the view is used; `ld >= rows` (the reference checks, `abi`).
    unsafe { HostC::from_raw(c.as_ptr(), r.rows, r.cols, r.ld) }
}

/// C = alpha op(A) op(B) + beta C on the GPU; `route` is `GpuNative` or `GpuOzaki`, split
/// over the GPU slots as `plan` says.
///
/// # Errors
/// - [`RouteError::Unavailable`]: no driver, GPU, CUDA library or device memory;
/// - [`RouteError::NonFinite`]: a NaN or infinite alpha or beta (both routes), NaN/Inf in A
///   or B (gpu-ozaki);
/// - [`RouteError::Failed`]: alpha = 0 or k = 0 (left to the vendor BLAS, which scales C
///   without reading A and B), a shape the emulation does not handle, or a CUDA error.
pub fn gemm(
    route: Route,
    args: &GemmArgs<'_>,
    c: &CView,
    config: &Config,
    plan: Option<&SplitPlan>,
) -> Result<RouteOutcome, RouteError> {
    needs_product(args.alpha, args.beta, args.k)?;
    share_cpu();
    let engine = engine(route, config);
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| host::set_register(super::choose::registers(config.host_register)));
    // In a process owning several GPU slots, a call the engine prices faster split
    // (or any large call with OZAKI_SPLIT=1) runs as C tiles, one per slot
    // (gpu_kernels::multi; the plan is the call's decision, `super::split`); the trace
    // records every tile's device.
    if let Some(plan) = plan {
        let o = gpu_kernels::multi::gemm_c(args, host_c(c), engine, plan)
            .map_err(|e| error(route, e))?;
        tracing::info!(devices = ?o.devices, grid = ?(plan.grid_rows, plan.grid_cols), "dgemm split across device slots");
        return Ok(RouteOutcome {
            moduli: o.moduli,
            scaling: scaling(engine),
            device: o.devices.first().copied(),
            devices: Some(o.devices),
            phases: Some(o.phases),
        });
    }
    host::gemm_c(args, host_c(c), engine)
        .map(|o| outcome(o, engine))
        .map_err(|e| error(route, e))
}

/// C = alpha A A^T + beta C (one triangle) on the GPU.
///
/// # Errors
/// - as [`gemm`].
pub fn syrk(
    route: Route,
    args: &SyrkArgs<'_>,
    c: &CView,
    config: &Config,
) -> Result<RouteOutcome, RouteError> {
    needs_product(args.alpha, args.beta, args.k)?;
    share_cpu();
    let engine = engine(route, config);
    host::syrk_c(args, host_c(c), engine)
        .map(|o| outcome(o, engine))
        .map_err(|e| error(route, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Region;
    use crate::config::RawConfig;
    use ozaki_core::blas::{Trans, Uplo};

    /// A non-finite alpha or beta goes to the vendor BLAS on both GPU routes, for dgemm and
    /// dsyrk, before anything touches a device (so also here, without one), and C is untouched.
    #[test]
    fn non_finite_scalars_are_left_to_the_vendor_before_any_device_work() {
        let config = Config::from_raw(&RawConfig::default()).0;
        let (a, b) = ([1.0, 0.0, 2.0, 3.0], [1.0, 0.0, 2.0, 1.0]);
        for route in [Route::GpuNative, Route::GpuOzaki] {
            for (alpha, beta) in [
                (f64::INFINITY, 0.0),
                (f64::NEG_INFINITY, 1.0),
                (f64::NAN, 0.5),
                (1.0, f64::NAN),
                (2.0, f64::INFINITY),
            ] {
                let mut c = [5.0; 4];
                let args = GemmArgs {
                    alpha,
                    beta,
                    ..GemmArgs::product(2, 2, 2, &a, &b)
                };
                // SAFETY: `c` outlives the view and nothing else touches it meanwhile.
                let view = unsafe { CView::new(c.as_mut_ptr(), Region::gemm(2, 2, 2)) };
                let got = gemm(route, &args, &view, &config, None);
                assert_eq!(
                    got,
                    Err(RouteError::NonFinite),
                    "{route} dgemm {alpha} {beta}"
                );
                let args = SyrkArgs {
                    uplo: Uplo::Lower,
                    trans: Trans::No,
                    n: 2,
                    k: 2,
                    alpha,
                    a: &a,
                    lda: 2,
                    beta,
                    ldc: 2,
                };
                // SAFETY: as above.
                let view = unsafe { CView::new(c.as_mut_ptr(), Region::syrk(2, 2, Uplo::Lower)) };
                let got = syrk(route, &args, &view, &config);
                assert_eq!(
                    got,
                    Err(RouteError::NonFinite),
                    "{route} dsyrk {alpha} {beta}"
                );
                assert_eq!(c, [5.0; 4]);
            }
        }
    }
}
