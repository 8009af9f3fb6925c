//! The one reader of the process environment, and the table of every `OZAKI_*` variable.
//!
//! Every crate of the workspace reads environment variables through [`var_os`] or [`var`],
//! so [`VARIABLES`] is the whole list of `OZAKI_*` names the code reacts to; a test greps the
//! source tree for `OZAKI_*` literals and fails on a name missing here, and on a direct
//! `std::env::var` call outside this module. Variables of other software read to follow its
//! conventions (`OPENBLAS_NUM_THREADS`, MPI's local rank, `XDG_CACHE_HOME`, ...) go through
//! the same functions but are not listed.
//!
//! Validation stays with the reader that knows the meaning: the shim's `config` module
//! (`RawConfig` then `Config`) for its settings, `gpu_kernels` for device selection, the
//! engine's `profile` for `OZAKI_PROFILE`.

use std::ffi::OsString;

/// One `OZAKI_*` variable: its name, what it does and what applies when it is unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variable {
    /// The variable's name.
    pub name: &'static str,
    /// What it sets.
    pub meaning: &'static str,
    /// What applies when it is unset or empty.
    pub default: &'static str,
}

/// `OZAKI_TRACE`: the trace file template.
pub const TRACE: &str = "OZAKI_TRACE";
/// `OZAKI_TRACE_ARGV`: whether the trace header records the command line.
pub const TRACE_ARGV: &str = "OZAKI_TRACE_ARGV";
/// `OZAKI_ROUTE`: the requested route.
pub const ROUTE: &str = "OZAKI_ROUTE";
/// `OZAKI_MODULI`: a forced moduli count.
pub const MODULI: &str = "OZAKI_MODULI";
/// `OZAKI_THREADS`: worker threads of the CPU emulation.
pub const THREADS: &str = "OZAKI_THREADS";
/// `OZAKI_SCALING`: the scaling bound of the emulated routes.
pub const SCALING: &str = "OZAKI_SCALING";
/// `OZAKI_ACCURACY`: the accuracy rule's mode.
pub const ACCURACY: &str = "OZAKI_ACCURACY";
/// `OZAKI_VENDOR_BLAS`: the BLAS to forward to.
pub const VENDOR_BLAS: &str = "OZAKI_VENDOR_BLAS";
/// `OZAKI_VENDOR_SPIN`: how long the vendor's idle threads spin after a call.
pub const VENDOR_SPIN: &str = "OZAKI_VENDOR_SPIN";
/// `OZAKI_VENDOR_THREADS`: whether `auto` runs vendor calls made from inside an OpenMP team
/// or beside other BLAS calls at their share of the vendor's threads.
pub const VENDOR_THREADS: &str = "OZAKI_VENDOR_THREADS";
/// `OZAKI_LOG`: the diagnostics filter.
pub const LOG: &str = "OZAKI_LOG";
/// `OZAKI_SPLIT`: whether host dgemms are split over GPU slots.
pub const SPLIT: &str = "OZAKI_SPLIT";
/// `OZAKI_GPU_START`: how `auto` starts the GPU.
pub const GPU_START: &str = "OZAKI_GPU_START";
/// `OZAKI_EXPLORE`: whether `auto` explores the runner-up route.
pub const EXPLORE: &str = "OZAKI_EXPLORE";
/// `OZAKI_CUBLAS`: whether the cuBLAS hook traces and routes the program's cuBLAS calls.
pub const CUBLAS: &str = "OZAKI_CUBLAS";
/// `OZAKI_CUBLAS_AUDIT`: whether `ozaki run` and `ozaki env` also load the audit library, so
/// that cuBLAS entry points a program finds with `dlsym` reach the hook.
pub const CUBLAS_AUDIT: &str = "OZAKI_CUBLAS_AUDIT";
/// `OZAKI_AB`: the A/B comparison against the vendor.
pub const AB: &str = "OZAKI_AB";
/// `OZAKI_AB_KEEP`: which result an A/B-compared call returns.
pub const AB_KEEP: &str = "OZAKI_AB_KEEP";
/// `OZAKI_AB_MAX_MB`: memory for the A/B comparison's private copies.
pub const AB_MAX_MB: &str = "OZAKI_AB_MAX_MB";
/// `OZAKI_HOST_REGISTER`: page-locking the caller's operands for large host-resident calls.
pub const HOST_REGISTER: &str = "OZAKI_HOST_REGISTER";
/// `OZAKI_PROFILE`: the machine profile.
pub const PROFILE: &str = "OZAKI_PROFILE";
/// `OZAKI_GPU`: one device ordinal for the process.
pub const GPU: &str = "OZAKI_GPU";
/// `OZAKI_GPU_SYNC`: how a thread waiting for the GPU waits (a context the shim creates).
pub const GPU_SYNC: &str = "OZAKI_GPU_SYNC";
/// `OZAKI_GPU_NAME`: the GPU name `ozaki explain` looks a cached profile up by.
pub const GPU_NAME: &str = "OZAKI_GPU_NAME";
/// `OZAKI_DEVICES`: the host's GPUs for ozaki.
pub const DEVICES: &str = "OZAKI_DEVICES";
/// `OZAKI_CUDA_LIB_DIRS`: directories searched first for the CUDA libraries.
pub const CUDA_LIB_DIRS: &str = "OZAKI_CUDA_LIB_DIRS";

/// Every `OZAKI_*` variable the code reads.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: TRACE,
        meaning: "write a JSON Lines trace; `%p` pid, `%h` host name, `%r` MPI rank, `%%` a `%`",
        default: "no trace",
    },
    Variable {
        name: TRACE_ARGV,
        meaning: "`0`/`false`/`no`/`off` leave the command line out of the trace header",
        default: "argv recorded",
    },
    Variable {
        name: ROUTE,
        meaning: "`auto` or a route: `vendor`, `builtin`, `cpu-ozaki`, `gpu-native`, `gpu-ozaki`",
        default: "auto",
    },
    Variable {
        name: MODULI,
        meaning: "forced number of moduli for the emulated routes, 2 to 20",
        default: "the route's choice",
    },
    Variable {
        name: THREADS,
        meaning: "worker threads of `cpu-ozaki`",
        default: "the vendor BLAS's own thread count, else every core",
    },
    Variable {
        name: SCALING,
        meaning: "`fast`, `norm` or `accurate`: the scaling bound of the emulated routes",
        default: "norm",
    },
    Variable {
        name: ACCURACY,
        meaning: "`default`, `normwise` or `guaranteed`: the accuracy rule of the emulated routes",
        default: "default",
    },
    Variable {
        name: VENDOR_BLAS,
        meaning: "the BLAS library to forward to, before any other lookup",
        default: "found automatically",
    },
    Variable {
        name: VENDOR_SPIN,
        meaning: "how long OpenBLAS's idle threads spin after a call: `short` (2^22 cycles, \
                  1-4 ms), `keep` (the vendor's own, about 0.1 s) or log2 of the cycles, 4-30; \
                  sets `OPENBLAS_THREAD_TIMEOUT` for pools loaded after the shim unless the \
                  user set it",
        default: "short",
    },
    Variable {
        name: VENDOR_THREADS,
        meaning: "`team`: with `auto`, calls kept on an OpenBLAS that are made from inside \
                  an OpenMP parallel region run that OpenBLAS at its thread count divided by \
                  the region's team (at least one); `share`: such calls made while other BLAS \
                  calls of the process are in flight run it at its count divided by the calls \
                  in flight; with either, the last narrowed call to end sets the count back; \
                  `keep`: the vendor's own count",
        default: "team",
    },
    Variable {
        name: LOG,
        meaning: "`tracing` filter for diagnostics on stderr",
        default: "silent",
    },
    Variable {
        name: SPLIT,
        meaning: "`0` never, `1` always split a host dgemm's C over the process's GPU slots",
        default: "the engine decides",
    },
    Variable {
        name: GPU_START,
        meaning: "`background` or `blocking`: how `auto` starts the GPU",
        default: "background",
    },
    Variable {
        name: EXPLORE,
        meaning: "`0` stops `auto` from running the runner-up route on close calls",
        default: "1",
    },
    Variable {
        name: HOST_REGISTER,
        meaning: "`auto`, `0` or `1`: page-lock the caller's A and B of large host-resident gemms for the call instead of staging them",
        default: "auto (when the profile measured it faster)",
    },
    Variable {
        name: CUBLAS,
        meaning: "`0` hands every cuBLAS call of the program to cuBLAS untouched and unrecorded",
        default: "1",
    },
    Variable {
        name: CUBLAS_AUDIT,
        meaning: "`1`: `ozaki run` and `ozaki env` also set `LD_AUDIT` to `libozaki_audit.so` beside the shim, so that cuBLAS entry points a program finds with `dlsym` (JAX) reach the hook",
        default: "0",
    },
    Variable {
        name: AB,
        meaning: "`1` or a fraction: compare calls against the vendor BLAS",
        default: "off",
    },
    Variable {
        name: AB_KEEP,
        meaning: "`route` or `vendor`: the result an A/B-compared call returns",
        default: "route",
    },
    Variable {
        name: AB_MAX_MB,
        meaning: "MiB for the A/B comparison's private copies of C, over all threads",
        default: "512",
    },
    Variable {
        name: PROFILE,
        meaning: "machine profile for `auto` (written by `ozaki calibrate`)",
        default: "the cached profile of the detected GPU, else a built-in one, else CPU-only",
    },
    Variable {
        name: GPU,
        meaning: "the one device ordinal this process uses",
        default: "chosen by local rank from `OZAKI_DEVICES`",
    },
    Variable {
        name: GPU_SYNC,
        meaning: "`blocking` or `spin`: how a thread waiting for the GPU waits, for a primary context the shim creates (the program's own context keeps its setting)",
        default: "blocking",
    },
    Variable {
        name: GPU_NAME,
        meaning: "GPU name `ozaki explain` selects the cached profile by",
        default: "the detected GPU",
    },
    Variable {
        name: DEVICES,
        meaning: "`0,1,...`: the host's GPUs for ozaki, shared out by MPI local rank",
        default: "all visible GPUs",
    },
    Variable {
        name: CUDA_LIB_DIRS,
        meaning: "directories with the CUDA 13 libraries to load before the loader's search",
        default: "`nvidia/*/lib` of the wheel's site-packages and of the program's, then a system CUDA",
    },
];

/// The table row of `name`, if it is an `OZAKI_*` variable the code reads.
pub fn variable(name: &str) -> Option<&'static Variable> {
    VARIABLES.iter().find(|v| v.name == name)
}

/// The value of `name` in the process environment, `None` when unset.
///
/// # Panics
/// - in debug builds, when `name` starts with `OZAKI_` and is not in [`VARIABLES`] (a
///   variable read without its table row).
pub fn var_os(name: &str) -> Option<OsString> {
    debug_assert!(
        !name.starts_with("OZAKI_") || variable(name).is_some(),
        "{name} is read but not listed in ozaki_core::env::VARIABLES"
    );
    std::env::var_os(name)
}

/// [`var_os`] as UTF-8: `None` when unset or not valid UTF-8.
///
/// # Panics
/// - as [`var_os`].
pub fn var(name: &str) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

/// Every variable of the process environment, for commands that pass a selection of it on
/// to a child process or another launcher.
pub fn vars_os() -> std::env::VarsOs {
    std::env::vars_os()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixed() {
        let mut names: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
        assert!(names.iter().all(|n| n.starts_with("OZAKI_")));
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a variable is listed twice");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not listed")]
    fn an_unlisted_ozaki_name_is_refused() {
        let _ = var_os("OZAKI_NOT_A_SETTING");
    }
}
