//! Centred residues of the scaled integers, and the k-blocking rule for the exact residue
//! products (Ozaki-II steps 2-3; paper brief §1.2-1.3).
//!
//! # Definition
//! For each modulus `m_t` (in the order of [`crate::moduli::INT8_MODULI`]) the residue
//! planes are `A^(t)_il = centred(a'_il, m_t)` and `B^(t)_lj = centred(b'_lj, m_t)`
//! ([`crate::moduli::centred`]: the unique `d ≡ x (mod m_t)`, `-m_t/2 <= d < m_t/2`), stored
//! as `i8`. The residue of the product is
//! `C^(t)_ij = centred(sum_l A^(t)_il B^(t)_lj, m_t)`, which equals `centred(c'_ij, m_t)`.
//!
//! # Exact int32 accumulation and k-blocking
//! Every residue product satisfies `|A^(t)_il B^(t)_lj| <= 128 · 128 = 2^14` (the value
//! `+2^14` only for `m = 256`, `(-128)·(-128)`), so a sum of at most
//! [`MAX_K_BLOCK`] `= 131071 = 2^17 - 1` products lies in `[-2^31 + 2^14, 2^31 - 2^14]` and
//! cannot overflow an `i32`. Longer inner dimensions are split into blocks of at most
//! `MAX_K_BLOCK` (the CPU route uses [`K_BLOCK`] `= 2^16`); each block sum is reduced to its
//! centred residue and the block residues are added (in `i32`, at most 2^24 blocks) and
//! reduced again. Because every step is exact modulo `m_t`, **any** blocking gives the same
//! residues; the GPU route may choose its own block size up to `MAX_K_BLOCK`.

use crate::moduli::centred;

/// Longest inner dimension whose residue products can be summed exactly in one `i32`.
pub const MAX_K_BLOCK: usize = (1 << 17) - 1;

/// The block length the CPU route uses (any length up to [`MAX_K_BLOCK`] gives the same
/// residues).
pub const K_BLOCK: usize = 1 << 16;

/// Writes `centred(x, m)` for every `x` of `src` into `dst` (fast path of
/// [`crate::moduli::centred`], specialised per modulus so the division becomes a multiply).
/// The values fit `i8`; they are stored widened to `i16`, the operand type of the
/// CPU kernel ([`crate::kernel`]).
///
/// # Panics
/// If `m` is not one of [`crate::moduli::INT8_MODULI`] or the lengths differ.
pub fn centred_into(src: &[i64], m: u32, dst: &mut [i16]) {
    assert_eq!(src.len(), dst.len());
    macro_rules! dispatch {
        ($($m:literal)*) => {
            match m {
                $($m => centred_const::<$m>(src, dst),)*
                _ => panic!("{m} is not an INT8 modulus"),
            }
        };
    }
    dispatch!(256 255 253 251 247 241 239 233 229 227 223 217 211 199 197 193 191 181 179 173);
}

#[inline(always)]
fn centred_const<const M: i64>(src: &[i64], dst: &mut [i16]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        let r = x.rem_euclid(M);
        *d = (if 2 * r >= M { r - M } else { r }) as i16;
    }
}

/// `centred(v, m)` for an `i32` accumulator value (the per-block reduction).
#[inline]
pub fn reduce_i32(v: i32, m: u32) -> i32 {
    centred(i64::from(v), m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moduli::INT8_MODULI;
    use num_bigint::BigInt;
    use num_integer::Integer;
    use num_traits::ToPrimitive;

    fn reference(x: i64, m: u32) -> i32 {
        // Trusted arbitrary-precision modulo, lifted to [-m/2, m/2).
        let mm = BigInt::from(m);
        let d = BigInt::from(x).mod_floor(&mm);
        let d = if BigInt::from(2) * &d >= mm {
            d - mm
        } else {
            d
        };
        d.to_i32().unwrap()
    }

    #[test]
    fn all_16_bit_inputs_match_bigint() {
        let src: Vec<i64> = (i64::from(i16::MIN)..=i64::from(i16::MAX)).collect();
        let mut dst = vec![0i16; src.len()];
        for &m in &INT8_MODULI {
            centred_into(&src, m, &mut dst);
            for (&x, &d) in src.iter().zip(&dst) {
                assert_eq!(i32::from(d), reference(x, m), "x = {x}, m = {m}");
            }
        }
    }

    #[test]
    fn stratified_64_bit_inputs_match_bigint_including_the_boundary() {
        let mut rng = crate::testutil::Rng::new(3);
        let mut src = Vec::new();
        // Every magnitude class 2^b .. 2^(b+1), both signs, up to the 2^62 scaling limit and
        // beyond (the map itself is defined for all i64).
        for b in 0..63 {
            for _ in 0..200 {
                let v = (1i64 << b) | (rng.next_u64() as i64 & ((1i64 << b) - 1));
                src.push(v);
                src.push(-v);
            }
        }
        src.extend([i64::MIN, i64::MAX, i64::MIN + 1, 0, 1, -1]);
        for &m in &INT8_MODULI {
            let mi = i64::from(m);
            let mut s = src.clone();
            // The -m/2 boundary (and its neighbours) at many magnitudes.
            for t in [0i64, 1, 7, 1 << 20, 1 << 40, (1i64 << 62) / mi] {
                for off in [-1, 0, 1] {
                    s.push(t * mi - mi / 2 + off);
                    s.push(-t * mi - mi / 2 + off);
                    s.push(t * mi + (mi - 1) / 2 + off);
                }
            }
            let mut dst = vec![0i16; s.len()];
            centred_into(&s, m, &mut dst);
            for (&x, &d) in s.iter().zip(&dst) {
                assert_eq!(i32::from(d), reference(x, m), "x = {x}, m = {m}");
            }
        }
    }

    // The block bound is the largest that cannot overflow an i32 (checked at compile time).
    const _: () = assert!((MAX_K_BLOCK as i64) * (1 << 14) <= i32::MAX as i64);
    const _: () = assert!(((MAX_K_BLOCK + 1) as i64) * (1 << 14) > i32::MAX as i64);
    const _: () = assert!(K_BLOCK <= MAX_K_BLOCK);
}
