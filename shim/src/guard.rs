//! Per-thread re-entrancy guard.
//!
//! Reference CBLAS implements `cblas_dgemm` by calling `dgemm_`, and a preloaded shim sees
//! both (`ecosystem-facts.md` §0). While a thread is inside one of our entry points, any
//! further call of ours on that thread comes from the vendor and goes straight to the vendor:
//! it is neither recorded (no double count) nor routed (no double emulation).
//!
//! The guard must survive a foreign error handler leaving the call without returning: R's
//! `xerbla_` `longjmp`s, a C++ one throws. Neither runs Rust code on the way out, so the
//! guard holds no destructor and is instead checked for staleness at the next entry: a call
//! is nested only while the outer entry's frame is still live, that is, when it is deeper on
//! the stack than that frame ([`Frame`], the stack grows down on every Linux target) and the
//! cookie the outer entry left in its frame is still there. A call at or above the recorded
//! frame, or one that finds the cookie overwritten, starts a fresh outer call.
//!
//! A deeper call over stack memory the abandoned frame left intact would pass both tests, so
//! while the vendor handles an illegal call (the only time an error handler runs) the guard
//! is in [`Nesting::NestedIfIllegal`] mode: the vendor's own internal call for an illegal call
//! is illegal too (reference CBLAS passes its checks on to `dgemm_`), so a legal call is
//! always a fresh outer call, and at worst an illegal call after an abandoned report goes to
//! the vendor unrecorded, which is what it would do anyway.
//!
//! A signal handler may call BLAS at any instruction of the thread, in the middle of the
//! guard's own bookkeeping included. The guard is therefore one word per thread, written by
//! one store ([`enter`], [`leave`]): the handler's call sees either no outer entry (and makes
//! its own, undone before it returns) or the whole outer entry (and is nested), never half of
//! one. The cookie an entered frame holds is a function of its address on its thread, so the
//! word needs to hold no more than the address.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How a call relates to the thread's outer entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nesting {
    /// A fresh call of the program.
    Outer,
    /// The vendor's internal call: straight to the vendor.
    Nested,
    /// Nested if its arguments are illegal, otherwise a fresh call (see the module doc).
    NestedIfIllegal,
}

/// [`OUTER`]'s bit set while only illegal calls nest (frames are 8-byte aligned).
const ONLY_ILLEGAL: usize = 1;

thread_local! {
    /// The thread's outer entry, in one machine word so that a signal handler interrupting
    /// any instruction of [`enter`] or [`leave`] reads it whole: the address of its [`Frame`]
    /// with [`ONLY_ILLEGAL`] set while the vendor reports an illegal call; 0 when there is
    /// none. Written by one store after the frame holds its cookie.
    static OUTER: AtomicUsize = const { AtomicUsize::new(0) };
}

/// A marker living in the stack frame of an entry point, for the whole call.
///
/// It has no destructor: a `longjmp` or a foreign exception may skip the end of the call.
/// [`enter`] writes into it the cookie of its address on this thread ([`cookie_at`]), so
/// only an entered frame carries one.
#[repr(C)]
pub struct Frame {
    cookie: Cell<u64>,
}

impl Frame {
    /// A marker, not yet entered.
    #[inline(always)]
    pub fn new() -> Frame {
        Frame {
            cookie: Cell::new(0),
        }
    }

    fn addr(&self) -> usize {
        (self as *const Frame).expose_provenance()
    }
}

impl Default for Frame {
    fn default() -> Frame {
        Frame::new()
    }
}

/// The cookie an entered frame at `addr` holds on this thread: the address mixed with the
/// thread's own (the address of its [`OUTER`]), never 0 (the value of a frame not entered).
/// Stack memory left by other code holds it only by a 2^-63 chance.
fn cookie_at(addr: usize) -> u64 {
    let salt = OUTER.with(|o| o as *const AtomicUsize as usize) as u64;
    ((addr as u64) ^ salt.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
}

/// How a call whose marker is `frame` relates to this thread's outer entry.
pub fn nesting(frame: &Frame) -> Nesting {
    // Acquire: the outer frame's cookie was written before the word (see `set`).
    let word = OUTER.with(|o| o.load(Ordering::Acquire));
    let outer = word & !ONLY_ILLEGAL;
    if outer == 0 || !inside(frame, outer) {
        Nesting::Outer
    } else if word & ONLY_ILLEGAL != 0 {
        Nesting::NestedIfIllegal
    } else {
        Nesting::Nested
    }
}

/// Whether `frame` is deeper than the live entered frame at `outer`.
fn inside(frame: &Frame, outer: usize) -> bool {
    if frame.addr() >= outer {
        return false; // at or above the outer frame: that frame is gone
    }
    // SAFETY: `outer` lies above this call's own frame on this thread's stack, between the
    // current stack pointer and the stack's top, so it is mapped, readable memory of this
    // thread, used by nobody else meanwhile.
    let now = unsafe { stack_word(outer) };
    now == cookie_at(outer)
}

/// The machine word at `addr` on this thread's stack: the outer entry's live [`Frame`], or,
/// when that entry was left by `longjmp`, whatever a later frame of the program put there.
/// Read by one instruction, not by a Rust memory access: the word may belong to no live Rust
/// object (the abandoned frame is gone), which only machine code may look at.
///
/// # Safety
/// - `addr` is an 8-byte aligned address between this thread's stack pointer and its stack's
///   top.
#[cfg(all(target_arch = "x86_64", not(miri)))]
unsafe fn stack_word(addr: usize) -> u64 {
    let v: u64;
    // SAFETY: the caller's contract: a mapped, readable word; the asm only loads it.
    unsafe {
        std::arch::asm!("mov {v}, qword ptr [{a}]", v = out(reg) v, a = in(reg) addr,
            options(nostack, readonly, preserves_flags));
    }
    v
}

/// As the x86-64 version.
///
/// # Safety
/// - as the x86-64 version.
#[cfg(all(target_arch = "aarch64", not(miri)))]
unsafe fn stack_word(addr: usize) -> u64 {
    let v: u64;
    // SAFETY: the caller's contract: a mapped, readable word; the asm only loads it.
    unsafe {
        std::arch::asm!("ldr {v}, [{a}]", v = out(reg) v, a = in(reg) addr,
            options(nostack, readonly, preserves_flags));
    }
    v
}

/// Elsewhere (and under Miri, which runs no asm): a volatile read through the exposed
/// address, only sound while the outer frame is live.
///
/// # Safety
/// - as the x86-64 version, and the word is the outer entry's live `Frame`.
#[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
unsafe fn stack_word(addr: usize) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::read_volatile(std::ptr::with_exposed_provenance::<u64>(addr)) }
}

/// Makes the call whose marker is `frame` this thread's outer entry.
pub fn enter(frame: &Frame) {
    set(frame, false);
}

/// As [`enter`], for the time the vendor handles an illegal call: only illegal calls nest.
pub fn enter_reporting(frame: &Frame) {
    set(frame, true);
}

fn set(frame: &Frame, only_illegal: bool) {
    let addr = frame.addr();
    frame.cookie.set(cookie_at(addr));
    let word = addr | if only_illegal { ONLY_ILLEGAL } else { 0 };
    // Release, one store: a handler that sees the word also sees the cookie.
    OUTER.with(|o| o.store(word, Ordering::Release));
}

/// Ends the outer entry (before a call into code that may call back as a new outer call, and
/// at the end of the call).
pub fn leave() {
    OUTER.with(|o| o.store(0, Ordering::Release));
}

/// A signal may arrive at any instruction, and its handler may call BLAS: here the trap flag
/// raises SIGTRAP after every single instruction of `enter` and `leave`, and the handler
/// makes the entry a handler's BLAS call makes. Every one of those must find the guard
/// whole (the outer entry either not yet begun, or fully set), and the outer entry must
/// hold afterwards.
#[cfg(all(test, target_arch = "x86_64", target_os = "linux", not(miri)))]
mod signal_safety {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static TRAPS: AtomicUsize = AtomicUsize::new(0);
    static HANDLER_OUTER: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn on_trap(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
        crate::shield::shielded(|| {
            // What the entry of a BLAS call made by a signal handler does.
            let frame = Frame::new();
            if nesting(&frame) == Nesting::Outer {
                enter(&frame);
                leave();
                HANDLER_OUTER.fetch_add(1, Ordering::Relaxed);
            }
            std::hint::black_box(&frame);
            TRAPS.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Runs `f` with the trap flag set: SIGTRAP after every instruction.
    #[inline(never)]
    fn single_stepped(f: impl FnOnce()) {
        // SAFETY: sets and clears EFLAGS.TF around `f`; the stack is balanced (pushfq/popfq).
        unsafe { std::arch::asm!("pushfq", "or qword ptr [rsp], 0x100", "popfq") };
        f();
        // SAFETY: as above.
        unsafe { std::arch::asm!("pushfq", "and qword ptr [rsp], -257", "popfq") };
    }

    #[inline(never)]
    fn deeper_nesting() -> Nesting {
        let frame = Frame::new();
        let n = nesting(&frame);
        std::hint::black_box(&frame);
        n
    }

    #[test]
    fn a_signal_at_any_instruction_of_the_guard_finds_it_whole() {
        // SAFETY: a plain SA_SIGINFO handler for SIGTRAP, which nothing else in the tests uses.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_trap as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGTRAP, &sa, std::ptr::null_mut()), 0);
        }
        for round in 0..3 {
            let outer = Frame::new();
            let before = TRAPS.load(Ordering::Relaxed);
            single_stepped(|| enter(&outer));
            let steps = TRAPS.load(Ordering::Relaxed) - before;
            assert!(steps >= 3, "round {round}: single-stepped ({steps} traps)");
            assert_eq!(
                deeper_nesting(),
                Nesting::Nested,
                "round {round}: the outer entry holds after signals during `enter`"
            );
            single_stepped(|| enter_reporting(&outer));
            assert_eq!(
                deeper_nesting(),
                Nesting::NestedIfIllegal,
                "round {round}: and after signals during `enter_reporting`"
            );
            single_stepped(leave);
            assert_eq!(deeper_nesting(), Nesting::Outer, "round {round}: left");
            std::hint::black_box(&outer);
        }
        assert!(HANDLER_OUTER.load(Ordering::Relaxed) > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(frame: &Frame) -> bool {
        nesting(frame) == Nesting::Nested
    }

    #[inline(never)]
    fn deeper<T>(f: impl Fn(&Frame) -> T) -> T {
        let frame = Frame::new();
        let r = f(&frame);
        std::hint::black_box(&frame);
        r
    }

    // The guard relies on the machine's stack layout (deeper frames at lower addresses),
    // which Miri's abstract machine does not model: these run natively only.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_deeper_call_is_nested_while_the_outer_frame_lives() {
        let outer = Frame::new();
        assert!(!nested(&outer));
        enter(&outer);
        assert!(deeper(nested));
        std::thread::spawn(|| assert!(!nested(&Frame::new())))
            .join()
            .unwrap();
        leave();
        assert!(!deeper(nested));
        std::hint::black_box(&outer);
    }

    /// An entry that never reached `leave` (its handler longjmp'd out): a later call at or
    /// above its frame, or one that finds its cookie overwritten, is a fresh outer call.
    /// (Not under Miri: the stack layout, and the abandoned frame's word, are the machine's.)
    #[test]
    #[cfg_attr(miri, ignore)]
    fn an_abandoned_entry_does_not_capture_later_calls() {
        #[inline(never)]
        fn abandoned() {
            let frame = Frame::new();
            enter(&frame);
            std::hint::black_box(&frame);
        }
        abandoned();
        let here = Frame::new();
        assert!(!nested(&here), "a call above the abandoned frame");
        // Deeper again, but the abandoned frame's slot was reused: the cookie is gone.
        #[inline(never)]
        fn overwrite_then_call() -> bool {
            let mut junk = [0u64; 64];
            std::hint::black_box(&mut junk);
            deeper(nested)
        }
        abandoned();
        assert!(
            !overwrite_then_call(),
            "a call over the abandoned frame's reused slot"
        );
        leave();
        std::hint::black_box(&here);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn while_reporting_only_illegal_calls_may_nest() {
        let outer = Frame::new();
        enter_reporting(&outer);
        assert_eq!(deeper(nesting), Nesting::NestedIfIllegal);
        assert_eq!(nesting(&outer), Nesting::Outer, "not deeper: a fresh call");
        enter(&outer);
        assert_eq!(deeper(nesting), Nesting::Nested);
        leave();
        assert_eq!(deeper(nesting), Nesting::Outer);
        std::hint::black_box(&outer);
    }
}
