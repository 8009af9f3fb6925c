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
//! process about [`GPU_START_S`] once (CUDA context, cuBLAS handles, kernels, first pinned
//! staging). Until then a *pre-engine* ([`pre_engine`]) prices each call with the profile the
//! process would use without a GPU name (`OZAKI_PROFILE`, else the built-in GPU profile), and
//! the start-up is bought like a ski rental ([`rent`]): calls go to the vendor BLAS while the
//! time the GPU routes would have saved on them, summed, stays under the start-up cost; the
//! call that would cross it starts the GPU. A process whose calls are small never creates a
//! context, a short script with one mid-sized product (NumPy's 4096² took 986 ms under the
//! shim against 134 ms on OpenBLAS, session 3) stays on the CPU, and a long run loses at
//! most about one start-up to the rule (one large call, whose own gain exceeds it, starts the
//! GPU at once).

use super::Choice;
use crate::abi::Shape;
use crate::config::{Config, notice};
use ozaki_core::engine::choose::{Decision, Engine, blas_threads};
use ozaki_core::engine::profile::{self, Profile, ProfileSource};
use ozaki_core::engine::{CallShape, Residency};
use ozaki_core::route::Route;
use ozaki_core::trace::Routine;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

static ENGINE: OnceLock<Engine> = OnceLock::new();
static PRE_ENGINE: OnceLock<Option<Engine>> = OnceLock::new();

/// What starting the GPU costs a process once, in seconds: NumPy's first 4096² product under
/// the shim took 986 ms against 18 ms for the second (H200 machine, session 3, lead's run 2;
/// session 2 measured 0.5-0.9 s of CUDA context creation alone).
pub const GPU_START_S: f64 = 0.8;

/// Time the GPU routes would have saved, as priced, on the calls the pre-engine kept on the
/// vendor BLAS (ns): the rent paid so far.
static FORGONE_NS: AtomicU64 = AtomicU64::new(0);

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

/// The pre-engine's decision for `cs` when the call stays on the vendor BLAS without starting
/// the GPU ([`rent`]); `None` when it starts the GPU, or the engine is already built.
fn before_start(cs: &CallShape, moduli: Option<u32>) -> Option<Arc<Decision>> {
    if ENGINE.get().is_some() {
        return None;
    }
    let d = pre_engine()?.decide_with(cs, moduli, || Some(priced_moduli(cs.k, moduli)));
    let gain = gpu_gain_s(&d.prediction.predicted_s)?;
    rent(&FORGONE_NS, gain, GPU_START_S).then_some(d)
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

/// The ski-rental rule: whether a call whose GPU gain is `gain_s` stays on the vendor BLAS
/// (rents) given the gains already forgone; adds its gain when it does. A call without gain
/// always rents; the first call that would bring the forgone total to `start_s` buys (the
/// caller starts the GPU). So the rule never pays the start-up for less than it saves, and
/// never forgoes more than one start-up's worth.
fn rent(forgone_ns: &AtomicU64, gain_s: f64, start_s: f64) -> bool {
    if gain_s.is_nan() || gain_s <= 0.0 {
        return true;
    }
    let gain_ns = (gain_s * 1e9).min(u64::MAX as f64 / 4.0) as u64;
    let start_ns = (start_s * 1e9) as u64;
    forgone_ns
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
            (f + gain_ns < start_ns).then_some(f + gain_ns)
        })
        .is_ok()
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
                        "vendor: the GPU is not started yet ({} would win, priced before the start; \
                         the GPU starts once such gains reach its {GPU_START_S} s start-up)",
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
    fn ski_rental_rents_until_the_forgone_gains_reach_the_start_up() {
        let f = AtomicU64::new(0);
        // no gain: always rent, nothing forgone
        assert!(rent(&f, 0.0, 1.0) && rent(&f, -3.0, 1.0) && rent(&f, f64::NAN, 1.0));
        assert_eq!(f.load(Ordering::Relaxed), 0);
        // 0.3 s gains: rent three times (0.9 s forgone), buy at the fourth
        assert!((0..3).all(|_| rent(&f, 0.3, 1.0)));
        assert!(!rent(&f, 0.3, 1.0));
        assert_eq!(f.load(Ordering::Relaxed), 900_000_000);
        // one call worth more than the start-up buys at once
        assert!(!rent(&AtomicU64::new(0), 2.0, 1.0));
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
