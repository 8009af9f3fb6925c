//! The moduli count the route expects before a call's data are seen: the GPU forms the
//! residues for it while the host runs the accuracy rule on the scan's statistics.

use ozaki_core::scaling::ScalingMode;

/// The last automatic moduli count per scaling mode (0: none yet): repeated calls on data of
/// one kind take the same count.
static LAST_MODULI: [std::sync::atomic::AtomicUsize; 2] = [
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
];

/// The previous automatic choice, else the rule's count for normal lines
/// (`ozaki_core::rule::typical_moduli`).
pub(crate) fn expected_moduli(scaling: ScalingMode, k: usize) -> usize {
    match LAST_MODULI[(scaling == ScalingMode::Fast) as usize]
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        0 => ozaki_core::rule::typical_moduli(scaling, k),
        r => r,
    }
}

pub(crate) fn remember_moduli(scaling: ScalingMode, r: usize) {
    LAST_MODULI[(scaling == ScalingMode::Fast) as usize]
        .store(r, std::sync::atomic::Ordering::Relaxed);
}
