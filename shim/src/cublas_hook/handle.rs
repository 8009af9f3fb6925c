//! What the caller set on its cuBLAS handle, read through the real cuBLAS: the stream the
//! call is ordered on, where alpha and beta live (pointer mode) and the math mode.

use super::real::real;
use super::{Handle, Status};
use core::ffi::{c_int, c_void};

/// `CUBLAS_POINTER_MODE_DEVICE`: alpha and beta are device pointers.
const POINTER_MODE_DEVICE: c_int = 1;
/// `CUBLAS_PEDANTIC_MATH`, the low bits of the math mode.
const PEDANTIC_MATH: c_int = 2;
/// The math modes' low bits that leave fp64 products as they are (default, the deprecated
/// tensor-op and TF32 modes, which concern lower precisions only).
const FP64_UNCHANGED: [c_int; 3] = [0, 1, 3];
/// `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`, a flag bit (reduced-precision
/// reductions concern half types only).
const DISALLOW_REDUCED_REDUCTION: c_int = 16;

/// The handle's state one call needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandleState {
    /// The caller's stream (`cudaStream_t`).
    pub stream: *mut c_void,
    /// alpha and beta are device pointers.
    pub device_scalars: bool,
    /// The math mode asks for cuBLAS's own fp64 arithmetic: pedantic, or a mode this
    /// hook does not know (cuBLAS's own fp64 emulation among them).
    pub math_forbids: bool,
}

type GetStream = unsafe extern "C" fn(Handle, *mut *mut c_void) -> Status;
type GetMode = unsafe extern "C" fn(Handle, *mut c_int) -> Status;

/// Whether a math mode leaves fp64 products free to be computed by the emulation.
fn math_allows(mode: c_int) -> bool {
    let base = mode & !DISALLOW_REDUCED_REDUCTION;
    base != PEDANTIC_MATH && FP64_UNCHANGED.contains(&base)
}

/// Reads the handle's state; `Err` with the status when cuBLAS refuses the handle (the call
/// then goes to cuBLAS, which reports it) or lacks the getters.
pub(crate) fn state(handle: Handle) -> Result<HandleState, String> {
    let (Some(get_stream), Some(get_pointer), Some(get_math)) = (
        real!(cublasGetStream_v2: GetStream, unhooked),
        real!(cublasGetPointerMode_v2: GetMode, unhooked),
        real!(cublasGetMathMode: GetMode, unhooked),
    ) else {
        return Err("cuBLAS lacks the handle getters".into());
    };
    let mut stream = core::ptr::null_mut();
    let (mut pointer, mut math) = (0, 0);
    // SAFETY: the real getters with valid out-pointers; a bad handle is their error code.
    let codes = unsafe {
        [
            get_stream(handle, &mut stream),
            get_pointer(handle, &mut pointer),
            get_math(handle, &mut math),
        ]
    };
    if let Some(bad) = codes.iter().find(|&&c| c != 0) {
        return Err(format!("cuBLAS refused the handle (status {bad})"));
    }
    Ok(HandleState {
        stream,
        device_scalars: pointer == POINTER_MODE_DEVICE,
        math_forbids: !math_allows(math),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_math_modes_that_leave_fp64_alone_allow_the_emulation() {
        assert!(math_allows(0));
        assert!(math_allows(3)); // TF32: lower precisions only
        assert!(math_allows(16)); // default with the reduction flag
        assert!(!math_allows(2)); // pedantic
        assert!(!math_allows(2 | 16));
        assert!(!math_allows(8)); // unknown to the hook: cuBLAS decides
    }
}
