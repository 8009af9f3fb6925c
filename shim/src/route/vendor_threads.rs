//! Vendor calls that `auto` makes while other BLAS calls of the process are in flight run
//! the vendor at their share of its threads, with `OZAKI_VENDOR_THREADS=share` (the default
//! is `keep`: measured under the shim, the rule did not make PySCF faster, BENCHMARKS.md,
//! "The vendor's threads shared among concurrent calls").
//!
//! A program that calls its BLAS from many threads at once (PySCF's C code from every thread
//! of an OpenMP team) hands each call to a vendor that splits it again over its own pool of
//! one thread per core: 16 callers on 16 cores then share 16 pool threads, and each call
//! waits for the others' parts. PySCF's CCSD on a 16-core host ran in 6.7 s so, and in 4.0
//! s with `OPENBLAS_NUM_THREADS=1` (BENCHMARKS.md, "The vendor's threads shared among
//! concurrent calls"): its BLAS calls, each on the one core its caller already has, went
//! 1.7x faster in all.
//!
//! So while calls `auto` keeps on the vendor run beside others, the vendor library that
//! defines them runs at its thread count divided by the calls in flight (at least one): the
//! first such call saves the library's count (`openblas_get_num_threads`) and each one sets
//! the share for the calls in flight when it starts (`openblas_set_num_threads`, also under
//! the names of pip's `scipy_openblas` wheels); the last one to end sets the saved count
//! back. Sixteen callers on a 16-thread vendor get one thread each, two get eight. A call
//! made alone keeps the library's count. The count is one setting of the whole library, so a
//! call that starts alone while others still run also gets a share, and a count the program
//! sets while such calls run is replaced by the saved one when they end.
//!
//! What it changes: the vendor splits a call differently at another thread count, so C can
//! differ in the last bits (as between two thread settings of the vendor; OpenBLAS 0.3.21 on
//! 2 cores differed in 4 of 6 shapes); the vendor route forced with `OZAKI_ROUTE=vendor` and
//! `OZAKI_VENDOR_THREADS=keep` leave the vendor's setting alone. Vendors without these entry
//! points (MKL, BLIS, the reference BLAS) are left as they are.

use crate::symbols::SymId;
use libc::c_int;
use std::ffi::CString;
use std::sync::Mutex;

/// Setters of an OpenBLAS's thread count, most specific first; each is `void name(int)`.
const SETTERS: &[&str] = &[
    "openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "scipy_openblas_set_num_threads64_",
];
/// The matching queries, each `int name(void)`.
const GETTERS: &[&str] = &[
    "openblas_get_num_threads",
    "openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads",
    "scipy_openblas_get_num_threads64_",
];

/// A vendor library's thread-count entry points.
#[derive(Clone, Copy)]
struct Control {
    set: extern "C" fn(c_int),
    get: extern "C" fn() -> c_int,
}

/// Each exported name's vendor library's control, found at its first call beside others
/// (`None`: that library has none).
static CONTROLS: [crate::lazy::Lazy<Option<Control>>; crate::symbols::COUNT] =
    [const { crate::lazy::Lazy::new() }; crate::symbols::COUNT];

/// The shared libraries: a setter's address, the calls sharing it, the count to restore.
static NARROWED: Mutex<Vec<(usize, usize, c_int)>> = Mutex::new(Vec::new());

/// A call that runs its vendor at a share of its threads until it is dropped.
pub struct Narrow {
    control: Control,
}

impl Narrow {
    /// Sets the vendor library of `id` to its share of threads for a call made beside
    /// `concurrent - 1` others (the caller checks `Config::shares_vendor_threads`); `None`
    /// when the call is alone or the library has no thread count to set.
    pub fn beside_others(id: SymId, concurrent: u32) -> Option<Narrow> {
        if concurrent < 2 {
            return None;
        }
        let control = *CONTROLS[id.index()].get_or_init(|| find(id)).as_ref()?;
        enter(control, concurrent);
        Some(Narrow { control })
    }
}

impl Drop for Narrow {
    fn drop(&mut self) {
        leave(self.control);
    }
}

fn key(c: Control) -> usize {
    c.set as usize
}

/// `saved` threads shared among `concurrent` calls: at least one each.
fn share(saved: c_int, concurrent: u32) -> c_int {
    (saved / concurrent.max(1) as c_int).max(1)
}

fn enter(c: Control, concurrent: u32) {
    let mut all = NARROWED.lock().unwrap_or_else(|p| p.into_inner());
    let saved = match all.iter_mut().find(|e| e.0 == key(c)) {
        Some(e) => {
            e.1 += 1;
            e.2
        }
        None => {
            let saved = (c.get)();
            all.push((key(c), 1, saved));
            saved
        }
    };
    if saved > 1 {
        (c.set)(share(saved, concurrent));
    }
}

fn leave(c: Control) {
    let mut all = NARROWED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(i) = all.iter().position(|e| e.0 == key(c)) else {
        return;
    };
    all[i].1 -= 1;
    if all[i].1 == 0 {
        let saved = all.swap_remove(i).2;
        if saved > 1 {
            (c.set)(saved);
        }
    }
}

/// The thread-count entry points of the library that defines the vendor's `id`: looked up
/// in that library alone (a handle to it, already loaded), so that a call never sets another
/// library's count.
fn find(id: SymId) -> Option<Control> {
    let vendor = crate::forward::vendor(id)?;
    let path = CString::new(vendor.library.as_str()).ok()?;
    // SAFETY: dlopen of an already loaded library (RTLD_NOLOAD loads nothing); the handle is
    // kept for the process, so the addresses below stay valid.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    let sym = |names: &[&str]| {
        names.iter().find_map(|n| {
            let c = CString::new(*n).ok()?;
            // SAFETY: dlsym on a live handle with a NUL-terminated name.
            let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
            (!p.is_null()).then_some(p)
        })
    };
    let (set, get) = (sym(SETTERS)?, sym(GETTERS)?);
    // SAFETY: OpenBLAS documents these names as `void (int)` and `int (void)`, callable from
    // any thread at any time.
    let control = unsafe {
        Control {
            set: std::mem::transmute::<*mut libc::c_void, extern "C" fn(c_int)>(set),
            get: std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> c_int>(get),
        }
    };
    tracing::debug!(
        "vendor threads: {} is shared among calls beside each other",
        vendor.library
    );
    Some(control)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};

    static COUNT: AtomicI32 = AtomicI32::new(16);
    // stand-ins for the library's entry points, called through `extern "C"` pointers
    extern "C" fn set(n: c_int) {
        crate::shield::shielded(|| COUNT.store(n, Ordering::SeqCst));
    }
    extern "C" fn get() -> c_int {
        crate::shield::shielded_or(0, || COUNT.load(Ordering::SeqCst))
    }

    /// The first call beside others sets its share of the library's threads, later ones the
    /// share for the calls in flight when they start, and the last to end restores the
    /// count the library had; a library at one thread is left alone.
    #[test]
    fn calls_beside_others_share_the_threads_until_the_last_ends() {
        let c = Control { set, get };
        enter(c, 16);
        assert_eq!(get(), 1, "16 calls on 16 threads");
        enter(c, 2);
        assert_eq!(get(), 8, "2 calls on 16 threads");
        leave(c);
        assert_eq!(get(), 8, "restored while a call still runs");
        leave(c);
        assert_eq!(get(), 16);
        assert_eq!(share(16, 40), 1, "at least one thread");
        set(1);
        enter(c, 4);
        leave(c);
        assert_eq!(get(), 1);
        set(16);
    }
}
