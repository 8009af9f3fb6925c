//! The INT8 modulus set of the Ozaki-II route and its precomputed CRT constants.
//!
//! # Definition (shared by the CPU reference route and the GPU route)
//!
//! The moduli are, in the order they are used,
//!
//! ```text
//! m_0..m_19 = 256, 255, 253, 251, 247, 241, 239, 233, 229, 227,
//!             223, 217, 211, 199, 197, 193, 191, 181, 179, 173
//! ```
//!
//! (the all-byte set A of the paper brief §2.1 extended to the 20 byte moduli GEMMul8 uses;
//! pairwise coprime but not all prime: 255 = 3·5·17, 247 = 13·19, 217 = 7·31). A call with
//! `r` moduli (`MIN_MODULI <= r <= MAX_MODULI`) uses the **first** `r` of them, so that
//! every prefix is a valid set and `M_r = m_0 ··· m_{r-1}` grows with `r`:
//!
//! | r | 2 | 8 | 12 | 13 | 14 | 15 | 16 | 17 | 18 | 20 |
//! |---|---|---|---|---|---|---|---|---|---|---|
//! | floor(log2 M_r) | 15 | 63 | 94 | 102 | 110 | 117 | 125 | 132 | 140 | 155 |
//!
//! Residues are **centred**: the residue of an integer `x` modulo `m` is the unique
//! `d ≡ x (mod m)` with `-m/2 <= d < m/2` (half-open, as in the paper: for the even modulus
//! 256 the value -128 is included and +128 excluded). Every centred residue fits an `i8`.
//! An integer `C` with `-M_r/2 <= C < M_r/2` is determined by its residues (CRT).
//!
//! [`CrtPlan`] holds, per `r`, the constants both reconstruction variants of
//! [`crate::reconstruct`] need, and the *scaling budget* `L_r = floor(log2 M_r) - 2` used
//! by [`crate::scaling`]: the scaling guarantees `|C| <= 1.0635 · 2^{L_r} < M_r/2`.

use num_bigint::{BigInt, BigUint};
use num_traits::{One, ToPrimitive};
use std::sync::OnceLock;

/// The INT8 moduli in the order they are used (a call with `r` moduli uses the first `r`).
pub const INT8_MODULI: [u32; 20] = [
    256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193, 191, 181, 179,
    173,
];

/// Smallest supported moduli count.
pub const MIN_MODULI: usize = 2;
/// Largest supported moduli count.
pub const MAX_MODULI: usize = INT8_MODULI.len();

/// Centred residue of `x` modulo `m`: the unique `d ≡ x (mod m)` with `-m/2 <= d < m/2`.
///
/// This is the one definition every residue map in the crate (and the GPU kernels) must
/// agree with bit for bit; [`crate::residues`] has the fast equivalents and their tests.
#[inline]
pub fn centred(x: i64, m: u32) -> i32 {
    let m64 = i64::from(m);
    let d = x.rem_euclid(m64);
    // d in [0, m); d >= m/2 (i.e. 2d >= m) maps to d - m.
    (if 2 * d >= m64 { d - m64 } else { d }) as i32
}

/// Precomputed constants for the first `r` moduli (see the module doc).
#[derive(Debug)]
pub struct CrtPlan {
    /// Number of moduli.
    pub r: usize,
    /// The moduli `m_0..m_{r-1}`.
    pub moduli: &'static [u32],
    /// `M_r`, the product of the moduli.
    pub product: BigUint,
    /// `M_r / 2` as a signed integer (the lift threshold of the symmetric range).
    pub half_product: BigInt,
    /// `floor(log2 M_r)`.
    pub log2_floor: u32,
    /// The scaling budget `L_r = floor(log2 M_r) - 2` (bits), see [`crate::scaling`].
    pub budget_bits: i32,
    /// Garner constants: `garner_inv[j][i] = m_i^{-1} mod m_j` for `i < j`.
    pub garner_inv: Vec<Vec<u32>>,
    /// fp64 CRT constants: `y_i / m_i` as a double-double `(hi, lo)`, where
    /// `y_i = (M_r / m_i)^{-1} mod m_i` in `[0, m_i)`; `hi = RN(y_i/m_i)`, `lo = RN(y_i/m_i - hi)`.
    pub frac_weights: Vec<(f64, f64)>,
    /// fp64 CRT constant: `M_r` as a double-double `(hi, lo)`.
    pub product_dd: (f64, f64),
    /// `M_r` as little-endian u64 limbs (`M_20 < 2^156`).
    pub product_limbs: [u64; 3],
    /// `M_r / 2` as little-endian u64 limbs.
    pub half_limbs: [u64; 3],
}

/// `a^-1 mod m` for coprime `a`, `m` (extended Euclid on small integers; the moduli are
/// pairwise coprime, tested). Shared with the GPU route's CRT tables (`gpu-kernels` `crt`).
///
/// # Panics
/// - `a` has no inverse mod `m`.
pub fn inv_mod(a: u64, m: u64) -> u64 {
    let (mut old_r, mut r) = (a as i64 % m as i64, m as i64);
    let (mut old_s, mut s) = (1i64, 0i64);
    while r != 0 {
        let q = old_r / r;
        (old_r, r) = (r, old_r - q * r);
        (old_s, s) = (s, old_s - q * s);
    }
    assert_eq!(old_r, 1, "not invertible");
    old_s.rem_euclid(m as i64) as u64
}

/// Splits the exact rational `num / den` (den > 0) into a double-double `(hi, lo)`:
/// `hi = RN(num/den)`, `lo = RN(num/den - hi)`, both correctly rounded.
pub(crate) fn rational_dd(num: &BigInt, den: &BigUint) -> (f64, f64) {
    let hi = crate::exact::ratio_to_f64(num, den);
    let den_i = BigInt::from(den.clone());
    // num/den - hi = (num - hi·den)/den, with hi an exact dyadic rational.
    let (hm, he) = crate::exact::f64_to_dyadic(hi);
    // hi = hm · 2^he
    let (n2, d2) = if he >= 0 {
        (
            num - BigInt::from(hm) * (&den_i << he as usize),
            den.clone(),
        )
    } else {
        (
            (num << (-he) as usize) - BigInt::from(hm) * &den_i,
            den << (-he) as usize,
        )
    };
    let lo = crate::exact::ratio_to_f64(&n2, &d2);
    (hi, lo)
}

impl CrtPlan {
    fn build(r: usize) -> CrtPlan {
        let moduli = &INT8_MODULI[..r];
        let product: BigUint = moduli.iter().map(|&m| BigUint::from(m)).product();
        let log2_floor = (product.bits() - 1) as u32;
        let garner_inv = (0..r)
            .map(|j| {
                (0..j)
                    .map(|i| inv_mod(u64::from(moduli[i]), u64::from(moduli[j])) as u32)
                    .collect()
            })
            .collect();
        let frac_weights = moduli
            .iter()
            .map(|&m| {
                let n_i = &product / BigUint::from(m);
                let n_mod = (&n_i % BigUint::from(m)).to_u64().unwrap();
                let y = inv_mod(n_mod, u64::from(m));
                rational_dd(&BigInt::from(y), &BigUint::from(m))
            })
            .collect();
        let product_dd = rational_dd(&BigInt::from(product.clone()), &BigUint::one());
        let half_product = BigInt::from(&product >> 1usize);
        let limbs = |x: &BigUint| {
            let mut l = [0u64; 3];
            for (d, v) in l.iter_mut().zip(x.to_u64_digits()) {
                *d = v;
            }
            l
        };
        let product_limbs = limbs(&product);
        let half_limbs = limbs(&(&product >> 1usize));
        CrtPlan {
            product_limbs,
            half_limbs,
            r,
            moduli,
            product,
            half_product,
            log2_floor,
            budget_bits: log2_floor as i32 - 2,
            garner_inv,
            frac_weights,
            product_dd,
        }
    }

    /// The plan for the first `r` moduli.
    ///
    /// # Panics
    /// If `r` is outside `MIN_MODULI..=MAX_MODULI`.
    pub fn get(r: usize) -> &'static CrtPlan {
        static PLANS: OnceLock<Vec<CrtPlan>> = OnceLock::new();
        assert!(
            (MIN_MODULI..=MAX_MODULI).contains(&r),
            "moduli count {r} outside {MIN_MODULI}..={MAX_MODULI}"
        );
        &PLANS.get_or_init(|| (0..=MAX_MODULI).map(|r| CrtPlan::build(r.max(1))).collect())[r]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_integer::Integer;

    #[test]
    fn moduli_are_pairwise_coprime_and_centred_residues_fit_i8() {
        for (i, &a) in INT8_MODULI.iter().enumerate() {
            assert!(a <= 256);
            for &b in &INT8_MODULI[i + 1..] {
                assert_eq!(
                    u64::from(a).gcd(&u64::from(b)),
                    1,
                    "{a} and {b} share a factor"
                );
            }
            for x in -1000i64..1000 {
                let d = centred(x, a);
                assert!(i8::try_from(d).is_ok());
                assert!(-(a as i32) <= 2 * d && 2 * d < a as i32);
                assert_eq!((x - i64::from(d)).rem_euclid(i64::from(a)), 0);
            }
        }
        assert_eq!(centred(128, 256), -128);
        assert_eq!(centred(-128, 256), -128);
        assert_eq!(centred(127, 255), 127);
        assert_eq!(centred(128, 255), -127);
    }

    /// The inverses the CRT weights of both routes are built from: `a inv_mod(a, m) = 1 mod m`
    /// for every residue a of every modulus (and the product of the others, as `crt` uses it),
    /// and a value without an inverse is refused.
    #[test]
    fn inv_mod_inverts_every_unit() {
        for &m in &INT8_MODULI {
            let m = u64::from(m);
            for a in (1..m).filter(|a| a.gcd(&m) == 1) {
                assert_eq!(a * inv_mod(a, m) % m, 1, "{a} mod {m}");
                assert_eq!(inv_mod(a + 7 * m, m), inv_mod(a, m), "{a} + 7m mod {m}");
            }
        }
        assert!(std::panic::catch_unwind(|| inv_mod(4, 256)).is_err());
    }

    #[test]
    fn plan_constants_are_exact() {
        for r in MIN_MODULI..=MAX_MODULI {
            let p = CrtPlan::get(r);
            assert_eq!(p.r, r);
            assert!(p.product.bits() - 1 == u64::from(p.log2_floor));
            // 1.0635 · 2^L < M/2.
            let two_l = BigUint::one() << p.budget_bits as usize;
            assert!(two_l * 10635u32 < &p.product * 5000u32);
            for j in 0..r {
                for i in 0..j {
                    assert_eq!(
                        (p.garner_inv[j][i] as u64 * p.moduli[i] as u64) % p.moduli[j] as u64,
                        1
                    );
                }
                // y_j · (M/m_j) ≡ 1 (mod m_j), with y_j/m_j = hi + lo to ~2^-106.
                let y = (p.frac_weights[j].0 * f64::from(p.moduli[j])).round() as u64;
                let n = (&p.product / BigUint::from(p.moduli[j])) % BigUint::from(p.moduli[j]);
                assert_eq!((n.to_u64().unwrap() * y) % u64::from(p.moduli[j]), 1);
            }
        }
        // The table in the module doc.
        let bits: Vec<u32> = [2, 8, 12, 13, 14, 15, 16, 17, 18, 20]
            .iter()
            .map(|&r| CrtPlan::get(r).log2_floor)
            .collect();
        assert_eq!(bits, [15, 63, 94, 102, 110, 117, 125, 132, 140, 155]);
    }
}
