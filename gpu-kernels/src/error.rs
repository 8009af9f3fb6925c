//! Why a GPU route could not run. Every variant is recoverable: the shim answers any of them by
//! taking the vendor route (never a failure seen by the program).

use std::fmt;

/// A failed GPU operation, with the reason the shim prints once and records as `fallback`.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuError {
    /// No driver, no device, a library missing, or initialisation failed (reason inside).
    Unavailable(String),
    /// Not enough free device memory for even the smallest tiling.
    OutOfMemory {
        /// Bytes the smallest tiling needs.
        needed: usize,
        /// Bytes the device reported free.
        free: usize,
    },
    /// NaN or Inf in an operand: emulation cannot represent it, native fp64 must run.
    NonFinite,
    /// The call's shape or arguments are outside what this route handles (reason inside).
    Unsupported(String),
    /// A CUDA driver, cuBLAS, cuBLASLt or NVRTC call failed (which call, and its status).
    Cuda(String),
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::Unavailable(why) => write!(f, "GPU unavailable: {why}"),
            GpuError::OutOfMemory { needed, free } => {
                write!(
                    f,
                    "GPU memory: need {} MiB, {} MiB free",
                    needed >> 20,
                    free >> 20
                )
            }
            GpuError::NonFinite => f.write_str("NaN or Inf in an operand"),
            GpuError::Unsupported(why) => write!(f, "unsupported call: {why}"),
            GpuError::Cuda(what) => write!(f, "CUDA error: {what}"),
        }
    }
}

impl std::error::Error for GpuError {}

/// Wraps any library status into [`GpuError::Cuda`] naming the call that failed.
pub(crate) trait Context<T> {
    fn ctx(self, what: &str) -> Result<T, GpuError>;
}

impl<T, E: fmt::Debug> Context<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Result<T, GpuError> {
        self.map_err(|e| GpuError::Cuda(format!("{what}: {e:?}")))
    }
}
