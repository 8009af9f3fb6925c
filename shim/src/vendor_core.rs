//! The kernels a vendor library says it runs (`openblas_get_corename`), for the trace: an
//! OpenBLAS older than the CPU picks an old core when it loads (`ozaki_core::vendor_core`).

use crate::kept_open::KeptOpen;
use std::ffi::{CStr, CString, c_char};

/// OpenBLAS's core-name entry points, under the names of its builds and of pip's
/// `scipy_openblas` wheels; each is `const char *name(void)`.
const CORENAMES: &[&CStr] = &[
    c"openblas_get_corename",
    c"openblas_get_corename64_",
    c"scipy_openblas_get_corename",
    c"scipy_openblas_get_corename64_",
];

/// The core the loaded library at `library` names for its kernels, when it is an OpenBLAS.
pub fn of_library(library: &str) -> Option<String> {
    let lib = KeptOpen::open(&CString::new(library).ok()?)?;
    let f = lib.first_of(CORENAMES)?;
    // SAFETY: OpenBLAS documents these names as `char *(void)`, returning a static string,
    // callable from any thread once the library is loaded.
    let name = unsafe {
        let f = std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> *const c_char>(f);
        let p = f();
        if p.is_null() {
            return None;
        }
        CStr::from_ptr(p)
    };
    let name = name.to_string_lossy().trim().to_string();
    (!name.is_empty()).then_some(name)
}
