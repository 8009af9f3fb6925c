//! Work a call left enqueued on its stream without waiting for it: the cuBLAS hook's emulated
//! calls return with their products and reconstruction still running, as cuBLAS's own calls
//! do, instead of draining the caller's stream.
//!
//! Until that work has passed, the GPU's buffers it uses (the workspace, the cuBLASLt
//! workspace, the shift table) must not be written by other work. [`InFlight`] is an event
//! recorded after the call's last launch, kept on the [`crate::Gpu`]:
//! - whoever takes the GPU with [`crate::gpu()`] (host-resident routes, their own streams,
//!   buffers reallocated) waits for it on the host, so they find the GPU idle as before;
//! - the next call on a caller's stream ([`crate::device::gpu_on`]) orders its stream after
//!   the event on the device (`cuStreamWaitEvent`): on the same stream that costs nothing,
//!   on another stream the GPU waits, never the host. Comparing stream handles would not do:
//!   a destroyed stream's handle can come back as a new, unordered stream.

use crate::error::{Context, GpuError};
use crate::timing::Fence;
use cudarc::driver::sys;

/// An event after the last work of a call that returned without waiting for its stream.
pub(crate) struct InFlight(Fence);

impl InFlight {
    /// Marks the current end of `stream` (the call's last launch was enqueued on it).
    pub(crate) fn record(stream: sys::CUstream) -> Result<InFlight, GpuError> {
        Fence::record(stream).map(InFlight)
    }

    /// Blocks the host until the work has passed.
    pub(crate) fn wait(&self) -> Result<(), GpuError> {
        self.0.wait()
    }

    /// Makes work enqueued on `stream` from now on start after the work has passed, without
    /// blocking the host.
    pub(crate) fn order(&self, stream: sys::CUstream) -> Result<(), GpuError> {
        // SAFETY: a live event (recorded) and a live stream of the current context.
        unsafe { sys::cuStreamWaitEvent(stream, self.0.event(), 0) }
            .result()
            .ctx("cuStreamWaitEvent")
    }
}
