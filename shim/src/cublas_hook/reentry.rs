//! Per-thread re-entry guard of the cuBLAS hook.
//!
//! While a thread is inside a hooked call, every further hooked call on it (cuBLAS calling
//! one of its own exported names, the shim's own cuBLAS work) goes straight to the real
//! cuBLAS: never recorded twice, never routed twice. The shim's own threads
//! (`shim_thread::spawn`) and the device entry points hold the guard too, so their cuBLAS
//! work never reaches the hook either (the hook also forwards straight while one of the
//! host BLAS entry points is live on the thread, `crate::guard`). cuBLAS reports errors by status codes,
//! never by `longjmp` or exceptions, so a guard that clears itself when dropped is enough
//! (the host BLAS entry points need the stack-frame guard of [`crate::guard`] instead).

use std::cell::Cell;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// This thread is inside a hooked call until the guard is dropped.
pub(crate) struct Inside(());

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|i| i.set(false));
    }
}

/// Enters a hooked call: `None` when the thread is already inside one (or its thread-local
/// storage is gone, at thread exit), in which case the call goes straight to cuBLAS.
pub(crate) fn enter() -> Option<Inside> {
    let was = INSIDE.try_with(|i| i.replace(true)).unwrap_or(true);
    (!was).then_some(Inside(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_entry_is_refused_until_the_outer_one_ends() {
        let outer = enter().expect("a fresh thread is outside");
        assert!(enter().is_none(), "nested");
        drop(outer);
        let again = enter();
        assert!(again.is_some(), "outside again after the guard is dropped");
        // on another thread, independent
        std::thread::spawn(|| assert!(enter().is_some()))
            .join()
            .unwrap();
    }

    #[test]
    fn the_shims_own_threads_are_inside_for_their_whole_life() {
        let inside = crate::shim_thread::spawn("ozaki-test", || enter().is_none())
            .unwrap()
            .join()
            .unwrap();
        assert!(
            inside,
            "a cuBLAS call on the shim's own thread goes straight to cuBLAS"
        );
    }
}
