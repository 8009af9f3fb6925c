//! Where the shim library is, the `LD_PRELOAD` value that puts it in front of a program, the
//! `LD_AUDIT` value that adds the audit library when asked for, and the vendor spin timeout
//! the program is given beside them.
//!
//! The library is looked up next to this executable (`libozaki_shim.so`, then
//! `../lib/libozaki_shim.so`). The first is the layout of `target/release/`; the second that
//! of an installed prefix and of the pip wheel, whose binary is
//! `site-packages/ozaki_shim/bin/ozaki` beside `site-packages/ozaki_shim/lib/`. The path is
//! made absolute, so it stays valid in whatever directory the program changes to.

use anyhow::Context as _;
use ozaki_core::engine::spin;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// File name of the shim library.
pub const SHIM_LIB: &str = "libozaki_shim.so";

/// Finds `libozaki_shim.so` next to this executable, or in `../lib/`; returns an absolute path.
pub fn find_shim() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot locate the ozaki executable")?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [dir.join(SHIM_LIB), dir.join("../lib").join(SHIM_LIB)];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    anyhow::bail!(
        "cannot find {SHIM_LIB} (looked in {}); build it with `cargo build --release` and run the ozaki \
         binary from the same directory, or reinstall the ozaki-shim wheel",
        looked.join(", ")
    )
}

/// `LD_PRELOAD` with the shim first, so it wins over anything else preloaded.
pub fn prepend_preload(shim: &Path, existing: Option<&OsStr>) -> OsString {
    prepend(shim, existing)
}

/// `lib` in front of a colon-separated list of libraries (`LD_PRELOAD`, `LD_AUDIT`).
fn prepend(lib: &Path, existing: Option<&OsStr>) -> OsString {
    let mut v = lib.as_os_str().to_os_string();
    if let Some(e) = existing.filter(|e| !e.is_empty()) {
        v.push(":");
        v.push(e);
    }
    v
}

/// File name of the audit library (crate `ozaki-audit`).
pub const AUDIT_LIB: &str = "libozaki_audit.so";

/// The `LD_AUDIT` value that loads the audit library found beside `shim` in front of the
/// current one, when `OZAKI_CUBLAS_AUDIT=1` asks for it; `Ok(None)` when it does not.
///
/// # Errors
/// Asked for, but no `libozaki_audit.so` lies beside the shim.
pub fn audit(shim: &Path) -> anyhow::Result<Option<OsString>> {
    if ozaki_core::env::var(ozaki_core::env::CUBLAS_AUDIT).as_deref() != Some("1") {
        return Ok(None);
    }
    let lib = shim.with_file_name(AUDIT_LIB);
    anyhow::ensure!(
        lib.is_file(),
        "OZAKI_CUBLAS_AUDIT=1, but {} is missing (build it with `cargo build --release --workspace`)",
        lib.display()
    );
    Ok(Some(prepend(
        &lib,
        ozaki_core::env::var_os("LD_AUDIT").as_deref(),
    )))
}

/// The spin timeout the program's OpenBLAS pools get (`OZAKI_VENDOR_SPIN`,
/// `ozaki_core::engine::spin`), set before it starts so that an OpenBLAS it links directly
/// reads it too (the shim's constructor runs after such a library initialised); `None`
/// keeps the user's own value or the vendor's default. A bad setting is left to the shim,
/// which reports it. `ozaki run` sets it and `ozaki env` prints it.
pub fn vendor_spin_timeout() -> Option<u32> {
    spin::timeout_to_set_from_env().ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_keeps_existing_entries_after_the_shim() {
        let shim = Path::new("/x/libozaki_shim.so");
        assert_eq!(prepend_preload(shim, None), "/x/libozaki_shim.so");
        assert_eq!(
            prepend_preload(shim, Some(OsStr::new(""))),
            "/x/libozaki_shim.so"
        );
        assert_eq!(
            prepend_preload(shim, Some(OsStr::new("/y/liba.so"))),
            "/x/libozaki_shim.so:/y/liba.so"
        );
    }
}
