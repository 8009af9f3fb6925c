//! The shim's own threads (the trace's background flush, the GPU start) run with every
//! signal blocked.
//!
//! A signal sent to the process is delivered to any thread that does not block it. Without
//! this, a program's handler could run on one of our threads, where it was never meant to
//! run, and a handler that calls BLAS (a timer's, a profiler's) would then re-enter the shim
//! on a thread that may hold the trace sink's lock: a deadlock. The program's own threads
//! keep the masks it gave them; ours take none of its signals (as glibc's own threads
//! do), and the threads they start inherit that mask. The worker threads that `cpu-ozaki`'s
//! loops start from the caller's thread (`ozaki_core::kernel`) block them as their first
//! step ([`block_signals_here`], installed at load): a signal that arrives in the few
//! instructions before finds a worker that holds no lock yet.

use std::io;
use std::thread::{Builder, JoinHandle};

/// Blocks every signal on the calling thread (one of ours).
pub fn block_signals_here() {
    // SAFETY: as in `spawn`.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
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
    // A new thread inherits the creating thread's mask: block everything for the spawn, then
    // give the caller its own mask back.
    // SAFETY: sigset_t is plain data that sigfillset initialises; pthread_sigmask only reads
    // `all` and writes `old`, both live locals.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    };
    // Whatever cuBLAS call such a thread makes (the GPU start's warm-up) is the shim's own:
    // the cuBLAS hook sends it straight to cuBLAS.
    let spawned = Builder::new().name(name.into()).spawn(move || {
        let _own = crate::cublas_hook::reentry::enter();
        f()
    });
    // SAFETY: `old` is the mask pthread_sigmask returned above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    spawned
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
}
