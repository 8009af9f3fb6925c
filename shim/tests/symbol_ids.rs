//! Each exported name reaches its own row of the symbol table.
//!
//! A child process (this test executable, run again) loads the built `libozaki_shim.so`
//! with `dlopen`, looks every name of `SYMBOLS` up with `dlsym` and calls it once, in table
//! order, on a small product (no BLAS is loaded in the child: the built-in kernel computes it).
//! The trace must then hold one record per name, in the same order, whose `sym` is that
//! name: a stub that passed another row's id would be recorded, forwarded and reported as
//! the other name.

mod common;

use common::{read_trace, shim_lib, work_dir};
use ozaki_core::trace::Routine;
use ozaki_shim::symbols::{Abi, SYMBOLS, Symbol};
use std::ffi::c_char;
use std::process::Command;

/// Set in the child: the trace is written there, the names are called.
const CHILD: &str = "OZAKI_SYMBOL_IDS_CHILD";

type FGemm<I> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const I,
    *const I,
    *const I,
    *const f64,
    *const f64,
    *const I,
    *const f64,
    *const I,
    *const f64,
    *mut f64,
    *const I,
    usize,
    usize,
);
type FSyrk<I> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const I,
    *const I,
    *const f64,
    *const f64,
    *const I,
    *const f64,
    *mut f64,
    *const I,
    usize,
    usize,
);
type CGemm<I> = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    I,
    I,
    I,
    f64,
    *const f64,
    I,
    *const f64,
    I,
    f64,
    *mut f64,
    I,
);
type CSyrk<I> = unsafe extern "C" fn(i32, i32, i32, I, I, f64, *const f64, I, f64, *mut f64, I);

/// CBLAS enum values (`cblas.h`).
const COL_MAJOR: i32 = 102;
const NO_TRANS: i32 = 111;
const UPPER: i32 = 121;

/// Calls `sym` once on a 2 x 2 x 2 product (dsyrk: n = k = 2, upper) with dimensions of
/// integer type `I`.
///
/// # Safety
/// - `f` is the address of the exported function named by `sym` (its ABI and width).
unsafe fn call<I: From<i32> + Copy>(sym: &Symbol, f: *const ()) {
    let (two, alpha, beta) = (I::from(2), 1.0f64, 0.0f64);
    let a = [1.0f64, 2.0, 3.0, 4.0];
    let b = [5.0f64, 6.0, 7.0, 8.0];
    let mut c = [0.0f64; 4];
    let (n, u) = (c"N".as_ptr(), c"U".as_ptr());
    // SAFETY: `f` has the signature of its table row (caller's contract); every pointer
    // spans a 2 x 2 column-major array and the character arguments are one byte long.
    unsafe {
        match (sym.abi, sym.routine) {
            (Abi::Fortran, Routine::Dgemm) => std::mem::transmute::<*const (), FGemm<I>>(f)(
                n,
                n,
                &two,
                &two,
                &two,
                &alpha,
                a.as_ptr(),
                &two,
                b.as_ptr(),
                &two,
                &beta,
                c.as_mut_ptr(),
                &two,
                1,
                1,
            ),
            (Abi::Fortran, Routine::Dsyrk) => std::mem::transmute::<*const (), FSyrk<I>>(f)(
                u,
                n,
                &two,
                &two,
                &alpha,
                a.as_ptr(),
                &two,
                &beta,
                c.as_mut_ptr(),
                &two,
                1,
                1,
            ),
            (Abi::Cblas, Routine::Dgemm) => std::mem::transmute::<*const (), CGemm<I>>(f)(
                COL_MAJOR,
                NO_TRANS,
                NO_TRANS,
                two,
                two,
                two,
                alpha,
                a.as_ptr(),
                two,
                b.as_ptr(),
                two,
                beta,
                c.as_mut_ptr(),
                two,
            ),
            (Abi::Cblas, Routine::Dsyrk) => std::mem::transmute::<*const (), CSyrk<I>>(f)(
                COL_MAJOR,
                UPPER,
                NO_TRANS,
                two,
                two,
                alpha,
                a.as_ptr(),
                two,
                beta,
                c.as_mut_ptr(),
                two,
            ),
        }
    }
}

/// The child: every name through `dlsym`, in table order.
fn call_every_name() {
    let lib = shim_lib();
    // SAFETY: loading the shim runs its constructor, which only sets up process state.
    let shim = unsafe { libloading::Library::new(&lib) }.expect("dlopen the shim");
    for sym in &SYMBOLS {
        let name = sym.expand();
        // SAFETY: the symbol is a function; it is only called through its row's signature.
        let f = unsafe { shim.get::<*const ()>(name.as_bytes()) }
            .unwrap_or_else(|e| panic!("dlsym {name}: {e}"));
        let f: *const () = *f;
        // SAFETY: `f` is the exported function `name`, called with its row's ABI and width.
        unsafe {
            if sym.ilp64() {
                call::<i64>(sym, f)
            } else {
                call::<i32>(sym, f)
            }
        }
    }
}

#[test]
fn every_exported_name_records_its_own_symbol() {
    if std::env::var_os(CHILD).is_some() {
        call_every_name();
        return;
    }
    let dir = work_dir("symbol-ids");
    let trace = dir.join("trace.jsonl");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "every_exported_name_records_its_own_symbol",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("OZAKI_TRACE", &trace)
        .env("OZAKI_ROUTE", "vendor")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let recorded: Vec<String> = read_trace(&trace)
        .calls
        .into_iter()
        .map(|c| c.sym)
        .collect();
    let expected: Vec<String> = SYMBOLS.iter().map(Symbol::expand).collect();
    assert_eq!(
        recorded, expected,
        "trace `sym` per call vs the names called"
    );
}
