//! How many worker threads the CPU emulation (`cpu-ozaki`) uses.
//!
//! The program already told its BLAS how many threads to use, and the emulation should use
//! the same number: MPI ranks that run one BLAS thread each would otherwise oversubscribe
//! the node with a full-width pool per rank. In order:
//!
//! 1. `OZAKI_THREADS=N` (`config`);
//! 2. the vendor's own answer, asked at each call, because threadpoolctl and the program
//!    change it at run time (`openblas_set_num_threads`, `omp_set_num_threads`): OpenBLAS's
//!    `openblas_get_num_threads` (also under the names of pip's `scipy_openblas` wheels),
//!    MKL's `mkl_get_max_threads`, then OpenMP's `omp_get_max_threads` when the process has
//!    an OpenMP runtime;
//! 3. `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS`, `OMP_NUM_THREADS` (the first number of a
//!    nested list such as `4,2`);
//! 4. every available core.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Thread-count queries of BLAS libraries and OpenMP, most specific first; each is
/// `int name(void)`.
const QUERIES: &[&str] = &[
    "openblas_get_num_threads",
    "openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads",
    "scipy_openblas_get_num_threads64_",
    "mkl_get_max_threads",
    "omp_get_max_threads",
];

/// Environment variables that set a BLAS's thread count, in the order they are consulted.
const VARIABLES: &[&str] = &["OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"];

/// The address of the first query found: 0 not looked up yet, 1 none found. A plain atomic,
/// not a lock, so that a `fork` in the middle of the lookup cannot leave the child waiting
/// (two threads that race both find the same address).
static QUERY: AtomicUsize = AtomicUsize::new(0);

/// Worker threads for one emulated call (`forced`: `OZAKI_THREADS`).
pub fn count(forced: Option<usize>) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    pick(forced, vendor_threads(), ozaki_core::env::var, cores)
}

/// The rule of the module docs, on given answers.
fn pick(
    forced: Option<usize>,
    vendor: Option<i64>,
    env: impl Fn(&str) -> Option<String>,
    cores: usize,
) -> usize {
    forced
        .or_else(|| {
            vendor
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n > 0)
        })
        .or_else(|| {
            VARIABLES
                .iter()
                .find_map(|v| env(v).as_deref().and_then(first_count))
        })
        .unwrap_or(cores)
        .max(1)
}

/// `4` from `4` or `4,2` (OpenMP's nested form); `None` for anything that is not a count.
fn first_count(value: &str) -> Option<usize> {
    value
        .split(',')
        .next()?
        .trim()
        .parse()
        .ok()
        .filter(|&n| n > 0)
}

/// The vendor's current thread count, if the process has a library that says.
fn vendor_threads() -> Option<i64> {
    let addr = match QUERY.load(Ordering::Acquire) {
        0 => {
            let found = QUERIES
                .iter()
                .find_map(|name| crate::forward::global_symbol(name))
                .map_or(1, |p| p as usize);
            QUERY.store(found, Ordering::Release);
            found
        }
        a => a,
    };
    if addr == 1 {
        return None;
    }
    // SAFETY: `addr` is the address of one of QUERIES, each documented as `int name(void)`
    // and callable from any thread at any time.
    let query: extern "C" fn() -> libc::c_int = unsafe { std::mem::transmute(addr) };
    Some(i64::from(query()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn ozaki_threads_then_the_vendor_then_the_variables_then_every_core() {
        let none: &[(&str, &str)] = &[];
        assert_eq!(pick(Some(3), Some(8), env(none), 16), 3);
        assert_eq!(pick(None, Some(1), env(&[("OMP_NUM_THREADS", "8")]), 16), 1);
        assert_eq!(pick(None, Some(0), env(&[("OMP_NUM_THREADS", "2")]), 16), 2);
        assert_eq!(
            pick(
                None,
                None,
                env(&[("OPENBLAS_NUM_THREADS", "1"), ("OMP_NUM_THREADS", "8")]),
                16
            ),
            1
        );
        assert_eq!(pick(None, None, env(&[("OMP_NUM_THREADS", "4,2")]), 16), 4);
        assert_eq!(
            pick(None, None, env(&[("OMP_NUM_THREADS", "lots")]), 16),
            16
        );
        assert_eq!(pick(None, None, env(none), 16), 16);
        assert_eq!(pick(None, Some(-1), env(none), 0), 1);
    }
}
