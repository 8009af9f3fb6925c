//! The OpenMP team a BLAS call is made from: the size of the innermost active parallel region
//! of the calling thread, in any OpenMP runtime the process has loaded (GNU `libgomp`, LLVM
//! `libomp`, Intel `libiomp5`, each also under the hashed names pip wheels give them, such as
//! PySCF's `libgomp-a34b3233.so.1.0.0`), and 1 outside every parallel region.
//!
//! A call made from inside a team of T threads already runs beside T - 1 callers, each on a
//! core of its own; a pthreads OpenBLAS splits the call again over its pool of one thread per
//! core (OpenBLAS built for OpenMP runs such a call on the caller's thread alone). So
//! `OZAKI_VENDOR_THREADS=team` runs the vendor at its count divided by the team
//! (`super::vendor_threads`).
//!
//! The runtimes are looked up in the loaded objects (a wheel's runtime is loaded
//! `RTLD_LOCAL`, out of the global scope), each opened with `RTLD_NOLOAD` and its handle kept,
//! so that the entry points found stay valid for the process. The walk is repeated when the
//! loader reports objects added since the last one, checked on a thread's first query and
//! then every [`RECHECK_EVERY`] queries of that thread.

use crate::kept_open::KeptOpen;
use std::cell::Cell;
use std::ffi::CString;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// File-name prefixes of the OpenMP runtimes.
const RUNTIME_PREFIXES: &[&str] = &["libgomp", "libomp", "libiomp"];

/// Runtimes kept (a process with more is not expected; later ones are not consulted).
const MAX_RUNTIMES: usize = 4;

/// A thread's queries between two checks for newly loaded objects.
const RECHECK_EVERY: u32 = 256;

/// `omp_in_parallel` and `omp_get_num_threads` of each runtime found, as addresses (0: none);
/// written under [`SCAN`] only, once each, never cleared.
static IN_PARALLEL: [AtomicUsize; MAX_RUNTIMES] = [const { AtomicUsize::new(0) }; MAX_RUNTIMES];
static NUM_THREADS: [AtomicUsize; MAX_RUNTIMES] = [const { AtomicUsize::new(0) }; MAX_RUNTIMES];

/// The loader's count of objects added when the runtimes were last looked up (`u64::MAX`:
/// never).
static SCANNED_AT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Serialises lookups.
static SCAN: Mutex<()> = Mutex::new(());

thread_local! {
    /// This thread's queries until its next check for newly loaded objects.
    static UNTIL_CHECK: Cell<u32> = const { Cell::new(0) };
}

/// The team size of the calling thread's innermost active OpenMP parallel region, 1 when it
/// is in none (or no OpenMP runtime is loaded).
pub fn size() -> u32 {
    let check = UNTIL_CHECK.with(|c| {
        let left = c.get();
        c.set(if left == 0 { RECHECK_EVERY } else { left - 1 });
        left == 0
    });
    if check {
        let adds = objects_added();
        if SCANNED_AT.load(Ordering::Acquire) != adds {
            scan(adds);
        }
    }
    let mut team = 1;
    for (inp, num) in IN_PARALLEL.iter().zip(&NUM_THREADS) {
        let (inp, num) = (inp.load(Ordering::Acquire), num.load(Ordering::Acquire));
        if inp == 0 || num == 0 {
            break;
        }
        // SAFETY: both addresses were found by dlsym under these names in an OpenMP runtime
        // whose handle is never closed; the OpenMP API declares them `int (void)`, callable
        // from any thread (outside a parallel region they return 0 and 1).
        let (inp, num) = unsafe {
            (
                std::mem::transmute::<usize, extern "C" fn() -> libc::c_int>(inp),
                std::mem::transmute::<usize, extern "C" fn() -> libc::c_int>(num),
            )
        };
        if inp() != 0 {
            team = team.max(num().max(1) as u32);
        }
    }
    team
}

/// The loader's count of objects loaded so far (`dlpi_adds`, grows with every load).
fn objects_added() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // Called by the loader: a panic must not unwind into it (1 ends the walk).
        crate::shield::shielded_or(1, || {
            // SAFETY: the loader passes a valid `info` for the call; `data` is the `u64`
            // below.
            unsafe { *(data as *mut u64) = (*info).dlpi_adds };
            1
        })
    }
    let mut adds = 0u64;
    // SAFETY: `first` matches the callback type and writes only `adds`; it stops the walk at
    // the first object.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut adds).cast()) };
    adds
}

/// Looks the runtimes up among the loaded objects and records those not yet recorded.
fn scan(adds: u64) {
    let _one = SCAN.lock().unwrap_or_else(|p| p.into_inner());
    if SCANNED_AT.load(Ordering::Acquire) == adds {
        return;
    }
    for path in gpu_kernels::loaded_objects::paths() {
        let is_runtime = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| RUNTIME_PREFIXES.iter().any(|p| n.starts_with(p)));
        if is_runtime && let Some((inp, num)) = entry_points(&path) {
            record(inp, num);
        }
    }
    SCANNED_AT.store(adds, Ordering::Release);
}

/// Records one runtime's entry points in the first free slot, once (under [`SCAN`]).
fn record(inp: usize, num: usize) {
    for (i, n) in IN_PARALLEL.iter().zip(&NUM_THREADS) {
        match i.load(Ordering::Acquire) {
            0 => {
                n.store(num, Ordering::Release);
                i.store(inp, Ordering::Release);
                tracing::debug!("OpenMP runtime found: vendor calls from its teams are narrowed");
                return;
            }
            seen if seen == inp => return,
            _ => {}
        }
    }
}

/// `omp_in_parallel` and `omp_get_num_threads` of the loaded runtime at `path`, kept open for
/// the process.
fn entry_points(path: &std::path::Path) -> Option<(usize, usize)> {
    use std::os::unix::ffi::OsStrExt as _;
    let lib = KeptOpen::open(&CString::new(path.as_os_str().as_bytes()).ok()?)?;
    let inp = lib.first_of(&[c"omp_in_parallel"])?;
    let num = lib.first_of(&[c"omp_get_num_threads"])?;
    Some((inp as usize, num as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process without an OpenMP runtime is in no team, however often it asks.
    #[test]
    fn no_runtime_means_no_team() {
        for _ in 0..2 * RECHECK_EVERY {
            assert_eq!(size(), 1);
        }
        assert_ne!(SCANNED_AT.load(Ordering::Acquire), u64::MAX);
    }
}
