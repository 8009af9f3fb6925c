//! The pip wheel (`scripts/build-wheel`): assembled from the `ozaki` binary and shim library
//! of this build, installed into a fresh venv from the wheel file alone, and used as a pip
//! user would: `ozaki --version`, `ozaki run` over pip's numpy and over the gfortran client
//! with a trace of their calls, `ozaki summary`, `ozaki env`, a GPU route asked for without
//! CUDA, the `cu13` extra's libraries found (all in `scripts/test-wheel`, which prints one line
//! per check).
//!
//! With `OZAKI_TEST_WHEEL=FILE` (CI sets it to the manylinux wheel `scripts/build-wheel` made
//! with zig, whose glibc floor `auditwheel` checked) that wheel is the one tested instead,
//! and it must carry a manylinux tag.

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use common::*;
use std::path::PathBuf;

#[test]
fn wheel_installs_into_a_fresh_venv_and_runs_programs_under_the_shim() {
    let venv = std::env::var_os("OZAKI_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv"));
    let numpy = venv.join("bin/python");
    if !require(
        runs("python3", &["-c", "import venv, ensurepip"]),
        "python3 with venv and ensurepip",
        "apt-get install python3-venv",
    ) || !require(
        runs(numpy.to_str().unwrap(), &["-c", "import numpy"]),
        &format!("{} with numpy", numpy.display()),
        "scripts/setup-debian (pip install numpy in .venv)",
    ) || !require(
        runs("gfortran", &["--version"]),
        "gfortran",
        "apt-get install gfortran",
    ) || !require(
        have_blas_dev(),
        "reference BLAS",
        "apt-get install libblas-dev",
    ) {
        return;
    }
    let dir = work_dir("wheel");
    let mut test = std::process::Command::new(repo_root().join("scripts/test-wheel"));
    match std::env::var_os("OZAKI_TEST_WHEEL").map(PathBuf::from) {
        Some(wheel) => {
            let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.contains("-manylinux_2_"),
                "OZAKI_TEST_WHEEL={} is not a manylinux wheel",
                wheel.display()
            );
            test.arg("--wheel").arg(&wheel);
        }
        None => {
            // The files of this build, where build-wheel expects them.
            let built = dir.join("built");
            std::fs::create_dir_all(&built).unwrap();
            std::fs::copy(ozaki_bin(), built.join("ozaki")).unwrap();
            std::fs::copy(shim_lib(), built.join("libozaki_shim.so")).unwrap();
            if let Some(audit) = audit_lib() {
                std::fs::copy(audit, built.join("libozaki_audit.so")).unwrap();
            }
            test.arg("--from-target").arg(&built);
        }
    }

    let out = run_ok(
        test.arg("--work")
            .arg(dir.join("work"))
            .env("OZAKI_TEST_VENV", &venv),
    );
    let log = String::from_utf8_lossy(&out.stdout);
    print!("{log}");
    for check in [
        "the constructor is",
        "ozaki run over pip numpy",
        "gfortran client",
        "ozaki env",
        "no GPU: the vendor route and one line",
        "the cu13 extra's libraries",
    ] {
        assert!(log.contains(check), "no {check:?} line in:\n{log}");
    }
}
