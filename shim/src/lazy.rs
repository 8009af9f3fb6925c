//! Fork-safe lazy initialisation for the shim's process-wide state.
//!
//! Everything the shim sets up at a first call (settings, vendor symbol slots, the engine,
//! name tables) is a [`Lazy`]. A plain `OnceLock` copied by `fork()` while another thread is
//! inside its initialiser stays "running" in the child forever, and the child hangs at its
//! first call. So every initialiser runs under one process-wide lock, and the `fork`
//! handlers ([`crate::process`]) take that lock before the fork: the fork waits until no
//! initialiser is half done, and both sides release the lock afterwards.
//!
//! Initialisation also happens outside these cells, in the crates the routes call
//! (`ozaki_core`'s CRT plans, `gpu_kernels`' tables and probes, their locks): so the prepare
//! handler first holds new calls back and waits, for at most [`FORK_WAIT`], until no call is
//! in flight on another thread ([`InFlight`]). A call that runs longer (a large GPU call)
//! lets the fork proceed after that wait; the shim's own cells stay protected by the lock.
//!
//! The lock is re-entrant per thread (an initialiser may need another [`Lazy`]); a thread
//! that enters the initialiser of a cell it is already initialising (a vendor library whose
//! constructor calls `dgemm_` while we load it) gets `None` from [`Lazy::try_get_or_init`]
//! instead of waiting for itself.

use std::cell::{Cell, UnsafeCell};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a fork waits for the calls in flight on other threads.
pub const FORK_WAIT: Duration = Duration::from_secs(1);

/// Calls in flight in the process ([`InFlight`]).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Forks between their prepare and after handlers: new calls wait meanwhile.
static FORKING: AtomicUsize = AtomicUsize::new(0);

/// The process-wide initialisation lock (a plain pthread mutex: it can be released in the
/// child of a `fork`, which a Rust guard cannot).
struct InitLock(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a pthread mutex is made to be shared between threads.
unsafe impl Sync for InitLock {}

static LOCK: InitLock = InitLock(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
/// Whether `before_fork` took the lock (it does not when the forking thread holds it).
static TAKEN_FOR_FORK: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// How many initialisers this thread is inside (it holds the lock while > 0).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// How many of the calls in flight are this thread's.
    static MINE: Cell<usize> = const { Cell::new(0) };
}

/// One call of the shim's own code in flight, until dropped (see the module doc).
pub struct InFlight(());

impl InFlight {
    /// Counts a call in; waits (at most [`FORK_WAIT`]) while a fork is being prepared.
    pub fn begin() -> InFlight {
        let since = Instant::now();
        loop {
            IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
            if FORKING.load(Ordering::SeqCst) == 0 || since.elapsed() > FORK_WAIT {
                break;
            }
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(50));
        }
        MINE.with(|m| m.set(m.get() + 1));
        InFlight(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        MINE.with(|m| m.set(m.get().saturating_sub(1)));
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `fork` prepare handler, first step: holds new calls back and waits (at most
/// [`FORK_WAIT`]) for the other threads' calls in flight to end.
pub fn quiesce_calls() {
    FORKING.fetch_add(1, Ordering::SeqCst);
    let mine = MINE.with(Cell::get);
    let since = Instant::now();
    while IN_FLIGHT.load(Ordering::SeqCst) > mine && since.elapsed() < FORK_WAIT {
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// `fork` parent handler, last step: lets calls in again.
pub fn resume_calls() {
    FORKING.fetch_sub(1, Ordering::SeqCst);
}

/// `fork` child handler, last step: only this thread's calls exist in the child.
pub fn reset_calls_in_child() {
    IN_FLIGHT.store(MINE.with(Cell::get), Ordering::SeqCst);
    FORKING.store(0, Ordering::SeqCst);
}

/// A token naming the current thread (the address of one of its thread-locals).
fn me() -> usize {
    DEPTH.with(|d| d as *const Cell<u32> as usize)
}

/// Runs `f` holding the initialisation lock (re-entrant on one thread).
fn locked<T>(f: impl FnOnce() -> T) -> T {
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            let depth = DEPTH.with(|d| {
                d.set(d.get() - 1);
                d.get()
            });
            if depth == 0 {
                // SAFETY: taken by this thread in `locked`.
                unsafe { libc::pthread_mutex_unlock(LOCK.0.get()) };
            }
        }
    }
    if DEPTH.with(Cell::get) == 0 {
        // SAFETY: a statically initialised mutex, never destroyed.
        unsafe { libc::pthread_mutex_lock(LOCK.0.get()) };
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    let _release = Release;
    f()
}

/// A value initialised at its first use, safely across `fork` (module doc).
pub struct Lazy<T> {
    cell: OnceLock<T>,
    /// The thread running the initialiser, 0 when none.
    owner: AtomicUsize,
}

impl<T> Lazy<T> {
    /// An empty cell.
    pub const fn new() -> Lazy<T> {
        Lazy {
            cell: OnceLock::new(),
            owner: AtomicUsize::new(0),
        }
    }

    /// The value, if initialised.
    pub fn get(&self) -> Option<&T> {
        self.cell.get()
    }

    /// The value, initialising it with `f` first if needed; `None` when this thread is
    /// already inside this cell's initialiser (a re-entrant call, which would otherwise wait
    /// for itself forever).
    pub fn try_get_or_init(&self, f: impl FnOnce() -> T) -> Option<&T> {
        if let Some(v) = self.cell.get() {
            return Some(v);
        }
        locked(|| {
            if let Some(v) = self.cell.get() {
                return Some(v);
            }
            if self.owner.load(Ordering::Relaxed) == me() {
                return None;
            }
            self.owner.store(me(), Ordering::Relaxed);
            struct Clear<'a>(&'a AtomicUsize);
            impl Drop for Clear<'_> {
                fn drop(&mut self) {
                    self.0.store(0, Ordering::Relaxed);
                }
            }
            let _clear = Clear(&self.owner);
            Some(self.cell.get_or_init(f))
        })
    }

    /// The value, initialising it with `f` first if needed.
    ///
    /// # Panics
    /// On a re-entrant call from this cell's own initialiser (see [`Lazy::try_get_or_init`]);
    /// the FFI boundary turns that into a vendor call.
    pub fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        self.try_get_or_init(f)
            .expect("lazy state used from inside its own initialiser")
    }
}

impl<T> Default for Lazy<T> {
    fn default() -> Lazy<T> {
        Lazy::new()
    }
}

/// `fork` prepare handler: waits until no initialiser runs (unless this thread is inside one,
/// then the fork happens from it and the child carries on with it).
pub fn before_fork() {
    if DEPTH.with(Cell::get) == 0 {
        // SAFETY: a statically initialised mutex; released by one of the after-fork handlers.
        unsafe { libc::pthread_mutex_lock(LOCK.0.get()) };
        TAKEN_FOR_FORK.store(true, Ordering::Relaxed);
    }
}

/// `fork` parent and child handler: releases what [`before_fork`] took.
pub fn after_fork() {
    if TAKEN_FOR_FORK.swap(false, Ordering::Relaxed) {
        // SAFETY: locked in `before_fork` by this thread (in the child: its copy, and a
        // default pthread mutex may be unlocked there).
        unsafe { libc::pthread_mutex_unlock(LOCK.0.get()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_waits_for_calls_in_flight_and_holds_new_ones_back() {
        let busy = std::thread::spawn(|| {
            let _call = InFlight::begin();
            std::thread::sleep(Duration::from_millis(100));
        });
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        quiesce_calls();
        let waited = t.elapsed();
        let late = std::thread::spawn(|| {
            let t = Instant::now();
            let _call = InFlight::begin();
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        resume_calls();
        busy.join().unwrap();
        assert!(waited >= Duration::from_millis(50), "waited {waited:?}");
        assert!(
            late.join().unwrap() >= Duration::from_millis(40),
            "a new call waited"
        );
    }

    #[test]
    fn initialises_once_and_refuses_reentry() {
        static CELL: Lazy<u32> = Lazy::new();
        let inner = std::cell::Cell::new(None);
        let v = CELL.get_or_init(|| {
            inner.set(Some(CELL.try_get_or_init(|| 99).copied()));
            7
        });
        assert_eq!(*v, 7);
        assert_eq!(inner.get(), Some(None), "the re-entrant call gets None");
        assert_eq!(CELL.try_get_or_init(|| 8).copied(), Some(7));
    }

    #[test]
    fn nested_cells_initialise_on_one_thread_and_others_wait() {
        static OUTER: Lazy<u32> = Lazy::new();
        static INNER: Lazy<u32> = Lazy::new();
        let handles: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| *OUTER.get_or_init(|| INNER.get_or_init(|| 5) + 1)))
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 6);
        }
    }

    #[test]
    fn a_fork_waits_for_a_running_initialiser() {
        static SLOW: Lazy<u32> = Lazy::new();
        let started = std::sync::Arc::new(std::sync::Barrier::new(2));
        let s = started.clone();
        let t = std::thread::spawn(move || {
            *SLOW.get_or_init(|| {
                s.wait();
                std::thread::sleep(std::time::Duration::from_millis(100));
                3
            })
        });
        started.wait();
        before_fork(); // what the prepare handler does: returns only once SLOW is done
        assert_eq!(SLOW.get().copied(), Some(3));
        after_fork();
        assert_eq!(t.join().unwrap(), 3);
    }
}
