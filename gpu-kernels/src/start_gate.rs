//! Steps of the GPU start that a process exit waits for.
//!
//! The shim may start the GPU on a background thread (`OZAKI_ROUTE=auto`, its
//! `route::start`), so a short program can return from `main` while that thread is inside
//! `cuInit`, context creation, cuBLAS or NVRTC. `exit()` then runs the exit handlers (the C++
//! static destructors of the CUDA libraries among them) and `_dl_fini` while the thread still
//! uses those libraries: a crash at exit, or a wrong exit status. So each step of the start
//! ([`crate::device`]'s initialisation, the shim's warm-up) runs inside [`step`], and the
//! shim's exit handler calls [`close`]: no step starts after it (the start then fails with
//! "the process is exiting", silently), and `close` waits, bounded, for the step under way to
//! end. Afterwards no thread of ours is inside a CUDA library while the process tears down.

use crate::error::GpuError;
use std::cell::Cell;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Whether the gate is closed, and how many steps are running.
static GATE: Mutex<(bool, u32)> = Mutex::new((false, 0));
static ENDED: Condvar = Condvar::new();

thread_local! {
    /// This thread is inside a step (an exit called from within one must not wait for itself).
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// The error of a step refused because the process is exiting.
pub const EXITING: &str = "the process is exiting";

/// Runs one step of the GPU start (`what` names it in the debug log), unless [`close`] was
/// called: then `Err(Unavailable(EXITING))` without running it.
pub fn step<T>(what: &str, f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, GpuError> {
    {
        let mut g = GATE.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 {
            return Err(GpuError::Unavailable(EXITING.into()));
        }
        g.1 += 1;
    }
    /// Leaves the step even when `f` unwinds.
    struct Leave(bool);
    impl Drop for Leave {
        fn drop(&mut self) {
            INSIDE.with(|i| i.set(self.0));
            let mut g = GATE.lock().unwrap_or_else(|p| p.into_inner());
            g.1 -= 1;
            ENDED.notify_all();
        }
    }
    let _leave = Leave(INSIDE.with(|i| i.replace(true)));
    let t = Instant::now();
    let r = f();
    tracing::debug!(
        step = what,
        ms = t.elapsed().as_secs_f64() * 1e3,
        ok = r.is_ok(),
        "GPU start step"
    );
    r
}

/// Closes the gate: no step starts from now on. Waits up to `limit` for the steps under way on
/// other threads to end; returns whether none is left running.
pub fn close(limit: Duration) -> bool {
    let mut g = GATE.lock().unwrap_or_else(|p| p.into_inner());
    g.0 = true;
    // A step of this very thread (exit() called from inside a CUDA library) never ends first.
    let own = u32::from(INSIDE.with(Cell::get));
    let (g, _) = ENDED
        .wait_timeout_while(g, limit, |g| g.1 > own)
        .unwrap_or_else(|p| p.into_inner());
    g.1 <= own
}

/// Whether [`close`] was called.
pub fn closed() -> bool {
    GATE.lock().unwrap_or_else(|p| p.into_inner()).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// One test: the gate is process-wide.
    #[test]
    fn close_waits_for_the_running_step_and_refuses_new_ones() {
        assert_eq!(step("quick", || Ok(7)).unwrap(), 7);
        let (entered, inside) = mpsc::channel();
        let worker = std::thread::spawn(move || {
            step("slow", || {
                entered.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            })
        });
        inside.recv().unwrap();
        let t = Instant::now();
        assert!(close(Duration::from_secs(10)), "the running step ended");
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "close returned before the step ended"
        );
        assert!(
            worker.join().unwrap().is_ok(),
            "a step under way is not interrupted"
        );
        assert!(closed());
        match step("late", || Ok(())) {
            Err(GpuError::Unavailable(why)) => assert_eq!(why, EXITING),
            other => panic!("a step after close ran: {other:?}"),
        }
        // Bounded: a step that never ends does not hold close forever.
        GATE.lock().unwrap().1 += 1; // a step stuck on another thread
        let t = Instant::now();
        assert!(!close(Duration::from_millis(100)));
        assert!(t.elapsed() < Duration::from_secs(5));
        GATE.lock().unwrap().1 -= 1;
    }
}
