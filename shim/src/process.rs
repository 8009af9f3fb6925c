//! Process events: the load-time constructor, the `fork` handlers and the `exit` handler.
//!
//! The constructor belongs to the cdylib only (`_ozaki_shim_on_load`, its `DT_INIT`, named by
//! `build.rs`, or under zig's linker an `.init_array` entry of the cdylib link alone), so a
//! program that links this crate as a Rust library runs none of it.
//!
//! Everything here is called by the loader or libc, so each function runs its work inside
//! `catch_unwind` (a panic must not unwind into them).
//!
//! The load-time set-up ([`ensure_loaded`]) runs once, from the constructor or from whichever
//! BLAS call comes first: another preloaded library's constructor may call BLAS before ours
//! has run, and that call must already see this process's pid and clock origin (otherwise
//! its trace would call it a fork child).
//!
//! `fork` handlers, in order: the prepare handler holds new shim work back and waits for the
//! work in flight, calls and lazy initialisers (bounded, [`crate::lazy`]), then takes the
//! trace sink's lock, so the child copies nothing half done; the parent and child handlers
//! release them in the opposite order, the child's resetting the sink for its own trace
//! first.

use crate::shield::shielded;
use std::sync::atomic::{AtomicU8, Ordering};

/// [`ensure_loaded`]'s progress: 0 not started, 1 running, 2 done.
static LOADED: AtomicU8 = AtomicU8::new(0);

/// Whether [`ensure_loaded`] has done its work.
pub fn loaded() -> bool {
    LOADED.load(Ordering::Acquire) == 2
}

/// Takes the trace clock origin and this process's pid and registers the `fork` and `exit`
/// handlers, once per process; cheap after the first call.
pub fn ensure_loaded() {
    if LOADED.load(Ordering::Acquire) == 2 {
        return;
    }
    if LOADED
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Another thread is setting up (a few instructions' worth); its origin is the one.
        while LOADED.load(Ordering::Acquire) == 1 {
            std::hint::spin_loop();
        }
        return;
    }
    shielded(|| {
        crate::trace_sink::on_load();
        crate::shim_thread::install_spawn_hook();
        // SAFETY: the handlers are `extern "C" fn()` that live for the whole process and
        // catch every panic.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_parent),
                Some(after_fork_child),
            );
            libc::atexit(flush_at_exit);
        }
    });
    LOADED.store(2, Ordering::Release);
}

/// The library's load-time constructor: the loader runs it as `DT_INIT` when it loads
/// `libozaki_shim.so` (`build.rs` links the cdylib with `-init` naming it, or, under zig's
/// linker, with an `.init_array` entry in an object of the cdylib link alone), before the
/// first BLAS call can arrive through the library's exports. It is not an `.init_array`
/// entry of the Rust code on purpose: the `ozaki` command links this crate as an ordinary
/// library and must not start the interposer in its own process. Sets the vendor's spin
/// timeout first, while this is the only thread ([`crate::vendor_spin`]), sets up the
/// process state ([`ensure_loaded`]), then arms the main-thread exit guard of the GPU start
/// ([`crate::route::start`]) on the loading thread.
#[unsafe(no_mangle)]
extern "C" fn _ozaki_shim_on_load() {
    shielded(|| {
        crate::vendor_spin::apply_at_load();
        ensure_loaded();
        crate::route::start::arm_main_exit_guard();
    });
}

extern "C" fn before_fork() {
    shielded(crate::lazy::quiesce);
    shielded(crate::trace_sink::before_fork);
}

extern "C" fn after_fork_parent() {
    shielded(crate::trace_sink::after_fork_parent);
    shielded(crate::lazy::resume);
}

extern "C" fn after_fork_child() {
    shielded(crate::trace_sink::after_fork_child);
    shielded(crate::lazy::reset_in_child);
}

extern "C" fn flush_at_exit() {
    shielded(crate::trace_sink::flush_at_exit);
}
