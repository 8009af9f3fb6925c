//! A/B comparison against the vendor BLAS: `OZAKI_AB`. (The cuBLAS hook's calls are compared
//! with cuBLAS fp64 on the device instead, with the same settings and record fields:
//! `cublas_hook::compare`.)
//!
//! For each chosen call whose route is not the vendor itself, the vendor BLAS also computes
//! the call, and the trace record gets an [`AbResult`]: the largest componentwise and the
//! normwise relative difference between the two results, and both times. The program
//! receives the route's result, or the vendor's with `OZAKI_AB_KEEP=vendor` (a way to
//! watch a route's accuracy in production without depending on it).
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `OZAKI_AB=1` or `=F` with 0 < F < 1 | compare every call, or a fraction F of them (deterministic sample) | off |
//! | `OZAKI_AB_KEEP=route\|vendor` | which result the program receives | `route` |
//! | `OZAKI_AB_MAX_MB=N` | memory for the private copies of C, MiB, over all threads at once | 512 |
//!
//! How one call runs ([`execute`]), with only one private buffer the size of the part of C
//! the call writes:
//! 1. copy the caller's C into the buffer (the original, needed again for the route when
//!    beta != 0);
//! 2. the vendor computes the call in the caller's C, timed;
//! 3. swap the caller's C and the buffer: C is the original again, the buffer holds the
//!    vendor's result;
//! 4. the chosen route computes the call in the caller's C, timed, with its usual fallback;
//! 5. compare; with `KEEP=vendor` copy the buffer back into C.
//!
//! A call whose copy would push the memory in use over `OZAKI_AB_MAX_MB` is not compared:
//! it runs its route as usual and its record says `ab.skipped` with the reason, so
//! `ozaki ab-report` can count it. The vendor runs first, so it meets A and B cold in
//! cache and the route warm; for calls large enough to matter this is small against the
//! times compared.

use crate::abi::{CView, Canon, Operands, RawCall, Region};
use crate::config::Config;
use crate::route::{self, Executed};
use crate::symbols::SymId;
use ozaki_core::route::Route;
use ozaki_core::trace::AbResult;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Default of `OZAKI_AB_MAX_MB`: enough for one 8192 x 8192 C, little next to a GPU node's memory.
pub const DEFAULT_MAX_MB: u64 = 512;

/// Validated `OZAKI_AB*` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AbConfig {
    /// Fraction of eligible calls compared, in (0, 1].
    pub fraction: f64,
    /// Whether the program receives the vendor's result.
    pub keep_vendor: bool,
    /// Bytes of private copies allowed at once.
    pub max_bytes: u64,
}

impl AbConfig {
    /// Parses the three variables; `None` when A/B is off. Bad values give a message each
    /// and a safe setting (A/B off for a bad `OZAKI_AB`, the defaults for the others).
    pub fn parse(
        ab: Option<&str>,
        keep: Option<&str>,
        max_mb: Option<&str>,
    ) -> (Option<AbConfig>, Vec<String>) {
        let mut problems = Vec::new();
        let fraction = match ab.map(str::trim) {
            None | Some("") | Some("0") => return (None, problems),
            Some(s) => {
                match s.parse::<f64>() {
                    Ok(f) if f > 0.0 && f <= 1.0 => f,
                    _ => {
                        problems.push(format!("OZAKI_AB={s:?}: expected 1 or a fraction in (0, 1]; A/B comparison is off"));
                        return (None, problems);
                    }
                }
            }
        };
        let keep_vendor = match keep.map(str::trim) {
            None | Some("") | Some("route") => false,
            Some("vendor") => true,
            Some(s) => {
                problems.push(format!(
                    "OZAKI_AB_KEEP={s:?}: expected route or vendor; keeping the route's result"
                ));
                false
            }
        };
        let max_mb = match max_mb.map(str::trim) {
            None | Some("") => DEFAULT_MAX_MB,
            Some(s) => s.parse::<u64>().unwrap_or_else(|_| {
                problems.push(format!(
                    "OZAKI_AB_MAX_MB={s:?}: expected a whole number of MiB; using {DEFAULT_MAX_MB}"
                ));
                DEFAULT_MAX_MB
            }),
        };
        (
            Some(AbConfig {
                fraction,
                keep_vendor,
                max_bytes: max_mb.saturating_mul(1 << 20),
            }),
            problems,
        )
    }

    /// Whether the `n`-th eligible call (from 0) is compared: every call at fraction 1,
    /// otherwise a deterministic, well-spread sample (a hash of `n` against the fraction),
    /// so reruns compare the same calls.
    pub fn chosen(&self, n: u64) -> bool {
        self.fraction >= 1.0 || (splitmix64(n) >> 11) as f64 / (1u64 << 53) as f64 <= self.fraction
    }
}

/// SplitMix64 finaliser: a cheap bijective hash with well-spread bits.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The process's A/B settings, read once (messages about bad values go to stderr once).
pub fn config() -> Option<&'static AbConfig> {
    static CONFIG: crate::lazy::Lazy<Option<AbConfig>> = crate::lazy::Lazy::new();
    CONFIG
        .get_or_init(|| {
            let var = ozaki_core::env::var;
            let (config, problems) = AbConfig::parse(
                var("OZAKI_AB").as_deref(),
                var("OZAKI_AB_KEEP").as_deref(),
                var("OZAKI_AB_MAX_MB").as_deref(),
            );
            for p in problems {
                crate::config::notice(&p);
            }
            config
        })
        .as_ref()
}

/// Bytes of private copies in use, over all threads.
static IN_USE: AtomicU64 = AtomicU64::new(0);
/// Eligible calls seen so far (the sample index).
static ELIGIBLE: AtomicU64 = AtomicU64::new(0);

/// Whether the next eligible call is compared (each call asks once: the sample index moves
/// on).
pub(crate) fn next_chosen(ab: &AbConfig) -> bool {
    ab.chosen(ELIGIBLE.fetch_add(1, Ordering::Relaxed))
}

/// A claim on `bytes` of the copy budget, given back on drop.
pub(crate) struct Reservation(u64);

impl Reservation {
    pub(crate) fn take(bytes: u64, max: u64) -> Option<Reservation> {
        IN_USE
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&t| t <= max)
            })
            .ok()
            .map(|_| Reservation(bytes))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        IN_USE.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// Relative differences of `(route, vendor)` pairs:
/// - componentwise: max |r - v| / |v|, where equal values (including two NaNs, or two
///   equal infinities) count 0 and a nonzero difference from v = 0 counts +inf;
/// - normwise: ||r - v||_2 / ||v||_2 over all pairs, computed with scaling so that huge
///   entries do not overflow; +inf when any pair differs in a non-finite way, 0 when equal.
pub fn differences(pairs: impl Iterator<Item = (f64, f64)>) -> (f64, f64) {
    let mut comp = 0.0f64;
    // Scaled sums of squares (as LAPACK's dnrm2): value = scale^2 * ssq.
    let (mut scale_d, mut ssq_d, mut scale_v, mut ssq_v) = (0.0f64, 1.0f64, 0.0f64, 1.0f64);
    let mut nonfinite = false;
    let add = |x: f64, scale: &mut f64, ssq: &mut f64| {
        let a = x.abs();
        if a > 0.0 {
            if *scale < a {
                *ssq = 1.0 + *ssq * (*scale / a) * (*scale / a);
                *scale = a;
            } else {
                *ssq += (a / *scale) * (a / *scale);
            }
        }
    };
    for (r, v) in pairs {
        if r == v || (r.is_nan() && v.is_nan()) {
            add(v, &mut scale_v, &mut ssq_v);
            continue;
        }
        let d = r - v;
        if !d.is_finite() || !v.is_finite() {
            nonfinite = true;
            comp = f64::INFINITY;
            continue;
        }
        comp = comp.max(if v == 0.0 {
            f64::INFINITY
        } else {
            d.abs() / v.abs()
        });
        add(d, &mut scale_d, &mut ssq_d);
        add(v, &mut scale_v, &mut ssq_v);
    }
    let norm = if nonfinite {
        f64::INFINITY
    } else if scale_d == 0.0 {
        0.0
    } else if scale_v == 0.0 {
        f64::INFINITY
    } else {
        (scale_d / scale_v) * (ssq_d / ssq_v).sqrt()
    };
    (comp, norm)
}

/// Runs `route` for a checked call like [`route::execute`], comparing it against the vendor
/// when `OZAKI_AB` chose the call (see the module doc). Returns what ran and, for a chosen
/// call, the comparison or the reason it was skipped.
///
/// # Safety
/// - as [`route::execute`]: `raw` are the caller's arguments of `id` and `canon` was decoded
///   from them; the BLAS calling contract holds for the whole call.
pub unsafe fn execute<R: RawCall>(
    route: Route,
    plan: Option<&ozaki_core::devices::SplitPlan>,
    on_decline: Route,
    id: SymId,
    raw: &R,
    canon: &Canon,
    config: &Config,
) -> (Executed, Option<AbResult>) {
    // SAFETY: the caller's contract (this closure is every `route::execute` call below).
    let plain = || unsafe { route::execute(route, plan, on_decline, id, raw, canon, config) };
    let Some(ab) = self::config() else {
        return (plain(), None);
    };
    // Comparing the vendor with itself would only double the time.
    if route == Route::Vendor || !next_chosen(ab) {
        return (plain(), None);
    }
    let region = Region::of(canon);
    let bytes = (region.len() as u64).saturating_mul(8);
    let skipped = |why: String| AbResult {
        kept: "route".into(),
        skipped: Some(why),
        ..AbResult::default()
    };
    let Some(_claim) = Reservation::take(bytes, ab.max_bytes) else {
        let why = format!(
            "copy of C ({} MiB) over OZAKI_AB_MAX_MB={}",
            bytes.div_ceil(1 << 20),
            ab.max_bytes >> 20
        );
        return (plain(), Some(skipped(why)));
    };
    let mut buffer = Vec::new();
    if buffer.try_reserve_exact(region.len()).is_err() {
        return (
            plain(),
            Some(skipped(format!(
                "could not allocate {} MiB for the copy of C",
                bytes.div_ceil(1 << 20)
            ))),
        );
    }
    // 1. Save the original C; note the data's scale (|alpha| |A| |B| + |beta| |C|).
    // SAFETY: the caller's contract; these views are dropped before anything else touches C.
    let scale = unsafe { data_scale(canon, &mut buffer) };
    // SAFETY: as above; the view is only used between the route's and the vendor's runs.
    let c = unsafe { c_view(canon) };
    // 2. The vendor, in the caller's C.
    let t = Instant::now();
    // SAFETY: the caller's contract.
    if unsafe { route::vendor::call(id, raw) }.is_err() {
        // C is untouched (nothing was called): run the route as usual.
        return (
            plain(),
            Some(skipped("no vendor BLAS to compare with".into())),
        );
    }
    let vendor_ns = t.elapsed().as_nanos() as u64;
    // 3. C back to the original, the vendor's result into the buffer. C already holds the
    // vendor's result here, so this step must not panic (`entry::call`'s recovery would apply
    // beta a second time): it cannot, since step 1 read every index of the region from this
    // same C into the buffer, and swapping two f64 values does not fail.
    c.swap(&mut buffer);
    // 4. The route, with its usual fallback.
    let t = Instant::now();
    let done = plain();
    let route_ns = t.elapsed().as_nanos() as u64;
    // 5. Compare, and hand the program the result it asked for. C already holds a final
    // result here, so a panic must not reach `entry::call`, whose recovery would run the
    // vendor on this C again (beta applied twice): it ends the comparison instead.
    // The route has returned and no longer holds a view of C.
    let compared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let d = differences(c.values().zip(buffer.iter().copied()));
        let diff = frobenius(c.values().zip(buffer.iter()).map(|(r, v)| r - v));
        if ab.keep_vendor {
            c.unpack(&buffer);
        }
        (d.0, d.1, diff)
    }));
    let Ok((max_rel_comp, rel_norm, diff)) = compared else {
        return (
            done,
            Some(skipped("comparison failed (internal error)".into())),
        );
    };
    let rel_scaled = match diff / scale {
        x if x.is_nan() && diff == 0.0 => 0.0,
        x if x.is_finite() => x,
        _ => f64::MAX,
    };
    let kept = if ab.keep_vendor { "vendor" } else { "route" };
    (
        done,
        Some(AbResult {
            max_rel_comp,
            rel_norm,
            vendor_ns,
            route_ns,
            kept: kept.into(),
            skipped: None,
            rel_scaled: Some(rel_scaled),
        }),
    )
}

/// Frobenius norm of the values, scaled so that huge entries do not overflow.
pub(crate) fn frobenius(values: impl Iterator<Item = f64>) -> f64 {
    let (mut scale, mut ssq) = (0.0f64, 1.0f64);
    for x in values {
        let a = x.abs();
        if a.is_nan() || a.is_infinite() {
            return f64::INFINITY;
        }
        if a > 0.0 {
            if scale < a {
                ssq = 1.0 + ssq * (scale / a) * (scale / a);
                scale = a;
            } else {
                ssq += (a / scale) * (a / scale);
            }
        }
    }
    scale * ssq.sqrt()
}

/// Packs the caller's C into `buffer` and returns |alpha| ||op(A)||_F ||op(B)||_F +
/// |beta| ||C||_F, the scale the A/B difference is measured against (O(mk + kn + mn), small
/// next to the product's O(mnk)).
///
/// # Safety
/// - as [`Canon::operands`]: nothing else writes C meanwhile.
unsafe fn data_scale(canon: &Canon, buffer: &mut Vec<f64>) -> f64 {
    // SAFETY: the caller's contract.
    let (ab, beta) = match unsafe { canon.operands() } {
        Operands::Gemm(g, c) => {
            c.pack(buffer);
            let a = frobenius(
                (0..g.k)
                    .flat_map(|l| (0..g.m).map(move |i| (i, l)))
                    .map(|(i, l)| if g.a.is_empty() { 0.0 } else { g.op_a(i, l) }),
            );
            let b = frobenius(
                (0..g.n)
                    .flat_map(|j| (0..g.k).map(move |l| (l, j)))
                    .map(|(l, j)| if g.b.is_empty() { 0.0 } else { g.op_b(l, j) }),
            );
            (g.alpha.abs() * a * b, g.beta)
        }
        Operands::Syrk(s, c) => {
            c.pack(buffer);
            let a = frobenius(
                (0..s.k)
                    .flat_map(|l| (0..s.n).map(move |i| (i, l)))
                    .map(|(i, l)| if s.a.is_empty() { 0.0 } else { s.op_a(i, l) }),
            );
            (s.alpha.abs() * a * a, s.beta)
        }
    };
    let c = if beta == 0.0 {
        0.0
    } else {
        beta.abs() * frobenius(buffer.iter().copied())
    };
    ab + c
}

/// The view of the caller's C.
///
/// # Safety
/// - as [`Canon::operands`]: while the view is used, nothing else writes C.
unsafe fn c_view(canon: &Canon) -> CView {
    // SAFETY: the caller's contract.
    match unsafe { canon.operands() } {
        Operands::Gemm(_, c) | Operands::Syrk(_, c) => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::blas::Uplo;

    #[test]
    fn settings_parse_with_safe_defaults() {
        assert_eq!(AbConfig::parse(None, None, None).0, None);
        assert_eq!(AbConfig::parse(Some("0"), None, None).0, None);
        let (c, p) = AbConfig::parse(Some("1"), Some("vendor"), Some("8"));
        assert_eq!(
            c,
            Some(AbConfig {
                fraction: 1.0,
                keep_vendor: true,
                max_bytes: 8 << 20
            })
        );
        assert!(p.is_empty());
        let (c, p) = AbConfig::parse(Some("0.25"), Some("both"), Some("lots"));
        let c = c.unwrap();
        assert_eq!(
            (c.fraction, c.keep_vendor, c.max_bytes),
            (0.25, false, DEFAULT_MAX_MB << 20)
        );
        assert_eq!(p.len(), 2, "{p:?}");
        for bad in ["2", "-1", "yes", "nan"] {
            let (c, p) = AbConfig::parse(Some(bad), None, None);
            assert!(c.is_none() && p.len() == 1, "{bad}");
        }
    }

    #[test]
    fn sampling_hits_the_fraction_and_is_repeatable() {
        let c = AbConfig {
            fraction: 0.1,
            keep_vendor: false,
            max_bytes: 0,
        };
        let hits = (0..100_000).filter(|&n| c.chosen(n)).count();
        assert!((9_000..11_000).contains(&hits), "{hits}");
        assert_eq!(
            (0..1000).map(|n| c.chosen(n)).collect::<Vec<_>>(),
            (0..1000).map(|n| c.chosen(n)).collect::<Vec<_>>()
        );
        let all = AbConfig { fraction: 1.0, ..c };
        assert!((0..1000).all(|n| all.chosen(n)));
    }

    #[test]
    fn budget_is_shared_and_given_back() {
        // Other tests do not reserve; this one owns the counter while it runs.
        let a = Reservation::take(600, 1000).unwrap();
        assert!(
            Reservation::take(600, 1000).is_none(),
            "over the budget while the first is held"
        );
        drop(a);
        assert!(Reservation::take(600, 1000).is_some(), "given back on drop");
    }

    #[test]
    fn regions_pack_swap_and_respect_triangles() {
        // 3 x 3 stored 4 apart; values = index.
        let mut c: Vec<f64> = (0..12).map(f64::from).collect();
        let full = Region {
            rows: 2,
            cols: 3,
            ld: 4,
            tri: None,
        };
        let mut p = Vec::new();
        // SAFETY: `c` outlives the views and nothing else touches it meanwhile.
        let view = |r: Region, c: &mut Vec<f64>| unsafe { CView::new(c.as_mut_ptr(), r) };
        view(full, &mut c).pack(&mut p);
        assert_eq!(p, vec![0.0, 1.0, 4.0, 5.0, 8.0, 9.0]);
        let upper = Region {
            rows: 3,
            cols: 3,
            ld: 4,
            tri: Some(Uplo::Upper),
        };
        view(upper, &mut c).pack(&mut p);
        assert_eq!(p, vec![0.0, 4.0, 5.0, 8.0, 9.0, 10.0]);
        let lower = Region {
            tri: Some(Uplo::Lower),
            ..upper
        };
        assert_eq!(lower.len(), 6);
        let mut q = vec![-1.0; 6];
        view(lower, &mut c).swap(&mut q);
        assert_eq!(q, vec![0.0, 1.0, 2.0, 5.0, 6.0, 10.0]);
        assert_eq!(
            c[..12],
            [
                -1.0, -1.0, -1.0, 3.0, 4.0, -1.0, -1.0, 7.0, 8.0, 9.0, -1.0, 11.0
            ]
        );
        view(lower, &mut c).unpack(&q);
        assert_eq!(c, (0..12).map(f64::from).collect::<Vec<_>>());
        // copy touches the region only: the rows between (another thread's) stay.
        let mut dst = vec![-1.0; 12];
        full.copy(&c, &mut dst);
        assert_eq!(
            dst,
            [
                0.0, 1.0, -1.0, -1.0, 4.0, 5.0, -1.0, -1.0, 8.0, 9.0, -1.0, -1.0
            ]
        );
    }

    #[test]
    fn differences_componentwise_and_normwise() {
        assert_eq!(
            differences([(1.0, 1.0), (f64::NAN, f64::NAN), (0.0, 0.0)].into_iter()),
            (0.0, 0.0)
        );
        let (comp, norm) = differences([(1.0 + 1e-15, 1.0), (2.0, 2.0)].into_iter());
        assert!((comp - 1.1102230246251565e-15).abs() < 1e-30, "{comp}");
        assert!(
            (norm - 1.1102230246251565e-15 / 5f64.sqrt()).abs() < 1e-28,
            "{norm}"
        );
        // Cancellation: a tiny reference entry makes the componentwise difference large
        // while the normwise one stays small.
        let (comp, norm) = differences([(1e-20, 2e-20), (1.0, 1.0)].into_iter());
        assert_eq!(comp, 0.5);
        assert!(norm < 1e-19);
        // Nonzero against zero, and NaN against a number, are infinitely wrong.
        assert_eq!(
            differences([(1.0, 0.0), (1.0, 1.0)].into_iter()).0,
            f64::INFINITY
        );
        assert_eq!(
            differences([(f64::NAN, 1.0)].into_iter()),
            (f64::INFINITY, f64::INFINITY)
        );
        // Huge entries do not overflow the norm.
        let (_, norm) = differences([(1e300, 2e300), (3e300, 3e300)].into_iter());
        assert!((norm - (1.0 / 13f64.sqrt())).abs() < 1e-15, "{norm}");
    }
}
