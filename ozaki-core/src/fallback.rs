//! Why a call goes to native fp64 instead of the emulation: the typed decline every emulated
//! route returns, with the stable short reason recorded in the trace's `fallback` field.

use crate::moduli::{MAX_MODULI, MIN_MODULI};
use std::fmt;

/// Why a call must go to native fp64 instead (C is untouched).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fallback {
    /// A or B holds a NaN or an infinity.
    NonFinite,
    /// The product's exponent range could overflow fp64.
    ExponentRange,
    /// Even 20 moduli miss the accuracy target of the rule's estimate ([`crate::rule`]).
    AccuracyUnreachable {
        /// The estimate at 20 moduli relative to what the entry may err, in units of u
        /// (infinite when 20 cannot even cover the spread).
        estimate_ulps: f64,
    },
    /// `OZAKI_ACCURACY=guaranteed`: even 20 moduli leave the worst-case bound above fp64's
    /// `γ_k` bound ([`crate::rule`], "Guaranteed").
    BoundUnreachable {
        /// The bound at 20 moduli in units of `γ_k`.
        bound_gammas: f64,
    },
    /// The forced moduli count cannot cover the exponent spread of the inputs.
    SpreadNotCoverable {
        /// The forced count.
        moduli: usize,
    },
    /// `OZAKI_MODULI` outside `2..=20`.
    InvalidModuli {
        /// The requested count.
        moduli: usize,
    },
}

impl Fallback {
    /// The stable short reason recorded in traces (`fallback` field).
    pub fn reason(&self) -> &'static str {
        match self {
            Fallback::NonFinite => "non-finite input",
            Fallback::ExponentRange => "exponent range",
            Fallback::AccuracyUnreachable { .. } => "accuracy target unreachable",
            Fallback::BoundUnreachable { .. } => "guaranteed bound unreachable",
            Fallback::SpreadNotCoverable { .. } => "exponent spread not coverable",
            Fallback::InvalidModuli { .. } => "invalid moduli count",
        }
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::AccuracyUnreachable { estimate_ulps } => {
                write!(
                    f,
                    "{}: estimate {estimate_ulps:.3e} u at {MAX_MODULI} moduli",
                    self.reason()
                )
            }
            Fallback::BoundUnreachable { bound_gammas } => write!(
                f,
                "{}: bound {bound_gammas:.3e} gamma_k at {MAX_MODULI} moduli",
                self.reason()
            ),
            Fallback::SpreadNotCoverable { moduli } => {
                write!(f, "{} with {moduli} moduli", self.reason())
            }
            Fallback::InvalidModuli { moduli } => write!(
                f,
                "{}: {moduli} (expected {MIN_MODULI}..={MAX_MODULI})",
                self.reason()
            ),
            _ => f.write_str(self.reason()),
        }
    }
}

impl std::error::Error for Fallback {}
