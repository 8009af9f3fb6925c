//! The moduli count the route expects before a call's data are seen: the GPU forms the
//! residues for it while the host runs the accuracy rule on the scan's statistics.
//!
//! A declined call pays for that speculation (the residues of both operands, no products),
//! since the host learns of the decline only from the downloaded summaries. So after an
//! automatic call declined, the next call of that scaling does not speculate: it waits for
//! the plan and forms residues only if the plan emulates. A run of declined calls (data the
//! rule keeps refusing) then costs the statistics alone from its second call on, and the
//! first emulated call after it gives up the overlap once (the summaries' download and the
//! host's plan, microseconds).

use ozaki_core::scaling::ScalingMode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What the automatic calls of one scaling mode chose last.
struct Last {
    /// The last automatic moduli count (0: none yet): repeated calls on data of one kind
    /// take the same count.
    moduli: AtomicUsize,
    /// Whether the last automatic call's plan declined.
    declined: AtomicBool,
}

impl Last {
    const fn new() -> Self {
        Last {
            moduli: AtomicUsize::new(0),
            declined: AtomicBool::new(false),
        }
    }

    fn expected(&self, scaling: ScalingMode, k: usize) -> usize {
        match self.moduli.load(Ordering::Relaxed) {
            0 => ozaki_core::rule::typical_moduli(scaling, k),
            r => r,
        }
    }

    fn speculative(&self, forced: Option<usize>, scaling: ScalingMode, k: usize) -> Option<usize> {
        match forced {
            Some(r) => Some(r),
            None if self.declined.load(Ordering::Relaxed) => None,
            None => Some(self.expected(scaling, k)),
        }
    }

    fn chose(&self, r: usize) {
        self.moduli.store(r, Ordering::Relaxed);
        self.declined.store(false, Ordering::Relaxed);
    }

    fn declined(&self) {
        self.declined.store(true, Ordering::Relaxed);
    }
}

/// Per scaling mode (norm, fast).
static LAST: [Last; 2] = [Last::new(), Last::new()];

fn last(scaling: ScalingMode) -> &'static Last {
    &LAST[(scaling == ScalingMode::Fast) as usize]
}

/// The previous automatic choice, else the rule's count for normal lines
/// (`ozaki_core::rule::typical_moduli`).
pub(crate) fn expected_moduli(scaling: ScalingMode, k: usize) -> usize {
    last(scaling).expected(scaling, k)
}

/// The count to form residues for before the plan is known: the forced count, else
/// [`expected_moduli`]; `None` (wait for the plan) when the last automatic call of this
/// scaling declined.
pub(crate) fn speculative_moduli(
    forced: Option<usize>,
    scaling: ScalingMode,
    k: usize,
) -> Option<usize> {
    last(scaling).speculative(forced, scaling, k)
}

/// Records an automatic call's count (and that it did not decline).
pub(crate) fn remember_moduli(scaling: ScalingMode, r: usize) {
    last(scaling).chose(r);
}

/// Records that an automatic call's plan declined.
pub(crate) fn remember_decline(scaling: ScalingMode) {
    last(scaling).declined();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forced count is always formed ahead; an automatic one is formed ahead (the last
    /// choice, at first the count for normal lines) unless the last automatic call declined,
    /// and again once a call emulates.
    #[test]
    fn no_speculation_after_a_decline_until_a_call_emulates() {
        let (s, k) = (ScalingMode::Norm, 4096);
        let last = Last::new();
        let typical = ozaki_core::rule::typical_moduli(s, k);
        assert_eq!(last.speculative(None, s, k), Some(typical));
        last.chose(16);
        assert_eq!(last.speculative(None, s, k), Some(16));
        last.declined();
        assert_eq!(last.speculative(None, s, k), None);
        assert_eq!(last.speculative(Some(13), s, k), Some(13));
        assert_eq!(last.expected(s, k), 16, "a decline keeps the last count");
        last.chose(15);
        assert_eq!(last.speculative(None, s, k), Some(15));
    }
}
