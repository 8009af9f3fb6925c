//! `libozaki_audit.so`: a dynamic-linker audit library (`LD_AUDIT`, see `rtld-audit(7)`)
//! that lets programs which find cuBLAS's entry points with `dlsym` reach ozaki-shim's cuBLAS
//! hook.
//!
//! A preloaded library (`LD_PRELOAD=libozaki_shim.so`) takes over the cuBLAS calls that a
//! program binds by name through the global scope (CuPy, PyTorch). JAX's XLA plugin does
//! not: it `dlopen`s cuBLAS and resolves each entry point with `dlsym` on that handle, which
//! searches cuBLAS alone. The dynamic linker tells an audit library of every such binding
//! (`la_symbind64`, for `dlsym` too: tested with glibc 2.36 and 2.39) and calls what the
//! audit library returns. So, with
//!
//! ```text
//! LD_AUDIT=libozaki_audit.so LD_PRELOAD=libozaki_shim.so python3 program.py
//! ```
//!
//! a binding whose symbol cuBLAS (or cuBLASLt) defines, made from any object other than
//! cuBLAS itself or the shim, goes to the shim's function of the same name when the shim
//! exports one (its hooked fp64 entry points, [`elf::lookup`]); every other binding, the
//! shim's own lookups of the real entry points and cuBLAS's calls into itself keep their
//! target. The shim's hook then decides as for any hooked call (`OZAKI_CUBLAS=0` turns it
//! off there).
//!
//! The loader runs these functions in the middle of a symbol lookup, in a namespace of the
//! audit library's own: they allocate nothing, take no lock, call no `dl*` function, and
//! read the shim's symbol table in place. Without the shim loaded (no `LD_PRELOAD`) nothing
//! is redirected.

mod elf;

use std::ffi::{CStr, c_char, c_long, c_uint};
use std::sync::atomic::{AtomicPtr, Ordering};

/// `struct link_map`'s public head (`<link.h>`): the loaded object's base address, name and
/// dynamic section.
#[repr(C)]
pub struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
    l_ld: *const elf::Dyn,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

/// `la_objopen`'s return bits: audit bindings to this object, from this object.
const LA_FLG_BINDTO: c_uint = 0x01;
const LA_FLG_BINDFROM: c_uint = 0x02;

/// What an object is to this library, kept in the low bits of its cookie (the loader
/// passes the cookie back with every binding; a link map is 8-byte aligned, so the loader's
/// own cookie value, the link map's address, leaves them free).
const OTHER: usize = 0;
const CUBLAS: usize = 1;
const SHIM: usize = 2;
const KIND: usize = 0b11;

/// The shim's link map, once the loader opened it.
static SHIM_MAP: AtomicPtr<LinkMap> = AtomicPtr::new(std::ptr::null_mut());

/// The audit interface version: the one the loader offers (0 would turn the library off).
#[unsafe(no_mangle)]
pub extern "C" fn la_version(version: c_uint) -> c_uint {
    version
}

/// Classifies each object the loader opens by its file name (cuBLAS and cuBLASLt, the shim,
/// anything else) and asks to see the bindings to cuBLAS from everything else.
///
/// # Safety
/// Called by the dynamic linker with a live link map and its cookie.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn la_objopen(
    map: *mut LinkMap,
    _lmid: c_long,
    cookie: *mut usize,
) -> c_uint {
    // SAFETY: the loader passes a live link map whose name is a C string (possibly empty).
    let name = unsafe { (*map).l_name };
    let kind = if name.is_null() {
        OTHER
    } else {
        // SAFETY: as above.
        kind_of(unsafe { CStr::from_ptr(name) }.to_bytes())
    };
    if kind == SHIM {
        SHIM_MAP.store(map, Ordering::Release);
    }
    // SAFETY: the loader's cookie for this object, ours to set.
    unsafe { *cookie = (*cookie & !KIND) | kind };
    match kind {
        CUBLAS => LA_FLG_BINDTO,
        _ => LA_FLG_BINDFROM,
    }
}

/// What an object named `path` is: its file name starting with `libcublas` (cuBLAS,
/// cuBLASLt) or `libozaki_shim`.
fn kind_of(path: &[u8]) -> usize {
    let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    if file.starts_with(b"libcublas") {
        CUBLAS
    } else if file.starts_with(b"libozaki_shim") {
        SHIM
    } else {
        OTHER
    }
}

/// Where a binding of `symname` goes: the shim's function of that name when cuBLAS defines
/// the symbol, an object other than cuBLAS and the shim asks for it, and the shim exports
/// it; else where the loader found it.
///
/// # Safety
/// Called by the dynamic linker with the bound symbol, both objects' cookies and the name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn la_symbind64(
    sym: *const elf::Sym,
    _ndx: c_uint,
    refcook: *const usize,
    defcook: *const usize,
    _flags: *mut c_uint,
    symname: *const c_char,
) -> usize {
    // SAFETY: the loader passes the symbol it bound, with its value relocated.
    let found = unsafe { (*sym).st_value as usize };
    // SAFETY: both cookies are the loader's, set by `la_objopen` above.
    let (from, to) = unsafe { (*refcook & KIND, *defcook & KIND) };
    if to != CUBLAS || from != OTHER || symname.is_null() {
        return found;
    }
    let shim = SHIM_MAP.load(Ordering::Acquire);
    if shim.is_null() {
        return found;
    }
    // SAFETY: the name is the loader's C string; the shim's link map stays live for the
    // process (a preloaded library is never unloaded).
    let name = unsafe { CStr::from_ptr(symname) }.to_bytes();
    if !name.starts_with(b"cublas") {
        return found;
    }
    // SAFETY: as above.
    let map = unsafe { &*shim };
    // SAFETY: the shim's dynamic section and tables, mapped by the loader.
    unsafe { elf::lookup(map.l_addr, map.l_ld, name) }.unwrap_or(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_told_apart_by_their_file_name() {
        assert_eq!(kind_of(b"/usr/local/cuda/lib64/libcublas.so.13"), CUBLAS);
        assert_eq!(kind_of(b"libcublasLt.so.13"), CUBLAS);
        assert_eq!(kind_of(b"/opt/x/lib/libozaki_shim.so"), SHIM);
        assert_eq!(kind_of(b"/opt/libcublas_user/libtorch.so"), OTHER);
        assert_eq!(kind_of(b""), OTHER);
    }
}
