//! The host step of every call: from the line statistics to the [`Plan`] (moduli count,
//! bits, shifts), and the per-class shift table the device turns into the same shifts.
//! The scaling modes' defaults live here too, since the plan is where a mode takes effect.

use super::line_stats::{RowStats, exponent_of_bits, line_spread};
use super::moduli_rule::{bits_for, choose_moduli, needed_bits_for_spreads, norm_moduli_for};
use super::norm_lines::{NormSlots, SHIFT_CLASSES};
use crate::crt::MAX_MODULI;
use crate::error::GpuError;

pub use ozaki_core::scaling::ScalingMode;

/// The GPU route's scaling when none is asked for: the norm bound (no extra product, about
/// one modulus fewer than fast on normal data and two on phi = 2; ACCURACY.md).
pub const DEFAULT_SCALING: ScalingMode = ScalingMode::Norm;

/// The scaling a call asking for `requested` runs ([`Options::scaling`]): the default when
/// none, and norm for accurate (which needs the coarse product, not implemented here).
///
/// [`Options::scaling`]: super::Options::scaling
pub fn effective_scaling(requested: Option<ScalingMode>) -> ScalingMode {
    match requested.unwrap_or(DEFAULT_SCALING) {
        ScalingMode::Accurate => ScalingMode::Norm,
        s => s,
    }
}

/// Moduli count and shifts of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Number of moduli (the first `moduli` of [`MODULI`]).
    ///
    /// [`MODULI`]: super::MODULI
    pub moduli: usize,
    /// Most bits a scaled row / column maximum keeps (all of them in fast mode): `|a'| <=
    /// 2^bits`; at most 62 (shifts cap p at 56), the range the residue kernel's formula covers.
    pub bits: i32,
    /// Row shifts of op(A): a'_il = rint(a_il 2^sigma_i).
    pub sigma: Vec<i32>,
    /// Column shifts of op(B).
    pub tau: Vec<i32>,
    /// How the shifts were bounded (`Fast` or `Norm`).
    pub scaling: ScalingMode,
    /// Bits the default rule asked for ([`needed_bits`]; also reported when `moduli` was forced).
    ///
    /// [`needed_bits`]: super::needed_bits
    pub needed_bits: f64,
}

/// Makes the plan from the scan statistics of op(A) rows and op(B) columns. Errors with
/// [`GpuError::NonFinite`] when any maximum is NaN or Inf.
///
/// `scaling` is [`ScalingMode::Fast`] (every line keeps [`bits_for`] bits) or
/// [`ScalingMode::Norm`] (per-line shifts from `coarse_sq`, the default); the shifts are
/// `ozaki_core::scaling::Scaling::new`'s for the same bounds, so CPU and GPU agree bit for bit.
/// `Accurate` (which needs the coarse product) is not implemented here and runs as `Norm`.
pub fn plan(
    a: RowStats,
    b: RowStats,
    k: usize,
    forced: Option<usize>,
    scaling: ScalingMode,
) -> Result<Plan, GpuError> {
    let (mut sigma, mut tau) = (vec![0; a.maxbits.len()], vec![0; b.maxbits.len()]);
    let head = plan_into(a, b, k, forced, scaling, (&mut sigma, &mut tau))?;
    Ok(Plan { sigma, tau, ..head })
}

/// [`plan`] writing the shifts into `shifts` (sigma for op(A)'s rows, tau for op(B)'s
/// columns; an empty slice skips a side) instead of new vectors: the route writes them
/// straight into the pinned buffer it uploads. The returned plan's `sigma` and `tau` are
/// empty.
///
/// Every call runs this host step (the route passes empty shift slices: its shifts come from
/// `line_shifts` on the device), so it makes one pass over the lines for the survey
/// (non-finite maxima, top exponents, spreads, norm classes) and one for the shifts, and
/// allocates nothing per line. Measured on 2 cores, n = 4096: 87-117 us per call through
/// `ozaki_core::scaling::Scaling::new` and separate passes, most of it allocation and page
/// faults, 50-60 us now (BENCHMARKS.md, session 3 kernel work).
/// Each line's shift is `Scaling::new`'s formula `p + COARSE_BITS - 1 - e` with `p =
/// shift_for_bound(L, bound)`, bound `S_i` (norm) or `4096 k` (fast, `CoarseBounds::fast`);
/// the unit tests compare it with `Scaling::new` for both modes.
pub fn plan_into(
    a: RowStats,
    b: RowStats,
    k: usize,
    forced: Option<usize>,
    scaling: ScalingMode,
    shifts: (&mut [i32], &mut [i32]),
) -> Result<Plan, GpuError> {
    use ozaki_core::scaling::{COARSE_BITS, MIN_SHIFT, clog2, shift_for_bound};
    const INF_BITS: u64 = 0x7ff0_0000_0000_0000;
    let norm = scaling != ScalingMode::Fast;
    let have_norms = a.coarse_sq.len() == a.maxbits.len() && b.coarse_sq.len() == b.maxbits.len();
    // survey: largest maximum (non-finite check, top exponent), spread, norm classes
    let mut slots = NormSlots::default();
    let mut survey = |s: &RowStats| {
        let (mut top, mut spread) = (0u64, 1.0f64);
        for (l, (&m, &sum)) in s.maxbits.iter().zip(s.abssum).enumerate() {
            top = top.max(m);
            spread = spread.max(line_spread(m, sum, k));
            if norm && have_norms {
                slots.add(m, s.coarse_sq[l]);
            }
        }
        (top, spread)
    };
    let ((top_a, spread_a), (top_b, spread_b)) = (survey(&a), survey(&b));
    if top_a >= INF_BITS || top_b >= INF_BITS {
        return Err(GpuError::NonFinite);
    }
    // the product must stay inside fp64's range (ozaki-core's ExponentRange rule)
    if let (Some(ea), Some(eb)) = (exponent_of_bits(top_a), exponent_of_bits(top_b))
        && ea + eb + clog2(k.max(1) as u64) + 8 > 1023
    {
        return Err(GpuError::Unsupported(
            "exponents could overflow fp64".into(),
        ));
    }
    if norm && !have_norms {
        return Err(GpuError::Unsupported(
            "norm scaling without the coarse norms".into(),
        ));
    }
    let needed = needed_bits_for_spreads(spread_a, spread_b, k, scaling);
    let lines = slots.lines();
    let moduli = forced
        .unwrap_or_else(|| {
            if norm {
                norm_moduli_for(&lines, needed)
            } else {
                choose_moduli(needed, k)
            }
        })
        .clamp(2, MAX_MODULI);
    let plan_r = ozaki_core::moduli::CrtPlan::get(moduli);
    let budget = scaling.budget_bits(plan_r);
    let bits = if norm {
        // The fit proof (ozaki-core scaling.rs) needs p >= MIN_SHIFT on every nonzero line;
        // a line's p depends on its S only through its class.
        let ps = lines
            .classes
            .iter()
            .map(|&(q, _)| shift_for_bound(budget, q));
        if ps.clone().any(|p| p < MIN_SHIFT) {
            return Err(GpuError::Unsupported(format!(
                "{moduli} moduli cannot cover the exponent spread at k = {k}"
            )));
        }
        // |a'| <= 2^(p + 6) on each line (p <= 56: within the residue kernel's |z| <= 2^62)
        ps.max().map_or(0, |p| p + COARSE_BITS)
    } else {
        let bits = bits_for(moduli, k);
        if bits < 1 {
            return Err(GpuError::Unsupported(format!(
                "{moduli} moduli leave no bits at k = {k}"
            )));
        }
        bits
    };
    // shifts: sigma_i = p_i + COARSE_BITS - 1 - e_i (0 for zero lines)
    let fast_bound = 4096 * k.max(1) as u64;
    let write = |s: &RowStats, out: &mut [i32]| {
        for (l, (o, &m)) in out.iter_mut().zip(s.maxbits).enumerate() {
            let bound = if norm { s.coarse_sq[l] } else { fast_bound };
            *o = exponent_of_bits(m)
                .map_or(0, |e| shift_for_bound(budget, bound) + COARSE_BITS - 1 - e);
        }
    };
    write(&a, shifts.0);
    write(&b, shifts.1);
    Ok(Plan {
        moduli,
        bits,
        sigma: Vec::new(),
        tau: Vec::new(),
        scaling,
        needed_bits: needed,
    })
}

/// The table kernel `line_shifts` turns into per-line shifts, `sigma = table[class] - e`:
/// `p + COARSE_BITS - 1` per [`norm_class`] with p = `shift_for_bound(L, S)` for r moduli, so
/// each line gets [`plan_into`]'s shift (fast scaling: the bound `4096 k` for every line).
///
/// [`norm_class`]: super::norm_lines::norm_class
pub(super) fn shift_table(scaling: ScalingMode, moduli: usize, k: usize) -> [i32; SHIFT_CLASSES] {
    use ozaki_core::scaling::{COARSE_BITS, shift_for_bound};
    let budget = scaling.budget_bits(ozaki_core::moduli::CrtPlan::get(moduli));
    std::array::from_fn(|class| {
        // a coarse square sum of this class (clog2(2^j) = j; 2^64 - 1 has clog2 64)
        let bound = match (scaling, class) {
            (ScalingMode::Fast, _) => 4096 * k.max(1) as u64,
            (_, 0) => 0,
            (_, c) => 1u64.checked_shl(c as u32 - 1).unwrap_or(u64::MAX),
        };
        shift_for_bound(budget, bound) + COARSE_BITS - 1
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ozaki::HostRowStats;
    use crate::ozaki::norm_lines::norm_class;

    #[test]
    fn shifts_are_ozaki_cores_fast_scaling() {
        use ozaki_core::scaling::{CoarseBounds, Exponents, Scaling};
        let (k, r) = (3000usize, 15usize);
        let rows = [1.5f64, 3.0e-7, 0.0, 7.0e12];
        let cols = [2.0f64, 1e-300];
        let rb: Vec<u64> = rows.iter().map(|x| x.to_bits()).collect();
        let cb: Vec<u64> = cols.iter().map(|x| x.to_bits()).collect();
        let (rs, cs) = (vec![1.0; rows.len()], vec![1.0; cols.len()]);
        let ours = plan(
            RowStats {
                maxbits: &rb,
                abssum: &rs,
                coarse_sq: &[],
            },
            RowStats {
                maxbits: &cb,
                abssum: &cs,
                coarse_sq: &[],
            },
            k,
            Some(r),
            ScalingMode::Fast,
        )
        .unwrap();
        let exps = Exponents {
            rows: rows
                .iter()
                .map(|&x| exponent_of_bits(x.to_bits()))
                .collect(),
            cols: cols
                .iter()
                .map(|&x| exponent_of_bits(x.to_bits()))
                .collect(),
        };
        let core = Scaling::new(
            ozaki_core::moduli::CrtPlan::get(r).budget_bits,
            &exps,
            &CoarseBounds::fast(rows.len(), cols.len(), k),
        );
        assert_eq!(ours.sigma, core.sigma);
        assert_eq!(ours.tau, core.tau);
    }

    #[test]
    fn plan_rejects_nan_and_inf_and_shifts_rows_to_the_bit_budget() {
        fn st<'a>(maxbits: &'a [u64], abssum: &'a [f64]) -> RowStats<'a> {
            RowStats {
                maxbits,
                abssum,
                coarse_sq: &[],
            }
        }
        let (nan, inf, one) = (
            [f64::NAN.to_bits()],
            [f64::INFINITY.to_bits()],
            [1f64.to_bits()],
        );
        assert_eq!(
            plan(
                st(&nan, &[1.0]),
                st(&[0], &[0.0]),
                4,
                None,
                ScalingMode::Fast
            ),
            Err(GpuError::NonFinite)
        );
        assert_eq!(
            plan(
                st(&one, &[1.0]),
                st(&inf, &[1.0]),
                4,
                None,
                ScalingMode::Norm
            ),
            Err(GpuError::NonFinite)
        );
        let (a, b) = ([3.0f64.to_bits(), 0], [0.1f64.to_bits()]);
        let p = plan(
            st(&a, &[100.0, 0.0]),
            st(&b, &[3.0]),
            64,
            Some(16),
            ScalingMode::Fast,
        )
        .unwrap();
        assert_eq!(p.moduli, 16);
        // 3 * 2^sigma < 2^bits <= 2 * 3 * 2^sigma
        let scaled = 3.0 * 2f64.powi(p.sigma[0]);
        assert!(scaled < 2f64.powi(p.bits) && 2.0 * scaled >= 2f64.powi(p.bits));
        assert_eq!(p.sigma[1], 0, "zero row keeps shift 0");
    }

    /// Line statistics of lines packed one after another, `k` entries each.
    fn line_stats(x: &[f64], k: usize) -> HostRowStats {
        let mut s = HostRowStats::default();
        x.chunks(k).for_each(|line| s.push(line));
        s
    }

    #[test]
    fn norm_plan_is_ozaki_cores_norm_scaling_and_takes_fewer_moduli_than_fast() {
        use ozaki_core::scaling::{CoarseBounds, Exponents, Scaling};
        use ozaki_core::testutil::{Family, Rng, matrix};
        let mut rng = Rng::new(3);
        let k = 4096;
        // rows: normal, a zero row, tiny (subnormal) entries, exponent-spread; columns normal
        let mut a = matrix(Family::Normal, k, 2, &mut rng);
        a.extend(vec![0.0; k]);
        a.extend(
            matrix(Family::Normal, k, 1, &mut rng)
                .iter()
                .map(|x| x * 1e-310),
        );
        a.extend(matrix(Family::Spread(2.0), k, 1, &mut rng));
        let b = matrix(Family::Normal, k, 3, &mut rng);
        let (sa, sb) = (line_stats(&a, k), line_stats(&b, k));
        let (ra, rb) = (sa.view(), sb.view());
        let exps = Exponents {
            rows: sa.maxbits.iter().map(|&x| exponent_of_bits(x)).collect(),
            cols: sb.maxbits.iter().map(|&x| exponent_of_bits(x)).collect(),
        };
        let bounds = CoarseBounds::norm(&exps, &a, &b, k);
        assert_eq!(
            bounds.rows, ra.coarse_sq,
            "HostRowStats' S_i are CoarseBounds::norm's"
        );
        for r in [8usize, 14, 16, 20] {
            let ours = plan(ra, rb, k, Some(r), ScalingMode::Norm).unwrap();
            let plan_r = ozaki_core::moduli::CrtPlan::get(r);
            let core = Scaling::new(ScalingMode::Norm.budget_bits(plan_r), &exps, &bounds);
            assert_eq!(
                (&ours.sigma, &ours.tau),
                (&core.sigma, &core.tau),
                "r = {r}"
            );
            assert_eq!(ours.sigma[2], 0, "zero row keeps shift 0");
            assert!(ours.bits <= 62, "scaled entries fit i64");
        }
        // too few moduli cannot cover the lines: refused, not overflowed
        assert!(matches!(
            plan(ra, rb, k, Some(3), ScalingMode::Norm),
            Err(GpuError::Unsupported(_))
        ));
        // auto on the normal lines alone: norm takes 14 where fast takes 15
        fn first<'a>(s: &RowStats<'a>, n: usize) -> RowStats<'a> {
            RowStats {
                maxbits: &s.maxbits[..n],
                abssum: &s.abssum[..n],
                coarse_sq: &s.coarse_sq[..n],
            }
        }
        let (na, nb) = (first(&ra, 2), first(&rb, 3));
        let norm = plan(na, nb, k, None, ScalingMode::Norm).unwrap();
        let fast = plan(na, nb, k, None, ScalingMode::Fast).unwrap();
        assert_eq!((norm.moduli, fast.moduli), (14, 15));
        // with the spread row the rule asks for more
        let spread = plan(ra, rb, k, None, ScalingMode::Norm).unwrap();
        assert!(spread.moduli > 14, "{}", spread.moduli);
    }

    /// The device's shifts (`line_shifts`: `table[class(S)] - e` from [`shift_table`]) are the
    /// plan's, which are ozaki-core's (`norm_plan_is_ozaki_cores_norm_scaling...`), for both
    /// scalings and every moduli count the lines allow; the kernel's class is `norm_class`.
    #[test]
    fn device_shift_table_gives_the_plans_shifts() {
        use ozaki_core::testutil::{Family, Rng, matrix};
        let mut rng = Rng::new(11);
        let k = 1000;
        let mut a = matrix(Family::Spread(2.0), k, 6, &mut rng);
        a.extend(vec![0.0; k]);
        a.extend(
            matrix(Family::Normal, k, 2, &mut rng)
                .iter()
                .map(|x| x * 1e-310),
        );
        a[5 * k + 3] = 1e6; // one line with a single large entry
        let b = matrix(Family::Normal, k, 3, &mut rng);
        let (sa, sb) = (line_stats(&a, k), line_stats(&b, k));
        // the kernel, on the host: zero (or non-finite) maxima keep 0
        let kernel = |table: &[i32; SHIFT_CLASSES], st: &HostRowStats| -> Vec<i32> {
            st.maxbits
                .iter()
                .zip(&st.coarse_sq)
                .map(|(&mb, &q)| match exponent_of_bits(mb) {
                    Some(e) if mb < 0x7ff0_0000_0000_0000 => table[norm_class(q)] - e,
                    _ => 0,
                })
                .collect()
        };
        let mut planned = 0;
        for scaling in [ScalingMode::Fast, ScalingMode::Norm] {
            for r in 2..=MAX_MODULI {
                let Ok(p) = plan(sa.view(), sb.view(), k, Some(r), scaling) else {
                    continue;
                };
                let table = shift_table(scaling, r, k);
                // fast scaling's kernel sees S = 0 everywhere (the statistics are zeroed)
                let strip = |s: &HostRowStats| HostRowStats {
                    coarse_sq: vec![0; s.maxbits.len()],
                    ..s.clone()
                };
                let (da, db) = if scaling == ScalingMode::Fast {
                    (strip(&sa), strip(&sb))
                } else {
                    (sa.clone(), sb.clone())
                };
                assert_eq!(kernel(&table, &da), p.sigma, "{scaling:?} r = {r}");
                assert_eq!(kernel(&table, &db), p.tau, "{scaling:?} r = {r}");
                planned += 1;
            }
        }
        assert!(planned > 20, "only {planned} plans");
        // a class's representative bound gives the shift of every member
        for budget in [20, 57, 120] {
            for q in [
                1u64,
                2,
                3,
                4,
                5,
                4095,
                4096,
                4097,
                1 << 40,
                (1 << 40) + 1,
                u64::MAX,
            ] {
                let shift = ozaki_core::scaling::shift_for_bound;
                let class = norm_class(q);
                let rep = 1u64.checked_shl(class as u32 - 1).unwrap_or(u64::MAX);
                assert_eq!(shift(budget, q), shift(budget, rep), "q = {q}");
            }
        }
    }
}
