//! The GPU starts on a background thread (`OZAKI_ROUTE=auto`): the first call that may need it
//! does not wait for it.
//!
//! Starting the GPU costs a process about [`START_S`] once (CUDA context, cuBLAS and cuBLASLt
//! handles, the kernels from the disk cache; 2.7 s on a fresh machine whose cache was empty,
//! NVRTC compiling). When the start blocked the first call that could use the GPU, NumPy's one
//! 4096² product took 1104 ms under the shim against 136-195 ms on OpenBLAS alone (H200,
//! BENCHMARKS.md "GPU start-up off the first call"): a short script was 7x slower. So [`super::choose`](mod@super::choose) starts the GPU
//! here, once per process, at the first call the GPU might win, and that call and the next ones
//! run on the vendor BLAS until it is up, except a call big enough that waiting for the rest
//! of the start and then running on the GPU beats the vendor BLAS by [`WAIT_MARGIN`]
//! ([`while_starting`]).
//!
//! - [`Starter`]: the state machine (idle, starting, ready, failed), safe for concurrent
//!   callers; its job runs on its own thread, which then stays parked for the life of the
//!   process (the CUDA libraries keep per-thread state, and a thread that exits after first
//!   using NVRTC has crashed other programs at exit: arrayfire/arrayfire#2707).
//! - Exit: a program may return from `main` while the start thread is loading cuBLAS or inside
//!   `cuInit`. `exit()` then runs the exit handlers that the CUDA libraries' constructors
//!   registered (their C++ static objects' teardown) while the thread still loads or uses
//!   them: 5 of 10 NumPy scripts that ended 0.2 s into the start died of SIGSEGV (H200,
//!   cuBLAS's load taking 350-410 ms). So the exit first closes
//!   `gpu_kernels::start_gate` (`at_exit`): no further step starts and the exit waits for
//!   the step under way, at most [`EXIT_WAIT`], before any library's handler runs. That takes
//!   running before handlers registered later than ours, which `atexit` cannot do (handlers
//!   run in the reverse order of registration): `exit()` destroys the calling thread's
//!   thread-locals before it runs any `atexit` handler, so the shim arms a thread-local guard
//!   on the main thread when it is loaded (`MainExitGuard`). Exits from other threads rely
//!   on `atexit` handlers registered before the thread starts and again once it loaded the
//!   libraries (`gpu_kernels::probe::load_present`): the latter runs before the libraries'
//!   own, so only an exit from a thread other than `main` during the load itself is
//!   unprotected.
//! - A process forked while the start was under way has no start thread: its starter reports
//!   [`Status::Failed`] (CUDA cannot be used in such a child anyway), and its exit does not
//!   wait.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What starting the GPU costs a process, in seconds, when the profile does not say: the
/// first 4096² call under the shim took 1104 ms, of which 141 ms were the pinned staging's
/// first growth, 58 ms cuBLAS loading its kernel and 20 ms the product itself (H200 machine,
/// kernels in the disk cache; CUDA context creation alone took 0.5-0.9 s; BENCHMARKS.md
/// "GPU start-up off the first call").
pub const START_S: f64 = 0.9;

/// A call waits for the start under way only when the vendor BLAS is priced this much slower
/// than the rest of the start plus the GPU route: the pre-start prices come from the built-in
/// profile, whose vendor times were 1.3-1.8x the measured ones on the H200 machine (4096²:
/// 246 ms priced, 136-195 ms measured), and a start can overrun its expected time.
pub const WAIT_MARGIN: f64 = 1.5;

/// The longest a call waits for the start with `OZAKI_GPU_START=blocking` before it runs on
/// the vendor BLAS after all: far above any start measured (3.5 s from a cold page cache on
/// the H200 machine), short of a hang.
pub const BLOCKING_WAIT: Duration = Duration::from_secs(120);

/// The longest a process exit waits for the step of the start under way (the longest step,
/// NVRTC compiling into an empty cache, took about 1.8 s on the H200 machine): never a hang.
pub const EXIT_WAIT: Duration = Duration::from_secs(3);

/// Seconds the start should still need, `elapsed_s` into a start expected to take
/// `expected_s`. Past the expected time nothing tells how much is left (an empty kernel cache
/// triples the start), so it is taken to last about as long again as it has so far.
pub fn remaining_s(expected_s: f64, elapsed_s: f64) -> f64 {
    if elapsed_s < expected_s {
        expected_s - elapsed_s
    } else {
        elapsed_s
    }
}

/// The longest a call that chose to wait ([`WhileStarting::Wait`]) waits before it runs on the
/// vendor BLAS after all: the time after which waiting can no longer beat the vendor by
/// [`WAIT_MARGIN`] (a start may overrun its expected time; this bounds the loss to that
/// fraction of the vendor time).
pub fn wait_limit_s(vendor_s: f64, gpu_s: f64) -> f64 {
    (vendor_s / WAIT_MARGIN - gpu_s).max(0.0)
}

/// What a call that may need the GPU does while the GPU is starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhileStarting {
    /// Run on the vendor BLAS now.
    Vendor,
    /// Wait for the start, then let the engine decide.
    Wait,
}

/// The rule for a call priced `vendor_s` on the vendor BLAS and `gpu_s` on the fastest GPU
/// route, `elapsed_s` into a start expected to take `expected_s`: wait only when
/// `vendor_s > WAIT_MARGIN * (remaining + gpu_s)`. Missing or non-finite prices: the vendor.
pub fn while_starting(
    vendor_s: Option<f64>,
    gpu_s: Option<f64>,
    expected_s: f64,
    elapsed_s: f64,
) -> WhileStarting {
    match (vendor_s, gpu_s) {
        (Some(v), Some(g))
            if v.is_finite()
                && g.is_finite()
                && v > WAIT_MARGIN * (remaining_s(expected_s, elapsed_s) + g) =>
        {
            WhileStarting::Wait
        }
        _ => WhileStarting::Vendor,
    }
}

/// How much faster than the vendor (as measured so far) the GPU must be priced for a call's
/// gain to count toward the start ([`Ledger`]). Calls priced only a little faster are the ones
/// the profile misprices: SciPy LOBPCG with block 64, whose 64 x 64 x 110592 products were
/// priced 1.7x faster on the GPU and ran 1.1x slower there, started the GPU on such gains
/// and lost 1.2 s of a 5 s run to the start; NumPy's 4096² (17x), PySCF's 1953 x 122 x 1953
/// (4x once its vendor calls were measured) keep starting it (BENCHMARKS.md "Real programs
/// under the shim").
pub const GAIN_RATIO: f64 = 2.0;

/// What one call adds to the start's [`Ledger`]: the wall-clock time the GPU would save the
/// program on it. With `concurrent` calls in flight (itself included) the call holds
/// 1/`concurrent` of the wall clock while it runs on the vendor BLAS for `vendor_s`, but the
/// one GPU serves the callers one after another, each for its whole `gpu_s`; the gain is
/// `vendor_s / concurrent - gpu_s`, nothing when that is negative. Alone that is the call's
/// own gain. Summed per call instead, PySCF's CCSD (16 OpenMP threads, each vendor call
/// single-threaded inside the team: 99 ms for 1953 x 122 x 1953 whether 16 or 3 ran at once,
/// against 5.5 ms on the GPU's queue) priced a second of gain where the GPU, once started,
/// gained nothing on the CCSD phase and its start cost half a second (H100 host,
/// BENCHMARKS.md "Real programs under the shim").
pub fn ledger_gain(vendor_s: f64, gpu_s: f64, concurrent: u32) -> f64 {
    (vendor_s / f64::from(concurrent.max(1)) - gpu_s).max(0.0)
}

/// How much longer than the GPU's price a vendor call must measure for its measured time to
/// count toward the start ([`Credit`]): twice [`GAIN_RATIO`], since a single measurement
/// stands against a GPU price no call has checked yet. Reference LAPACK LU's trailing
/// updates (4032 x 4032 x 64, beta = 1, `ldc` 4096) measured 13-20 ms on the vendor against a
/// GPU price of 9 ms, and ran 40-230 ms on the GPU's host path; SciPy LOBPCG's 128 x 128 x
/// 110592 `dsyrk` measured 50-65 ms against 6.6 ms, and ran 5-8 ms there (H100 host,
/// BENCHMARKS.md "Real programs under the shim").
pub const CREDIT_RATIO: f64 = 2.0 * GAIN_RATIO;

/// What a vendor call priced before the start may still add to the [`Ledger`] once its time
/// is measured: its price credited the gain the profile saw, but a vendor BLAS running far
/// slower than the profile says gains the GPU more than that. OpenBLAS's 128 x 128 x 110592
/// `dsyrk` in SciPy's LOBPCG was priced 5 ms (no gain over the GPU's 6.6 ms) and took
/// 50-65 ms, so the start waited for 77 calls, over a third of the run (H100 host,
/// BENCHMARKS.md "Real programs under the shim").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Credit {
    /// The GPU's price of the call.
    pub gpu_s: f64,
    /// What of that price the call would hold the one GPU for: all of it, less the host
    /// copies it makes outside the GPU's lock when made beside other calls
    /// (`Decision::gpu_held_s`).
    pub held_s: f64,
    /// The gain credited when it was priced.
    pub credited_s: f64,
    /// Calls in flight when it was priced (itself included).
    pub concurrent: u32,
    /// How much faster than the measured vendor call the GPU must be priced for its gain to
    /// count ([`CREDIT_RATIO`], or the profile's margin when larger).
    pub ratio: f64,
    /// What the start costs ([`start_cost_s`]), as the call's price weighed it: once the
    /// call's measured time brings the [`Ledger`] to it, the start begins at the call's end
    /// ([`Credit::begins`]).
    pub cost_s: f64,
    /// The call's m, n and k, which the start then warms the GPU up for.
    pub shape: (usize, usize, usize),
}

impl Credit {
    /// The gain the call adds now that it took `measured_s` on the vendor BLAS, beyond
    /// what its price credited: [`ledger_gain`] on the measured time, when that is at least
    /// `ratio` times the GPU's price, at the larger of the calls in flight when it was
    /// priced and `ending_with` (those in flight as it ends). The first thread of an OpenMP
    /// team to arrive finds itself alone, though the team runs beside it the whole call:
    /// PySCF's 1953 x 122 x 1953 products took 117 ms single-threaded, 16 at once, and the
    /// first of them, counted alone, credited a whole start by itself.
    pub fn extra_s(&self, measured_s: f64, ending_with: u32) -> f64 {
        if !(measured_s.is_finite() && measured_s >= self.ratio * self.gpu_s) {
            return 0.0;
        }
        let concurrent = self.concurrent.max(ending_with);
        (ledger_gain(measured_s, self.held_s, concurrent) - self.credited_s).max(0.0)
    }

    /// Whether the [`Ledger`]'s total `gained_s`, with this call's measured time credited,
    /// covers the start: the start then begins as the call ends. Left to the next call
    /// priced close to the GPU, it would wait through whatever the program does in between
    /// (a round of large products, then other work and calls clearly the vendor's), and a
    /// program making no such call again would never start it.
    pub fn begins(&self, gained_s: f64) -> bool {
        gained_s >= self.cost_s
    }
}

/// How much slower a vendor call runs beside a background start than alone: the start's
/// thread takes a core and memory bandwidth from a vendor BLAS using all of them. NumPy's
/// 4096² products beside the start took 382 and 369 ms against 246 ms priced (16-thread
/// OpenBLAS, H200 host; BENCHMARKS.md "Real programs under the shim"), with the vendor at all
/// its threads (such a call now leaves the start one, `super::vendor_threads`). A call
/// deciding whether to wait for the start compares the GPU with the vendor at this speed.
pub const VENDOR_SLOWDOWN_WHILE_STARTING: f64 = 1.5;

/// Share of the start's time ([`START_S`] or the profile's `gpu.start_s`) that a background
/// start costs the program: the program keeps running on the vendor BLAS, but the start's
/// thread (driver, context, libraries, kernels) takes CPU and memory bandwidth from the vendor
/// calls beside it. Reference LAPACK QR and LU at n = 4096 over 16-thread OpenBLAS, whose
/// vendor calls all ran beside a start that never paid, spent 0.25-0.35 s more in BLAS than
/// with `OZAKI_ROUTE=vendor` (1.41-1.51 s against 1.16 s, H200 host): about a quarter of a
/// 0.9-1.2 s start.
pub const BACKGROUND_COST_SHARE: f64 = 0.25;

/// What starting the GPU costs the program, for a start expected to take `start_s`: the
/// background start's share ([`BACKGROUND_COST_SHARE`]), or all of it when the call waits
/// for the start (`OZAKI_GPU_START=blocking`).
pub fn start_cost_s(start_s: f64, blocking: bool) -> f64 {
    if blocking {
        start_s
    } else {
        BACKGROUND_COST_SHARE * start_s
    }
}

/// The gain the calls seen so far priced for the GPU: the start begins once it covers the
/// start's cost ([`start_cost_s`]), so a process whose calls never gain never starts the
/// GPU, and one large product (NumPy's 4096² is priced 0.23 s faster on the GPU) starts it
/// at once. Lock-free: one atomic add per call that gains.
pub struct Ledger {
    gained_ns: AtomicU64,
}

impl Ledger {
    /// Nothing gained yet.
    pub const fn new() -> Ledger {
        Ledger {
            gained_ns: AtomicU64::new(0),
        }
    }

    /// Adds one call's priced gain (seconds; negative or non-finite adds nothing) and
    /// returns the total so far.
    pub fn add(&self, gain_s: f64) -> f64 {
        let ns = if gain_s.is_finite() && gain_s > 0.0 {
            (gain_s * 1e9) as u64
        } else {
            0
        };
        let before = if ns > 0 {
            self.gained_ns.fetch_add(ns, Ordering::Relaxed)
        } else {
            self.gained_ns.load(Ordering::Relaxed)
        };
        before.saturating_add(ns) as f64 * 1e-9
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::new()
    }
}

/// Where the start stands, as a caller sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// Not asked for yet.
    Idle,
    /// Under way for `elapsed_s` seconds.
    Starting {
        /// Seconds since it began.
        elapsed_s: f64,
    },
    /// The job finished and reported success.
    Ready,
    /// The job failed or panicked, or this process was forked while it ran.
    Failed,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Idle,
    Starting { since: Instant, pid: u32 },
    Ready,
    Failed,
}

/// Runs a start job once per process on its own thread and tells callers where it stands.
pub struct Starter {
    phase: Mutex<Phase>,
    changed: Condvar,
    /// Set when the job begins, cleared when it ends, so that [`Starter::under_way`] is one
    /// atomic load instead of the phase's lock.
    running: AtomicBool,
}

/// Process id of the process that began the start (0: none began).
static START_PID: AtomicU32 = AtomicU32::new(0);

fn pid() -> u32 {
    std::process::id()
}

impl Default for Starter {
    fn default() -> Self {
        Starter::new()
    }
}

impl Starter {
    /// An idle starter.
    pub const fn new() -> Starter {
        Starter {
            phase: Mutex::new(Phase::Idle),
            changed: Condvar::new(),
            running: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Phase> {
        // The phase is a plain value, valid even if a holder panicked.
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn status_of(phase: &Phase) -> Status {
        match *phase {
            Phase::Idle => Status::Idle,
            Phase::Starting { pid: p, .. } if p != pid() => Status::Failed,
            Phase::Starting { since, .. } => Status::Starting {
                elapsed_s: since.elapsed().as_secs_f64(),
            },
            Phase::Ready => Status::Ready,
            Phase::Failed => Status::Failed,
        }
    }

    /// Whether the start began and has not ended (in a process forked while it ran, too,
    /// where [`Starter::status`] says it failed): lock-free, for the check every call past
    /// the gate makes. The job may have built the engine while it still warms the GPU up
    /// (`choose::start_gpu`), so a call must not take the engine's existence for the GPU's
    /// being ready: on an H100 the first GPU call of SciPy LOBPCG and of NumPy, decided by
    /// the engine while the warm-up held the GPU, waited 64-152 ms for it
    /// (BENCHMARKS.md, "Real programs under the shim").
    pub fn under_way(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Where the start stands.
    pub fn status(&self) -> Status {
        Self::status_of(&self.lock())
    }

    /// Begins the start with `job` (true: the GPU is up) on a new thread, if it has not begun
    /// in this process; returns where it stands. Should no thread be available, the job runs
    /// here, so this caller waits as every call did before the start moved off the call.
    pub fn begin<F>(&'static self, job: F) -> Status
    where
        F: FnOnce() -> bool + Send + 'static,
    {
        {
            let mut phase = self.lock();
            if !matches!(*phase, Phase::Idle) {
                return Self::status_of(&phase);
            }
            *phase = Phase::Starting {
                since: Instant::now(),
                pid: pid(),
            };
            START_PID.store(pid(), Ordering::Relaxed);
            self.running.store(true, Ordering::Release);
        }
        let job = Arc::new(Mutex::new(Some(job)));
        let theirs = Arc::clone(&job);
        let spawned = crate::shim_thread::spawn("ozaki-gpu-start", move || {
            let job = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(job) = job {
                self.run(job);
            }
            // Kept, not ended: see the module doc (per-thread state of the CUDA libraries).
            loop {
                std::thread::park();
            }
        });
        if let Err(e) = spawned {
            tracing::info!("auto: no thread to start the GPU on ({e}); starting it on this call");
            let job = job.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(job) = job {
                self.run(job);
            }
        }
        self.status()
    }

    /// Runs `job` and records its outcome (a panic is a failure).
    fn run(&self, job: impl FnOnce() -> bool) {
        let ok = catch_unwind(AssertUnwindSafe(job)).unwrap_or(false);
        *self.lock() = if ok { Phase::Ready } else { Phase::Failed };
        self.running.store(false, Ordering::Release);
        self.changed.notify_all();
    }

    /// Waits until the start under way (if any) ended, at most `limit`; returns where it
    /// stands then.
    pub fn wait(&self, limit: Duration) -> Status {
        let phase = self.lock();
        let (phase, _) = self
            .changed
            .wait_timeout_while(phase, limit, |p| {
                matches!(Self::status_of(p), Status::Starting { .. })
            })
            .unwrap_or_else(|p| p.into_inner());
        Self::status_of(&phase)
    }
}

/// The process exit handler of a process that began the start (module doc): closes the start
/// gate and waits for the step under way, at most [`EXIT_WAIT`]. Registered twice, it acts
/// once; in a forked child it does nothing (no start thread there).
extern "C" fn at_exit() {
    crate::shield::shielded(|| {
        if START_PID.load(Ordering::Relaxed) != pid() || gpu_kernels::start_gate::closed() {
            return;
        }
        gpu_kernels::start_gate::close(EXIT_WAIT);
    });
}

/// Destroyed by `exit()` on the main thread before any `atexit` handler runs (glibc's
/// `__run_exit_handlers` calls `__call_tls_dtors` first), so [`at_exit`] waits for the start's
/// step under way before the CUDA libraries' own exit handlers (module doc). Armed when the
/// shim is loaded, on the thread that loads it (the main thread for `LD_PRELOAD` and linked
/// programs); it acts only on the main thread. A `main` that ends with `pthread_exit` while
/// other threads go on also drops it: the start then stops, and the process stays on the
/// vendor BLAS.
struct MainExitGuard;

impl Drop for MainExitGuard {
    fn drop(&mut self) {
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        if tid == i64::from(pid()) {
            at_exit();
        }
    }
}

thread_local! {
    static MAIN_EXIT_GUARD: MainExitGuard = const { MainExitGuard };
}

/// Arms [`MainExitGuard`] on the loading thread (first access registers its destructor);
/// called by the library's load-time constructor (`crate::process`).
pub(crate) fn arm_main_exit_guard() {
    let _ = MAIN_EXIT_GUARD.try_with(|_| {});
}

/// Registers `at_exit` (see the module doc for why twice).
pub fn register_exit_handler() {
    // SAFETY: at_exit is an `extern "C" fn()` that lives for the whole process and does not
    // unwind (catch_unwind inside).
    unsafe {
        libc::atexit(at_exit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn concurrent_callers_gain_their_share_of_the_wall_clock_on_one_gpu() {
        // alone: the call's own gain
        assert!((ledger_gain(0.099, 0.0055, 1) - 0.0935).abs() < 1e-12);
        // sixteen callers: 1/16 of the vendor time, the GPU's whole service time
        let g = ledger_gain(0.099, 0.0055, 16);
        assert!(
            (g - (0.099 / 16.0 - 0.0055)).abs() < 1e-12 && g > 0.0,
            "{g}"
        );
        // a call whose share is below the GPU's time gains nothing
        assert_eq!(ledger_gain(0.010, 0.0032, 16), 0.0);
        assert_eq!(ledger_gain(0.010, 0.0032, 0), 0.010 - 0.0032);
    }

    /// A vendor call that ran far slower than priced credits the difference its measured time
    /// makes; one that ran as priced, or not clearly slower than the GPU, credits nothing.
    #[test]
    fn a_measured_vendor_call_credits_what_its_price_missed() {
        // SciPy LOBPCG's dsyrk: priced 5 ms against the GPU's 6.6 ms (nothing credited), ran
        // 60 ms alone
        let dsyrk = Credit {
            gpu_s: 0.0066,
            held_s: 0.0066,
            credited_s: 0.0,
            concurrent: 1,
            ratio: CREDIT_RATIO,
            cost_s: start_cost_s(START_S, false),
            shape: (128, 128, 110592),
        };
        assert!((dsyrk.extra_s(0.060, 1) - (0.060 - 0.0066)).abs() < 1e-12);
        // the GPU not priced CREDIT_RATIO times faster than the measured time: nothing (LU's
        // trailing update: 20 ms measured against a GPU price of 9 ms)
        assert_eq!(dsyrk.extra_s(0.020, 1), 0.0);
        let lu = Credit {
            gpu_s: 0.0089,
            held_s: 0.0089,
            ..dsyrk
        };
        assert_eq!(lu.extra_s(0.020, 1), 0.0);
        assert_eq!(dsyrk.extra_s(f64::NAN, 1), 0.0);
        // a call priced 21.75 ms against 10.76 ms credited its gain when priced; measured as
        // priced it adds nothing more, measured slower it adds the difference
        let priced = ledger_gain(0.02175, 0.01076, 1);
        let tt = Credit {
            gpu_s: 0.01076,
            held_s: 0.01076,
            credited_s: priced,
            ..dsyrk
        };
        assert!(tt.extra_s(0.02175, 1).abs() < 1e-12);
        assert!((tt.extra_s(0.050, 1) - (0.050 - 0.02175)).abs() < 1e-12);
        // sixteen callers: the measured time counts at its share of the wall clock
        let team = Credit {
            gpu_s: 0.0055,
            held_s: 0.0055,
            concurrent: 16,
            ..dsyrk
        };
        assert!((team.extra_s(0.099, 1) - ledger_gain(0.099, 0.0055, 16)).abs() < 1e-12);
        assert_eq!(team.extra_s(0.080, 1), 0.0);
        // the first of a team, priced alone, ends with fifteen others in flight
        let first = Credit {
            concurrent: 1,
            ..team
        };
        assert!((first.extra_s(0.117, 16) - ledger_gain(0.117, 0.0055, 16)).abs() < 1e-12);
        assert!(first.extra_s(0.117, 16) < 0.002);
    }

    #[test]
    fn the_ledger_adds_gains_only_and_one_4096_product_covers_a_background_start() {
        let l = Ledger::new();
        assert_eq!(l.add(-1.0), 0.0);
        assert_eq!(l.add(f64::NAN), 0.0);
        let t = l.add(0.001);
        assert!((l.add(0.002) - (t + 0.002)).abs() < 1e-9);
        // Built-in H200 prices: 4096² vendor 246 ms, gpu-native 14.4 ms.
        let gain = 0.246 - 0.0144;
        assert!(gain >= start_cost_s(START_S, false));
        assert!(
            gain < start_cost_s(START_S, true),
            "a blocking start needs more"
        );
    }

    #[test]
    fn remaining_time_counts_down_then_grows_with_an_overrun() {
        assert!((remaining_s(0.9, 0.0) - 0.9).abs() < 1e-12);
        assert!((remaining_s(0.9, 0.6) - 0.3).abs() < 1e-12);
        // an overrun start (empty kernel cache): as long again as it has run
        assert_eq!(remaining_s(0.9, 1.2), 1.2);
        assert_eq!(remaining_s(0.9, 2.0), 2.0);
    }

    /// Prices as the built-in H200 profile gives them before the start (a measured
    /// trace): 4096² vendor 246 ms vs gpu-native 14.4 ms; 8192² about 8x both.
    #[test]
    fn small_gains_run_on_the_vendor_and_a_big_call_waits() {
        use WhileStarting::*;
        let (v4096, g4096) = (0.246, 0.0144);
        let (v8192, g8192) = (1.97, 0.085);
        // a 4096² call does not wait for a 0.9 s start: 0.25 s on the CPU beats it...
        for elapsed in [0.0, 0.3, 0.6, 1.5] {
            assert_eq!(
                while_starting(Some(v4096), Some(g4096), 0.9, elapsed),
                Vendor
            );
        }
        // ...except for its last 0.1 s
        assert_eq!(while_starting(Some(v4096), Some(g4096), 0.9, 0.85), Wait);
        // an 8192² call waits for the rest of a normal start...
        assert_eq!(while_starting(Some(v8192), Some(g8192), 0.9, 0.0), Wait);
        assert_eq!(while_starting(Some(v8192), Some(g8192), 0.9, 0.7), Wait);
        // ...but not for an overrun one that may last as long again
        assert_eq!(while_starting(Some(v8192), Some(g8192), 0.9, 1.5), Vendor);
        // a longer expected start (a profile's measured one) keeps it on the CPU
        assert_eq!(while_starting(Some(v8192), Some(g8192), 2.7, 0.0), Vendor);
        // the margin: just over (remaining + gpu) is not enough
        assert_eq!(while_starting(Some(1.2 * 1.0), Some(0.1), 1.0, 0.1), Vendor);
        assert_eq!(while_starting(Some(1.6 * 1.0), Some(0.1), 1.0, 0.1), Wait);
        // a call that waits gives up once waiting cannot beat the vendor by the margin
        assert!((wait_limit_s(1.97, 0.085) - (1.97 / 1.5 - 0.085)).abs() < 1e-12);
        assert_eq!(wait_limit_s(0.1, 0.5), 0.0);
        // nothing priced, or nonsense: the vendor
        for (v, g) in [
            (None, Some(0.1)),
            (Some(9.0), None),
            (Some(f64::NAN), Some(0.1)),
            (Some(9.0), Some(f64::INFINITY)),
        ] {
            assert_eq!(while_starting(v, g, 0.9, 0.0), Vendor, "{v:?} {g:?}");
        }
    }

    const LONG: Duration = Duration::from_secs(60);

    fn leak() -> &'static Starter {
        Box::leak(Box::new(Starter::new()))
    }

    #[test]
    fn a_start_goes_from_idle_through_starting_to_ready() {
        let s = leak();
        assert_eq!(s.status(), Status::Idle);
        let gate = Arc::new(Barrier::new(2));
        let g = Arc::clone(&gate);
        assert!(!s.under_way(), "idle");
        let begun = s.begin(move || {
            g.wait(); // held until the test has seen "starting"
            true
        });
        assert!(matches!(begun, Status::Starting { .. }), "{begun:?}");
        assert!(s.under_way(), "the job runs");
        std::thread::sleep(Duration::from_millis(20));
        match s.status() {
            Status::Starting { elapsed_s } => assert!(elapsed_s >= 0.015, "{elapsed_s}"),
            other => panic!("{other:?}"),
        }
        // a bounded wait gives up while the job still runs
        let t = Instant::now();
        assert!(matches!(
            s.wait(Duration::from_millis(30)),
            Status::Starting { .. }
        ));
        assert!(t.elapsed() >= Duration::from_millis(25));
        gate.wait();
        assert_eq!(s.wait(LONG), Status::Ready);
        assert_eq!(s.status(), Status::Ready);
        assert!(!s.under_way(), "the job ended");
    }

    #[test]
    fn a_failing_or_panicking_job_leaves_the_start_failed() {
        let s = leak();
        s.begin(|| false);
        assert_eq!(s.wait(LONG), Status::Failed);
        assert!(!s.under_way(), "a failed start has ended");
        let s = leak();
        s.begin(|| panic!("cudarc could not load a symbol"));
        assert_eq!(s.wait(LONG), Status::Failed);
        // and it is not started again
        let again = AtomicUsize::new(0);
        let again: &'static AtomicUsize = Box::leak(Box::new(again));
        s.begin(move || {
            again.fetch_add(1, Ordering::SeqCst);
            true
        });
        assert_eq!(s.wait(LONG), Status::Failed);
        assert_eq!(again.load(Ordering::SeqCst), 0);
    }

    /// Many threads hit the first calls at once: one job runs, every waiter sees it end.
    #[test]
    fn concurrent_callers_start_once_and_all_see_the_outcome() {
        let s = leak();
        let runs: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                std::thread::spawn(move || {
                    let st = s.begin(move || {
                        runs.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        true
                    });
                    assert!(
                        matches!(st, Status::Starting { .. } | Status::Ready),
                        "caller {i}: {st:?}"
                    );
                    // half wait, half carry on (vendor) and look again
                    if i % 2 == 0 {
                        s.wait(LONG)
                    } else {
                        while matches!(s.status(), Status::Starting { .. }) {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        s.status()
                    }
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), Status::Ready);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    /// What a child forked during the start sees: a start under way in another process.
    #[test]
    fn a_start_begun_by_another_process_counts_as_failed() {
        let phase = Phase::Starting {
            since: Instant::now(),
            pid: pid().wrapping_add(1),
        };
        assert_eq!(Starter::status_of(&phase), Status::Failed);
        let s = leak();
        *s.lock() = phase;
        // and nobody waits for it
        assert_eq!(s.wait(LONG), Status::Failed);
    }
}
