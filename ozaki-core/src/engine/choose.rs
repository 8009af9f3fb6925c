//! The per-call choice (`OZAKI_ROUTE=auto`): the fastest route that meets the
//! accuracy contract, leaving the vendor route only when the predicted gain clears the
//! profile's switch margin (take-away 2), and a per-shape decision cache so that a repeated
//! shape costs one hash lookup (tiny calls must cost no more than the vendor call plus the
//! interposer overhead).
//!
//! Split over GPUs: an engine built [`Engine::with_slots`] for a process that owns
//! two or more device slots also prices each GPU route split over them
//! ([`super::split::price`]). A split replaces the one-device price of its route only when
//! it is faster by the same switch margin, so a split is taken only when the priced split
//! beats one device; [`Decision::split`] then holds the plan the GPU route executes.

use super::CallShape;
use super::load::concurrency_class;
use super::model::{self, RouteEstimate};
use super::profile::{ChoiceRules, Profile};
use super::split::{self, SplitEstimate};
use crate::devices::SplitParams;
use crate::route::Route;
use crate::trace::Prediction;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The outcome of one choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The route to run.
    pub route: Route,
    /// Moduli count for GPU Ozaki (the one priced).
    pub moduli: Option<u32>,
    /// What goes into the trace record's `engine` field.
    pub prediction: Prediction,
    /// Splits priced for this call, one per GPU route that could be split;
    /// empty for a process with one device slot.
    pub splits: Vec<SplitEstimate>,
    /// The concurrency class the vendor was priced at ([`super::load::concurrency_class`]).
    pub concurrent: u32,
    /// Predicted vendor seconds (infinite when not priced).
    pub vendor_s: f64,
    /// The best GPU route and its predicted seconds (split price when a split pays), when
    /// one was priced: the runner-up of a vendor decision, the route of a GPU one.
    pub gpu: Option<(Route, f64)>,
    /// Seconds of host copies (the staged uploads and downloads, the packing of a C with
    /// gaps) in that GPU route's one-device price; 0 for device-resident operands or when no
    /// GPU route was priced.
    /// What the vendor's wake stretches ([`super::wake`]).
    pub gpu_host_s: f64,
    /// Seconds of that GPU route's one-device price that a call made beside others spends
    /// on host copies while it does not hold the GPU (`host_pipeline::hands_off_c`): op(A)
    /// and op(B) copied into pinned memory before it queues, C written into the caller's
    /// memory after. Priced as those bytes at the staged link less the same bytes at the
    /// pinned one. 0 for a call that does not hand off at its size, device-resident
    /// operands, or no GPU route priced.
    pub gpu_unlocked_s: f64,
}

impl Decision {
    /// Seconds the GPU route holds the one GPU for this call, made with `concurrent` calls
    /// in flight: its price, less the host copies it makes outside the GPU's lock
    /// ([`Decision::gpu_unlocked_s`]).
    /// What callers queued behind it wait for.
    pub fn gpu_held_s(&self, gpu_s: f64, concurrent: u32) -> f64 {
        if concurrent > 1 {
            (gpu_s - self.gpu_unlocked_s).max(0.0)
        } else {
            gpu_s
        }
    }

    /// What a call sent to the GPU keeps on the GPU's queue, priced `gpu_s` and corrected
    /// by its class to `corrected_s`, made with `concurrent` calls in flight: the corrected
    /// price when it holds the GPU for all of its call; when its host copies run outside the
    /// GPU's lock, the price it holds the GPU for ([`Decision::gpu_held_s`]), uncorrected.
    /// Beside others, what such a class measures over its price is its copies running on the
    /// caller's share of the cores: PySCF's 1953 x 122 x 1953 products measured 9.6x their
    /// price beside 15 other callers while each held the GPU about its price, and queued
    /// at the corrected price the queue's predicted wait kept most of them off the GPU (H100
    /// host, BENCHMARKS.md "Real programs under the shim").
    pub fn gpu_queue_s(&self, gpu_s: f64, corrected_s: f64, concurrent: u32) -> f64 {
        if concurrent > 1 && self.gpu_unlocked_s > 0.0 {
            self.gpu_held_s(gpu_s, concurrent)
        } else {
            corrected_s
        }
    }

    /// The split to run for `route`, when the priced split beats one device by the switch
    /// margin (the GPU routes consult this for forced routes too).
    pub fn split(&self, route: Route) -> Option<&SplitEstimate> {
        self.splits.iter().find(|s| s.route == route && s.pays)
    }

    /// A decision for a call with nothing to price.
    fn vendor_only(prediction: Prediction) -> Decision {
        Decision {
            route: Route::Vendor,
            moduli: None,
            prediction,
            splits: Vec::new(),
            concurrent: 1,
            vendor_s: f64::INFINITY,
            gpu: None,
            gpu_host_s: 0.0,
            gpu_unlocked_s: 0.0,
        }
    }

    /// The route this decision's runner-up is (the GPU route for a vendor decision, the
    /// vendor for a GPU one), with both predictions: (chosen s, runner-up route, its s).
    pub fn runner_up(&self) -> Option<(f64, Route, f64)> {
        let (g, gs) = self.gpu?;
        if !self.vendor_s.is_finite() {
            return None;
        }
        Some(if self.route == Route::Vendor {
            (self.vendor_s, g, gs)
        } else {
            (gs, Route::Vendor, self.vendor_s)
        })
    }
}

/// Picks a route from priced estimates (see the module docs for the rule) and says why.
pub fn choose(estimates: &[RouteEstimate], rules: &ChoiceRules) -> (Route, String) {
    let get = |r: Route| estimates.iter().find(|e| e.route == r);
    let usable = |r: Route| get(r).filter(|e| e.excluded.is_none() && e.seconds.is_finite());
    let margin = rules.min_gain;
    let vendor = usable(Route::Vendor);
    let native = usable(Route::GpuNative);
    let ozaki = usable(Route::GpuOzaki);
    let excluded_note = || {
        let notes: Vec<String> = estimates
            .iter()
            .filter(|e| e.route != Route::Vendor)
            .filter_map(|e| {
                e.excluded
                    .as_ref()
                    .map(|x| format!("{} excluded: {x}", e.route))
            })
            .collect();
        if notes.is_empty() {
            String::new()
        } else {
            format!("; {}", notes.join("; "))
        }
    };
    // Best GPU route: GPU Ozaki must beat GPU native by the margin to be preferred.
    let gpu = match (native, ozaki) {
        (Some(n), Some(o)) if n.seconds / o.seconds >= margin => Some((
            o,
            format!(
                "gpu-ozaki {:.2}x faster than gpu-native (r = {})",
                n.seconds / o.seconds,
                o.moduli.unwrap_or(0)
            ),
        )),
        (Some(n), Some(o)) => Some((
            n,
            if o.seconds < n.seconds {
                format!(
                    "gpu-ozaki only {:.2}x faster than gpu-native, below the {margin:.2}x margin",
                    n.seconds / o.seconds
                )
            } else {
                format!(
                    "gpu-native {:.2}x faster than gpu-ozaki",
                    o.seconds / n.seconds
                )
            },
        )),
        (Some(n), None) => Some((n, String::new())),
        (None, Some(o)) => Some((o, String::new())),
        (None, None) => None,
    };
    match (vendor, gpu) {
        (None, None) => (
            Route::Vendor,
            format!("vendor: no route could be priced{}", excluded_note()),
        ),
        (None, Some((g, why))) => (
            g.route,
            format!("{}: vendor not priced; {why}{}", g.route, excluded_note()),
        ),
        (Some(_), None) => (
            Route::Vendor,
            format!("vendor: only route available{}", excluded_note()),
        ),
        (Some(v), Some((g, why))) => {
            let gain = v.seconds / g.seconds;
            let sep = if why.is_empty() {
                String::new()
            } else {
                format!("; {why}")
            };
            if gain >= margin {
                (
                    g.route,
                    format!(
                        "{}: {gain:.2}x faster than vendor{sep}{}",
                        g.route,
                        excluded_note()
                    ),
                )
            } else if gain > 1.0 {
                (
                    Route::Vendor,
                    format!(
                        "vendor: {} only {gain:.2}x faster, below the {margin:.2}x margin{sep}",
                        g.route
                    ),
                )
            } else {
                (
                    Route::Vendor,
                    format!(
                        "vendor: {:.2}x faster than {}{sep}{}",
                        1.0 / gain,
                        g.route,
                        excluded_note()
                    ),
                )
            }
        }
    }
}

/// The prediction part of a trace record from estimates and a reason.
pub fn prediction(estimates: &[RouteEstimate], reason: String) -> Prediction {
    Prediction {
        predicted_s: estimates
            .iter()
            .filter(|e| e.excluded.is_none() && e.seconds.is_finite())
            .map(|e| (e.route.name().to_string(), e.seconds))
            .collect(),
        reason,
        ..Prediction::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    shape: CallShape,
    moduli: Option<u32>,
    concurrent: u32,
}

/// FNV-1a over the key's bytes: the cache is looked up on every `auto` call, and SipHash's
/// DoS resistance buys nothing for shapes of the caller's own BLAS calls.
#[derive(Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
    fn write_u64(&mut self, x: u64) {
        let h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        self.0 = (h ^ x).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    }
}

type Cache = HashMap<Key, Arc<Decision>, std::hash::BuildHasherDefault<Fnv>>;

/// Entries kept before the cache is cleared (a program with more distinct shapes than this
/// re-prices some of them; correctness never depends on the cache).
const CACHE_CAPACITY: usize = 1 << 16;

/// A profile plus the decision cache; shared by all threads of the shim.
#[derive(Debug)]
pub struct Engine {
    profile: Profile,
    threads: u32,
    /// This process's device slots; splits are priced when there are two or more.
    slots: Vec<u32>,
    split_params: SplitParams,
    cache: Mutex<Cache>,
    /// Whether vendor calls made beside others run the vendor at their share of its threads
    /// (the shim's `OZAKI_VENDOR_THREADS=team` or `share`), so that each is priced at that
    /// share alone.
    vendor_threads_shared: bool,
}

impl Engine {
    /// An engine for `profile`, pricing the vendor BLAS at `threads` threads.
    pub fn new(profile: Profile, threads: u32) -> Engine {
        Engine {
            profile,
            threads: threads.max(1),
            slots: Vec::new(),
            split_params: SplitParams::default(),
            cache: Mutex::new(Cache::default()),
            vendor_threads_shared: false,
        }
    }

    /// The same engine for a process whose vendor calls made beside others run the vendor at
    /// their share of its threads (its thread count divided by the calls in flight, at least
    /// one): such a call is priced at the profile's rate for that many threads, alone, instead
    /// of at its share of a vendor pool that every caller splits its call over.
    pub fn with_vendor_threads_shared(mut self, on: bool) -> Engine {
        self.vendor_threads_shared = on;
        self
    }

    /// The vendor threads and calls in flight a call made while `concurrent` calls are in
    /// flight is priced at ([`Engine::with_vendor_threads_shared`]).
    fn vendor_load(&self, concurrent: u32) -> (u32, u32) {
        if self.vendor_threads_shared && concurrent > 1 {
            ((self.threads / concurrent).max(1), 1)
        } else {
            (self.threads, concurrent)
        }
    }

    /// The same engine for a process owning these device slots (CUDA ordinal per slot,
    /// `devices::DeviceAssignment::slots`): with two or more, host-resident dgemm calls
    /// are also priced split over them.
    pub fn with_slots(mut self, slots: Vec<u32>) -> Engine {
        self.slots = slots;
        self
    }

    /// The device slots priced for splits.
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// Each GPU route priced split over this process's slots (empty with fewer than two
    /// slots or for a call that is not split; uncached, for `ozaki explain`).
    pub fn splits(&self, shape: &CallShape, moduli: Option<u32>) -> Vec<SplitEstimate> {
        if self.slots.len() < 2 || !split::splittable(shape) {
            return Vec::new();
        }
        [Route::GpuNative, Route::GpuOzaki]
            .into_iter()
            .filter_map(|r| {
                split::price(
                    &self.profile,
                    shape,
                    r,
                    moduli,
                    &self.slots,
                    &self.split_params,
                )
            })
            .collect()
    }

    /// The profile in use.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// CPU BLAS threads priced.
    pub fn threads(&self) -> u32 {
        self.threads
    }

    /// Every route's estimate with its terms (uncached; for `ozaki explain`).
    pub fn estimates(&self, shape: &CallShape, moduli: Option<u32>) -> Vec<RouteEstimate> {
        self.estimates_loaded(shape, moduli, 1)
    }

    /// [`Engine::estimates`] with `concurrent` calls in flight ([`super::load`]).
    pub fn estimates_loaded(
        &self,
        shape: &CallShape,
        moduli: Option<u32>,
        concurrent: u32,
    ) -> Vec<RouteEstimate> {
        let (threads, concurrent) = self.vendor_load(concurrent);
        model::predict_all_loaded(&self.profile, shape, moduli, threads, concurrent)
    }

    /// [`Engine::estimates_loaded`] without the terms' texts: what a decision is made from.
    fn priced_loaded(
        &self,
        shape: &CallShape,
        moduli: Option<u32>,
        concurrent: u32,
    ) -> Vec<RouteEstimate> {
        let (threads, concurrent) = self.vendor_load(concurrent);
        model::price_all(&self.profile, shape, moduli, threads, concurrent, false)
    }

    /// The decision for a call made with `in_flight` calls in flight in the process (itself
    /// included), cached per shape, moduli key and [`concurrency_class`]; `moduli` computes
    /// the count on a miss (see [`Engine::decide_with`]).
    pub fn decide_loaded(
        &self,
        shape: &CallShape,
        key: Option<u32>,
        moduli: impl FnOnce() -> Option<u32>,
        in_flight: u32,
    ) -> Arc<Decision> {
        let c = concurrency_class(in_flight);
        self.cached(shape, key, c, || {
            let r = moduli();
            let est = if shape.no_product() {
                Vec::new()
            } else {
                self.priced_loaded(shape, r, c)
            };
            let mut d = self.decide_from_estimates(shape, r, &est);
            d.concurrent = c;
            d
        })
    }

    /// The decision for a call whose operands are on the GPU (the `ozaki_*_device` entry
    /// points): gpu-ozaki where it is priced faster than cuBLAS by the switch margin (and
    /// the accuracy rule gave a moduli count), gpu-native otherwise; the vendor BLAS is not
    /// a route for device memory. Cached like any other decision.
    pub fn decide_device(&self, shape: &CallShape, moduli: Option<u32>) -> Arc<Decision> {
        let shape = shape.with_residency(super::Residency::Device);
        self.cached(&shape, moduli, 1, || {
            let mut est = self.priced_loaded(&shape, moduli, 1);
            est.retain(|e| e.route != Route::Vendor);
            self.decide_from_estimates(&shape, moduli, &est)
        })
    }

    /// The decision for a call, from the cache when this shape and moduli count were seen.
    /// `moduli` is the count the numerics would use (`None`: the contract cannot be met, so
    /// GPU Ozaki is excluded).
    pub fn decide(&self, shape: &CallShape, moduli: Option<u32>) -> Arc<Decision> {
        self.decide_with(shape, moduli, || moduli)
    }

    /// [`Engine::decide`] where the moduli count is computed only when the decision is not
    /// cached yet: `key` identifies what the count depends on besides the shape (e.g. a
    /// forced `OZAKI_MODULI`), and `moduli` computes it on a miss.
    pub fn decide_with(
        &self,
        shape: &CallShape,
        key: Option<u32>,
        moduli: impl FnOnce() -> Option<u32>,
    ) -> Arc<Decision> {
        self.cached(shape, key, 1, || self.decide_uncached(shape, moduli()))
    }

    /// [`Engine::decide`] for a caller that has priced the call itself: `estimates` are
    /// [`Engine::estimates`]`(shape, moduli)`, and a cache miss decides from them instead of
    /// pricing every route a second time (`ozaki replay` needs the estimates for its rows).
    pub fn decide_priced(
        &self,
        shape: &CallShape,
        moduli: Option<u32>,
        estimates: &[RouteEstimate],
    ) -> Arc<Decision> {
        self.decide_priced_loaded(shape, moduli, estimates, 1)
    }

    /// [`Engine::decide_priced`] for estimates priced at concurrency class `concurrent`
    /// ([`Engine::estimates_loaded`]), cached at that class.
    pub fn decide_priced_loaded(
        &self,
        shape: &CallShape,
        moduli: Option<u32>,
        estimates: &[RouteEstimate],
        concurrent: u32,
    ) -> Arc<Decision> {
        self.cached(shape, moduli, concurrent, || {
            let mut d = self.decide_from_estimates(shape, moduli, estimates);
            d.concurrent = concurrent;
            d
        })
    }

    /// The cached decision for `(shape, key)`, made by `make` on a miss.
    fn cached(
        &self,
        shape: &CallShape,
        key: Option<u32>,
        concurrent: u32,
        make: impl FnOnce() -> Decision,
    ) -> Arc<Decision> {
        let key = Key {
            shape: *shape,
            moduli: key,
            concurrent,
        };
        if let Ok(c) = self.cache.lock()
            && let Some(d) = c.get(&key)
        {
            return Arc::clone(d);
        }
        let d = Arc::new(make());
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= CACHE_CAPACITY {
                c.clear();
            }
            c.insert(key, Arc::clone(&d));
        }
        d
    }

    /// [`Engine::decide`] without the cache.
    pub fn decide_uncached(&self, shape: &CallShape, moduli: Option<u32>) -> Decision {
        if shape.no_product() {
            // no estimates needed: decided before any route is priced
            return self.decide_from_estimates(shape, moduli, &[]);
        }
        self.decide_from_estimates(shape, moduli, &self.priced_loaded(shape, moduli, 1))
    }

    /// [`Engine::decide_uncached`] from estimates the caller already has
    /// ([`Engine::estimates`]`(shape, moduli)`; not read for a call without a product), so
    /// `ozaki explain`, which prints them, prices each route once.
    pub fn decide_from_estimates(
        &self,
        shape: &CallShape,
        moduli: Option<u32>,
        est: &[RouteEstimate],
    ) -> Decision {
        if shape.no_product() {
            return Decision::vendor_only(Prediction {
                reason: "vendor: no product to compute".into(),
                ..Prediction::default()
            });
        }
        if self.profile.gpu.is_none() {
            // Nothing to choose between: keep the trace's reason short.
            return Decision::vendor_only(prediction(est, "vendor: no GPU in the profile".into()));
        }
        let splits = self.splits(shape, moduli);
        // A split that pays stands in for its route's one-device price.
        let mut priced = est.to_vec();
        for s in splits.iter().filter(|s| s.pays) {
            if let Some(e) = priced.iter_mut().find(|e| e.route == s.route) {
                e.seconds = s.seconds;
            }
        }
        let (route, mut reason) = choose(&priced, &self.profile.choice);
        if let Some(s) = splits.iter().find(|s| s.route == route && s.pays) {
            reason.push_str(&format!(
                "; split over GPUs {:?}: {:.2}x faster than one GPU",
                s.devices(),
                s.single_s / s.seconds
            ));
        } else if let Some(s) = splits.iter().find(|s| s.route == route) {
            reason.push_str(&format!(
                "; not split: {} GPUs priced {:.2}x of one GPU{}",
                s.plan.tiles.len(),
                s.single_s / s.seconds,
                if s.link_shared {
                    " (shared host link)"
                } else {
                    ""
                }
            ));
        }
        let mut pred = prediction(est, reason);
        for s in &splits {
            pred.predicted_s
                .insert(split_key(s.route, &s.devices()), s.seconds);
        }
        let usable = |e: &&RouteEstimate| e.excluded.is_none() && e.seconds.is_finite();
        let vendor_s = priced
            .iter()
            .filter(usable)
            .find(|e| e.route == Route::Vendor)
            .map_or(f64::INFINITY, |e| e.seconds);
        let gpu = match priced.iter().filter(usable).find(|e| e.route == route) {
            Some(e) if route != Route::Vendor => Some((route, e.seconds)),
            _ => priced
                .iter()
                .filter(usable)
                .filter(|e| e.route != Route::Vendor)
                .min_by(|a, b| a.seconds.total_cmp(&b.seconds))
                .map(|e| (e.route, e.seconds)),
        };
        let gpu_host_s = gpu.map_or(0.0, |(g, _)| {
            est.iter()
                .find(|e| e.route == g)
                .map_or(0.0, RouteEstimate::host_copy_s)
        });
        let gpu_unlocked_s = match (&self.profile.gpu, gpu) {
            (Some(p), Some(_)) => unlocked_copies_s(shape, &p.link),
            _ => 0.0,
        };
        Decision {
            route,
            moduli: if route == Route::GpuOzaki {
                moduli
            } else {
                None
            },
            prediction: pred,
            splits,
            concurrent: 1,
            vendor_s,
            gpu,
            gpu_host_s,
            gpu_unlocked_s,
        }
    }
}

/// The host copies a host-resident gemm made beside others makes outside the GPU's lock
/// ([`Decision::gpu_unlocked_s`]): op(A) and op(B) into pinned memory (up to
/// `host_pipeline::HANDOFF_MAX_OPERAND_BYTES`), C out of it, each at the staged link less the
/// pinned one (a C read as input, beta != 0, still travels through
/// the ring inside the lock); 0 for a call that does not hand off at its size,
/// device-resident operands or a dsyrk.
fn unlocked_copies_s(shape: &CallShape, link: &super::profile::HostLink) -> f64 {
    let (m, n) = (shape.m as usize, shape.n as usize);
    // the size rule alone: whether others are in flight is the caller's to say
    if shape.routine != crate::trace::Routine::Dgemm
        || shape.residency != super::Residency::Host
        || !crate::host_pipeline::hands_off_c(m, n, 2)
        || [
            link.h2d_staged,
            link.h2d_pinned,
            link.d2h_staged,
            link.d2h_pinned,
        ]
        .iter()
        .any(|r| r.is_nan() || *r <= 0.0)
    {
        return 0.0;
    }
    let ab = 8.0 * shape.input_elems();
    let c = 8.0 * shape.output_elems();
    let k = shape.k as usize;
    let upload = if crate::host_pipeline::copies_operands_apart(m, n, k, 2) {
        ab / link.h2d_staged - ab / link.h2d_pinned
    } else {
        0.0
    };
    let download = c / link.d2h_staged - c / link.d2h_pinned;
    upload.max(0.0) + download.max(0.0)
}

/// The `predicted_s` key of a split in the trace's `engine` field: `gpu-ozaki split 0,1`.
pub fn split_key(route: Route, devices: &[u32]) -> String {
    let list: Vec<String> = devices.iter().map(u32::to_string).collect();
    format!("{route} split {}", list.join(","))
}

/// The CPU BLAS thread count the vendor library will use: `OPENBLAS_NUM_THREADS`,
/// `MKL_NUM_THREADS`, `BLIS_NUM_THREADS` or `OMP_NUM_THREADS` (first set, positive), else
/// `available` (the process's CPU count). `get` reads the environment.
pub fn blas_threads(get: impl Fn(&str) -> Option<String>, available: u32) -> u32 {
    [
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "BLIS_NUM_THREADS",
        "OMP_NUM_THREADS",
    ]
    .iter()
    .find_map(|v| {
        get(v)
            .and_then(|s| {
                s.split(',')
                    .next()
                    .and_then(|x| x.trim().parse::<u32>().ok())
            })
            .filter(|&t| t > 0)
    })
    .unwrap_or(available.max(1))
}
