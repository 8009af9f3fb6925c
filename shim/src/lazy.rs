//! Fork-safe lazy initialisation for the shim's process-wide state.
//!
//! Everything the shim sets up at a first call (settings, vendor symbol slots, the engine,
//! name tables) is a [`Lazy`]. A plain `OnceLock` copied by `fork()` while another thread is
//! inside its initialiser stays "running" in the child forever, and the child hangs at its
//! first call. Initialisation also happens outside these cells, in the crates the routes call
//! (`ozaki_core`'s CRT plans, `gpu_kernels`' tables and probes, their locks). So both count
//! as shim work in flight ([`InFlight`]: every call of ours, every [`Lazy`] initialiser, in
//! one atomic word that also gives the engine its count of calls in flight),
//! and the `fork` prepare handler ([`crate::process`]) holds new calls back and waits until
//! no other thread has any in flight, for at most [`FORK_WAIT`]: the child then copies
//! nothing half done. Work that runs longer (a large GPU call) lets the fork proceed after
//! that wait.
//!
//! A thread that enters the initialiser of a cell it is already initialising (a vendor
//! library whose constructor calls `dgemm_` while we load it) gets `None` from
//! [`Lazy::try_get_or_init`] instead of waiting for itself.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a fork waits for the work in flight on other threads.
pub const FORK_WAIT: Duration = Duration::from_secs(1);

/// Shim work in flight in the process ([`InFlight`]), packed into one word so a call
/// touches one atomic: calls in the low 32 bits, initialisers in the high 32 bits. The calls
/// are also what `OZAKI_ROUTE=auto` prices the vendor's share of the CPU with
/// ([`calls_in_flight`]).
static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);
/// Forks between their prepare and after handlers: new work waits meanwhile.
static FORKING: AtomicUsize = AtomicUsize::new(0);

/// One call, in [`IN_FLIGHT`]'s packing.
const CALL: u64 = 1;
/// One initialiser, in [`IN_FLIGHT`]'s packing.
const INITIALISER: u64 = 1 << 32;

/// Calls plus initialisers of a packed count.
fn total(packed: u64) -> u64 {
    (packed & 0xffff_ffff) + (packed >> 32)
}

thread_local! {
    /// How much of the work in flight is this thread's (packed as [`IN_FLIGHT`]).
    static MINE: Cell<u64> = const { Cell::new(0) };
}

/// A token naming the current thread (the address of one of its thread-locals).
fn me() -> usize {
    MINE.with(|m| m as *const Cell<u64> as usize)
}

/// Shim calls in flight in the process now (each between its entry and its end, the
/// caller's own included when it is one).
pub fn calls_in_flight() -> u32 {
    // Relaxed: a count for pricing, synchronising nothing.
    (IN_FLIGHT.load(Ordering::Relaxed) & 0xffff_ffff) as u32
}

/// Shim work in flight (a call, an initialiser), until dropped (see the module doc).
pub struct InFlight(u64);

// Orderings. The fork's prepare handler raises FORKING and then reads IN_FLIGHT; new work
// raises IN_FLIGHT and then reads FORKING. Each side stores one variable and loads the
// other, so only sequential consistency on both (the increment, the FORKING load, the
// FORKING increment and the IN_FLIGHT load in `quiesce`) guarantees that at least one side
// sees the other: with acquire/release alone both could miss each other and a call start
// while the fork copies the process. The end of work needs only Release: it publishes what
// the work wrote (an initialised cell) to the prepare handler's load that sees it end. On
// x86-64 the read-modify-writes are one locked instruction whatever their ordering and the
// loads plain moves, so this costs nothing over Relaxed there.
impl InFlight {
    /// Counts a call in; waits (at most [`FORK_WAIT`]) while a fork is being prepared.
    pub fn begin() -> InFlight {
        Self::count(CALL, true)
    }

    /// Counts an initialiser in, without waiting for a fork being prepared: the work the fork
    /// waits for may itself wait for this initialiser (a call waiting for the GPU start's).
    fn initialiser() -> InFlight {
        Self::count(INITIALISER, false)
    }

    fn count(what: u64, hold_back: bool) -> InFlight {
        IN_FLIGHT.fetch_add(what, Ordering::SeqCst);
        if hold_back && FORKING.load(Ordering::SeqCst) != 0 {
            // Rare: the clock is read only here, off the hot path.
            let since = Instant::now();
            while FORKING.load(Ordering::SeqCst) != 0 && since.elapsed() <= FORK_WAIT {
                IN_FLIGHT.fetch_sub(what, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(50));
                IN_FLIGHT.fetch_add(what, Ordering::SeqCst);
            }
        }
        MINE.with(|m| m.set(m.get() + what));
        InFlight(what)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        MINE.with(|m| m.set(m.get().saturating_sub(self.0)));
        IN_FLIGHT.fetch_sub(self.0, Ordering::Release);
    }
}

/// `fork` prepare handler, first step: holds new work back and waits (at most
/// [`FORK_WAIT`]) until the other threads have none in flight.
pub fn quiesce() {
    FORKING.fetch_add(1, Ordering::SeqCst);
    let mine = total(MINE.with(Cell::get));
    let since = Instant::now();
    while total(IN_FLIGHT.load(Ordering::SeqCst)) > mine && since.elapsed() < FORK_WAIT {
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// `fork` parent handler, last step: lets work in again.
pub fn resume() {
    FORKING.fetch_sub(1, Ordering::SeqCst);
}

/// `fork` child handler, last step: only this thread's work exists in the child.
pub fn reset_in_child() {
    IN_FLIGHT.store(MINE.with(Cell::get), Ordering::SeqCst);
    FORKING.store(0, Ordering::SeqCst);
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
        if self.owner.load(Ordering::Acquire) == me() {
            return None;
        }
        let _work = InFlight::initialiser();
        struct Clear<'a>(&'a AtomicUsize);
        impl Drop for Clear<'_> {
            fn drop(&mut self) {
                self.0.store(0, Ordering::Release);
            }
        }
        // Only the thread that runs the initialiser marks itself its owner.
        Some(self.cell.get_or_init(|| {
            self.owner.store(me(), Ordering::Release);
            let _clear = Clear(&self.owner);
            f()
        }))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_waits_for_calls_in_flight_and_holds_new_ones_back() {
        let inside = std::sync::Arc::new(std::sync::Barrier::new(2));
        let i = inside.clone();
        let busy = std::thread::spawn(move || {
            let _call = InFlight::begin();
            i.wait();
            std::thread::sleep(Duration::from_millis(100));
        });
        inside.wait();
        let t = Instant::now();
        quiesce();
        let waited = t.elapsed();
        static RESUMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let at_begin = std::sync::Arc::new(std::sync::Barrier::new(2));
        let b = at_begin.clone();
        let late = std::thread::spawn(move || {
            b.wait();
            let _call = InFlight::begin();
            RESUMED.load(Ordering::SeqCst)
        });
        at_begin.wait();
        std::thread::sleep(Duration::from_millis(50));
        RESUMED.store(true, Ordering::SeqCst);
        resume();
        busy.join().unwrap();
        assert!(waited >= Duration::from_millis(50), "waited {waited:?}");
        assert!(late.join().unwrap(), "a new call began only after the fork");
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
        quiesce(); // what the prepare handler does: returns only once SLOW is done
        assert_eq!(SLOW.get().copied(), Some(3));
        resume();
        assert_eq!(t.join().unwrap(), 3);
    }
}
