//! The kernels a vendor library says it runs (`openblas_get_corename`), for the trace: an
//! OpenBLAS older than the CPU picks an old core when it loads (`ozaki_core::vendor_core`).

use crate::forward::{self, KeptOpen};
use crate::symbols::{COUNT, SymId};
use std::ffi::{CStr, CString, c_char};
use std::sync::OnceLock;

/// OpenBLAS's core-name entry points, under the names of its builds and of pip's
/// `scipy_openblas` wheels; each is `const char *name(void)`.
const CORENAMES: &[&CStr] = &[
    c"openblas_get_corename",
    c"openblas_get_corename64_",
    c"scipy_openblas_get_corename",
    c"scipy_openblas_get_corename64_",
];

static CORES: [OnceLock<Option<String>>; COUNT] = [const { OnceLock::new() }; COUNT];

/// The kernels the vendor library of `id` says it runs, once `id` has been resolved (asked
/// once per symbol). Opening the library takes the loader's lock: call it where no lock of
/// the shim is held (the trace asks it from a record's caller and reads [`known`] under its
/// own lock).
pub fn of(id: SymId) -> Option<&'static str> {
    let library = forward::resolved_library(id)?;
    CORES[id.index()]
        .get_or_init(|| of_library(library))
        .as_deref()
}

/// What [`of`] found for `id`, if it was asked; never looks anything up.
pub fn known(id: SymId) -> Option<&'static str> {
    CORES[id.index()].get().and_then(|c| c.as_deref())
}

/// The core the loaded library at `library` names for its kernels, when it is an OpenBLAS.
fn of_library(library: &str) -> Option<String> {
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
