//! The graph-capture rule: a call on a stream that is being captured into a CUDA graph runs
//! on cuBLAS unchanged. The emulation plans each call on the host from its operands (it
//! reads their exponent statistics back and allocates workspace), which a graph would freeze
//! at capture time and replay on other data; cuBLAS's own capture support records a call
//! that stays right on replay. The hook allocates nothing and decides nothing then.
//!
//! Another thread's capture in global mode (`cudaStreamCaptureModeGlobal`, PyTorch's default)
//! forbids every thread in the default mode potentially unsafe calls (allocations, synchronous
//! copies, some synchronisations): the call fails, and the other thread's capture is
//! invalidated. The emulation runs on the caller's stream, which is not being captured, but
//! needs such calls, so it runs with its thread in relaxed mode ([`Relaxed`]), which exempts
//! this thread's calls from the check and leaves the other capture intact. Should a CUDA call
//! still fail before C is written, the hook hands the call to cuBLAS.

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

/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const MODE_RELAXED: c_int = 2;

type ExchangeMode = unsafe extern "C" fn(*mut c_int) -> c_int;

/// `cuThreadExchangeStreamCaptureMode` of the driver the program loaded.
fn exchange_mode() -> Option<ExchangeMode> {
    static ADDR: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    ADDR.get_or_init(|| lookup(DRIVER, c"cuThreadExchangeStreamCaptureMode", 0))
        .map(|addr| {
            // SAFETY: the driver's cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *).
            unsafe { core::mem::transmute::<usize, ExchangeMode>(addr) }
        })
}

/// The calling thread in relaxed capture mode until dropped, then in its own mode again.
pub(crate) struct Relaxed {
    /// The thread's mode before, restored on drop (`None` when the driver refused).
    previous: Option<c_int>,
}

impl Relaxed {
    /// Puts the calling thread in relaxed capture mode (nothing when the driver lacks the
    /// call or refuses it: the emulation's calls then fail and the call goes to cuBLAS).
    pub(crate) fn enter() -> Relaxed {
        let previous = exchange_mode().and_then(|f| {
            let mut mode = MODE_RELAXED;
            // SAFETY: a valid in/out pointer; the call only swaps this thread's mode.
            (unsafe { f(&mut mode) } == 0).then_some(mode)
        });
        Relaxed { previous }
    }
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        if let (Some(mut mode), Some(f)) = (self.previous, exchange_mode()) {
            // SAFETY: as in `enter`: swaps the thread's mode back.
            let _ = unsafe { f(&mut mode) };
        }
    }
}
