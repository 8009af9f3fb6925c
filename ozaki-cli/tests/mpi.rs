//! MPI ranks under the shim. Builds the ScaLAPACK `pdgemm` and `pdgetrf`
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

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use common::{ozaki_bin, repo_root, require, runs, shim_lib};
use std::path::Path;
use std::process::Command;

const PACKAGES: &str = "apt-get install openmpi-bin libopenmpi-dev libscalapack-openmpi-dev";

/// Builds the programs into `build`; `false` (after a visible skip) when the MPI toolchain
/// or ScaLAPACK is missing.
fn build_programs(build: &Path) -> bool {
    if !require(
        runs("mpirun", &["--version"]),
        "Open MPI (mpirun)",
        PACKAGES,
    ) || !require(
        runs("mpicc", &["--version"]),
        "the MPI C compiler (mpicc)",
        PACKAGES,
    ) || !require(runs("make", &["--version"]), "make", "apt-get install make")
    {
        return false;
    }
    let out = Command::new("make")
        .arg("-C")
        .arg(repo_root().join("tests/mpi"))
        .arg(format!("BUILD={}", build.display()))
        .output()
        .expect("make runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !require(
        !log.contains("cannot find -lscalapack-openmpi"),
        "ScaLAPACK for Open MPI",
        PACKAGES,
    ) {
        return false;
    }
    assert!(out.status.success(), "building tests/mpi failed:\n{log}");
    true
}

#[test]
fn issue_7_scalapack_ranks_under_the_shim_match_the_run_without_it() {
    let build = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi");
    if !build_programs(&build) {
        return;
    }
    // `ozaki run` preloads the library next to it.
    shim_lib();
    let mut cmd = Command::new("sh");
    cmd.arg(repo_root().join("tests/mpi/run.sh"))
        .arg(ozaki_bin())
        .arg(&build)
        .args(["2", "4"]);
    // run.sh clears OZAKI_*, LD_PRELOAD and the Open MPI env list itself.
    let out = cmd.output().expect("sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "MPI checks failed:\n{stdout}");
    // Guard against a driver that silently checked less than it should.
    let oks = stdout.lines().filter(|l| l.starts_with("ok: ")).count();
    assert!(oks >= 35, "only {oks} checks passed:\n{stdout}");
}
