//! Small untraced calls straight to the vendor BLAS, before any of the decision's steps.
//!
//! A program's calls are mostly small, and under `auto` the gate ([`super::gate`]) already
//! sends them to the vendor without a decision. What is left around such a call is the path
//! every call takes: the decoded record shape, the engine's entry ([`super::choose::auto`]),
//! the choice and its plan, the vendor's thread share and the wake note. For a call whose
//! fate is already known none of that changes anything, and together it costs more than the
//! 8 x 8 x 8 product's decision itself (BENCHMARKS.md, "Shim overhead at the field engine,
//! wall time and instructions"). [`to_vendor`] recognises such a call and hands back the
//! vendor to forward it to:
//! - nothing is recorded (no trace), earlier calls initialised what this one needs (the
//!   settings, the vendor's definition), and the call is legal and not a quick return (the
//!   vendor's error handling and quick returns take the ordinary path, which records them
//!   and puts the guard in its reporting mode);
//! - under `OZAKI_ROUTE=vendor`: every such call;
//! - under `auto`: a call below [`NARROW_MIN_MNK`] multiply-adds whose size class the gate
//!   of the engine deciding now already holds as the vendor's at the calls in flight
//!   ([`super::choose::gated_already`]; a class not yet priced takes the ordinary path, which
//!   prices it). Below that size a call runs on no OpenMP team's share and leaves no wake
//!   ([`super::vendor_threads::team`], [`super::wake::vendor_returned`]), so the ordinary
//!   path would forward it exactly as here. With `OZAKI_VENDOR_THREADS=share`, where every
//!   call beside others narrows the vendor's threads, no call takes this lane.
//!
//! A call counted in flight under `auto` stays counted until the vendor returned, as on the
//! ordinary path: the engine prices other callers with it. What the lane saves is measured in
//! BENCHMARKS.md, "Small calls straight to the vendor, against their base in one run".

use super::choose;
use super::vendor_threads::NARROW_MIN_MNK;
use crate::abi::{RawCall, Verdict};
use crate::config::{self, VendorThreads};
use crate::forward;
use crate::lazy::{self, InFlight};
use crate::symbols::SymId;
use libc::c_void;
use ozaki_core::route::{Route, RouteRequest};

/// A call the lane sends to the vendor: forward it to [`ToVendor::vendor`], then drop this.
pub struct ToVendor {
    /// The vendor's definition of the exported name.
    pub vendor: *const c_void,
    /// The call's count in flight, under `auto`.
    _held: Option<InFlight>,
}

/// The vendor for the call `raw` of the exported name `id`, when the module doc's lane takes
/// it; `None` sends it down the ordinary path.
///
/// # Safety
/// - `raw` are the arguments a BLAS caller passed to `id`, under the BLAS calling contract.
#[inline]
pub unsafe fn to_vendor<R: RawCall>(id: SymId, raw: &R) -> Option<ToVendor> {
    // Only once earlier calls initialised what the call needs: an initialiser runs counted in
    // flight on the ordinary path, so that a `fork` never copies it half done.
    if !crate::process::loaded() {
        return None;
    }
    let config = config::get_if_read()?;
    if config.tracing() {
        return None;
    }
    let vendor = forward::vendor_if_found(id)?.addr;
    let auto = match config.route {
        RouteRequest::Forced(Route::Vendor) => false,
        RouteRequest::Auto if config.vendor_threads_rule() != VendorThreads::Share => true,
        _ => return None,
    };
    // SAFETY: the caller's contract.
    let Verdict::Compute(canon) = unsafe { raw.decode() }.verdict else {
        return None;
    };
    // a large call leaves before it is counted: the ordinary path counts it
    if auto && canon.mnk() >= NARROW_MIN_MNK {
        return None;
    }
    let held = auto.then(InFlight::begin);
    if held.is_some() {
        let cs = choose::canonical_shape(&canon);
        if !choose::gated_already(&cs, lazy::calls_in_flight().max(1)) {
            return None;
        }
    }
    Some(ToVendor {
        vendor,
        _held: held,
    })
}
