//! `OZAKI_ROUTE=auto`: the per-record engine picks the route of each call.
//!
//! The engine ([`ozaki_core::engine::choose::Engine`]) is built once, at the first `auto`
//! call, from the profile that `OZAKI_PROFILE`, the per-GPU profile in the cache directory
//! or the built-in profile of the detected GPU gives (one stderr line when it is not one
//! measured on this machine), for the GPU slots this process owns (with two or
//! more it also prices splits over them). Decisions are cached per shape, moduli count and
//! concurrency class in the engine, and each thread keeps its recent ones ([`super::memo`]),
//! so a shape the thread priced lately costs a look-up that writes nothing other threads
//! share; the prediction is copied into the trace record only when tracing is on.
//!
//! The moduli count priced for GPU Ozaki ([`priced_moduli`]) is `OZAKI_MODULI` when set;
//! otherwise the route picks it per call by the accuracy rule from the operands' line
//! statistics, which the engine does not see before the call, so it prices the rule's count
//! for normally distributed lines at this k with the GPU route's default scaling
//! (`ozaki_core::rule::typical_moduli`). The trace's `moduli` field shows the count really
//! used. Inputs the emulation cannot represent (NaN/Inf, too wide a range) are caught by the
//! route itself, which then falls back.
//!
//! Building the engine initialises the GPU (its name selects the profile), which costs
//! about 0.9 s (measured on the H200s: NumPy's first call, and each ScaLAPACK rank whose
//! local calls all stayed on the CPU). Until the engine is built, a *pre-engine*
//! (`pre_engine`) prices each call with the profile the engine will use, found by the GPU's
//! name as the kernel driver lists it, before any CUDA call (`OZAKI_PROFILE`, else this GPU's
//! profile in the cache directory, else its model's built-in one; the H200's when the driver
//! names no single model):
//! - the vendor clearly faster ([`CLEARLY`]): the vendor BLAS, without touching CUDA (a
//!   process whose calls are all small never creates a context); the vendor's price is the
//!   one this process's timed vendor calls of the class corrected, so a vendor BLAS that runs
//!   far slower than the profile says stops being "clearly faster";
//! - otherwise the GPU starts on a background thread ([`super::start`], once per process,
//!   the engine built and the GPU warmed up there), and the call runs on the vendor BLAS
//!   unless it is big enough to be better off waiting for the start
//!   ([`super::start::while_starting`]); with `OZAKI_GPU_START=blocking` every such call
//!   waits for the start instead (at most [`super::start::BLOCKING_WAIT`]). Once the GPU is
//!   up, the engine decides every call; if it could not start, every call goes to the vendor
//!   BLAS.

use super::choose_note::{Early, EngineNote, Gated, Pricing};
use super::gate::Gate;
use super::inflight::{self, Flight};
use super::learned::learned;
use super::memo::{self, Margin, Memoized};
use super::start::{self, Ledger, Starter, Status, WhileStarting};
use super::wake;
use super::{Choice, adjust};
use crate::abi::Canon;
use crate::config::{Config, GpuStart, HostRegister, notice};
use crate::lazy::Lazy;
use ozaki_core::blas::Trans;
use ozaki_core::engine::adapt::GpuTraits;
use ozaki_core::engine::choose::{Decision, Engine, blas_threads};
use ozaki_core::engine::correct::ClassKey;
use ozaki_core::engine::priced_moduli::priced_moduli;
use ozaki_core::engine::profile::{self, Profile, ProfileSource};
use ozaki_core::engine::{CallShape, Residency};
use ozaki_core::route::Route;
use ozaki_core::trace::{DuringStart, Phases, Routine, StartNote};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

static ENGINE: Lazy<Engine> = Lazy::new();
/// The calls too small for the GPU, by the engine's prices ([`super::gate`]).
static GATE: Gate = Gate::new(CLEARLY * adjust::CORRECTABLE);
/// The same by the pre-engine's prices.
static PRE_GATE: Gate = Gate::new(CLEARLY * adjust::CORRECTABLE);
static PRE_ENGINE: Lazy<Option<Engine>> = Lazy::new();
/// The background start of the GPU ([`super::start`]).
static STARTER: Starter = Starter::new();
/// The gain priced for the GPU before its start ([`super::start::Ledger`]).
static LEDGER: Ledger = Ledger::new();

/// How much faster than every GPU route the pre-engine must price the vendor BLAS to send a
/// call there without initialising the GPU: margin for the profile it prices with differing
/// from the one the engine will use (a GPU the kernel driver does not name, a profile scaled
/// to the GPU's measured resources).
pub const CLEARLY: f64 = 2.0;

/// What the driver reports about this process's GPU (name, architecture, resources), when a
/// GPU route can run here (initialises the GPU: the first `auto` call pays for it once, as
/// the first GPU call would anyway).
pub fn gpu_traits() -> Option<GpuTraits> {
    let libs = gpu_kernels::probe::Libraries::detect();
    if let Some(missing) = libs.native_missing() {
        // A CPU-only machine needs no line on every process's stderr; a GPU machine that lacks
        // the CUDA libraries does (this runs once per process).
        if libs.driver_without_libraries() {
            notice(&format!(
                "auto: a CUDA driver is here but {missing}; calls go to the vendor BLAS"
            ));
        } else {
            tracing::info!("auto: no GPU route in this process ({missing})");
        }
        return None;
    }
    match gpu_kernels::gpu() {
        Ok(g) => Some(g.traits()),
        Err(e) => {
            tracing::info!("auto: no GPU route in this process ({e})");
            None
        }
    }
}

/// The name of the GPU this process would use ([`gpu_traits`]).
pub fn gpu_name() -> Option<String> {
    gpu_traits().map(|g| g.name)
}

fn build() -> Engine {
    let gpu = gpu_traits();
    let env = ozaki_core::env::var(ozaki_core::env::PROFILE);
    let mut prof = match profile::resolve(env.as_deref(), gpu.as_ref()) {
        Ok((p, src, warn)) => {
            // Without a GPU there is nothing to choose between, and the built-in profile of
            // this GPU model prices every route: neither needs a line on every process's
            // stderr (`OZAKI_LOG=info` shows them). This runs once per process.
            match (warn, &gpu) {
                (Some(w), Some(_)) if !w.routine => notice(&w.text),
                (Some(w), _) => tracing::info!("auto: {w}"),
                _ => {}
            }
            let src = match src {
                ProfileSource::Env(p) | ProfileSource::Cache(p) => p.display().to_string(),
                ProfileSource::BuiltIn(n) => format!("built-in {n}"),
                ProfileSource::Scaled(n) => format!("built-in {n}, scaled to this GPU"),
            };
            tracing::info!(profile = %p.name, source = %src, "auto: engine profile");
            p
        }
        Err(e) => {
            notice(&format!("{e}; using the built-in profile"));
            profile::resolve(None, gpu.as_ref())
                .map_or_else(|_| Profile::built_in("cpu-only").expect("ships"), |x| x.0)
        }
    };
    priced_registration(&mut prof, crate::config::get().host_register);
    if gpu.is_none() && prof.gpu.take().is_some() {
        tracing::info!(
            "auto: the profile describes a GPU but none is usable here; pricing the vendor route only"
        );
    }
    let engine = engine_for(prof);
    // With two or more GPU slots the engine also prices splits over them.
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

/// Makes `prof` price the uploads the host path will run: with `OZAKI_HOST_REGISTER=0` its
/// measured page-locked rate is dropped, so large calls are priced staged, as they run.
fn priced_registration(prof: &mut Profile, mode: HostRegister) {
    if let Some(g) = prof.gpu.as_mut()
        && !mode.on(g.link.registers())
    {
        g.link.h2d_registered = 0.0;
    }
}

/// Whether this process's large host-resident gemms page-lock the caller's operands: what
/// `OZAKI_HOST_REGISTER` says, and under `auto` what the engine's profile measured.
pub fn registers(mode: HostRegister) -> bool {
    match mode {
        HostRegister::Auto => engine()
            .profile()
            .gpu
            .as_ref()
            .is_some_and(|g| g.link.registers()),
        // forced: the profile is not consulted (nor the engine built for it)
        forced => forced.on(false),
    }
}

/// (CPUs this process may run on, the vendor BLAS thread count priced): what the engine
/// prices with, and what the trace header records for `ozaki replay`.
pub fn machine_threads() -> (u32, u32) {
    static T: OnceLock<(u32, u32)> = OnceLock::new();
    *T.get_or_init(|| {
        let avail = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        (avail, blas_threads(ozaki_core::env::var, avail))
    })
}

/// An engine pricing `prof` for the vendor BLAS's thread count in this process, and the
/// vendor calls `OZAKI_VENDOR_THREADS` narrows at their share of the vendor's threads
/// (`super::vendor_threads`; a call from an OpenMP team counts its team in flight).
fn engine_for(prof: Profile) -> Engine {
    Engine::new(prof, machine_threads().1)
        .with_vendor_threads_shared(crate::config::get().shares_vendor_threads())
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
            // The profile the engine will use, found by the GPU's name as the kernel driver
            // lists it (no CUDA call). Priced with another GPU's profile, the calls before the
            // start misjudge what starting gains: on an H100 host the H200's profile prices
            // PySCF's 1953 x 122 x 1953 at 4.0 ms on the GPU, the H100's at 2.9 ms (`ozaki
            // explain`). A GPU the driver does not name is priced with the H200's.
            let env = ozaki_core::env::var(ozaki_core::env::PROFILE);
            let model = gpu_kernels::probe::gpu_model_without_init();
            let prof = match profile::resolve_by_name(env.as_deref(), model) {
                Ok(Some((p, _))) => p,
                Ok(None) => Profile::built_in_for_gpu("H200")?.1,
                Err(_) => return None,
            };
            prof.gpu.as_ref()?;
            let mut prof = prof;
            priced_registration(&mut prof, crate::config::get().host_register);
            Some(engine_for(prof))
        })
        .as_ref()
}

/// What the pre-engine decided for a call, before the engine is built. Returned once per
/// call and matched at once, never stored: boxing the large variant would allocate on every
/// call made before the engine is up (all of a program's calls when its GPU never starts).
#[allow(clippy::large_enum_variant)]
enum PreEngine {
    /// The vendor BLAS.
    Vendor(EarlyVendor),
    /// The engine decides (it is up, or being built here); `Some`: the call waited for the
    /// background start.
    Engine(Option<StartNote>),
}

/// A call the pre-engine sent to the vendor BLAS.
struct EarlyVendor {
    /// The pre-engine's decision.
    d: Arc<Decision>,
    /// The size class's bound it was priced at.
    bound: Option<CallShape>,
    /// Why.
    why: Early,
    /// What the call did about the GPU start (for the trace).
    gpu_start: Option<StartNote>,
    /// The class its measured time feeds.
    feedback: Option<(ClassKey, f64)>,
    /// The factor the vendor's price was corrected by.
    fv: f64,
    /// What its measured time may add to the start's ledger.
    credit: Option<start::Credit>,
    /// What the vendor's wake added to the GPU's price.
    wake_s: Option<f64>,
}

/// A trace's `engine.gpu_start`.
fn note(during: DuringStart, elapsed_s: f64, waited_s: Option<f64>) -> Option<StartNote> {
    Some(StartNote {
        during,
        elapsed_s,
        waited_s,
    })
}

/// The module doc's rule for a call arriving before the engine is built, with `in_flight`
/// calls in flight.
fn before_engine(
    pre: &Engine,
    cs: &CallShape,
    moduli: Option<u32>,
    mode: GpuStart,
    in_flight: u32,
) -> PreEngine {
    // The vendor's price as this process's vendor calls measured it (`super::learned`): a
    // vendor running slower than the profile says makes the GPU's gain, and so its start,
    // come sooner. Calls priced close enough for that to matter are timed, clearly the
    // vendor's or not, so their class learns.
    let (m, fv) = decide(pre, cs, moduli, in_flight);
    let (kv, margin) = (m.vendor.0, m.margin);
    let (d, bound) = m.priced;
    let feedback = d
        .gpu
        .filter(|&(_, g)| bound.is_none() && adjust::correctable(d.vendor_s, g))
        .map(|_| (kv, d.vendor_s));
    let to_vendor = |d, bound, why, gpu_start, credit, wake_s: f64| {
        PreEngine::Vendor(EarlyVendor {
            d,
            bound,
            why,
            gpu_start,
            feedback,
            fv,
            credit,
            wake_s: (wake_s > 0.0).then_some(wake_s),
        })
    };
    if clearly(margin, fv) {
        return to_vendor(d, bound, Early::Clearly { fv }, None, None, 0.0);
    }
    // The GPU's price on this host now: its host copies as the vendor's wake leaves them
    // (priced past the clearly-vendor calls, which are most of them and need no clock read).
    let wake_s = wake::extra_s(wake::measured(pre.profile()).as_ref(), &d);
    let gpu = d.gpu.map(|(r, g)| (r, g + wake_s));
    let vendor_s = d.vendor_s * fv;
    // Which side the program's work runs faster on, from the quiet prices of the calls made
    // alone and priced at their own shape, as `adjust` notes them once the GPU is up (the
    // ledger is the process's, so the engine finds what these calls noted).
    let sides = &learned().sides;
    if let Some((_, g)) = d.gpu
        && in_flight <= 1
        && bound.is_none()
        && adjust::correctable(d.vendor_s, g)
    {
        sides.note(g, vendor_s);
    }
    // A program on the GPU side runs its GPU calls after GPU calls once the GPU is up, where
    // no vendor wake slows their copies: its gains toward the start are priced quiet. Priced
    // with the wake, SciPy LOBPCG's 128 x 128 x 110592 products (21.7 ms on the vendor, 10.4
    // ms quiet on the GPU, 12.9 ms of wake) gained nothing, and the start waited for 97 of
    // the program's 139 calls (H100 host, BENCHMARKS.md "Real programs under the shim").
    let ledger_gpu = if sides.gpu_side() { d.gpu } else { gpu };
    let margin = pre.profile().choice.min_gain;
    let expected = pre
        .profile()
        .gpu
        .as_ref()
        .and_then(|g| g.start_s)
        .unwrap_or(start::START_S);
    let status = match STARTER.status() {
        Status::Idle => {
            // The start begins once the gains priced so far cover what it costs, each at
            // its share of the wall clock among the calls in flight (`start::ledger_gain`).
            // Only calls the GPU is priced well ahead on count (`start::GAIN_RATIO`): a
            // margin-close price is the kind the profile gets wrong.
            let ratio = start::GAIN_RATIO.max(margin);
            // A call that finds few calls in flight may be the first of a team coming in
            // behind it, priced with a correction that the team's overlapped calls taught:
            // its share of the wall clock is taken among as many as the recent timed calls
            // ran beside (`inflight::recent_overlap`). Counted by the calls it found, the
            // first arrivals of PySCF's bursts (1-3 in flight, 1953 x 122 x 1953 corrected
            // to the 52 ms the team's calls took) credited 30-50 ms each, and started a GPU
            // that gained nothing on an H200 host (BENCHMARKS.md, "Real programs under the
            // shim").
            let sharing = in_flight.max(inflight::recent_overlap());
            // the GPU's share of the call is what it holds the GPU for (beside other calls its
            // host copies run outside the GPU's lock, beside the next caller's GPU work)
            let held = |g: f64| d.gpu_held_s(g, sharing);
            let gain = match ledger_gpu {
                Some((_, g)) if vendor_s >= ratio * g => {
                    start::ledger_gain(vendor_s, held(g), sharing)
                }
                _ => 0.0,
            };
            let gained = LEDGER.add(gain);
            let cost = start::start_cost_s(expected, mode == GpuStart::Blocking);
            if gained < cost {
                let why = Early::NotStarted { gained, cost, fv };
                // priced at its own shape: its measured time is this call's to credit
                let credit = ledger_gpu
                    .filter(|_| bound.is_none())
                    .map(|(_, g)| start::Credit {
                        gpu_s: g,
                        held_s: held(g),
                        credited_s: gain,
                        concurrent: sharing,
                        ratio,
                        cost_s: cost,
                        shape: dims(cs),
                    });
                return to_vendor(d, None, why, None, credit, wake_s);
            }
            begin_start(dims(cs), sharing)
        }
        s => s,
    };
    let p = &d.prediction.predicted_s;
    let vendor = p
        .get(Route::Vendor.name())
        .map(|_| vendor_s * start::VENDOR_SLOWDOWN_WHILE_STARTING);
    // (position in `predicted_s`, seconds): the trace names it when the record is written.
    let best = p
        .iter()
        .enumerate()
        .filter(|(_, (r, _))| r.as_str() != Route::Vendor.name())
        .min_by(|a, b| a.1.1.total_cmp(b.1.1))
        .map(|(i, (_, &s))| (i, s + wake_s));
    let elapsed_s = match status {
        Status::Ready => return PreEngine::Engine(None),
        Status::Failed | Status::Idle => {
            let start = note(DuringStart::Failed, 0.0, None);
            return to_vendor(d, None, Early::Failed, start, None, wake_s);
        }
        Status::Starting { elapsed_s } => elapsed_s,
    };
    let rule = match mode {
        GpuStart::Blocking => WhileStarting::Wait,
        GpuStart::Background => {
            start::while_starting(vendor, best.as_ref().map(|b| b.1), expected, elapsed_s)
        }
    };
    match rule {
        WhileStarting::Vendor => {
            let why = Early::Starting {
                elapsed_s,
                remaining_s: start::remaining_s(expected, elapsed_s),
                best,
                vendor_s: vendor,
                fv,
            };
            let start = note(DuringStart::Vendor, elapsed_s, None);
            to_vendor(d, None, why, start, None, wake_s)
        }
        WhileStarting::Wait => {
            let t = std::time::Instant::now();
            let limit = match mode {
                GpuStart::Blocking => start::BLOCKING_WAIT.as_secs_f64(),
                // Both prices are finite here (while_starting checked them).
                GpuStart::Background => {
                    start::wait_limit_s(vendor.unwrap_or(0.0), best.map_or(0.0, |b| b.1))
                }
            };
            let status = STARTER.wait(std::time::Duration::from_secs_f64(limit));
            let waited = t.elapsed().as_secs_f64();
            let (why, during) = match status {
                Status::Ready => {
                    return PreEngine::Engine(note(DuringStart::Waited, elapsed_s, Some(waited)));
                }
                Status::Starting { .. } => (
                    Early::GaveUp {
                        waited_s: waited,
                        elapsed_s,
                    },
                    DuringStart::Vendor,
                ),
                _ => (
                    Early::FailedWaiting { waited_s: waited },
                    DuringStart::Failed,
                ),
            };
            let start = note(during, elapsed_s, Some(waited));
            to_vendor(d, None, why, start, None, wake_s)
        }
    }
}

/// A call's m, n and k, as the warm-up takes them.
fn dims(cs: &CallShape) -> (usize, usize, usize) {
    (cs.m as usize, cs.n as usize, cs.k as usize)
}

/// Begins the background start ([`start_gpu`]) for calls like `shape` made by `callers` at
/// once, unless it began already; returns where it stands.
fn begin_start(shape: (usize, usize, usize), callers: u32) -> Status {
    start::register_exit_handler();
    STARTER.begin(move || start_gpu(shape, callers))
}

/// The background start's job ([`super::start`]): loads the CUDA libraries, builds the engine
/// (initialising the GPU), warms the GPU up for calls like `shape` made by `callers` at once;
/// true when the GPU is up. A GPU that cannot start is said once on stderr, unless the
/// process is exiting.
fn start_gpu(shape: (usize, usize, usize), callers: u32) -> bool {
    let t = std::time::Instant::now();
    let loaded = load_libraries_beside_cuinit();
    // After the libraries registered theirs: runs before them at exit.
    start::register_exit_handler();
    if loaded.is_err() {
        return false;
    }
    engine();
    let up = gpu_kernels::device::available();
    let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e3;
    tracing::info!(ms = ms(t), up = up.is_ok(), "auto: GPU start");
    match up {
        Ok(()) => {
            let w = std::time::Instant::now();
            if let Err(e) = gpu_kernels::warm_up::warm_up(shape, callers) {
                tracing::info!("auto: GPU warm-up incomplete ({e})");
            }
            tracing::info!(ms = ms(w), "auto: GPU warm-up");
            true
        }
        Err(e) => {
            if !gpu_kernels::start_gate::closed() {
                notice(&format!(
                    "auto: the GPU could not be started ({e}); calls go to the vendor BLAS"
                ));
            }
            false
        }
    }
}

/// Loads the CUDA libraries while another thread initialises the driver: `cuInit` and loading
/// cuBLAS, cuBLASLt and NVRTC took 0.3-0.5 s each on the H200 host (BENCHMARKS.md, "GPU
/// start-up off the first call") and need nothing of each other but the driver library,
/// loaded first, so the start waits for the longer of the two instead of their sum. Both are
/// steps of the start gate, which a process exit waits for. Without a thread to spare, the
/// driver initialises later, in the GPU's own initialisation.
fn load_libraries_beside_cuinit() -> Result<gpu_kernels::probe::Libraries, gpu_kernels::GpuError> {
    use gpu_kernels::device::DriverInit;
    use gpu_kernels::start_gate::step;
    let cuinit = gpu_kernels::probe::driver_present()
        .then(|| step("load CUDA driver", DriverInit::resolve).ok())
        .flatten();
    std::thread::scope(|s| {
        let (ready, inside) = std::sync::mpsc::sync_channel(1);
        let init = cuinit.and_then(|i| {
            std::thread::Builder::new()
                .name("ozaki-cuinit".into())
                .spawn_scoped(s, move || {
                    step("cuInit", || {
                        let _ = ready.send(());
                        i.run()
                    })
                })
                .ok()
        });
        // A new thread's start-up can wait for the loader's lock, which loading a library
        // holds while the library's initialisers run (begun at once, the load kept the stand-
        // in driver's cuInit waiting until it ended in about half the runs of the gpu_start
        // test): the load begins once the thread is about to enter cuInit.
        if init.is_some() {
            let _ = inside.recv_timeout(std::time::Duration::from_secs(1));
        }
        let loaded = step("load CUDA libraries", || {
            Ok(gpu_kernels::probe::load_present())
        });
        if let Some(h) = init {
            // its outcome is the GPU initialisation's to report, when it calls cuInit again
            let _ = h.join();
        }
        loaded
    })
}

/// `engine`'s decision for `cs` when it is "vendor, by at least [`CLEARLY`] over every GPU
/// route it priced".
#[cfg(test)]
fn clearly_vendor_by(
    engine: &Engine,
    cs: &CallShape,
    moduli: Option<u32>,
) -> Option<Arc<Decision>> {
    let d = engine.decide_with(cs, moduli, || Some(priced_moduli(cs.k, moduli)));
    is_clearly_vendor(&d, 1.0).then_some(d)
}

/// Whether `d` is "vendor, by at least [`CLEARLY`] over every GPU route it priced", with
/// the vendor's price multiplied by `vendor_factor`: the correction this process's measured
/// vendor calls of the class give it ([`vendor_factor`]). A vendor BLAS measured several
/// times slower than the profile prices it (reference LAPACK's `dlarfb` updates over
/// Debian's OpenBLAS, 4-5x on the H200 host) is not clearly faster than the GPU any more.
fn is_clearly_vendor(d: &Decision, vendor_factor: f64) -> bool {
    clearly(Margin::of(d), vendor_factor)
}

/// [`is_clearly_vendor`] of the decision whose margin is `margin` ([`memo::Margin`]).
fn clearly(margin: Option<Margin>, vendor_factor: f64) -> bool {
    memo::ahead_by(margin, CLEARLY * vendor_factor)
}

/// The engine's view of a checked call, in its canonical (column-major) form: a row-major
/// CBLAS call is priced as the column-major product the routes compute, so the decision
/// and the route see one shape.
pub fn canonical_shape(c: &Canon) -> CallShape {
    match *c {
        Canon::Gemm {
            transa,
            transb,
            m,
            n,
            k,
            alpha,
            beta,
            ldc,
            ..
        } => CallShape {
            routine: Routine::Dgemm,
            m: m as u64,
            n: n as u64,
            k: k as u64,
            transa: transa == Trans::Yes,
            transb: transb == Trans::Yes,
            beta_zero: beta == 0.0,
            alpha_zero: alpha == 0.0,
            residency: Residency::Host,
            c_gaps: ldc > m,
        },
        Canon::Syrk {
            trans,
            n,
            k,
            alpha,
            beta,
            ldc,
            ..
        } => CallShape {
            routine: Routine::Dsyrk,
            m: n as u64,
            n: n as u64,
            k: k as u64,
            transa: trans == Trans::Yes,
            transb: false,
            beta_zero: beta == 0.0,
            alpha_zero: alpha == 0.0,
            residency: Residency::Host,
            c_gaps: ldc > n,
        },
    }
}

/// The route `auto` takes for this call, with the one decision behind it and the
/// prediction for the trace.
pub fn auto(canon: &Canon, config: &Config) -> Choice {
    let cs = canonical_shape(canon);
    let mut flight = Flight::enter_in_team(super::vendor_threads::team(config, cs.mnk()));
    let in_flight = flight.concurrent();
    if let Some(mut choice) = gated(&cs, config, in_flight, flight.team()) {
        // counted in flight through the vendor's work, as every call `auto` decides
        choice.flight = Some(flight);
        return choice;
    }
    let mut waited = None;
    // Before the start ends, the start decides: its job builds the engine and then warms the
    // GPU up, holding it (`Starter::under_way`).
    if (ENGINE.get().is_none() || STARTER.under_way())
        && let Some(pre) = pre_engine()
    {
        match before_engine(pre, &cs, config.moduli, config.gpu_start, in_flight) {
            PreEngine::Vendor(v) => {
                let beside_start = v
                    .gpu_start
                    .as_ref()
                    .is_some_and(|n| n.during == DuringStart::Vendor);
                let engine = config.tracing().then(|| {
                    Box::new(EngineNote {
                        pricing: Pricing::Decided(Arc::clone(&v.d)),
                        bound: v.bound,
                        early: Some(v.why),
                        note: None,
                        waited_s: None,
                        gpu_start: v.gpu_start,
                        concurrent: in_flight,
                        team: flight.team(),
                        correction: (v.fv != 1.0).then_some(v.fv),
                        queue_s: None,
                        wake_s: v.wake_s,
                        explore: false,
                    })
                });
                return Choice {
                    route: Route::Vendor,
                    engine,
                    decision: Some(v.d),
                    feedback: v.feedback,
                    start_credit: v.credit,
                    flight: Some(flight),
                    on_decline: Route::Vendor,
                    decline_key: None,
                    beside_start,
                };
            }
            PreEngine::Engine(w) => waited = w,
        }
    }
    let e = engine();
    if e.profile().gpu.is_none() && !config.tracing() {
        // Nothing to choose between and nothing to record (the flight still holds the
        // team the vendor's threads are shared by).
        return Choice {
            flight: Some(flight),
            ..Choice::vendor(None)
        };
    }
    let (m, _) = decide(e, &cs, config.moduli, in_flight);
    let (d, bound) = m.priced;
    // Priced at its class's bound (clearly the vendor's): nothing to correct, and the
    // bound's prediction is not this call's to time.
    let a = match bound {
        Some(_) => adjust::Adjusted::plain(Route::Vendor),
        None => {
            // the wait behind the GPU, read as this call's GPU time is reserved
            let wait_s = match d.gpu {
                Some((_, g)) => flight.reserve_gpu(d.gpu_held_s(g, in_flight)),
                None => inflight::gpu_wait_s(),
            };
            let measured_wake = wake::measured(e.profile());
            let wake_s = wake::extra_s(measured_wake.as_ref(), &d);
            let switch_s = wake::left_s(measured_wake.as_ref(), &d, canon.mnk());
            adjust::adjust(
                learned(),
                &d,
                &cs,
                e.profile().choice.min_gain,
                config.explore,
                adjust::Beside {
                    wait_s,
                    wake_s,
                    switch_s,
                },
                || EXPLORE_TICK.fetch_add(1, Ordering::Relaxed),
            )
        }
    };
    if let Some((_, g)) = d.gpu {
        // A call sent to the GPU stays on its queue at the GPU time this process measured
        // for its class, which later calls wait behind; any other leaves it.
        flight.settle_gpu(match a.route {
            Route::Vendor => 0.0,
            _ => d.gpu_queue_s(g, g * a.correction.unwrap_or(1.0), in_flight),
        });
    }
    let engine = config.tracing().then(|| {
        Box::new(EngineNote {
            pricing: Pricing::Decided(Arc::clone(&d)),
            bound,
            early: None,
            note: a.note,
            waited_s: waited.as_ref().map(|w| w.waited_s.unwrap_or(0.0)),
            gpu_start: waited,
            concurrent: in_flight,
            team: flight.team(),
            correction: a.correction,
            queue_s: a.queue_s,
            wake_s: a.wake_s,
            explore: a.explore,
        })
    });
    Choice {
        route: a.route,
        engine,
        decision: Some(d),
        feedback: a.feedback,
        start_credit: None,
        flight: Some(flight),
        on_decline: a.on_decline,
        decline_key: a.decline_key,
        beside_start: false,
    }
}

/// The vendor route for a call too small for the GPU by the prices of the engine that
/// decides it now ([`super::gate`]), without a decision; `None` for every other call.
fn gated(cs: &CallShape, config: &Config, in_flight: u32, team: u32) -> Option<Choice> {
    let (e, pre) = deciding_now().unwrap_or_else(|| match pre_engine() {
        Some(p) => (p, true),
        None => (engine(), false),
    });
    let gate = gate_of(pre);
    let moduli = config.moduli;
    let price =
        |s: &CallShape, c| e.decide_loaded(s, moduli, || Some(priced_moduli(s.k, moduli)), c);
    if !gate.vendor(cs, in_flight, price) {
        return None;
    }
    let engine = config.tracing().then(|| {
        let g = Gated {
            shape: *cs,
            pre,
            factor: vendor_factor_now,
            price: price_gated,
        };
        Box::new(EngineNote::gated(g, in_flight, team))
    });
    Some(Choice::vendor(engine))
}

/// Whether [`gated`] would send `cs`, with `in_flight` calls in flight, to the vendor
/// without pricing or initialising anything: the gate of the engine deciding now already
/// holds its class as the vendor's (`super::small`).
pub fn gated_already(cs: &CallShape, in_flight: u32) -> bool {
    deciding_now().is_some_and(|(_, pre)| gate_of(pre).known_vendor(cs, in_flight))
}

/// The engine deciding calls now, as far as it is known without initialising anything: the
/// engine once built, else the pre-engine once looked for and found (`true`).
fn deciding_now() -> Option<(&'static Engine, bool)> {
    match (ENGINE.get(), PRE_ENGINE.get()) {
        (Some(e), _) => Some((e, false)),
        (None, Some(Some(p))) => Some((p, true)),
        _ => None,
    }
}

/// The gate of the engine (`pre`: the pre-engine).
fn gate_of(pre: bool) -> &'static Gate {
    if pre { &PRE_GATE } else { &GATE }
}

/// The vendor's correction factor for `cs` with `in_flight` calls in flight, as [`decide`]
/// reads it ([`Gated::factor`]).
fn vendor_factor_now(cs: &CallShape, in_flight: u32) -> f64 {
    let c = ozaki_core::engine::load::concurrency_class(in_flight);
    let kv = ClassKey::new(Route::Vendor, cs.routine, cs.m, cs.n, cs.k, c);
    learned().corrections.factor_at(kv.placed())
}

/// Prices a gated call for its trace record ([`Gated::price`]) as [`decide`] prices it on a
/// miss, by the engine that gated it (`pre`: the pre-engine), with `in_flight` calls in flight
/// and the vendor's correction factor `fv`.
fn price_gated(cs: &CallShape, pre: bool, in_flight: u32, fv: f64) -> memo::Priced {
    let e = pre.then(pre_engine).flatten().unwrap_or_else(engine);
    let moduli = crate::config::get().moduli;
    decide_by_class(e, cs, class_bound(cs), moduli, in_flight, fv)
}

/// The engine's decision for `cs` with `in_flight` calls in flight, through this thread's
/// recent decisions ([`memo`]), then the engine's cache (the moduli count depends on k and
/// `OZAKI_MODULI` only; it is computed on a miss); with the decision's margin, the call's
/// vendor class and the factor this process's measured vendor calls of that class give the
/// vendor's price (1 before the class holds enough samples).
///
/// A decision priced at its class's bound holds only while the vendor, corrected by that
/// factor, stays clearly faster there; otherwise the call is priced at its own shape.
fn decide(e: &Engine, cs: &CallShape, moduli: Option<u32>, in_flight: u32) -> (Memoized, f64) {
    let c = ozaki_core::engine::load::concurrency_class(in_flight);
    // A small call is looked up under its size class's bound first, where a decision priced
    // at that bound is kept: a program whose small calls all differ in shape (reference
    // LAPACK's panels) then prices and copies a decision once per class, not once per call.
    // Such an entry carries the vendor class of the call that priced it, which for every
    // other member of the class is the same unless a dimension is an exact power of two
    // (then a neighbouring class's correction is what "clearly the vendor's" is read with).
    let bound = class_bound(cs);
    let bound_key = bound.map(|b| memo::Key::new(e, &b, moduli, c));
    let key = memo::Key::new(e, cs, moduli, c);
    for k in bound_key.iter().chain(std::iter::once(&key)) {
        if let Some(m) = memo::get(k) {
            let fv = learned().corrections.factor_at(m.vendor.1);
            if m.priced.1.is_none() || clearly(m.margin, fv) {
                return (m, fv);
            }
        }
    }
    let kv = ClassKey::new(Route::Vendor, cs.routine, cs.m, cs.n, cs.k, c);
    let fv = learned().corrections.factor_at(kv.placed());
    let priced = decide_by_class(e, cs, bound, moduli, in_flight, fv);
    let keep = match (&priced.1, bound_key) {
        (Some(_), Some(b)) => b,
        _ => key,
    };
    (memo::put(keep, priced, kv), fv)
}

/// The size class's bound a small call is first priced at (m, n, k rounded up to powers of
/// two; [`SMALL_MNK`]), when it differs from the call.
fn class_bound(cs: &CallShape) -> Option<CallShape> {
    if cs.mnk() > SMALL_MNK {
        return None;
    }
    let bound = super::gate::size_class_bound(cs);
    (bound != *cs).then_some(bound)
}

/// Calls with m n k at most this are first priced at their size class's bound (m, n, k
/// rounded up to powers of two), so that a program whose small calls all differ in shape
/// (reference LAPACK's recursive panels: 4095 x 1 x 1, 4094 x 2 x 2, ...) prices each class
/// once instead of each call: an uncached decision costs about 10 µs, several times the
/// vendor's own time for such a call.
const SMALL_MNK: u64 = 1 << 24;

/// The engine's decision for `cs`: the decision at its size class's `bound`
/// ([`class_bound`]) when that one is clearly the vendor (a bigger call gains more from the
/// GPU than a smaller one of its class, so the call itself is even more clearly the
/// vendor's), then that bound; else the call's own decision and `None`.
fn decide_by_class(
    e: &Engine,
    cs: &CallShape,
    bound: Option<CallShape>,
    moduli: Option<u32>,
    in_flight: u32,
    vendor_factor: f64,
) -> (Arc<Decision>, Option<CallShape>) {
    if let Some(bound) = bound {
        let d = e.decide_loaded(
            &bound,
            moduli,
            || Some(priced_moduli(bound.k, moduli)),
            in_flight,
        );
        if is_clearly_vendor(&d, vendor_factor) {
            return (d, Some(bound));
        }
    }
    let d = e.decide_loaded(cs, moduli, || Some(priced_moduli(cs.k, moduli)), in_flight);
    (d, None)
}

/// Counts the calls eligible for exploration ([`adjust`]).
static EXPLORE_TICK: AtomicU32 = AtomicU32::new(1);

/// Feeds a call's measured time into the class its choice named, when the route it was
/// priced for is the one that produced C. `seconds` is the whole call; the time it waited
/// for the GPU behind other callers and the time it grew pinned memory that later calls
/// reuse (`done`'s `Phases::not_own_work_ns`) are taken off, since the class's price is the
/// route's own work (the wait is priced per call, [`inflight`]; the growth is a one-off).
/// PySCF's first round of 1953 x 122 x 1953 products on the GPU, each growing its own
/// pinned buffer, taught their class a factor of 53 and sent the next round to the vendor
/// (BENCHMARKS.md "The start narrowing and the vendor's spin, side by side").
///
/// A vendor call priced before the GPU start adds what its measured time gains the GPU
/// beyond its price to the start's ledger ([`start::Credit`]); when that covers the start,
/// the start begins now ([`start::Credit::begins`]), else the next call priced weighs it.
/// Called for timed calls only ([`Choice::timed`]), each of which also notes the calls in
/// flight it saw ([`inflight::note_overlap`]).
pub fn feed(choice: &Choice, done: &super::Executed, seconds: f64) {
    let ending_with = crate::lazy::calls_in_flight();
    let began_with = choice.flight.as_ref().map_or(1, |f| f.concurrent());
    inflight::note_overlap(began_with.max(ending_with));
    if let Some(credit) = &choice.start_credit
        && done.route == Route::Vendor
        && done.fallback.is_none()
    {
        let gained = LEDGER.add(credit.extra_s(seconds, ending_with));
        if credit.begins(gained) && STARTER.status() == Status::Idle {
            begin_start(credit.shape, credit.concurrent.max(ending_with));
        }
    }
    if let Some((key, predicted)) = &choice.feedback
        && key.route == done.route
        && done.fallback.is_none()
    {
        let not_own = done
            .outcome
            .phases
            .as_ref()
            .map_or(0, Phases::not_own_work_ns) as f64
            * 1e-9;
        learned().corrections.record_call(
            key,
            (seconds - not_own).max(0.0),
            predicted.max(f64::MIN_POSITIVE),
        );
    }
}

/// Feeds what the accuracy rule did with a GPU Ozaki call into its class's decline memory.
pub fn feed_decline(choice: &Choice, done: &super::Executed) {
    if let Some(key) = &choice.decline_key {
        if done.declined {
            learned().declines.declined(key);
        } else if done.route == Route::GpuOzaki {
            learned().declines.accepted(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::RouteOutcome;

    /// A GPU call that waited behind other callers' GPU work, or grew pinned memory for later
    /// calls, teaches its class the route's own time: 40 ms measured with 30 ms of it waiting
    /// for the GPU (or page-locking a new buffer), against a 10 ms price, leaves the class
    /// uncorrected (x1), not 4x slower; the same calls with neither on record teach it.
    #[test]
    fn what_is_not_the_routes_own_work_is_not_learned_as_its_cost() {
        let _turn = FEED_TURN.lock().unwrap_or_else(|p| p.into_inner());
        let waited = |ns| Phases {
            wait_ns: ns,
            ..Phases::default()
        };
        let page_locked = |ns| Phases {
            transfer_ns: 35_000_000,
            pinned_ns: ns,
            ..Phases::default()
        };
        // shapes no other test feeds (the table is the process's)
        for (key, phases) in [
            (
                ClassKey::new(Route::GpuNative, Routine::Dgemm, 77, 3001, 5, 8),
                &waited as &dyn Fn(u64) -> Phases,
            ),
            (
                ClassKey::new(Route::GpuNative, Routine::Dgemm, 1953, 122, 1953, 16),
                &page_locked,
            ),
        ] {
            let choice = Choice {
                feedback: Some((key, 0.010)),
                ..Choice::forced(Route::GpuNative, None)
            };
            let done = |ns| super::super::Executed {
                route: Route::GpuNative,
                fallback: None,
                outcome: RouteOutcome {
                    phases: Some(phases(ns)),
                    ..RouteOutcome::default()
                },
                declined: false,
            };
            for _ in 0..ozaki_core::engine::correct::MIN_SAMPLES {
                feed(&choice, &done(30_000_000), 0.040);
            }
            let f = learned().corrections.get(&key).expect("fed").factor();
            assert!((f - 1.0).abs() < 1e-6, "{key:?}: {f}");
            for _ in 0..4 * ozaki_core::engine::correct::MIN_SAMPLES {
                feed(&choice, &done(0), 0.040);
            }
            let f = learned().corrections.get(&key).expect("fed").factor();
            assert!(f > 2.0, "{key:?}: {f}");
        }
    }

    /// A vendor call priced before the start adds what its measured time missed to the
    /// start's ledger; the same call falling back, or run by another route, adds nothing.
    #[test]
    fn a_measured_vendor_call_before_the_start_feeds_the_ledger() {
        let _turn = FEED_TURN.lock().unwrap_or_else(|p| p.into_inner());
        let credit = start::Credit {
            gpu_s: 0.0066,
            held_s: 0.0066,
            credited_s: 0.0,
            concurrent: 1,
            ratio: start::CREDIT_RATIO,
            // never covered here: this test process must not start a GPU
            cost_s: f64::INFINITY,
            shape: (128, 128, 110592),
        };
        let choice = Choice {
            start_credit: Some(credit),
            ..Choice::forced(Route::Vendor, None)
        };
        let done = |route, fallback: Option<&str>| super::super::Executed {
            route,
            fallback: fallback.map(str::to_string),
            outcome: RouteOutcome::default(),
            declined: false,
        };
        let total = || LEDGER.add(0.0);
        let before = total();
        feed(&choice, &done(Route::Vendor, None), 0.060);
        let after = total();
        // other tests only add to the ledger
        assert!(
            after - before >= credit.extra_s(0.060, 1) - 1e-9,
            "{before} -> {after}"
        );
        assert!(credit.extra_s(0.060, 1) > 0.05);
        let before = total();
        feed(&choice, &done(Route::GpuNative, None), 0.060);
        feed(&choice, &done(Route::Vendor, Some("vendor: x")), 0.060);
        let after = total();
        assert!(after - before < 0.05, "{before} -> {after}");
    }

    /// The tests that feed timed calls take turns: the process's start ledger and recent
    /// overlap are what they check.
    static FEED_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A timed call that ran with 16 calls in flight (an OpenMP team's burst) leaves that
    /// count behind, and the next call that finds itself alone shares the wall clock with
    /// it: a 1953 x 122 x 1953 product corrected to 45 ms on the vendor against 5.9 ms on the
    /// GPU credits nothing toward the start, where counted alone it credits 39 ms.
    #[test]
    fn a_lone_arrival_after_a_team_s_burst_shares_the_wall_clock_with_the_team() {
        let _turn = FEED_TURN.lock().unwrap_or_else(|p| p.into_inner());
        let team: Vec<crate::lazy::InFlight> =
            (0..16).map(|_| crate::lazy::InFlight::begin()).collect();
        let choice = Choice {
            feedback: Some((
                ClassKey::new(Route::Vendor, Routine::Dgemm, 1953, 122, 1953, 16),
                0.0024,
            )),
            flight: Some(Flight::enter()),
            ..Choice::forced(Route::Vendor, None)
        };
        let done = super::super::Executed {
            route: Route::Vendor,
            fallback: None,
            outcome: RouteOutcome::default(),
            declined: false,
        };
        feed(&choice, &done, 0.052);
        drop(team);
        // (calls elsewhere in this process may have decayed it by a few since)
        let sharing = 1u32.max(inflight::recent_overlap());
        assert!(sharing >= 8, "{sharing}");
        assert_eq!(start::ledger_gain(0.045, 0.0059, sharing), 0.0);
        assert!(start::ledger_gain(0.045, 0.0059, 1) > 0.035);
    }

    /// Small calls go to the vendor BLAS without initialising the GPU; calls where a GPU route
    /// could win (or the vendor wins narrowly) wait for the real engine.
    #[test]
    fn only_clearly_vendor_calls_skip_the_gpu_initialisation() {
        let e = Engine::new(Profile::built_in("h200").unwrap(), 16);
        let small = clearly_vendor_by(&e, &CallShape::gemm(8, 8, 8), None).expect("vendor");
        assert_eq!(small.route, Route::Vendor);
        let p = &small.prediction.predicted_s;
        assert!(p["gpu-native"] >= CLEARLY * p["vendor"], "{p:?}");
        assert!(clearly_vendor_by(&e, &CallShape::gemm(8192, 8192, 8192), None).is_none());
        // whatever is decided without the GPU is what the full engine decides too
        for n in [16u64, 64, 128, 256, 512, 1024, 2048] {
            if let Some(d) = clearly_vendor_by(&e, &CallShape::gemm(n, n, n), None) {
                assert_eq!(e.decide(&CallShape::gemm(n, n, n), Some(14)).route, d.route);
            }
        }
    }
    use crate::abi::{CblasGemm, Verdict, decode_cblas_gemm, decode_fortran_syrk};

    /// Small calls that all differ in shape (reference LAPACK's panels: 1000 x 2 x 2,
    /// 999 x 2 x 2, ...) share one decision per size class: after the first, each call of
    /// the class finds the thread's copy of it instead of pricing and copying its own.
    #[test]
    fn distinct_small_shapes_of_one_size_class_share_the_class_decision() {
        let e: &'static Engine = Box::leak(Box::new(Engine::new(
            Profile::built_in("h200").unwrap(),
            16,
        )));
        let first = decide(e, &CallShape::gemm(1000, 2, 2), None, 1).0;
        let bound = first.priced.1.expect("priced at its size class's bound");
        assert_eq!((bound.m, bound.n, bound.k), (1024, 2, 2));
        for m in (600..1000).rev() {
            let later = decide(e, &CallShape::gemm(m, 2, 2), None, 1).0;
            assert!(
                Arc::ptr_eq(&later.priced.0, &first.priced.0),
                "{m} x 2 x 2 priced again"
            );
        }
        // a call of another class is priced for that class
        let other = decide(e, &CallShape::gemm(300, 2, 2), None, 1).0;
        assert_eq!(other.priced.1.map(|b| b.m), Some(512));
    }

    /// A thread cycling through PySCF's three small shapes gets its decisions from its own
    /// copies: the engine's shared decisions, whose reference counts every calling thread
    /// would otherwise bump on every call, are not touched again once the thread has them.
    #[test]
    fn repeated_calls_leave_the_shared_decisions_untouched() {
        let e: &'static Engine = Box::leak(Box::new(Engine::new(
            Profile::built_in("h200").unwrap(),
            16,
        )));
        let shape = |m, n, k| CallShape {
            transa: true,
            ..CallShape::gemm(m, n, k)
        };
        let shapes = [shape(18, 114, 114), shape(48, 96, 114), shape(48, 48, 114)];
        let first: Vec<_> = shapes.iter().map(|s| decide(e, s, None, 16).0).collect();
        // The decisions the engine's cache shares: each small shape is priced at its bound.
        let shared: Vec<Arc<Decision>> = first
            .iter()
            .map(|m| {
                let bound = m.priced.1.expect("priced at its size class's bound");
                e.decide_loaded(&bound, None, || Some(priced_moduli(bound.k, None)), 16)
            })
            .collect();
        let counts: Vec<usize> = shared.iter().map(Arc::strong_count).collect();
        let mut held = Vec::new();
        for _ in 0..50 {
            for (s, want) in shapes.iter().zip(&shared) {
                let (m, fv) = decide(e, s, None, 16);
                assert_eq!(*m.priced.0, **want);
                assert_eq!(fv, 1.0);
                held.push(m);
            }
        }
        let after: Vec<usize> = shared.iter().map(Arc::strong_count).collect();
        assert_eq!(
            after, counts,
            "150 decisions held: the shared ones' counts moved"
        );
    }

    fn canon(v: Verdict) -> Canon {
        match v {
            Verdict::Compute(c) => c,
            _ => panic!("not a computed call"),
        }
    }

    #[test]
    fn checked_calls_map_to_the_canonical_engine_shape() {
        let (a, b, mut c) = ([0.0f64; 600], [0.0f64; 600], [0.0f64; 600]);
        // Row-major C (30 x 20) = A (30 x 10) B^T: the routes compute the column-major
        // C^T (20 x 30) = B A^T, and that is the shape priced.
        let row = CblasGemm {
            layout: 101,
            transa: 111,
            transb: 112,
            m: 30,
            n: 20,
            k: 10,
            alpha: 1.0,
            a: a.as_ptr(),
            lda: 10,
            b: b.as_ptr(),
            ldb: 10,
            beta: 0.5,
            c: c.as_mut_ptr(),
            ldc: 20,
        };
        let g = canonical_shape(&canon(decode_cblas_gemm(&row, false).verdict));
        assert_eq!(
            (g.m, g.n, g.k, g.transa, g.transb, g.beta_zero, g.c_gaps),
            (20, 30, 10, true, false, false, false)
        );
        // the same C as a block of a wider row-major array: C^T has gaps
        let wide = CblasGemm { ldc: 24, ..row };
        let g = canonical_shape(&canon(decode_cblas_gemm(&wide, false).verdict));
        assert!(g.c_gaps);
        // dsyrk: C is n x n.
        let s = decode_fortran_syrk(
            b'U',
            b'T',
            40,
            9,
            1.0,
            a.as_ptr(),
            9,
            0.0,
            c.as_mut_ptr(),
            40,
            false,
        );
        let s = canonical_shape(&canon(s.verdict));
        assert_eq!(
            (s.m, s.n, s.k, s.transa, s.transb, s.beta_zero, s.c_gaps),
            (40, 40, 9, true, false, true, false)
        );
        assert_eq!(s.residency, Residency::Host);
    }
}
