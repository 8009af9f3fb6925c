//! The bits each line keeps under norm scaling, with the lines grouped by shift class once
//! per call: the norm rule tries many moduli counts, and the grouping makes each try cheap.

use super::line_stats::{RowStats, exponent_of_bits};
use crate::crt::MAX_MODULI;
use ozaki_core::scaling::ScalingMode;

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
pub(super) struct NormLines {
    /// Per class: a representative coarse square sum and the smallest `max / 2^e` in [1, 2).
    pub(super) classes: Vec<(u64, f64)>,
}

/// [`NormLines`] being gathered, one line at a time.
pub(super) struct NormSlots([Option<(u64, f64)>; SHIFT_CLASSES]);

impl Default for NormSlots {
    fn default() -> Self {
        NormSlots([None; SHIFT_CLASSES])
    }
}

impl NormSlots {
    /// Adds a line with maximum `maxbits` and coarse square sum `q` (zero lines: nothing).
    pub(super) fn add(&mut self, maxbits: u64, q: u64) {
        if maxbits == 0 {
            return;
        }
        let mant = line_mantissa(maxbits);
        let entry = self.0[norm_class(q)].get_or_insert((q, mant));
        entry.1 = entry.1.min(mant);
    }

    pub(super) fn lines(self) -> NormLines {
        NormLines {
            classes: self.0.into_iter().flatten().collect(),
        }
    }
}

impl NormLines {
    pub(super) fn of(a: &RowStats, b: &RowStats) -> NormLines {
        let mut slots = NormSlots::default();
        for s in [a, b] {
            s.maxbits
                .iter()
                .zip(s.coarse_sq)
                .for_each(|(&m, &q)| slots.add(m, q));
        }
        slots.lines()
    }

    pub(super) fn fewest_bits(&self, moduli: usize) -> f64 {
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

/// Classes of lines with the same norm-scaling shift: coarse square sum 0, then `clog2(S)`
/// = 0..=64 (`norm_class`).
pub const SHIFT_CLASSES: usize = 66;

/// The class of a line with coarse square sum `q`: its shift depends on `q` only through it
/// (`shift_for_bound` reads `clog2(q)` and whether `q` is zero). Kernel `line_shifts` computes
/// the same.
pub(super) fn norm_class(q: u64) -> usize {
    if q == 0 {
        0
    } else {
        ozaki_core::scaling::clog2(q) as usize + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ozaki::bits_for;

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
