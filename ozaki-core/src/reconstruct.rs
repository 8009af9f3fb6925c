//! Reconstruction of `c'_ij` from its residues, unscaling and the single rounding to fp64
//! (Ozaki-II steps 4-5; paper brief §1.4, §9.4).
//!
//! Input: the centred residues `c_t = C^(t)_ij`, `t < r`, of an integer `C'` with
//! `|C'| < M_r/2`, and the shift `s = σ_i + τ_j` ([`crate::scaling`]). Output: an fp64
//! approximation of `C' · 2^-s`. Two variants:
//!
//! # Exact: Garner / mixed radix in fixed-width limbs ([`Reconstruction::Exact`])
//! With `u_t = c_t mod m_t` in `[0, m_t)` and `μ_{i,t} = m_i^{-1} mod m_t`
//! ([`CrtPlan::garner_inv`]), the mixed-radix digits are (standard incremental Garner,
//! `r(r-1)/2` modular multiply-subtracts)
//!
//! ```text
//! v_0 = u_0;   v_t = (...((u_t - v_0) μ_{0,t} - v_1) μ_{1,t} ... - v_{t-1}) μ_{t-1,t}  mod m_t
//! N   = v_0 + m_0 (v_1 + m_1 (v_2 + ... + m_{r-2} v_{r-1}))          (Horner, 0 <= N < M_r)
//! C'  = N        if N < M_r/2,   N - M_r otherwise                    (symmetric lift)
//! ```
//!
//! evaluated in three 64-bit limbs (`M_20 < 2^156`). The result `RN(C' · 2^-s)` is rounded
//! **once** (nearest-even, gradual underflow, overflow to inf): the reconstruction adds no
//! error at all; the emulation's only errors are the quantisation of the inputs and this
//! final rounding. This is the CPU reference route's default.
//!
//! # fp64 CRT ([`Reconstruction::Fp64`], the variant the GPU route implements)
//! Uses `C'/M ≡ sum_t c_t y_t / m_t (mod 1)` with `y_t = (M/m_t)^{-1} mod m_t`, whose
//! double-double values `(Y_t, Y'_t)` and `(M_hi, M_lo)` are in [`CrtPlan`]. As IEEE fp64
//! operations, each rounded to nearest-even, `fma` fused (one rounding), evaluated in
//! exactly this order:
//!
//! ```text
//! h = 0, l = 0
//! for t in 0..r:                         // c = (double) c_t
//!     p = c * Y_t;  e = fma(c, Y_t, -p);  e = fma(c, Y'_t, e)
//!     u = h + p;  z = u - h;  g = (h - (u - z)) + (p - z)      // two-sum
//!     h = u;  l = l + (g + e)
//! n = rint(h);  h = h - n                                      // drop the integer part
//! u = h + l;  z = u - h;  g = (h - (u - z)) + (l - z);  h = u;  l = g   // two-sum
//! if h > 0.5 or (h == 0.5 and l >= 0): h = h - 1
//! if h < -0.5 or (h == -0.5 and l < 0): h = h + 1
//! w = h * M_hi;  x = fma(h, M_hi, -w);  x = fma(l, M_hi, x);  x = fma(h, M_lo, x)
//! result = ldexp(w + x, -s)              // one correctly rounded scaling (C scalbn)
//! ```
//!
//! Error: the two-products are exact, `Y + Y'` is `y/m` to within `2^-106 y/m`, and the
//! sum `h + l` keeps about 94 fractional bits (`|h| <= 20 · 128`), so
//! `|(h + l) - C'/M| <= 2^-88` and `|(w + x) - C'| <= 2^-87 M_r + 2^-52 |C'|`: an
//! absolute error below `2^-85 · 2^(L_r - s)`, i.e. about `2^-85` of the largest value the
//! scaling allows for the entry (compare: quantisation error `~2^-p_i-1` of the same
//! scale, `p_i <= 56`), plus at most two roundings of the result (`w + x`, and the scaling
//! when the result is subnormal). The test `fp64_crt_error_is_within_the_documented_bound`
//! measures this against the exact variant.

use crate::exact::{ldexp, round_limbs};
use crate::moduli::CrtPlan;
use num_bigint::{BigInt, BigUint};

/// Which reconstruction to use (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Reconstruction {
    /// Exact Garner + one rounding (the reference; default on the CPU).
    #[default]
    Exact,
    /// The fp64 CRT the GPU route uses (bit-identical on both).
    Fp64,
}

/// `x mod m` for `x < 2^20`, `m <= 256`, by a multiply with `floor(2^32/m) + 1` (exact
/// in that range: the quotient estimate is off by at most one, fixed by one compare).
#[inline(always)]
fn mod_small(x: u32, m: u32, recip: u64) -> u32 {
    let q = ((u64::from(x) * recip) >> 32) as u32;
    let r = x.wrapping_sub(q.wrapping_mul(m));
    if r >= m { r.wrapping_add(m) } else { r }
}

/// Mixed-radix digits `v_t` of the residues (module doc, exact variant).
#[inline]
pub fn mixed_radix(res: &[i32], plan: &CrtPlan, v: &mut [u32]) {
    let r = plan.r;
    debug_assert!(res.len() >= r && v.len() >= r);
    for t in 0..r {
        let m = plan.moduli[t];
        let recip = (1u64 << 32) / u64::from(m) + 1;
        let inv = &plan.garner_inv[t];
        // u_t = c_t mod m_t (c_t in [-m/2, m/2)).
        let mut x = (res[t] + m as i32) as u32;
        x = mod_small(x, m, recip);
        for i in 0..t {
            // (x - v_i) mod m, then times m_i^{-1} mod m; v_i < 256 < m + 256.
            let d = mod_small(x + 256 * m - v[i], m, recip);
            x = mod_small(d * inv[i], m, recip);
        }
        v[t] = x;
    }
}

/// Entries per batch of [`exact_f64_batch`].
pub const BATCH: usize = 64;

/// [`mixed_radix`] for up to [`BATCH`] entries at once (`res[e * r + t]`, entry-major),
/// with the entries in the inner loops so that they vectorise: `v[t][e]`.
fn mixed_radix_batch(
    res: &[i8],
    count: usize,
    plan: &CrtPlan,
    v: &mut [[u32; BATCH]; crate::moduli::MAX_MODULI],
) {
    let r = plan.r;
    for t in 0..r {
        let m = plan.moduli[t];
        let recip = (1u64 << 32) / u64::from(m) + 1;
        let mut x = [0u32; BATCH];
        for (e, xe) in x.iter_mut().enumerate().take(count) {
            *xe = mod_small((i32::from(res[e * r + t]) + m as i32) as u32, m, recip);
        }
        for (vi, &inv) in v[..t].iter().zip(&plan.garner_inv[t]) {
            for e in 0..BATCH {
                let d = mod_small(x[e] + 256 * m - vi[e], m, recip);
                x[e] = mod_small(d * inv, m, recip);
            }
        }
        v[t] = x;
    }
}

/// Exact reconstruction of `count <= BATCH` entries (`res[e * r + t]`, entry-major) with
/// shifts `s[e]`: `out[e] = RN(C'_e 2^-s_e)` (same values as [`exact_f64`]).
pub fn exact_f64_batch(res: &[i8], s: &[i64], plan: &CrtPlan, out: &mut [f64]) {
    let count = s.len();
    assert!(count <= BATCH && res.len() >= count * plan.r && out.len() >= count);
    let mut v = [[0u32; BATCH]; crate::moduli::MAX_MODULI];
    mixed_radix_batch(res, count, plan, &mut v);
    let mut digits = [0u32; crate::moduli::MAX_MODULI];
    for e in 0..count {
        for (t, d) in digits[..plan.r].iter_mut().enumerate() {
            *d = v[t][e];
        }
        let (neg, limbs) = limbs_from_digits(&digits[..plan.r], plan);
        out[e] = round_limbs(neg, &limbs, -s[e]);
    }
}

/// `C'` from its residues as sign and little-endian magnitude limbs (exact variant).
#[inline]
pub fn exact_limbs(res: &[i32], plan: &CrtPlan) -> (bool, [u64; 3]) {
    let mut v = [0u32; crate::moduli::MAX_MODULI];
    mixed_radix(res, plan, &mut v);
    limbs_from_digits(&v[..plan.r], plan)
}

/// Horner recombination of mixed-radix digits and the symmetric lift.
#[inline]
fn limbs_from_digits(v: &[u32], plan: &CrtPlan) -> (bool, [u64; 3]) {
    let r = plan.r;
    // Horner: N = v_{r-1}; N = N·m_t + v_t for t = r-2..0.
    let mut n = [u64::from(v[r - 1]), 0, 0];
    for t in (0..r - 1).rev() {
        let m = u128::from(plan.moduli[t]);
        let mut carry = u128::from(v[t]);
        for limb in n.iter_mut() {
            let x = u128::from(*limb) * m + carry;
            *limb = x as u64;
            carry = x >> 64;
        }
        debug_assert_eq!(carry, 0);
    }
    if ge(&n, &plan.half_limbs) {
        // C' = N - M < 0: magnitude M - N.
        (true, sub(&plan.product_limbs, &n))
    } else {
        (false, n)
    }
}

fn ge(a: &[u64; 3], b: &[u64; 3]) -> bool {
    for i in (0..3).rev() {
        if a[i] != b[i] {
            return a[i] > b[i];
        }
    }
    true
}

fn sub(a: &[u64; 3], b: &[u64; 3]) -> [u64; 3] {
    let mut out = [0u64; 3];
    let mut borrow = 0u64;
    for i in 0..3 {
        let (d1, b1) = a[i].overflowing_sub(b[i]);
        let (d2, b2) = d1.overflowing_sub(borrow);
        out[i] = d2;
        borrow = u64::from(b1 || b2);
    }
    out
}

/// `C'` as a big integer (exact variant; for tests and tools).
pub fn exact_bigint(res: &[i32], plan: &CrtPlan) -> BigInt {
    let (neg, limbs) = exact_limbs(res, plan);
    let mag = BigUint::from_slice(
        &limbs
            .iter()
            .flat_map(|&l| [l as u32, (l >> 32) as u32])
            .collect::<Vec<_>>(),
    );
    if neg {
        -BigInt::from(mag)
    } else {
        BigInt::from(mag)
    }
}

/// `RN(C' · 2^-s)`, exact reconstruction and one rounding.
#[inline]
pub fn exact_f64(res: &[i32], plan: &CrtPlan, s: i64) -> f64 {
    let (neg, limbs) = exact_limbs(res, plan);
    round_limbs(neg, &limbs, -s)
}

#[inline(always)]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let u = a + b;
    let z = u - a;
    (u, (a - (u - z)) + (b - z))
}

/// The fp64 CRT variant (module doc), operation for operation as the GPU evaluates it.
#[inline]
pub fn fp64_f64(res: &[i32], plan: &CrtPlan, s: i64) -> f64 {
    let (mut h, mut l) = (0.0f64, 0.0f64);
    for (t, &(yh, yl)) in plan.frac_weights.iter().enumerate() {
        let c = f64::from(res[t]);
        let p = c * yh;
        let mut e = c.mul_add(yh, -p);
        e = c.mul_add(yl, e);
        let (u, g) = two_sum(h, p);
        h = u;
        l += g + e;
    }
    let n = h.round_ties_even();
    h -= n;
    (h, l) = two_sum(h, l);
    if h > 0.5 || (h == 0.5 && l >= 0.0) {
        h -= 1.0;
    }
    if h < -0.5 || (h == -0.5 && l < 0.0) {
        h += 1.0;
    }
    let (mh, ml) = plan.product_dd;
    let w = h * mh;
    let mut x = h.mul_add(mh, -w);
    x = l.mul_add(mh, x);
    x = h.mul_add(ml, x);
    ldexp(w + x, -s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exact::round_big;
    use crate::moduli::{MAX_MODULI, MIN_MODULI, centred};
    use crate::testutil::Rng;
    use num_traits::{One, Signed};

    fn residues_of(x: &BigInt, plan: &CrtPlan) -> Vec<i32> {
        plan.moduli
            .iter()
            .map(|&m| {
                let d = (x % BigInt::from(m) + BigInt::from(m)) % BigInt::from(m);
                centred(i64::try_from(d).unwrap(), m)
            })
            .collect()
    }

    fn random_in_range(rng: &mut Rng, plan: &CrtPlan) -> BigInt {
        // Stratified: a random bit length up to log2(M/2), random bits, random sign.
        let bits = (rng.next_u64() % u64::from(plan.log2_floor - 1)) as usize; // |x| < 2^(log2_floor - 1) <= M/2
        let mut x = BigInt::one();
        for _ in 0..bits {
            x = (x << 1usize) + BigInt::from(rng.next_u64() & 1);
        }
        if rng.next_u64() & 1 == 1 { -x } else { x }
    }

    #[test]
    fn small_modulus_reduction_is_exact() {
        for &m in &crate::moduli::INT8_MODULI {
            let recip = (1u64 << 32) / u64::from(m) + 1;
            for x in (0..1u32 << 20).step_by(7).chain([0, 1, (1 << 20) - 1]) {
                assert_eq!(mod_small(x, m, recip), x % m, "x={x} m={m}");
            }
        }
    }

    #[test]
    fn garner_is_exact_over_all_16_bit_values_and_at_the_range_ends() {
        for r in [MIN_MODULI, 3, 14, MAX_MODULI] {
            let plan = CrtPlan::get(r);
            let lo: i64 = if r == MIN_MODULI {
                -(65280 / 2)
            } else {
                i64::from(i16::MIN)
            };
            let hi: i64 = if r == MIN_MODULI {
                65280 / 2 - 1
            } else {
                i64::from(i16::MAX)
            };
            for x in lo..=hi {
                let res: Vec<i32> = plan.moduli.iter().map(|&m| centred(x, m)).collect();
                assert_eq!(exact_bigint(&res, plan), BigInt::from(x), "r = {r}");
            }
            // -M/2 (included) and M/2 - 1 (the largest).
            let ends = [-plan.half_product.clone(), plan.half_product.clone() - 1];
            for x in ends {
                assert_eq!(exact_bigint(&residues_of(&x, plan), plan), x);
            }
        }
    }

    #[test]
    fn garner_and_final_rounding_match_bigint_on_random_values() {
        let mut rng = Rng::new(11);
        for r in MIN_MODULI..=MAX_MODULI {
            let plan = CrtPlan::get(r);
            for _ in 0..300 {
                let x = random_in_range(&mut rng, plan);
                let res = residues_of(&x, plan);
                assert_eq!(exact_bigint(&res, plan), x);
                for s in [-900i64, -3, 0, 17, 100, 1100, 1180] {
                    assert_eq!(
                        exact_f64(&res, plan, s).to_bits(),
                        round_big(&x, -s).to_bits()
                    );
                }
            }
        }
    }

    #[test]
    fn batched_exact_reconstruction_equals_the_single_entry_one() {
        let mut rng = Rng::new(13);
        for r in [MIN_MODULI, 9, 14, MAX_MODULI] {
            let plan = CrtPlan::get(r);
            for count in [1usize, 5, BATCH] {
                let xs: Vec<BigInt> = (0..count)
                    .map(|_| random_in_range(&mut rng, plan))
                    .collect();
                let res: Vec<i8> = xs
                    .iter()
                    .flat_map(|x| residues_of(x, plan))
                    .map(|d| d as i8)
                    .collect();
                let s: Vec<i64> = (0..count as i64).map(|e| e * 7 - 20).collect();
                let mut out = vec![0.0; count];
                exact_f64_batch(&res, &s, plan, &mut out);
                for e in 0..count {
                    assert_eq!(out[e].to_bits(), round_big(&xs[e], -s[e]).to_bits());
                }
            }
        }
    }

    #[test]
    fn fp64_crt_error_is_within_the_documented_bound() {
        let mut rng = Rng::new(12);
        for r in MIN_MODULI..=MAX_MODULI {
            let plan = CrtPlan::get(r);
            let scale = 2f64.powi(plan.budget_bits - 85); // 2^-85 · 2^L (s = 0)
            for _ in 0..300 {
                // Values within the scaling's range |C'| <= 1.0635·2^L.
                let mut x = random_in_range(&mut rng, plan);
                while x.abs() > (BigInt::one() << plan.budget_bits as usize) {
                    x >>= 1usize;
                }
                let res = residues_of(&x, plan);
                let exact = round_big(&x, 0);
                let approx = fp64_f64(&res, plan, 0);
                let err = (approx - exact).abs();
                assert!(
                    err <= scale + 2.0 * f64::EPSILON * exact.abs(),
                    "r={r} x={x} err={err:e}"
                );
            }
        }
    }
}
