//! Per-thread re-entrancy guard.
//!
//! Reference CBLAS implements `cblas_dgemm` by calling `dgemm_`, and a preloaded shim sees
//! both (`ecosystem-facts.md` §0). While a thread is inside one of our entry points, any
//! further call of ours on that thread comes from the vendor (or an error handler) and goes
//! straight to the vendor: it is neither recorded (no double count) nor routed (no double
//! emulation).

use std::cell::Cell;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is already inside an entry point.
pub fn nested() -> bool {
    INSIDE.with(Cell::get)
}

/// Marks this thread as inside an entry point until dropped.
pub struct Inside(());

impl Inside {
    /// Enters; the caller checked [`nested`] first.
    pub fn enter() -> Inside {
        INSIDE.with(|c| c.set(true));
        Inside(())
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_is_per_thread_and_released_on_drop() {
        assert!(!nested());
        {
            let _g = Inside::enter();
            assert!(nested());
            std::thread::spawn(|| assert!(!nested())).join().unwrap();
        }
        assert!(!nested());
    }
}
