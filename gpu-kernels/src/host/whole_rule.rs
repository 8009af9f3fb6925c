//! The accuracy rule once on a whole pipelined gpu-ozaki call: which moduli count its
//! units run with ([`unit_moduli`]) and what the rule on all of its lines means for them
//! ([`verdict`]).
//!
//! The host pipeline runs a call as panel x block units made from parts of op(A) and op(B)
//! converted as they arrive (`ozaki::pieces`), so the residues must be formed before the
//! rule has seen every line. They are formed for the count the route expects (the forced
//! count, else the last automatic choice, `ozaki::expected_moduli`); once every part is
//! converted the rule runs once on all of op(A)'s rows and op(B)'s columns, as the untiled
//! call's plan does. When it chooses the units' count, C is exactly the untiled emulation's
//! (each entry depends only on its row, its column and the count); otherwise the call is not
//! accepted and runs again with the whole call's count ([`Verdict::Rerun`]), which the next
//! call of this kind then expects. A decline of the whole call is the call's error, before
//! any of C was written.

use crate::ozaki::{self, Options};

/// What the whole call's rule decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The units' count is the whole call's: C is the untiled call's.
    Accept,
    /// The whole call takes this other count: run it again with it.
    Rerun(usize),
}

/// The count the units of a call of inner dimension `k` run with: the forced one, else the
/// route's expectation.
pub(super) fn unit_moduli(opts: Options, k: usize) -> usize {
    let expected = || ozaki::expected_moduli(ozaki::effective_scaling(opts.scaling), k);
    opts.moduli
        .unwrap_or_else(expected)
        .clamp(2, ozaki::MODULI.len())
}

/// The verdict on units that ran with `units` moduli when the rule on the whole call chose
/// `whole`; an automatic choice becomes the route's next expectation.
pub(super) fn verdict(opts: Options, units: usize, whole: usize) -> Verdict {
    if opts.moduli.is_none() {
        ozaki::remember_moduli(ozaki::effective_scaling(opts.scaling), whole);
    }
    if whole == units {
        Verdict::Accept
    } else {
        Verdict::Rerun(whole)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Units run with the forced count, else the last automatic choice; a whole-call count
    /// that differs asks for a rerun with it and becomes the next calls' count, so the
    /// rerun happens once per change of data, not on every call.
    #[test]
    fn units_run_the_expected_count_and_a_different_whole_count_reruns_once() {
        let forced = Options {
            moduli: Some(17),
            ..Options::default()
        };
        assert_eq!(unit_moduli(forced, 4096), 17);
        assert_eq!(verdict(forced, 17, 17), Verdict::Accept);
        // an odd scaling mode of its own, so other tests' choices do not interfere
        let auto = Options {
            scaling: Some(ozaki::ScalingMode::Fast),
            ..Options::default()
        };
        let k = 1000;
        let first = unit_moduli(auto, k);
        let whole = first + 2;
        assert_eq!(verdict(auto, first, whole), Verdict::Rerun(whole));
        assert_eq!(
            unit_moduli(auto, k),
            whole,
            "the next call expects the whole count"
        );
        assert_eq!(verdict(auto, whole, whole), Verdict::Accept);
    }
}
