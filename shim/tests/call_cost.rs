//! What a call costs beyond the vendor's own work, as behaviour a test can see: an untraced
//! `auto` call allocates nothing, and neither does a cached decision with its adjustment
//! (corrections, exploration, queue), whose notes are put into words only for a trace
//! record. Allocations are counted per thread by this binary's global allocator, so the
//! tests running beside each other do not see each other's.

mod common;

use ozaki_core::engine::CallShape;
use ozaki_core::engine::choose::Engine;
use ozaki_core::engine::correct::MIN_SAMPLES;
use ozaki_core::engine::profile::Profile;
use ozaki_core::route::Route;
use ozaki_shim::abi::{CblasGemm, FortranGemm};
use ozaki_shim::route::adjust::{Beside, adjust};
use ozaki_shim::route::learned::Learned;
use ozaki_shim::symbols::SymId;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting this thread's allocations.
struct Counting;

// SAFETY: every call goes to `System` unchanged; counting touches a const thread-local
// `Cell` only (no allocation, no lock).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Allocations this thread makes while `f` runs.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

const REFERENCE_BLAS: &str = "/usr/lib/x86_64-linux-gnu/libblas.so.3";

/// One 8x8x8 product through the Fortran and the row-major CBLAS entries.
fn calls(a: &[f64], b: &[f64], c: &mut [f64]) {
    let (n, alpha, beta) = (8i32, 1.0f64, 0.0f64);
    let f = FortranGemm {
        transa: c"N".as_ptr(),
        transb: c"N".as_ptr(),
        m: &n,
        n: &n,
        k: &n,
        alpha: &alpha,
        a: a.as_ptr(),
        lda: &n,
        b: b.as_ptr(),
        ldb: &n,
        beta: &beta,
        c: c.as_mut_ptr(),
        ldc: &n,
        transa_len: 1,
        transb_len: 1,
    };
    // SAFETY: valid 8x8 column-major operands, leading dimensions 8, one-letter flags.
    unsafe { ozaki_shim::entry::call(SymId::DGEMM, f) };
    let r = CblasGemm {
        layout: 101,
        transa: 111,
        transb: 111,
        m: n,
        n,
        k: n,
        alpha,
        a: a.as_ptr(),
        lda: n,
        b: b.as_ptr(),
        ldb: n,
        beta,
        c: c.as_mut_ptr(),
        ldc: n,
    };
    // SAFETY: as above, row-major.
    unsafe { ozaki_shim::entry::call(SymId::CBLAS_DGEMM, r) };
}

#[test]
fn an_untraced_auto_call_allocates_nothing() {
    if !common::require(
        std::path::Path::new(REFERENCE_BLAS).exists(),
        "the reference BLAS (call_cost: an_untraced_auto_call_allocates_nothing)",
        "apt-get install libblas3",
    ) {
        return;
    }
    // SAFETY: set before the shim's first call reads its configuration; the other test
    // of this binary reads no environment.
    unsafe {
        std::env::set_var("OZAKI_ROUTE", "auto");
        std::env::set_var("OZAKI_VENDOR_BLAS", REFERENCE_BLAS);
        std::env::set_var("OZAKI_EXPLORE", "0");
        std::env::remove_var("OZAKI_TRACE");
        std::env::remove_var("OZAKI_AB");
    }
    let a: Vec<f64> = (0..64).map(|i| (i % 7) as f64 - 3.0).collect();
    let b: Vec<f64> = (0..64).map(|i| (i % 5) as f64 * 0.5).collect();
    let mut c = vec![0.0; 64];
    // The first calls read the configuration, find the vendor and build the engine.
    for _ in 0..10 {
        calls(&a, &b, &mut c);
    }
    // The last call is the row-major one: C[0][0] = sum over l of A[0][l] B[l][0].
    let expected: f64 = (0..8).map(|l| a[l] * b[l * 8]).sum();
    assert_eq!(c[0], expected, "the calls computed the product");
    let n = allocations(|| {
        for _ in 0..1000 {
            calls(&a, &b, &mut c);
        }
    });
    assert_eq!(n, 0, "2000 untraced auto calls allocated {n} times");
}

#[test]
fn a_cached_decision_and_its_adjustment_allocate_nothing() {
    let e = Engine::new(Profile::built_in("h200").expect("ships"), 16);
    let learned = Learned::default();
    // Priced close enough on the vendor and the GPU for corrections to apply, with the
    // vendor's class measured 35x slower than predicted: the adjustment sends the calls to
    // the GPU and says why.
    let shape = CallShape::gemm(1953, 123, 1953);
    let decide = || e.decide_loaded(&shape, None, || Some(14), 1);
    let d = decide();
    let a = adjust(&learned, &d, &shape, 1.2, false, Beside::default(), || 0);
    let (key, predicted) = a.feedback.expect("close enough to be timed");
    for _ in 0..MIN_SAMPLES {
        learned
            .corrections
            .record(&key, 35.0 * predicted, predicted);
    }
    let mut routes = Vec::with_capacity(64);
    let n = allocations(|| {
        for tick in 0..64 {
            let d = decide();
            let a = adjust(&learned, &d, &shape, 1.2, true, Beside::default(), || tick);
            assert!(
                a.note.is_some(),
                "the route differs from the cached decision's"
            );
            routes.push(a.route);
        }
    });
    assert!(routes.iter().all(|r| *r != Route::Vendor), "{routes:?}");
    assert_eq!(
        n, 0,
        "64 cached decisions and adjustments allocated {n} times"
    );
}
