//! The moduli count the engine prices GPU Ozaki at before it sees a call's data.
//!
//! The route picks its count per call by the accuracy rule from the operands' line
//! statistics ([`crate::rule::choose`]); the engine decides before the operands are read, so
//! it prices the rule's count for normally distributed lines at the call's k with the GPU
//! route's default scaling ([`crate::rule::typical_moduli`]). Every pricer uses this one
//! function: the shim's `auto`, its device-resident entry points, and `ozaki explain`,
//! `replay`, `report` and `calibrate` for a call whose trace record names no count. The
//! trace's `moduli` field shows the count a call really used.

use crate::scaling::GPU_DEFAULT_SCALING;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The count priced for inner dimension `k` (`forced`: `OZAKI_MODULI`, or a count the
/// caller knows): the accuracy rule's for normally distributed lines at the GPU route's
/// default scaling, at `k` rounded up to a quarter octave above 256 (see [`tabulated`]).
/// On such data at k = 4096 that is 14, the count GEMMul8 needs there; at k = 8192, 15.
pub fn priced_moduli(k: u64, forced: Option<u32>) -> u32 {
    forced.unwrap_or_else(|| tabulated(k))
}

/// Inner dimensions up to this are priced at their own k; above, at k rounded up to a
/// quarter octave ([`tabulated`]).
const EXACT_K: u64 = 256;

/// Quarter-octave steps from [`EXACT_K`] up to 2^63.
const GRID_STEPS: usize = 4 * (63 - EXACT_K.trailing_zeros() as usize) + 1;

/// [`crate::rule::typical_moduli`] at the GPU route's default scaling, each value computed
/// once per process: the rule builds and judges a normal line of min(k,
/// 4096) entries, about 0.3 ms, which must not be paid again for every new k of an uncached
/// decision. Up to [`EXACT_K`] the count is the rule's at k itself (it is not monotone
/// there); above, at the smallest quarter-octave step `ceil(2^(j/4))` at or above k, where the
/// count grows with k by at most one modulus a step, so the price is at worst one modulus
/// high.
fn tabulated(k: u64) -> u32 {
    static EXACT: [AtomicU32; EXACT_K as usize + 1] =
        [const { AtomicU32::new(0) }; EXACT_K as usize + 1];
    static STEPS: [AtomicU32; GRID_STEPS] = [const { AtomicU32::new(0) }; GRID_STEPS];
    static GRID: OnceLock<[u64; GRID_STEPS]> = OnceLock::new();
    let k = k.max(1);
    let (slot, at) = if k <= EXACT_K {
        (&EXACT[k as usize], k)
    } else {
        let grid = GRID.get_or_init(|| {
            let base = EXACT_K.trailing_zeros() as f64;
            std::array::from_fn(|j| {
                2f64.powf(base + j as f64 / 4.0).ceil().min(u64::MAX as f64) as u64
            })
        });
        let j = grid.partition_point(|&g| g < k).min(GRID_STEPS - 1);
        (&STEPS[j], grid[j].max(k))
    };
    match slot.load(Ordering::Relaxed) {
        0 => {
            let r = crate::rule::typical_moduli(GPU_DEFAULT_SCALING, at as usize) as u32;
            slot.store(r.max(1), Ordering::Relaxed);
            r
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(k: u64) -> u32 {
        crate::rule::typical_moduli(GPU_DEFAULT_SCALING, k as usize) as u32
    }

    /// The tabulated count is the rule's at k up to 256, and above it the rule's at a k at
    /// most a quarter octave higher: never below the count at k itself, at most one above.
    #[test]
    fn tabulated_moduli_follow_the_rule_within_a_quarter_octave() {
        for k in [1u64, 7, 100, 256] {
            assert_eq!(priced_moduli(k, None), rule(k), "k = {k}");
        }
        for k in [257u64, 300, 1000, 4097, 5000, 70000, 1 << 20] {
            let (priced, own, above) = (priced_moduli(k, None), rule(k), rule(k + k / 5));
            assert!(
                priced >= own && priced <= above.max(own + 1),
                "k = {k}: {priced} vs {own}"
            );
            assert_eq!(
                priced_moduli(k, None),
                priced,
                "a second look-up gives the same count"
            );
        }
    }

    #[test]
    fn priced_moduli_honours_the_forced_count_and_grows_with_k() {
        assert_eq!(priced_moduli(1 << 20, Some(9)), 9);
        // (from k = 256 up: below it the norm rule asks one more bit per halving of k, as
        // short dot products of spread data need, so tiny k may cost a modulus more)
        assert!((2..=20).contains(&priced_moduli(16, None)));
        let counts: Vec<u32> = [256u64, 4096, 65536]
            .iter()
            .map(|&k| priced_moduli(k, None))
            .collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
        assert!(counts.iter().all(|&r| (2..=20).contains(&r)), "{counts:?}");
    }

    /// Normal data takes 14 moduli at k = 4096 and 15 at k = 8192 (ACCURACY.md, "Known
    /// limits"): the price follows, where a fixed 14 priced 8192³ one modulus cheap.
    #[test]
    fn the_price_takes_the_extra_modulus_normal_data_needs_at_k_8192() {
        assert_eq!(priced_moduli(4096, None), 14);
        assert_eq!(priced_moduli(8192, None), 15);
    }
}
