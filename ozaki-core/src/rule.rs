//! The accuracy rule: from k, the accuracy mode and per-line statistics of op(A) and op(B),
//! the moduli count of an emulated call, or a typed decline ([`Fallback`]) before any
//! residue or product is formed. Every emulated route (`cpu-ozaki`, `gpu-ozaki` host- and
//! device-resident, split tiles) and the engine's pricing ([`typical_moduli`]) use it.
//!
//! # Line statistics ([`LineTable`], [`Lines`])
//! Per line x (a row of op(A) or a column of op(B), k entries) with `e = E(max |x|)` (as in
//! [`crate::scaling`]), all exact integers, so any summation order (GPU atomics) gives the
//! same values:
//! - `maxbits`: the bit pattern of `max |x|` (NaN/Inf: `>= 0x7ff0...`);
//! - `coarse_sq`: norm scaling's `S = sum ā^2` ([`crate::scaling`], step 3);
//! - `abs1 = sum floor(|x| 2^(40 - e))`, `abs2 = sum floor((|x| 2^-e)^2 2^40)`: the 1- and
//!   squared 2-norm of the line relative to `2^e`, in fixed point with [`FIX_BITS`] bits;
//! - `log_depth = sum (e - E(x))` and `nonzeros` over the nonzero entries: the mean depth
//!   `D = log_depth / nonzeros` in binades, so `2^-D` bounds the geometric mean of
//!   `|x| / 2^e` from below;
//! - `range`: `depth = max (e - E(x))` (low 32 bits) and `span = max (e - lsb(x))` (high 32
//!   bits), `lsb(x)` the exponent of the lowest set bit of x: with shift `σ = p + 5 - e` the
//!   line scales to integers exactly iff `p + 5 >= span`.
//!
//! One pass over the line once `e` is known, which also forms `S`: on the GPU in the same
//! read of the operand as the line's maximum where a block holds whole lines (its registers
//! or the L1 its first read filled), else a second per-line pass.
//!
//! # Side summaries ([`summary`])
//! The rule does not read the lines one by one: each line becomes a few integer keys (its
//! shift class, span, depth, quarter-bit concentration and typical entry) and each side the
//! maxima of those keys per (shift class, span) plus the set of concentrations that occur, a
//! fixed-size block of words ([`SideSummary`]). Every per-side maximum the rule takes is a
//! monotone function of one of these keys, so the summary gives exactly the maxima the lines
//! give (the proof is in [`summary`]'s doc). The GPU forms the summaries on the device and
//! downloads them instead of the per-line table; `cpu-ozaki` forms the same words from its
//! own statistics ([`choose`]); both then call [`choose_summarised`].
//!
//! # The estimate (`OZAKI_ACCURACY=default`)
//! With shift `p_i` a row's entries are quantised in steps of `2^(e_i - p_i - 5)`; rounding
//! to nearest errs by a uniform fraction of a step, standard deviation `step / sqrt(12)`
//! (`step / sqrt(3)` for truncation), and not at all on a line that scales exactly. The
//! emulated entry's error is `sum_l δ_il b_lj + a_il δ'_lj` (+ a negligible cross term);
//! with independent signs its standard deviation is
//! `step_i ||b_j||_2 / sqrt(12) + step'_j ||a_i||_2 / sqrt(12)`. It is measured against
//! `(|A||B|)_ij`, which per-line statistics cannot know (two lines with disjoint supports
//! give 0); the rule uses the *typical-meets-mass* estimate
//!
//! ```text
//! D_ij ~ c'_j t_i ||b_j||_1   (for a's errors),   c_i ||a_i||_1 t'_j   (for b's errors)
//! ```
//!
//! (the mass of one line meets typical entries of the other). The typical entry `t` is the
//! log-normal mean `2^-D exp((ln 2 s)^2 / 2)` of the line's depths `e - E(x)` (mean `D`,
//! deviation `s`), at most [`LOGNORMAL_CAP_BITS`] above `2^-D` and capped by the line's mean
//! magnitude: robust against rare large entries
//! (with 0.1% of the entries 10^8 larger, `||a_i||_1 ||b_j||_1 / k` would overstate
//! `(|A||B|)_ij` by 10^4; `t` stays at the bulk's level). `c = 10^(-RELIABILITY_DIGITS /
//! n_eff)` discounts lines whose mass sits in `n_eff = (||x||_1 / ||x||_2)^2` entries, which
//! may all meet small entries of the other line. Native fp64's error is estimated the same
//! way: `u sqrt(k/6) ||x||_2 / D_ij` for the terms `x_l = a_il b_lj`, at least
//! `u sqrt(k/6) min(g_i, g'_j)` with `g = ||x||_2 / ||x||_1`. The rule asks, for every pair of
//! lines, `κ ρ_ij <= max(T, κ ν_ij)` (`κ = 3.5`, `T = 4 u`, [`DEFAULT_TARGET_ULPS`]), i.e. 3.5
//! standard deviations of the emulation's error within native's or 4 u, a factor 2 inside
//! the contract `max(2 x native, 4 u)`; the pairs are bounded through four per-side maxima
//! (`judge`). The smallest count that meets it and covers every line is taken; if 20 moduli
//! do not, the call declines ([`Fallback::AccuracyUnreachable`]). This happens where the small entries of a
//! wide-range line would need more than the 62 bits a scaled entry may keep (`p <= 56`):
//! sparse outliers 10^8 or more above the rest, exponent spread `φ >= 4`.
//!
//! It is an estimate, not a bound: it assumes the signs of the quantisation errors are
//! independent and that the large entries of a line do not all meet the small entries of
//! the other. Inputs built against it (supports arranged so that each entry sums only the
//! small parts of both lines) can err more; `guaranteed` is for those.
//!
//! # Normwise (`OZAKI_ACCURACY=normwise`)
//! Ozaki-II's natural bound is normwise: with RN,
//! `|ĉ_ij - c_ij| <= 2^-(p_i+6) 2^(e_i+1) ||b_j||_1 + 2^-(q_j+6) 2^(f_j+1) ||a_i||_1 +
//! k 2^-(p_i+q_j+12) 2^(e_i+f_j+2)`, i.e. relative to the row and column maxima
//! `max|a_i| max|b_j| k` about `2^-(p+5)`. Normwise mode takes the estimate above with the
//! typical entry replaced by the line's scale `2^e` (each line's maximum keeps the bits) and
//! never declines for accuracy: the small entries of a wide-range line lose bits, the error
//! relative to the maxima stays at fp64's level.
//!
//! # Guaranteed (`OZAKI_ACCURACY=guaranteed`)
//! A deterministic bound: an entry `x` of a line with depth `d = e - E(x) <= depth` errs
//! by at most half a step, relative `ε = 2^(depth - p - 6)` (RN; twice that for truncation;
//! 0 on a line that scales exactly), so every product term `a_il b_lj` is off by at most
//! `(ε_i + ε'_j + ε_i ε'_j) |a_il b_lj|`, and with the exact CRT and the final rounding
//!
//! ```text
//! |ĉ_ij - c_ij| <= ((ε_i + ε'_j + ε_i ε'_j)(1 + u) + u) (|A||B|)_ij.
//! ```
//!
//! The count is the smallest whose worst pair meets fp64's worst-case bound `γ_k`; where
//! 20 moduli cannot the call declines ([`Fallback::BoundUnreachable`]): at the shift cap
//! `p = 56`, `2ε + u <= γ_k` needs `depth <= 8 + log2 (k - 1)` on the deepest lines of both
//! sides. This is componentwise and needs no estimate of `(|A||B|)_ij`. Where it emulates
//! normal data it takes 16-18 moduli, 2-4 above the default; but that depth limit lies only
//! a few binades below a normal line's usual smallest entry (about `log2 k + 1.5` binades
//! under its maximum), so the call's deepest entry decides, whatever k:
//! small normal operands emulate at any k, operands of a hundred or more normal lines
//! mostly decline (`ozaki-core/tests/rule.rs`,
//! `guaranteed_mode_on_normal_data_is_decided_by_the_deepest_entry_not_by_k`).
//!
//! # Entry independence
//! The shifts of a line depend on that line and the count only (fast and norm scaling;
//! accurate scaling's come from the whole coarse product). The count is the smallest that
//! every pair of lines accepts, so a sub-product (rows 0..19 of op(A)) can take fewer
//! moduli than the full call only if a line outside it needs more. The statistics enter
//! rounded to quarter bits (`side`): benign lines round alike, and the count changes
//! only where a line outside the sub-product is the one that needs more (a row of outliers
//! in a matrix of normal rows, say). That is the departure from "an entry
//! depends on its own row and column only": the count is the call's.

use crate::fallback::Fallback;
use crate::moduli::{CrtPlan, MAX_MODULI, MIN_MODULI};
use crate::scaling::{COARSE_BITS, MIN_SHIFT, Quantizer, ScalingMode, class_bound, clog2, coarse};

pub mod plan;
pub mod summary;

pub use summary::{KeyParams, SideSummary, SummaryView};

/// Fixed-point fraction bits of `abs1` and `abs2` (module doc, "Line statistics").
pub const FIX_BITS: i32 = 40;

/// `T` of the default rule in units of `u` (module doc).
pub const DEFAULT_TARGET_ULPS: f64 = 4.0;

/// Standard deviations of the estimate (module doc, `κ`).
pub const KAPPA: f64 = 3.5;

/// The mass of a line with `n_eff` effective entries is assumed to meet at least
/// `10^(-RELIABILITY_DIGITS / n_eff)` of the other line's typical entry (module doc).
pub const RELIABILITY_DIGITS: f64 = 3.0;

/// Most bits the typical entry `t` may lie above the lines' geometric mean `2^-D` (module
/// doc): the log-normal mean's correction, capped.
pub const LOGNORMAL_CAP_BITS: f64 = 4.0;

/// Bit patterns at or above this are NaN or infinite.
pub const NON_FINITE_BITS: u64 = 0x7ff0_0000_0000_0000;

const U: f64 = 1.0 / (1u64 << 53) as f64;

/// floor(log2 |x|) from an |x| bit pattern (subnormals: their true exponent); None for zero.
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

/// The exponent of the lowest set bit of a finite nonzero |x| bit pattern.
pub fn lowest_bit_exponent(bits: u64) -> i32 {
    let biased = (bits >> 52) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if biased == 0 {
        frac.trailing_zeros() as i32 - 1074
    } else {
        (frac | (1u64 << 52)).trailing_zeros() as i32 + biased - 1023 - 52
    }
}

/// How strict the rule is (`OZAKI_ACCURACY`; module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Accuracy {
    /// The estimate against native fp64's, componentwise (default).
    #[default]
    Default,
    /// Ozaki-II's normwise bound: relative to the row and column maxima.
    Normwise,
    /// The deterministic componentwise bound within fp64's `γ_k`.
    Guaranteed,
}

impl Accuracy {
    /// The name used by `OZAKI_ACCURACY` and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Accuracy::Default => "default",
            Accuracy::Normwise => "normwise",
            Accuracy::Guaranteed => "guaranteed",
        }
    }
}

impl std::str::FromStr for Accuracy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "default" => Ok(Accuracy::Default),
            "normwise" => Ok(Accuracy::Normwise),
            "guaranteed" => Ok(Accuracy::Guaranteed),
            other => Err(format!(
                "unknown accuracy {other:?} (expected default, normwise or guaranteed)"
            )),
        }
    }
}

/// The statistics of one line (module doc, "Line statistics").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineStat {
    /// `max |x|` bit pattern.
    pub maxbits: u64,
    /// `S = sum ā^2`.
    pub coarse_sq: u64,
    /// `sum floor(|x| 2^(40 - e))`.
    pub abs1: u64,
    /// `sum floor((|x| 2^-e)^2 2^40)`.
    pub abs2: u64,
    /// `sum (e - E(x))` over nonzero entries.
    pub log_depth: u64,
    /// `sum (e - E(x))^2` over nonzero entries.
    pub log_depth_sq: u64,
    /// Nonzero entries.
    pub nonzeros: u64,
    /// `depth | span << 32`.
    pub range: u64,
}

impl LineStat {
    /// The statistics of a line (what the GPU's scan passes compute).
    pub fn of(line: &[f64]) -> LineStat {
        let maxbits = line.iter().map(|v| v.abs().to_bits()).max().unwrap_or(0);
        let mut s = LineStat {
            maxbits,
            ..LineStat::default()
        };
        let Some(e) = exponent_of_bits(maxbits).filter(|_| maxbits < NON_FINITE_BITS) else {
            return s;
        };
        let (mut depth, mut span) = (0u32, 0u32);
        for &v in line {
            let Some(t) = entry_terms(v, e) else { continue };
            s.coarse_sq += t.coarse_sq;
            s.abs1 += t.abs1;
            s.abs2 += t.abs2;
            s.log_depth += u64::from(t.depth);
            s.log_depth_sq += u64::from(t.depth) * u64::from(t.depth);
            s.nonzeros += 1;
            depth = depth.max(t.depth);
            span = span.max(t.span);
        }
        s.range = u64::from(depth) | u64::from(span) << 32;
        s
    }
}

/// One entry's terms of the line statistics (`None` for zeros), as the GPU kernel forms them.
#[derive(Debug, Clone, Copy)]
struct EntryTerms {
    coarse_sq: u64,
    abs1: u64,
    abs2: u64,
    depth: u32,
    span: u32,
}

#[inline]
fn entry_terms(v: f64, e: i32) -> Option<EntryTerms> {
    if v == 0.0 {
        return None;
    }
    let bits = v.abs().to_bits();
    let ex = exponent_of_bits(bits)?;
    let c = u64::from(coarse(v, e));
    let y = crate::exact::ldexp(v.abs(), i64::from(-e));
    Some(EntryTerms {
        coarse_sq: c * c,
        abs1: crate::exact::ldexp(v.abs(), i64::from(FIX_BITS - e)).floor() as u64,
        abs2: crate::exact::ldexp(y * y, i64::from(FIX_BITS)).floor() as u64,
        depth: (e - ex) as u32,
        span: (e - lowest_bit_exponent(bits)) as u32,
    })
}

/// The statistics of many lines, one vector per field (the GPU's layout).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineTable {
    /// `maxbits` per line.
    pub maxbits: Vec<u64>,
    /// `coarse_sq` per line.
    pub coarse_sq: Vec<u64>,
    /// `abs1` per line.
    pub abs1: Vec<u64>,
    /// `abs2` per line.
    pub abs2: Vec<u64>,
    /// `log_depth` per line.
    pub log_depth: Vec<u64>,
    /// `log_depth_sq` per line.
    pub log_depth_sq: Vec<u64>,
    /// `nonzeros` per line.
    pub nonzeros: Vec<u64>,
    /// `range` per line.
    pub range: Vec<u64>,
}

impl LineTable {
    /// Appends the statistics of one line.
    pub fn push(&mut self, line: &[f64]) {
        let s = LineStat::of(line);
        self.maxbits.push(s.maxbits);
        self.coarse_sq.push(s.coarse_sq);
        self.abs1.push(s.abs1);
        self.abs2.push(s.abs2);
        self.log_depth.push(s.log_depth);
        self.log_depth_sq.push(s.log_depth_sq);
        self.nonzeros.push(s.nonzeros);
        self.range.push(s.range);
    }

    /// The statistics of `lines` lines packed one after another, `k` entries each.
    pub fn of_packed(x: &[f64], lines: usize, k: usize) -> LineTable {
        let mut t = LineTable::default();
        for i in 0..lines {
            t.push(&x[i * k..(i + 1) * k]);
        }
        t
    }

    /// The borrowed view the rule takes.
    pub fn view(&self) -> Lines<'_> {
        Lines {
            maxbits: &self.maxbits,
            coarse_sq: &self.coarse_sq,
            abs1: &self.abs1,
            abs2: &self.abs2,
            log_depth: &self.log_depth,
            log_depth_sq: &self.log_depth_sq,
            nonzeros: &self.nonzeros,
            range: &self.range,
        }
    }
}

/// Borrowed line statistics, one slice per field of equal length.
#[derive(Debug, Clone, Copy)]
pub struct Lines<'a> {
    /// `maxbits` per line.
    pub maxbits: &'a [u64],
    /// `coarse_sq` per line.
    pub coarse_sq: &'a [u64],
    /// `abs1` per line.
    pub abs1: &'a [u64],
    /// `abs2` per line.
    pub abs2: &'a [u64],
    /// `log_depth` per line.
    pub log_depth: &'a [u64],
    /// `log_depth_sq` per line.
    pub log_depth_sq: &'a [u64],
    /// `nonzeros` per line.
    pub nonzeros: &'a [u64],
    /// `range` per line.
    pub range: &'a [u64],
}

impl<'a> Lines<'a> {
    /// Number of lines.
    pub fn len(&self) -> usize {
        self.maxbits.len()
    }

    /// Whether there are no lines.
    pub fn is_empty(&self) -> bool {
        self.maxbits.is_empty()
    }

    /// Lines `r` only.
    pub fn slice(&self, r: std::ops::Range<usize>) -> Lines<'a> {
        Lines {
            maxbits: &self.maxbits[r.clone()],
            coarse_sq: &self.coarse_sq[r.clone()],
            abs1: &self.abs1[r.clone()],
            abs2: &self.abs2[r.clone()],
            log_depth: &self.log_depth[r.clone()],
            log_depth_sq: &self.log_depth_sq[r.clone()],
            nonzeros: &self.nonzeros[r.clone()],
            range: &self.range[r],
        }
    }

    /// An owned copy.
    pub fn to_table(&self) -> LineTable {
        LineTable {
            maxbits: self.maxbits.to_vec(),
            coarse_sq: self.coarse_sq.to_vec(),
            abs1: self.abs1.to_vec(),
            abs2: self.abs2.to_vec(),
            log_depth: self.log_depth.to_vec(),
            log_depth_sq: self.log_depth_sq.to_vec(),
            nonzeros: self.nonzeros.to_vec(),
            range: self.range.to_vec(),
        }
    }

    /// The line exponents `e` (None for zero lines).
    pub fn exponents(&self) -> Vec<Option<i32>> {
        self.maxbits.iter().map(|&b| exponent_of_bits(b)).collect()
    }
}

/// Where the lines' shift bounds come from ([`crate::scaling`], step 3).
#[derive(Debug, Clone, Copy)]
pub enum Bounds<'a> {
    /// `4096 k` for every line.
    Fast,
    /// The lines' own `S` (`coarse_sq`).
    Norm,
    /// Given per line (accurate scaling's coarse-product maxima): rows of op(A), columns of
    /// op(B).
    Given(&'a [u64], &'a [u64]),
}

/// What the call asks of the rule.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Inner dimension.
    pub k: usize,
    /// The scaling mode (its budget) and the lines' bounds.
    pub scaling: ScalingMode,
    /// The bounds of the shifts.
    pub bounds: Bounds<'a>,
    /// Strictness.
    pub accuracy: Accuracy,
    /// `OZAKI_MODULI`.
    pub forced: Option<usize>,
    /// Rounding of the scaled entries.
    pub quantizer: Quantizer,
    /// `T` in units of u (default and normwise).
    pub target_ulps: f64,
}

impl Request<'_> {
    /// The default request for a scaling mode: its own bounds (norm: `S`, fast: `4096 k`).
    pub fn new(k: usize, scaling: ScalingMode) -> Request<'static> {
        Request {
            k,
            scaling,
            bounds: match scaling {
                ScalingMode::Fast => Bounds::Fast,
                _ => Bounds::Norm,
            },
            accuracy: Accuracy::Default,
            forced: None,
            quantizer: Quantizer::Nearest,
            target_ulps: DEFAULT_TARGET_ULPS,
        }
    }
}

/// The rule's answer for a call that emulates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// Moduli count.
    pub moduli: usize,
    /// At that count: the estimate `κ max ρ_ij` in units of u (default, normwise), or the
    /// bound in units of `γ_k` (guaranteed).
    pub estimate: f64,
}

/// `2^n` for `n` in the normal range, from its bit pattern (exact).
#[inline]
fn pow2_normal(n: i64) -> Option<f64> {
    (-1022..=1023)
        .contains(&n)
        .then(|| f64::from_bits(((n + 1023) as u64) << 52))
}

/// `log2 x` for finite `x > 0` from its exponent and a 256-entry table of the significand
/// with linear interpolation (error below `2^-17`): the rule reads its statistics on
/// quarter-bit grids, and this keeps the host step at a few nanoseconds per line. The
/// significand of a normal `x` comes from its bits (what `ldexp(x, -e)` gives, exactly).
#[inline]
fn log2_fast(x: f64) -> f64 {
    let t = log2_table();
    let bits = x.to_bits();
    let e = exponent_of_bits(bits).unwrap_or(-1075);
    let m = if bits >> 52 != 0 {
        f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52)) // in [1, 2)
    } else {
        crate::exact::ldexp(x, i64::from(-e))
    };
    let f = (m - 1.0) * 256.0;
    let i = (f as usize).min(255);
    let w = f - i as f64;
    f64::from(e) + t[i] + (t[i + 1] - t[i]) * w
}

/// The table of `log2_fast`: `log2(1 + i / 256)` for i = 0..=256 (the GPU's summary kernel
/// gets these values, so both evaluate the same function).
pub fn log2_table() -> &'static [f64; 257] {
    static TABLE: std::sync::OnceLock<[f64; 257]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| std::array::from_fn(|i| (1.0 + i as f64 / 256.0).log2()))
}

/// `2^(q/4)`: the quarter's factor times a power of two, exact (and equal to
/// `ldexp(factor, q div 4)`) wherever the result is normal.
#[inline]
fn pow2_quarters(q: i64) -> f64 {
    const FRAC: [f64; 4] = [
        1.0,
        1.189_207_115_002_721,
        std::f64::consts::SQRT_2,
        1.681_792_830_507_429,
    ];
    let frac = FRAC[q.rem_euclid(4) as usize];
    match pow2_normal(q.div_euclid(4)) {
        Some(p) => frac * p,
        None => crate::exact::ldexp(frac, q.div_euclid(4)),
    }
}

/// `ceil(4 x)` or `floor(4 x)` as an integer (saturating, NaN to 0, as `f64::ceil` and
/// `f64::floor` then `as i64`), without a libm call: the truncation corrected by one.
#[inline]
fn quarters(x: f64, up: bool) -> i64 {
    let y = 4.0 * x;
    let t = y as i64;
    if up && (t as f64) < y {
        t.saturating_add(1)
    } else if !up && (t as f64) > y {
        t.saturating_sub(1)
    } else {
        t
    }
}

/// The lines of one side reduced to what [`judge`] reads, their statistics rounded to quarter
/// bits on the safe side (module doc, "Entry independence"): the weights `Y` (and `Y / M`)
/// do not depend on the count; the steps are grouped by shift class and span, so each count
/// costs one pass over the groups.
#[derive(Debug, Clone, Default, PartialEq)]
struct Side {
    /// `max Y` and `max Y / M` over the nonzero lines.
    weight: f64,
    weight_over_allowance: f64,
    /// Per (shift class, span): `max 1/t`, `max 1/(t M)`, `max depth`.
    groups: Vec<Group>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Group {
    bound: usize,
    span: i32,
    inv_typical: f64,
    inv_typical_over_allowance: f64,
    depth: i32,
}

/// The per-side terms that depend on a line's quarter-bit concentration only (`g =
/// floor(4 log2(||x||_2 / ||x||_1))` and its ceiling `g_up`): the weight `Y`, the allowance
/// `M` and `Y / M`.
struct Concentration<'r> {
    req: &'r Request<'r>,
    sd: f64,
    floor: f64,
    native: f64,
}

impl<'r> Concentration<'r> {
    fn new(req: &'r Request<'r>) -> Self {
        Concentration {
            req,
            sd: match req.quantizer {
                Quantizer::Nearest => 1.0 / 12f64.sqrt(),
                Quantizer::Truncate => 1.0 / 3f64.sqrt(),
            },
            floor: req.target_ulps * U / KAPPA,
            native: U * (req.k as f64 / 6.0).sqrt(),
        }
    }

    /// `(Y, M, Y / M)` of lines with concentration `(g, g_up)`.
    fn of(&self, g: i64, g_up: i64) -> (f64, f64, f64) {
        // c = 10^(-RELIABILITY_DIGITS / n_eff), n_eff = 2^(-2 g)
        let log2_c = -RELIABILITY_DIGITS * std::f64::consts::LOG2_10 * pow2_quarters(2 * g);
        let weight = self.sd
            * pow2_quarters(if self.req.accuracy == Accuracy::Normwise {
                g_up
            } else {
                quarters(f64::from(g_up as i32) / 4.0 - log2_c, true)
            });
        let allowance = if self.req.accuracy == Accuracy::Default {
            self.floor.max(self.native * pow2_quarters(g))
        } else {
            self.floor
        };
        (weight, allowance, weight / allowance)
    }
}

/// The shift bound of each line of one side: one for all (fast scaling) or per line.
#[derive(Clone, Copy)]
enum SideBounds<'a> {
    All(u64),
    Each(&'a [u64]),
}

impl SideBounds<'_> {
    #[inline]
    fn of(self, i: usize) -> u64 {
        match self {
            SideBounds::All(b) => b,
            SideBounds::Each(b) => b[i],
        }
    }
}

impl Side {
    /// The side [`judge`] reads, from a side's summary ([`summary`], "Why the summary loses
    /// nothing the rule uses"): the weights over the concentrations that occur, one group per
    /// occupied cell.
    fn of(s: &SummaryView, req: &Request) -> Side {
        let conc = Concentration::new(req);
        let mut out = Side::default();
        for (g, g_up) in s.concentrations() {
            let (weight, _, weight_over_allowance) = conc.of(g, g_up);
            out.weight = out.weight.max(weight);
            out.weight_over_allowance = out.weight_over_allowance.max(weight_over_allowance);
        }
        for c in s.cells() {
            let over_floor = c.qt_floor.map_or(0.0, |q| pow2_quarters(q) / conc.floor);
            let over_native = c.qt_native.map_or(0.0, |q| pow2_quarters(q) / conc.native);
            out.groups.push(Group {
                bound: c.class,
                span: c.span as i32,
                inv_typical: pow2_quarters(c.qt),
                inv_typical_over_allowance: over_floor.max(over_native),
                depth: c.depth as i32,
            });
        }
        out
    }
}

/// How one count fares: the estimate (or bound) and whether it passes; `None` when a line
/// is not covered.
///
/// Default and normwise: per line the step relative to its typical entry `X = step / t` (0 on
/// a line that scales exactly), the weight `Y = sd ||x||_2 / (c ||x||_1)` and `M = max(T u /
/// κ, u sqrt(k/6) g)`; every pair must have `κ (X_a Y_b + X_b Y_a) / u <= max(T, κ sqrt(k/6)
/// min(g_a, g_b))`. Since `max(T', min(x, y)) = min(max(T', x), max(T', y))`, it suffices that
/// each term is at most half of `min(M_a, M_b)`, which four per-side maxima decide.
/// Guaranteed: the per-side maxima of `ε`.
fn judge(a: &Side, b: &Side, r: usize, req: &Request) -> Option<(f64, bool)> {
    if a.groups.is_empty() || b.groups.is_empty() {
        return Some((0.0, true));
    }
    let budget = req.scaling.budget_bits(CrtPlan::get(r));
    let half = match req.quantizer {
        Quantizer::Nearest => 0.5,
        Quantizer::Truncate => 1.0,
    };
    // per side: max X, max X / M (guaranteed: max ε)
    let steps = |s: &Side| -> Option<(f64, f64)> {
        let (mut x, mut xm) = (0.0f64, 0.0f64);
        for gr in &s.groups {
            let p = crate::scaling::shift_for_bound(budget, class_bound(gr.bound));
            if gr.bound != 0 && p < MIN_SHIFT {
                return None;
            }
            if p + COARSE_BITS > gr.span {
                continue; // scales exactly
            }
            if req.accuracy == Accuracy::Guaranteed {
                x = x.max(half * 2f64.powi(gr.depth - p - COARSE_BITS + 1));
            } else {
                let step = 2f64.powi(-(p + COARSE_BITS - 1));
                x = x.max(step * gr.inv_typical);
                xm = xm.max(step * gr.inv_typical_over_allowance);
            }
        }
        Some((x, xm))
    };
    let ((xa, xma), (xb, xmb)) = (steps(a)?, steps(b)?);
    if req.accuracy == Accuracy::Guaranteed {
        let bound = (xa + xb + xa * xb) * (1.0 + U) + U;
        let g = crate::accuracy::gamma(req.k);
        return Some((bound / g, bound <= g));
    }
    let ok = [
        xma * b.weight,
        xa * b.weight_over_allowance,
        xmb * a.weight,
        xb * a.weight_over_allowance,
    ]
    .iter()
    .all(|&v| v <= 0.5);
    Some((KAPPA / U * (xa * b.weight + xb * a.weight), ok))
}

/// The rule (module doc): the moduli count for op(A)'s rows `a` and op(B)'s columns `b`, or
/// why the call must go to native fp64: [`choose_summarised`] on the lines' summaries.
pub fn choose(a: Lines, b: Lines, req: &Request) -> Result<Choice, Fallback> {
    let fast = 4096 * req.k.max(1) as u64;
    let (ba, bb) = match req.bounds {
        Bounds::Fast => (SideBounds::All(fast), SideBounds::All(fast)),
        Bounds::Norm => (SideBounds::Each(a.coarse_sq), SideBounds::Each(b.coarse_sq)),
        Bounds::Given(ra, rb) => (SideBounds::Each(ra), SideBounds::Each(rb)),
    };
    let p = KeyParams::new(req);
    let (sa, sb) = (
        SideSummary::of_lines(&a, ba, &p),
        SideSummary::of_lines(&b, bb, &p),
    );
    choose_summarised(sa.view(), sb.view(), req)
}

/// The rule on the two sides' summaries ([`summary`]; the GPU route's download, or
/// [`SideSummary::of`]). Checks, in order: NaN/Inf, the product's exponent range, a forced
/// count's validity and coverage, then the accuracy mode.
pub fn choose_summarised(
    a: SummaryView,
    b: SummaryView,
    req: &Request,
) -> Result<Choice, Fallback> {
    let (ta, tb) = (a.top(), b.top());
    if ta >= NON_FINITE_BITS || tb >= NON_FINITE_BITS {
        return Err(Fallback::NonFinite);
    }
    if let (Some(ea), Some(eb)) = (exponent_of_bits(ta), exponent_of_bits(tb))
        && ea + eb + clog2(req.k.max(1) as u64) + 8 > 1023
    {
        return Err(Fallback::ExponentRange);
    }
    if let Some(r) = req.forced
        && !(MIN_MODULI..=MAX_MODULI).contains(&r)
    {
        return Err(Fallback::InvalidModuli { moduli: r });
    }
    let (ca, cb) = (Side::of(&a, req), Side::of(&b, req));
    if let Some(r) = req.forced {
        return match judge(&ca, &cb, r, req) {
            Some((estimate, _)) => Ok(Choice {
                moduli: r,
                estimate,
            }),
            None => Err(Fallback::SpreadNotCoverable { moduli: r }),
        };
    }
    for r in MIN_MODULI..=MAX_MODULI {
        if let Some((estimate, true)) = judge(&ca, &cb, r, req) {
            return Ok(Choice {
                moduli: r,
                estimate,
            });
        }
    }
    let last = judge(&ca, &cb, MAX_MODULI, req).map_or(f64::INFINITY, |(e, _)| e);
    Err(match req.accuracy {
        Accuracy::Guaranteed => Fallback::BoundUnreachable { bound_gammas: last },
        _ => Fallback::AccuracyUnreachable {
            estimate_ulps: last,
        },
    })
}

/// The count the rule takes for lines of standard normal entries at inner dimension `k`
/// (what the engine prices a call at before it sees the data): the rule applied to the
/// statistics of a seeded normal line of `min(k, 4096)` entries scaled to length k.
pub fn typical_moduli(scaling: ScalingMode, k: usize) -> usize {
    static CACHE: std::sync::Mutex<Vec<((ScalingMode, usize), usize)>> =
        std::sync::Mutex::new(Vec::new());
    let k = k.max(1);
    if let Some(&(_, r)) = CACHE
        .lock()
        .ok()
        .and_then(|c| c.iter().find(|(key, _)| *key == (scaling, k)).copied())
        .as_ref()
    {
        return r;
    }
    let len = k.min(4096);
    let mut rng = crate::testutil::Rng::new(0x6f7a_616b);
    let line = crate::testutil::matrix(crate::testutil::Family::Normal, len, 1, &mut rng);
    let mut s = LineStat::of(&line);
    // lengthen to k: the sums grow with the line, the maxima and depths stay
    let grow = |x: u64| (x as f64 * k as f64 / len as f64).round() as u64;
    s.coarse_sq = grow(s.coarse_sq);
    s.abs1 = grow(s.abs1);
    s.abs2 = grow(s.abs2);
    s.log_depth = grow(s.log_depth);
    s.log_depth_sq = grow(s.log_depth_sq);
    s.nonzeros = grow(s.nonzeros);
    let t = LineTable {
        maxbits: vec![s.maxbits],
        coarse_sq: vec![s.coarse_sq],
        abs1: vec![s.abs1],
        abs2: vec![s.abs2],
        log_depth: vec![s.log_depth],
        log_depth_sq: vec![s.log_depth_sq],
        nonzeros: vec![s.nonzeros],
        range: vec![s.range],
    };
    let r = choose(t.view(), t.view(), &Request::new(k, scaling)).map_or(MAX_MODULI, |c| c.moduli);
    if let Ok(mut c) = CACHE.lock() {
        if c.len() > 256 {
            c.clear();
        }
        c.push(((scaling, k), r));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::summary::{CONC_OFFSET, LineKey};
    use super::*;

    #[test]
    fn lowest_bits_and_exponents() {
        for (x, lsb) in [
            (1.0f64, 0),
            (3.0, 0),
            (0.75, -2),
            (6.0, 1),
            (5e-324, -1074),
            (1.0 + f64::EPSILON, -52),
        ] {
            assert_eq!(lowest_bit_exponent(x.to_bits()), lsb, "{x}");
        }
        assert_eq!(exponent_of_bits(0.75f64.to_bits()), Some(-1));
        assert_eq!(exponent_of_bits(0), None);
    }

    /// The side computed line by line: every line's weights and group values from its keys,
    /// then the maxima. This is the definition the summary must reproduce.
    fn per_line_side(keys: &[LineKey], req: &Request) -> Side {
        let conc = Concentration::new(req);
        let mut out = Side::default();
        for k in keys {
            let (weight, allowance, weight_over_allowance) = conc.of(k.g, k.g + i64::from(k.g_up));
            out.weight = out.weight.max(weight);
            out.weight_over_allowance = out.weight_over_allowance.max(weight_over_allowance);
            let inv_typical = pow2_quarters(k.qt);
            let at = out
                .groups
                .iter()
                .position(|g| (g.bound, g.span) == (k.class, k.span as i32));
            let at = at.unwrap_or_else(|| {
                out.groups.push(Group {
                    bound: k.class,
                    span: k.span as i32,
                    inv_typical: 0.0,
                    inv_typical_over_allowance: 0.0,
                    depth: 0,
                });
                out.groups.len() - 1
            });
            let g = &mut out.groups[at];
            g.inv_typical = g.inv_typical.max(inv_typical);
            g.inv_typical_over_allowance =
                g.inv_typical_over_allowance.max(inv_typical / allowance);
            g.depth = g.depth.max(k.depth as i32);
        }
        out.groups.sort_by_key(|g| (g.bound, g.span));
        out
    }

    /// The summary's side has the per-line side's groups and weights, each maximum the same
    /// up to the rounding of `2^((qt - g)/4) / N` against `2^(qt/4) / (N 2^(g/4))`, and never
    /// smaller than it by more than that rounding: the reduction loses nothing the rule reads.
    fn assert_summary_is_per_line(keys: &[LineKey], req: &Request, what: &str) {
        let p = KeyParams::new(req);
        let mut s = SideSummary::default();
        for k in keys {
            s.add(k, &p);
        }
        let mut got = Side::of(&s.view(), req);
        got.groups.sort_by_key(|g| (g.bound, g.span));
        let want = per_line_side(keys, req);
        let close = |x: f64, y: f64| x >= y * (1.0 - 4e-16) && x <= y * (1.0 + 4e-16);
        assert_eq!(got.weight, want.weight, "{what}: weight");
        assert_eq!(
            got.weight_over_allowance, want.weight_over_allowance,
            "{what}"
        );
        assert_eq!(got.groups.len(), want.groups.len(), "{what}: groups");
        for (g, w) in got.groups.iter().zip(&want.groups) {
            assert_eq!(
                (g.bound, g.span, g.depth),
                (w.bound, w.span, w.depth),
                "{what}"
            );
            assert_eq!(g.inv_typical, w.inv_typical, "{what}: 1/t");
            assert!(
                close(g.inv_typical_over_allowance, w.inv_typical_over_allowance),
                "{what}: 1/(t M) {} against the per-line {}",
                g.inv_typical_over_allowance,
                w.inv_typical_over_allowance
            );
        }
    }

    fn keys_of(x: &[f64], lines: usize, k: usize, req: &Request) -> Vec<LineKey> {
        let t = LineTable::of_packed(x, lines, k);
        let p = KeyParams::new(req);
        (0..lines)
            .filter(|&i| t.nonzeros[i] > 0)
            .map(|i| {
                let input = summary::KeyInput {
                    bound: t.coarse_sq[i],
                    abs1: t.abs1[i],
                    abs2: t.abs2[i],
                    log_depth: t.log_depth[i],
                    log_depth_sq: t.log_depth_sq[i],
                    nonzeros: t.nonzeros[i],
                    range: t.range[i],
                };
                LineKey::of(&input, &p)
            })
            .collect()
    }

    /// Lines of many kinds in one side (normal, deep, integer, one-entry, outliers, zeros),
    /// every accuracy mode: the summary's side is the per-line side.
    #[test]
    fn summary_is_the_per_line_side() {
        use crate::testutil::{Family, Rng, matrix};
        let k = 256;
        let mut rng = Rng::new(7);
        let mut x = Vec::new();
        for (fam, lines) in [
            (Family::Spread(2.0), 40),
            (Family::Normal, 60),
            (Family::Integer(9), 20),
            (Family::Spread(4.0), 10),
        ] {
            x.extend(matrix(fam, k, lines, &mut rng));
        }
        let mut spike = vec![0.0; k];
        spike[3] = 1.0;
        x.extend(&spike); // one entry: n_eff = 1, the allowance's native branch
        let mut outlier = matrix(Family::Normal, k, 1, &mut rng);
        outlier[9] *= 1e8;
        x.extend(outlier);
        x.extend(vec![0.0; k]);
        let lines = x.len() / k;
        for accuracy in [Accuracy::Default, Accuracy::Normwise, Accuracy::Guaranteed] {
            for kk in [16, k, 1 << 20] {
                let req = Request {
                    accuracy,
                    ..Request::new(kk, ScalingMode::Norm)
                };
                let keys = keys_of(&x, lines, k, &req);
                assert!(keys.len() == lines - 1);
                assert_summary_is_per_line(&keys, &req, &format!("{accuracy:?} k = {kk}"));
            }
        }
    }

    /// One cell holding a line whose allowance is the floor (large `qt`, small `g`) and one
    /// whose allowance is native's (smaller `qt`, larger `qt - g`): the cell's `1/(t M)` is
    /// the larger of the two lines' values, whichever line gives it. A summary keeping one
    /// `max qt` (or only one branch) would understate one of the two cases.
    #[test]
    fn both_allowance_branches_reach_the_cell() {
        let req = Request::new(1024, ScalingMode::Norm);
        let p = KeyParams::new(&req);
        assert!(p.g_star > -CONC_OFFSET && p.g_star < 0, "g* = {}", p.g_star);
        let key = |g: i64, qt: i64| LineKey {
            class: 20,
            span: 62,
            depth: 30,
            g,
            g_up: true,
            qt,
        };
        for (a, b) in [
            (key(p.g_star - 8, 40), key(0, 30)),
            (key(p.g_star - 8, 40), key(0, 60)),
            (key(p.g_star, 0), key(p.g_star + 1, 0)),
        ] {
            assert_summary_is_per_line(&[a, b], &req, &format!("{a:?} {b:?}"));
            assert_summary_is_per_line(&[b, a], &req, &format!("{b:?} {a:?}"));
        }
    }

    /// The summary's words decode to what was added: the largest maximum, the
    /// concentrations, the classes and the cells.
    #[test]
    fn summary_words_round_trip() {
        let req = Request::new(1024, ScalingMode::Norm);
        let p = KeyParams::new(&req);
        let mut s = SideSummary::default();
        let k1 = LineKey {
            class: 65,
            span: 62,
            depth: 7,
            g: -CONC_OFFSET,
            g_up: false,
            qt: -3,
        };
        let k2 = LineKey {
            class: 0,
            span: 0,
            depth: 0,
            g: 0,
            g_up: true,
            qt: 9000,
        };
        s.add(&k1, &p);
        s.add(&k2, &p);
        let v = s.view();
        assert_eq!(v.top(), 0);
        assert_eq!(
            v.concentrations().collect::<Vec<_>>(),
            vec![(-CONC_OFFSET, -CONC_OFFSET), (0, 1)]
        );
        assert_eq!(v.classes().collect::<Vec<_>>(), vec![0, 65]);
        let cells: Vec<_> = v.cells().collect();
        assert_eq!(cells.len(), 2);
        assert_eq!(
            (cells[0].qt, cells[0].qt_native, cells[0].depth),
            (9000, Some(9000), 0)
        );
        assert_eq!(
            (cells[1].qt, cells[1].qt_floor, cells[1].depth),
            (-3, Some(-3), 7)
        );
        assert_eq!(SideSummary::from_words(s.words()).as_ref(), Some(&s));
        assert!(SummaryView::new(&s.words()[1..]).is_none());
    }

    #[test]
    fn accuracy_names_round_trip() {
        for a in [Accuracy::Default, Accuracy::Normwise, Accuracy::Guaranteed] {
            assert_eq!(a.name().parse::<Accuracy>(), Ok(a));
        }
        assert!("exact".parse::<Accuracy>().is_err());
    }
}
