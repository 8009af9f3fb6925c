//! How the library's worker threads are started: the parallel loops of `cpu-ozaki`
//! ([`crate::kernel`]) and the GPU route's host-side copies and writers (`gpu_kernels`) spawn
//! their threads inside [`spawning`], which runs them under the hook a host library installs
//! once ([`on_spawn`]).
//!
//! A new thread inherits its creator's signal mask, and it runs allocator code (its
//! thread-local cache, the standard library's thread start) before the first line of its
//! closure. The shim installs a hook that blocks every signal on the creating thread while it
//! spawns and then gives it its own mask back, so a worker never runs a program's signal
//! handler, not even in those first steps (a handler there that called BLAS re-entered
//! `malloc` while the thread held its arena lock: a deadlock). Without a hook, [`spawning`]
//! just runs its closure.
//!
//! [`by_parts`] is the split most of those loops need: a range cut into parts, one per
//! thread, the first on the calling thread.

use std::ops::Range;
use std::sync::OnceLock;

/// The hook: runs the closure it is given exactly once, on the calling thread.
pub type SpawnHook = fn(&mut dyn FnMut());

static HOOK: OnceLock<SpawnHook> = OnceLock::new();

/// Installs the hook that every [`spawning`] runs under (once per process; a later call is
/// ignored). The hook must call its closure exactly once, on the calling thread.
pub fn on_spawn(hook: SpawnHook) {
    let _ = HOOK.set(hook);
}

/// Runs `f`, which starts the library's worker threads, under the installed hook. Keep `f` to
/// the spawning itself: the caller's own work outside it runs with the caller's own mask.
pub fn spawning<T>(f: impl FnOnce() -> T) -> T {
    let Some(hook) = HOOK.get() else {
        return f();
    };
    let (mut f, mut out) = (Some(f), None);
    hook(&mut || out = f.take().map(|f| f()));
    out.expect("a spawn hook runs its closure exactly once")
}

/// Runs `f` on the parts of `0..n` cut into `threads` consecutive ranges, the first on this
/// thread and the others on scoped threads started under the hook ([`spawning`]); returns
/// when all are done. A thread that cannot be started leaves its range to this thread, so
/// every index is handed to `f` exactly once whatever happens: a loop writing a caller's C
/// must never stop half-way, leaving C neither the caller's nor the result.
pub fn by_parts(n: usize, threads: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
    if threads <= 1 || n < 2 {
        f(0..n);
        return;
    }
    let per = n.div_ceil(threads);
    std::thread::scope(|sc| {
        let mut left = Vec::new();
        spawning(|| {
            for j0 in (per..n).step_by(per) {
                let range = j0..(j0 + per).min(n);
                let job = range.clone();
                if std::thread::Builder::new()
                    .spawn_scoped(sc, move || f(job))
                    .is_err()
                {
                    left.push(range);
                }
            }
        });
        f(0..per.min(n));
        for range in left {
            f(range);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every index is handed to exactly one call, whatever the thread count.
    #[test]
    fn by_parts_covers_every_index_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        for (n, threads) in [(0, 1), (1, 4), (7, 1), (7, 3), (100, 7), (5, 8)] {
            let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            by_parts(n, threads, &|r| {
                for j in r {
                    seen[j].fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(
                seen.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                "{n} indices on {threads} threads"
            );
        }
    }

    #[test]
    fn without_a_hook_the_closure_runs_once_and_its_value_is_returned() {
        // No hook is installed in this test process.
        let mut runs = 0;
        let v = spawning(|| {
            runs += 1;
            7
        });
        assert_eq!((v, runs), (7, 1));
    }
}
