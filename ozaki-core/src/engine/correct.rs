//! Corrections from what calls really took: per (route, shape class, concurrency class), an
//! exponentially weighted mean of ln(measured / predicted) with its sample count.
//!
//! The profile prices a call from isolated measurements; a program's own calls can run
//! slower or faster (cache state, threads beside it, a profile from another machine). Every
//! timed call feeds its class here; once a class holds [`MIN_SAMPLES`], its predictions are
//! multiplied by the measured ratio, so measurement decides ([`Corrections::corrected`]).
//! A class whose last [`GROSS_STREAK`] samples were all off by more than [`GROSS_RATIO`] the
//! same way is corrected at once: timing noise does not do that three times in a row, a
//! profile that misprices a shape does (OpenBLAS's 128 x 128 x 110592 `dsyrk` in SciPy's
//! LOBPCG ran 10-13x its price, and each of those calls costs 50-65 ms, so waiting for eight
//! of them cost a third of a second). A class not corrected before that streak restarts
//! from the streak's fastest sample when the streak ran slow: a route's first calls of a
//! shape carry one-off costs (device memory, cuBLAS loading a kernel, page-locking) that only
//! add time, and a mean that kept them priced the rest of the class too slow. In a
//! ScaLAPACK `pdgemm` rank, the first three 8192 x 4096 x 32 products on the GPU took 177, 42
//! and 37 ms against a 17 ms price: their mean would have corrected the class x3.8 (65 ms,
//! behind the vendor's 45 ms, and too far behind to be explored again), their fastest x2.2.
//!
//! A GPU call decided inside the vendor's wake learns apart from the same class on a quiet
//! host ([`ClassKey::awake`]); every such call also feeds one class of every shape of its
//! route ([`ClassKey::wake_wide`]), which prices a shape's first calls in the wake until its
//! own class is corrected ([`Corrections::corrected_gpu`]). In SciPy's LOBPCG the Gram and
//! 110592 x 64 x 64 products ran 2-8x their wake-stretched price on the GPU, each shape
//! apart, so learning shape by shape took three slow calls of every shape.
//!
//! The table is lock-free: a fixed array of 64-bit slots, each packing the class tag, the
//! sample count, the length of the current gross streak, the mean log-ratio and the
//! streak's fastest log-ratio (16 bits each), updated by compare-and-swap. Two classes that
//! hash to one slot take turns (a new class resets the slot), which costs samples, never
//! correctness: an uncorrected prediction is what the engine had before.

use crate::route::Route;
use crate::trace::{CallRecord, Phases, Routine};
use std::sync::atomic::{AtomicU64, Ordering};

/// Samples a class needs before its correction is applied.
pub const MIN_SAMPLES: u32 = 8;

/// Consecutive samples off by more than [`GROSS_RATIO`], all the same way, after which a
/// class is corrected before it holds [`MIN_SAMPLES`].
pub const GROSS_STREAK: u32 = 3;

/// How far off (either way) a sample must be to count toward a gross streak.
pub const GROSS_RATIO: f64 = 2.0;

/// Largest sample count a slot keeps (12 bits; the mean weighs the last [`EW_SPAN`] anyway).
const MAX_SAMPLES: u32 = 0xfff;

/// Largest streak a slot keeps (3 bits, beside the bit of its side).
const MAX_STREAK: u32 = 0x7;

/// Weight of a new sample once a class has this many (a running mean before): old
/// behaviour fades over about this many calls. A program's classes drift as it moves
/// through its phases, so the span is short: replayed over the application suite's H100
/// traces (`scripts/replay-corrections`; BENCHMARKS.md, "Correction span replayed over the
/// suite's traces"), 8 predicted every program's calls at least as well as 32 (PySCF's at a
/// median error of 19-21% against 21-24%, LOBPCG's at 8-17% against 8-19%); 4 did a little
/// better still, but one outlier call moves its factor twice as far.
const EW_SPAN: u32 = 8;

/// The largest correction applied, either way (ln 64): a class measured further off than
/// that says the profile does not describe this machine, and the route still gets priced.
const LN_LIMIT: f64 = 4.158_883_083_359_672;

/// Vendor and GPU priced within this factor: the shim corrects the decision and times the
/// call (the largest factor a class correction applies, e^[`LN_LIMIT`]).
pub const CORRECTABLE: f64 = 64.0;

/// Whether a vendor price and a GPU price are within [`CORRECTABLE`] of each other: only then
/// can a class correction change the choice between them, so only then is a call timed.
pub fn correctable(vendor_s: f64, gpu_s: f64) -> bool {
    vendor_s.max(gpu_s) <= CORRECTABLE * vendor_s.min(gpu_s)
}

/// Slots in the table (a power of two).
const SLOTS: usize = 4096;

/// The log2 entries of [`ClassKey::wake_wide`]: no call's (a dimension's is at most 63).
const ANY_SIZE: u8 = u8::MAX;

/// The class of a call: route, routine, log2 of m, n, k, and the concurrency class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClassKey {
    /// The route that ran.
    pub route: Route,
    /// dgemm or dsyrk.
    pub routine: Routine,
    /// floor(log2) of m, n, k (0 for 0).
    pub log2: [u8; 3],
    /// [`super::load::concurrency_class`] of the calls in flight.
    pub concurrent: u32,
    /// A GPU call decided inside the vendor's wake ([`super::wake`]): its host copies were
    /// priced stretched, and it learns apart from the same class on a quiet host.
    pub awake: bool,
}

impl ClassKey {
    /// The class of a call of `routine` with these dimensions.
    pub fn new(route: Route, routine: Routine, m: u64, n: u64, k: u64, concurrent: u32) -> Self {
        let l = |x: u64| (63 - x.max(1).leading_zeros()) as u8;
        ClassKey {
            route,
            routine,
            log2: [l(m), l(n), l(k)],
            concurrent,
            awake: false,
        }
    }

    /// The same class, for a call decided inside the vendor's wake or not.
    pub fn in_wake(self, awake: bool) -> Self {
        ClassKey { awake, ..self }
    }

    /// Every shape's calls of this route, routine and concurrency class decided inside the
    /// vendor's wake, as one class: how far the wake-stretched prices of such calls were off,
    /// whatever their shape.
    pub fn wake_wide(self) -> Self {
        ClassKey {
            log2: [ANY_SIZE; 3],
            awake: true,
            ..self
        }
    }

    /// (slot index, 16-bit tag) of the class.
    pub(crate) fn place(&self) -> (usize, u64) {
        let r = Route::ALL
            .iter()
            .position(|&x| x == self.route)
            .unwrap_or(0) as u64;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for x in [
            r,
            self.routine as u64,
            self.log2[0] as u64,
            self.log2[1] as u64,
            self.log2[2] as u64,
            self.concurrent as u64,
            self.awake as u64,
        ] {
            h = (h ^ x).wrapping_mul(0x0100_0000_01b3);
        }
        h ^= h >> 29;
        ((h as usize) & (SLOTS - 1), (h >> 48) | 1)
    }
}

/// Where a class lives in a [`Corrections`] table (its slot and tag), for a caller that
/// looks one class up on every call and computes this once ([`ClassKey::placed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    slot: usize,
    tag: u64,
}

impl ClassKey {
    /// The class's place in a [`Corrections`] table.
    pub fn placed(&self) -> Place {
        let (slot, tag) = self.place();
        Place { slot, tag }
    }
}

/// One class's correction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassCorrection {
    /// Mean ln(measured / predicted).
    pub ln_ratio: f64,
    /// Samples behind it (saturates at 4095).
    pub samples: u32,
    /// How many of the latest samples in a row were off by more than [`GROSS_RATIO`], all
    /// on one side (saturates at 7).
    pub streak: u32,
    /// That side: the streak's samples were slower than predicted.
    pub streak_slow: bool,
    /// The least ln(measured / predicted) of the streak's samples (0 without a streak).
    pub streak_fastest: f64,
}

impl ClassCorrection {
    /// A class never measured.
    const EMPTY: ClassCorrection = ClassCorrection {
        ln_ratio: 0.0,
        samples: 0,
        streak: 0,
        streak_slow: false,
        streak_fastest: 0.0,
    };

    /// Whether the class is corrected: [`MIN_SAMPLES`] behind it, or a gross streak.
    pub fn applies(&self) -> bool {
        self.samples >= MIN_SAMPLES || self.streak >= GROSS_STREAK
    }

    /// The factor on predictions of this class: exp(ln_ratio) within the limit once it
    /// [`applies`](Self::applies), 1 before.
    pub fn factor(&self) -> f64 {
        if self.applies() {
            self.ln_ratio.clamp(-LN_LIMIT, LN_LIMIT).exp()
        } else {
            1.0
        }
    }

    /// The class after one more sample of ln(measured / predicted) `x`.
    fn with(self, x: f64) -> ClassCorrection {
        let n = (self.samples + 1).min(MAX_SAMPLES);
        let w = 1.0 / n.min(EW_SPAN) as f64;
        let ln_ratio = self.ln_ratio + w * (x - self.ln_ratio);
        let gross = x.abs() > GROSS_RATIO.ln();
        let slow = x > 0.0;
        let (streak, streak_fastest) = match (gross, slow == self.streak_slow) {
            (true, true) if self.streak > 0 => (
                (self.streak + 1).min(MAX_STREAK),
                self.streak_fastest.min(x),
            ),
            (true, _) => (1, x),
            (false, _) => (0, 0.0),
        };
        // A slow streak that makes an uncorrected class apply restarts it from the streak's
        // fastest sample (module docs).
        let restart = slow && streak == GROSS_STREAK && !self.applies();
        ClassCorrection {
            ln_ratio: if restart { streak_fastest } else { ln_ratio },
            samples: n,
            streak,
            streak_slow: gross && slow,
            streak_fastest,
        }
    }
}

/// Steps of a stored log-ratio per unit: 16 signed bits cover the samples' range
/// (±2 [`LN_LIMIT`], 8.3) in steps of 0.026%.
const LN_STEPS: f64 = 3900.0;

/// A log-ratio as the 16 bits a slot keeps of it.
fn to_fixed(x: f64) -> u64 {
    ((x * LN_STEPS)
        .round()
        .clamp(i16::MIN as f64, i16::MAX as f64) as i16) as u16 as u64
}

/// The log-ratio 16 bits of a slot hold.
fn from_fixed(bits: u64) -> f64 {
    (bits as u16 as i16) as f64 / LN_STEPS
}

fn pack(tag: u64, c: ClassCorrection) -> u64 {
    (tag << 48)
        | ((c.samples.min(MAX_SAMPLES) as u64) << 36)
        | ((c.streak_slow as u64) << 35)
        | ((c.streak.min(MAX_STREAK) as u64) << 32)
        | (to_fixed(c.ln_ratio) << 16)
        | to_fixed(c.streak_fastest)
}

fn unpack(x: u64) -> (u64, ClassCorrection) {
    (
        x >> 48,
        ClassCorrection {
            ln_ratio: from_fixed(x >> 16),
            samples: ((x >> 36) & MAX_SAMPLES as u64) as u32,
            streak: ((x >> 32) & MAX_STREAK as u64) as u32,
            streak_slow: (x >> 35) & 1 == 1,
            streak_fastest: from_fixed(x),
        },
    )
}

/// The table (see the module docs).
pub struct Corrections {
    slots: Box<[AtomicU64]>,
}

impl std::fmt::Debug for Corrections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corrections").finish_non_exhaustive()
    }
}

impl Default for Corrections {
    fn default() -> Self {
        Corrections {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Corrections {
    /// The class's correction so far (`None`: never measured, or its slot taken by another).
    pub fn get(&self, key: &ClassKey) -> Option<ClassCorrection> {
        self.get_at(key.placed())
    }

    /// [`Corrections::get`] of the class at `place`.
    pub fn get_at(&self, place: Place) -> Option<ClassCorrection> {
        let (t, c) = unpack(self.slots[place.slot].load(Ordering::Relaxed));
        (t == place.tag && c.samples > 0).then_some(c)
    }

    /// The factor on predictions of the class at `place` (1 before it applies).
    pub fn factor_at(&self, place: Place) -> f64 {
        self.get_at(place).map_or(1.0, |c| c.factor())
    }

    /// Feeds one call: it took `measured_s` where `predicted_s` was priced.
    pub fn record(&self, key: &ClassKey, measured_s: f64, predicted_s: f64) {
        if !(measured_s > 0.0 && predicted_s > 0.0 && predicted_s.is_finite()) {
            return;
        }
        let x = (measured_s / predicted_s)
            .ln()
            .clamp(-2.0 * LN_LIMIT, 2.0 * LN_LIMIT);
        let (i, tag) = key.place();
        let slot = &self.slots[i];
        let mut old = slot.load(Ordering::Relaxed);
        loop {
            let (t, c) = unpack(old);
            let c = if t == tag { c } else { ClassCorrection::EMPTY };
            let new = c.with(x);
            match slot.compare_exchange_weak(
                old,
                pack(tag, new),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(cur) => old = cur,
            }
        }
    }

    /// `predicted_s` of `key`'s class corrected by what the class measured (unchanged before
    /// the correction applies), with the factor applied.
    pub fn corrected(&self, key: &ClassKey, predicted_s: f64) -> (f64, f64) {
        let f = self.factor_at(key.placed());
        (predicted_s * f, f)
    }

    /// Feeds one timed call as [`Corrections::record`] does; a call decided inside the
    /// vendor's wake feeds its route's [`ClassKey::wake_wide`] class too.
    pub fn record_call(&self, key: &ClassKey, measured_s: f64, predicted_s: f64) {
        self.record(key, measured_s, predicted_s);
        if key.awake {
            self.record(&key.wake_wide(), measured_s, predicted_s);
        }
    }

    /// A GPU route's price `predicted_s` for `key`'s class, corrected: as
    /// [`Corrections::corrected`], except that a class decided inside the vendor's wake whose
    /// own correction does not apply yet takes the larger of its quiet class's factor and
    /// its route's [`ClassKey::wake_wide`] factor (a shape slow on a quiet host is no faster
    /// in the wake, and the wake slowed the route's other shapes by the wide factor).
    pub fn corrected_gpu(&self, key: &ClassKey, predicted_s: f64) -> (f64, f64) {
        if !key.awake {
            return self.corrected(key, predicted_s);
        }
        let f = match self.get(key) {
            Some(own) if own.applies() => own.factor(),
            _ => {
                let quiet = self.factor_at(key.in_wake(false).placed());
                quiet.max(self.factor_at(key.wake_wide().placed()))
            }
        };
        (predicted_s * f, f)
    }
}

/// What [`fold_into_profile`] folded per route: (route name, records used, shapes).
pub type Folded = Vec<(String, usize, usize)>;

/// Folds what traced calls measured into `profile`'s end-to-end corrections, so that the
/// next run starts from what this one learned (`ozaki calibrate --from-trace`): for every
/// record that ran the route the engine priced (no fallback), alone (`engine.concurrent`
/// absent or 1: a concurrent call's ratio describes its load, not the shape), with a
/// positive prediction for that route, ln(dur / predicted) is averaged per (route, m, n,
/// k), dur less what of it was not the route's own work (`Phases::not_own_work_ns`: the wait
/// for GPU work an earlier call left running and pinned memory grown for later calls, which
/// are not this shape's cost); the correction point at that shape becomes the profile's
/// current factor there times the measured mean ratio (replacing a point at the same shape).
pub fn fold_into_profile(profile: &mut super::profile::Profile, calls: &[CallRecord]) -> Folded {
    use std::collections::BTreeMap;
    let mut sums: BTreeMap<(String, u64, u64, u64), (f64, usize)> = BTreeMap::new();
    for c in calls {
        let Some(e) = &c.engine else { continue };
        let own_ns = c
            .dur_ns
            .saturating_sub(c.phases.as_ref().map_or(0, Phases::not_own_work_ns));
        if c.fallback.is_some() || e.concurrent.is_some_and(|n| n > 1) || own_ns == 0 {
            continue;
        }
        let Some(&p) = e.predicted_s.get(&c.route) else {
            continue;
        };
        if !(p > 0.0 && p.is_finite()) || c.route.parse::<Route>().is_err() {
            continue;
        }
        let s = sums
            .entry((c.route.clone(), c.m, c.n, c.k))
            .or_insert((0.0, 0));
        s.0 += (own_ns as f64 * 1e-9 / p).ln();
        s.1 += 1;
    }
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for ((route, m, n, k), (sum, count)) in sums {
        let corr = profile.corrections.entry(route.clone()).or_default();
        let ln = corr.factor(m, n, k).ln() + sum / count as f64;
        corr.points.retain(|p| (p.m, p.n, p.k) != (m, n, k));
        corr.points.push(super::work_model::CorrectionPoint {
            m,
            n,
            k,
            ln_ratio: ln.clamp(-LN_LIMIT, LN_LIMIT),
        });
        let o = out.entry(route).or_default();
        o.0 += count;
        o.1 += 1;
    }
    out.into_iter().map(|(r, (c, s))| (r, c, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only calls whose prices a correction could swap are compared and timed.
    #[test]
    fn correctable_is_the_largest_correction_either_way() {
        assert!((LN_LIMIT.exp() - CORRECTABLE).abs() < 1e-9);
        assert!(correctable(1.0, 64.0) && correctable(64.0, 1.0));
        assert!(!correctable(1.0, 64.1) && !correctable(64.1, 1.0));
    }

    fn key(m: u64) -> ClassKey {
        ClassKey::new(Route::Vendor, Routine::Dgemm, m, 123, m, 16)
    }

    #[test]
    fn a_class_converges_to_its_measured_ratio_only_after_enough_samples() {
        let t = Corrections::default();
        let k = key(1953);
        // 1.5x off: within what timing noise does, so it waits for MIN_SAMPLES
        for i in 0..MIN_SAMPLES - 1 {
            t.record(&k, 0.003, 0.002);
            assert_eq!(t.corrected(&k, 1.0).1, 1.0, "sample {i}");
        }
        t.record(&k, 0.003, 0.002);
        let (s, f) = t.corrected(&k, 0.002);
        assert!((s - 0.003).abs() < 0.003 * 2e-4, "{s} {f}");
        // Another shape class is untouched.
        assert_eq!(t.get(&key(64)), None);
    }

    /// A class measured far off its price, the same way, call after call is corrected after
    /// GROSS_STREAK calls; one slow first call (a GPU route's warm-up) followed by calls on
    /// their price is not, nor are gross samples that alternate sides.
    #[test]
    fn a_gross_streak_corrects_a_class_early_and_a_lone_outlier_does_not() {
        let t = Corrections::default();
        let k = key(110592);
        for i in 0..GROSS_STREAK - 1 {
            t.record(&k, 0.060, 0.005);
            assert_eq!(t.corrected(&k, 1.0).1, 1.0, "sample {i}");
        }
        t.record(&k, 0.050, 0.005);
        let (s, _) = t.corrected(&k, 0.005);
        assert!(s > 0.045 && s < 0.065, "{s}");
        // a normal sample ends the streak; the class waits for MIN_SAMPLES again
        t.record(&k, 0.005, 0.005);
        assert_eq!(t.get(&k).unwrap().streak, 0);
        assert_eq!(t.corrected(&k, 1.0).1, 1.0);

        let outlier = key(4096);
        t.record(&outlier, 0.148, 0.008);
        for _ in 0..3 {
            t.record(&outlier, 0.008, 0.008);
        }
        assert_eq!(t.corrected(&outlier, 1.0).1, 1.0);

        let alternating = key(8192);
        for i in 0..6 {
            let measured = if i % 2 == 0 { 0.04 } else { 0.001 };
            t.record(&alternating, measured, 0.01);
        }
        assert_eq!(t.get(&alternating).unwrap().streak, 1);
        assert_eq!(t.corrected(&alternating, 1.0).1, 1.0);
    }

    /// A ScaLAPACK rank's first 8192 x 4096 x 32 products on the GPU against their 17.3 ms
    /// price: the first carried one-off costs. The streak corrects the class to what the
    /// calls after it take, which keeps it ahead of the vendor's 45 ms; a mean of the three
    /// (x3.8, 65 ms) would have put it behind.
    #[test]
    fn a_slow_streak_corrects_an_uncorrected_class_to_its_fastest_sample() {
        let t = Corrections::default();
        let k = ClassKey::new(Route::GpuNative, Routine::Dgemm, 8192, 4096, 32, 1);
        for ms in [176.8, 42.3, 37.3] {
            t.record(&k, ms * 1e-3, 0.0173);
        }
        let (s, f) = t.corrected(&k, 0.0173);
        assert!((s - 0.0373).abs() < 0.0373 * 2e-4, "{s} {f}");
        assert!(s < 0.045, "behind the vendor: {s}");
        // later samples move it as a mean again
        for _ in 0..MIN_SAMPLES {
            t.record(&k, 0.030, 0.0173);
        }
        let (s, _) = t.corrected(&k, 0.0173);
        assert!(s > 0.030 && s < 0.0335, "{s}");

        // A class already corrected keeps its mean through a streak: a program that slows
        // down moves it over the span, not at one jump.
        let settled = ClassKey::new(Route::GpuNative, Routine::Dgemm, 4096, 4096, 4096, 1);
        for _ in 0..MIN_SAMPLES {
            t.record(&settled, 0.010, 0.010);
        }
        for _ in 0..GROSS_STREAK {
            t.record(&settled, 0.050, 0.010);
        }
        let f = t.get(&settled).unwrap().factor();
        assert!(f > 1.5 && f < 3.0, "{f}");

        // A fast streak keeps the mean of its samples.
        let fast = ClassKey::new(Route::GpuNative, Routine::Dgemm, 2048, 2048, 2048, 1);
        for ms in [4.0, 1.0, 2.0] {
            t.record(&fast, ms * 1e-3, 0.010);
        }
        let f = t.get(&fast).unwrap().factor();
        assert!((f - 0.2).abs() < 0.2 * 1e-3, "{f}");
    }

    /// The slot keeps both log-ratios at its resolution across their whole range.
    #[test]
    fn a_slot_round_trips_its_fields() {
        for x in [-2.0 * LN_LIMIT, -1.0, -1e-3, 0.0, 0.5, 2.0 * LN_LIMIT] {
            let c = ClassCorrection {
                ln_ratio: x,
                samples: 17,
                streak: 2,
                streak_slow: true,
                streak_fastest: -x / 2.0,
            };
            let (tag, back) = unpack(pack(0xbeef, c));
            assert_eq!(tag, 0xbeef);
            assert_eq!((back.samples, back.streak, back.streak_slow), (17, 2, true));
            assert!((back.ln_ratio - x).abs() <= 0.5 / LN_STEPS, "{x} {back:?}");
            assert!((back.streak_fastest + x / 2.0).abs() <= 0.5 / LN_STEPS);
        }
    }

    fn gpu_key(m: u64, n: u64, k: u64) -> ClassKey {
        ClassKey::new(Route::GpuNative, Routine::Dgemm, m, n, k, 1).in_wake(true)
    }

    /// The wide class is no real shape's and keeps the route, routine and concurrency.
    #[test]
    fn the_wake_wide_class_is_no_shapes_class() {
        let k = gpu_key(110592, 64, 64);
        let w = k.wake_wide();
        assert_eq!(
            (w.route, w.routine, w.concurrent, w.awake),
            (k.route, k.routine, 1, true)
        );
        assert_ne!(w.placed(), k.placed());
        assert_eq!(w, gpu_key(64, 64, 110592).wake_wide());
        assert_eq!(w, k.in_wake(false).wake_wide());
        assert_ne!(
            w,
            ClassKey::new(Route::Vendor, Routine::Dgemm, 1, 1, 1, 1).wake_wide()
        );
    }

    /// Calls of one shape slow in the wake price another shape's first calls in the wake,
    /// not its calls on a quiet host; a shape measured slow on a quiet host keeps that
    /// factor in the wake; a shape's own correction, once it applies, wins.
    #[test]
    fn the_wake_slows_a_new_shape_by_what_other_shapes_measured_in_it() {
        let t = Corrections::default();
        let (gram, tall) = (gpu_key(64, 64, 110592), gpu_key(110592, 64, 64));
        assert_eq!(
            t.corrected_gpu(&tall, 0.006),
            (0.006, 1.0),
            "nothing measured"
        );
        for _ in 0..GROSS_STREAK {
            t.record_call(&gram, 0.024, 0.006);
        }
        let (s, f) = t.corrected_gpu(&tall, 0.006);
        assert!(
            (f - 4.0).abs() < 1e-3 && (s - 0.024).abs() < 1e-5,
            "{s} {f}"
        );
        assert_eq!(
            t.corrected_gpu(&tall.in_wake(false), 0.006).1,
            1.0,
            "a quiet call is not priced as one in the wake"
        );
        // quiet calls of the shape ran 6x their price: more than the wake's 4x
        let quiet = tall.in_wake(false);
        for _ in 0..GROSS_STREAK {
            t.record_call(&quiet, 0.036, 0.006);
        }
        assert!((t.corrected_gpu(&tall, 0.006).1 - 6.0).abs() < 1e-3);
        // the shape's own calls in the wake, once corrected, decide
        for _ in 0..GROSS_STREAK {
            t.record_call(&tall, 0.003, 0.0012);
        }
        assert!((t.corrected_gpu(&tall, 0.0012).1 - 2.5).abs() < 1e-3);
        // a quiet sample feeds no wide class
        assert_eq!(t.get(&quiet.wake_wide()).unwrap().samples, 2 * GROSS_STREAK);
    }

    #[test]
    fn recent_samples_outweigh_old_ones() {
        let t = Corrections::default();
        let k = key(1024);
        for _ in 0..200 {
            t.record(&k, 2.0, 1.0);
        }
        for _ in 0..200 {
            t.record(&k, 0.5, 1.0);
        }
        let f = t.get(&k).unwrap().factor();
        assert!((f - 0.5).abs() < 0.01, "{f}");
        assert_eq!(t.get(&k).unwrap().samples, 400);
    }

    #[test]
    fn concurrent_recorders_lose_no_update_to_a_torn_slot() {
        let t = std::sync::Arc::new(Corrections::default());
        let k = key(512);
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        t.record(&k, 3.0, 1.0);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let c = t.get(&k).unwrap();
        assert_eq!(c.samples, 4000);
        assert!((c.factor() - 3.0).abs() < 3.0 * 2e-4, "{}", c.factor());
    }

    #[test]
    fn traced_calls_fold_into_the_profile_corrections_alone_only() {
        use crate::engine::profile::Profile;
        let mut p = Profile::built_in("h200").unwrap();
        let before = p
            .corrections
            .get("vendor")
            .map_or(1.0, |c| c.factor(1953, 123, 1953));
        let line = |dur_ns: u64, concurrent: &str| {
            format!(
                r#"{{"type":"call","seq":0,"t_ns":0,"dur_ns":{dur_ns},"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","m":1953,"n":123,"k":1953,"lda":1953,"ldb":1953,"ldc":1953,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor","engine":{{"predicted_s":{{"vendor":0.002}},"reason":"x"{concurrent}}}}}"#
            )
        };
        let call = |l: String| match crate::trace::parse_line(&l, 1).unwrap() {
            crate::trace::Line::Call(c) => *c,
            _ => unreachable!(),
        };
        // Two alone calls took 4x their prediction; a concurrent one 40x (not folded).
        let calls = vec![
            call(line(8_000_000, "")),
            call(line(8_000_000, r#","concurrent":1"#)),
            call(line(80_000_000, r#","concurrent":16"#)),
        ];
        let folded = fold_into_profile(&mut p, &calls);
        assert_eq!(folded, vec![("vendor".to_string(), 2, 1)]);
        let after = p.corrections["vendor"].factor(1953, 123, 1953);
        assert!(
            after / before > 3.0 && after / before < 4.0 + 1e-9,
            "{before} -> {after}"
        );
    }

    /// A GPU call that waited for work an earlier call left running, or grew pinned memory
    /// for later calls, folds its own time: 8 ms measured with 6 ms of waiting (or of
    /// page-locking, or 3 ms of each), against a 2 ms price, is on its price.
    #[test]
    fn the_wait_for_the_gpu_and_pinned_growth_are_not_folded_as_the_shapes_cost() {
        use crate::engine::profile::Profile;
        for not_own in [
            r#""wait_ns":6000000"#,
            r#""pinned_ns":6000000"#,
            r#""wait_ns":3000000,"pinned_ns":3000000"#,
        ] {
            let mut p = Profile::built_in("h200").unwrap();
            let before = p
                .corrections
                .get("gpu-native")
                .map_or(1.0, |c| c.factor(4096, 77, 4096));
            let l = format!(
                r#"{{"type":"call","seq":0,"t_ns":0,"dur_ns":8000000,"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","m":4096,"n":77,"k":4096,"lda":4096,"ldb":4096,"ldc":4096,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"gpu-native","phases":{{"transfer_ns":7500000,"products_ns":500000,{not_own}}},"engine":{{"predicted_s":{{"gpu-native":0.002}},"reason":"x"}}}}"#
            );
            let crate::trace::Line::Call(c) = crate::trace::parse_line(&l, 1).unwrap() else {
                unreachable!()
            };
            assert_eq!(
                c.phases.as_ref().map(Phases::not_own_work_ns),
                Some(6_000_000),
                "{not_own}"
            );
            let folded = fold_into_profile(&mut p, &[*c]);
            assert_eq!(folded, vec![("gpu-native".to_string(), 1, 1)]);
            let after = p.corrections["gpu-native"].factor(4096, 77, 4096);
            assert!(
                (after / before - 1.0).abs() < 1e-9,
                "{not_own}: {before} -> {after}"
            );
        }
    }
}
