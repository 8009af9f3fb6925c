//! The FFI boundary: one generic entry for every exported name (issue #2; the rule is
//! `style-models.md`, "The FFI boundary rule").
//!
//! In order, [`call`]:
//! 1. sends a nested call (the vendor calling back into an exported name, e.g. reference
//!    `cblas_dgemm` -> `dgemm_`) straight to the vendor, unrecorded ([`crate::guard`]);
//! 2. runs everything else (decode, route, trace) inside `catch_unwind`;
//! 3. on an illegal argument, records the call and reports it to the error handler the
//!    reference would use, leaving C untouched; on a reference quick return, records it and
//!    returns;
//! 4. otherwise runs the chosen route, whose `Err` or panic falls back to the vendor with the
//!    original arguments ([`crate::route::execute`]);
//! 5. if our own code panics before C was produced, the vendor computes the call from the
//!    original arguments, and the record says `fallback: "shim: internal error"`.
//!
//! No panic crosses into C: every profile keeps `panic = "unwind"` so `catch_unwind` works.

use crate::abi::{self, RawCall, Shape, Verdict};
use crate::config;
use crate::guard;
use crate::route::{self, RouteOutcome};
use crate::symbols::SymId;
use crate::trace_sink::{self, Entry};
use ozaki_core::route::Route;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Entry for every exported name; the stubs in `exports.rs` call only this.
///
/// # Safety
/// - `raw` are the arguments a BLAS caller passed to the exported name `id`, satisfying the
///   reference BLAS calling contract for that routine.
pub unsafe fn call<R: RawCall>(id: SymId, raw: R) {
    if guard::nested() {
        // SAFETY: the caller's contract.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe { nested(id, &raw) }));
        return;
    }
    let _inside = guard::Inside::enter();
    let progress = Progress::default();
    // SAFETY: the caller's contract.
    let result = catch_unwind(AssertUnwindSafe(|| unsafe { run(id, &raw, &progress) }));
    if result.is_err() && !progress.done.get() {
        // SAFETY: the caller's contract; C has not been written by us.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe { recover(id, &raw, &progress) }));
    }
}

/// How far a call got, for recovery after a panic.
#[derive(Default)]
struct Progress {
    /// C is final (or must stay untouched): nothing may compute the call again.
    done: Cell<bool>,
    /// Decoded shape and start, once known.
    traced: Cell<Option<(Shape, trace_sink::Start)>>,
}

/// # Safety
/// - as [`call`].
unsafe fn run<R: RawCall>(id: SymId, raw: &R, progress: &Progress) {
    let config = config::get();
    let start = config.tracing().then(trace_sink::start);
    // SAFETY: the caller's contract.
    let decoded = unsafe { raw.decode() };
    let shape = decoded.shape;
    if let Some(start) = start {
        progress.traced.set(Some((shape, start)));
    }
    let record =
        |route: &str, fallback: Option<&str>, outcome: Option<&RouteOutcome>, engine, info, ab| {
            if let Some(start) = &start {
                let entry = Entry {
                    sym: id,
                    shape: &shape,
                    route,
                    fallback,
                    outcome,
                    engine,
                    info,
                    ab,
                };
                trace_sink::record(start, &entry);
            }
        };
    match decoded.verdict {
        Verdict::Illegal(bad) => {
            progress.done.set(true);
            // Recorded first: the reference handler usually ends the program.
            record("xerbla", None, None, None, Some(bad.info), None);
            // SAFETY: `bad` came from decoding this call of `id`.
            unsafe { abi::report_illegal(id, &bad) };
        }
        Verdict::Quick => {
            progress.done.set(true);
            record("quick", None, None, None, None, None);
        }
        Verdict::Compute(canon) => {
            let choice = route::choose(config.route, &canon, config);
            let plan = route::split::plan(&choice, &canon, config);
            let timed = choice.feedback.as_ref().map(|_| std::time::Instant::now());
            // SAFETY: the caller's contract; `canon` was decoded from `raw`. `ab::execute` is
            // `route::execute` plus the vendor comparison when OZAKI_AB picks the call.
            let (done, ab) =
                unsafe { crate::ab::execute(choice.route, plan.as_ref(), id, raw, &canon, config) };
            if let Some(t) = timed {
                let s = t.elapsed().as_secs_f64();
                route::choose::feed(&choice, done.route, done.fallback.is_some(), s);
            }
            progress.done.set(true);
            record(
                done.route.name(),
                done.fallback.as_deref(),
                Some(&done.outcome),
                choice.engine.as_ref(),
                None,
                ab.as_ref(),
            );
        }
    }
}

/// A nested call: the vendor's own internal call of an exported name.
///
/// # Safety
/// - as [`call`].
unsafe fn nested<R: RawCall>(id: SymId, raw: &R) {
    // SAFETY: the caller's contract.
    if unsafe { route::vendor::call(id, raw) }.is_ok() {
        return;
    }
    // No vendor (only possible when an error handler calls back into us): compute it ourselves.
    // SAFETY: the caller's contract.
    let decoded = unsafe { raw.decode() };
    match decoded.verdict {
        // SAFETY: decoded from this call.
        Verdict::Compute(canon) => unsafe {
            route::builtin::run(&canon);
        },
        // SAFETY: decoded from this call.
        Verdict::Illegal(bad) => unsafe { abi::report_illegal(id, &bad) },
        Verdict::Quick => {}
    }
}

/// After a panic in our own code, before C was produced: the vendor (or the built-in kernel)
/// computes the call from the original arguments.
///
/// # Safety
/// - as [`call`].
unsafe fn recover<R: RawCall>(id: SymId, raw: &R, progress: &Progress) {
    // SAFETY: the caller's contract.
    let route = if unsafe { route::vendor::call(id, raw) }.is_ok() {
        Route::Vendor
    } else {
        // SAFETY: the caller's contract.
        unsafe { nested(id, raw) };
        Route::Builtin
    };
    if let Some((shape, start)) = progress.traced.get() {
        let entry = Entry {
            sym: id,
            shape: &shape,
            route: route.name(),
            fallback: Some("shim: internal error"),
            outcome: None,
            engine: None,
            info: None,
            ab: None,
        };
        trace_sink::record(&start, &entry);
    }
}
