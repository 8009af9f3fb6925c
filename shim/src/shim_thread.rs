//! The shim's own threads (the trace's background flush, the GPU start), and the worker
//! threads that `cpu-ozaki`'s loops and the GPU route's copies start from the caller's thread
//! (`ozaki_core::spawn`), run with every signal blocked from their first instruction.
//!
//! A signal sent to the process is delivered to any thread that does not block it. Without
//! this, a program's handler could run on one of our threads, where it was never meant to
//! run, and a handler that calls BLAS (a timer's, a profiler's) would then re-enter the shim
//! on a thread that may hold the trace sink's lock, or `malloc`'s: a new thread sets up its
//! allocator cache before the first line of its closure, so a handler that ran there and
//! allocated deadlocked on the arena lock its own thread held. The program's own threads keep
//! the masks they have; ours take none of its signals (as glibc's own threads do). A new
//! thread inherits its creator's mask, so every spawn runs inside [`with_signals_blocked`]
//! ([`spawn`], and the hook [`install_spawn_hook`] gives `ozaki_core::spawn` at load), and the
//! creator gets its own mask back as soon as the threads exist.

use std::io;
use std::thread::{Builder, JoinHandle};

/// Restores the mask it holds when dropped (also when the spawn in between panics).
struct MaskRestore(libc::sigset_t);

impl Drop for MaskRestore {
    fn drop(&mut self) {
        // SAFETY: `self.0` is the mask pthread_sigmask returned in `with_signals_blocked`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// Runs `f` (which spawns threads) with every signal blocked on the calling thread, then gives
/// the thread its own mask back: the threads `f` starts inherit the full mask.
pub fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset_t is plain data that sigfillset initialises; pthread_sigmask only reads
    // `all` and writes `old`, both live locals.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    };
    let _restore = MaskRestore(old);
    f()
}

/// The hook of `ozaki_core::spawn`: [`with_signals_blocked`] for a closure by reference.
fn spawn_hook(f: &mut dyn FnMut()) {
    with_signals_blocked(f)
}

/// Makes the worker threads of `ozaki_core` and `gpu_kernels` start with every signal blocked
/// (at load, once per process).
pub fn install_spawn_hook() {
    ozaki_core::spawn::on_spawn(spawn_hook);
}

/// Spawns a thread named `name` running `f` with every signal blocked.
///
/// # Errors
/// As [`Builder::spawn`].
pub fn spawn<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    with_signals_blocked(|| {
        // Whatever cuBLAS call such a thread makes (the GPU start's warm-up) is the shim's
        // own: the cuBLAS hook sends it straight to cuBLAS.
        Builder::new().name(name.into()).spawn(move || {
            let _own = crate::cublas_hook::reentry::enter();
            f()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(sig: libc::c_int) -> bool {
        // SAFETY: as in `spawn`, with a null new mask (a query).
        unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
            libc::sigismember(&now, sig) == 1
        }
    }

    #[test]
    fn a_shim_thread_blocks_every_signal_and_its_creator_keeps_its_mask() {
        let before = blocked(libc::SIGALRM);
        let inside = spawn("test-thread", || {
            [
                libc::SIGALRM,
                libc::SIGUSR1,
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGPROF,
            ]
            .map(blocked)
        })
        .unwrap()
        .join()
        .unwrap();
        assert!(inside.iter().all(|&b| b), "{inside:?}");
        assert_eq!(blocked(libc::SIGALRM), before);
    }

    /// The threads `ozaki_core`'s loops start under the installed hook have every signal
    /// blocked, and the caller gets its own mask back, also from a hook whose closure panics.
    #[test]
    fn the_spawn_hook_blocks_every_signal_in_the_threads_it_starts() {
        install_spawn_hook();
        let before = blocked(libc::SIGALRM);
        let inside = std::thread::scope(|s| {
            let h = ozaki_core::spawn::spawning(|| s.spawn(|| blocked(libc::SIGALRM)));
            assert_eq!(
                blocked(libc::SIGALRM),
                before,
                "the caller's mask is back at once"
            );
            h.join().unwrap()
        });
        assert!(inside, "a worker started under the hook takes no signal");
        let panicked = std::panic::catch_unwind(|| with_signals_blocked(|| panic!("spawn failed")));
        assert!(panicked.is_err());
        assert_eq!(
            blocked(libc::SIGALRM),
            before,
            "the mask is restored after a panic"
        );
    }
}
