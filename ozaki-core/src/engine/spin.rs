//! How long the vendor's idle threads spin after a call: the setting the shim applies to
//! OpenBLAS (`OZAKI_VENDOR_SPIN`), and what it bounds in the engine's wake ([`super::wake`]).
//!
//! OpenBLAS's pthreads pool busy-waits `2^OPENBLAS_THREAD_TIMEOUT` TSC cycles for new work
//! after each call before its threads sleep (2^28 by default: about 0.1 s). That window is
//! the wake: GPU staging copies made in it run several times slower, and so does the
//! program's own code when it brings threads of its own. Measured on a 16-core H100 host
//! (BENCHMARKS.md, "The vendor's spinning pool"): SciPy's `eigh` of a 192 x 192 matrix, on
//! SciPy's own OpenBLAS pool, took 24x its quiet time right after a NumPy product, 12x
//! 60 ms after and 5x 100 ms after; with the timeout at 2^4 cycles the wake was gone. With
//! it at 2^22 cycles (1-4 ms), SciPy's LOBPCG ran 1.12-1.17x faster without the shim.
//! The price: a pool idle for longer than its spin sleeps, and its next call wakes it.
//!
//! The shim therefore sets `OPENBLAS_THREAD_TIMEOUT` to [`SHORT_LOG2`] for the OpenBLAS
//! pools the process loads after it ([`timeout_to_set`]): calls that follow each other
//! within a millisecond or two still find their threads awake; a pool left idle longer
//! sleeps and gives the cores back. A value the user set is kept, and `OZAKI_VENDOR_SPIN=keep`
//! leaves the vendor's own default. OpenBLAS reads the variable once, when it initialises,
//! so the setting reaches only pools loaded after it is made.

use super::wake::VendorWake;

/// The environment variable OpenBLAS reads its spin timeout from (log2 of TSC cycles).
pub const OPENBLAS_TIMEOUT_VAR: &str = "OPENBLAS_THREAD_TIMEOUT";

/// The timeout the shim sets by default: 2^22 TSC cycles, 1-4 ms on a 1-4 GHz clock.
pub const SHORT_LOG2: u32 = 22;

/// The range OpenBLAS clamps the timeout to.
pub const OPENBLAS_RANGE: std::ops::RangeInclusive<u32> = 4..=30;

/// The lowest TSC rate assumed when a timeout in cycles is turned into seconds.
const MIN_TSC_HZ: f64 = 1e9;

/// What `OZAKI_VENDOR_SPIN` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinSetting {
    /// Spin [`SHORT_LOG2`] (the default).
    Short,
    /// Leave the vendor's spin as it is.
    Keep,
    /// Spin 2^n cycles (n in [`OPENBLAS_RANGE`]).
    Log2(u32),
}

impl SpinSetting {
    /// Parses `OZAKI_VENDOR_SPIN`: unset or empty is [`SpinSetting::Short`]; `short`,
    /// `keep`, or a whole number in [`OPENBLAS_RANGE`].
    pub fn parse(value: Option<&str>) -> Result<SpinSetting, String> {
        match value.map(str::trim) {
            None | Some("") | Some("short") => Ok(SpinSetting::Short),
            Some("keep") => Ok(SpinSetting::Keep),
            Some(v) => match v.parse::<u32>() {
                Ok(n) if OPENBLAS_RANGE.contains(&n) => Ok(SpinSetting::Log2(n)),
                _ => Err(format!(
                    "OZAKI_VENDOR_SPIN={v:?}: expected `short`, `keep` or a number from {} to {} \
                     (log2 of the cycles OpenBLAS's idle threads spin)",
                    OPENBLAS_RANGE.start(),
                    OPENBLAS_RANGE.end()
                )),
            },
        }
    }
}

/// The value to give `OPENBLAS_THREAD_TIMEOUT` under `setting` when the environment holds
/// `existing` for it: none when the user set one (theirs is kept) or asked to keep the
/// vendor's spin.
pub fn timeout_to_set(setting: SpinSetting, existing: Option<&str>) -> Option<u32> {
    if existing.is_some_and(|v| !v.trim().is_empty()) {
        return None;
    }
    match setting {
        SpinSetting::Short => Some(SHORT_LOG2),
        SpinSetting::Log2(n) => Some(n),
        SpinSetting::Keep => None,
    }
}

/// [`timeout_to_set`] for this process's environment (`OZAKI_VENDOR_SPIN`,
/// `OPENBLAS_THREAD_TIMEOUT`): `Ok(None)` when nothing is to be set, the setting's error when
/// `OZAKI_VENDOR_SPIN` is bad. The shim's constructor and `ozaki run` / `ozaki env` all ask
/// this.
pub fn timeout_to_set_from_env() -> Result<Option<u32>, String> {
    let setting = SpinSetting::parse(crate::env::var(crate::env::VENDOR_SPIN).as_deref())?;
    Ok(timeout_to_set(
        setting,
        crate::env::var(OPENBLAS_TIMEOUT_VAR).as_deref(),
    ))
}

/// [`timeout_of`] this process's `OPENBLAS_THREAD_TIMEOUT`.
pub fn timeout_in_env() -> Option<u32> {
    timeout_of(crate::env::var(OPENBLAS_TIMEOUT_VAR).as_deref())
}

/// The timeout an `OPENBLAS_THREAD_TIMEOUT` value gives OpenBLAS (log2 of cycles, clamped to
/// [`OPENBLAS_RANGE`] as OpenBLAS does); `None` for no value or one OpenBLAS ignores (it
/// takes only a positive number).
pub fn timeout_of(value: Option<&str>) -> Option<u32> {
    let n = value?.trim().parse::<u32>().ok().filter(|&n| n > 0)?;
    Some(n.clamp(*OPENBLAS_RANGE.start(), *OPENBLAS_RANGE.end()))
}

/// Whether the library file `path` is an OpenBLAS build (Debian's `openblas-pthread/`,
/// the NumPy and SciPy wheels' `libscipy_openblas*`, `libopenblas*`): the vendors whose
/// spin `OPENBLAS_THREAD_TIMEOUT` sets. Another vendor's pool (MKL's Intel OpenMP, say)
/// keeps the wake the profile measured.
pub fn is_openblas(path: &str) -> bool {
    path.to_ascii_lowercase().contains("openblas")
}

/// The longest an idle OpenBLAS thread spins with the timeout at 2^`log2` cycles, in
/// seconds, on a time-stamp counter of at least 1 GHz.
pub fn spin_bound_s(log2: u32) -> f64 {
    (1u64 << log2.min(*OPENBLAS_RANGE.end())) as f64 / MIN_TSC_HZ
}

/// `wake` as the vendor leaves it when its idle threads spin at most 2^`timeout_log2`
/// cycles: its window no longer than the spin ([`spin_bound_s`]); unchanged without a known
/// timeout.
pub fn bounded(wake: Option<VendorWake>, timeout_log2: Option<u32>) -> Option<VendorWake> {
    let (mut w, n) = match (wake, timeout_log2) {
        (Some(w), Some(n)) => (w, n),
        (w, _) => return w,
    };
    w.window_s = w.window_s.min(spin_bound_s(n));
    Some(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_parses_and_rejects_what_openblas_would_not_take() {
        assert_eq!(SpinSetting::parse(None), Ok(SpinSetting::Short));
        assert_eq!(SpinSetting::parse(Some(" ")), Ok(SpinSetting::Short));
        assert_eq!(SpinSetting::parse(Some("short")), Ok(SpinSetting::Short));
        assert_eq!(SpinSetting::parse(Some("keep")), Ok(SpinSetting::Keep));
        assert_eq!(SpinSetting::parse(Some("20")), Ok(SpinSetting::Log2(20)));
        for bad in ["3", "31", "-1", "long", "2.5"] {
            let e = SpinSetting::parse(Some(bad)).unwrap_err();
            assert!(e.contains("OZAKI_VENDOR_SPIN") && e.contains("keep"), "{e}");
        }
    }

    /// The user's own timeout is never overwritten; `keep` sets nothing.
    #[test]
    fn a_timeout_the_user_set_wins() {
        assert_eq!(timeout_to_set(SpinSetting::Short, None), Some(SHORT_LOG2));
        assert_eq!(
            timeout_to_set(SpinSetting::Short, Some("")),
            Some(SHORT_LOG2)
        );
        assert_eq!(timeout_to_set(SpinSetting::Log2(18), None), Some(18));
        assert_eq!(timeout_to_set(SpinSetting::Short, Some("28")), None);
        assert_eq!(timeout_to_set(SpinSetting::Log2(18), Some("26")), None);
        assert_eq!(timeout_to_set(SpinSetting::Keep, None), None);
    }

    #[test]
    fn openblas_builds_are_told_apart_from_other_vendors() {
        for p in [
            "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
            "/venv/numpy.libs/libscipy_openblas64_-61654e39.so",
            "/opt/conda/lib/libopenblasp-r0.3.21.so",
        ] {
            assert!(is_openblas(p), "{p}");
        }
        for p in [
            "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3",
            "/opt/intel/libmkl_rt.so.2",
        ] {
            assert!(!is_openblas(p), "{p}");
        }
    }

    #[test]
    fn a_timeout_value_is_read_as_openblas_reads_it() {
        assert_eq!(timeout_of(Some("22")), Some(22));
        assert_eq!(timeout_of(Some("2")), Some(4));
        assert_eq!(timeout_of(Some("40")), Some(30));
        assert_eq!(timeout_of(Some("0")), None);
        assert_eq!(timeout_of(Some("x")), None);
        assert_eq!(timeout_of(None), None);
    }

    /// A short spin shortens the wake's window to the spin; the copies' slowdown inside it is
    /// what was measured; without a known timeout the measured wake stands.
    #[test]
    fn a_short_spin_bounds_the_wakes_window() {
        let w = VendorWake {
            window_s: 0.1,
            copy_slowdown: 3.0,
        };
        let b = bounded(Some(w), Some(SHORT_LOG2)).unwrap();
        assert!((b.window_s - 4.194304e-3).abs() < 1e-12, "{b:?}");
        assert_eq!(b.copy_slowdown, 3.0);
        assert!(!b.covers(0.005) && b.covers(0.001));
        assert_eq!(
            bounded(Some(w), Some(30)),
            Some(w),
            "a spin longer than the wake"
        );
        assert_eq!(bounded(Some(w), None), Some(w));
        assert_eq!(bounded(None, Some(SHORT_LOG2)), None);
    }
}
