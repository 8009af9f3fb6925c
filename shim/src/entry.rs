//! The FFI boundary: one generic entry for every exported name (the rule is
//! `style-models.md`, "The FFI boundary rule").
//!
//! In order, [`call`]:
//! 1. sends a nested call (the vendor calling back into an exported name, e.g. reference
//!    `cblas_dgemm` -> `dgemm_`) straight to the vendor, unrecorded ([`crate::guard`]), or
//!    with no vendor found to the built-in kernel (or the reference's error handler);
//! 2. sends a small untraced call whose route is already known to the vendor
//!    ([`route::small`]); otherwise decides inside `catch_unwind` what the call needs
//!    ([`Plan`]): decode, route choice, and any non-vendor route, which writes C itself;
//! 3. makes the foreign call the plan names outside `catch_unwind`, from frames with nothing
//!    to clean up: the vendor (for the vendor route, and for every call the reference checks
//!    reject or quick-return: the vendor's checks and handlers decide those), or, with no
//!    vendor BLAS anywhere, the error handler the reference would call. An error handler may
//!    `longjmp` out of it or throw a C++ exception through it (every exported name is
//!    `extern "C-unwind"`); the guard copes with that ([`crate::guard`]);
//! 4. records the call (inside `catch_unwind`); an illegal call is recorded before the
//!    foreign call, since its handler usually ends the program;
//! 5. if our own code panics before C was produced, the vendor computes the call from the
//!    original arguments, and the record says `fallback: "shim: internal error"`.
//!
//! No panic crosses into C: every profile keeps `panic = "unwind"` so `catch_unwind` works,
//! and the code outside it only moves prepared values and calls through function pointers.

use crate::abi::xerbla::{self, Handler};
use crate::abi::{RawCall, Shape, Verdict};
use crate::config;
use crate::forward;
use crate::guard;
use crate::route::choose_note::EngineNote;
use crate::route::{self, RouteOutcome};
use crate::shield::shielded;
use crate::symbols::SymId;
use crate::trace_sink::{self, Entry};
use libc::c_void;
use ozaki_core::route::Route;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Entry for every exported name; the stubs in `exports.rs` call only this.
///
/// # Safety
/// - `raw` are the arguments a BLAS caller passed to the exported name `id`, satisfying the
///   reference BLAS calling contract for that routine.
pub unsafe fn call<R: RawCall>(id: SymId, raw: R) {
    let frame = guard::Frame::new();
    let nested_call = match guard::nesting(&frame) {
        guard::Nesting::Outer => false,
        guard::Nesting::Nested => true,
        // SAFETY: the caller's contract.
        guard::Nesting::NestedIfIllegal => unsafe { illegal(&raw) },
    };
    if nested_call {
        // The vendor's own internal call of an exported name goes back to the vendor; with no
        // vendor (an error handler calling back into us, or a vendor library calling us from
        // its constructor while we load it) we compute it ourselves.
        // SAFETY: the caller's contract.
        unsafe { vendor_or_builtin(id, &raw) };
        std::hint::black_box(&frame);
        return;
    }
    guard::enter(&frame);
    // A small untraced call whose route is already known goes straight to the vendor.
    // SAFETY: the caller's contract.
    if let Ok(Some(lane)) = catch_unwind(AssertUnwindSafe(|| unsafe {
        route::small::to_vendor(id, &raw)
    })) {
        // SAFETY: the caller's contract; `lane.vendor` defines the same exported name.
        unsafe { raw.forward(lane.vendor) };
        drop(lane);
        guard::leave();
        std::hint::black_box(&frame);
        return;
    }
    let progress = Progress::default();
    // SAFETY: the caller's contract.
    let plan = catch_unwind(AssertUnwindSafe(|| unsafe { plan(id, &raw, &progress) }));
    match plan {
        Ok(Plan::Done) => {}
        Ok(Plan::Forward {
            vendor,
            then,
            illegal,
            held,
            mnk,
            narrow,
        }) => {
            if illegal {
                // The vendor's handler may longjmp or throw out of this call.
                guard::enter_reporting(&frame);
            }
            // SAFETY: the caller's contract; `vendor` defines the same exported name.
            unsafe { raw.forward(vendor) };
            drop(narrow);
            route::wake::vendor_returned(mnk);
            if let Some(pending) = then {
                shielded(|| pending.record());
            }
            drop(held);
        }
        Ok(Plan::Report(handler)) => {
            // The handler is the program's code: a BLAS call it makes is a call of its own.
            guard::leave();
            // SAFETY: found by `xerbla::handler_for` with the reference signature.
            unsafe { handler.call() };
        }
        Err(_) if !progress.done.get() => {
            // SAFETY: the caller's contract; C has not been written by us.
            unsafe { recover(id, &raw, &progress) };
        }
        Err(_) => {}
    }
    guard::leave();
    std::hint::black_box(&frame);
}

/// What a call needs after the decisions made inside `catch_unwind`.
enum Plan {
    /// C is final (or must stay untouched) and the call is recorded.
    Done,
    /// Call the vendor definition with the original arguments, then record `then`; `illegal`
    /// when the reference checks reject the call (the vendor may call an error handler);
    /// `held`: the call stays counted in flight until then (a call `auto` counted); `mnk`:
    /// the product's multiply-adds, noted for the vendor's wake once it returned (0: none).
    Forward {
        vendor: *const c_void,
        then: Option<Box<Pending>>,
        illegal: bool,
        held: Option<crate::lazy::InFlight>,
        mnk: u64,
        /// The vendor runs at a share of its threads until the call returned (a call from an
        /// OpenMP team, or beside others: `route::vendor_threads`).
        narrow: Option<route::vendor_threads::Narrow>,
    },
    /// Call the error handler the reference would call (no vendor BLAS exists).
    Report(Handler),
}

/// A trace record to write once the foreign call returned.
struct Pending {
    id: SymId,
    shape: Shape,
    start: trace_sink::Start,
    route: &'static str,
    outcome: Option<RouteOutcome>,
    engine: Option<Box<EngineNote>>,
    info: Option<i64>,
}

impl Pending {
    fn record(mut self: Box<Self>) {
        let engine = self.engine.take();
        let entry = Entry {
            sym: self.id.into(),
            shape: &self.shape,
            route: self.route,
            fallback: None,
            outcome: self.outcome.as_ref(),
            engine: None,
            info: self.info,
            ab: None,
        };
        trace_sink::record_taking(&self.start, &entry, engine);
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

/// Decides the call; runs and records it unless the plan says otherwise.
///
/// # Safety
/// - as [`call`].
unsafe fn plan<R: RawCall>(id: SymId, raw: &R, progress: &Progress) -> Plan {
    crate::process::ensure_loaded();
    // Counted in flight while our code (and what it initialises) runs, and through the
    // vendor's work for a call `auto` counts (its route's choice holds a flight).
    let flight = crate::lazy::InFlight::begin();
    let config = config::get();
    let start = config.tracing().then(trace_sink::start);
    // SAFETY: the caller's contract.
    let decoded = unsafe { raw.decode() };
    let shape = decoded.shape;
    if let Some(start) = start {
        progress.traced.set(Some((shape, start)));
    }
    let pending = |route: &'static str, outcome: Option<RouteOutcome>, engine, info| {
        start.map(|start| {
            Box::new(Pending {
                id,
                shape,
                start,
                route,
                outcome,
                engine,
                info,
            })
        })
    };
    let vendor = || forward::vendor(id).map(|v| v.addr);
    match decoded.verdict {
        Verdict::Illegal(bad) => {
            progress.done.set(true);
            // Recorded first: the handler usually ends the program.
            if let Some(p) = pending("xerbla", None, None, Some(bad.info)) {
                p.record();
            }
            match vendor() {
                Some(vendor) => Plan::Forward {
                    vendor,
                    then: None,
                    illegal: true,
                    held: None,
                    mnk: 0,
                    narrow: None,
                },
                None => Plan::Report(xerbla::handler_for(id, &bad)),
            }
        }
        Verdict::Quick => {
            progress.done.set(true);
            let then = pending("quick", None, None, None);
            match vendor() {
                Some(vendor) => Plan::Forward {
                    vendor,
                    then,
                    illegal: false,
                    held: None,
                    mnk: 0,
                    narrow: None,
                },
                None => {
                    if let Some(p) = then {
                        p.record();
                    }
                    Plan::Done
                }
            }
        }
        Verdict::Compute(canon) => {
            let mut choice = route::choose(config.route, &canon, config);
            // `auto`'s vendor calls may run the vendor at a share of its threads
            // (route::vendor_threads)
            let narrow = if choice.route == Route::Vendor && config.shares_vendor_threads() {
                route::vendor_threads::Narrow::for_call(
                    id,
                    config,
                    choice.flight.as_ref(),
                    choice.beside_start,
                )
            } else {
                None
            };
            // A vendor call the engine times runs through the route below; one it only counts
            // goes straight to the vendor, counted until it returns (a vendor choice queues no
            // GPU time, so its route flight has nothing else to hold).
            if choice.route == Route::Vendor
                && !choice.timed()
                && let Some(vendor) = vendor()
            {
                progress.done.set(true);
                let held = choice.flight.is_some().then_some(flight);
                let then = pending(
                    Route::Vendor.name(),
                    Some(RouteOutcome::default()),
                    choice.engine,
                    None,
                );
                return Plan::Forward {
                    vendor,
                    then,
                    illegal: false,
                    held,
                    mnk: canon.mnk(),
                    narrow,
                };
            }
            let plan = route::split::plan(&choice, &canon, config);
            let timed = choice.timed().then(std::time::Instant::now);
            // SAFETY: the caller's contract; `canon` was decoded from `raw`. `ab::execute` is
            // `route::execute` plus the vendor comparison when OZAKI_AB picks the call.
            let (done, ab) = unsafe {
                crate::ab::execute(
                    choice.route,
                    plan.as_ref(),
                    choice.on_decline,
                    id,
                    raw,
                    &canon,
                    config,
                )
            };
            drop(narrow);
            if let Some(t) = timed {
                let s = t.elapsed().as_secs_f64();
                route::choose::feed(&choice, &done, s);
            }
            route::choose::feed_decline(&choice, &done);
            progress.done.set(true);
            if let Some(start) = &start {
                let entry = Entry {
                    sym: id.into(),
                    shape: &shape,
                    route: done.route.name(),
                    fallback: done.fallback.as_deref(),
                    outcome: Some(&done.outcome),
                    engine: None,
                    info: None,
                    ab: ab.as_ref(),
                };
                trace_sink::record_taking(start, &entry, choice.engine.take());
            }
            Plan::Done
        }
    }
}

/// Whether the reference checks reject the call (false if deciding panics).
///
/// # Safety
/// - as [`call`].
unsafe fn illegal<R: RawCall>(raw: &R) -> bool {
    // SAFETY: the caller's contract.
    catch_unwind(AssertUnwindSafe(|| unsafe {
        matches!(raw.decode().verdict, Verdict::Illegal(_))
    }))
    .unwrap_or(false)
}

/// Runs a call from its original arguments on the vendor BLAS or, where none is found (or
/// looking it up panicked), on the built-in kernel or the reference's error handler
/// ([`without_vendor`]): the call is answered either way, never dropped. Returns the route
/// that answered it.
///
/// # Safety
/// - as [`call`].
unsafe fn vendor_or_builtin<R: RawCall>(id: SymId, raw: &R) -> Route {
    let vendor = catch_unwind(|| forward::vendor(id).map(|v| v.addr))
        .ok()
        .flatten();
    match vendor {
        Some(vendor) => {
            // SAFETY: the caller's contract; `vendor` defines the same exported name.
            unsafe { raw.forward(vendor) };
            Route::Vendor
        }
        None => {
            // SAFETY: the caller's contract.
            unsafe { without_vendor(id, raw) };
            Route::Builtin
        }
    }
}

/// Runs a call with no vendor BLAS: the built-in kernel, or the reference's error handler.
///
/// # Safety
/// - as [`call`].
unsafe fn without_vendor<R: RawCall>(id: SymId, raw: &R) {
    // SAFETY: the caller's contract.
    let handler = catch_unwind(AssertUnwindSafe(|| unsafe {
        match raw.decode().verdict {
            Verdict::Compute(canon) => {
                route::builtin::run(&canon);
                None
            }
            Verdict::Illegal(bad) => Some(xerbla::handler_for(id, &bad)),
            Verdict::Quick => None,
        }
    }));
    if let Ok(Some(handler)) = handler {
        // SAFETY: found by `xerbla::handler_for` with the reference signature.
        unsafe { handler.call() };
    }
}

/// After a panic in our own code, before C was produced: the vendor (or the built-in kernel)
/// computes the call from the original arguments.
///
/// # Safety
/// - as [`call`].
unsafe fn recover<R: RawCall>(id: SymId, raw: &R, progress: &Progress) {
    // SAFETY: the caller's contract.
    let route = unsafe { vendor_or_builtin(id, raw) };
    shielded(|| {
        if let Some((shape, start)) = progress.traced.get() {
            let entry = Entry {
                sym: id.into(),
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
    });
}
