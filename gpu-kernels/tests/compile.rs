//! The emulation kernels compile with NVRTC for the H200's architecture (sm_90a) and for a
//! non-"a" architecture, export every entry point, and do not spill to local memory.
//! Needs libnvrtc: `scripts/setup-debian` installs the pip wheel nvidia-cuda-nvrtc==13.0.88 in
//! the test venv and `scripts/test-all` puts its library folder on LD_LIBRARY_PATH. Without it
//! each test prints "skipped: <test>: no libnvrtc ..." and passes, except under
//! `OZAKI_TEST_REQUIRE_ALL=1` (CI), where a missing NVRTC fails.

use gpu_kernels::kernels::SOURCE;
use gpu_kernels::nvrtc_cache::{compile_cubin, resource_report};

fn nvrtc(test: &str) -> bool {
    // SAFETY: only dlopens candidate library names.
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    if !present {
        let msg = "no libnvrtc (pip install nvidia-cuda-nvrtc==13.0.88, then LD_LIBRARY_PATH=<site-packages>/nvidia/cu13/lib)";
        if std::env::var("OZAKI_TEST_REQUIRE_ALL").is_ok_and(|v| v == "1") {
            panic!("{msg}; OZAKI_TEST_REQUIRE_ALL=1 forbids skipping");
        }
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "skipped: {test}: {msg}");
    }
    present
}

#[test]
fn kernels_compile_to_cubin_for_sm90a_with_every_entry_point() {
    if !nvrtc("kernels_compile_to_cubin_for_sm90a_with_every_entry_point") {
        return;
    }
    for arch in ["sm_90a", "sm_80"] {
        let cubin =
            compile_cubin(SOURCE, "ozaki.cu", arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{arch}: CUBIN is an ELF image");
        for name in [
            "scan_rows_contig",
            "scan_rows_strided",
            "residues",
            "reconstruct",
            "reconstruct_w4",
            "reconstruct_quad",
            "reconstruct_quad_w4",
            "line_stats_contig",
            "line_stats_strided",
            "scan_stats_contig_16",
            "scan_stats_contig_32",
            "scan_stats_contig_reread",
            "scan_stats_strided_4",
            "scan_stats_strided_4_narrow",
            "scan_stats_strided_2",
            "scan_stats_contig_16_fp",
            "scan_stats_strided_4_narrow_fp",
            "line_shifts",
            "line_summary",
        ] {
            assert!(
                cubin.windows(name.len()).any(|w| w == name.as_bytes()),
                "{arch}: {name} missing"
            );
        }
    }
}

#[test]
fn no_kernel_uses_a_stack_frame_or_spills() {
    if !nvrtc("no_kernel_uses_a_stack_frame_or_spills") {
        return;
    }
    let log = resource_report(SOURCE, "ozaki.cu", "sm_90a").expect("compiles");
    let frames: Vec<&str> = log.lines().filter(|l| l.contains("stack frame")).collect();
    assert!(!frames.is_empty(), "ptxas report missing:\n{log}");
    for l in frames {
        assert!(
            l.contains("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
            "{l}\n{log}"
        );
    }
}
