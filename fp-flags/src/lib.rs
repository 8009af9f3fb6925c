//! Keeps the caller's floating-point exception flags as they were across a computation the
//! caller did not ask for, so that after a BLAS call the flags are the ones the vendor BLAS
//! would leave.
//!
//! Programs read these flags: NumPy checks them after `a @ b` and warns ("invalid value
//! encountered in matmul") or, under `np.errstate(...='raise')`, raises FloatingPointError.
//! The emulated routes do internal work whose flags mean nothing for the caller:
//! - `cpu-ozaki` scales lines by powers of two and squares scaled entries for line norms,
//!   which underflows (or overflows) for entries far below (above) their line's maximum
//!   although the product itself is representable;
//! - cuBLAS/cuBLASLt host code (heuristics, first-call setup) and the GPU route's planning
//!   can raise FE_INVALID or FE_DIVBYZERO on the CPU.
//!
//! Each route holds a [`KeepFpFlags`] over that internal work only and does the final
//! `C = alpha ĉ + beta C` outside it, so the flags that arithmetic raises (an overflowing
//! alpha, say) reach the caller as the vendor's would. The GPU routes refuse NaN/Inf inputs
//! and results that could overflow, so no flag their device work could raise is meaningful.
//!
//! `ozaki-core` forbids `unsafe` and has no libc binding, and `std` has no portable access
//! to the floating-point environment, hence this crate: two glibc calls behind one safe type.

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

/// The exception flags raised on this thread now, in this platform's encoding (always 0
/// where the platform is not supported).
pub fn raised() -> u16 {
    imp::save()
}

/// Clears every exception flag of this thread.
pub fn clear() {
    imp::restore(0)
}

/// FE_INEXACT in [`raised`]'s encoding: nearly every computation raises it, and neither the
/// vendor BLAS nor NumPy give it meaning.
pub const INEXACT: u16 = 0x20;

/// FE_OVERFLOW in [`raised`]'s encoding.
pub const OVERFLOW: u16 = 0x08;

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
