//! What `auto` does to the engine's cached decision for one call: the corrections measured
//! calls of its classes fed (`ozaki_core::engine::correct`), the wait behind the GPU's queue
//! (`super::inflight`), and bounded exploration of the runner-up.
//!
//! The cached decision compares the vendor with the best GPU route. When the two are priced
//! within [`CORRECTABLE`] of each other, each one's prediction is multiplied by its class's
//! measured ratio (once the class holds enough samples) and the two are compared again with
//! the switch margin, so measurement decides; the call is then timed and feeds the class of
//! the route it ran. A call whose alternative is further off (an 8x8x8 product, priced
//! thousands of times slower on the GPU) is neither corrected nor timed: no correction the
//! table allows could change it, and untimed it costs nothing.
//!
//! Exploration: when the corrected predictions are within [`EXPLORE_WITHIN`], one call in
//! [`EXPLORE_EVERY`] runs the runner-up instead, so a route the profile prices wrongly gets
//! measured too. `OZAKI_EXPLORE=0` turns it off.

use ozaki_core::engine::CallShape;
use ozaki_core::engine::choose::Decision;
use ozaki_core::engine::correct::{ClassKey, Corrections};
use ozaki_core::engine::load::keeps_gpu;
use ozaki_core::route::Route;

/// Vendor and GPU priced within this factor: the decision is corrected and the call timed
/// (the largest factor a class correction applies, `correct`'s limit).
pub const CORRECTABLE: f64 = 64.0;

/// Corrected predictions within this factor: the runner-up is explored.
pub const EXPLORE_WITHIN: f64 = 1.3;

/// One call in this many of those within [`EXPLORE_WITHIN`] runs the runner-up.
pub const EXPLORE_EVERY: u32 = 16;

/// The route one call runs and what changed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Adjusted {
    /// The route to run.
    pub route: Route,
    /// Factor the run route's prediction got from its class (`None`: none applied).
    pub correction: Option<f64>,
    /// Predicted wait behind the GPU's queue, when the call runs on the GPU behind one.
    pub queue_s: Option<f64>,
    /// The call runs the runner-up to measure it.
    pub explore: bool,
    /// The class the call's measured time feeds, with the prediction it is compared with.
    pub feedback: Option<(ClassKey, f64)>,
    /// Why the route differs from the cached decision's.
    pub note: Option<String>,
}

/// The route for a call of `shape` whose cached decision is `d`, given the corrections,
/// the switch margin, whether to explore, the predicted GPU queue wait and an exploration
/// counter (called once per call eligible for exploration).
pub fn adjust(
    corr: &Corrections,
    d: &Decision,
    shape: &CallShape,
    margin: f64,
    explore: bool,
    wait_s: f64,
    tick: impl FnOnce() -> u32,
) -> Adjusted {
    let mut out = Adjusted {
        route: d.route,
        correction: None,
        queue_s: None,
        explore: false,
        feedback: None,
        note: None,
    };
    let (Some((g, gs)), vs) = (d.gpu, d.vendor_s) else {
        return out;
    };
    if !vs.is_finite() || !gs.is_finite() {
        return out;
    }
    if vs.max(gs) > CORRECTABLE * vs.min(gs) {
        if d.route != Route::Vendor && !keeps_gpu(vs, gs, wait_s, margin) {
            out.route = Route::Vendor;
            out.note = Some(format!(
                "vendor: {g} would wait {wait_s:.4} s behind the GPU's queue"
            ));
        } else if d.route != Route::Vendor && wait_s > 0.0 {
            out.queue_s = Some(wait_s);
        }
        return out;
    }
    let key = |r: Route| ClassKey::new(r, shape.routine, shape.m, shape.n, shape.k, d.concurrent);
    let (kv, kg) = (key(Route::Vendor), key(g));
    let (vc, fv) = corr.corrected(&kv, vs);
    let (gc, fg) = corr.corrected(&kg, gs);
    let gq = gc + wait_s;
    let gpu = vc >= margin * gq;
    out.route = if gpu { g } else { Route::Vendor };
    if out.route != d.route {
        out.note = Some(format!(
            "{}: measured calls corrected vendor ×{fv:.2} to {vc:.4} s and {g} ×{fg:.2} to \
             {gc:.4} s{}",
            out.route,
            if wait_s > 0.0 {
                format!(" plus {wait_s:.4} s behind the GPU's queue")
            } else {
                String::new()
            }
        ));
    }
    if explore && vc.max(gq) <= EXPLORE_WITHIN * vc.min(gq) && tick().is_multiple_of(EXPLORE_EVERY)
    {
        out.route = if gpu { Route::Vendor } else { g };
        out.explore = true;
        out.note = Some(format!(
            "{}: exploring the runner-up (vendor {vc:.4} s, {g} {gq:.4} s corrected, within {EXPLORE_WITHIN}x)",
            out.route
        ));
    }
    let on_gpu = out.route != Route::Vendor;
    let f = if on_gpu { fg } else { fv };
    out.correction = (f != 1.0).then_some(f);
    out.queue_s = (on_gpu && wait_s > 0.0).then_some(wait_s);
    out.feedback = Some(if on_gpu { (kg, gs + wait_s) } else { (kv, vs) });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::engine::choose::Engine;
    use ozaki_core::engine::correct::MIN_SAMPLES;
    use ozaki_core::engine::profile::Profile;

    fn engine() -> Engine {
        Engine::new(Profile::built_in("h200").unwrap(), 16)
    }

    const MARGIN: f64 = 1.2;

    #[test]
    fn a_far_decision_is_neither_corrected_nor_timed() {
        let e = engine();
        let s = CallShape::gemm(8, 8, 8);
        let d = e.decide(&s, Some(14));
        let a = adjust(e.corrections(), &d, &s, MARGIN, true, 0.0, || 0);
        assert_eq!(
            (a.route, a.feedback, a.explore),
            (Route::Vendor, None, false)
        );
    }

    #[test]
    fn a_vendor_class_measured_slow_sends_its_calls_to_the_gpu() {
        let e = engine();
        let s = CallShape::gemm(1953, 123, 1953);
        let d = e.decide(&s, Some(14));
        assert_eq!(d.route, Route::Vendor, "{}", d.prediction.reason);
        let a = adjust(e.corrections(), &d, &s, MARGIN, false, 0.0, || 0);
        assert_eq!(a.route, Route::Vendor);
        let (key, pred) = a.feedback.expect("close: timed");
        // The program's calls take 35x their prediction (16 callers at once).
        for _ in 0..MIN_SAMPLES {
            e.corrections().record(&key, 35.0 * pred, pred);
        }
        let a = adjust(e.corrections(), &d, &s, MARGIN, false, 0.0, || 0);
        assert_ne!(a.route, Route::Vendor, "{a:?}");
        assert!(a.note.unwrap().contains("corrected"));
        assert_eq!(a.correction, None, "the GPU class itself is uncorrected");
    }

    #[test]
    fn exploration_runs_the_runner_up_on_one_call_in_sixteen_and_only_when_on() {
        let e = engine();
        let s = CallShape::gemm(1953, 123, 1953);
        let d = e.decide(&s, Some(14));
        let runs: Vec<Route> = (0..32)
            .map(|i| adjust(e.corrections(), &d, &s, MARGIN, true, 0.0, || i).route)
            .collect();
        assert_eq!(runs.iter().filter(|&&r| r != Route::Vendor).count(), 2);
        assert!((0..32).all(
            |i| adjust(e.corrections(), &d, &s, MARGIN, false, 0.0, || i).route == Route::Vendor
        ));
    }

    #[test]
    fn a_long_gpu_queue_keeps_a_big_call_off_the_gpu() {
        let e = engine();
        let s = CallShape::gemm(8192, 8192, 8192);
        let d = e.decide(&s, Some(14));
        assert_ne!(d.route, Route::Vendor);
        let free = adjust(e.corrections(), &d, &s, MARGIN, false, 0.0, || 1);
        assert_eq!(free.route, d.route);
        let queued = adjust(e.corrections(), &d, &s, MARGIN, false, 0.1, || 1);
        assert_eq!(queued.route, d.route);
        assert_eq!(queued.queue_s, Some(0.1));
        let jammed = adjust(e.corrections(), &d, &s, MARGIN, false, 5.0, || 1);
        assert_eq!(jammed.route, Route::Vendor, "{jammed:?}");
    }
}
