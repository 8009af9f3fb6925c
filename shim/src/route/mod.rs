//! Routes: who computes a call's C.
//!
//! [`choose()`] turns the requested route (`OZAKI_ROUTE`) into one [`Route`] for this call, and
//! [`execute`] runs it with the FFI boundary's fallback rule: any `Err` or panic of a
//! non-vendor route becomes a `fallback` reason in the trace and the vendor BLAS computes the
//! call from the untouched original arguments; with no vendor BLAS anywhere, the built-in
//! kernel does (C is never left unwritten).
//!
//! | route | module | status |
//! |---|---|---|
//! | `vendor` | [`vendor`] | forwards the original arguments to the real BLAS |
//! | `builtin` | [`builtin`] | `ozaki_core::blas` cache-blocked fp64 kernels |
//! | `cpu-ozaki` | [`cpu_ozaki`] | Ozaki-II on the CPU through `ozaki_core::emulate` |
//! | `gpu-native`, `gpu-ozaki` | [`gpu`] | cuBLAS fp64 / Ozaki-II on INT8 tensor cores through `gpu_kernels` |
//!
//! ## Contract for a non-vendor route
//! A route is a function `fn(&GemmArgs, &mut [f64], &Config) -> Result<RouteOutcome,
//! RouteError>` (and the same for `SyrkArgs`), receiving column-major, checked arguments (see
//! [`crate::abi::Operands`]: when `alpha == 0` or `k == 0`, A and B are empty slices; quick
//! returns never reach a route). Its C is the call's m x n block, contiguous (`ldc` = rows:
//! the caller's own C when it has no gaps, otherwise a packed copy, [`on_block`]), so no route
//! reads or writes the rows between C's columns. The GPU routes take the call's [`CView`]
//! instead and copy C's rows straight between the caller's memory and pinned staging
//! (`gpu_kernels::host::HostC`), under the same rules. It must write its C only once its
//! whole result is ready (compute into scratch or device buffers, copy out last), so that a
//! fallback after an `Err` or a panic starts from the original C; with beta = 0, where C is
//! no input of the call or of its fallback, the GPU's host path may write blocks of C as
//! they arrive (`gpu_kernels::host`), and the fallback then writes all of it. It reports what it did in [`RouteOutcome`]
//! (moduli, device, phases), which the trace record carries.
//!
//! ## Seams
//! - `OZAKI_ROUTE=auto`: [`choose()`] asks the per-record engine in
//!   [`choose::auto`](mod@choose), which starts the GPU in the background ([`start`]);
//!   [`execute`] notes each threaded vendor call's return for the vendor's wake ([`wake`]).
//! - A small untraced call whose route is already known (the gate's vendor classes under
//!   `auto`, every legal call under `OZAKI_ROUTE=vendor`) goes to the vendor before any of
//!   this ([`small`], asked first by `crate::entry`).
//! - The A/B comparison (`crate::ab`) wraps [`execute`].
//! - With `OZAKI_VENDOR_THREADS=team` or `share`, `auto`'s vendor calls made from inside an
//!   OpenMP team ([`openmp_team`]) or beside other calls run the vendor at their share of its
//!   threads ([`vendor_threads`], held by `crate::entry`).

pub mod adjust;
pub mod builtin;
pub mod choose;
pub mod choose_note;
pub mod cpu_ozaki;
pub mod gate;
pub mod gpu;
pub mod inflight;
pub mod learned;
pub mod memo;
pub mod openmp_team;
pub mod small;
pub mod split;
pub mod start;
pub mod threads;
pub mod vendor;
pub mod vendor_threads;
pub mod wake;

use crate::abi::{CView, Canon, Operands, RawCall};
use crate::config::Config;
use crate::symbols::SymId;
use ozaki_core::blas::{GemmArgs, SyrkArgs};
use ozaki_core::devices::SplitPlan;
use ozaki_core::engine::choose::Decision;
use ozaki_core::engine::correct::ClassKey;
use ozaki_core::route::{Route, RouteRequest};
use ozaki_core::trace::Phases;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// What a route reports about one call, for the trace record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteOutcome {
    /// Number of moduli an emulated route used.
    pub moduli: Option<u32>,
    /// Scaling bound an emulated route used (`ScalingMode::name`).
    pub scaling: Option<&'static str>,
    /// GPU ordinal a GPU route used (a split call: its first tile's).
    pub device: Option<u32>,
    /// GPU ordinal of each tile of a call split over several GPUs.
    pub devices: Option<Vec<u32>>,
    /// Measured GPU phase times.
    pub phases: Option<Phases>,
}

/// Why a route did not produce C; becomes the trace's `fallback` text ([`RouteError::reason`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RouteError {
    /// No vendor BLAS defines the symbol (only the built-in kernel is left).
    NoVendor,
    /// The route's resources are missing (no GPU, driver, library or memory); the message says which.
    Unavailable(String),
    /// The inputs hold NaN, Inf or exponents the emulation cannot represent exactly.
    NonFinite,
    /// The emulation declined the call: its accuracy rule cannot meet the contract on these
    /// operands, or it does not handle the shape. C is untouched where the call reads it.
    Declined(String),
    /// Anything else the route detected.
    Failed(String),
    /// The route panicked (caught at the boundary).
    Panicked,
}

impl RouteError {
    /// Short, stable reason text for the trace `fallback` field.
    pub fn reason(&self, route: Route) -> String {
        match self {
            RouteError::NoVendor => format!("{route}: no vendor BLAS found"),
            RouteError::Unavailable(why) => format!("{route}: unavailable: {why}"),
            RouteError::NonFinite => format!("{route}: non-finite or out-of-range input"),
            RouteError::Declined(why) | RouteError::Failed(why) => format!("{route}: {why}"),
            RouteError::Panicked => format!("{route}: panicked"),
        }
    }
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason(Route::Vendor))
    }
}

impl std::error::Error for RouteError {}

/// The route for one call, with the one engine decision behind it (carried down to the
/// route: no route asks the engine again).
pub struct Choice {
    /// Route to run.
    pub route: Route,
    /// The engine's prediction and reason (auto mode only, and only when tracing), for the
    /// trace: numbers, put into words when the record is written.
    pub engine: Option<Box<choose_note::EngineNote>>,
    /// The engine's decision on the canonical call: its split plan is what the GPU routes
    /// run. `None` for a forced route that needs none (one GPU slot, or `OZAKI_SPLIT` set).
    pub decision: Option<Arc<Decision>>,
    /// What the call's measured time corrects (auto mode, calls whose runner-up is close
    /// enough for a correction to matter): the class and the prediction of the route run.
    pub feedback: Option<(ClassKey, f64)>,
    /// What the call's measured time adds to the GPU start's ledger (auto mode, vendor calls
    /// priced before the start at their own shape, the GPU priced).
    pub start_credit: Option<start::Credit>,
    /// The call counted in flight (auto mode) until the choice is dropped.
    pub flight: Option<inflight::Flight>,
    /// What runs when the emulation declines the call ([`execute`]): `GpuNative` when
    /// `auto` priced cuBLAS fp64 faster than the vendor, else `Vendor`.
    pub on_decline: Route,
    /// The class whose decline memory a GPU Ozaki call's outcome feeds (auto mode).
    pub decline_key: Option<ClassKey>,
    /// A vendor call decided while the GPU starts in the background (auto mode): it leaves
    /// the start's thread a core (`vendor_threads`).
    pub beside_start: bool,
}

impl Choice {
    /// The vendor BLAS with no decision behind it (nothing to time or queue), and the trace
    /// record's engine note, if any.
    pub fn vendor(engine: Option<Box<choose_note::EngineNote>>) -> Choice {
        Choice {
            engine,
            ..Choice::forced(Route::Vendor, None)
        }
    }

    /// A route taken as it is.
    fn forced(route: Route, decision: Option<Arc<Decision>>) -> Choice {
        Choice {
            route,
            engine: None,
            decision,
            feedback: None,
            start_credit: None,
            flight: None,
            on_decline: Route::Vendor,
            decline_key: None,
            beside_start: false,
        }
    }

    /// Whether the call's time is measured: it feeds a class or the start's ledger.
    pub fn timed(&self) -> bool {
        self.feedback.is_some() || self.start_credit.is_some()
    }

    /// The split plan of the decision for the route run, if it pays.
    pub fn split(&self, route: Route) -> Option<&ozaki_core::devices::SplitPlan> {
        self.decision.as_ref()?.split(route).map(|s| &s.plan)
    }
}

/// Picks the route for a call. Forced routes are taken as they are (a forced GPU route in a
/// process with several GPU slots gets the engine's split decision); `auto` asks the
/// per-record engine ([`choose::auto`]). Both price the canonical call.
pub fn choose(request: RouteRequest, canon: &Canon, config: &Config) -> Choice {
    match request {
        RouteRequest::Forced(route @ (Route::GpuNative | Route::GpuOzaki)) => {
            Choice::forced(route, split::decision(canon, config))
        }
        RouteRequest::Forced(route) => Choice::forced(route, None),
        RouteRequest::Auto => choose::auto(canon, config),
    }
}

/// What [`execute`] did.
#[derive(Debug, Clone)]
pub struct Executed {
    /// The route that produced C.
    pub route: Route,
    /// Why the requested route was not the one that produced C.
    pub fallback: Option<String>,
    /// The producing route's report.
    pub outcome: RouteOutcome,
    /// The emulation declined the call (its accuracy rule, or a shape it does not handle).
    pub declined: bool,
}

/// Runs `route` for a checked call, falling back as the module doc says; a GPU dgemm runs
/// split over the GPU slots when `plan` (the decision's split for this route) says so. A
/// GPU Ozaki call the emulation declines runs `on_decline` first when that is `GpuNative`
/// (cuBLAS fp64 on the GPU, one device), then the vendor BLAS if that fails too.
///
/// # Safety
/// - `raw` are the caller's arguments of the exported name `id`, and `canon` was decoded from
///   them; the BLAS calling contract holds for the whole call.
pub unsafe fn execute<R: RawCall>(
    route: Route,
    plan: Option<&SplitPlan>,
    on_decline: Route,
    id: SymId,
    raw: &R,
    canon: &Canon,
    config: &Config,
) -> Executed {
    let guarded = |r: Route, plan: Option<&SplitPlan>| {
        // SAFETY: the caller's contract; no raw pointer is used while the slices live.
        let run = || unsafe { run_safe(r, plan, canon, config) };
        catch_unwind(AssertUnwindSafe(run)).unwrap_or(Err(RouteError::Panicked))
    };
    let on_vendor = || {
        // SAFETY: the caller's contract.
        let r = unsafe { vendor::call(id, raw) };
        if r.is_ok() {
            wake::vendor_returned(canon.mnk());
        }
        r
    };
    let first = match route {
        Route::Vendor => on_vendor(),
        other => guarded(other, plan),
    };
    let err = match first {
        Ok(outcome) => {
            return Executed {
                route,
                fallback: None,
                outcome,
                declined: false,
            };
        }
        Err(err) => err,
    };
    let declined = matches!(err, RouteError::Declined(_));
    let mut reason = err.reason(route);
    if declined && route == Route::GpuOzaki && on_decline == Route::GpuNative {
        match guarded(Route::GpuNative, None) {
            Ok(outcome) => {
                return Executed {
                    route: Route::GpuNative,
                    fallback: Some(reason),
                    outcome,
                    declined,
                };
            }
            Err(e) => reason = format!("{reason}; {}", e.reason(Route::GpuNative)),
        }
    }
    if route != Route::Vendor {
        // C is as the caller left it where the call reads it (beta != 0); with beta = 0 the
        // failed route may have written blocks of it, which the vendor overwrites.
        if on_vendor().is_ok() {
            return Executed {
                route: Route::Vendor,
                fallback: Some(reason),
                outcome: RouteOutcome::default(),
                declined,
            };
        }
    }
    vendor::report_missing(id);
    // SAFETY: the caller's contract.
    let outcome = unsafe { builtin::run(canon) };
    Executed {
        route: Route::Builtin,
        fallback: Some(reason),
        outcome,
        declined,
    }
}

/// Runs a non-vendor route on safe views of the call.
///
/// # Safety
/// - as [`execute`].
unsafe fn run_safe(
    route: Route,
    plan: Option<&SplitPlan>,
    canon: &Canon,
    config: &Config,
) -> Result<RouteOutcome, RouteError> {
    // SAFETY: the caller's contract.
    match unsafe { canon.operands() } {
        // the GPU routes move C's rows between the caller's memory and pinned staging
        // themselves, from the view: no packed block
        Operands::Gemm(args, c) => match route {
            Route::GpuNative | Route::GpuOzaki => gpu::gemm(route, &args, &c, config, plan),
            _ => on_block(&c, args, |args, c| match route {
                Route::Builtin => Ok(builtin::gemm(args, c)),
                Route::CpuOzaki => cpu_ozaki::gemm(args, c, config),
                _ => unreachable!("the vendor route takes the raw arguments"),
            }),
        },
        Operands::Syrk(args, c) => match route {
            Route::GpuNative | Route::GpuOzaki => gpu::syrk(route, &args, &c, config),
            _ => on_block(&c, args, |args, c| match route {
                Route::Builtin => Ok(builtin::syrk(args, c)),
                Route::CpuOzaki => cpu_ozaki::syrk(args, c, config),
                _ => unreachable!("the vendor route takes the raw arguments"),
            }),
        },
    }
}

/// Arguments whose leading dimension of C can be replaced (a route computes on a block).
pub trait WithLdc {
    /// The same call with C stored `ldc` apart.
    fn with_ldc(&self, ldc: usize) -> Self;
}

impl WithLdc for GemmArgs<'_> {
    fn with_ldc(&self, ldc: usize) -> Self {
        GemmArgs { ldc, ..*self }
    }
}

impl WithLdc for SyrkArgs<'_> {
    fn with_ldc(&self, ldc: usize) -> Self {
        SyrkArgs { ldc, ..*self }
    }
}

/// Runs `f` on a contiguous block of the call's C ([`CView::block`]): the route sees only the
/// elements the call writes, and a packed block goes back into C once `f` succeeded.
///
/// # Errors
/// `f`'s error, or [`RouteError::Unavailable`] when the packed block cannot be allocated.
pub fn on_block<A: WithLdc>(
    c: &CView,
    args: A,
    f: impl FnOnce(&A, &mut [f64]) -> Result<RouteOutcome, RouteError>,
) -> Result<RouteOutcome, RouteError> {
    let mut block = c.block().map_err(RouteError::Unavailable)?;
    let args = args.with_ldc(block.ld());
    let outcome = f(&args, block.as_mut_slice())?;
    block.finish();
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{Decoded, RawCall};
    use crate::config::RawConfig;
    use ozaki_core::blas::Trans;
    use ozaki_core::trace::Routine;

    /// Arguments whose vendor is never reached: no BLAS library is loaded in the unit-test
    /// process, so the last fallback is the built-in kernel.
    #[derive(Clone, Copy)]
    struct NoVendorCall;

    impl RawCall for NoVendorCall {
        const ROUTINE: Routine = Routine::Dgemm;
        unsafe fn decode(&self) -> Decoded {
            unreachable!("execute takes an already decoded call")
        }
        unsafe fn forward(&self, _f: *const std::ffi::c_void) {
            unreachable!("a vendor BLAS was found in the unit-test process")
        }
    }

    fn run(route: Route) -> (Executed, Vec<f64>, Vec<f64>) {
        let (m, n, k) = (5usize, 4usize, 3usize);
        let a: Vec<f64> = (0..m * k).map(|i| i as f64 * 0.5 - 3.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| 1.0 / (i as f64 + 1.0)).collect();
        let mut c: Vec<f64> = (0..m * n).map(|i| i as f64).collect();
        let mut want = c.clone();
        for j in 0..n {
            for i in 0..m {
                let dot: f64 = (0..k).map(|l| a[i + l * m] * b[l + j * k]).sum();
                want[i + j * m] = 2.0 * dot - 1.0 * want[i + j * m];
            }
        }
        let canon = Canon::Gemm {
            transa: Trans::No,
            transb: Trans::No,
            m,
            n,
            k,
            alpha: 2.0,
            a: a.as_ptr(),
            lda: m,
            b: b.as_ptr(),
            ldb: k,
            beta: -1.0,
            c: c.as_mut_ptr(),
            ldc: m,
        };
        let config = Config::from_raw(&RawConfig::default()).0;
        // SAFETY: the buffers outlive the call and match the shapes in `canon`.
        let done = unsafe {
            execute(
                route,
                None,
                Route::Vendor,
                SymId::DGEMM,
                &NoVendorCall,
                &canon,
                &config,
            )
        };
        (done, c, want)
    }

    fn assert_close(got: &[f64], want: &[f64]) {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-13 * (1.0 + w.abs()),
                "{got:?}\nvs\n{want:?}"
            );
        }
    }

    #[test]
    fn builtin_route_computes_c_without_fallback() {
        let (done, c, want) = run(Route::Builtin);
        assert_eq!((done.route, done.fallback), (Route::Builtin, None));
        assert_close(&c, &want);
    }

    #[test]
    fn a_failing_route_falls_back_and_c_is_still_right() {
        for route in [Route::GpuOzaki, Route::GpuNative, Route::CpuOzaki] {
            let (done, c, want) = run(route);
            if done.route == route {
                assert!(
                    done.fallback.is_none(),
                    "{route}: ran, yet a fallback was recorded"
                );
            } else {
                // No GPU here (or the route refused): vendor, and with no vendor the built-in kernel.
                assert_eq!(done.route, Route::Builtin, "{route}");
                let reason = done.fallback.unwrap_or_default();
                assert!(
                    reason.starts_with(route.name()),
                    "{route}: fallback reason {reason:?} must name the route"
                );
            }
            assert_close(&c, &want);
        }
    }

    #[test]
    fn forced_routes_are_taken_as_requested() {
        let config = Config::from_raw(&RawConfig::default()).0;
        let (a, b, mut c) = ([1.0f64], [1.0f64], [0.0f64]);
        let canon = Canon::Gemm {
            transa: Trans::No,
            transb: Trans::No,
            m: 1,
            n: 1,
            k: 1,
            alpha: 1.0,
            a: a.as_ptr(),
            lda: 1,
            b: b.as_ptr(),
            ldb: 1,
            beta: 0.0,
            c: c.as_mut_ptr(),
            ldc: 1,
        };
        for r in Route::ALL {
            let choice = choose(RouteRequest::Forced(r), &canon, &config);
            assert_eq!(choice.route, r);
            // One GPU slot at most here: no split decision is taken for a forced route.
            assert!(choice.decision.is_none());
        }
    }
}
