//! Exact arithmetic on fp64 values: dyadic decomposition, correctly rounded conversions of
//! big integers and rationals to fp64, a correctly rounded `ldexp`, and an exact
//! dot-product accumulator (the reference the accuracy suite measures against).
//!
//! Every finite fp64 `x` is a dyadic rational `x = mant · 2^exp` with `|mant| < 2^53`, so a
//! dot product of fp64 vectors is exactly an integer times a power of two. [`ExactAcc`]
//! accumulates such products without rounding (a Kulisch-style fixed-point accumulator in
//! radix 2^32), and [`round_big`] rounds the result once, to nearest-even, to fp64, with
//! gradual underflow and overflow to infinity as IEEE 754 prescribes.

use num_bigint::{BigInt, BigUint, Sign};
use num_traits::{Signed, Zero};

/// `x = mant · 2^exp` exactly, for finite `x` (`mant` has at most 53 significant bits; zero
/// gives `(0, 0)`).
///
/// # Panics
/// If `x` is NaN or infinite.
#[inline]
pub fn f64_to_dyadic(x: f64) -> (i64, i32) {
    assert!(x.is_finite(), "f64_to_dyadic of a non-finite value");
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let frac = (bits & ((1u64 << 52) - 1)) as i64;
    let (mant, exp) = if biased == 0 {
        (frac, -1074)
    } else {
        (frac | (1i64 << 52), biased - 1075)
    };
    (
        if x.is_sign_negative() { -mant } else { mant },
        if mant == 0 { 0 } else { exp },
    )
}

/// `floor(log2 |x|)` for finite nonzero `x` (subnormals included: the smallest is -1074).
#[inline]
pub fn exponent(x: f64) -> i32 {
    let (mant, exp) = f64_to_dyadic(x);
    debug_assert!(mant != 0);
    exp + 63 - mant.unsigned_abs().leading_zeros() as i32
}

/// `2^e` exactly, for `-1074 <= e <= 1023`.
#[inline]
pub fn pow2(e: i32) -> f64 {
    debug_assert!((-1074..=1023).contains(&e));
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (e + 1074))
    }
}

/// Rounds `(-1)^neg · (mag + s) · 2^exp` to fp64, nearest-even, where `s` is an unknown
/// value in `(0, 1)` when `sticky` is set (bits below `mag` that are nonzero), else 0.
/// Handles gradual underflow and overflow (to ±inf).
pub fn round_u64(neg: bool, mag: u64, exp: i64, sticky: bool) -> f64 {
    let sign = if neg { -1.0 } else { 1.0 };
    if mag == 0 {
        // Only reachable with sticky when the caller kept too few bits; callers keep >= 55.
        debug_assert!(!sticky);
        return sign * 0.0;
    }
    let top = 63 - i64::from(mag.leading_zeros()) + exp; // floor(log2 value)
    if top > 1023 {
        return sign * f64::INFINITY;
    }
    let lsb = (top - 52).max(-1074); // position of the last kept bit
    let shift = lsb - exp;
    let q = if shift <= 0 {
        // All bits kept; a sticky tail (below the last kept bit) is less than half an ulp.
        mag << (-shift) as u32
    } else if shift >= 64 {
        // value < 2^(lsb + 64 - shift) <= one ulp: it rounds up only past the half-ulp point.
        let half_exceeded = shift == 64 && (mag > 1u64 << 63 || (mag == 1u64 << 63 && sticky));
        u64::from(half_exceeded)
    } else {
        let q = mag >> shift;
        let rem = mag & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        let up = rem > half || (rem == half && (sticky || q & 1 == 1));
        q + u64::from(up)
    };
    // q · 2^lsb is representable (q <= 2^53) unless it overflows after rounding up.
    if lsb + 63 - i64::from(q.leading_zeros()) > 1023 {
        return sign * f64::INFINITY;
    }
    sign * (q as f64) * pow2(lsb as i32)
}

/// Correctly rounded `x · 2^n` (C's `scalbn`): one rounding, gradual underflow, overflow to inf.
#[inline]
pub fn ldexp(x: f64, n: i64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let (mant, exp) = f64_to_dyadic(x);
    round_u64(mant < 0, mant.unsigned_abs(), i64::from(exp) + n, false)
}

/// Rounds `(-1)^neg · mag · 2^exp` to fp64 (nearest-even), for a multi-limb magnitude
/// given as little-endian u64 limbs.
pub fn round_limbs(neg: bool, limbs: &[u64], exp: i64) -> f64 {
    let Some(top) = limbs.iter().rposition(|&l| l != 0) else {
        return if neg { -0.0 } else { 0.0 };
    };
    if top == 0 {
        return round_u64(neg, limbs[0], exp, false);
    }
    // Take the top 64 significant bits and a sticky bit for the rest.
    let lz = limbs[top].leading_zeros();
    let hi = if lz == 0 {
        limbs[top]
    } else {
        (limbs[top] << lz) | (limbs[top - 1] >> (64 - lz))
    };
    let lower_rest = if lz == 0 {
        limbs[top - 1]
    } else {
        limbs[top - 1] << lz
    };
    let sticky = lower_rest != 0 || limbs[..top - 1].iter().any(|&l| l != 0);
    let e = exp + 64 * top as i64 - i64::from(lz);
    round_u64(neg, hi, e, sticky)
}

/// Rounds the big integer `n · 2^exp` to fp64 once (nearest-even).
pub fn round_big(n: &BigInt, exp: i64) -> f64 {
    let (sign, digits) = n.to_u64_digits();
    round_limbs(sign == Sign::Minus, &digits, exp)
}

/// Correctly rounded `num / den` (den > 0).
pub fn ratio_to_f64(num: &BigInt, den: &BigUint) -> f64 {
    if num.is_zero() {
        return 0.0;
    }
    // Scale so the quotient has at least 66 bits, then round with a sticky remainder.
    let shift = (66 + den.bits() as i64 - num.magnitude().bits() as i64).max(0);
    let scaled = num.magnitude() << shift as usize;
    let q = &scaled / den;
    let rem_nonzero = !(&scaled % den).is_zero();
    let (_, digits) = BigInt::from(q).to_u64_digits();
    // Append the sticky bit as an extra low limb so round_limbs sees it.
    let mut limbs = vec![u64::from(rem_nonzero)];
    limbs.extend(digits);
    round_limbs(num.is_negative(), &limbs, -shift - 64)
}

/// Exact fixed-point accumulator for sums of products of fp64 values.
///
/// Holds `sum_l a_l b_l` exactly as an integer times `2^-2148` (the smallest product
/// exponent), in radix-2^32 digits stored in `i64` so that about 2^31 additions can be done
/// before normalising; it normalises itself. Products of finite values only.
#[derive(Clone, Debug)]
pub struct ExactAcc {
    digits: Vec<i64>,
    adds: u32,
}

const ACC_BASE_EXP: i64 = -2 * 1074; // exponent of digit 0, bit 0
const ACC_DIGITS: usize = (2 * 1024 + 2 * 1074 + 64 + 32) / 32 + 2;

impl Default for ExactAcc {
    fn default() -> Self {
        Self::new()
    }
}

impl ExactAcc {
    /// An accumulator holding zero.
    pub fn new() -> Self {
        ExactAcc {
            digits: vec![0; ACC_DIGITS],
            adds: 0,
        }
    }

    /// Adds `a · b` exactly.
    #[inline]
    pub fn add_product(&mut self, a: f64, b: f64) {
        let (ma, ea) = f64_to_dyadic(a);
        let (mb, eb) = f64_to_dyadic(b);
        if ma == 0 || mb == 0 {
            return;
        }
        let p = i128::from(ma) * i128::from(mb); // |p| < 2^106
        let pos = i64::from(ea) + i64::from(eb) - ACC_BASE_EXP; // >= 0
        let (d, off) = ((pos / 32) as usize, (pos % 32) as u32);
        let neg = p < 0;
        let pm = p.unsigned_abs();
        // Split pm << off into 32-bit digits without overflow: pm < 2^106, off < 32 -> < 2^138;
        // handle as low part (pm << off truncated) and the bits shifted out.
        let lo = pm << off; // wraps bits >= 128 away
        let hi_bits = if off == 0 { 0 } else { pm >> (128 - off) };
        let chunks = [
            (lo & 0xffff_ffff) as i64,
            ((lo >> 32) & 0xffff_ffff) as i64,
            ((lo >> 64) & 0xffff_ffff) as i64,
            ((lo >> 96) & 0xffff_ffff) as i64,
            (hi_bits & 0xffff_ffff) as i64,
        ];
        for (t, &c) in chunks.iter().enumerate() {
            if neg {
                self.digits[d + t] -= c;
            } else {
                self.digits[d + t] += c;
            }
        }
        self.adds += 1;
        if self.adds >= (1 << 30) {
            self.normalise();
        }
    }

    fn normalise(&mut self) {
        let mut carry = 0i64;
        for d in self.digits.iter_mut() {
            let v = *d + carry;
            *d = v & 0xffff_ffff;
            carry = v >> 32;
        }
        // A final negative carry is kept in the top digit (the value is bounded well below).
        *self.digits.last_mut().unwrap() += carry << 32;
        self.adds = 0;
    }

    /// The exact value as `(n, exp)` with value `n · 2^exp`.
    pub fn value(&self) -> (BigInt, i64) {
        let mut n = BigInt::zero();
        for &d in self.digits.iter().rev() {
            n = (n << 32usize) + BigInt::from(d);
        }
        (n, ACC_BASE_EXP)
    }

    /// The exact value rounded once to fp64.
    pub fn to_f64(&self) -> f64 {
        let (n, e) = self.value();
        round_big(&n, e)
    }

    /// `|self - x|` rounded to fp64 (the exact error of an fp64 approximation `x`).
    pub fn abs_diff(&self, x: f64) -> f64 {
        let (n, e) = self.value();
        let (mx, ex) = f64_to_dyadic(x);
        // x = mx · 2^ex with ex >= -1074 >= e.
        let xn = BigInt::from(mx) << (i64::from(ex) - e) as usize;
        round_big(&(n - xn).abs(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dyadic_round_trip_and_exponent() {
        for &x in &[
            1.0,
            -1.5,
            3.0e-310,
            -5e-324,
            f64::MAX,
            f64::MIN_POSITIVE,
            0.1,
            1e300,
        ] {
            let (m, e) = f64_to_dyadic(x);
            assert_eq!(round_big(&BigInt::from(m), i64::from(e)), x);
            assert_eq!(ldexp(x, 0), x);
        }
        assert_eq!(exponent(1.0), 0);
        assert_eq!(exponent(0.75), -1);
        assert_eq!(exponent(5e-324), -1074);
        assert_eq!(exponent(f64::MAX), 1023);
    }

    #[test]
    fn ldexp_matches_exact_scaling_and_rounds_once_in_the_subnormal_range() {
        assert_eq!(ldexp(1.0, -1074), 5e-324);
        assert_eq!(ldexp(1.0, -1075), 0.0); // tie to even -> 0
        assert_eq!(ldexp(1.5, -1075), 5e-324 * 1.0); // 0.75 ulp -> 1 ulp
        assert_eq!(ldexp(3.0, -1076), 5e-324); // 0.75 -> 1
        assert_eq!(ldexp(1.0, 1024), f64::INFINITY);
        assert_eq!(ldexp(-1.0, 1023), -pow2(1023));
        assert_eq!(ldexp(f64::MAX, -1), f64::MAX / 2.0);
        // Just above half of the smallest subnormal rounds up.
        assert_eq!(ldexp(1.0 + f64::EPSILON, -1075), 5e-324);
        assert_eq!(ldexp(-(1.0 + f64::EPSILON), -1075), -5e-324);
    }

    #[test]
    fn ratio_is_correctly_rounded() {
        let third = ratio_to_f64(&BigInt::from(1), &BigUint::from(3u32));
        assert_eq!(third, 1.0 / 3.0);
        let x = ratio_to_f64(&BigInt::from(-22), &BigUint::from(7u32));
        assert_eq!(x, -22.0 / 7.0);
    }

    #[test]
    fn accumulator_is_exact_under_cancellation() {
        let mut acc = ExactAcc::new();
        acc.add_product(1e300, 1e-300);
        acc.add_product(1e-300, 1e-20);
        acc.add_product(-1e300, 1e-300);
        assert_eq!(acc.to_f64(), 1e-320_f64.max(1e-300 * 1e-20));
        let mut acc = ExactAcc::new();
        for i in 0..1000 {
            acc.add_product(f64::from(i) + 0.5, -3.25);
        }
        let exact: f64 = (0..1000).map(|i| (f64::from(i) + 0.5) * -3.25).sum();
        assert_eq!(acc.to_f64(), exact); // all partial sums exact here
        assert_eq!(acc.abs_diff(exact), 0.0);
    }
}
