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

#[cfg(test)]
mod tests {
    use super::*;

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
