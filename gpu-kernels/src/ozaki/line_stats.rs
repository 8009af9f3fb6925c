//! The per-line statistics the exponent scan (and, with norm scaling, `coarse_norms_*`)
//! computes on the device, and their host-computed mirror: the plan's only input, kept apart
//! so tools and tests can study the moduli rule without a GPU.

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
    ///
    /// [`plan`]: super::plan()
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
pub(super) fn line_spread(maxbits: u64, abssum: f64, k: usize) -> f64 {
    if maxbits != 0 && abssum > 0.0 {
        f64::from_bits(maxbits) * k as f64 / abssum
    } else {
        0.0
    }
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
}
