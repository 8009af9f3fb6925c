//! The thread count `auto` runs the vendor at for a call it keeps there
//! (`OZAKI_VENDOR_THREADS`): its count divided by the OpenMP team the call is made from
//! (`team`, the default), the vendor's own (`keep`), or its count divided by the calls in
//! flight (`share`).
//!
//! A program that calls its BLAS from every thread of an OpenMP team hands each call to a
//! vendor that, built with pthreads, splits it again over its own pool of one thread per
//! core: T callers on T cores then share T pool threads, and each call waits for the others'
//! parts (a pthreads OpenBLAS hands the parts of concurrent calls to its pool one call at a
//! time). An OpenBLAS built for OpenMP, or a serial one (PySCF's wheel bundles a serial
//! OpenBLAS 0.3.3), runs such calls at one thread by itself.
//!
//! - `team`: a call of at least [`NARROW_MIN_MNK`] made from inside an OpenMP parallel region
//!   of T threads ([`super::openmp_team`]) runs the vendor at its count divided by T, at
//!   least one: what OpenBLAS built for OpenMP does by itself. Calls made outside any
//!   parallel region keep the count. Measured with `scripts/bench-team` (a 2-thread team over
//!   Debian's pthreads OpenBLAS), `auto` ran 0.93-1.30x the program without the shim with it
//!   and 0.96-0.99x keeping the count (BENCHMARKS.md, "OpenMP teams over a pthreads
//!   OpenBLAS").
//! - `share`: a call made while other BLAS calls of the process are in flight runs the vendor
//!   at its count divided by the calls in flight.
//! - With either, a call `auto` keeps on the vendor while the GPU starts in the background
//!   (`super::start`) runs it at one thread fewer than its count: the start's thread (driver,
//!   context, libraries, kernels) keeps a core busy for about a second, and a vendor that
//!   splits a product statically over one thread per core waits for the part that shares
//!   that core. NumPy's 4096² products beside the start took 1.4-1.6x their time alone
//!   (BENCHMARKS.md, "The whole suite at the small-call lane"); one thread fewer costs a
//!   sixteenth.
//!
//! The first narrowed call saves the library's count (`openblas_get_num_threads`) and each
//! one sets the share it is due when it starts (`openblas_set_num_threads`, also under the
//! names of pip's `scipy_openblas` wheels, only when the count changes); the last one to end
//! sets the saved count back. The count is one setting of the whole library, so a call that
//! starts outside the rule while narrowed calls run also gets their share, and a count the
//! program sets while such calls run is replaced by the saved one when they end. The engine
//! prices a narrowed call at that many threads, alone (`Config::shares_vendor_threads`).
//!
//! What it changes: the vendor splits a call differently at another thread count, so C can
//! differ in the last bits (as between two thread settings of the vendor; OpenBLAS 0.3.21 on
//! 2 cores differed in 4 of 6 shapes); the vendor route forced with `OZAKI_ROUTE=vendor` and
//! `OZAKI_VENDOR_THREADS=keep` leave the vendor's setting alone. Vendors without these entry
//! points (MKL, BLIS, the reference BLAS) and OpenBLAS builds other than pthreads ones
//! (`openblas_get_parallel`) are left as they are.

use super::inflight::Flight;
use crate::config::{Config, VendorThreads};
use crate::kept_open::KeptOpen;
use crate::symbols::SymId;
use libc::c_int;
use std::ffi::{CStr, CString};
use std::sync::Mutex;

/// Setters of an OpenBLAS's thread count, most specific first; each is `void name(int)`.
const SETTERS: &[&CStr] = &[
    c"openblas_set_num_threads",
    c"openblas_set_num_threads64_",
    c"scipy_openblas_set_num_threads",
    c"scipy_openblas_set_num_threads64_",
];
/// The matching queries, each `int name(void)`.
const GETTERS: &[&CStr] = &[
    c"openblas_get_num_threads",
    c"openblas_get_num_threads64_",
    c"scipy_openblas_get_num_threads",
    c"scipy_openblas_get_num_threads64_",
];

/// The matching threading-model queries, each `int name(void)`: 0 sequential, 1 pthreads,
/// 2 OpenMP. Only a pthreads build is narrowed: an OpenMP build already runs a call made
/// from inside a parallel region on its caller's thread, and its setter sets the calling
/// thread's OpenMP team size (`omp_set_num_threads`), which a restore from another thread
/// would not undo.
const MODELS: &[&CStr] = &[
    c"openblas_get_parallel",
    c"openblas_get_parallel64_",
    c"scipy_openblas_get_parallel",
    c"scipy_openblas_get_parallel64_",
];

/// [`MODELS`]' answer for a pthreads build.
const PTHREADS: c_int = 1;

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

/// Calls (m n k) below this size are never narrowed: a vendor runs them on one thread
/// anyway (OpenBLAS's own threshold for threading a gemm is 4 * 65536), and setting the count
/// would cost more than they take.
pub const NARROW_MIN_MNK: u64 = 1 << 16;

/// A narrowed library: its setter's address, the calls narrowing it, the count to restore
/// and the count set now.
struct Narrowed {
    key: usize,
    calls: usize,
    saved: c_int,
    now: c_int,
}

static NARROWED: Mutex<Vec<Narrowed>> = Mutex::new(Vec::new());

/// The OpenMP team a call of `mnk` is priced and narrowed for under `config`: its team's
/// size with `OZAKI_VENDOR_THREADS=team` (and `auto`) for a call of at least
/// [`NARROW_MIN_MNK`], else 1.
pub fn team(config: &Config, mnk: u64) -> u32 {
    if config.vendor_threads_rule() == VendorThreads::Team && mnk >= NARROW_MIN_MNK {
        super::openmp_team::size()
    } else {
        1
    }
}

/// A call that runs its vendor at a share of its threads until it is dropped.
pub struct Narrow {
    control: Control,
}

impl Narrow {
    /// Sets the vendor library of `id` to the share of its threads a call that `auto` keeps
    /// there is due under `config` (its `flight` holds the OpenMP team it was priced for; a
    /// call `beside_start`, made while the GPU starts in the background, leaves the start's
    /// thread one of them); `None` when the rule leaves the call the whole count or the
    /// library has no thread count to set.
    pub fn for_call(
        id: SymId,
        config: &Config,
        flight: Option<&Flight>,
        beside_start: bool,
    ) -> Option<Narrow> {
        let divisor = match config.vendor_threads_rule() {
            VendorThreads::Keep => return None,
            VendorThreads::Share => crate::lazy::calls_in_flight(),
            VendorThreads::Team => flight.map_or(1, Flight::team),
        };
        let due = Due {
            divisor,
            spare: beside_start,
        };
        if divisor < 2 && !beside_start {
            return None;
        }
        let control = *CONTROLS[id.index()].get_or_init(|| find(id)).as_ref()?;
        enter(control, due);
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

/// The threads a narrowed call is due: the count shared `divisor` ways, and one fewer than
/// the whole count when it leaves a core to the GPU's background start (`spare`).
#[derive(Clone, Copy)]
struct Due {
    divisor: u32,
    spare: bool,
}

impl Due {
    /// Of `saved` threads: at least one.
    fn of(self, saved: c_int) -> c_int {
        let shared = saved / self.divisor.max(1) as c_int;
        let spared = if self.spare {
            shared.min(saved - 1)
        } else {
            shared
        };
        spared.max(1)
    }
}

fn enter(c: Control, due: Due) {
    let mut all = NARROWED.lock().unwrap_or_else(|p| p.into_inner());
    let i = match all.iter().position(|e| e.key == key(c)) {
        Some(i) => {
            all[i].calls += 1;
            i
        }
        None => {
            let saved = (c.get)();
            all.push(Narrowed {
                key: key(c),
                calls: 1,
                saved,
                now: saved,
            });
            all.len() - 1
        }
    };
    let e = &mut all[i];
    let want = due.of(e.saved);
    if e.saved > 1 && want != e.now {
        (c.set)(want);
        e.now = want;
    }
}

fn leave(c: Control) {
    let mut all = NARROWED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(i) = all.iter().position(|e| e.key == key(c)) else {
        return;
    };
    all[i].calls -= 1;
    if all[i].calls == 0 {
        let e = all.swap_remove(i);
        if e.saved > 1 && e.now != e.saved {
            (c.set)(e.saved);
        }
    }
}

/// The thread-count entry points of the library that defines the vendor's `id`: looked up
/// in that library alone (a handle to it, already loaded), so that a call never sets another
/// library's count.
fn find(id: SymId) -> Option<Control> {
    let vendor = crate::forward::vendor(id)?;
    let lib = KeptOpen::open(&CString::new(vendor.library.as_str()).ok()?)?;
    let (set, get, model) = (
        lib.first_of(SETTERS)?,
        lib.first_of(GETTERS)?,
        lib.first_of(MODELS)?,
    );
    // SAFETY: OpenBLAS documents these names as `void (int)`, `int (void)` and `int (void)`,
    // callable from any thread at any time.
    let (control, model) = unsafe {
        (
            Control {
                set: std::mem::transmute::<*mut libc::c_void, extern "C" fn(c_int)>(set),
                get: std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> c_int>(get),
            },
            std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> c_int>(model),
        )
    };
    if model() != PTHREADS {
        tracing::debug!(
            "vendor threads: {} is not a pthreads build; its count is left alone",
            vendor.library
        );
        return None;
    }
    tracing::debug!(
        "vendor threads: {} runs narrowed calls at their share",
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
        let shared = |divisor| Due {
            divisor,
            spare: false,
        };
        enter(c, shared(16));
        assert_eq!(get(), 1, "16 calls on 16 threads");
        enter(c, shared(2));
        assert_eq!(get(), 8, "2 calls on 16 threads");
        leave(c);
        assert_eq!(get(), 8, "restored while a call still runs");
        leave(c);
        assert_eq!(get(), 16);
        assert_eq!(shared(40).of(16), 1, "at least one thread");
        set(1);
        enter(c, shared(4));
        leave(c);
        assert_eq!(get(), 1);
        set(16);
    }

    /// A call beside the GPU's start leaves it one thread of the whole count, and of a
    /// team's share only what the share leaves; never fewer than one.
    #[test]
    fn a_call_beside_the_start_leaves_it_a_thread() {
        let beside = |divisor| Due {
            divisor,
            spare: true,
        };
        assert_eq!(beside(1).of(16), 15);
        assert_eq!(beside(4).of(16), 4, "a team's share already leaves cores");
        assert_eq!(beside(1).of(2), 1);
        assert_eq!(beside(1).of(1), 1);
    }
}
