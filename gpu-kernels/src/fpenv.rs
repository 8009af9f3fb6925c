//! Keeps the caller's floating-point exception flags as they were across a GPU call.
//!
//! cuBLAS/cuBLASLt host code (heuristics, first-call setup) and our own planning can raise
//! FE_INVALID or FE_DIVBYZERO on the CPU while computing nothing the caller asked for; NumPy
//! reads those flags after `a @ b` and warns "invalid value encountered in matmul" (seen on the
//! H200 with `OZAKI_ROUTE=gpu-ozaki`, BENCHMARKS.md). The GPU routes refuse NaN/Inf inputs and
//! results that could overflow, so no flag they could raise carries meaning for the caller.

/// Saves the flags on creation and restores them on drop.
pub struct KeepFpFlags(#[allow(dead_code)] u16);

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod imp {
    // glibc: fexcept_t is unsigned short on x86-64; FE_ALL_EXCEPT = 0x3d.
    unsafe extern "C" {
        fn fegetexceptflag(flagp: *mut u16, excepts: i32) -> i32;
        fn fesetexceptflag(flagp: *const u16, excepts: i32) -> i32;
    }
    const FE_ALL_EXCEPT: i32 = 0x3d;

    pub fn save() -> u16 {
        let mut f = 0u16;
        // SAFETY: out-parameter of the documented type.
        unsafe { fegetexceptflag(&mut f, FE_ALL_EXCEPT) };
        f
    }

    pub fn restore(f: u16) {
        // SAFETY: f came from fegetexceptflag with the same mask.
        unsafe { fesetexceptflag(&f, FE_ALL_EXCEPT) };
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod imp {
    pub fn save() -> u16 {
        0
    }
    pub fn restore(_: u16) {}
}

impl KeepFpFlags {
    /// Remembers the current flags.
    pub fn new() -> KeepFpFlags {
        KeepFpFlags(imp::save())
    }
}

impl Default for KeepFpFlags {
    fn default() -> Self {
        KeepFpFlags::new()
    }
}

impl Drop for KeepFpFlags {
    fn drop(&mut self) {
        imp::restore(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::KeepFpFlags;

    #[test]
    fn flags_raised_inside_are_dropped() {
        let before = super::imp::save();
        {
            let _keep = KeepFpFlags::new();
            let zero = std::hint::black_box(0.0f64);
            std::hint::black_box(zero / zero); // raises FE_INVALID
        }
        assert_eq!(super::imp::save(), before);
    }
}
