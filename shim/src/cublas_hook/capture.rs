//! The graph-capture rule: a call on a stream that is being captured into a CUDA graph runs
//! on cuBLAS unchanged. The emulation plans each call on the host from its operands (it
//! reads their exponent statistics back and allocates workspace), which a graph would freeze
//! at capture time and replay on other data; cuBLAS's own capture support records a call
//! that stays right on replay. The hook allocates nothing and decides nothing then.

use super::real::{DRIVER, lookup};
use core::ffi::{c_int, c_void};

/// `CU_STREAM_CAPTURE_STATUS_NONE`.
const NOT_CAPTURING: c_int = 0;

/// What the driver says about a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Capture {
    /// Not being captured: the hook may route the call.
    No,
    /// Being captured (or a capture was invalidated and not ended yet).
    Yes,
    /// The driver is not loaded or refused the stream: treated as capturing.
    Unknown,
}

type IsCapturing = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;

/// `cuStreamIsCapturing` of the driver the program loaded.
fn is_capturing() -> Option<IsCapturing> {
    static ADDR: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    ADDR.get_or_init(|| lookup(DRIVER, c"cuStreamIsCapturing", 0))
        .map(|addr| {
            // SAFETY: the driver's cuStreamIsCapturing(CUstream, CUstreamCaptureStatus *).
            unsafe { core::mem::transmute::<usize, IsCapturing>(addr) }
        })
}

/// Whether `stream` (a `cudaStream_t`, the same handle as a `CUstream`) is being captured.
pub(crate) fn of(stream: *mut c_void) -> Capture {
    let Some(f) = is_capturing() else {
        return Capture::Unknown;
    };
    let mut status = NOT_CAPTURING;
    // SAFETY: a stream handle the caller's cuBLAS handle holds, and a valid out-pointer.
    match unsafe { f(stream, &mut status) } {
        0 if status == NOT_CAPTURING => Capture::No,
        0 => Capture::Yes,
        _ => Capture::Unknown,
    }
}
