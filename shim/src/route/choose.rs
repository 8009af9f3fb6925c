//! `OZAKI_ROUTE=auto` (issue #5): the per-record engine picks the route of each call.
//!
//! The engine ([`ozaki_core::engine::choose::Engine`]) is built once, at the first `auto`
//! call, from the profile that `OZAKI_PROFILE`, the per-GPU profile in the cache directory
//! or the built-in profile of the detected GPU gives (one stderr line when it is not one
//! measured on this machine), for the GPU slots this process owns (issue #7: with two or
//! more it also prices splits over them). Decisions are cached per shape and moduli count, so a
//! repeated shape costs one hash lookup; the prediction is copied into the trace record
//! only when tracing is on.
//!
//! The moduli count priced for GPU Ozaki ([`priced_moduli`]) is `OZAKI_MODULI` when set;
//! otherwise the GPU route picks it per call from the operands' in-row spread, which the
//! engine does not see before the call, so it prices the count the route would pick for an
//! in-row spread of [`ASSUMED_SPREAD`] (normally distributed entries) at this k, with the
//! GPU route's default scaling (`gpu_kernels::ozaki::typical_moduli`). The trace's
//! `moduli` field shows the count really used. Inputs the emulation cannot represent
//! (NaN/Inf, too wide a spread) are caught by the route itself, which then falls back.
//!
//! Building the engine initialises the GPU (its name selects the profile), which costs a
//! process [`GPU_START_S`] or more once (CUDA context, cuBLAS handles, the kernels, first
//! pinned staging; 2.7 s on a fresh H200 machine whose kernel cache was empty). Until then a
//! *pre-engine* ([`pre_engine`]) prices each call with the profile the process would use
//! without a GPU name (`OZAKI_PROFILE`, else the built-in GPU profile), and [`start_rule`]
//! decides, from the time the fastest GPU route would save on the call:
//! - no gain: the vendor BLAS, and the GPU is not started (a process whose calls are all
//!   small never creates a context);
//! - a gain under the start-up: the vendor BLAS for this call, and the GPU starts on a
//!   background thread; calls keep going to the vendor BLAS until it is ready (NumPy's first
//!   4096² product took 986 ms under the shim against 134 ms on OpenBLAS when the start
//!   blocked the call, session 3);
//! - a gain over the start-up: the GPU starts now and runs this call (waiting for a
//!   background start already under way).

use super::Choice;
use crate::abi::Shape;
use crate::config::{Config, notice};
use ozaki_core::engine::choose::{Decision, Engine, blas_threads};
use ozaki_core::engine::profile::{self, Profile, ProfileSource};
use ozaki_core::engine::{CallShape, Residency};
use ozaki_core::route::Route;
use ozaki_core::trace::Routine;
use std::sync::{Arc, OnceLock};

static ENGINE: OnceLock<Engine> = OnceLock::new();
static PRE_ENGINE: OnceLock<Option<Engine>> = OnceLock::new();

/// What starting the GPU costs a process once, at least, in seconds: NumPy's first 4096²
/// product under the shim took 986 ms against 18 ms for the second (H200 machine, session 3,
/// lead's run 2, kernels already in the cache; session 2 measured 0.5-0.9 s of CUDA context
/// creation alone).
pub const GPU_START_S: f64 = 0.8;

/// The background start of the GPU ([`start_rule`]) was asked for.
static STARTING: std::sync::Once = std::sync::Once::new();

/// The name of this process's GPU, when a GPU route can run here (initialises the GPU: the
/// first `auto` call pays for it once, as the first GPU call would anyway).
pub fn gpu_name() -> Option<String> {
    if let Some(missing) = gpu_kernels::probe::Libraries::detect().native_missing() {
        tracing::info!("auto: no GPU route in this process ({missing})");
        return None;
    }
    match gpu_kernels::gpu() {
        Ok(g) => Some(g.name.clone()),
        Err(e) => {
            tracing::info!("auto: no GPU route in this process ({e})");
            None
        }
    }
}

fn build() -> Engine {
    let gpu = gpu_name();
    let env = std::env::var("OZAKI_PROFILE").ok();
    let mut prof = match profile::resolve(env.as_deref(), gpu.as_deref()) {
        Ok((p, src, warn)) => {
            // Without a GPU there is nothing to choose between: no user-facing line.
            match (warn, &gpu) {
                (Some(w), Some(_)) => notice(&w),
                (Some(w), None) => tracing::info!("auto: {w}"),
                _ => {}
            }
            let src = match src {
                ProfileSource::Env(p) | ProfileSource::Cache(p) => p.display().to_string(),
                ProfileSource::BuiltIn(n) => format!("built-in {n}"),
            };
            tracing::info!(profile = %p.name, source = %src, "auto: engine profile");
            p
        }
        Err(e) => {
            notice(&format!("{e}; using the built-in profile"));
            profile::resolve(None, gpu.as_deref())
                .map_or_else(|_| Profile::built_in("cpu-only").expect("ships"), |x| x.0)
        }
    };
    if gpu.is_none() && prof.gpu.take().is_some() {
        tracing::info!(
            "auto: the profile describes a GPU but none is usable here; pricing the vendor route only"
        );
    }
    let engine = engine_for(prof);
    // Issue #7: with two or more GPU slots the engine also prices splits over them.
    let slots = if gpu.is_some() {
        gpu_kernels::multi::slots().to_vec()
    } else {
        Vec::new()
    };
    if slots.len() > 1 {
        tracing::info!(?slots, "auto: pricing splits over these GPU slots");
    }
    engine.with_slots(slots)
}

/// An engine pricing `prof` for the vendor BLAS's thread count in this process.
fn engine_for(prof: Profile) -> Engine {
    let avail = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    Engine::new(prof, blas_threads(|v| std::env::var(v).ok(), avail))
}

/// The engine of this process.
pub fn engine() -> &'static Engine {
    ENGINE.get_or_init(build)
}

/// The engine used before the GPU is initialised (module doc): `None` when no CUDA driver is
/// present (then [`build`] is cheap anyway) or the profile it would use describes no GPU.
fn pre_engine() -> Option<&'static Engine> {
    PRE_ENGINE
        .get_or_init(|| {
            // Only the driver: loading cuBLAS to look for it would cost the small calls the
            // pre-engine exists to keep cheap (probe::driver_present).
            if !gpu_kernels::probe::driver_present() {
                return None;
            }
            let env = std::env::var("OZAKI_PROFILE").ok();
            let prof = match env.as_deref().filter(|p| !p.is_empty()) {
                Some(p) => Profile::load(std::path::Path::new(p)).ok()?,
                None => Profile::built_in_for_gpu("H200")?.1,
            };
            prof.gpu.as_ref()?;
            Some(engine_for(prof))
        })
        .as_ref()
}

/// The pre-engine's decision for `cs` when the call goes to the vendor BLAS because the GPU is
/// not started ([`start_rule`]); `None` when the engine is built (or is to be built now, or
/// no driver is present: then building it is cheap).
fn before_start(cs: &CallShape, moduli: Option<u32>) -> Option<Arc<Decision>> {
    if ENGINE.get().is_some() {
        return None;
    }
    let d = pre_engine()?.decide_with(cs, moduli, || Some(priced_moduli(cs.k, moduli)));
    match start_rule(gpu_gain_s(&d.prediction.predicted_s)?, GPU_START_S) {
        Start::Not => Some(d),
        Start::InBackground => {
            STARTING.call_once(|| {
                let spawned = std::thread::Builder::new()
                    .name("ozaki-gpu-start".into())
                    .spawn(|| {
                        // A panic leaves the engine unbuilt: calls stay on the vendor BLAS.
                        let _ = std::panic::catch_unwind(engine);
                    });
                if let Err(e) = spawned {
                    tracing::info!("auto: no thread to start the GPU on ({e}); starting it later");
                }
            });
            // it may have become ready meanwhile
            ENGINE.get().is_none().then_some(d)
        }
        Start::Now => None,
    }
}

/// Seconds the fastest GPU route is priced to save over the vendor BLAS (0 or less: none);
/// `None` without a vendor estimate.
fn gpu_gain_s(predicted: &std::collections::BTreeMap<String, f64>) -> Option<f64> {
    let vendor = *predicted.get(Route::Vendor.name())?;
    let best = predicted
        .iter()
        .filter(|(r, _)| r.as_str() != Route::Vendor.name())
        .map(|(_, &s)| s)
        .fold(f64::INFINITY, f64::min);
    Some(vendor - best)
}

/// When a call found the GPU not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// No GPU gain: do not start it.
    Not,
    /// Start it on a background thread; this call runs on the vendor BLAS.
    InBackground,
    /// Start it now and run this call on it.
    Now,
}

/// The start rule (module doc): a call whose own gain pays for the start-up waits for it; a
/// smaller gain starts it without waiting, so no call pays a start-up it does not earn back.
fn start_rule(gain_s: f64, start_s: f64) -> Start {
    if gain_s.is_nan() || gain_s <= 0.0 {
        Start::Not
    } else if gain_s < start_s {
        Start::InBackground
    } else {
        Start::Now
    }
}

/// The engine's view of a decoded call.
fn call_shape(s: &Shape) -> CallShape {
    let dim = |x: i64| x.max(0) as u64;
    let t = |f: u8| f == b'T' || f == b'C';
    let syrk = s.routine == Routine::Dsyrk;
    CallShape {
        routine: s.routine,
        m: if syrk { dim(s.n) } else { dim(s.m) },
        n: dim(s.n),
        k: dim(s.k),
        transa: if syrk { t(s.flag2) } else { t(s.flag1) },
        transb: !syrk && t(s.flag2),
        beta_zero: s.beta == 0.0,
        alpha_zero: s.alpha == 0.0,
        residency: Residency::Host,
    }
}

/// In-row spread max|x| / mean|x| assumed when pricing the moduli count: about what rows of
/// normally distributed entries show at the sizes where GPU Ozaki can win (GEMMul8 needs 14
/// moduli on such data at n = 4096; reference h200-baselines.md).
pub const ASSUMED_SPREAD: f64 = 4.0;

/// The moduli count GPU Ozaki is priced at for inner dimension `k` (`forced`: OZAKI_MODULI).
pub fn priced_moduli(k: u64, forced: Option<u32>) -> u32 {
    forced.unwrap_or_else(|| {
        use gpu_kernels::ozaki::{DEFAULT_SCALING, typical_moduli};
        typical_moduli(DEFAULT_SCALING, ASSUMED_SPREAD, k.max(1) as usize) as u32
    })
}

/// The route `auto` takes for this call, with the prediction for the trace.
pub fn auto(shape: &Shape, config: &Config) -> Choice {
    let cs = call_shape(shape);
    if let Some(d) = before_start(&cs, config.moduli) {
        return Choice {
            route: Route::Vendor,
            engine: config.tracing().then(|| {
                let mut p = d.prediction.clone();
                if d.route == Route::Vendor {
                    p.reason
                        .push_str(" (priced before the GPU was initialised)");
                } else {
                    p.reason = format!(
                        "vendor: the GPU is starting in the background ({} would win, priced \
                         before the start)",
                        d.route.name()
                    );
                }
                p
            }),
        };
    }
    // The moduli count depends on k and OZAKI_MODULI only; it is computed on a cache miss.
    let d = engine().decide_with(&cs, config.moduli, || {
        Some(priced_moduli(cs.k, config.moduli))
    });
    Choice {
        route: d.route,
        engine: config.tracing().then(|| d.prediction.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small calls have no GPU gain; one 8192³ product gains more than the start-up; a 4096²
    /// product's gain is a fraction of it (built-in H200 profile, 16 vendor threads).
    #[test]
    fn gains_of_small_mid_and_large_calls_against_the_start_up() {
        let e = Engine::new(Profile::built_in("h200").unwrap(), 16);
        let gain = |n: u64| {
            let d = e.decide(&CallShape::gemm(n, n, n), Some(14));
            gpu_gain_s(&d.prediction.predicted_s).expect("vendor priced")
        };
        assert!(gain(8) <= 0.0 && gain(64) <= 0.0);
        assert!(gain(8192) > GPU_START_S, "{}", gain(8192));
        let mid = gain(4096);
        assert!(mid > 0.0 && mid < GPU_START_S, "{mid}");
    }

    #[test]
    fn the_gpu_starts_in_the_background_unless_the_call_pays_for_waiting() {
        for g in [0.0, -3.0, f64::NAN] {
            assert_eq!(start_rule(g, 0.8), Start::Not);
        }
        assert_eq!(start_rule(0.1, 0.8), Start::InBackground);
        assert_eq!(start_rule(0.8, 0.8), Start::Now);
        assert_eq!(start_rule(5.0, 0.8), Start::Now);
    }

    use ozaki_core::trace::Layout;

    fn shape(routine: Routine, f1: u8, f2: u8, m: i64, n: i64, k: i64, beta: f64) -> Shape {
        Shape {
            routine,
            layout: Layout::Col,
            flag1: f1,
            flag2: f2,
            m,
            n,
            k,
            lda: m.max(1),
            ldb: k.max(1),
            ldc: m.max(1),
            alpha: 1.0,
            beta,
            ilp64: false,
        }
    }

    #[test]
    fn decoded_calls_map_to_the_engine_shape() {
        let g = call_shape(&shape(Routine::Dgemm, b'T', b'N', 30, 20, 10, 0.5));
        assert_eq!(
            (g.m, g.n, g.k, g.transa, g.transb, g.beta_zero),
            (30, 20, 10, true, false, false)
        );
        // dsyrk: flag1 is uplo, flag2 trans; C is n x n whatever m holds.
        let s = call_shape(&shape(Routine::Dsyrk, b'U', b'T', 7, 40, 9, 0.0));
        assert_eq!(
            (s.m, s.n, s.k, s.transa, s.transb, s.beta_zero),
            (40, 40, 9, true, false, true)
        );
        assert_eq!(s.residency, Residency::Host);
    }

    #[test]
    fn priced_moduli_honours_the_forced_count_and_grows_with_k() {
        assert_eq!(priced_moduli(1 << 20, Some(9)), 9);
        // (from k = 256 up: below it the norm rule asks one more bit per halving of k, as
        // short dot products of spread data need, so tiny k may cost a modulus more)
        assert!((2..=20).contains(&priced_moduli(16, None)));
        let counts: Vec<u32> = [256u64, 4096, 65536]
            .iter()
            .map(|&k| priced_moduli(k, None))
            .collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
        assert!(counts.iter().all(|&r| (2..=20).contains(&r)), "{counts:?}");
    }
}
