//! Issue #7: MPI ranks under the shim. Builds the ScaLAPACK `pdgemm` and `pdgetrf`
//! programs of `tests/mpi/` and runs `tests/mpi/run.sh`, which starts them on 2 and 4
//! ranks without the shim, as `mpirun -n R ozaki run -- PROG` and as
//! `ozaki run -- mpirun -n R PROG`, and checks that the results are bit-identical, that every
//! rank wrote its own trace naming its rank, and that a one-bit change in `dgemm_` would
//! have been caught. The checks live in the script so the same driver can be run by hand
//! (and on the GPU machine) without cargo.
//!
//! Needs Open MPI and ScaLAPACK (Debian: `openmpi-bin libopenmpi-dev
//! libscalapack-openmpi-dev`, installed by `.ci/run`); without them the test says
//! "skipped: ..." and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGES: &str = "openmpi-bin libopenmpi-dev libscalapack-openmpi-dev";

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("shim/ has a parent").to_path_buf()
}

/// Builds the programs into `build`; `Err(reason)` when the MPI toolchain is missing.
fn build_programs(build: &Path) -> Result<(), String> {
    for tool in ["mpirun", "mpicc", "make"] {
        if !on_path(tool) {
            return Err(format!("{tool} not found (apt-get install {PACKAGES})"));
        }
    }
    let out = Command::new("make")
        .arg("-C")
        .arg(repo_root().join("tests/mpi"))
        .arg(format!("BUILD={}", build.display()))
        .output()
        .expect("make runs");
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if log.contains("cannot find -lscalapack-openmpi") {
        return Err(format!("ScaLAPACK for Open MPI not installed (apt-get install {PACKAGES})"));
    }
    assert!(out.status.success(), "building tests/mpi failed:\n{log}");
    Ok(())
}

#[test]
fn issue_7_scalapack_ranks_under_the_shim_match_the_run_without_it() {
    let build = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi");
    if let Err(why) = build_programs(&build) {
        eprintln!("skipped: {why}");
        return;
    }
    let ozaki = Path::new(env!("CARGO_BIN_EXE_ozaki"));
    let shim = ozaki.with_file_name("libozaki_shim.so");
    assert!(shim.is_file(), "{} missing: `ozaki run` preloads the library next to it", shim.display());

    let out = Command::new("sh")
        .arg(repo_root().join("tests/mpi/run.sh"))
        .arg(ozaki)
        .arg(&build)
        .args(["2", "4"])
        // The driver's children must not inherit a trace or route from the developer's shell.
        .env_remove("OZAKI_TRACE")
        .env_remove("OZAKI_ROUTE")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "MPI checks failed:\n{stdout}");
    // Guard against a driver that silently checked nothing.
    let oks = stdout.lines().filter(|l| l.starts_with("ok: ")).count();
    assert!(oks >= 29, "only {oks} checks ran:\n{stdout}");
}
