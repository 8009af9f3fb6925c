//! The cuBLAS hook: the shim exports the fp64 entry points of cuBLAS, so programs whose
//! matrices live on the GPU (CuPy, PyTorch, cuSOLVER's internal products) get the same
//! device-resident decision as `ozaki_dgemm_device`.
//!
//! | module | what it does |
//! |---|---|
//! | `exports` | the `#[no_mangle]` entry points, one per cuBLAS name |
//! | [`real`] | the real entry points, resolved from the loaded library's own handle |
//! | [`reentry`] | per-thread guard: a call made from inside a hooked call goes straight to cuBLAS |
//! | [`decode`] | cuBLAS enums and types in the BLAS decoder's terms; strided-batched members |
//! | [`handle`] | the caller's handle: stream, pointer mode, math mode |
//! | [`lt`] | `cublasLtMatmul`'s descriptor and layouts, and which of its calls are plain fp64 products |
//! | [`capture`] | the graph-capture rule |
//! | [`compare`] | `OZAKI_AB`: cuBLAS fp64 beside the emulation, compared into the record |
//!
//! A call goes to the real cuBLAS with its arguments untouched (the handle, its stream,
//! workspace and atomics mode as the caller set them) unless all of these hold: the hook is
//! on (`OZAKI_CUBLAS`, default on), the call is fp64 (`cublasGemmEx` with other types or
//! compute types is forwarded at once, unrecorded), its arguments pass the reference checks
//! and it is no quick return, alpha and beta are host values (pointer mode host), the math
//! mode leaves fp64 alone (not pedantic), the stream is not being captured into a graph,
//! `OZAKI_ROUTE` is `auto` or `gpu-ozaki`, and the one device-resident decision
//! ([`crate::device_api::emulation_chosen`]) picks the emulation. Then Ozaki-II runs on the
//! caller's stream in its context (operands of another device's context are declined), and
//! NaN/Inf input or any GPU failure before C is written sends the call to cuBLAS (the
//! emulation runs with its thread in relaxed capture mode, [`capture::Relaxed`], so another
//! thread's global-mode capture neither fails it nor is broken by it).
//!
//! An emulated call waits on the caller's stream once, after the scan of A and B (the plan
//! is made on the host from those statistics, so this also waits for the work queued before
//! the call), and returns with its products and reconstruction still running on the stream,
//! as a cuBLAS call does: C is ready for whatever the caller enqueues next on that stream.
//! The emulation's buffers are shared by all calls, so the next hooked call, on this stream
//! or another, is ordered after that work on the device, and any other use of the GPU waits
//! for it (`gpu_kernels::gpu_on`). A traced call also waits at the end, to read its phase
//! times into the record; a call compared under `OZAKI_AB` waits for both results. A
//! forwarded call adds nothing.
//!
//! `cublasLtMatmul` is routed the same way when it is a plain fp64 product ([`lt`]: no
//! epilogue, bias or other cuBLASLt feature, column-major layouts, C the same matrix as D
//! unless beta = 0); its stream is its argument and its pointer mode the descriptor's. Other
//! types go to cuBLASLt at once, unrecorded; other fp64 calls go to it with a record saying
//! why.
//!
//! A strided-batched call is decided once for its shape: all members emulated (a member the
//! emulation declines runs on cuBLAS fp64 in turn) or the whole batch forwarded.
//!
//! Every hooked fp64 call writes one trace record (`sym` the cuBLAS name,
//! `device_resident: true`, `batch` for batches): `route` `gpu-ozaki` or `gpu-native` (cuBLAS),
//! `fallback` saying why a call the emulation could have taken went to cuBLAS, `ab` with
//! `OZAKI_AB` ([`compare`]). alpha and beta in device memory show as NaN.

pub(crate) mod capture;
pub(crate) mod compare;
pub(crate) mod decode;
#[rustfmt::skip]
mod exports;
pub(crate) mod handle;
pub(crate) mod lt;
pub(crate) mod real;
pub(crate) mod reentry;

use crate::abi::{Decoded, Verdict};
use crate::config;
use crate::device_api::{Emulation, Queued, device_call, emulation_chosen, enqueue_emulation};
use crate::route::RouteOutcome;
use crate::trace_sink::{self, Entry, Sym};
use compare::Compare;
use core::ffi::{c_int, c_void};
use decode::Batch;
use gpu_kernels::device::{current_context, restore_context};
use gpu_kernels::ozaki::{DeviceCall, Outcome, Pending};
use gpu_kernels::{GpuError, gpu_on};
use ozaki_core::route::{Route, RouteRequest};
use ozaki_core::trace::{AbResult, Phases};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The cuBLAS names the shim exports (include/ozaki_shim.h leaves them to cublas_v2.h).
pub const NAMES: [&str; 11] = [
    "cublasDgemm_v2",
    "cublasDgemm_v2_64",
    "cublasGemmEx",
    "cublasGemmEx_64",
    "cublasDgemmStridedBatched",
    "cublasDgemmStridedBatched_64",
    "cublasGemmStridedBatchedEx",
    "cublasGemmStridedBatchedEx_64",
    "cublasDsyrk_v2",
    "cublasDsyrk_v2_64",
    "cublasLtMatmul",
];

/// `cublasHandle_t`.
pub(crate) type Handle = *mut c_void;
/// `cublasStatus_t`.
pub(crate) type Status = c_int;

/// `CUBLAS_STATUS_SUCCESS`.
const SUCCESS: Status = 0;
/// `CUBLAS_STATUS_NOT_INITIALIZED`: no loaded cuBLAS defines the entry point.
pub(crate) const NOT_INITIALIZED: Status = 1;
/// `CUBLAS_STATUS_EXECUTION_FAILED`: a batch member failed after others were written.
const EXECUTION_FAILED: Status = 13;

/// One hooked fp64 call as its entry point received it.
pub(crate) struct Call<'a> {
    /// The cuBLAS name.
    pub name: &'static str,
    /// What the caller set on its handle (for cuBLASLt, the stream argument and the
    /// descriptor's pointer mode), read only when the call is decoded.
    pub state: &'a dyn Fn() -> Result<handle::HandleState, String>,
    /// alpha and beta as passed (host or device pointers, as the pointer mode says).
    pub scalars: (*const f64, *const f64),
    /// The members of a strided-batched call ([`Batch::ONE`] otherwise).
    pub batch: Batch,
    /// The call decoded with alpha and beta's values (NaN when they are in device memory).
    pub decode: &'a dyn Fn(f64, f64) -> Decoded,
    /// The same call on the real cuBLAS, arguments untouched.
    pub forward: &'a dyn Fn() -> Status,
    /// Why the hook cannot compute this fp64 call (a cuBLASLt feature the emulation does
    /// not have), if it cannot: it goes to cuBLAS and its record says why.
    pub refused: Option<String>,
    /// cuBLASLt with C and D apart and beta != 0: C's address, leading dimension and batch
    /// stride, copied into D on the stream before the emulation computes the product in D.
    pub copy_c: Option<(u64, (i64, i64))>,
}

/// What the hook did with a call.
enum Done {
    /// Handed to cuBLAS: why, when the emulation could have taken it; the reference error
    /// position of an illegal call.
    Forward {
        fallback: Option<String>,
        info: Option<i64>,
    },
    /// C computed on the GPU (every member emulated but `declined`, which ran on cuBLAS
    /// fp64), or failed after part of it was written.
    Gpu {
        outcome: RouteOutcome,
        fallback: Option<String>,
        status: Status,
        /// The comparison with cuBLAS, when `OZAKI_AB` chose the call.
        ab: Option<AbResult>,
    },
}

fn forward(why: impl Into<String>) -> Done {
    Done::Forward {
        fallback: Some(why.into()),
        info: None,
    }
}

/// The entry points' body: straight to cuBLAS when nested (in a hooked call, or in one of the
/// shim's host BLAS entry points) or off, else routed and recorded.
pub(crate) fn dispatch(call: &Call<'_>) -> Status {
    let Some(_inside) = reentry::enter() else {
        return (call.forward)();
    };
    // Inside one of the shim's host BLAS entry points on this thread: the call is that
    // route's own cuBLAS work (or the vendor BLAS's), already decided and recorded.
    if crate::guard::nesting(&crate::guard::Frame::new()) != crate::guard::Nesting::Outer {
        return (call.forward)();
    }
    let Ok(cfg) = catch_unwind(config::get) else {
        return (call.forward)();
    };
    if !cfg.cublas {
        return (call.forward)();
    }
    let start = cfg.tracing().then(trace_sink::start);
    let mut shape = None;
    let done = catch_unwind(AssertUnwindSafe(|| {
        route(call, (cfg.route, start.is_some()), &mut shape)
    }))
    .unwrap_or_else(|_| forward("gpu-ozaki: panicked"));
    let (status, route, fallback, outcome, info, ab) = match done {
        Done::Forward { fallback, info } => (
            (call.forward)(),
            Route::GpuNative,
            fallback,
            None,
            info,
            None,
        ),
        Done::Gpu {
            outcome,
            fallback,
            status,
            ab,
        } => (status, Route::GpuOzaki, fallback, Some(outcome), None, ab),
    };
    if let (Some(start), Some(shape)) = (start, shape) {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let sym = Sym::Cublas {
                name: call.name,
                batch: call.batch.count.max(0) as u64,
            };
            trace_sink::record(
                &start,
                &Entry {
                    sym,
                    shape: &shape,
                    route: route.name(),
                    fallback: fallback.as_deref(),
                    outcome: outcome.as_ref(),
                    engine: None,
                    info,
                    ab: ab.as_ref(),
                },
            );
        }));
    }
    status
}

/// The hook's decision for one call (and the emulation, where decided); `shape` receives
/// what the trace records.
fn route(
    call: &Call<'_>,
    (request, traced): (RouteRequest, bool),
    shape: &mut Option<crate::abi::Shape>,
) -> Done {
    let state = (call.state)();
    let device_scalars = state.as_ref().is_ok_and(|s| s.device_scalars);
    let (alpha, beta) = match call.scalars {
        (a, b) if !device_scalars && !a.is_null() && !b.is_null() => {
            // SAFETY: host pointer mode: alpha and beta are host scalars (cuBLAS's contract).
            unsafe { (*a, *b) }
        }
        _ => (f64::NAN, f64::NAN),
    };
    let decoded = (call.decode)(alpha, beta);
    *shape = Some(decoded.shape);
    // Not a plain product (its layouts need not pass the BLAS argument checks either).
    if let Some(why) = &call.refused {
        return forward(why.clone());
    }
    let canon = match decoded.verdict {
        Verdict::Illegal(bad) => {
            return Done::Forward {
                fallback: None,
                info: Some(bad.info),
            };
        }
        Verdict::Quick => {
            return Done::Forward {
                fallback: None,
                info: None,
            };
        }
        Verdict::Compute(canon) => canon,
    };
    let state = match state {
        Ok(s) => s,
        Err(why) => return forward(why),
    };
    if call.batch.count <= 0 {
        return Done::Forward {
            fallback: None,
            info: None,
        };
    }
    if matches!(request, RouteRequest::Forced(r) if r != Route::GpuOzaki) {
        return Done::Forward {
            fallback: None,
            info: None,
        };
    }
    match capture::of(state.stream) {
        capture::Capture::No => {}
        capture::Capture::Yes => {
            return forward("stream capturing into a graph: cuBLAS records the call");
        }
        capture::Capture::Unknown => return forward("capture state of the stream unknown: cuBLAS"),
    }
    if device_scalars || alpha.is_nan() {
        return forward("alpha and beta in device memory (pointer mode device): cuBLAS");
    }
    if state.math_forbids {
        return forward("the handle's math mode asks for cuBLAS's own fp64");
    }
    let first = device_call(canon);
    if !emulation_chosen(&canon, &first) {
        return Done::Forward {
            fallback: None,
            info: None,
        };
    }
    emulate(&first, call.batch, state.stream, call.copy_c, traced)
}

/// Runs every member of the call through the emulation on the caller's stream, in the
/// caller's context (which is current again afterwards), after copying C into D (`copy_c`).
/// The call returns with its last members' work still running on the stream, as a cuBLAS
/// call does, unless it is `traced` (its record's phase times are read once the stream has
/// passed them) or compared (`OZAKI_AB` waits for both results).
fn emulate(
    first: &DeviceCall,
    batch: Batch,
    stream: *mut c_void,
    copy_c: Option<(u64, (i64, i64))>,
    traced: bool,
) -> Done {
    let caller = match current_context() {
        Ok(c) => c,
        Err(e) => return forward(gpu_failure(e)),
    };
    let _relaxed = capture::Relaxed::enter();
    let done = gpu_kernels::probe::contain("cuBLAS hook", || {
        let stream = stream as gpu_kernels::device::Stream;
        // The stream is ordered after any call left running, whose buffers this one reuses.
        let Some(mut g) = gpu_on(caller, stream)? else {
            return Ok(forward(
                "the operands belong to another device's context: cuBLAS",
            ));
        };
        if let Some(c) = copy_c {
            // SAFETY: cuBLASLt's contract: C and D are device matrices of the caller's
            // context covering their layouts, on `stream`; `lt::product` checked they do not
            // overlap. D is the call's output only, so a later decline loses nothing.
            unsafe { lt::copy_c_to_d(first, batch, c, stream.cast()) }?;
        }
        let mut ran = Members::default();
        let mut compare = Compare::chosen();
        for i in 0..batch.count {
            let member = batch.member(first, i);
            // SAFETY: cuBLAS's contract: the member's matrices are device memory of the
            // caller's context (checked to be this GPU's) valid until the stream has passed
            // the call, on `stream`.
            let one = unsafe {
                match compare.as_mut() {
                    Some(c) => c.member(&mut g, stream, &member).map(Member::from),
                    None => enqueue_emulation(&mut g, stream, &member).map(Member::from),
                }
            };
            match one {
                Ok(Member::Declined(why)) if i == 0 => {
                    // Nothing of this call written yet: all of it to cuBLAS.
                    return Ok(forward(format!("gpu-ozaki: {why}")));
                }
                Err(e) if i == 0 => return Err(e),
                Ok(Member::Declined(_)) => {
                    ran.declined += 1;
                    // SAFETY: as above.
                    unsafe { gpu_kernels::native::device_call(&g, stream, &member) }?;
                }
                Ok(one) => ran.add(one),
                Err(e) => {
                    return Ok(Done::Gpu {
                        outcome: RouteOutcome::default(),
                        fallback: Some(format!(
                            "member {i} failed after earlier members were written: {e}"
                        )),
                        status: EXECUTION_FAILED,
                        ab: None,
                    });
                }
            }
        }
        let (moduli, scaling, declined) = (ran.moduli, ran.scaling, ran.declined);
        let phases = if traced || compare.is_some() {
            gpu_kernels::device::sync(stream)?;
            ran.timed()?
        } else {
            g.leave_in_flight(stream)?;
            // untraced and uncompared: no record reads them
            Phases::default()
        };
        Ok(Done::Gpu {
            outcome: RouteOutcome {
                moduli: Some(moduli),
                scaling,
                device: Some(g.ordinal),
                devices: None,
                phases: Some(phases),
            },
            fallback: (declined > 0)
                .then(|| format!("{declined} members declined by gpu-ozaki ran on cuBLAS fp64")),
            status: SUCCESS,
            ab: compare.map(Compare::finish),
        })
    });
    let _ = restore_context(caller);
    done.unwrap_or_else(|e| forward(gpu_failure(e)))
}

/// One member of a hooked call through the emulation.
enum Member {
    /// Computed and waited for (compared under `OZAKI_AB`), with its phase times.
    Done(Outcome),
    /// Enqueued, still running on the stream.
    Running(Pending),
    /// Declined by the emulation: why.
    Declined(String),
}

impl From<Emulation> for Member {
    fn from(e: Emulation) -> Member {
        match e {
            Emulation::Done(o) => Member::Done(o),
            Emulation::Declined(why) => Member::Declined(why),
        }
    }
}

impl From<Queued> for Member {
    fn from(q: Queued) -> Member {
        match q {
            Queued::Running(p) => Member::Running(p),
            Queued::Declined(why) => Member::Declined(why),
        }
    }
}

/// The emulated members of one call: what its record says of them.
#[derive(Default)]
struct Members {
    done: Vec<Outcome>,
    running: Vec<Pending>,
    moduli: u32,
    scaling: Option<&'static str>,
    declined: u64,
}

impl Members {
    /// Adds an emulated member (`Member::Declined` is counted by the caller).
    fn add(&mut self, one: Member) {
        let (moduli, scaling) = match one {
            Member::Done(o) => {
                let ms = (o.moduli, o.scaling);
                self.done.push(o);
                ms
            }
            Member::Running(p) => {
                let ms = (p.planned().moduli, p.planned().scaling);
                self.running.push(p);
                ms
            }
            Member::Declined(_) => return,
        };
        self.moduli = self.moduli.max(moduli);
        if let Some(s) = scaling {
            self.scaling = Some(s.name());
        }
    }

    /// The members' phase times summed, once the stream has passed them.
    fn timed(self) -> Result<Phases, GpuError> {
        let mut total = Phases::default();
        for o in &self.done {
            add(&mut total, &o.phases);
        }
        for p in self.running {
            add(&mut total, &p.finish()?.phases);
        }
        Ok(total)
    }
}

/// A GPU failure as the trace's fallback, said once on stderr.
fn gpu_failure(e: GpuError) -> String {
    static SAID: std::sync::Once = std::sync::Once::new();
    let why = format!("gpu-ozaki: unavailable: {e}");
    SAID.call_once(|| {
        config::notice(&format!(
            "cuBLAS hook: {e}; fp64 cuBLAS calls run on cuBLAS"
        ))
    });
    why
}

fn add(total: &mut Phases, p: &Phases) {
    total.transfer_ns += p.transfer_ns;
    total.convert_ns += p.convert_ns;
    total.products_ns += p.products_ns;
    total.reconstruct_ns += p.reconstruct_ns;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A call whose forward counts itself and whose decoding must not happen.
    #[inline(never)]
    fn call_once(forwarded: &Cell<u32>, decoded: &Cell<bool>) -> Status {
        let state = || Err::<handle::HandleState, _>("no handle".to_string());
        let decode = |_: f64, _: f64| -> Decoded {
            decoded.set(true);
            panic!("decoded");
        };
        let forward = || {
            forwarded.set(forwarded.get() + 1);
            7
        };
        dispatch(&Call {
            name: "cublasDgemm_v2",
            state: &state,
            scalars: (core::ptr::null(), core::ptr::null()),
            batch: Batch::ONE,
            decode: &decode,
            forward: &forward,
            refused: None,
            copy_c: None,
        })
    }

    #[test]
    fn a_call_made_inside_a_host_entry_point_goes_straight_to_cublas() {
        let (forwarded, decoded) = (Cell::new(0), Cell::new(false));
        let frame = crate::guard::Frame::new();
        crate::guard::enter(&frame);
        let status = call_once(&forwarded, &decoded);
        crate::guard::leave();
        assert_eq!(status, 7, "cuBLAS's own status");
        assert_eq!(forwarded.get(), 1, "forwarded once");
        assert!(!decoded.get(), "neither decoded nor routed");
    }
}
