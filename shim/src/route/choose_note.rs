//! What `auto` decided for one call, kept as numbers: the trace record's `engine` field is
//! put into words from it ([`EngineNote::prediction`]) when the record is written, on the
//! trace's flush thread, so a call pays for no formatting and no allocation of its own.

use super::adjust::Note;
use super::memo::Priced;
use ozaki_core::engine::CallShape;
use ozaki_core::engine::choose::Decision;
use ozaki_core::trace::{Prediction, StartNote};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// Marks a decision priced by the pre-engine.
const PRICED_BEFORE: &str = " (priced before the GPU was initialised)";

/// Where a record's decision comes from.
#[derive(Debug, Clone)]
pub enum Pricing {
    /// The decision the call was routed by (its predictions and reason).
    Decided(Arc<Decision>),
    /// A call the gate sent to the vendor without a decision (`super::gate`): the record is
    /// priced when it is written, as the decision cache prices such a call.
    Gated(Gated),
}

/// A gated call, as its record's writer prices it.
#[derive(Debug, Clone, Copy)]
pub struct Gated {
    /// The call.
    pub shape: CallShape,
    /// Priced by the pre-engine (before the GPU was initialised).
    pub pre: bool,
    /// The vendor's correction factor for the call at `concurrent` calls in flight, now.
    pub factor: fn(&CallShape, u32) -> f64,
    /// Prices the call (by the pre-engine when `pre`) at `concurrent` calls in flight with the
    /// vendor's correction factor `fv` ([`Gated::factor`]): the decision and the size class's
    /// bound it was priced at.
    pub price: fn(&CallShape, bool, u32, f64) -> Priced,
}

/// One call's engine record: the decision it was priced from and what changed it.
#[derive(Debug, Clone)]
pub struct EngineNote {
    /// The decision, or how to price the call.
    pub pricing: Pricing,
    /// The size class's bound the decision was priced at, if any.
    pub bound: Option<CallShape>,
    /// Why the pre-engine sent the call to the vendor (`None`: the engine decided).
    pub early: Option<Early>,
    /// Why the route differs from the decision's (corrections, queue, exploration).
    pub note: Option<Note>,
    /// Seconds the call waited for the GPU start before the engine decided it.
    pub waited_s: Option<f64>,
    /// The trace's `engine.gpu_start`.
    pub gpu_start: Option<StartNote>,
    /// Calls in flight when the call was decided.
    pub concurrent: u32,
    /// The OpenMP team it was made from (1: none, or not asked).
    pub team: u32,
    /// Factor applied to the run route's prediction.
    pub correction: Option<f64>,
    /// Predicted wait behind the GPU's queue.
    pub queue_s: Option<f64>,
    /// What the vendor's wake added to the GPU route's price.
    pub wake_s: Option<f64>,
    /// The call ran the runner-up.
    pub explore: bool,
}

/// Why a call decided before the engine was built went to the vendor BLAS.
#[derive(Debug, Clone, PartialEq)]
pub enum Early {
    /// The pre-engine priced the vendor clearly faster (`fv`: the vendor's measured
    /// correction factor).
    Clearly {
        /// The vendor's correction factor.
        fv: f64,
    },
    /// The gains priced so far do not cover the GPU's start (`fv`: the vendor's measured
    /// correction factor).
    NotStarted {
        /// Gain priced so far, seconds.
        gained: f64,
        /// What a start costs, seconds.
        cost: f64,
        /// The vendor's correction factor.
        fv: f64,
    },
    /// The GPU could not be started.
    Failed,
    /// The GPU is starting and the call is not worth waiting for.
    Starting {
        /// Seconds since the start began.
        elapsed_s: f64,
        /// Seconds the start is expected to take still.
        remaining_s: f64,
        /// The best GPU entry of the decision's `predicted_s` (its position) and its price.
        best: Option<(usize, f64)>,
        /// The vendor's price beside the start.
        vendor_s: Option<f64>,
        /// The vendor's correction factor.
        fv: f64,
    },
    /// The call waited for the start, then gave up.
    GaveUp {
        /// Seconds waited.
        waited_s: f64,
        /// Seconds the start had run when the call came.
        elapsed_s: f64,
    },
    /// The start failed while the call waited for it.
    FailedWaiting {
        /// Seconds waited.
        waited_s: f64,
    },
}

/// " (priced at its size class's bound MxNxK)" (`CLASS_BOUND_NOTE`), or nothing.
fn push_bound(out: &mut String, bound: Option<CallShape>) {
    if let Some(b) = bound {
        let _ = write!(
            out,
            " ({} {}x{}x{})",
            ozaki_core::trace::CLASS_BOUND_NOTE,
            b.m,
            b.n,
            b.k
        );
    }
}

/// " (vendor corrected ×F by this process's calls)" when the factor is not 1.
fn push_corrected(out: &mut String, fv: f64) {
    if fv != 1.0 {
        let _ = write!(out, " (vendor corrected ×{fv:.2} by this process's calls)");
    }
}

impl EngineNote {
    /// The note of a gated call with `concurrent` calls in flight, made from an OpenMP team
    /// of `team` threads.
    pub fn gated(gated: Gated, concurrent: u32, team: u32) -> EngineNote {
        EngineNote {
            team,
            pricing: Pricing::Gated(gated),
            bound: None,
            early: None,
            note: None,
            waited_s: None,
            gpu_start: None,
            concurrent,
            correction: None,
            queue_s: None,
            wake_s: None,
            explore: false,
        }
    }

    /// The trace's `engine` field for this call.
    pub fn prediction(&self) -> Prediction {
        match self.pricing {
            Pricing::Decided(ref d) => self.predicted(d),
            Pricing::Gated(g) => {
                // What the decision cache would have recorded: the pre-engine's "clearly the
                // vendor's" with the vendor's correction, or the engine's plain decision.
                let fv = (g.factor)(&g.shape, self.concurrent);
                let (d, bound) = (g.price)(&g.shape, g.pre, self.concurrent, fv);
                let note = EngineNote {
                    bound,
                    early: g.pre.then_some(Early::Clearly { fv }),
                    correction: (g.pre && fv != 1.0).then_some(fv),
                    ..self.clone()
                };
                note.predicted(&d)
            }
        }
    }

    /// Appends the trace's `engine` field value (JSON) for this call to `out`. A gated call's
    /// is formatted once per kind of call (its shape, engine, calls in flight and the vendor's
    /// correction) on the writing thread and copied after: the same tiny calls come by the
    /// million.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let Pricing::Gated(g) = self.pricing else {
            let _ = serde_json::to_writer(&mut *out, &self.prediction());
            return;
        };
        let fv = (g.factor)(&g.shape, self.concurrent);
        let key = GatedKey {
            shape: g.shape,
            pre: g.pre,
            concurrent: self.concurrent,
            team: self.team,
            fv: fv.to_bits(),
        };
        let written = GATED_JSON.try_with(|cache| {
            let mut cache = cache.borrow_mut();
            if cache.len() >= GATED_JSON_ENTRIES {
                cache.clear();
            }
            let json = cache
                .entry(key)
                .or_insert_with(|| serde_json::to_vec(&self.prediction()).unwrap_or_default());
            out.extend_from_slice(json);
        });
        if written.is_err() {
            let _ = serde_json::to_writer(&mut *out, &self.prediction());
        }
    }

    /// [`EngineNote::prediction`] from the decision `d`.
    fn predicted(&self, d: &Decision) -> Prediction {
        let mut p = d.prediction.clone();
        p.reason = self.reason(d);
        p.gpu_start = self.gpu_start.clone();
        p.concurrent = Some(self.concurrent);
        p.team = (self.team > 1).then_some(self.team);
        p.correction = self.correction;
        p.queue_s = self.queue_s;
        p.wake_s = self.wake_s;
        p.explore = self.explore;
        p
    }

    /// The record's `engine.reason`, from its decision `d`.
    fn reason(&self, d: &Decision) -> String {
        let base = &d.prediction.reason;
        let mut out = String::with_capacity(base.len() + 96);
        match self.early {
            None => {
                if let Some(note) = &self.note {
                    let _ = write!(out, "{note}; engine: ");
                }
                out.push_str(base);
                push_bound(&mut out, self.bound);
                if let Some(s) = self.waited_s {
                    let _ = write!(out, " (waited {s:.2} s for the GPU start)");
                }
            }
            Some(Early::Clearly { fv }) => {
                out.push_str(base);
                push_bound(&mut out, self.bound);
                push_corrected(&mut out, fv);
            }
            Some(Early::NotStarted { gained, cost, fv }) => {
                let _ = write!(
                    out,
                    "vendor: the GPU is not started: the calls so far priced {gained:.4} s of \
                     gain on it, short of the {cost:.4} s a start costs"
                );
                push_corrected(&mut out, fv);
            }
            Some(Early::Failed) => out.push_str("vendor: the GPU could not be started"),
            Some(Early::Starting {
                elapsed_s,
                remaining_s,
                best,
                vendor_s,
                fv,
            }) => {
                let name = best
                    .and_then(|(i, _)| d_key(d, i))
                    .unwrap_or("no GPU route");
                let _ = write!(
                    out,
                    "vendor: the GPU is starting in the background ({elapsed_s:.2} s in, about \
                     {remaining_s:.2} s left); {name} priced {:.4} s against the vendor's {:.4} s \
                     beside the start, not worth waiting for",
                    best.map_or(f64::NAN, |b| b.1),
                    vendor_s.unwrap_or(f64::NAN),
                );
                push_corrected(&mut out, fv);
            }
            Some(Early::GaveUp {
                waited_s,
                elapsed_s,
            }) => {
                let _ = write!(
                    out,
                    "vendor: waited {waited_s:.2} s for the GPU start ({elapsed_s:.2} s in when \
                     the call came), then gave up"
                );
            }
            Some(Early::FailedWaiting { waited_s }) => {
                let _ = write!(
                    out,
                    "vendor: the GPU could not be started (waited {waited_s:.2} s for it)"
                );
            }
        }
        if self.early.is_some() {
            out.push_str(PRICED_BEFORE);
        }
        out
    }
}

/// What a gated call's `engine` field depends on ([`EngineNote::write_json`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct GatedKey {
    shape: CallShape,
    pre: bool,
    concurrent: u32,
    team: u32,
    /// The vendor's correction factor, as bits.
    fv: u64,
}

/// Kinds of gated call whose `engine` field a writing thread keeps; past that it starts over.
const GATED_JSON_ENTRIES: usize = 1024;

thread_local! {
    /// The `engine` fields of gated calls this thread wrote, by [`GatedKey`].
    static GATED_JSON: RefCell<HashMap<GatedKey, Vec<u8>>> = RefCell::new(HashMap::new());
}

/// The name of the decision's `i`-th priced route.
fn d_key(d: &Decision, i: usize) -> Option<&str> {
    d.prediction.predicted_s.keys().nth(i).map(String::as_str)
}
