//! `ozaki accuracy` as CI runs it: the quick suite on `cpu-ozaki` holds the contract on
//! every family (exit 0), a route configured to break it (too few moduli) makes the command
//! exit 1 and name the family, and `--route gpu-ozaki` without a GPU says `skipped: no GPU`
//! and exits 0.

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use common::*;
use std::process::Output;

fn accuracy(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = plain(ozaki_bin());
    cmd.arg("accuracy").args(args);
    for var in ["OZAKI_MODULI", "OZAKI_SCALING", "OZAKI_ROUTE"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn quick_suite_holds_the_contract_on_cpu_ozaki_for_every_family() {
    let o = accuracy(&["--route", "cpu-ozaki", "--quick"], &[]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    let list = text(&accuracy(&["--list"], &[]).stdout);
    let names: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.len() >= 25, "{list}");
    for name in &names {
        assert!(
            out.contains(&format!("### {name} — ")),
            "no table for {name}:\n{out}"
        );
    }
    assert_eq!(out.matches("contract holds:").count(), names.len(), "{out}");
    assert!(
        out.contains(&format!("accuracy: {} families", names.len())),
        "{out}"
    );
    assert!(!out.contains("BREAKS"), "{out}");
}

#[test]
fn too_few_moduli_break_the_contract_and_exit_1() {
    // 12 moduli give ~100x native's error on normal inputs: the suite must say so.
    let o = accuracy(
        &["--families", "normal,integers", "--quick"],
        &[("OZAKI_MODULI", "12")],
    );
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("**BREAKS**"), "{out}");
    assert!(out.contains("CONTRACT BROKEN by normal"), "{out}");
    assert!(
        !out.contains("by normal, integers"),
        "integers are exact with 12 moduli: {out}"
    );
}

#[test]
fn bad_arguments_exit_2() {
    let o = accuracy(&["--families", "nonsense"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("unknown family \"nonsense\""));
    let o = accuracy(&["--route", "vendor"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let o = accuracy(&["--sizes", "12x3"], &[]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn gpu_route_without_a_gpu_is_skipped_with_exit_0() {
    if gpu_kernels::device::available().is_ok() {
        // On a GPU machine the route is measured (scripts/gpu-check, stage accuracy).
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: gpu_route_without_a_gpu_is_skipped_with_exit_0: a GPU is present"
        );
        return;
    }
    let o = accuracy(&["--route", "gpu-ozaki", "--quick"], &[]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(out.starts_with("skipped: no GPU ("), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
}
