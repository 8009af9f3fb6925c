//! What this process learned from its own calls: the per-class corrections of the
//! predictions (`ozaki_core::engine::correct`), the classes the accuracy rule declined
//! (`ozaki_core::engine::declines`) and which side its recent work runs faster on
//! (`ozaki_core::engine::sides`).
//!
//! One table per process, shared by the pre-engine (which prices calls before the GPU is
//! initialised) and the engine built once it is: the vendor calls timed while the GPU was
//! not up yet are what tells the start gate, and then the engine, how this program's vendor
//! calls really run.

use crate::lazy::Lazy;
use ozaki_core::engine::correct::Corrections;
use ozaki_core::engine::declines::Declines;
use ozaki_core::engine::sides::Sides;

/// The process's learned state.
#[derive(Debug, Default)]
pub struct Learned {
    /// Measured / predicted time per class.
    pub corrections: Corrections,
    /// Classes the emulation declined recently.
    pub declines: Declines,
    /// The recent calls' quiet GPU and vendor prices.
    pub sides: Sides,
}

static LEARNED: Lazy<Learned> = Lazy::new();

/// This process's learned state.
pub fn learned() -> &'static Learned {
    LEARNED.get_or_init(Learned::default)
}
