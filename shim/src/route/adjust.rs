//! What `auto` does to the engine's cached decision for one call: the corrections measured
//! calls of its classes fed (`ozaki_core::engine::correct`), the classes the emulation
//! declined (`ozaki_core::engine::declines`), the wait behind the GPU's queue
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
//! Declines: a call that would run GPU Ozaki in a class whose last calls the accuracy rule
//! declined is priced with cuBLAS fp64 in its place (the decline memory says for how many
//! calls). A call that does run GPU Ozaki carries what to run if the rule declines it:
//! cuBLAS fp64 on the operands already staged when that is priced faster than the vendor,
//! else the vendor BLAS.
//!
//! Exploration: when the corrected predictions are within [`EXPLORE_WITHIN`], one call in
//! [`EXPLORE_EVERY`] runs the runner-up instead, so a route the profile prices wrongly gets
//! measured too. `OZAKI_EXPLORE=0` turns it off.
//!
//! The vendor's wake (`super::wake`): a GPU call decided while the vendor's threads still
//! spin is priced with its host copies stretched. Every compared call made alone (no other
//! call in flight) also notes its quiet prices in the process's side ledger
//! (`ozaki_core::engine::sides`); while those calls run clearly faster on the GPU, a vendor
//! run of such a call is charged with the wake it would leave in front of the next GPU call
//! ([`Beside::switch_s`]), so that one wake does not keep a GPU-bound program on the vendor
//! call after call. Calls made beside others are left out: inside an OpenMP team (PySCF) each
//! vendor call runs on its caller's thread and leaves no pool spinning, and the GPU's queue,
//! not the wake, is what prices their GPU calls.

use super::learned::Learned;
use ozaki_core::engine::CallShape;
use ozaki_core::engine::choose::Decision;
use ozaki_core::engine::correct::ClassKey;
pub use ozaki_core::engine::correct::{CORRECTABLE, correctable};
use ozaki_core::engine::load::keeps_gpu;
use ozaki_core::route::Route;

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
    /// What the vendor's wake added to the GPU route's price, when it did.
    pub wake_s: Option<f64>,
    /// The call runs the runner-up to measure it.
    pub explore: bool,
    /// The class the call's measured time feeds, with the prediction it is compared with.
    pub feedback: Option<(ClassKey, f64)>,
    /// Why the route differs from the cached decision's (formatted only when a trace
    /// record is written).
    pub note: Option<Note>,
    /// What runs when the accuracy rule declines a GPU Ozaki call: `GpuNative` or `Vendor`.
    pub on_decline: Route,
    /// The class whose decline memory a GPU Ozaki call's outcome feeds.
    pub decline_key: Option<ClassKey>,
}

/// What the host adds to a GPU call's price now, besides its own cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Beside {
    /// Predicted wait behind the GPU calls in flight, seconds.
    pub wait_s: f64,
    /// What the vendor's still-busy threads add to the GPU route's host copies, seconds
    /// (`super::wake`; 0 on a quiet host).
    pub wake_s: f64,
    /// What a vendor run of this call would add to the host copies of a GPU call of its
    /// shape made right after it (its wake; 0 for a call the vendor runs on the caller's
    /// thread, or without a measured wake). Charged to the vendor on the GPU side only.
    pub switch_s: f64,
}

/// The route for a call of `shape` whose cached decision is `d`, given what the process
/// learned, the switch margin, whether to explore, what the host adds to a GPU call beside
/// its price ([`Beside`]) and an exploration counter (called once per call eligible for
/// exploration).
pub fn adjust(
    learned: &Learned,
    d: &Decision,
    shape: &CallShape,
    margin: f64,
    explore: bool,
    beside: Beside,
    mut tick: impl FnMut() -> u32,
) -> Adjusted {
    let corr = &learned.corrections;
    let awake = beside.wake_s > 0.0;
    let key = |r: Route| {
        ClassKey::new(r, shape.routine, shape.m, shape.n, shape.k, d.concurrent)
            .in_wake(awake && r != Route::Vendor)
    };
    let native_s = d
        .prediction
        .predicted_s
        .get(Route::GpuNative.name())
        .copied()
        .filter(|s| s.is_finite());
    let first = pick(
        learned, d, d.route, d.gpu, &key, margin, explore, beside, true, &mut tick,
    );
    if first.route != Route::GpuOzaki {
        return first;
    }
    let kz = key(Route::GpuOzaki);
    if learned.declines.skips(&kz) {
        // Priced with cuBLAS fp64 in the emulation's place (module doc).
        let run = learned.declines.run(&kz);
        let vs = d.vendor_s;
        let mut out = match native_s {
            Some(ns) => {
                let cached = if !vs.is_finite() || vs >= margin * ns {
                    Route::GpuNative
                } else {
                    Route::Vendor
                };
                let gpu = Some((Route::GpuNative, ns));
                pick(
                    learned, d, cached, gpu, &key, margin, false, beside, false, &mut tick,
                )
            }
            None => Adjusted::plain(Route::Vendor),
        };
        out.note = Some(Note::Declined {
            route: out.route,
            run,
            then: out.note.take().map(Box::new),
        });
        return out;
    }
    let mut out = first;
    out.decline_key = Some(kz);
    let (vc, _) = corr.corrected(&key(Route::Vendor), d.vendor_s);
    out.on_decline = match native_s {
        Some(ns)
            if vc
                >= margin
                    * (corr
                        .corrected_gpu(&key(Route::GpuNative), ns + beside.wake_s)
                        .0
                        + beside.wait_s) =>
        {
            Route::GpuNative
        }
        _ => Route::Vendor,
    };
    out
}

/// Why a call's route differs from its cached decision's: the numbers, put into words
/// ([`std::fmt::Display`]) only when a trace record needs them.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// The GPU route was kept off the GPU by the predicted wait behind its queue, or by
    /// the vendor's wake.
    Queue {
        /// The GPU route priced.
        gpu: Route,
        /// Predicted wait, seconds.
        wait_s: f64,
        /// What the vendor's wake added to its host copies, seconds.
        wake_s: f64,
    },
    /// Corrections measured by this process's calls changed the route.
    Corrected {
        /// The route run.
        route: Route,
        /// The vendor's factor and its corrected seconds.
        fv: f64,
        /// Corrected vendor seconds.
        vc: f64,
        /// The GPU route compared.
        gpu: Route,
        /// The GPU route's factor.
        fg: f64,
        /// Corrected GPU seconds.
        gc: f64,
        /// Predicted wait behind the GPU's queue.
        wait_s: f64,
        /// What the vendor's wake added to the GPU route's host copies (inside `gc`).
        wake_s: f64,
    },
    /// The program's recent calls run clearly faster on the GPU, and a vendor run was
    /// charged with the wake it leaves, which changed the route.
    Side {
        /// The route run.
        route: Route,
        /// The recent vendor prices over the quiet GPU prices.
        ratio: f64,
        /// Corrected vendor seconds.
        vc: f64,
        /// The wake a vendor run leaves, seconds.
        switch_s: f64,
        /// The GPU route compared.
        gpu: Route,
        /// Its corrected seconds (the wake it finds included) plus the queue.
        gq: f64,
    },
    /// The call runs the runner-up to measure it.
    Explore {
        /// The route run.
        route: Route,
        /// Corrected vendor seconds.
        vc: f64,
        /// The GPU route compared.
        gpu: Route,
        /// Its corrected seconds plus the queue.
        gq: f64,
    },
    /// GPU Ozaki was declined by the accuracy rule on the class's last calls.
    Declined {
        /// The route run in its place.
        route: Route,
        /// Declines in a row.
        run: u32,
        /// What then changed the replacement's route.
        then: Option<Box<Note>>,
    },
}

/// The vendor's wake on a GPU price, in words.
struct Wake(f64);

impl std::fmt::Display for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "would stage its operands {:.4} s slower beside the vendor's still-busy threads",
            self.0
        )
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::Queue {
                gpu,
                wait_s,
                wake_s,
            } => {
                write!(f, "vendor: {gpu}")?;
                if *wait_s > 0.0 {
                    write!(f, " would wait {wait_s:.4} s behind the GPU's queue")?;
                }
                if *wake_s > 0.0 {
                    let and = if *wait_s > 0.0 { " and" } else { "" };
                    write!(f, "{and} {}", Wake(*wake_s))?;
                }
                Ok(())
            }
            Note::Corrected {
                route,
                fv,
                vc,
                gpu,
                fg,
                gc,
                wait_s,
                wake_s,
            } => {
                write!(
                    f,
                    "{route}: measured calls corrected vendor ×{fv:.2} to {vc:.4} s and {gpu} \
                     ×{fg:.2} to {gc:.4} s"
                )?;
                if *wake_s > 0.0 {
                    write!(f, " (it {})", Wake(*wake_s))?;
                }
                if *wait_s > 0.0 {
                    write!(f, " plus {wait_s:.4} s behind the GPU's queue")?;
                }
                Ok(())
            }
            Note::Side {
                route,
                ratio,
                vc,
                switch_s,
                gpu,
                gq,
            } => write!(
                f,
                "{route}: the recent calls run {ratio:.2}x faster on the GPU, so a vendor run \
                 is charged with the wake it leaves (vendor {vc:.4} s + {switch_s:.4} s, {gpu} \
                 {gq:.4} s)"
            ),
            Note::Explore { route, vc, gpu, gq } => write!(
                f,
                "{route}: exploring the runner-up (vendor {vc:.4} s, {gpu} {gq:.4} s corrected, \
                 within {EXPLORE_WITHIN}x)"
            ),
            Note::Declined { route, run, then } => {
                write!(
                    f,
                    "{route}: gpu-ozaki declined {run} call(s) of this class in a row; priced \
                     with gpu-native in its place"
                )?;
                match then {
                    Some(n) => write!(f, "; {n}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl Adjusted {
    /// `route` as it is, nothing corrected.
    pub fn plain(route: Route) -> Adjusted {
        Adjusted {
            route,
            correction: None,
            queue_s: None,
            wake_s: None,
            explore: false,
            feedback: None,
            note: None,
            on_decline: Route::Vendor,
            decline_key: None,
        }
    }
}

/// The corrected choice between the vendor and the GPU route `gpu` (its prediction) for a
/// decision whose cached route is `cached`; `note_sides`: the call's prices go into the side
/// ledger (once per call: not again when a declined emulation is priced as cuBLAS).
#[allow(clippy::too_many_arguments)]
fn pick(
    learned: &Learned,
    d: &Decision,
    cached: Route,
    gpu: Option<(Route, f64)>,
    key: &dyn Fn(Route) -> ClassKey,
    margin: f64,
    explore: bool,
    beside: Beside,
    note_sides: bool,
    tick: &mut dyn FnMut() -> u32,
) -> Adjusted {
    let corr = &learned.corrections;
    let mut out = Adjusted::plain(cached);
    let (Some((g, gs)), vs) = (gpu, d.vendor_s) else {
        return out;
    };
    if !vs.is_finite() || !gs.is_finite() {
        return out;
    }
    // The GPU route's own price on this host now: its host copies as the vendor's wake
    // leaves them (the queue's wait is added apart: it is measured apart).
    let Beside {
        wait_s,
        wake_s,
        switch_s,
    } = beside;
    let quiet_gs = gs;
    let gs = gs + wake_s;
    out.wake_s = (wake_s > 0.0).then_some(wake_s);
    if !correctable(vs, gs) {
        if cached != Route::Vendor && !keeps_gpu(vs, gs, wait_s, margin) {
            out.route = Route::Vendor;
            out.note = Some(Note::Queue {
                gpu: g,
                wait_s,
                wake_s,
            });
        } else if cached != Route::Vendor && wait_s > 0.0 {
            out.queue_s = Some(wait_s);
        }
        return out;
    }
    let (kv, kg) = (key(Route::Vendor), key(g));
    let (vc, fv) = corr.corrected(&kv, vs);
    let (gc, fg) = corr.corrected_gpu(&kg, gs);
    let gq = gc + wait_s;
    let sides = &learned.sides;
    let alone = d.concurrent <= 1;
    if alone && note_sides {
        // outside the wake the GPU's corrected price is already the quiet one
        let quiet_gc = if wake_s > 0.0 {
            corr.corrected(&kg.in_wake(false), quiet_gs).0
        } else {
            gc
        };
        sides.note(quiet_gc, vc);
    }
    let mut on_gpu = vc >= margin * gq;
    out.route = if on_gpu { g } else { Route::Vendor };
    if out.route != cached {
        out.note = Some(Note::Corrected {
            route: out.route,
            fv,
            vc,
            gpu: g,
            fg,
            gc,
            wait_s,
            wake_s,
        });
    }
    // On the GPU side both routes pay a wake: the one the GPU route finds now, or the one a
    // vendor run leaves in front of the next GPU call. The margin applies to the rest.
    if !on_gpu && alone && sides.switches_to_gpu(vc, switch_s, gq, wake_s, margin) {
        on_gpu = true;
        out.route = g;
        out.note = Some(Note::Side {
            route: g,
            ratio: sides.ratio(),
            vc,
            switch_s,
            gpu: g,
            gq,
        });
    }
    if explore && vc.max(gq) <= EXPLORE_WITHIN * vc.min(gq) && tick().is_multiple_of(EXPLORE_EVERY)
    {
        out.route = if on_gpu { Route::Vendor } else { g };
        out.explore = true;
        out.note = Some(Note::Explore {
            route: out.route,
            vc,
            gpu: g,
            gq,
        });
    }
    let ran_gpu = out.route != Route::Vendor;
    let f = if ran_gpu { fg } else { fv };
    out.correction = (f != 1.0).then_some(f);
    out.queue_s = (ran_gpu && wait_s > 0.0).then_some(wait_s);
    // A GPU call's measured time less its measured wait for the GPU is compared with the
    // route's own price: the queue is priced per call from what is in flight, and a class
    // whose calls waited behind a busy GPU must not learn the wait as its own cost.
    out.feedback = Some(if ran_gpu { (kg, gs) } else { (kv, vs) });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::engine::choose::Engine;
    use ozaki_core::engine::correct::MIN_SAMPLES;
    use ozaki_core::engine::declines::BASE_SKIP;
    use ozaki_core::engine::profile::Profile;

    fn engine() -> Engine {
        Engine::new(Profile::built_in("h200").unwrap(), 16)
    }

    const MARGIN: f64 = 1.2;

    /// LOBPCG's 64 x 64 x 110592 Gram product (op(A) = A^T), its decision on `e`, and what
    /// the vendor's wake, with host copies `slowdown` times slower, adds to its GPU route.
    fn gram_in_wake(e: &Engine, slowdown: f64) -> (CallShape, std::sync::Arc<Decision>, f64) {
        let s = CallShape {
            transa: true,
            ..CallShape::gemm(64, 64, 110592)
        };
        let d = e.decide(&s, Some(14));
        let wake = ozaki_core::engine::wake::VendorWake {
            window_s: 0.1,
            copy_slowdown: slowdown,
        };
        let w = wake.extra_s(d.gpu_host_s);
        (s, d, w)
    }

    fn wait(wait_s: f64) -> Beside {
        Beside {
            wait_s,
            ..Beside::default()
        }
    }

    #[test]
    fn a_far_decision_is_neither_corrected_nor_timed() {
        let e = engine();
        let l = Learned::default();
        let s = CallShape::gemm(8, 8, 8);
        let d = e.decide(&s, Some(14));
        let a = adjust(&l, &d, &s, MARGIN, true, Beside::default(), || 0);
        assert_eq!(
            (a.route, a.feedback, a.explore),
            (Route::Vendor, None, false)
        );
    }

    #[test]
    fn a_vendor_class_measured_slow_sends_its_calls_to_the_gpu() {
        let e = engine();
        let l = Learned::default();
        let s = CallShape::gemm(1953, 123, 1953);
        let d = e.decide(&s, Some(14));
        assert_eq!(d.route, Route::Vendor, "{}", d.prediction.reason);
        let a = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 0);
        assert_eq!(a.route, Route::Vendor);
        let (key, pred) = a.feedback.expect("close: timed");
        // The program's calls take 35x their prediction (16 callers at once).
        for _ in 0..MIN_SAMPLES {
            l.corrections.record(&key, 35.0 * pred, pred);
        }
        let a = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 0);
        assert_ne!(a.route, Route::Vendor, "{a:?}");
        assert!(a.note.unwrap().to_string().contains("corrected"));
        assert_eq!(a.correction, None, "the GPU class itself is uncorrected");
    }

    /// A vendor-decided shape of the shipped profile whose GPU price is within the
    /// exploration factor of the vendor's (searched for, so the test holds for any
    /// calibration of that profile).
    fn close_call(e: &Engine) -> (CallShape, std::sync::Arc<Decision>) {
        let near = |d: &Decision| {
            d.gpu
                .is_some_and(|(_, g)| g < EXPLORE_WITHIN * d.vendor_s && d.vendor_s < g * MARGIN)
        };
        (1..=256u64)
            .flat_map(|i| {
                [
                    CallShape::gemm(16 * i, 16 * i, 16 * i),
                    CallShape::gemm(1953, 8 * i, 1953),
                ]
            })
            .map(|s| (s, e.decide(&s, Some(14))))
            .find(|(_, d)| d.route == Route::Vendor && near(d))
            .expect("some shape priced close between the vendor and the GPU")
    }

    #[test]
    fn exploration_runs_the_runner_up_on_one_call_in_sixteen_and_only_when_on() {
        let e = engine();
        let l = Learned::default();
        let (s, d) = close_call(&e);
        let runs: Vec<Route> = (0..32)
            .map(|i| adjust(&l, &d, &s, MARGIN, true, Beside::default(), || i).route)
            .collect();
        assert_eq!(runs.iter().filter(|&&r| r != Route::Vendor).count(), 2);
        assert!((0..32).all(
            |i| adjust(&l, &d, &s, MARGIN, false, Beside::default(), || i).route == Route::Vendor
        ));
    }

    #[test]
    fn a_long_gpu_queue_keeps_a_big_call_off_the_gpu() {
        let e = engine();
        let l = Learned::default();
        let s = CallShape::gemm(8192, 8192, 8192);
        let d = e.decide(&s, Some(14));
        assert_ne!(d.route, Route::Vendor);
        let free = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        assert_eq!(free.route, d.route);
        let queued = adjust(&l, &d, &s, MARGIN, false, wait(0.1), || 1);
        assert_eq!(queued.route, d.route);
        assert_eq!(queued.queue_s, Some(0.1));
        let jammed = adjust(&l, &d, &s, MARGIN, false, wait(5.0), || 1);
        assert_eq!(jammed.route, Route::Vendor, "{jammed:?}");
    }

    /// LOBPCG's 64 x 64 x 110592 product, priced on the GPU at about half the vendor's on a
    /// quiet host, is mostly staging: decided right after a vendor call, with the vendor's
    /// threads stretching host copies 3x, it stays on the vendor and the record says why; a
    /// GPU call made there learns apart from the quiet host's class.
    #[test]
    fn the_vendors_wake_keeps_a_staging_bound_call_off_the_gpu() {
        let l = Learned::default();
        let (s, d, w) = gram_in_wake(&engine(), 3.0);
        assert_ne!(d.route, Route::Vendor, "{}", d.prediction.reason);
        let (_, g) = d.gpu.unwrap();
        assert!(d.gpu_host_s > 0.5 * g, "mostly staging: {d:?}");
        let beside = Beside {
            wake_s: w,
            ..Beside::default()
        };
        let quiet = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        assert_eq!((quiet.route, quiet.wake_s), (d.route, None));
        let awake = adjust(&l, &d, &s, MARGIN, false, beside, || 1);
        assert_eq!(awake.route, Route::Vendor, "{awake:?}");
        assert_eq!(awake.wake_s, Some(beside.wake_s));
        let note = awake.note.unwrap().to_string();
        assert!(note.contains("still-busy threads"), "{note}");
        // Explored there, the GPU call feeds the class of calls made beside the wake.
        let (kq, _) = quiet.feedback.unwrap();
        let explored = (0..16)
            .map(|i| adjust(&l, &d, &s, MARGIN, true, beside, || i))
            .find(|a| a.explore)
            .expect("close enough to explore");
        let (ka, pa) = explored.feedback.unwrap();
        assert!(
            ka.awake && !kq.awake && ka.in_wake(false) == kq,
            "{ka:?} {kq:?}"
        );
        assert!((pa - (g + beside.wake_s)).abs() < 1e-12);
    }

    /// A shape's first calls inside the vendor's wake are priced with what its route's other
    /// shapes measured there: after another shape's GPU calls in the wake ran 4x their
    /// price, a staging-bound call the wake's calibrated price leaves on the GPU goes to the
    /// vendor in the wake, and still to the GPU on a quiet host.
    #[test]
    fn the_wake_measured_on_one_shape_keeps_another_shapes_first_calls_off_the_gpu() {
        use ozaki_core::engine::correct::GROSS_STREAK;
        use ozaki_core::trace::Routine;
        let l = Learned::default();
        let (s, d, w) = gram_in_wake(&engine(), 1.5);
        let (g, _) = d.gpu.unwrap();
        assert_eq!(d.route, g, "{}", d.prediction.reason);
        let beside = Beside {
            wake_s: w,
            ..Beside::default()
        };
        let first = adjust(&l, &d, &s, MARGIN, false, beside, || 1);
        assert_eq!(
            first.route, g,
            "the wake's own price keeps it on the GPU: {first:?}"
        );
        let other = ClassKey::new(g, Routine::Dgemm, 110592, 64, 64, d.concurrent).in_wake(true);
        for _ in 0..GROSS_STREAK {
            l.corrections.record_call(&other, 0.040, 0.010);
        }
        let awake = adjust(&l, &d, &s, MARGIN, false, beside, || 1);
        assert_eq!(awake.route, Route::Vendor, "{awake:?}");
        assert!(awake.note.unwrap().to_string().contains("corrected"));
        let quiet = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        assert_eq!(quiet.route, g, "{quiet:?}");
    }

    /// On the GPU side a vendor run pays for the wake it leaves: the staging-bound call the
    /// wake keeps on the vendor goes to the GPU while the recent calls run clearly faster
    /// there, and stays on the vendor while they favour the vendor or its vendor run would
    /// leave no wake.
    #[test]
    fn on_the_gpu_side_a_vendor_run_is_charged_with_the_wake_it_leaves() {
        use ozaki_core::engine::sides::MIN_CALLS;
        let (s, d, w) = gram_in_wake(&engine(), 3.0);
        assert_ne!(d.route, Route::Vendor, "{}", d.prediction.reason);
        let beside = Beside {
            wait_s: 0.0,
            wake_s: w,
            switch_s: w,
        };
        let vendor_side = Learned::default();
        for _ in 0..MIN_CALLS {
            vendor_side.sides.note(0.02, 0.01);
        }
        let a = adjust(&vendor_side, &d, &s, MARGIN, false, beside, || 1);
        assert_eq!(a.route, Route::Vendor, "{a:?}");
        let gpu_side = Learned::default();
        for _ in 0..MIN_CALLS {
            gpu_side.sides.note(0.01, 0.02);
        }
        let a = adjust(&gpu_side, &d, &s, MARGIN, false, beside, || 1);
        assert_eq!(a.route, d.route, "{a:?}");
        let note = a.note.unwrap().to_string();
        assert!(note.contains("charged with the wake it leaves"), "{note}");
        let no_wake_left = Beside {
            switch_s: 0.0,
            ..beside
        };
        let a = adjust(&gpu_side, &d, &s, MARGIN, false, no_wake_left, || 1);
        assert_eq!(a.route, Route::Vendor, "{a:?}");
        let beside_others = Decision {
            concurrent: 4,
            ..(*d).clone()
        };
        let a = adjust(&gpu_side, &beside_others, &s, MARGIN, false, beside, || 1);
        assert_eq!(a.route, Route::Vendor, "a call beside others: {a:?}");
    }

    /// Every compared call notes its quiet prices, the wake left out: a GPU-bound call seen
    /// only inside the wake still counts toward the GPU side.
    #[test]
    fn compared_calls_note_their_quiet_prices() {
        use ozaki_core::engine::sides::MIN_CALLS;
        let e = engine();
        let s = CallShape::gemm(4096, 4096, 4096);
        let d = e.decide(&s, Some(14));
        let (_, g) = d.gpu.unwrap();
        assert!(d.vendor_s >= 2.0 * g, "GPU-bound: {d:?}");
        let l = Learned::default();
        let beside = Beside {
            wake_s: 2.0 * d.vendor_s,
            ..Beside::default()
        };
        for _ in 0..MIN_CALLS {
            let a = adjust(&l, &d, &s, MARGIN, false, beside, || 1);
            assert_eq!(a.route, Route::Vendor, "the wake keeps it off: {a:?}");
        }
        assert!(l.sides.gpu_side(), "ratio {}", l.sides.ratio());
        let far = CallShape::gemm(8, 8, 8);
        let l = Learned::default();
        for _ in 0..MIN_CALLS {
            adjust(
                &l,
                &e.decide(&far, Some(14)),
                &far,
                MARGIN,
                false,
                beside,
                || 1,
            );
        }
        assert!(l.sides.ratio().is_nan(), "far calls are not compared");
        let beside_others = Decision {
            concurrent: 4,
            ..(*d).clone()
        };
        let l = Learned::default();
        for _ in 0..MIN_CALLS {
            adjust(&l, &beside_others, &s, MARGIN, false, beside, || 1);
        }
        assert!(
            l.sides.ratio().is_nan(),
            "calls beside others are not noted"
        );
    }

    /// A decision for 540x441x441 priced as a 12-caller CCSD contraction was: GPU Ozaki
    /// 1.9 ms, cuBLAS fp64 2.1 ms, the vendor `vendor_ms`.
    fn ozaki_decision(vendor_ms: f64) -> (Decision, CallShape) {
        let s = CallShape::gemm(540, 441, 441);
        let mut prediction = ozaki_core::trace::Prediction::default();
        for (r, t) in [("gpu-ozaki", 1.9e-3), ("gpu-native", 2.1e-3)] {
            prediction.predicted_s.insert(r.into(), t);
        }
        prediction
            .predicted_s
            .insert("vendor".into(), vendor_ms * 1e-3);
        let d = Decision {
            route: Route::GpuOzaki,
            moduli: Some(14),
            prediction,
            splits: Vec::new(),
            concurrent: 8,
            vendor_s: vendor_ms * 1e-3,
            gpu: Some((Route::GpuOzaki, 1.9e-3)),
            gpu_host_s: 0.4e-3,
            gpu_unlocked_s: 0.0,
        };
        (d, s)
    }

    #[test]
    fn a_declined_class_is_priced_with_cublas_until_its_skips_run_out() {
        let l = Learned::default();
        let (d, s) = ozaki_decision(4.4);
        let a = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        assert_eq!(a.route, Route::GpuOzaki);
        let key = a
            .decline_key
            .expect("a GPU Ozaki call feeds the decline memory");
        l.declines.declined(&key);
        let runs: Vec<Adjusted> = (0..=BASE_SKIP)
            .map(|_| adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1))
            .collect();
        for a in &runs[..BASE_SKIP as usize] {
            assert_eq!(a.route, Route::GpuNative, "{a:?}");
            assert!(
                a.note.as_ref().unwrap().to_string().contains("declined"),
                "{a:?}"
            );
            assert_eq!(a.decline_key, None);
        }
        // The skips used up, the next call tries the emulation again.
        assert_eq!(runs[BASE_SKIP as usize].route, Route::GpuOzaki);
    }

    /// A call whose emulation is declined is priced twice (as the emulation, then as cuBLAS
    /// in its place) but is one call in the side ledger.
    #[test]
    fn a_declined_call_is_noted_once_in_the_side_ledger() {
        use ozaki_core::engine::sides::MIN_CALLS;
        let l = Learned::default();
        let (d, s) = ozaki_decision(4.4);
        let d = Decision { concurrent: 1, ..d };
        let a = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        l.declines.declined(&a.decline_key.unwrap());
        for _ in 1..MIN_CALLS - 1 {
            let a = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
            assert_eq!(a.route, Route::GpuNative, "declined: {a:?}");
        }
        assert!(
            !l.sides.gpu_side(),
            "{} calls counted as more",
            MIN_CALLS - 1
        );
        adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        assert!(l.sides.gpu_side(), "ratio {}", l.sides.ratio());
    }

    #[test]
    fn a_declined_class_goes_to_the_vendor_when_cublas_does_not_beat_it() {
        let l = Learned::default();
        // The vendor at 2.4 ms: GPU Ozaki wins by 1.26x, cuBLAS fp64 would not by the margin.
        let (d, s) = ozaki_decision(2.4);
        let a = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        assert_eq!((a.route, a.on_decline), (Route::GpuOzaki, Route::Vendor));
        l.declines.declined(&a.decline_key.unwrap());
        let a = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        assert_eq!(a.route, Route::Vendor, "{a:?}");
    }

    #[test]
    fn a_declined_call_runs_cublas_where_cublas_beats_the_vendor() {
        let l = Learned::default();
        let (d, s) = ozaki_decision(4.4);
        let a = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        assert_eq!(a.on_decline, Route::GpuNative);
        let (d, s) = ozaki_decision(2.4);
        let a = adjust(&l, &d, &s, MARGIN, false, Beside::default(), || 1);
        assert_eq!(a.on_decline, Route::Vendor);
    }
}
