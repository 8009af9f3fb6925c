//! The FP8 (e4m3) modulus sets S, A, E, D of the Ozaki 2.5 paper and their plane
//! encodings, as data shared by any later FP8 route and by the engine (paper
//! brief §1.5, §2, §3.2, Lemma 1).
//!
//! On Hopper the INT8 route ([`crate::moduli`]) is the production path (brief §9.2); this
//! module is the exhaustively tested reference for the FP8 machinery.
//!
//! # e4m3-exact integers
//! An integer is exact in e4m3 iff it is `M · 2^e` with `|M| <= 15` and magnitude `<= 448`
//! ([`e4m3_exact`]); in `0..=64` that is `0..=16, 18, 20, ..., 32, 36, ..., 64`
//! (17, 19, 21, 23 are not). [`decode_e4m3`] decodes all 256 codes to prove it.
//!
//! # Plane encodings of a centred residue `d ∈ [-m/2, m/2)`
//! - **Square modulus** `m = s²`, `s <= 33` ([`Encoding::Square`]): balanced base-`s` digits
//!   `d = d_0 + s d_1`, `d_0 ∈ [-floor(s/2), ceil(s/2) - 1]`, `|d_i| <= 16`; two stored planes.
//!   Because `s² d_1 e_1 ≡ 0 (mod s²)`,
//!   `d e ≡ d_0 e_0 + s (d_0 e_1 + d_1 e_0) (mod s²)`: three plane products, epilogue
//!   coefficients `{1, s, s}`.
//! - **Karatsuba, base 16** ([`Encoding::Karatsuba`]): the two-limb split
//!   `d = d_0 + 16 d_1` with the canonical balanced tie rule `d_0 ∈ [-8, 7]` (Eq. 6), plus the
//!   sum plane `d_0 + d_1`; exactly (Eq. 18)
//!   `d e = -15 d_0 e_0 + 16 (d_0 + d_1)(e_0 + e_1) + 240 d_1 e_1`. For byte moduli
//!   (`m <= 256`) every plane is in `[-16, 16]`.
//! - **Lemma 1, carry-corrected redundant split** (`redundant: true`, the S tail 487..511):
//!   take the canonical split; if `d_0 + d_1` is not e4m3-exact, with `ς = sign(d_0)` set
//!   `(d_0, d_1) <- (d_0 - 16 ς, d_1 + ς)`. Then `d = d_0 + 16 d_1` still holds, all three
//!   planes are e4m3-exact, and `|d_0| <= 14`, `|d_1| <= 16`, `|d_0 + d_1| <= 22`, so every
//!   plane product is `<= 484` and fp32 accumulation is exact for `K <= 2^24/484 = 34663`.
//!   The lemma holds for every nonsquare `m <= 513` and fails at 514.
//!
//! # Two-limb byte reduction (brief §3.2, Prediction 4 step 1)
//! A signed 64-bit scaled integer `z` has bytes `z_0..z_7` of its two's complement, so
//! `z ≡ sum_k z_k c_k - [z < 0] · (2^64 mod m) (mod m)` with `c_k = 2^(8k) mod m`. Splitting
//! each constant into bytes `c_k = c_k^lo + 256 c_k^hi` gives two int8-shaped dot products
//! (`lo = sum z_k c_k^lo`, `hi = sum z_k c_k^hi`, each `<= 8 · 255 · 255 < 2^19`), and
//! `z mod m = (lo + 256 hi - [z < 0] (2^64 mod m)) mod m` ([`byte_plane_residue`]).

use crate::moduli::centred;

/// Whether the integer `x` is exactly representable in e4m3 (|M| <= 15 times a power of two,
/// magnitude <= 448).
pub fn e4m3_exact(x: i32) -> bool {
    let a = x.unsigned_abs();
    a == 0 || (a <= 448 && (a >> a.trailing_zeros()) <= 15)
}

/// Decodes an e4m3 (OCP FP8, bias 7, no infinities, `S.1111.111` = NaN) byte; `None` for NaN.
pub fn decode_e4m3(code: u8) -> Option<f64> {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((code >> 3) & 0xf);
    let man = f64::from(code & 7);
    if exp == 0xf && code & 7 == 7 {
        return None;
    }
    let v = if exp == 0 {
        man / 8.0 * 2f64.powi(-6)
    } else {
        (1.0 + man / 8.0) * 2f64.powi(exp - 7)
    };
    Some(sign * v)
}

/// How the residues of one modulus are stored as e4m3 planes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `m = s²`: two balanced base-`s` planes, products weighted `{1, s, s}`.
    Square {
        /// `s`.
        s: u32,
    },
    /// Base-16 two-limb split plus the Karatsuba sum plane, weights `{-15, 16, 240}`.
    Karatsuba {
        /// Lemma 1 carry correction (needed for the S tail 487..511).
        redundant: bool,
    },
}

impl Encoding {
    /// Stored planes per scalar (p_store contribution).
    pub fn stored_planes(&self) -> usize {
        match self {
            Encoding::Square { .. } => 2,
            Encoding::Karatsuba { .. } => 3,
        }
    }
}

/// Balanced base-`b` digits of `d`: `d_0 ∈ [-floor(b/2), ceil(b/2) - 1]`, `d_1 = (d - d_0)/b`.
pub fn balanced_split(d: i32, b: i32) -> (i32, i32) {
    let lo = -(b / 2);
    let d0 = (d - lo).rem_euclid(b) + lo;
    (d0, (d - d0) / b)
}

/// The Lemma 1 carry-corrected base-16 split (module doc).
pub fn lemma1_split(d: i32) -> (i32, i32) {
    let (mut d0, mut d1) = balanced_split(d, 16);
    if !e4m3_exact(d0 + d1) {
        let s = d0.signum();
        d0 -= 16 * s;
        d1 += s;
    }
    (d0, d1)
}

/// The stored planes of the centred residue `d` (2 or 3 values; the third is 0 for squares).
pub fn planes(enc: Encoding, d: i32) -> [i32; 3] {
    match enc {
        Encoding::Square { s } => {
            let (d0, d1) = balanced_split(d, s as i32);
            [d0, d1, 0]
        }
        Encoding::Karatsuba { redundant } => {
            let (d0, d1) = if redundant {
                lemma1_split(d)
            } else {
                balanced_split(d, 16)
            };
            [d0, d1, d0 + d1]
        }
    }
}

/// The plane products of `d` and `e` and their weighted sum (≡ `d e` mod m; exact `d e` for
/// Karatsuba): returns `([p0, p1, p2], combination)`.
pub fn plane_product(enc: Encoding, d: i32, e: i32) -> ([i64; 3], i64) {
    let (x, y) = (planes(enc, d), planes(enc, e));
    match enc {
        Encoding::Square { s } => {
            let p = [
                i64::from(x[0] * y[0]),
                i64::from(x[0] * y[1]),
                i64::from(x[1] * y[0]),
            ];
            (p, p[0] + i64::from(s) * (p[1] + p[2]))
        }
        Encoding::Karatsuba { .. } => {
            let p = [
                i64::from(x[0] * y[0]),
                i64::from(x[2] * y[2]),
                i64::from(x[1] * y[1]),
            ];
            (p, -15 * p[0] + 16 * p[1] + 240 * p[2])
        }
    }
}

/// One FP8 modulus set of the paper.
#[derive(Debug, Clone, Copy)]
pub struct Fp8Set {
    /// Set name (S, A, E, D).
    pub name: &'static str,
    /// Moduli in the paper's order.
    pub moduli: &'static [u32],
}

/// S: the published FP8 Ozaki-II set (6 squares + the Lemma 1 tail).
pub const SET_S: Fp8Set = Fp8Set {
    name: "S",
    moduli: &[1089, 1024, 961, 841, 625, 529, 511, 509, 503, 499, 491, 487],
};
/// A: all-byte (the INT8 set's first 15).
pub const SET_A: Fp8Set = Fp8Set {
    name: "A",
    moduli: &[
        256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197,
    ],
};
/// E: squares <= 33² plus a byte tail.
pub const SET_E: Fp8Set = Fp8Set {
    name: "E",
    moduli: &[
        1089, 1024, 961, 841, 625, 529, 251, 247, 241, 239, 233, 229, 227,
    ],
};
/// D: 7-bit moduli.
pub const SET_D: Fp8Set = Fp8Set {
    name: "D",
    moduli: &[
        128, 127, 125, 123, 121, 119, 113, 109, 107, 103, 101, 97, 89, 83, 79, 73, 71,
    ],
};
/// All four sets.
pub const SETS: [Fp8Set; 4] = [SET_S, SET_A, SET_E, SET_D];

/// The encoding the paper uses for modulus `m`: squares `s² (s <= 33)` two-plane, moduli
/// above 256 that are not squares with the Lemma 1 split, everything else canonical Karatsuba.
pub fn encoding(m: u32) -> Encoding {
    let s = m.isqrt();
    if s * s == m && s <= 33 {
        Encoding::Square { s }
    } else {
        Encoding::Karatsuba { redundant: m > 256 }
    }
}

impl Fp8Set {
    /// `log2` of the product of the moduli.
    pub fn bits(&self) -> f64 {
        self.moduli.iter().map(|&m| f64::from(m).log2()).sum()
    }

    /// Stored e4m3 bytes per scalar (`p_store`).
    pub fn p_store(&self) -> usize {
        self.moduli
            .iter()
            .map(|&m| encoding(m).stored_planes())
            .sum()
    }

    /// Low-precision MMA passes per product in accurate mode, `α = 3r + 1` (Eq. 7).
    pub fn alpha(&self) -> usize {
        3 * self.moduli.len() + 1
    }
}

/// `z mod m` in `[0, m)` by the two-limb byte reduction (module doc).
pub fn byte_plane_residue(z: i64, m: u32) -> u32 {
    let bytes = (z as u64).to_le_bytes();
    let (mut lo, mut hi) = (0u64, 0u64);
    for (k, &b) in bytes.iter().enumerate() {
        let c = (1u128 << (8 * k)) % u128::from(m);
        lo += u64::from(b) * (c as u64 & 0xff);
        hi += u64::from(b) * (c as u64 >> 8);
    }
    debug_assert!(lo < 1 << 19 && hi < 1 << 19);
    let neg_corr = if z < 0 {
        ((1u128 << 64) % u128::from(m)) as u64
    } else {
        0
    };
    let mm = u64::from(m);
    ((lo + 256 * hi + mm - neg_corr) % mm) as u32
}

/// `centred` via the byte reduction (for cross-checks with [`crate::moduli::centred`]).
pub fn byte_plane_centred(z: i64, m: u32) -> i32 {
    centred(i64::from(byte_plane_residue(z, m)), m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_integer::Integer;

    fn centred_range(m: u32) -> std::ops::Range<i32> {
        let lo = -((m / 2) as i32);
        lo..lo + m as i32
    }

    #[test]
    fn e4m3_exact_integers_are_exactly_the_decodable_ones() {
        let mut decoded = std::collections::BTreeSet::new();
        for code in 0..=255u8 {
            if let Some(v) = decode_e4m3(code)
                && v.fract() == 0.0
            {
                decoded.insert(v as i32);
            }
        }
        let predicate: std::collections::BTreeSet<i32> =
            (-600..=600).filter(|&x| e4m3_exact(x)).collect();
        assert_eq!(decoded, predicate);
        let small: Vec<i32> = (0..=64).filter(|&x| e4m3_exact(x)).collect();
        let mut want: Vec<i32> = (0..=16).collect();
        want.extend([
            18, 20, 22, 24, 26, 28, 30, 32, 36, 40, 44, 48, 52, 56, 60, 64,
        ]);
        assert_eq!(small, want);
        assert_eq!(decode_e4m3(0x7e), Some(448.0));
    }

    #[test]
    fn sets_are_pairwise_coprime_with_the_papers_bits_and_store_counts() {
        let want = [
            ("S", 111.84, 30, 37),
            ("A", 117.78, 44, 46),
            ("E", 113.31, 33, 40),
            ("D", 113.48, 50, 52),
        ];
        for (set, (name, bits, p, alpha)) in SETS.iter().zip(want) {
            assert_eq!(set.name, name);
            for (i, &a) in set.moduli.iter().enumerate() {
                for &b in &set.moduli[i + 1..] {
                    assert_eq!(u64::from(a).gcd(&u64::from(b)), 1, "{name}: {a}, {b}");
                }
            }
            assert!((set.bits() - bits).abs() < 0.005, "{name} {}", set.bits());
            assert!(set.bits() >= 111.8 - 0.05);
            assert_eq!(set.p_store(), p, "{name}");
            assert_eq!(set.alpha(), alpha);
        }
        // A is the INT8 route's first 15 moduli.
        assert_eq!(SET_A.moduli, &crate::moduli::INT8_MODULI[..15]);
    }

    #[test]
    fn every_plane_digit_is_e4m3_exact_and_every_product_identity_holds_exhaustively() {
        let mut all: Vec<u32> = SETS.iter().flat_map(|s| s.moduli.iter().copied()).collect();
        all.sort_unstable();
        all.dedup();
        for m in all {
            let enc = encoding(m);
            let mut max_plane = [0i32; 3];
            for d in centred_range(m) {
                let p = planes(enc, d);
                match enc {
                    Encoding::Square { s } => assert_eq!(p[0] + s as i32 * p[1], d),
                    Encoding::Karatsuba { .. } => assert_eq!(p[0] + 16 * p[1], d),
                }
                let used = if enc.stored_planes() == 2 {
                    &p[..2]
                } else {
                    &p[..]
                };
                for (t, &v) in used.iter().enumerate() {
                    assert!(e4m3_exact(v), "m={m} d={d} plane {t} = {v}");
                    max_plane[t] = max_plane[t].max(v.abs());
                }
            }
            let bound = match enc {
                Encoding::Square { .. } => 256,
                Encoding::Karatsuba { redundant: false } => 256,
                Encoding::Karatsuba { redundant: true } => 484,
            };
            let mut max_prod = 0i64;
            for d in centred_range(m) {
                for e in centred_range(m) {
                    let (p, comb) = plane_product(enc, d, e);
                    max_prod = max_prod.max(p.iter().map(|x| x.abs()).max().unwrap());
                    let de = i64::from(d) * i64::from(e);
                    match enc {
                        Encoding::Square { .. } => {
                            assert_eq!((comb - de).rem_euclid(i64::from(m)), 0, "m={m} d={d} e={e}")
                        }
                        Encoding::Karatsuba { .. } => assert_eq!(comb, de, "m={m} d={d} e={e}"),
                    }
                }
            }
            assert!(
                max_prod <= bound,
                "m={m}: max plane product {max_prod} > {bound}"
            );
            if let Encoding::Karatsuba { redundant: true } = enc {
                assert!(
                    max_plane[0] <= 14 && max_plane[1] <= 16 && max_plane[2] <= 22,
                    "m={m}: {max_plane:?}"
                );
            }
        }
        // fp32 exact-accumulation depth for the S tail.
        assert_eq!((1i64 << 24) / 484, 34663);
    }

    #[test]
    fn lemma1_holds_up_to_513_fails_at_514_with_the_papers_fixup_counts() {
        let works = |m: u32| {
            centred_range(m).all(|d| {
                let (d0, d1) = lemma1_split(d);
                d0 + 16 * d1 == d && e4m3_exact(d0) && e4m3_exact(d1) && e4m3_exact(d0 + d1)
            })
        };
        assert!((257..=513).all(works));
        assert!(!works(514));
        let fixups = |m: u32| {
            centred_range(m)
                .filter(|&d| {
                    let (d0, d1) = balanced_split(d, 16);
                    !e4m3_exact(d0 + d1)
                })
                .count()
        };
        assert_eq!(
            [487, 491, 499, 503, 509, 511].map(fixups),
            [23, 25, 28, 28, 28, 28]
        );
    }

    #[test]
    fn canonical_envelope_is_321() {
        let canon_ok = |m: u32, b: i32| {
            centred_range(m).all(|d| {
                let (d0, d1) = balanced_split(d, b);
                e4m3_exact(d0) && e4m3_exact(d1) && e4m3_exact(d0 + d1)
            })
        };
        let best = (2..700u32)
            .filter(|&m| (2..40).any(|b| canon_ok(m, b)))
            .max()
            .unwrap();
        assert_eq!(best, 321);
        assert!(canon_ok(321, 17));
    }

    #[test]
    fn byte_reduction_matches_a_trusted_modulo() {
        use num_bigint::BigInt;
        let trusted = |z: i64, m: u32| -> u32 {
            let r = BigInt::from(z).mod_floor(&BigInt::from(m));
            u32::try_from(r).unwrap()
        };
        let mut rng = crate::testutil::Rng::new(9);
        let mut moduli: Vec<u32> = SETS.iter().flat_map(|s| s.moduli.iter().copied()).collect();
        moduli.extend(crate::moduli::INT8_MODULI);
        moduli.sort_unstable();
        moduli.dedup();
        for m in moduli {
            for z in i64::from(i16::MIN)..=i64::from(i16::MAX) {
                assert_eq!(byte_plane_residue(z, m), trusted(z, m), "z={z} m={m}");
            }
            for b in 0..64 {
                for _ in 0..50 {
                    let z = (rng.next_u64() >> (63 - b)) as i64;
                    for z in [z, -z, z.wrapping_neg().wrapping_sub(1)] {
                        assert_eq!(byte_plane_residue(z, m), trusted(z, m), "z={z} m={m}");
                    }
                }
            }
            for z in [i64::MIN, i64::MAX, -(i64::from(m) / 2), i64::from(m) / 2] {
                assert_eq!(byte_plane_residue(z, m), trusted(z, m));
                assert_eq!(byte_plane_centred(z, m), centred(z, m));
            }
        }
        // The paper's worked example: 0xDEADBEEF mod 487 = 102.
        assert_eq!(byte_plane_residue(0xDEAD_BEEF, 487), 102);
    }
}
