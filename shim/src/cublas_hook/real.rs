//! The real entry points behind the hook: resolved from the already-loaded library's own
//! handle, then from the objects after the shim.
//!
//! Python loads extension modules `RTLD_LOCAL`, so a cuBLAS that PyTorch or CuPy brought in
//! is not in the global scope and `dlsym(RTLD_NEXT, ...)` finds nothing there. The library is
//! already loaded when its entry point is called, so `dlopen(name, RTLD_NOLOAD)` returns it
//! without loading anything, and `dlsym` on that handle searches that library and its
//! dependencies only, never the preloaded shim. An address equal to the hook's own is never
//! returned, so a hook cannot call itself.

use core::ffi::{CStr, c_void};

/// cuBLAS, newest first.
pub(crate) const CUBLAS: &[&CStr] = &[
    c"libcublas.so.13",
    c"libcublas.so.12",
    c"libcublas.so.11",
    c"libcublas.so",
];

/// cuBLASLt, newest first.
pub(crate) const CUBLASLT: &[&CStr] = &[
    c"libcublasLt.so.13",
    c"libcublasLt.so.12",
    c"libcublasLt.so.11",
    c"libcublasLt.so",
];

/// The CUDA driver.
pub(crate) const DRIVER: &[&CStr] = &[c"libcuda.so.1", c"libcuda.so"];

/// The address of `name` in the first already-loaded library of `libraries` that defines
/// it, else the next definition after the shim (`RTLD_NEXT`); never `own`.
pub(crate) fn lookup(libraries: &[&CStr], name: &CStr, own: usize) -> Option<usize> {
    let usable = |p: *mut c_void| (!p.is_null() && p as usize != own).then_some(p as usize);
    for lib in libraries {
        // SAFETY: RTLD_NOLOAD never loads or initialises anything; it only returns a new
        // reference to an object already loaded, released right after the lookup (the
        // object stays loaded: the program holds its own reference).
        let handle = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: a live handle and a NUL-terminated name.
        let found = usable(unsafe { libc::dlsym(handle, name.as_ptr()) });
        // SAFETY: the reference taken above.
        unsafe { libc::dlclose(handle) };
        if found.is_some() {
            return found;
        }
    }
    // SAFETY: a NUL-terminated name.
    usable(unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) })
}

/// The real `$name` of cuBLAS (or of the libraries `in $libs`, e.g. [`CUBLASLT`]) as a
/// function of type `$ty`, resolved once per process (`None` when no loaded library defines
/// it), never the hook of the same name; with `unhooked`, a name the shim does not export.
macro_rules! real {
    ($name:ident : $ty:ty) => {
        $crate::cublas_hook::real::real!(@ $name, $ty, $name as $ty as usize, $crate::cublas_hook::real::CUBLAS)
    };
    ($name:ident : $ty:ty, in $libs:expr) => {
        $crate::cublas_hook::real::real!(@ $name, $ty, $name as $ty as usize, $libs)
    };
    ($name:ident : $ty:ty, unhooked) => {
        $crate::cublas_hook::real::real!(@ $name, $ty, 0, $crate::cublas_hook::real::CUBLAS)
    };
    ($name:ident : $ty:ty, unhooked in $libs:expr) => {
        $crate::cublas_hook::real::real!(@ $name, $ty, 0, $libs)
    };
    (@ $name:ident, $ty:ty, $own:expr, $libs:expr) => {{
        static ADDR: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
        ADDR.get_or_init(|| {
            let name = concat!(stringify!($name), "\0");
            $crate::cublas_hook::real::lookup(
                $libs,
                core::ffi::CStr::from_bytes_with_nul(name.as_bytes()).ok()?,
                $own,
            )
        })
        .map(|addr| {
            // SAFETY: `addr` is the library's definition of this very name, whose C
            // signature is `$ty` (the cuBLAS headers' declaration, which the hook repeats).
            unsafe { core::mem::transmute::<usize, $ty>(addr) }
        })
    }};
}
pub(crate) use real;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_loaded_librarys_symbol_and_never_the_hook_itself() {
        // libc is loaded in every process: found through its own handle.
        let libc_names = [c"libc.so.6"];
        let strlen = lookup(&libc_names, c"strlen", 0).expect("strlen in libc");
        // the same address, posing as our own, is refused (RTLD_NEXT may still find one
        // in a later object, but never that address)
        assert_ne!(lookup(&libc_names, c"strlen", strlen), Some(strlen));
        // a library that is not loaded is not loaded by the lookup
        assert_eq!(
            lookup(&[c"libozaki-not-there.so.9"], c"no_such_symbol_x", 0),
            None
        );
    }
}
