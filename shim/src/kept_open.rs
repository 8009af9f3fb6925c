//! A library the process has already loaded, opened again by its path ([`KeptOpen`]), to
//! look names up in it alone: the vendor's thread controls and kernel name, the OpenMP
//! runtime's entry points.

use libc::c_void;
use std::ffi::CStr;

/// A library the process has already loaded, opened again by its path without loading
/// anything (`RTLD_NOLOAD`) and never closed, so that the addresses found in it stay valid
/// for the process; its names are looked up in it alone, never in another library.
pub struct KeptOpen(*mut c_void);

impl KeptOpen {
    /// The loaded library at `path`; `None` when no such object is loaded.
    pub fn open(path: &CStr) -> Option<KeptOpen> {
        // SAFETY: RTLD_NOLOAD only returns a handle for an object that is already loaded;
        // the handle is never closed.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        (!handle.is_null()).then_some(KeptOpen(handle))
    }

    /// The address of the first of `names` the library defines.
    pub fn first_of(&self, names: &[&CStr]) -> Option<*mut c_void> {
        names.iter().find_map(|n| {
            // SAFETY: dlsym on a live handle with a NUL-terminated name.
            let p = unsafe { libc::dlsym(self.0, n.as_ptr()) };
            (!p.is_null()).then_some(p)
        })
    }
}
