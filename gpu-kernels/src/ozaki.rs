//! The `gpu-ozaki` route on device-resident operands: Ozaki scheme II with byte moduli on the
//! INT8 tensor cores (issue #4; paper brief §1 and §9.3-9.5).
//!
//! Stages, all on the caller's stream:
//! 1. exponent scan of op(A) rows and op(B) columns (one pass each, NaN/Inf detected), then,
//!    with norm scaling (the default), a second pass for each line's coarse square sum `S_i`;
//! 2. the host reads the m + n row/column statistics (one small copy) and makes the [`Plan`]:
//!    moduli count and checks; the power-of-two shifts are formed on the device from the
//!    same statistics (`line_shifts`, from a per-class table of the plan's shift rule);
//! 3. one pass over each fp64 operand forms the residues of all moduli (convert once). The
//!    GPU runs 2 and 3 for the expected moduli count while the host plans, and again when the
//!    plan chooses another count;
//! 4. one cuBLASLt strided-batched int8 GEMM per column block of C covers all moduli;
//! 5. CRT reconstruction, single rounding, unscaling and the alpha/beta epilogue write C.
//!
//! C is written only in stage 5, after every earlier stage succeeded; a failure before it
//! leaves C untouched, so the caller can still run the native route on the same memory.
//!
//! # Same numerics as `ozaki-core` (issue #3), and where they differ
//! Moduli ([`MODULI`] = `ozaki_core::moduli::INT8_MODULI`), shifts (ozaki-core's *norm*
//! scaling by default, or its *fast* scaling, [`Options::scaling`] / `OZAKI_SCALING`),
//! quantiser (round to nearest even, `rint`) and reconstruction (exact CRT, one correctly
//! rounded conversion, then `alpha c + beta C` with separately rounded operations) are those
//! of `ozaki_core::emulate`; for the same moduli count and scaling mode its output with
//! `Reconstruction::Exact` equals ours bit for bit (`tests/device.rs`,
//! `equals_the_cpu_reference_route_bit_for_bit` for fast, `norm_scaling_equals_...` for
//! norm). Three differences remain, on purpose:
//! - **moduli count**: the CPU route's default chooses r from a statistical error estimate
//!   that needs the exact quantisation errors and an exponent product over all (i, j)
//!   (`ozaki_core::select`); on the GPU that is another full product, so the GPU chooses r
//!   from the in-row spread measured by the scan ([`needed_bits`]; fast mode calibrated on the
//!   H200, norm mode on ozaki-core's CPU measurements, ACCURACY.md).
//!   With `OZAKI_MODULI=r` both routes use r.
//! - **scaling mode**: the CPU default is the accurate mode (one extra coarse product); the GPU
//!   uses the norm mode (no extra product, one more pass over the operands; about one modulus
//!   fewer than fast on normal data, 1-2 on exponent-spread data, nearly what accurate gains).
//!   `Accurate` asked of the GPU runs as norm.
//! - **subnormal results**: the GPU rounds C' 2^-(sigma+tau) to 53 bits and then scales, which
//!   rounds a second time when the result is subnormal (below 2^-1022); normal results are
//!   correctly rounded.

use crate::crt::{CrtTable, MAX_MODULI, ResidueTable};
use crate::device::{Gpu, sync};
use crate::error::{Context, GpuError};
use crate::kernels::PerLine;
use crate::lt_int8::{self, MAX_K, Shape};
use crate::timing::{Marks, Phase};
use cudarc::driver::sys;
use ozaki_core::blas::{Trans, Uplo};
use ozaki_core::trace::Phases;

/// The INT8 modulus set of `ozaki-core` (issue #3), in the order moduli are taken: a call
/// with r moduli uses the first r, so GPU and CPU routes share residues and CRT.
pub const MODULI: [u32; MAX_MODULI] = ozaki_core::moduli::INT8_MODULI;

/// Base of the default accuracy rule (see [`needed_bits`]), calibrated on the H200 against
/// native DGEMM's error on the same inputs (BENCHMARKS.md, GPU section).
pub const BASE_BITS: f64 = 48.4;

/// [`BASE_BITS`] for norm scaling (see [`needed_bits`]). Fitted on ozaki-core's CPU
/// measurements (same bits as the GPU for the same moduli; ACCURACY.md, "Norm scaling"):
/// every measured case whose error at r - 1 moduli was above native DGEMM's (standard-order
/// dot products on the same inputs) needs more than r - 1 under this base (the tightest, phi = 2
/// at k = 4096 with 15 moduli, asked 45.7), and normal data at k = 4096-16384 takes 14 moduli
/// (at the full 16384² x 16384 size its lines keep 0.5-1.5 bits more than this asks).
pub const NORM_BASE_BITS: f64 = 46.2;

/// Weight of the spread term of [`needed_bits`] (calibrated with [`BASE_BITS`]: normal
/// inputs take 15 moduli up to k = 16384, exponent-spread inputs (phi = 2) 17).
pub const SPREAD_WEIGHT: f64 = 0.6;

pub use ozaki_core::scaling::ScalingMode;

/// The GPU route's scaling when none is asked for: the norm bound (no extra product, about
/// one modulus fewer than fast on normal data and two on phi = 2; ACCURACY.md).
pub const DEFAULT_SCALING: ScalingMode = ScalingMode::Norm;

/// The scaling a call asking for `requested` runs ([`Options::scaling`]): the default when
/// none, and norm for accurate (which needs the coarse product, not implemented here).
pub fn effective_scaling(requested: Option<ScalingMode>) -> ScalingMode {
    match requested.unwrap_or(DEFAULT_SCALING) {
        ScalingMode::Accurate => ScalingMode::Norm,
        s => s,
    }
}

/// From this many rows and columns of C on, the products and reconstruction run in column
/// blocks of [`LARGE_BLOCK`]: the int8 products run under the board's power cap (SM clock
/// down to 1.4 GHz at 16384^3), and the memory-bound reconstruction of one block between the
/// products of the next lets them run faster: 105.1 ms instead of 112-113 ms at 16384^3,
/// r = 15 (1.50x native instead of 1.38-1.40x; BENCHMARKS.md, session 2 kernel tuning).
pub const LARGE: usize = 16384;

/// Column block of C for calls with m, n >= [`LARGE`].
pub const LARGE_BLOCK: usize = 4096;

/// What the device pipeline computes.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// C = alpha op(A) op(B) + beta C.
    Gemm {
        /// op(A).
        transa: Trans,
        /// op(B).
        transb: Trans,
        /// Device address of B.
        b: u64,
        /// Leading dimension of B.
        ldb: usize,
    },
    /// C = alpha op(A) op(A)^T + beta C, one triangle (op(A) = A for `No`, A^T for `Yes`).
    Syrk {
        /// Triangle of C.
        uplo: Uplo,
        /// Whether A is transposed.
        trans: Trans,
    },
}

/// One call on device memory (column-major; BLAS argument checks already passed).
#[derive(Debug, Clone, Copy)]
pub struct DeviceCall {
    /// The operation.
    pub op: Op,
    /// Rows of C (syrk: n).
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// alpha (callers handle alpha == 0 and k == 0 themselves).
    pub alpha: f64,
    /// Device address of A.
    pub a: u64,
    /// Leading dimension of A.
    pub lda: usize,
    /// beta (0: C is not read).
    pub beta: f64,
    /// Device address of C.
    pub c: u64,
    /// Leading dimension of C.
    pub ldc: usize,
}

/// Moduli count and shifts of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Number of moduli (the first `moduli` of [`MODULI`]).
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
    pub needed_bits: f64,
}

/// floor(log2 |x|) from an |x| bit pattern; None for zero.
pub fn exponent_of_bits(bits: u64) -> Option<i32> {
    if bits == 0 {
        return None;
    }
    let biased = (bits >> 52) as i32;
    Some(if biased == 0 {
        (63 - bits.leading_zeros() as i32) - 1074
    } else {
        biased - 1023
    })
}

/// Bits the scaled row maxima keep with r moduli at inner dimension k: ozaki-core's fast
/// scaling (`ozaki_core::scaling`, steps 2-3 with the a-priori bound G <= 4096 k), whose shift
/// is sigma_i = p + 5 - e_i with p = min(56, floor((L_r - clog2(4096 k)) / 2)); the row maximum
/// then keeps p + 6 bits. Sharing this definition is what makes GPU and CPU results equal
/// bit for bit for the same moduli count.
pub fn bits_for(moduli: usize, k: usize) -> i32 {
    let budget = ozaki_core::moduli::CrtPlan::get(moduli.clamp(2, MAX_MODULI)).budget_bits;
    ozaki_core::scaling::shift_for_bound(budget, 4096 * k.max(1) as u64) + 6
}

/// Per-row statistics of one operand from the exponent scan.
#[derive(Debug, Clone, Copy)]
pub struct RowStats<'a> {
    /// max |x| per row, as IEEE bit patterns.
    pub maxbits: &'a [u64],
    /// sum |x| per row.
    pub abssum: &'a [f64],
    /// Norm scaling's `S_i = sum_l ā_il^2` per row (`ozaki_core::scaling`, step 3; kernel
    /// `coarse_norms_*`); empty in fast mode.
    pub coarse_sq: &'a [u64],
}

/// The owned, host-computed form of [`RowStats`]: what the scan and `coarse_norms_*` kernels
/// compute per line, from ozaki-core's definitions. For the tests and tools that study the
/// moduli rule without a GPU (`examples/moduli_rule.rs`, `examples/norm_rule_fit.rs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostRowStats {
    /// max |x| per line, as IEEE bit patterns.
    pub maxbits: Vec<u64>,
    /// sum |x| per line.
    pub abssum: Vec<f64>,
    /// `S = sum ā^2` per line (`ozaki_core::scaling::coarse_square_sum`).
    pub coarse_sq: Vec<u64>,
}

impl HostRowStats {
    /// Appends the statistics of one line.
    pub fn push(&mut self, line: &[f64]) {
        let mx = line.iter().map(|v| v.abs().to_bits()).max().unwrap_or(0);
        self.maxbits.push(mx);
        self.abssum.push(line.iter().map(|v| v.abs()).sum());
        self.coarse_sq.push(
            exponent_of_bits(mx).map_or(0, |e| ozaki_core::scaling::coarse_square_sum(line, e)),
        );
    }

    /// The borrowed view [`plan`] takes.
    pub fn view(&self) -> RowStats<'_> {
        RowStats {
            maxbits: &self.maxbits,
            abssum: &self.abssum,
            coarse_sq: &self.coarse_sq,
        }
    }
}

impl RowStats<'_> {
    /// Largest in-row spread max|x| / mean|x| over the nonzero rows (1 for constant rows).
    pub fn spread(&self, k: usize) -> f64 {
        self.maxbits
            .iter()
            .zip(self.abssum)
            .fold(1.0, |acc, (&b, &s)| acc.max(line_spread(b, s, k)))
    }
}

/// One line's max|x| / mean|x| (0 for a zero line, which [`RowStats::spread`]'s maximum
/// starting at 1 then ignores).
fn line_spread(maxbits: u64, abssum: f64, k: usize) -> f64 {
    if maxbits != 0 && abssum > 0.0 {
        f64::from_bits(maxbits) * k as f64 / abssum
    } else {
        0.0
    }
}

/// Bits each scaled operand must keep so the emulated error stays at or below native
/// DGEMM's: quantising a row to t bits of its maximum costs about 2^-t max|a_i| per entry,
/// which relative to the typical entry is 2^-t times the row's spread; `BASE_BITS` is
/// calibrated with [`SPREAD_WEIGHT`] so that t = BASE_BITS + w log2 sqrt(spread_a spread_b)
/// matches native error on the H200 measurements (BENCHMARKS.md). A calibrated rule, not a
/// bound: ozaki-core's `select` has the estimate-based choice.
///
/// Short inner dimensions need more: native DGEMM's normalised error stays about constant in
/// k while the quantisation error's shrinks like 1/sqrt(k) (random signs), so below
/// k = 4096 half a bit is added per halving of k (measured: k = 64 with 14 moduli erred 4x
/// above native).
///
/// Norm scaling ([`choose_moduli_norm`]) compares the bits each line's maximum really keeps
/// ([`norm_bits`]) with `NORM_BASE_BITS + log2 max(spread_a, spread_b) + log2(4096 / k)`
/// (the last term only below k = 4096): the theoretical weight 1 of the spread (the
/// quantisation step relative to the row's typical entry is `2^-bits` times its spread), the
/// larger side's spread, and a full bit per halving of short k. Fitted to ozaki-core's CPU
/// measurements, which give the GPU's bits for the same moduli (ACCURACY.md, "Norm scaling").
pub fn needed_bits(a: &RowStats, b: &RowStats, k: usize, scaling: ScalingMode) -> f64 {
    needed_bits_for_spreads(a.spread(k), b.spread(k), k, scaling)
}

/// [`needed_bits`] from the two operands' [`RowStats::spread`]s.
fn needed_bits_for_spreads(spread_a: f64, spread_b: f64, k: usize, scaling: ScalingMode) -> f64 {
    let short = (4096.0 / k.max(1) as f64).log2().max(0.0);
    match scaling {
        ScalingMode::Fast => {
            BASE_BITS + SPREAD_WEIGHT * 0.5 * (spread_a * spread_b).log2() + 0.5 * short
        }
        _ => NORM_BASE_BITS + spread_a.max(spread_b).log2() + short,
    }
}

/// The smallest moduli count whose bits reach `needed` at inner dimension k (all 20 when
/// none does).
pub fn choose_moduli(needed: f64, k: usize) -> usize {
    (2..=MAX_MODULI)
        .find(|&r| bits_for(r, k) as f64 >= needed)
        .unwrap_or(MAX_MODULI)
}

/// Bits the norm-scaled maximum of a line keeps, `log2(max|x| 2^σ) + 1`, with r moduli: the
/// line's shift is ozaki-core's norm scaling (`p = shift_for_bound(L, S)` with norm's budget
/// `L = floor(log2 M_r) - 1`,
/// `σ = p + 5 - e`), so this is `p + 6 + log2(max|x| / 2^e)`, in `[p + 6, p + 7)`.
/// `maxbits` is the line's nonzero max |x| bit pattern, `coarse_sq` its `S`.
pub fn norm_bits(moduli: usize, maxbits: u64, coarse_sq: u64) -> f64 {
    kept_bits(norm_budget(moduli), coarse_sq, line_mantissa(maxbits))
}

/// Norm scaling's budget `L` with r moduli.
fn norm_budget(moduli: usize) -> i32 {
    ScalingMode::Norm.budget_bits(ozaki_core::moduli::CrtPlan::get(
        moduli.clamp(2, MAX_MODULI),
    ))
}

/// [`norm_bits`] of a line with coarse square sum `coarse_sq` and `max / 2^e = mant`.
fn kept_bits(budget: i32, coarse_sq: u64, mant: f64) -> f64 {
    let p = ozaki_core::scaling::shift_for_bound(budget, coarse_sq);
    f64::from(p + 6) + mant.log2()
}

/// The fewest [`norm_bits`] any nonzero line of either operand keeps with r moduli
/// (infinite when both operands are all zero).
pub fn fewest_norm_bits(a: &RowStats, b: &RowStats, moduli: usize) -> f64 {
    NormLines::of(a, b).fewest_bits(moduli)
}

/// The lines of both operands reduced to what [`norm_bits`] depends on, once per call: the
/// auto rule tries up to 19 moduli counts, and evaluating every line for each of them cost
/// 3-10 ms of host time per call at n = 4096-16384 (measured on the H200, session 2).
/// A line's shift depends on its coarse square sum only through `clog2` (and whether it is
/// zero), so lines group into at most 66 classes; within a class the smallest mantissa of
/// the line maximum keeps the fewest bits.
struct NormLines {
    /// Per class: a representative coarse square sum and the smallest `max / 2^e` in [1, 2).
    classes: Vec<(u64, f64)>,
}

/// [`NormLines`] being gathered, one line at a time.
struct NormSlots([Option<(u64, f64)>; SHIFT_CLASSES]);

impl Default for NormSlots {
    fn default() -> Self {
        NormSlots([None; SHIFT_CLASSES])
    }
}

impl NormSlots {
    /// Adds a line with maximum `maxbits` and coarse square sum `q` (zero lines: nothing).
    fn add(&mut self, maxbits: u64, q: u64) {
        if maxbits == 0 {
            return;
        }
        let mant = line_mantissa(maxbits);
        let entry = self.0[norm_class(q)].get_or_insert((q, mant));
        entry.1 = entry.1.min(mant);
    }

    fn lines(self) -> NormLines {
        NormLines {
            classes: self.0.into_iter().flatten().collect(),
        }
    }
}

impl NormLines {
    fn of(a: &RowStats, b: &RowStats) -> NormLines {
        let mut slots = NormSlots::default();
        for s in [a, b] {
            s.maxbits
                .iter()
                .zip(s.coarse_sq)
                .for_each(|(&m, &q)| slots.add(m, q));
        }
        slots.lines()
    }

    fn fewest_bits(&self, moduli: usize) -> f64 {
        let budget = norm_budget(moduli);
        self.classes
            .iter()
            .map(|&(q, mant)| kept_bits(budget, q, mant))
            .fold(f64::INFINITY, f64::min)
    }
}

/// `max / 2^e` in [1, 2) of a nonzero line maximum given by its bits, exactly (also for
/// subnormal maxima, whose 2^e is no double).
fn line_mantissa(maxbits: u64) -> f64 {
    const EXP_MASK: u64 = 0x7ff0_0000_0000_0000;
    if maxbits & EXP_MASK != 0 {
        f64::from_bits((maxbits & !EXP_MASK & !(1 << 63)) | (1023u64 << 52))
    } else {
        let e = exponent_of_bits(maxbits).unwrap_or(0);
        ozaki_core::exact::ldexp(f64::from_bits(maxbits), -i64::from(e))
    }
}

/// Norm scaling's moduli count at inner dimension k: the smallest r at which every nonzero
/// line of both operands keeps [`norm_bits`] `>= needed_bits(.., ScalingMode::Norm)` (all 20
/// when none does). Lines that get more bits than needed cost nothing.
pub fn choose_moduli_norm(a: &RowStats, b: &RowStats, k: usize) -> usize {
    norm_moduli_for(
        &NormLines::of(a, b),
        needed_bits(a, b, k, ScalingMode::Norm),
    )
}

/// [`choose_moduli_norm`] with the lines grouped and the rule's `needed` bits computed.
fn norm_moduli_for(lines: &NormLines, needed: f64) -> usize {
    (2..=MAX_MODULI)
        .find(|&r| lines.fewest_bits(r) >= needed)
        .unwrap_or(MAX_MODULI)
}

/// The moduli count the default rule of `scaling` takes at inner dimension k for rows of
/// normally distributed entries whose in-row spread max|x| / mean|x| is `spread`: what the
/// engine prices a call at before it sees the data (`shim::route::choose`). Fast mode asks
/// `BASE_BITS + log2 spread` bits of [`bits_for`]; norm mode applies [`choose_moduli_norm`]
/// to such a row (mean 1, maximum `spread`), whose coarse square sum is about
/// `k (E y^2 + E y + 1/3)` for `y = |x| 2^(5 - e)` (the ceiling adds a uniform fraction).
pub fn typical_moduli(scaling: ScalingMode, spread: f64, k: usize) -> usize {
    let k = k.max(1);
    if scaling == ScalingMode::Fast {
        return choose_moduli(BASE_BITS + spread.log2(), k);
    }
    let max = spread.max(1.0);
    let e = max.log2().floor() as i32;
    let y = 2f64.powi(5 - e);
    let per_entry = y * y * std::f64::consts::FRAC_PI_2 + y + 1.0 / 3.0;
    let (maxbits, abssum, sq) = (
        [max.to_bits()],
        [k as f64],
        [(per_entry * k as f64).ceil() as u64],
    );
    let row = RowStats {
        maxbits: &maxbits,
        abssum: &abssum,
        coarse_sq: &sq,
    };
    choose_moduli_norm(&row, &row, k)
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

/// Classes of lines with the same norm-scaling shift: coarse square sum 0, then `clog2(S)`
/// = 0..=64 (`norm_class`).
pub const SHIFT_CLASSES: usize = 66;

/// The class of a line with coarse square sum `q`: its shift depends on `q` only through it
/// (`shift_for_bound` reads `clog2(q)` and whether `q` is zero). Kernel `line_shifts` computes
/// the same.
fn norm_class(q: u64) -> usize {
    if q == 0 {
        0
    } else {
        ozaki_core::scaling::clog2(q) as usize + 1
    }
}

/// The table kernel `line_shifts` turns into per-line shifts, `sigma = table[class] - e`:
/// `p + COARSE_BITS - 1` per [`norm_class`] with p = `shift_for_bound(L, S)` for r moduli, so
/// each line gets [`plan_into`]'s shift (fast scaling: the bound `4096 k` for every line).
fn shift_table(scaling: ScalingMode, moduli: usize, k: usize) -> [i32; SHIFT_CLASSES] {
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

/// The last automatic moduli count per scaling mode (0: none yet), the route's guess for the
/// next call: repeated calls on data of one kind take the same count.
static LAST_MODULI: [std::sync::atomic::AtomicUsize; 2] = [
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
];

/// The moduli count a call with the default rule is expected to take before its data are
/// seen: the previous automatic choice, else [`typical_moduli`] of normal rows.
fn expected_moduli(scaling: ScalingMode, k: usize) -> usize {
    match LAST_MODULI[(scaling == ScalingMode::Fast) as usize]
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        0 => typical_moduli(scaling, 4.0, k),
        r => r,
    }
}

fn remember_moduli(scaling: ScalingMode, r: usize) {
    LAST_MODULI[(scaling == ScalingMode::Fast) as usize]
        .store(r, std::sync::atomic::Ordering::Relaxed);
}

/// What one emulated call did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Moduli used (trace field `moduli`).
    pub moduli: u32,
    /// Measured phases (trace field `phases`).
    pub phases: Phases,
    /// Bits the default rule asked for ([`needed_bits`]), for calibration.
    pub needed_bits: f64,
    /// The scaling the call used (`None` only in `Outcome::default()`).
    pub scaling: Option<ScalingMode>,
}

/// Options of one emulated call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Force this many moduli (`OZAKI_MODULI`).
    pub moduli: Option<usize>,
    /// Scaling bound (`OZAKI_SCALING`); `None` is [`DEFAULT_SCALING`].
    pub scaling: Option<ScalingMode>,
    /// Largest column block (for tests of the blocked path; 0 = as memory allows).
    pub max_block: usize,
}

/// Residue and CRT tables for r = 0..=20 moduli (index r), built once per process.
fn tables() -> &'static [(ResidueTable, CrtTable)] {
    static T: std::sync::OnceLock<Vec<(ResidueTable, CrtTable)>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        (0..=MAX_MODULI)
            .map(|r| {
                let r = r.max(1);
                (ResidueTable::new(&MODULI[..r]), CrtTable::new(&MODULI[..r]))
            })
            .collect()
    })
}

/// An error from a column block after an earlier block's reconstruction wrote C: the kinds
/// that mean "declined, C untouched" become `Cuda`, so no caller runs another route on C.
fn written_c(e: GpuError) -> GpuError {
    match e {
        GpuError::NonFinite | GpuError::Unsupported(_) => {
            GpuError::Cuda(format!("{e} (after part of C was written)"))
        }
        e => e,
    }
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Runs the emulated call on `stream` and waits for it. On error C is untouched unless the
/// error came from the reconstruction launches themselves (reported as `Cuda`).
pub fn gemm(
    gpu: &mut Gpu,
    stream: sys::CUstream,
    call: &DeviceCall,
    opts: Options,
) -> Result<Outcome, GpuError> {
    let pending = enqueue(gpu, stream, call, opts)?;
    sync(stream)?;
    pending.finish()
}

/// An emulated call whose plan accepted its operands and whose work is all enqueued on its
/// stream, not yet waited for.
pub struct Pending {
    outcome: Outcome,
    marks: Marks,
}

impl Pending {
    /// The call's outcome with its phase times, once its stream has passed its work (the
    /// caller synchronised it).
    pub fn finish(self) -> Result<Outcome, GpuError> {
        Ok(Outcome {
            phases: self.marks.phases()?,
            ..self.outcome
        })
    }
}

/// [`gemm`] without the final wait: returns once the plan accepted the operands and the
/// products and reconstruction are enqueued, so a host pipeline (`host::staged_gemm`) plans
/// its next unit while the GPU still computes this one. Errors as [`gemm`]; the operands and
/// C must stay valid until the stream has passed the work.
pub fn enqueue(
    gpu: &mut Gpu,
    stream: sys::CUstream,
    call: &DeviceCall,
    opts: Options,
) -> Result<Pending, GpuError> {
    let (m, n, k) = (call.m, call.n, call.k);
    if m == 0 || n == 0 || k == 0 || call.alpha == 0.0 {
        return Err(GpuError::Unsupported(
            "empty product (handled by the caller)".into(),
        ));
    }
    if k > MAX_K {
        return Err(GpuError::Unsupported(format!(
            "k = {k} > {MAX_K} would overflow the int32 sums"
        )));
    }
    if m > i32::MAX as usize || n > i32::MAX as usize {
        return Err(GpuError::Unsupported("dimension beyond int32".into()));
    }
    let kpad = round_up(k, 16);
    let syrk = matches!(call.op, Op::Syrk { .. });
    // Element (i, l) of op(A) is contiguous along l when A is transposed.
    let (a_contig, b_operand) = match call.op {
        Op::Gemm {
            transa,
            transb,
            b,
            ldb,
        } => (transa == Trans::Yes, Some((b, ldb, transb == Trans::No))),
        Op::Syrk { trans, .. } => (trans == Trans::Yes, None),
    };
    let uplo = match call.op {
        Op::Syrk {
            uplo: Uplo::Upper, ..
        } => 1,
        Op::Syrk {
            uplo: Uplo::Lower, ..
        } => 2,
        Op::Gemm { .. } => 0,
    };
    let nb_rows = if syrk { m } else { m + n };
    let scaling = effective_scaling(opts.scaling);
    // per line: u64 max bit pattern, f64 sum |x|, u64 S_i (norm scaling)
    const STATS: usize = 24;

    let mut marks = Marks::start(stream)?;
    // 1. exponent scan
    let stats = gpu.workspace.get("scan", STATS * nb_rows)?;
    let (maxbits, abssum) = (stats, stats + 8 * nb_rows as u64);
    let coarse_sq = stats + 16 * nb_rows as u64;
    // SAFETY: stats holds nb_rows u64 maxima, nb_rows f64 sums, nb_rows u64 S_i on this device.
    unsafe { sys::cuMemsetD8Async(stats, 0, STATS * nb_rows, stream) }
        .result()
        .ctx("cuMemsetD8Async")?;
    {
        let kern = gpu.kernels()?;
        // (address, leading dimension, row contiguous, rows, first stats slot) per operand
        let mut operands = vec![(call.a, call.lda as i64, a_contig, m as i32, 0u64)];
        if let Some((b, ldb, contig)) = b_operand {
            operands.push((b, ldb as i64, contig, n as i32, m as u64));
        }
        // the scan, then with norm scaling a second pass for S_i from the row exponents
        let mut passes = vec![(PerLine::Scan, abssum)];
        if scaling == ScalingMode::Norm {
            passes.push((PerLine::CoarseNorms, coarse_sq));
        }
        for (pass, out) in passes {
            for &(x, ld, contig, rows, slot) in &operands {
                // SAFETY: A (and B) cover the BLAS-checked extents for their leading
                // dimensions; the stats have m (+ n) slots of each kind.
                unsafe {
                    kern.per_line(
                        pass,
                        stream,
                        (x, ld, contig, rows, k as i32),
                        maxbits + 8 * slot,
                        out + 8 * slot,
                    )?;
                }
            }
        }
    }
    // 2. The statistics go to the host for the plan; meanwhile the GPU already forms the shifts
    //    and residues for the moduli count the plan is expected to choose (forced, or this
    //    scaling's last automatic choice), so the host's plan no longer leaves the GPU idle
    //    between the scan and the residues (BENCHMARKS.md, session 3 kernel work). When the plan
    //    chooses another count, both are formed again; C is written only after the plan.
    let table_at = STATS * nb_rows;
    let table_bytes = 4 * SHIFT_CLASSES;
    if gpu.small.len() < table_at + table_bytes {
        // an upload from the old buffer may still be pending
        if let Some(f) = gpu.small_busy.take() {
            f.wait()?;
        }
        gpu.small = crate::memory::PinnedBuffer::new(table_at + table_bytes)?;
    }
    let host = gpu.small.as_mut_ptr();
    // SAFETY: host is pinned memory of >= STATS nb_rows bytes; the copy completes at the fence.
    unsafe { sys::cuMemcpyDtoHAsync_v2(host as *mut _, stats, STATS * nb_rows, stream) }
        .result()
        .ctx("cuMemcpyDtoH")?;
    let fence = crate::timing::Fence::record(stream)?;
    let shifts_dev = gpu.workspace.get("shifts", 4 * nb_rows + table_bytes)?;
    let table_dev = shifts_dev + 4 * nb_rows as u64;
    let sigma_dev = shifts_dev;
    let tau_dev = if syrk {
        shifts_dev
    } else {
        shifts_dev + 4 * m as u64
    };
    let plane_a = m * kpad;
    let plane_b = n * kpad;
    // 3. shifts and residues of all moduli for r moduli; returns the plane buffers
    let convert = |gpu: &mut Gpu, r: usize| -> Result<(u64, u64), GpuError> {
        // the previous upload of the table (this call's guess, or an earlier call's) is done
        if let Some(f) = gpu.small_busy.take() {
            f.wait()?;
        }
        // SAFETY: the table area follows the statistics in the pinned buffer; no upload from
        // it is pending (waited above).
        let table = unsafe {
            std::slice::from_raw_parts_mut(host.add(table_at) as *mut i32, SHIFT_CLASSES)
        };
        table.copy_from_slice(&shift_table(scaling, r, k));
        // SAFETY: pinned source, device destination of table_bytes; ordered before its user.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(table_dev, table.as_ptr() as *const _, table_bytes, stream)
        }
        .result()
        .ctx("cuMemcpyHtoD")?;
        gpu.small_busy = Some(crate::timing::Fence::record(stream)?);
        let planes_a = gpu.workspace.get("planes_a", r * plane_a)?;
        let planes_b = if syrk {
            planes_a
        } else {
            gpu.workspace.get("planes_b", r * plane_b)?
        };
        let rtab = &tables()[r].0;
        let kern = gpu.kernels()?;
        // SAFETY: the statistics hold nb_rows lines, the shifts slot nb_rows shifts and the
        // table; plane buffers hold r planes of rows x kpad bytes.
        unsafe {
            kern.line_shifts(
                stream,
                (maxbits, coarse_sq),
                nb_rows as i32,
                table_dev,
                shifts_dev,
            )?;
            kern.residues(
                stream,
                call.a,
                call.lda as i64,
                a_contig,
                m as i32,
                k as i32,
                kpad as i32,
                sigma_dev,
                rtab,
                planes_a,
                plane_a as i64,
            )?;
            if let Some((b, ldb, contig)) = b_operand {
                kern.residues(
                    stream,
                    b,
                    ldb as i64,
                    contig,
                    n as i32,
                    k as i32,
                    kpad as i32,
                    tau_dev,
                    rtab,
                    planes_b,
                    plane_b as i64,
                )?;
            }
        }
        Ok((planes_a, planes_b))
    };
    let guess = opts
        .moduli
        .unwrap_or_else(|| expected_moduli(scaling, k))
        .clamp(2, MAX_MODULI);
    let mut planes = convert(gpu, guess)?;
    fence.wait()?;
    // SAFETY: the copy has completed; the buffer is page-aligned.
    let (bits, sums, sq) = unsafe {
        (
            std::slice::from_raw_parts(host as *const u64, nb_rows),
            std::slice::from_raw_parts(host.add(8 * nb_rows) as *const f64, nb_rows),
            std::slice::from_raw_parts(host.add(16 * nb_rows) as *const u64, nb_rows),
        )
    };
    let a_stats = RowStats {
        maxbits: &bits[..m],
        abssum: &sums[..m],
        coarse_sq: &sq[..m],
    };
    let b_stats = if syrk {
        a_stats
    } else {
        RowStats {
            maxbits: &bits[m..],
            abssum: &sums[m..],
            coarse_sq: &sq[m..],
        }
    };
    // the shifts themselves come from the device (`line_shifts`, the same function of the lines)
    let plan = match plan_into(
        a_stats,
        b_stats,
        k,
        opts.moduli,
        scaling,
        (&mut [], &mut []),
    ) {
        Ok(p) => p,
        Err(e) => {
            // the speculative residues still read A and B: the caller may free them next
            sync(stream)?;
            return Err(e);
        }
    };
    let r = plan.moduli;
    if opts.moduli.is_none() {
        remember_moduli(scaling, r);
    }
    if r != guess {
        planes = convert(gpu, r)?;
    }
    let (planes_a, planes_b) = planes;
    marks.mark(Phase::Convert)?;

    // 4 + 5. products and reconstruction per column block, as large as free memory allows
    let per_col = r * m * 4;
    let mut nb = n;
    if syrk && n >= 2048 {
        nb = nb.div_ceil(4); // triangle blocks skip the other triangle's products
    }
    if !syrk && m >= LARGE && n >= LARGE {
        nb = nb.min(LARGE_BLOCK);
    }
    if opts.max_block > 0 {
        nb = nb.min(opts.max_block);
    }
    let prod = match gpu.workspace.get("products", per_col * nb) {
        Ok(p) => p,
        Err(GpuError::OutOfMemory { .. }) => {
            // measure what is really free now (the slot was released) and tile to fit
            let (free, _) = crate::memory::mem_info()?;
            let budget = free.saturating_sub(crate::memory::DEVICE_RESERVE + (64 << 20));
            nb = nb.min(budget / per_col.max(1));
            if nb > 256 {
                nb = nb / 256 * 256;
            }
            if nb == 0 {
                return Err(GpuError::OutOfMemory {
                    needed: per_col + crate::memory::DEVICE_RESERVE,
                    free,
                });
            }
            gpu.workspace.get("products", per_col * nb)?
        }
        Err(e) => return Err(e),
    };
    let ctab = &tables()[r].1;
    // One column block: its products, then its reconstruction into C. Blocks after the
    // first run once C is partly written, so their errors must not read as "declined"
    // (NonFinite / Unsupported send the device entry points to cuBLAS on the same C):
    // [`written_c`] reports them as `Cuda`, as this function's contract says.
    let mut block = |j0: usize, cols: usize| -> Result<(), GpuError> {
        // rows of C this block needs: all, or for a triangle only those at or above/below it
        let (row0, rows) = match uplo {
            1 => (0, (j0 + cols).min(m)),
            2 => (j0, m - j0),
            _ => (0, m),
        };
        let shape = Shape {
            m: rows as u64,
            n: cols as u64,
            k: kpad as u64,
            batch: r as u32,
            strides: (plane_a as i64, plane_b as i64, (rows * cols) as i64),
        };
        lt_int8::batched(
            gpu,
            stream,
            shape,
            planes_a + (row0 * kpad) as u64,
            planes_b + (j0 * kpad) as u64,
            prod,
        )?;
        marks.mark(Phase::Products)?;
        let kern = gpu.kernels()?;
        // SAFETY: prod holds r planes of rows x cols int32; C covers ldc x n doubles.
        unsafe {
            kern.reconstruct(
                stream,
                prod,
                (rows * cols) as i64,
                rows as i32,
                cols as i32,
                sigma_dev + 4 * row0 as u64,
                tau_dev + 4 * j0 as u64,
                ctab,
                call.alpha,
                call.beta,
                call.c + 8 * (row0 + j0 * call.ldc) as u64,
                call.ldc as i64,
                uplo,
                (row0 as i32, j0 as i32),
            )?;
        }
        marks.mark(Phase::Reconstruct)?;
        Ok(())
    };
    let mut j0 = 0;
    while j0 < n {
        let cols = nb.min(n - j0);
        block(j0, cols).map_err(|e| if j0 > 0 { written_c(e) } else { e })?;
        j0 += cols;
    }
    Ok(Pending {
        outcome: Outcome {
            moduli: r as u32,
            phases: Phases::default(),
            needed_bits: plan.needed_bits,
            scaling: Some(plan.scaling),
        },
        marks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponent_of_bits_matches_log2() {
        for x in [
            1.0f64,
            1.5,
            2.0,
            0.75,
            3.0e-300,
            1.0e300,
            f64::MIN_POSITIVE,
            5e-324,
            1e-310,
        ] {
            let e = exponent_of_bits(x.to_bits()).unwrap();
            assert!(2f64.powi(e) <= x || e < -1022, "{x}: {e}");
            assert_eq!(e, x.log2().floor() as i32, "{x}");
        }
        assert_eq!(exponent_of_bits(0), None);
    }

    #[test]
    fn plan_keeps_products_inside_half_the_modulus_range() {
        for r in 2..=MAX_MODULI {
            for k in [1usize, 2, 1000, 4096, 16384, 131072] {
                let t = bits_for(r, k);
                if t < 1 {
                    continue;
                }
                // |a'|, |b'| <= 2^t, so |c'| <= k 2^(2t) must stay below M/2
                let big_m = crate::crt::product(&MODULI[..r]);
                let bound = num_bigint::BigUint::from(k.next_power_of_two()) << (2 * t as usize);
                assert!(bound * 2u32 < big_m, "r = {r}, k = {k}, t = {t}");
                assert!(t <= 62, "scaled entries fit i64 (ozaki-core caps p at 56)");
            }
        }
    }

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

    /// A block that fails after C was partly written never reads as "declined" (which would
    /// let the device entry points run cuBLAS on that C); other kinds keep their meaning.
    #[test]
    fn errors_after_c_was_written_are_not_declines() {
        for e in [
            GpuError::NonFinite,
            GpuError::Unsupported("no algorithm".into()),
        ] {
            assert!(matches!(written_c(e), GpuError::Cuda(_)));
        }
        let oom = GpuError::OutOfMemory { needed: 1, free: 0 };
        assert!(matches!(written_c(oom), GpuError::OutOfMemory { .. }));
    }

    #[test]
    fn grouped_fewest_norm_bits_equals_the_line_by_line_minimum() {
        // maxima: normal, subnormal, powers of two, zero lines; square sums 0, 1, powers of
        // two and their neighbours (clog2 class edges)
        let maxima: Vec<u64> = [
            1.0,
            1.999,
            1.5e-310,
            3.0,
            0.75,
            0.0,
            2.0f64.powi(-1060),
            7.9,
        ]
        .iter()
        .map(|x: &f64| x.to_bits())
        .collect();
        let sq: Vec<u64> = vec![0, 1, 4096, 4097, 4095, 77, 1 << 40, (1 << 40) + 1];
        let sums = vec![1.0; maxima.len()];
        let a = RowStats {
            maxbits: &maxima,
            abssum: &sums,
            coarse_sq: &sq,
        };
        let (mb, sb) = (&maxima[3..], &sq[..5]);
        let b = RowStats {
            maxbits: mb,
            abssum: &sums[..5],
            coarse_sq: sb,
        };
        for r in 2..=MAX_MODULI {
            let brute = [&a, &b]
                .iter()
                .flat_map(|s| s.maxbits.iter().zip(s.coarse_sq))
                .filter(|(m, _)| **m != 0)
                .map(|(&m, &q)| norm_bits(r, m, q))
                .fold(f64::INFINITY, f64::min);
            assert_eq!(fewest_norm_bits(&a, &b, r), brute, "r = {r}");
        }
    }

    #[test]
    fn moduli_grow_with_k_and_with_spread() {
        let flat_max = [1f64.to_bits(); 4];
        let flat_sum = [64.0; 4]; // every |x| = 1: spread 1
        let flat = RowStats {
            maxbits: &flat_max,
            abssum: &flat_sum,
            coarse_sq: &[],
        };
        let spiky_sum = [1.5; 4]; // one entry 1, the rest tiny: spread ~ 43
        let spiky = RowStats {
            maxbits: &flat_max,
            abssum: &spiky_sum,
            coarse_sq: &[],
        };
        assert_eq!(flat.spread(64), 1.0);
        assert!(spiky.spread(64) > 40.0);
        let r_flat = choose_moduli(needed_bits(&flat, &flat, 64, ScalingMode::Fast), 64);
        let r_spiky = choose_moduli(needed_bits(&spiky, &spiky, 64, ScalingMode::Fast), 64);
        assert!(r_flat < r_spiky, "{r_flat} vs {r_spiky}");
        assert!(choose_moduli(50.0, 64) <= choose_moduli(50.0, 16384));
        assert!(bits_for(choose_moduli(50.0, 16384), 16384) >= 50);
        assert_eq!(
            choose_moduli(500.0, 64),
            MAX_MODULI,
            "unreachable accuracy takes every modulus"
        );
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

    #[test]
    fn norm_bits_never_fall_below_fast_bits() {
        // S <= 4096 k and norm's budget is one bit larger: every line keeps at least as many
        // bits as in fast mode, whatever the maximum's place in its binade.
        for r in 2..=MAX_MODULI {
            for k in [1usize, 100, 4096, 16384] {
                for (mx, sq) in [
                    (1.0f64, 4096 * k as u64),
                    (1.99, 4096 * k as u64),
                    (3.0, 70 * k as u64),
                    (1e-300, 1),
                ] {
                    assert!(
                        norm_bits(r, mx.to_bits(), sq) >= f64::from(bits_for(r, k)),
                        "r = {r} k = {k} max {mx}"
                    );
                }
            }
        }
    }

    #[test]
    fn typical_counts_price_norm_at_most_fast_and_fourteen_on_normal_rows() {
        // (below k = 256 norm's rule asks a full bit per halving of k, fast's pricing none)
        for k in [256usize, 1024, 4096, 8192, 16384, 65536] {
            let (norm, fast) = (
                typical_moduli(ScalingMode::Norm, 4.0, k),
                typical_moduli(ScalingMode::Fast, 4.0, k),
            );
            assert!(norm <= fast, "k = {k}: norm {norm}, fast {fast}");
        }
        for k in [4096usize, 8192, 16384] {
            assert_eq!(typical_moduli(ScalingMode::Norm, 4.0, k), 14, "k = {k}");
        }
        assert_eq!(typical_moduli(ScalingMode::Fast, 4.0, 16384), 16);
    }

    /// `coarse_sq` in kernels/ozaki.cu computes `ā^2` as `max(ceil(scalbn(|x|, 5 - e)), 1)^2`
    /// in fp64; this mirror of that formula (ozaki-core's `ldexp` rounds once like `scalbn`)
    /// equals ozaki-core's integer definition, also where the scaled value is subnormal or
    /// rounds to zero.
    #[test]
    fn the_kernels_float_formula_for_coarse_magnitudes_is_exact() {
        use ozaki_core::exact::ldexp;
        use ozaki_core::scaling::coarse;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for e in [-1074, -1073, -1022, -1000, -3, 0, 1, 700, 1023] {
            let top = ldexp(1.0, i64::from(e) + 1); // 2^(e+1) (inf for e = 1023)
            let mut tested = 0;
            for _ in 0..2000 {
                // any finite |x| < 2^(e+1): a random significand, down to 1100 binades lower
                let bits = next();
                let drop = (bits % 1100) as i32;
                let mant = 1.0 + (bits >> 11) as f64 / (1u64 << 53) as f64;
                let x = ldexp(mant, i64::from(e - drop));
                if x == 0.0 || x >= top || !x.is_finite() {
                    continue;
                }
                let f = ldexp(x, i64::from(5 - e)).ceil().max(1.0);
                assert_eq!(f as u64, u64::from(coarse(x, e)), "x = {x:e}, e = {e}");
                tested += 1;
            }
            assert!(tested > 0, "e = {e}: no value tested");
            // exact multiples of 2^(e-5) and their neighbours
            for c in 1..=64u32 {
                let x = ldexp(f64::from(c), i64::from(e - 5));
                if x == 0.0 || !x.is_finite() || x >= top {
                    continue;
                }
                for y in [
                    x,
                    f64::from_bits(x.to_bits() + 1),
                    f64::from_bits(x.to_bits() - 1),
                ] {
                    if y > 0.0 && y < top {
                        let f = ldexp(y, i64::from(5 - e)).ceil().max(1.0);
                        assert_eq!(f as u64, u64::from(coarse(y, e)), "x = {y:e}, e = {e}");
                    }
                }
            }
        }
    }

    #[test]
    fn norm_bits_of_subnormal_maxima_are_finite_and_match_normal_ones() {
        // a maximum keeps the bits of its significand, at any binade (subnormals included)
        for mant in [1.0f64, 1.5, 1.999] {
            for e in [-1074i64, -1060, -1023, -1022, -5, 1000] {
                let x = ozaki_core::exact::ldexp(mant, e); // may round below 2^-1022
                let e = exponent_of_bits(x.to_bits()).unwrap();
                let normal = ozaki_core::exact::ldexp(x, -i64::from(e)); // its significand
                let (b, want) = (
                    norm_bits(14, x.to_bits(), 4096),
                    norm_bits(14, normal.to_bits(), 4096),
                );
                assert!(b.is_finite() && b == want, "{x:e}: {b} vs {want}");
            }
        }
    }
}
