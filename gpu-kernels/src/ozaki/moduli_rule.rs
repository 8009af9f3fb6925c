//! How many moduli a call takes: the modulus set, the calibrated accuracy rule (bits needed
//! from the lines' spread) and the counts it gives, including the count the route expects
//! before a call's data are seen. Separate from the plan, which applies it and forms shifts.

use super::line_stats::RowStats;
use super::norm_lines::NormLines;
use crate::crt::MAX_MODULI;
use ozaki_core::scaling::ScalingMode;

/// The INT8 modulus set of `ozaki-core` (issue #3), in the order moduli are taken: a call
/// with r moduli uses the first r, so GPU and CPU routes share residues and CRT.
pub const MODULI: [u32; MAX_MODULI] = ozaki_core::moduli::INT8_MODULI;

/// Base of the default accuracy rule (see [`needed_bits`]), calibrated on the H200 against
/// native DGEMM's error on the same inputs (BENCHMARKS.md, GPU section).
pub const BASE_BITS: f64 = 48.4;

/// [`BASE_BITS`] for norm scaling (see [`needed_bits`]). Fitted on ozaki-core's CPU
/// measurements (same bits as the GPU for the same moduli; ACCURACY.md, "Norm scaling"):
/// every measured case whose error at r - 1 moduli was above native DGEMM's (standard-order
/// dot products on the same inputs) needs more than r - 1 under this base (the tightest, phi = 2
/// at k = 4096 with 15 moduli, asked 45.7), and normal data at k = 4096-16384 takes 14 moduli
/// (at the full 16384² x 16384 size its lines keep 0.5-1.5 bits more than this asks).
pub const NORM_BASE_BITS: f64 = 46.2;

/// Weight of the spread term of [`needed_bits`] (calibrated with [`BASE_BITS`]: normal
/// inputs take 15 moduli up to k = 16384, exponent-spread inputs (phi = 2) 17).
pub const SPREAD_WEIGHT: f64 = 0.6;

/// Bits the scaled row maxima keep with r moduli at inner dimension k: ozaki-core's fast
/// scaling (`ozaki_core::scaling`, steps 2-3 with the a-priori bound G <= 4096 k), whose shift
/// is sigma_i = p + 5 - e_i with p = min(56, floor((L_r - clog2(4096 k)) / 2)); the row maximum
/// then keeps p + 6 bits. Sharing this definition is what makes GPU and CPU results equal
/// bit for bit for the same moduli count.
pub fn bits_for(moduli: usize, k: usize) -> i32 {
    let budget = ozaki_core::moduli::CrtPlan::get(moduli.clamp(2, MAX_MODULI)).budget_bits;
    ozaki_core::scaling::shift_for_bound(budget, 4096 * k.max(1) as u64) + 6
}

/// Bits each scaled operand must keep so the emulated error stays at or below native
/// DGEMM's: quantising a row to t bits of its maximum costs about 2^-t max|a_i| per entry,
/// which relative to the typical entry is 2^-t times the row's spread; `BASE_BITS` is
/// calibrated with [`SPREAD_WEIGHT`] so that t = BASE_BITS + w log2 sqrt(spread_a spread_b)
/// matches native error on the H200 measurements (BENCHMARKS.md). A calibrated rule, not a
/// bound: ozaki-core's `select` has the estimate-based choice.
///
/// Short inner dimensions need more: native DGEMM's normalised error stays about constant in
/// k while the quantisation error's shrinks like 1/sqrt(k) (random signs), so below
/// k = 4096 half a bit is added per halving of k (measured: k = 64 with 14 moduli erred 4x
/// above native).
///
/// Norm scaling ([`choose_moduli_norm`]) compares the bits each line's maximum really keeps
/// ([`norm_bits`]) with `NORM_BASE_BITS + log2 max(spread_a, spread_b) + log2(4096 / k)`
/// (the last term only below k = 4096): the theoretical weight 1 of the spread (the
/// quantisation step relative to the row's typical entry is `2^-bits` times its spread), the
/// larger side's spread, and a full bit per halving of short k. Fitted to ozaki-core's CPU
/// measurements, which give the GPU's bits for the same moduli (ACCURACY.md, "Norm scaling").
///
/// [`norm_bits`]: super::norm_bits
pub fn needed_bits(a: &RowStats, b: &RowStats, k: usize, scaling: ScalingMode) -> f64 {
    needed_bits_for_spreads(a.spread(k), b.spread(k), k, scaling)
}

/// [`needed_bits`] from the two operands' [`RowStats::spread`]s.
pub(super) fn needed_bits_for_spreads(
    spread_a: f64,
    spread_b: f64,
    k: usize,
    scaling: ScalingMode,
) -> f64 {
    let short = (4096.0 / k.max(1) as f64).log2().max(0.0);
    match scaling {
        ScalingMode::Fast => {
            BASE_BITS + SPREAD_WEIGHT * 0.5 * (spread_a * spread_b).log2() + 0.5 * short
        }
        _ => NORM_BASE_BITS + spread_a.max(spread_b).log2() + short,
    }
}

/// The smallest moduli count whose bits reach `needed` at inner dimension k (all 20 when
/// none does).
pub fn choose_moduli(needed: f64, k: usize) -> usize {
    (2..=MAX_MODULI)
        .find(|&r| bits_for(r, k) as f64 >= needed)
        .unwrap_or(MAX_MODULI)
}

/// Norm scaling's moduli count at inner dimension k: the smallest r at which every nonzero
/// line of both operands keeps [`norm_bits`] `>= needed_bits(.., ScalingMode::Norm)` (all 20
/// when none does). Lines that get more bits than needed cost nothing.
///
/// [`norm_bits`]: super::norm_bits
pub fn choose_moduli_norm(a: &RowStats, b: &RowStats, k: usize) -> usize {
    norm_moduli_for(
        &NormLines::of(a, b),
        needed_bits(a, b, k, ScalingMode::Norm),
    )
}

/// [`choose_moduli_norm`] with the lines grouped and the rule's `needed` bits computed.
pub(super) fn norm_moduli_for(lines: &NormLines, needed: f64) -> usize {
    (2..=MAX_MODULI)
        .find(|&r| lines.fewest_bits(r) >= needed)
        .unwrap_or(MAX_MODULI)
}

/// The moduli count the default rule of `scaling` takes at inner dimension k for rows of
/// normally distributed entries whose in-row spread max|x| / mean|x| is `spread`: what the
/// engine prices a call at before it sees the data (`shim::route::choose`). Fast mode asks
/// `BASE_BITS + log2 spread` bits of [`bits_for`]; norm mode applies [`choose_moduli_norm`]
/// to such a row (mean 1, maximum `spread`), whose coarse square sum is about
/// `k (E y^2 + E y + 1/3)` for `y = |x| 2^(5 - e)` (the ceiling adds a uniform fraction).
pub fn typical_moduli(scaling: ScalingMode, spread: f64, k: usize) -> usize {
    let k = k.max(1);
    if scaling == ScalingMode::Fast {
        return choose_moduli(BASE_BITS + spread.log2(), k);
    }
    let max = spread.max(1.0);
    let e = max.log2().floor() as i32;
    let y = 2f64.powi(5 - e);
    let per_entry = y * y * std::f64::consts::FRAC_PI_2 + y + 1.0 / 3.0;
    let (maxbits, abssum, sq) = (
        [max.to_bits()],
        [k as f64],
        [(per_entry * k as f64).ceil() as u64],
    );
    let row = RowStats {
        maxbits: &maxbits,
        abssum: &abssum,
        coarse_sq: &sq,
    };
    choose_moduli_norm(&row, &row, k)
}

/// The last automatic moduli count per scaling mode (0: none yet), the route's guess for the
/// next call: repeated calls on data of one kind take the same count.
static LAST_MODULI: [std::sync::atomic::AtomicUsize; 2] = [
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
];

/// The moduli count a call with the default rule is expected to take before its data are
/// seen: the previous automatic choice, else [`typical_moduli`] of normal rows.
pub(super) fn expected_moduli(scaling: ScalingMode, k: usize) -> usize {
    match LAST_MODULI[(scaling == ScalingMode::Fast) as usize]
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        0 => typical_moduli(scaling, 4.0, k),
        r => r,
    }
}

pub(super) fn remember_moduli(scaling: ScalingMode, r: usize) {
    LAST_MODULI[(scaling == ScalingMode::Fast) as usize]
        .store(r, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_keeps_products_inside_half_the_modulus_range() {
        for r in 2..=MAX_MODULI {
            for k in [1usize, 2, 1000, 4096, 16384, 131072] {
                let t = bits_for(r, k);
                if t < 1 {
                    continue;
                }
                // |a'|, |b'| <= 2^t, so |c'| <= k 2^(2t) must stay below M/2
                let big_m = crate::crt::product(&MODULI[..r]);
                let bound = num_bigint::BigUint::from(k.next_power_of_two()) << (2 * t as usize);
                assert!(bound * 2u32 < big_m, "r = {r}, k = {k}, t = {t}");
                assert!(t <= 62, "scaled entries fit i64 (ozaki-core caps p at 56)");
            }
        }
    }

    #[test]
    fn moduli_grow_with_k_and_with_spread() {
        let flat_max = [1f64.to_bits(); 4];
        let flat_sum = [64.0; 4]; // every |x| = 1: spread 1
        let flat = RowStats {
            maxbits: &flat_max,
            abssum: &flat_sum,
            coarse_sq: &[],
        };
        let spiky_sum = [1.5; 4]; // one entry 1, the rest tiny: spread ~ 43
        let spiky = RowStats {
            maxbits: &flat_max,
            abssum: &spiky_sum,
            coarse_sq: &[],
        };
        assert_eq!(flat.spread(64), 1.0);
        assert!(spiky.spread(64) > 40.0);
        let r_flat = choose_moduli(needed_bits(&flat, &flat, 64, ScalingMode::Fast), 64);
        let r_spiky = choose_moduli(needed_bits(&spiky, &spiky, 64, ScalingMode::Fast), 64);
        assert!(r_flat < r_spiky, "{r_flat} vs {r_spiky}");
        assert!(choose_moduli(50.0, 64) <= choose_moduli(50.0, 16384));
        assert!(bits_for(choose_moduli(50.0, 16384), 16384) >= 50);
        assert_eq!(
            choose_moduli(500.0, 64),
            MAX_MODULI,
            "unreachable accuracy takes every modulus"
        );
    }

    #[test]
    fn typical_counts_price_norm_at_most_fast_and_fourteen_on_normal_rows() {
        // (below k = 256 norm's rule asks a full bit per halving of k, fast's pricing none)
        for k in [256usize, 1024, 4096, 8192, 16384, 65536] {
            let (norm, fast) = (
                typical_moduli(ScalingMode::Norm, 4.0, k),
                typical_moduli(ScalingMode::Fast, 4.0, k),
            );
            assert!(norm <= fast, "k = {k}: norm {norm}, fast {fast}");
        }
        for k in [4096usize, 8192, 16384] {
            assert_eq!(typical_moduli(ScalingMode::Norm, 4.0, k), 14, "k = {k}");
        }
        assert_eq!(typical_moduli(ScalingMode::Fast, 4.0, 16384), 16);
    }
}
