//! Finding the real (vendor) BLAS behind each exported name.
//!
//! Each [`SymId`] has one fork-safe lazy slot ([`crate::lazy`]), filled at the symbol's first call and never in a
//! constructor: under Python the BLAS is loaded after the shim, behind an extension module
//! (`ecosystem-facts.md` §0, §3). Resolution order:
//!
//! 1. `OZAKI_VENDOR_BLAS=/path/lib.so`: that library, opened once with `libloading`. A
//!    library that cannot be loaded, or that defines none of the forwarded names (a typo
//!    naming another library), is reported once on stderr and the lookup goes on with 2;
//! 2. `dlsym(RTLD_NEXT)`: the next definition in the global lookup order (programs linked
//!    with `-lblas`);
//! 3. a walk of the loaded objects (`dl_iterate_phdr`), re-opening each with
//!    `dlopen(RTLD_NOLOAD)` and asking `dlsym`, skipping the shim's own object. Under Python
//!    every BLAS is `RTLD_LOCAL`, so this is the step that finds it. The handle is kept open
//!    so the library can't be unloaded under a cached pointer.
//!
//! The library that holds the definition (`dladdr`) is kept for the trace header and verbose
//! output. A name found nowhere stays unresolved for the life of the process and its calls
//! use the built-in route.
//!
//! [`global_symbol`] is the same lookup without `RTLD_NEXT`, starting from `RTLD_DEFAULT`, so
//! a program's own `xerbla_` wins over the library's (the reference test suites rely on it).

use crate::lazy::Lazy;
use crate::symbols::{COUNT, SymId};
use libc::{c_int, c_void};
use std::ffi::{CStr, CString};

/// A resolved vendor definition.
#[derive(Debug)]
pub struct Vendor {
    /// Address of the vendor function (same C signature as the exported name).
    pub addr: *const c_void,
    /// File of the library that defines it (`dladdr`), for the trace header.
    pub library: String,
    /// How it was found: `OZAKI_VENDOR_BLAS`, `RTLD_NEXT` or `loaded objects`.
    pub how: &'static str,
    /// The kernels the library says it runs ([`crate::vendor_core`]), for the trace; asked
    /// here, inside the resolution (which a `fork` waits for), never at a record.
    pub core: Option<String>,
}

// SAFETY: `addr` is a code address, immutable and valid in every thread.
unsafe impl Send for Vendor {}
// SAFETY: as above.
unsafe impl Sync for Vendor {}

static SLOTS: [Lazy<Option<Vendor>>; COUNT] = [const { Lazy::new() }; COUNT];

static OVERRIDE: Lazy<Option<libloading::Library>> = Lazy::new();

/// The vendor definition of `id`, resolved at its first call.
///
/// `None` also for a call made while `id` is being resolved on this thread: a library named
/// in `OZAKI_VENDOR_BLAS` whose constructor calls `id` while we load it (its call then runs
/// on the built-in kernel instead of waiting for its own resolution forever).
///
/// Never panics: a panic of our own while resolving falls back to the plain loader lookup
/// ([`resolve_guarded`]), so every call, nested ones included, still reaches the vendor.
pub fn vendor(id: SymId) -> Option<&'static Vendor> {
    SLOTS[id.index()]
        .try_get_or_init(|| resolve_guarded(id.c_name(), || resolve(id)))?
        .as_ref()
}

/// The vendor's definition of `id`, if an earlier call looked it up already ([`vendor`]
/// otherwise).
pub fn vendor_if_found(id: SymId) -> Option<&'static Vendor> {
    SLOTS[id.index()].get()?.as_ref()
}

/// `resolve()`, and when it panics (a bug of ours: the lookup extras, the log line, the
/// settings) the loader's own lookup of `name` (`RTLD_NEXT`, then the loaded objects)
/// without them, with one line on stderr: a call whose lookup failed still gets the vendor's
/// answer, and with no definition at all the caller computes it on the built-in kernel.
fn resolve_guarded(name: &CStr, resolve: impl FnOnce() -> Option<Vendor>) -> Option<Vendor> {
    if let Ok(found) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(resolve)) {
        return found;
    }
    let bare = std::panic::catch_unwind(|| {
        next_definition(name)
            .map(|p| (p, "RTLD_NEXT after an internal error"))
            .or_else(|| {
                in_loaded_objects(name).map(|p| (p, "loaded objects after an internal error"))
            })
    })
    .ok()
    .flatten();
    let _ = std::panic::catch_unwind(|| {
        crate::config::notice(&format!(
            "internal error while looking up the vendor's {}; {}",
            name.to_string_lossy(),
            if bare.is_some() {
                "using the loader's definition"
            } else {
                "none found, computing on the built-in kernel"
            }
        ))
    });
    bare.map(|(addr, how)| Vendor {
        addr,
        library: library_of(addr),
        how,
        core: None,
    })
}

/// Names resolved so far and their libraries (for the trace header).
pub fn resolved() -> Vec<(SymId, &'static str)> {
    SymId::all()
        .filter_map(|id| {
            SLOTS[id.index()]
                .get()
                .and_then(|v| v.as_ref())
                .map(|v| (id, v.library.as_str()))
        })
        .collect()
}

/// The library `id` resolved to, if it has been resolved.
pub fn resolved_library(id: SymId) -> Option<&'static str> {
    resolved_vendor(id).map(|v| v.library.as_str())
}

/// The kernels the library of `id` says it runs, if it has been resolved and says.
pub fn resolved_core(id: SymId) -> Option<&'static str> {
    resolved_vendor(id).and_then(|v| v.core.as_deref())
}

fn resolved_vendor(id: SymId) -> Option<&'static Vendor> {
    SLOTS[id.index()].get().and_then(|v| v.as_ref())
}

fn resolve(id: SymId) -> Option<Vendor> {
    let name = id.c_name();
    let found = from_override(name)
        .map(|p| (p, "OZAKI_VENDOR_BLAS"))
        .or_else(|| next_definition(name).map(|p| (p, "RTLD_NEXT")))
        .or_else(|| in_loaded_objects(name).map(|p| (p, "loaded objects")));
    let vendor = found.map(|(addr, how)| {
        let library = library_of(addr);
        Vendor {
            addr,
            core: crate::vendor_core::of_library(&library),
            library,
            how,
        }
    });
    match &vendor {
        Some(v) => {
            tracing::info!(symbol = id.name(), id = id.0, library = %v.library, how = v.how, "resolved vendor BLAS")
        }
        None => tracing::info!(symbol = id.name(), "no vendor definition found"),
    }
    vendor
}

fn from_override(name: &CStr) -> Option<*const c_void> {
    let lib = OVERRIDE
        .try_get_or_init(|| {
            let path = crate::config::get().vendor_blas.as_ref()?;
            // SAFETY: loading a BLAS library runs its initialisers, which is what the user asked
            // for by naming it in OZAKI_VENDOR_BLAS.
            match unsafe { libloading::Library::new(path) } {
                Ok(lib) if defines_blas(&lib) => Some(lib),
                Ok(_) => {
                    let names: Vec<&str> = SymId::all().map(SymId::name).collect();
                    crate::config::notice(&format!(
                        "OZAKI_VENDOR_BLAS={}: defines none of {} (not a BLAS library?); ignoring it and \
                         using the BLAS found in the program",
                        path.display(),
                        names.join(", ")
                    ));
                    None
                }
                Err(e) => {
                    let why = std::error::Error::source(&e)
                        .map_or_else(|| e.to_string(), |s| s.to_string());
                    crate::config::notice(&format!(
                        "OZAKI_VENDOR_BLAS={}: cannot load: {why}",
                        path.display()
                    ));
                    None
                }
            }
        })?
        .as_ref()?;
    // SAFETY: only the address is taken; it is called through the signature of `name`.
    let sym = unsafe { lib.get::<*const c_void>(name.to_bytes_with_nul()) }.ok()?;
    let p = *sym;
    (!p.is_null() && !is_ours(p)).then_some(p)
}

/// Whether `lib` defines any of the names the shim forwards.
fn defines_blas(lib: &libloading::Library) -> bool {
    SymId::all().any(|id| {
        // SAFETY: only the address is looked up, never called here.
        unsafe { lib.get::<*const c_void>(id.c_name().to_bytes_with_nul()) }.is_ok()
    })
}

fn next_definition(name: &CStr) -> Option<*const c_void> {
    // SAFETY: dlsym with a valid NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as *const c_void;
    (!p.is_null() && !is_ours(p)).then_some(p)
}

/// Base address of the object holding `p`, from `dladdr`.
fn object_base(p: *const c_void) -> Option<usize> {
    // SAFETY: Dl_info is plain data; dladdr only writes it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be passed to dladdr.
    let ok = unsafe { libc::dladdr(p, &mut info) };
    (ok != 0).then_some(info.dli_fbase as usize)
}

/// Whether `p` lies in the shim's own object (an address of ours would recurse forever).
fn is_ours(p: *const c_void) -> bool {
    static OWN_BASE: Lazy<Option<usize>> = Lazy::new();
    let own = *OWN_BASE.get_or_init(|| object_base(resolve as *const c_void));
    own.is_some() && object_base(p) == own
}

/// File name of the object holding `p`.
fn library_of(p: *const c_void) -> String {
    // SAFETY: as in `object_base`.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be passed to dladdr.
    if unsafe { libc::dladdr(p, &mut info) } != 0 && !info.dli_fname.is_null() {
        // SAFETY: dladdr returned a NUL-terminated file name owned by the loader.
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned()
    } else {
        "?".into()
    }
}

/// The first definition of `name` in the loaded objects, in the loader's order, skipping
/// our own; the object that holds it stays open while we hold its address.
fn in_loaded_objects(name: &CStr) -> Option<*const c_void> {
    loaded_paths().into_iter().find_map(|path| {
        // SAFETY: RTLD_NOLOAD only returns a handle for an object that is already loaded.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return None;
        }
        // SAFETY: valid handle and name.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) } as *const c_void;
        if !p.is_null() && !is_ours(p) {
            return Some(p); // keep the handle: the library stays loaded while we hold its address
        }
        // SAFETY: balances the dlopen above.
        unsafe { libc::dlclose(handle) };
        None
    })
}

/// Whether the file name of an object the process has loaded satisfies `pred`.
pub fn any_loaded(pred: impl Fn(&str) -> bool) -> bool {
    loaded_paths().iter().any(|p| pred(&p.to_string_lossy()))
}

/// The file names of the loaded objects, in the loader's order (the main program and the
/// vDSO have none: the global lookup covers the first).
fn loaded_paths() -> Vec<CString> {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // Called by the loader: a panic must not unwind into it (0 goes on with the walk).
        crate::shield::shielded_or(0, || {
            // SAFETY: `data` is the vector passed below and `info` is valid for this
            // callback; dlpi_name is NULL or a NUL-terminated string.
            let (paths, path) = unsafe { (&mut *(data as *mut Vec<CString>), (*info).dlpi_name) };
            if !path.is_null() {
                // SAFETY: as above.
                let path = unsafe { CStr::from_ptr(path) };
                if !path.is_empty() {
                    paths.push(path.to_owned());
                }
            }
            0
        })
    }
    let mut paths: Vec<CString> = Vec::new();
    // SAFETY: `visit` matches the callback contract and only uses `paths` during the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut paths).cast()) };
    paths
}

/// A symbol by global lookup (`RTLD_DEFAULT`), then in the loaded objects; never one of ours.
/// Used for error handlers (`xerbla_`, `cblas_xerbla`) and the CBLAS global `RowMajorStrg`.
pub fn global_symbol(name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: dlsym with a valid NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) } as *const c_void;
    let p = if !p.is_null() && !is_ours(p) {
        Some(p)
    } else {
        in_loaded_objects(&c)
    };
    p.map(|p| p as *mut c_void)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup that panics still finds the loader's definition (here libc's `strlen`), and
    /// a name defined nowhere comes back as none (the caller then computes the call itself).
    #[test]
    fn a_lookup_that_panics_falls_back_to_the_loaders_definition() {
        let found = resolve_guarded(c"strlen", || panic!("a bug while resolving"))
            .expect("the loader's definition");
        let want = global_symbol("strlen").unwrap();
        assert_eq!(found.addr, want as *const c_void);
        assert!(found.library.contains("libc"), "{}", found.library);
        assert!(found.how.contains("internal error"), "{}", found.how);
        assert!(resolve_guarded(c"ozaki_no_such_symbol_anywhere", || panic!("again")).is_none());
        let ok = resolve_guarded(c"strlen", || None);
        assert!(ok.is_none(), "a lookup that returns is taken as it is");
    }

    #[test]
    fn the_loaded_objects_are_listed_by_file_name() {
        assert!(any_loaded(|n| n.contains("libc.so")));
        assert!(!any_loaded(|n| n.contains("no-such-library-anywhere")));
    }

    #[test]
    fn own_addresses_are_recognised_and_libc_is_found() {
        assert!(is_ours(resolve as *const c_void));
        let p = global_symbol("strlen").expect("libc is loaded");
        assert!(!is_ours(p));
        assert!(library_of(p).contains("libc"), "{}", library_of(p));
        assert!(global_symbol("ozaki_no_such_symbol_anywhere").is_none());
    }
}
