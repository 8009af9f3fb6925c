//! The kernels an OpenBLAS vendor runs against the CPU it runs on.
//!
//! A DYNAMIC_ARCH OpenBLAS picks its kernels when it loads, from the CPU's identity; a build
//! older than the CPU does not know it and falls back to an old core. PySCF's wheel bundles
//! OpenBLAS 0.3.3, which picked `Prescott` (SSE3) on an H100 host's Xeon with AVX-512 and
//! `Barcelona` on an AMD EPYC, where its own `Haswell` kernels ran 1953 x 122 x 1953 2.0-2.4x
//! faster (BENCHMARKS.md, "PySCF's bundled OpenBLAS and the CPU core it picks"). The trace
//! records the core each vendor names ([`crate::trace::Header::vendor_core`]) and the CPU's
//! widest vector instructions ([`cpu_simd`]), so that `ozaki summary` can say when the two
//! are far apart ([`behind_the_cpu`]).

/// The widest vector instructions this CPU and its operating system support: `avx512f`,
/// `avx2` (with FMA), `avx` or `sse2`.
pub fn cpu_simd() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return "avx512f";
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return "avx2";
        }
        if std::arch::is_x86_feature_detected!("avx") {
            return "avx";
        }
    }
    "sse2"
}

/// OpenBLAS's x86 cores whose kernels use no AVX (`openblas_get_corename`, lower case).
const SSE_ONLY: &[&str] = &[
    "katmai",
    "coppermine",
    "northwood",
    "prescott",
    "banias",
    "core2",
    "penryn",
    "dunnington",
    "nehalem",
    "atom",
    "athlon",
    "opteron",
    "opteron_sse3",
    "barcelona",
    "bobcat",
];

/// Whether an OpenBLAS that names its kernels `core` runs SSE kernels on a CPU whose widest
/// vector instructions are `simd` (from [`cpu_simd`]) and that has AVX2 or wider.
pub fn behind_the_cpu(core: &str, simd: &str) -> bool {
    matches!(simd, "avx2" | "avx512f") && SSE_ONLY.contains(&core.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sse_core_on_an_avx2_cpu_is_behind_it() {
        assert!(behind_the_cpu("Prescott", "avx512f"));
        assert!(behind_the_cpu("Barcelona", "avx2"));
        assert!(!behind_the_cpu("Haswell", "avx512f"));
        assert!(!behind_the_cpu("SkylakeX", "avx512f"));
        assert!(
            !behind_the_cpu("Prescott", "sse2"),
            "the CPU has nothing wider"
        );
        assert!(
            !behind_the_cpu("Nehalem", "avx"),
            "no AVX2 kernels to run there"
        );
    }

    #[test]
    fn this_cpu_has_at_least_sse2() {
        assert!(["avx512f", "avx2", "avx", "sse2"].contains(&cpu_simd()));
    }
}
