//! The vendor's spin timeout for this process (`ozaki_core::engine::spin`): applied by the
//! load-time constructor, before a program loads its BLAS, and read by the engine's pricing
//! of the vendor's wake and by the trace header.
//!
//! The constructor sets `OPENBLAS_THREAD_TIMEOUT` only when all of these hold: the setting
//! (`OZAKI_VENDOR_SPIN`) asks for a timeout, the user set none, no OpenBLAS is loaded yet
//! (one loaded already read its timeout: a program linked with OpenBLAS under a plain
//! `LD_PRELOAD`; `ozaki run` sets the variable before such a program starts), and the
//! loading thread is the process's only one (the environment is not safe to change beside
//! other threads). Python loads its BLAS behind an extension module, long after the
//! constructor, so NumPy's and SciPy's pools take the setting.

use ozaki_core::engine::spin::{self, OPENBLAS_TIMEOUT_VAR};
use std::sync::OnceLock;

/// The timeout every OpenBLAS pool of the process spins (log2 of cycles), when known.
static TIMEOUT: OnceLock<Option<u32>> = OnceLock::new();

/// Applies `OZAKI_VENDOR_SPIN`; called once by the load-time constructor, first.
pub fn apply_at_load() {
    TIMEOUT.get_or_init(|| {
        let n = match spin::timeout_to_set_from_env() {
            Ok(Some(n)) => n,
            Ok(None) => return spin::timeout_in_env(),
            Err(e) => {
                crate::config::notice(&format!("{e}; the vendor's spin is left as it is"));
                return spin::timeout_in_env();
            }
        };
        if crate::forward::any_loaded(spin::is_openblas) {
            tracing::debug!("an OpenBLAS was loaded before the shim: its spin stays as it is");
            return None;
        }
        if !only_thread() {
            tracing::debug!("loaded beside other threads: the vendor's spin stays as it is");
            return None;
        }
        // SAFETY: this process has one thread (checked just above, and the constructor runs
        // on it), so nothing reads or writes the environment concurrently.
        unsafe { std::env::set_var(OPENBLAS_TIMEOUT_VAR, n.to_string()) };
        tracing::debug!("{OPENBLAS_TIMEOUT_VAR}={n}: the vendor's idle threads sleep sooner");
        Some(n)
    });
}

/// The spin timeout of the process's OpenBLAS pools (log2 of cycles) when the shim knows
/// it: set by [`apply_at_load`], or given in `OPENBLAS_THREAD_TIMEOUT` when the constructor
/// ran; `None` otherwise (the crate used as a library reads the variable).
pub fn timeout_log2() -> Option<u32> {
    *TIMEOUT.get_or_init(spin::timeout_in_env)
}

/// [`timeout_log2`] when the process's vendor BLAS is an OpenBLAS (the first resolved vendor
/// library says, `ozaki_core::engine::spin::is_openblas`): the bound on the wake the engine
/// prices. `None` for another vendor, whose pool `OPENBLAS_THREAD_TIMEOUT` does not reach,
/// and before any vendor symbol is resolved.
pub fn vendor_timeout_log2() -> Option<u32> {
    static OPENBLAS_VENDOR: OnceLock<bool> = OnceLock::new();
    let openblas = match OPENBLAS_VENDOR.get() {
        Some(&b) => b,
        None => {
            let first = crate::forward::resolved().first().map(|&(_, lib)| lib)?;
            *OPENBLAS_VENDOR.get_or_init(|| spin::is_openblas(first))
        }
    };
    if openblas { timeout_log2() } else { None }
}

/// Whether the calling thread is the process's only one (`/proc/self/task`).
fn only_thread() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.take(2).count() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test harness runs this test on a thread of its own beside the main one.
    #[test]
    fn a_test_thread_is_not_the_only_one() {
        assert!(!only_thread());
    }
}
