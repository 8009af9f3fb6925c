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

use std::cell::Cell;

/// The outer entry of a thread: where its [`Frame`] lies, the cookie in it, and whether only
/// illegal calls nest (while the vendor reports an illegal call).
#[derive(Clone, Copy)]
struct Outer {
    addr: usize,
    cookie: u64,
    only_illegal: bool,
}

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

thread_local! {
    static OUTER: Cell<Option<Outer>> = const { Cell::new(None) };
    static NEXT_COOKIE: Cell<u64> = const { Cell::new(0) };
}

/// A marker living in the stack frame of an entry point, for the whole call.
///
/// It has no destructor: a `longjmp` or a foreign exception may skip the end of the call.
#[repr(C)]
pub struct Frame {
    cookie: u64,
}

impl Frame {
    /// A marker with a cookie no earlier entry on this thread used.
    #[inline(always)]
    pub fn new() -> Frame {
        let cookie = NEXT_COOKIE.with(|n| {
            // A per-thread sequence mixed with the thread's own address, never 0.
            let seq = n.get().wrapping_add(1);
            n.set(seq);
            let salt = n as *const Cell<u64> as usize as u64;
            (seq ^ salt.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
        });
        Frame { cookie }
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

/// How a call whose marker is `frame` relates to this thread's outer entry.
pub fn nesting(frame: &Frame) -> Nesting {
    match OUTER.with(Cell::get) {
        Some(outer) if inside(frame, &outer) => {
            if outer.only_illegal {
                Nesting::NestedIfIllegal
            } else {
                Nesting::Nested
            }
        }
        _ => Nesting::Outer,
    }
}

/// Whether `frame` is deeper than the live frame of `outer`.
fn inside(frame: &Frame, outer: &Outer) -> bool {
    if frame.addr() >= outer.addr {
        return false; // at or above the outer frame: that frame is gone
    }
    // SAFETY: `outer.addr` lies above this call's own frame on this thread's stack, between
    // the current stack pointer and the stack's top, so it is mapped, readable memory of this
    // thread, used by nobody else meanwhile.
    let now = unsafe { stack_word(outer.addr) };
    now == outer.cookie
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
    let outer = Outer {
        addr: frame.addr(),
        cookie: frame.cookie,
        only_illegal,
    };
    OUTER.with(|o| o.set(Some(outer)));
}

/// Ends the outer entry (before a call into code that may call back as a new outer call, and
/// at the end of the call).
pub fn leave() {
    OUTER.with(|o| o.set(None));
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

    #[test]
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
    /// (Not under Miri: looking at the abandoned frame's word is what only machine code may.)
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
