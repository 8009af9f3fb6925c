//! The vendor route: the original arguments, unchanged, to the real BLAS (see
//! [`crate::forward`] for how it is found). This is what makes pass-through bit-identical
//! to a run without the shim.

use super::{RouteError, RouteOutcome};
use crate::abi::RawCall;
use crate::symbols::SymId;
use std::sync::atomic::{AtomicBool, Ordering};

/// Forwards `raw` to the vendor definition of `id`.
///
/// # Errors
/// - [`RouteError::NoVendor`] when no loaded library defines `id` (nothing was called).
///
/// # Safety
/// - `raw` are the caller's arguments of the exported name `id` (BLAS calling contract).
pub unsafe fn call<R: RawCall>(id: SymId, raw: &R) -> Result<RouteOutcome, RouteError> {
    let vendor = crate::forward::vendor(id).ok_or(RouteError::NoVendor)?;
    // SAFETY: `vendor.addr` is a definition of the same exported name, hence the same signature.
    unsafe { raw.forward(vendor.addr) };
    Ok(RouteOutcome::default())
}

/// Says once per process, on stderr, that calls run on the built-in kernel because no vendor
/// BLAS defines `id`.
pub fn report_missing(id: SymId) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::config::notice(&format!(
            "no vendor BLAS defines {} (nor OZAKI_VENDOR_BLAS); using the built-in fp64 kernel",
            id.name()
        ));
    }
}
