//! Scaling of op(A) and op(B) to integers (Ozaki-II step 1; paper brief §1.1).
//!
//! # Definition (the GPU route must reproduce this bit for bit)
//!
//! Notation: `op(A)` is m x k with rows `i`, `op(B)` is k x n with columns `j`; `r` moduli
//! with budget `L = L_r = floor(log2 M_r) - 2` ([`crate::moduli::CrtPlan::budget_bits`]) in
//! fast and accurate mode, `L = floor(log2 M_r) - 1` in norm mode
//! ([`ScalingMode::budget_bits`]; why it may be one bit larger: "Why the product fits").
//!
//! 1. **Exponent scan.** `E(x) = floor(log2 |x|)` for finite nonzero `x` (exact, from the
//!    bits; subnormals have their true exponent, down to -1074). Row exponent
//!    `e_i = max_l E(a_il)` over the nonzero entries of row `i` of op(A); column exponent
//!    `f_j = max_l E(b_lj)`. A row/column with no nonzero entry is a *zero line*. Any NaN or
//!    infinity sends the call to native fp64 ([`crate::emulate::Fallback::NonFinite`]).
//! 2. **Coarse magnitudes** (accurate and norm modes): `ā_il = ceil(|a_il| · 2^(5 - e_i))` and
//!    `b̄_lj = ceil(|b_lj| · 2^(5 - f_j))`, integers in `[0, 64]` (`ā = 0` iff `a = 0`), so
//!    `|a_il| <= ā_il · 2^(e_i - 5)`. Their exact integer product `G = Ā B̄`
//!    (`G_ij = sum_l ā_il b̄_lj`) bounds `(|A||B|)_ij <= 2^(e_i + f_j - 10) G_ij`.
//! 3. **Shifts.** Each line gets a bound: a row bound `R_i` with `G_ij <= sqrt(R_i K_j)` for
//!    every `j`, and a column bound `K_j`, taken by the [`ScalingMode`]:
//!    - **accurate**: `G` is computed; `R_i = max_j G_ij` (row maxima), `K_j = max_i G_ij`
//!      (column maxima);
//!    - **fast**: `G` is not computed; `R_i = K_j = 4096 k`, the a-priori bound of every
//!      `G_ij`;
//!    - **norm**: `G` is not computed; `R_i = S_i = sum_l ā_il^2` and
//!      `K_j = T_j = sum_l b̄_lj^2`, the squared 2-norms of the coarse lines (exact integers
//!      `<= 4096 k`), so `G_ij <= sqrt(S_i T_j)` is the Cauchy-Schwarz inequality. No extra
//!      product, one more pass over the operands.
//!
//!    `clog2(x) = ceil(log2 x)` for integers `x >= 1`;
//!    `p_i = min(56, floor((L - clog2 R_i) / 2))` and `q_j = min(56, floor((L - clog2 K_j) / 2))`
//!    (floor division of possibly negative integers); `p_i = 56` when `R_i = 0`, `q_j = 56`
//!    when `K_j = 0`. Then `σ_i = p_i + 5 - e_i`, `τ_j = q_j + 5 - f_j`, and for zero lines
//!    `σ_i = 0` / `τ_j = 0`.
//! 4. **Quantisation.** `a'_il = Q(a_il · 2^σ_i)`, `b'_lj = Q(b_lj · 2^τ_j)` where the product
//!    by `2^σ` is exact (exponent arithmetic, no intermediate rounding or overflow) and `Q` is
//!    either round-to-nearest, ties-to-even ([`Quantizer::Nearest`], the default, = CUDA
//!    `rint` / `__double2ll_rn`) or truncation toward zero ([`Quantizer::Truncate`]).
//!    `|a'_il| <= 2^(p_i + 6) <= 2^62`: every scaled entry fits an `i64`.
//!
//! **Coverage.** A line with `R_i > 0` needs `p_i >= 4` (`q_j >= 4`); otherwise `r` moduli
//! cannot hold the product at any useful precision and a larger `r` (or native) is needed
//! ([`Scaling::covers`]).
//!
//! # Why the product fits the residue range
//! For `a != 0`, `|a'| <= ā 2^p + 1/2 <= ā (2^p + 1/2)` (as `ā >= 1`), so
//! `|c'_ij| <= sum_l |a'_il||b'_lj| <= (2^p_i + 1/2)(2^q_j + 1/2) G_ij`. Since
//! `G_ij <= sqrt(R_i K_j)` and `2^(p_i + q_j) <= 2^L / sqrt(2^clog2(R_i) 2^clog2(K_j))`, this is
//! `<= 2^L (1 + 2^-5)^2 < 1.0635 · 2^L < M_r / 2` for covered lines (`p_i, q_j >= 4`): the
//! centred residues determine `c'_ij`. The only property of the bounds used is
//! `G_ij <= sqrt(R_i K_j)` for every pair `(i, j)`:
//! - accurate: `G_ij <= R_i` and `G_ij <= K_j` by the definition of the maxima;
//! - fast: `G_ij <= sum_l 64 · 64 = 4096 k` as every `ā, b̄ <= 64`;
//! - norm: `G_ij = sum_l ā_il b̄_lj <= sqrt(sum_l ā_il^2) sqrt(sum_l b̄_lj^2) = sqrt(S_i T_j)`
//!   (Cauchy-Schwarz on the k-vectors `ā_i·` and `b̄_·j`).
//!
//! **Norm mode's extra bit.** For `p_i >= 0` the rounding slack above is not needed:
//! `|a_il 2^σ_i| <= ā_il 2^p_i`, an integer, and `Q` (RN or truncation) is monotone, odd and
//! fixes integers, so `|a'_il| <= ā_il 2^p_i` exactly; hence `|c'_ij| <= 2^(p_i + q_j) G_ij
//! <= 2^(p_i + q_j) sqrt(2^clog2(R_i) 2^clog2(K_j)) <= 2^L`. Norm mode takes `L = floor(log2 M_r) - 1`: `2^L <= M_r / 2`, and strictly less as
//! `M_r` (a multiple of 255) is no power of two, so `|c'_ij| < M_r / 2` on covered lines
//! (`p_i, q_j >= 4`). This buys half a bit per operand on average (the shift gains one bit
//! where `L - clog2 S_i` was odd), which on normal data is what separates 14 moduli from
//! native accuracy (ACCURACY.md). The argument holds for the other modes too; they keep
//! `floor(log2 M_r) - 2` so that their documented and calibrated behaviour is unchanged.
//!
//! So step 3 and this proof hold in all three modes. The norm bound is never looser than the
//! fast one (`ā^2 <= 64 · 64`, so `S_i <= 4096 k`: for the same budget its shifts are never
//! smaller, and equal when every coarse magnitude is 64; with its extra budget bit they are
//! never smaller than fast mode's at all), and it costs no product: `S_i` needs only row `i`.
//! On normal data `ā ≈ 2^(5-e_i) |a|`, so `S_i ≈ 70 k` to `280 k` (depending on where the row
//! maximum lies in its binade), 2^4 to 2^6 below `4096 k`: 2-3 bits more per operand, plus the
//! extra budget bit, about one modulus.
//! Against accurate mode it is looser by `sqrt(S_i T_j) / G_ij`, the ratio of a mean square to
//! a mean product of the coarse magnitudes (about 1.5 on normal data), and can be tighter on
//! lines whose coarse magnitudes are small next to the other side's.
//!
//! # What it costs in accuracy
//! Per entry `|a_il - a'_il 2^-σ_i| <= 2^(-σ_i - 1)` (RN; `2^-σ_i` for truncation), so the
//! emulated `ĉ_ij = c'_ij 2^-(σ_i + τ_j)` differs from the exact product by at most
//! `2^(-σ_i-1) ||b_j||_1 + 2^(-τ_j-1) ||a_i||_1 + k 2^(-σ_i-τ_j-2)` before the one final
//! rounding to fp64. Accurate mode raises `p_i` by about `log2(k·64²/G)/2` bits per side
//! over fast mode: on spread data (`φ > 0`) this is several bits, i.e. one or two moduli;
//! norm mode by `log2(k·64²/S_i)/2`, nearly as much.
//! [`crate::rule`] turns this into the per-call moduli count.

use crate::exact::{exponent, f64_to_dyadic};

/// Largest `p_i`/`q_j` (keeps `|a'| <= 2^62`).
pub const MAX_SHIFT: i32 = 56;
/// Smallest `p_i`/`q_j` of a line that meets something nonzero (see "Coverage").
pub const MIN_SHIFT: i32 = 4;
/// Bits of the coarse magnitudes: `ā <= 2^COARSE_BITS = 64`.
pub const COARSE_BITS: i32 = 6;

/// The rounding of the scaled entries to integers (paper brief §1.1, Table 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Quantizer {
    /// Round to nearest, ties to even (Ozaki-II-RN; the default).
    #[default]
    Nearest,
    /// Truncate toward zero (Ozaki-II-TZ).
    Truncate,
}

/// The GPU route's scaling when none is asked for: the norm bound (no extra product, about
/// one modulus fewer than fast on normal data and two on phi = 2; ACCURACY.md). The engine
/// prices GPU Ozaki at it (`crate::engine::priced_moduli`).
pub const GPU_DEFAULT_SCALING: ScalingMode = ScalingMode::Norm;

/// How the shifts are bounded (module doc, step 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ScalingMode {
    /// A-priori bound `G_ij <= 4096 k`: no extra product.
    Fast,
    /// Bound from the exact coarse product `G = Ā B̄` (one extra integer GEMM; default).
    #[default]
    Accurate,
    /// Cauchy-Schwarz bound `G_ij <= sqrt(S_i T_j)` from the coarse lines' squared norms
    /// `S_i = sum_l ā_il^2`, `T_j = sum_l b̄_lj^2`: no extra product (module doc, step 3).
    Norm,
}

impl ScalingMode {
    /// The budget `L` the shifts of this mode are made for (module doc, step 3 and "Why the
    /// product fits"): `L_r = floor(log2 M_r) - 2` for fast and accurate, one bit more,
    /// `floor(log2 M_r) - 1`, for norm.
    pub fn budget_bits(self, plan: &crate::moduli::CrtPlan) -> i32 {
        match self {
            ScalingMode::Fast | ScalingMode::Accurate => plan.budget_bits,
            ScalingMode::Norm => plan.budget_bits + 1,
        }
    }

    /// The name used by `OZAKI_SCALING` and in tables: `fast`, `accurate` or `norm`.
    pub fn name(self) -> &'static str {
        match self {
            ScalingMode::Fast => "fast",
            ScalingMode::Accurate => "accurate",
            ScalingMode::Norm => "norm",
        }
    }
}

impl std::str::FromStr for ScalingMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "fast" => Ok(ScalingMode::Fast),
            "accurate" => Ok(ScalingMode::Accurate),
            "norm" => Ok(ScalingMode::Norm),
            other => Err(format!(
                "unknown scaling {other:?} (expected fast, norm or accurate)"
            )),
        }
    }
}

/// `ceil(log2 x)` for `x >= 1`.
#[inline]
pub fn clog2(x: u64) -> i32 {
    debug_assert!(x >= 1);
    if x <= 1 {
        0
    } else {
        64 - (x - 1).leading_zeros() as i32
    }
}

/// `p = min(56, floor((L - clog2 R) / 2))`, `56` when `R = 0` (module doc, step 3).
#[inline]
pub fn shift_for_bound(budget_bits: i32, bound: u64) -> i32 {
    if bound == 0 {
        MAX_SHIFT
    } else {
        (budget_bits - clog2(bound)).div_euclid(2).min(MAX_SHIFT)
    }
}

/// Classes of lines with the same shift: bound 0, then `clog2(bound)` = 0..=64 ([`norm_class`]).
pub const SHIFT_CLASSES: usize = 66;

/// The class of a line with shift bound `q`: its shift depends on `q` only through it
/// ([`shift_for_bound`] reads `clog2(q)` and whether `q` is zero). The GPU kernel
/// `line_shifts` computes the same.
pub fn norm_class(q: u64) -> usize {
    if q == 0 { 0 } else { clog2(q) as usize + 1 }
}

/// Per [`norm_class`], `p + COARSE_BITS - 1` with `p = shift_for_bound(budget, bound)` (norm
/// scaling: the class's bounds; fast scaling: `4096 k` for every class), so a line with
/// exponent `e` gets `σ = table[class] - e`, [`Scaling::new`]'s shift. The GPU forms its
/// shifts from this table.
pub fn shift_table(mode: ScalingMode, budget: i32, k: usize) -> [i32; SHIFT_CLASSES] {
    std::array::from_fn(|class| {
        let bound = match mode {
            ScalingMode::Fast => 4096 * k.max(1) as u64,
            _ => class_bound(class),
        };
        shift_for_bound(budget, bound) + COARSE_BITS - 1
    })
}

/// A bound of [`norm_class`] `class` (every bound of a class gives the same shift):
/// 0 for class 0, else `2^(class - 1)` (`clog2(2^j) = j`; `2^64 - 1` for class 65).
pub fn class_bound(class: usize) -> u64 {
    match class {
        0 => 0,
        c => 1u64.checked_shl(c as u32 - 1).unwrap_or(u64::MAX),
    }
}

/// A NaN or an infinity in the inputs (the call must go to native fp64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonFiniteInput;

/// `E(x)` of the largest-magnitude entry of a line, `None` for a zero line.
///
/// # Errors
/// [`NonFiniteInput`] if a NaN or infinity occurs.
#[inline]
pub fn line_exponent(values: impl Iterator<Item = f64>) -> Result<Option<i32>, NonFiniteInput> {
    let mut e: Option<i32> = None;
    for x in values {
        if !x.is_finite() {
            return Err(NonFiniteInput);
        }
        if x != 0.0 {
            let ex = exponent(x);
            e = Some(e.map_or(ex, |c| c.max(ex)));
        }
    }
    Ok(e)
}

/// `ceil(|x| · 2^(5 - e))` for `|x| < 2^(e+1)`: the coarse magnitude in `[0, 64]`.
#[inline]
pub fn coarse(x: f64, e: i32) -> u8 {
    if x == 0.0 {
        return 0;
    }
    let (mant, exp) = f64_to_dyadic(x);
    let mag = mant.unsigned_abs();
    let sh = exp + (COARSE_BITS - 1) - e; // value = mag · 2^sh
    let v = if sh >= 0 {
        mag << sh
    } else if sh <= -64 {
        1
    } else {
        let s = (-sh) as u32;
        (mag >> s) + u64::from(mag & ((1u64 << s) - 1) != 0)
    };
    debug_assert!(v <= 64);
    v as u8
}

/// `sum_l ā_l^2` over a line with exponent `e` (`ā_l = coarse(x_l, e)`): the norm-mode bound
/// `S_i` / `T_j` (module doc, step 3). At most `4096 · line.len()`.
pub fn coarse_square_sum(line: &[f64], e: i32) -> u64 {
    line.iter()
        .map(|&x| {
            let c = u64::from(coarse(x, e));
            c * c
        })
        .sum()
}

/// `Q(x · 2^sigma)` exactly (module doc, step 4). The caller guarantees `|x| 2^sigma < 2^62`.
#[inline]
pub fn quantize(x: f64, sigma: i32, q: Quantizer) -> i64 {
    let (mant, exp) = f64_to_dyadic(x);
    if mant == 0 {
        return 0;
    }
    let neg = mant < 0;
    let mag = mant.unsigned_abs();
    let sh = exp + sigma;
    let v = if sh >= 0 {
        debug_assert!(sh < 64 && (mag << sh) >> sh == mag);
        mag << sh
    } else {
        let s = (-sh) as u32;
        match q {
            Quantizer::Truncate => {
                if s >= 64 {
                    0
                } else {
                    mag >> s
                }
            }
            Quantizer::Nearest => {
                if s > 64 {
                    0
                } else if s == 64 {
                    // mag < 2^53 < 2^63: below one half.
                    0
                } else {
                    let t = mag >> s;
                    let rem = mag & ((1u64 << s) - 1);
                    let half = 1u64 << (s - 1);
                    t + u64::from(rem > half || (rem == half && t & 1 == 1))
                }
            }
        }
    };
    debug_assert!(v <= 1u64 << 62);
    if neg { -(v as i64) } else { v as i64 }
}

/// `||x 2^sigma - Q(x 2^sigma)||_2` over a line: the size of its quantisation error in
/// integer units (each term `<= 1/2` for RN, `< 1` for truncation; 0 for entries that
/// scale to integers exactly).
pub fn quantization_error_norm(line: &[f64], sigma: i32, q: Quantizer) -> f64 {
    let mut s2 = 0.0f64;
    for &x in line {
        let (mant, exp) = f64_to_dyadic(x);
        let sh = exp + sigma;
        if mant == 0 || sh >= 0 {
            continue;
        }
        let mag = mant.unsigned_abs();
        let s = -sh;
        let frac = if s >= 64 {
            crate::exact::ldexp(mag as f64, i64::from(sh))
        } else {
            (mag & ((1u64 << s) - 1)) as f64 * crate::exact::pow2(-s)
        };
        let d = match q {
            Quantizer::Nearest => frac.min(1.0 - frac),
            Quantizer::Truncate => frac,
        };
        s2 += d * d;
    }
    s2.sqrt()
}

/// The per-line exponents of one call (module doc, step 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exponents {
    /// `e_i` per row of op(A) (`None`: zero row).
    pub rows: Vec<Option<i32>>,
    /// `f_j` per column of op(B) (`None`: zero column).
    pub cols: Vec<Option<i32>>,
}

impl Exponents {
    /// Largest `e_i + f_j` over nonzero lines, `None` when either side is all zero.
    pub fn max_sum(&self) -> Option<i32> {
        let a = self.rows.iter().flatten().max()?;
        let b = self.cols.iter().flatten().max()?;
        Some(a + b)
    }
}

/// Row/column bounds from the coarse product: `R_i = max_j G_ij`, `K_j = max_i G_ij`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoarseBounds {
    /// `R_i` per row.
    pub rows: Vec<u64>,
    /// `K_j` per column.
    pub cols: Vec<u64>,
}

impl CoarseBounds {
    /// The fast-mode bounds `4096 k` for every line.
    pub fn fast(m: usize, n: usize, k: usize) -> Self {
        let b = 4096 * k as u64;
        CoarseBounds {
            rows: vec![b; m],
            cols: vec![b; n],
        }
    }

    /// The norm-mode bounds `S_i`, `T_j` ([`coarse_square_sum`]; 0 for zero lines) of op(A)
    /// packed by rows (`a[i * k + l]`) and op(B) packed by columns (`b[j * k + l]`).
    pub fn norm(exps: &Exponents, a: &[f64], b: &[f64], k: usize) -> Self {
        let side = |x: &[f64], es: &[Option<i32>]| -> Vec<u64> {
            es.iter()
                .enumerate()
                .map(|(i, e)| e.map_or(0, |e| coarse_square_sum(&x[i * k..(i + 1) * k], e)))
                .collect()
        };
        CoarseBounds {
            rows: side(a, &exps.rows),
            cols: side(b, &exps.cols),
        }
    }

    /// Row and column maxima of a column-major `m x n` coarse product `G` (leading dim `m`).
    pub fn from_product(g: &[u64], m: usize, n: usize) -> Self {
        let mut rows = vec![0u64; m];
        let mut cols = vec![0u64; n];
        for j in 0..n {
            let col = &g[j * m..(j + 1) * m];
            cols[j] = col.iter().copied().max().unwrap_or(0);
            for (r, &v) in rows.iter_mut().zip(col) {
                *r = (*r).max(v);
            }
        }
        CoarseBounds { rows, cols }
    }
}

/// The shifts of one call: `a'_il = Q(a_il 2^σ_i)`, `b'_lj = Q(b_lj 2^τ_j)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scaling {
    /// `p_i` per row (`None` for zero rows).
    pub p: Vec<Option<i32>>,
    /// `q_j` per column (`None` for zero columns).
    pub q: Vec<Option<i32>>,
    /// `σ_i` per row.
    pub sigma: Vec<i32>,
    /// `τ_j` per column.
    pub tau: Vec<i32>,
}

impl Scaling {
    /// Shifts for budget `L` bits from the exponents and the coarse bounds (module doc, step 3).
    pub fn new(budget_bits: i32, exps: &Exponents, bounds: &CoarseBounds) -> Self {
        let side = |es: &[Option<i32>], bs: &[u64]| -> (Vec<Option<i32>>, Vec<i32>) {
            es.iter()
                .zip(bs)
                .map(|(e, &b)| match e {
                    None => (None, 0),
                    Some(e) => {
                        let p = shift_for_bound(budget_bits, b);
                        (Some(p), p + (COARSE_BITS - 1) - e)
                    }
                })
                .unzip()
        };
        let (p, sigma) = side(&exps.rows, &bounds.rows);
        let (q, tau) = side(&exps.cols, &bounds.cols);
        Scaling { p, q, sigma, tau }
    }

    /// Whether every line that meets a nonzero of the other side got at least
    /// [`MIN_SHIFT`] bits ("Coverage" in the module doc).
    pub fn covers(&self, bounds: &CoarseBounds) -> bool {
        let ok = |ps: &[Option<i32>], bs: &[u64]| {
            ps.iter()
                .zip(bs)
                .all(|(p, &b)| b == 0 || p.is_none_or(|p| p >= MIN_SHIFT))
        };
        ok(&self.p, &bounds.rows) && ok(&self.q, &bounds.cols)
    }

    /// Smallest `p_i` / `q_j` over lines that meet nonzeros (the precision of the worst line).
    pub fn min_shift(&self) -> Option<i32> {
        self.p.iter().chain(&self.q).flatten().copied().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clog2_and_shift_rule() {
        assert_eq!(clog2(1), 0);
        assert_eq!(clog2(2), 1);
        assert_eq!(clog2(3), 2);
        assert_eq!(clog2(4096), 12);
        assert_eq!(clog2(4097), 13);
        assert_eq!(shift_for_bound(108, 4096 * 1024), 43);
        assert_eq!(shift_for_bound(10, 4096), -1); // floor of -1
        assert_eq!(shift_for_bound(200, 1), MAX_SHIFT);
        assert_eq!(shift_for_bound(20, 0), MAX_SHIFT);
    }

    #[test]
    fn coarse_is_a_tight_upper_bound() {
        for &(x, e) in &[
            (1.0, 0),
            (1.99, 0),
            (-1.5, 0),
            (3e-300, exponent(3e-300)),
            (5e-324, -1074),
            (0.1, -1),
        ] {
            let c = coarse(x, e);
            assert!(c <= 64);
            let scaled = crate::exact::ldexp(x.abs(), i64::from(5 - e));
            assert!(
                f64::from(c) >= scaled && f64::from(c) < scaled + 1.0,
                "{x} {e} {c}"
            );
        }
        // A small entry in a row with a big exponent still gets a nonzero bound.
        assert_eq!(coarse(1e-300, 10), 1);
        assert_eq!(coarse(0.0, 3), 0);
    }

    #[test]
    fn quantize_rounds_as_documented() {
        use Quantizer::*;
        assert_eq!(quantize(2.5, 0, Nearest), 2);
        assert_eq!(quantize(3.5, 0, Nearest), 4);
        assert_eq!(quantize(-2.5, 0, Nearest), -2);
        assert_eq!(quantize(-2.75, 0, Nearest), -3);
        assert_eq!(quantize(-2.75, 0, Truncate), -2);
        assert_eq!(quantize(0.75, 2, Nearest), 3);
        assert_eq!(quantize(5e-324, 1074, Nearest), 1);
        assert_eq!(quantize(5e-324, 1073, Nearest), 0); // 1/2 ties to even
        assert_eq!(quantize(3.0 * 5e-324, 1073, Nearest), 2); // 3/2 -> 2
        assert_eq!(quantize(1.0, -70, Nearest), 0);
        assert_eq!(quantize(-1.0, 61, Nearest), -(1i64 << 61));
        assert_eq!(quantize(1.0 + f64::EPSILON, 0, Nearest), 1);
    }

    #[test]
    fn fast_scaling_fits_the_residue_range() {
        let plan = crate::moduli::CrtPlan::get(14);
        let exps = Exponents {
            rows: vec![Some(0), None, Some(-1074)],
            cols: vec![Some(1000)],
        };
        let k = 1000;
        let s = Scaling::new(plan.budget_bits, &exps, &CoarseBounds::fast(3, 1, k));
        assert_eq!(s.sigma[1], 0);
        let p = s.p[0].unwrap();
        assert_eq!(s.sigma[0], p + 5);
        // k · (2^(p+6))^2 <= 1.0635 · 2^L
        assert!(((k as f64).log2() + 2.0 * f64::from(p + 6)) <= f64::from(plan.budget_bits) + 0.1);
        assert!(s.covers(&CoarseBounds::fast(3, 1, k)));
    }
    /// Lines whose coarse magnitudes follow `pattern` (values in 1..=64), with entries just
    /// below `ā 2^(e-5)` so that every scaled entry rounds up to `ā 2^p` (the worst case of
    /// the fit proof), and signs all positive (no cancellation in `c'`).
    fn adversarial_line(pattern: &[u8], e: i32) -> Vec<f64> {
        pattern
            .iter()
            .map(|&c| crate::exact::ldexp(f64::from(c) * (1.0 - 1e-15), i64::from(e - 5)))
            .collect()
    }

    fn patterns(k: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut rng = crate::testutil::Rng::new(seed);
        vec![
            vec![64; k],                                               // all maximal: fast's case
            (0..k).map(|l| 1 + (l % 64) as u8).collect(),              // ramp
            (0..k).map(|l| if l == 0 { 64 } else { 1 }).collect(),     // one big, rest minimal
            (0..k).map(|_| 1 + (rng.next_u64() % 64) as u8).collect(), // random
            (0..k).map(|l| if l % 2 == 0 { 64 } else { 2 }).collect(), // alternating
        ]
    }

    #[test]
    fn every_mode_keeps_the_product_inside_the_residue_range_on_adversarial_lines() {
        use num_bigint::BigInt;
        for r in [6usize, 9, 12, 14] {
            let plan = crate::moduli::CrtPlan::get(r);
            for k in [1usize, 7, 64, 1000, 4097] {
                let pats = patterns(k, k as u64 + 31 * r as u64);
                // Row i of op(A) and column j of op(B) take every pattern, so the pairs with
                // i == j are Cauchy-Schwarz's equality case (b̄_·j proportional to ā_i·).
                let (e_a, e_b) = (3, -700);
                let rows: Vec<Vec<f64>> = pats.iter().map(|p| adversarial_line(p, e_a)).collect();
                let cols: Vec<Vec<f64>> = pats.iter().map(|p| adversarial_line(p, e_b)).collect();
                let exps = Exponents {
                    rows: vec![Some(e_a); rows.len()],
                    cols: vec![Some(e_b); cols.len()],
                };
                let a: Vec<f64> = rows.concat();
                let b: Vec<f64> = cols.concat();
                let coarse_of = |x: &[f64], e| {
                    x.iter()
                        .map(|&v| u64::from(coarse(v, e)))
                        .collect::<Vec<_>>()
                };
                let g: Vec<u64> = (0..cols.len())
                    .flat_map(|j| {
                        let cb = coarse_of(&cols[j], e_b);
                        rows.iter()
                            .map(|row| {
                                coarse_of(row, e_a)
                                    .iter()
                                    .zip(&cb)
                                    .map(|(x, y)| x * y)
                                    .sum::<u64>()
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect();
                for (mode, bounds) in [
                    (
                        ScalingMode::Fast,
                        CoarseBounds::fast(rows.len(), cols.len(), k),
                    ),
                    (
                        ScalingMode::Accurate,
                        CoarseBounds::from_product(&g, rows.len(), cols.len()),
                    ),
                    (ScalingMode::Norm, CoarseBounds::norm(&exps, &a, &b, k)),
                ] {
                    let budget = mode.budget_bits(plan);
                    // norm: |c'| <= 2^L exactly (its extra bit); else the 1.0635 slack
                    let limit = f64::from(budget).exp2()
                        * if mode == ScalingMode::Norm {
                            1.0
                        } else {
                            1.0635
                        };
                    let s = Scaling::new(budget, &exps, &bounds);
                    if !s.covers(&bounds) {
                        continue; // the caller takes more moduli or falls back
                    }
                    for (i, row) in rows.iter().enumerate() {
                        for (j, col) in cols.iter().enumerate() {
                            let mut c: i128 = 0;
                            for (&x, &y) in row.iter().zip(col) {
                                let p = i128::from(quantize(x, s.sigma[i], Quantizer::Nearest))
                                    * i128::from(quantize(y, s.tau[j], Quantizer::Nearest));
                                c = c.checked_add(p).expect("no i128 overflow");
                            }
                            assert!(
                                (c.unsigned_abs() as f64) <= limit
                                    && BigInt::from(c) < plan.half_product,
                                "{mode:?} r = {r} k = {k} ({i}, {j}): c' = {c} beyond {limit:e}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn norm_shifts_are_never_smaller_than_fast_and_equal_them_on_maximal_magnitudes() {
        use crate::testutil::{Family, Rng, matrix};
        let mut rng = Rng::new(5);
        for (fam, k) in [
            (Family::Normal, 1000usize),
            (Family::Spread(2.0), 333),
            (Family::Integer(7), 64),
            (Family::Uniform, 1),
        ] {
            let (m, n) = (9, 5);
            // packed by lines: row i of A is a[i * k..], column j of B is b[j * k..]
            let mut a = matrix(fam, k, m, &mut rng);
            let b = matrix(fam, k, n, &mut rng);
            a[2 * k..3 * k].fill(0.0); // a zero row
            let line_exps = |x: &[f64], lines: usize| -> Vec<Option<i32>> {
                (0..lines)
                    .map(|i| line_exponent(x[i * k..(i + 1) * k].iter().copied()).unwrap())
                    .collect()
            };
            let exps = Exponents {
                rows: line_exps(&a, m),
                cols: line_exps(&b, n),
            };
            let norm = CoarseBounds::norm(&exps, &a, &b, k);
            assert_eq!(norm.rows[2], 0, "zero row");
            for r in [8usize, 14, 16, 20] {
                let plan = crate::moduli::CrtPlan::get(r);
                let fast = Scaling::new(
                    ScalingMode::Fast.budget_bits(plan),
                    &exps,
                    &CoarseBounds::fast(m, n, k),
                );
                let ns = Scaling::new(ScalingMode::Norm.budget_bits(plan), &exps, &norm);
                for (x, y) in ns.p.iter().chain(&ns.q).zip(fast.p.iter().chain(&fast.q)) {
                    assert_eq!(x.is_some(), y.is_some());
                    assert!(x >= y, "{fam:?} r = {r}: norm {x:?} < fast {y:?}");
                }
                // Never looser, so never less covered.
                assert!(ns.covers(&norm) || !fast.covers(&CoarseBounds::fast(m, n, k)));
            }
        }
        // Every coarse magnitude 64 (|x| just below 2^(e+1)): S_i = 4096 k exactly, the same
        // shifts as fast mode for the same budget.
        let k = 77;
        let line = adversarial_line(&[64; 77], 9);
        let exps = Exponents {
            rows: vec![Some(9); 3],
            cols: vec![Some(9); 2],
        };
        let a = line.repeat(3);
        let b = line.repeat(2);
        let norm = CoarseBounds::norm(&exps, &a, &b, k);
        assert_eq!(norm, CoarseBounds::fast(3, 2, k));
        for r in 2..=20 {
            let budget = crate::moduli::CrtPlan::get(r).budget_bits;
            assert_eq!(
                Scaling::new(budget, &exps, &norm),
                Scaling::new(budget, &exps, &CoarseBounds::fast(3, 2, k))
            );
        }
    }

    #[test]
    fn scaling_mode_names_round_trip() {
        for m in [ScalingMode::Fast, ScalingMode::Accurate, ScalingMode::Norm] {
            assert_eq!(m.name().parse::<ScalingMode>(), Ok(m));
        }
        assert!("exact".parse::<ScalingMode>().is_err());
    }
}
