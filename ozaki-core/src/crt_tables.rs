//! Constant tables the GPU emulation kernels take by value: per-modulus reciprocals for
//! residue formation, and the CRT weights for reconstruction, as `#[repr(C)]` mirrors of the
//! structs in `gpu-kernels/kernels/ozaki.cu`. Pure numerics (exact integers, no device code):
//! gpu-kernels passes them to its launches.
//!
//! Reconstruction evaluates x = sum_p u_p W_p mod M with W_p = (M/m_p)((M/m_p)^-1 mod m_p),
//! u_p in [0, m_p), in exact 32-bit-limb integer arithmetic (about 5 multiply-adds per
//! modulus and output, against r(r-1)/2 modular steps for Garner), then lifts x to the
//! symmetric range [-M/2, M/2). W_p = 1 mod m_p and 0 mod m_q (q != p), so x = C' mod M.

use num_bigint::BigUint;
use num_traits::{One, ToPrimitive, Zero};

use crate::moduli::MAX_MODULI;
/// 32-bit limbs of the reconstruction state: sum_p u_p W_p < 20 * 256 * M < 2^173.
pub const LIMBS: usize = 6;

/// Mirror of `struct ResidueTable` in ozaki.cu.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResidueTable {
    r: i32,
    pad: i32,
    magic: f64,
    inv_m: [f64; MAX_MODULI],
    c32: [f64; MAX_MODULI],
    neg_m: [u32; MAX_MODULI],
    c32i: [u32; MAX_MODULI],
}

/// 1.5 * 2^52: `v + MAGIC` rounds |v| < 2^51 to an integer held in the low mantissa bits
/// (the `MAGIC` of ozaki.cu).
const MAGIC: f64 = 6_755_399_441_055_744.0;

/// Mirror of `struct CrtTable` in ozaki.cu.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CrtTable {
    r: i32,
    pad: i32,
    magic: f64,
    m: [f64; MAX_MODULI],
    inv_m: [f64; MAX_MODULI],
    inv_big_m: f64,
    wd: [[f64; LIMBS - 1]; MAX_MODULI],
    md: [f64; LIMBS - 1],
    big_m: [u32; LIMBS],
    half_m: [u32; LIMBS],
    neg_lift: [u32; LIMBS],
}

fn limbs(x: &BigUint) -> [u32; LIMBS] {
    let digits = x.to_u32_digits();
    assert!(digits.len() <= LIMBS, "value exceeds {LIMBS} limbs");
    let mut out = [0u32; LIMBS];
    out[..digits.len()].copy_from_slice(&digits);
    out
}

/// Product of the moduli.
pub fn product(moduli: &[u32]) -> BigUint {
    moduli.iter().fold(BigUint::one(), |acc, &m| acc * m)
}

fn check(moduli: &[u32]) {
    assert!(
        !moduli.is_empty() && moduli.len() <= MAX_MODULI,
        "1..={MAX_MODULI} moduli"
    );
    assert!(
        moduli.iter().all(|&m| (2..=256).contains(&m)),
        "byte moduli only"
    );
}

impl ResidueTable {
    /// Table for the first `moduli.len()` moduli: m_0 = 256, the others odd (the INT8 set;
    /// the kernel's residue formula relies on both, see `residues` in ozaki.cu).
    pub fn new(moduli: &[u32]) -> ResidueTable {
        check(moduli);
        assert!(
            moduli[0] == 256 && moduli[1..].iter().all(|m| m % 2 == 1),
            "residue formula: m_0 = 256 and odd m_p otherwise"
        );
        let mut t = ResidueTable {
            r: moduli.len() as i32,
            pad: 0,
            magic: MAGIC,
            inv_m: [0.0; MAX_MODULI],
            c32: [0.0; MAX_MODULI],
            neg_m: [0; MAX_MODULI],
            c32i: [0; MAX_MODULI],
        };
        for (p, &m) in moduli.iter().enumerate() {
            let c = ((1u64 << 32) % m as u64) as u32;
            t.inv_m[p] = 1.0 / m as f64;
            t.c32[p] = c as f64;
            t.neg_m[p] = m.wrapping_neg();
            t.c32i[p] = c;
        }
        t
    }

    /// The centred residue of the integer-valued `z` (|z| <= 2^62) modulo m_p, computed with
    /// exactly the operations of the `residues` kernel (split at 2^32, fma, MAGIC rounding,
    /// wrapping 32-bit arithmetic); for tests against `crate::moduli::centred`.
    pub fn centred(&self, p: usize, z: f64) -> i8 {
        let lo32 = |v: f64| v.to_bits() as u32;
        let hi = (z * 2f64.powi(-32)).floor();
        let lo = (-hi).mul_add(4_294_967_296.0, z);
        let (hi_i, lo_i) = (lo32(hi + MAGIC), lo32(lo + MAGIC));
        if p == 0 {
            return lo_i as u8 as i8; // m_0 = 256
        }
        let y = hi.mul_add(self.c32[p], lo);
        let q = lo32(y.mul_add(self.inv_m[p], self.magic));
        let t = hi_i
            .wrapping_mul(self.c32i[p])
            .wrapping_add(lo_i)
            .wrapping_add(self.neg_m[p].wrapping_mul(q));
        t as u8 as i8
    }
}

impl CrtTable {
    /// Table for the first `moduli.len()` moduli (pairwise coprime).
    pub fn new(moduli: &[u32]) -> CrtTable {
        check(moduli);
        let big_m = product(moduli);
        let half = (&big_m + 1u32) >> 1;
        let as_doubles = |l: [u32; LIMBS]| -> [f64; LIMBS - 1] {
            assert_eq!(l[LIMBS - 1], 0, "M < 2^160: five limbs");
            std::array::from_fn(|i| f64::from(l[i]))
        };
        let mut t = CrtTable {
            r: moduli.len() as i32,
            pad: 0,
            magic: MAGIC,
            m: [0.0; MAX_MODULI],
            inv_m: [0.0; MAX_MODULI],
            inv_big_m: 1.0 / big_m.to_f64().unwrap_or(f64::MAX),
            wd: [[0.0; LIMBS - 1]; MAX_MODULI],
            md: as_doubles(limbs(&big_m)),
            big_m: limbs(&big_m),
            half_m: limbs(&half),
            neg_lift: limbs(&(&big_m - &half + 1u32)),
        };
        for (p, &m) in moduli.iter().enumerate() {
            t.m[p] = m as f64;
            t.inv_m[p] = 1.0 / m as f64;
            let mp = &big_m / m;
            let mp_mod = (&mp % m).to_u64().unwrap_or(0);
            let w = mp * crate::moduli::inv_mod(mp_mod, m as u64);
            t.wd[p] = as_doubles(limbs(&(w % &big_m)));
        }
        t
    }

    /// The kernel's per-modulus step `crt_add` (ozaki.cu), with the same fp64 operations:
    /// t as a double through the bits of 2^52 + 2^31 + t, the centred residue v = t - m_p
    /// rint(t RN(1/m_p)) by two fmas with `MAGIC`, then acc_l += v W_p,l for l < `wl`.
    pub fn fp64_add(&self, acc: &mut [f64], t: i32, p: usize) {
        let td = f64::from_bits((0x4330_0000u64 << 32) | u64::from((t as u32) ^ 0x8000_0000))
            - 4_503_601_774_854_144.0;
        let q = td.mul_add(self.inv_m[p], self.magic) - self.magic;
        let v = (-q).mul_add(self.m[p], td);
        for (a, &w) in acc.iter_mut().zip(&self.wd[p]) {
            *a = v.mul_add(w, *a);
        }
    }

    /// The kernel's `crt_finish` up to the signed integer, with the same operations: the
    /// quotient q = rint(X~ / M) from the fp64 Horner value X~ of X = sum_l acc_l 2^(32 l),
    /// R = X - q M limb by limb (one fma each, then signed carries into `wl` 32-bit limbs), and
    /// the lift to the symmetric range by one comparison and at most one M - |R|. Returns
    /// C' as (negative, magnitude).
    pub fn fp64_finish(&self, acc: &[f64]) -> (bool, BigUint) {
        let wl = acc.len();
        let xd = acc[..wl - 1]
            .iter()
            .rev()
            .fold(acc[wl - 1], |x, &a| x.mul_add(4_294_967_296.0, a));
        let q = xd.mul_add(self.inv_big_m, self.magic) - self.magic;
        let mut x = vec![0u32; wl];
        let mut carry = 0i64;
        for (l, xl) in x.iter_mut().enumerate() {
            let s = ((-q).mul_add(self.md[l], acc[l]) as i64) + carry;
            *xl = s as u32;
            carry = s >> 32;
        }
        assert!(carry == 0 || carry == -1, "|R| < 2^(32 wl)");
        let mut neg = carry < 0;
        let mut mag = BigUint::from_slice(&x);
        if neg {
            mag = (BigUint::one() << (32 * wl)) - mag;
        }
        let lift = if neg { &self.neg_lift } else { &self.half_m };
        if mag >= BigUint::from_slice(lift) {
            mag = self.modulus() - mag;
            neg = !neg;
        }
        (neg && !mag.is_zero(), mag)
    }

    /// Limbs the reconstruction kernel accumulates for this table: its `WL`, 4 (`_w4`
    /// kernels) while M < 2^128, else 5.
    pub fn kernel_limbs(&self) -> usize {
        if self.weight_limbs() <= 4 { 4 } else { 5 }
    }

    /// [`CrtTable::reconstruct`] through the kernel's fp64 steps ([`CrtTable::fp64_add`] and
    /// [`CrtTable::fp64_finish`] over [`CrtTable::kernel_limbs`] limbs): what the device
    /// computes, for the tests that it is the same signed integer.
    pub fn reconstruct_fp64(&self, products: &[i32]) -> (bool, BigUint) {
        let mut acc = vec![0.0; self.kernel_limbs()];
        for (p, &t) in products.iter().enumerate().take(self.r as usize) {
            self.fp64_add(&mut acc, t, p);
        }
        self.fp64_finish(&acc)
    }

    /// 32-bit limbs the weights W_p < M can occupy (the kernels' `WL`): 4 up to 16 INT8
    /// moduli, 5 up to 20 (`reconstruct_w4` / `reconstruct` in ozaki.cu).
    pub fn weight_limbs(&self) -> usize {
        self.big_m
            .iter()
            .rposition(|&l| l != 0)
            .map_or(1, |i| i + 1)
    }

    /// The CRT weight W_p as an integer (for tests).
    pub fn weight(&self, p: usize) -> BigUint {
        let limbs: Vec<u32> = self.wd[p].iter().map(|&d| d as u32).collect();
        BigUint::from_slice(&limbs)
    }

    /// M as an integer (for tests).
    pub fn modulus(&self) -> BigUint {
        BigUint::from_slice(&self.big_m)
    }

    /// The host-side twin of the kernel's reconstruction for one output: int32 products per
    /// modulus in, the signed integer C' (as sign, magnitude) out. Used by tests to check the
    /// table and the lift without a GPU.
    pub fn reconstruct(&self, products: &[i32]) -> (bool, BigUint) {
        let mut x = BigUint::zero();
        for (p, &c) in products.iter().enumerate().take(self.r as usize) {
            let u = (c as i64).rem_euclid(self.m[p] as i64) as u64;
            x += self.weight(p) * u;
        }
        self.lift(x)
    }

    /// x mod M lifted to the symmetric range [-M/2, M/2), as (negative, magnitude).
    fn lift(&self, x: BigUint) -> (bool, BigUint) {
        let big_m = self.modulus();
        let x = x % &big_m;
        let half = BigUint::from_slice(&self.half_m);
        if x >= half {
            (true, big_m - x)
        } else {
            (false, x)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: [u32; 20] = [
        256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193, 191, 181,
        179, 173,
    ];

    #[test]
    fn weights_are_the_crt_idempotents() {
        for r in [1, 2, 7, 14, 20] {
            let t = CrtTable::new(&SET[..r]);
            for p in 0..r {
                for (q, &mq) in SET[..r].iter().enumerate() {
                    let w = t.weight(p) % mq;
                    assert_eq!(
                        w,
                        BigUint::from((p == q) as u32),
                        "W_{p} mod m_{q}, r = {r}"
                    );
                }
            }
        }
    }

    #[test]
    fn reconstruction_recovers_signed_values_at_the_range_ends() {
        let t = CrtTable::new(&SET[..16]);
        let big_m = t.modulus();
        let half: BigUint = &big_m >> 1; // M even (256 in the set): range [-M/2, M/2)
        for (neg, mag) in [
            (false, BigUint::zero()),
            (false, &half - 1u32),
            (true, half.clone()),
            (true, BigUint::one()),
        ] {
            // residues of +-mag, as the int8 products would deliver them (any representative)
            let prods: Vec<i32> = SET[..16]
                .iter()
                .map(|&m| {
                    let r = (&mag % m).to_i64().unwrap();
                    let r = if neg { -r } else { r };
                    (r + 3 * m as i64) as i32 // a non-canonical representative
                })
                .collect();
            let (n2, m2) = t.reconstruct(&prods);
            let zero = mag.is_zero();
            assert_eq!((n2 && !zero, m2), (neg && !zero, mag));
        }
    }

    /// The kernel's fp64 steps recover C' at the ends of the symmetric range [-M/2, M/2) and
    /// around zero, for every moduli count, from residue representatives far from canonical
    /// (sum_p v_p W_p then lies anywhere in +-20 * 128 M, also next to half-integer multiples
    /// of M, where the quotient estimate may be one off).
    #[test]
    fn fp64_reconstruction_recovers_values_at_the_range_ends() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for r in 1..=SET.len() {
            let t = CrtTable::new(&SET[..r]);
            let big_m = t.modulus();
            let half: BigUint = (&big_m + 1u32) >> 1;
            let low = &big_m - &half; // C' >= -low
            let mut targets = vec![
                (false, BigUint::zero()),
                (false, BigUint::one()),
                (true, BigUint::one()),
                (false, &half - 1u32),
                (false, &half - 2u32),
                (true, low.clone()),
                (true, &low - 1u32),
            ];
            for _ in 0..20 {
                let v = BigUint::from(next()) * BigUint::from(next()) * BigUint::from(next());
                targets.push((next() % 2 == 0, (v % &low) + 1u32));
            }
            for (neg, mag) in targets {
                for _ in 0..40 {
                    // t_p = C' mod m_p + j_p m_p with |t_p| < 2^31
                    let prods: Vec<i32> = SET[..r]
                        .iter()
                        .map(|&m| {
                            let res = (&mag % m).to_i64().unwrap();
                            let res = if neg {
                                (m as i64 - res) % m as i64
                            } else {
                                res
                            };
                            let span = (i32::MAX as i64 / m as i64) - 1;
                            let j = (next() % (2 * span as u64 + 1)) as i64 - span;
                            (res + j * m as i64) as i32
                        })
                        .collect();
                    let zero = mag.is_zero();
                    let (n2, m2) = t.reconstruct_fp64(&prods);
                    assert_eq!((n2, &m2), (neg && !zero, &mag), "r = {r}, {prods:?}");
                }
            }
        }
    }

    /// The kernel's fp64 CRT steps give the exact signed integer for int32 products at the
    /// ends of their range, next to multiples and half-multiples of every modulus (the ties
    /// of the centring), and at random, for every moduli count.
    #[test]
    fn fp64_reconstruction_is_the_exact_crt_for_every_int32_range_end() {
        let mut probes: Vec<i32> = vec![0, 1, -1, i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1];
        for &m in &SET {
            let m = m as i32;
            for base in [0, 1 << 24, -(1 << 24), i32::MAX / m * m, i32::MIN / m * m] {
                for d in -(m + 2)..=(m + 2) {
                    probes.extend([base.saturating_add(d), base.saturating_add(d + m / 2)]);
                }
            }
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..20_000 {
            let v = next();
            probes.push((v as i32) >> (v >> 59)); // every magnitude
        }
        for r in 1..=SET.len() {
            let t = CrtTable::new(&SET[..r]);
            // products: each probe in every slot, plus random mixes
            let mut calls: Vec<Vec<i32>> = probes.iter().map(|&x| vec![x; r]).collect();
            for _ in 0..3_000 {
                calls.push(
                    (0..r)
                        .map(|_| probes[next() as usize % probes.len()])
                        .collect(),
                );
            }
            for prods in &calls {
                assert_eq!(
                    t.reconstruct_fp64(prods),
                    t.reconstruct(prods),
                    "r = {r}, {prods:?}"
                );
            }
        }
    }

    #[test]
    fn weights_fit_the_limbs_the_kernels_multiply() {
        for r in 1..=SET.len() {
            let t = CrtTable::new(&SET[..r]);
            let wl = t.weight_limbs();
            assert!(wl <= 5, "ozaki.cu instantiates WL = 4 and 5 only (r = {r})");
            assert_eq!(
                wl <= 4,
                r <= 16,
                "r = {r}: M < 2^128 exactly up to 16 moduli"
            );
            for p in 0..r {
                assert!(
                    t.weight(p).bits() <= 32 * wl as u64,
                    "W_{p} beyond {wl} limbs, r = {r}"
                );
            }
            // crt_finish: |R| < 1.5 M must fit the kernel's limbs as a signed number
            assert!(
                t.modulus().bits() < 32 * t.kernel_limbs() as u64,
                "M < 2^(32 WL - 1), r = {r}"
            );
        }
    }

    #[test]
    fn residue_table_matches_moduli() {
        let t = ResidueTable::new(&SET[..3]);
        assert_eq!(t.r, 3);
        assert_eq!(t.neg_m[2], 253u32.wrapping_neg());
        assert_eq!(t.c32i[1], ((1u64 << 32) % 255) as u32);
        assert_eq!(t.inv_m[0], 1.0 / 256.0);
    }

    /// The kernel's conversion-free residue formula gives ozaki-core's centred residue for
    /// every modulus: at the ends of the |z| <= 2^62 range, next to multiples of m and of
    /// m/2 (the ties of the centring), and on random integers of every magnitude.
    #[test]
    fn kernel_residue_formula_is_the_centred_residue() {
        use crate::moduli::centred;
        let t = ResidueTable::new(&SET);
        let mut zs: Vec<i64> = vec![0, 1, -1, 1 << 62, -(1 << 62), (1 << 62) - 1, 1 - (1 << 62)];
        for e in [31, 32, 33, 40, 51, 52, 53, 61, 62] {
            zs.extend([(1i64 << e) - 1, 1 << e, -(1i64 << e), 1 - (1i64 << e)]);
        }
        for &m in &SET {
            let m = m as i64;
            for base in [
                0i64,
                1 << 20,
                1 << 40,
                (1 << 62) / m * m,
                -(1 << 52) / m * m,
            ] {
                for d in -(m + 2)..=(m + 2) {
                    zs.extend([base + d, base + d + m / 2, -(base + d)]);
                }
            }
        }
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let shift = (s >> 58) as u32; // 0..63
            zs.push(((s as i64) >> shift.max(1)).clamp(-(1 << 62), 1 << 62));
        }
        for &z in &zs {
            let zf = z as f64;
            if z.unsigned_abs() > 1 << 62 || zf as i64 != z {
                continue; // outside the kernel's range, or not an fp64 value (its z always is)
            }
            for (p, &m) in SET.iter().enumerate() {
                assert_eq!(t.centred(p, zf) as i32, centred(z, m), "z = {z}, m = {m}");
            }
        }
    }
}
