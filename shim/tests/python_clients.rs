//! NumPy and SciPy under the shim: Debian's python3-numpy/python3-scipy (reference
//! BLAS, reached through `cblas_dgemm`/`dgemm_`) and the pip wheels in a venv (bundled
//! OpenBLAS, reached through `scipy_cblas_dgemm64_`/`scipy_dgemm_`). Results must be
//! bit-identical to the run without the shim and each BLAS call recorded exactly once
//! under the symbol that wheel really calls (see ecosystem-facts.md §3).
//!
//! The venv is `$OZAKI_TEST_VENV`, else `.venv/` at the repository root (`.ci/run` and
//! `scripts/test-all` create it with `pip install numpy scipy threadpoolctl`).

mod common;

use common::*;
use std::path::PathBuf;

/// Debian's interpreter (another `python3` may come first on PATH).
const DEBIAN_PYTHON: &str = "/usr/bin/python3";

fn venv_python() -> PathBuf {
    let venv = std::env::var_os("OZAKI_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv"));
    venv.join("bin/python")
}

fn python_with(python: &str, modules: &str, install: &str) -> bool {
    require(
        runs(python, &["-c", &format!("import {modules}")]),
        &format!("{python} with {modules}"),
        install,
    )
}

/// Symbol names each call class reaches, per BLAS stack.
struct Stack {
    name: &'static str,
    numpy_gemm: &'static str,
    numpy_syrk: &'static str,
    scipy_gemm: &'static str,
    scipy_syrk: &'static str,
    numpy_ilp64: bool,
}

const DEBIAN: Stack = Stack {
    name: "debian",
    numpy_gemm: "cblas_dgemm",
    numpy_syrk: "cblas_dsyrk",
    scipy_gemm: "dgemm_",
    scipy_syrk: "dsyrk_",
    numpy_ilp64: false,
};

const PIP: Stack = Stack {
    name: "pip",
    numpy_gemm: "scipy_cblas_dgemm64_",
    numpy_syrk: "scipy_cblas_dsyrk64_",
    scipy_gemm: "scipy_dgemm_",
    scipy_syrk: "scipy_dsyrk_",
    numpy_ilp64: true,
};

/// Runs tests/python/blas_calls.py with and without the shim and checks every operation's
/// record: the right symbol, the shape, exactly one record (no double count through a
/// vendor's nested call) and nothing else in the trace.
fn check_stack(python: &str, stack: &Stack) {
    let dir = work_dir(&format!("python-{}", stack.name));
    let script = repo_root().join("tests/python/blas_calls.py");
    let (out, trace) = run_both(
        &format!("{} numpy/scipy", stack.name),
        &dir,
        python.as_ref(),
        &[script.to_str().unwrap()],
    );
    let calls = calls_in_order(&trace);
    let mut matched = vec![false; calls.len()];
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (class, m, n, k) = (
            f[1],
            f[2].parse::<u64>().unwrap(),
            f[3].parse::<u64>().unwrap(),
            f[4].parse::<u64>().unwrap(),
        );
        let (sym, ilp64) = match class {
            "numpy-gemm" => (stack.numpy_gemm, stack.numpy_ilp64),
            "numpy-syrk" => (stack.numpy_syrk, stack.numpy_ilp64),
            "scipy-gemm" => (stack.scipy_gemm, false),
            "scipy-syrk" => (stack.scipy_syrk, false),
            other => panic!("unknown class {other}"),
        };
        // NumPy may pass a row-major product as its column-major transpose, so m and n
        // are compared as a pair in either order.
        let hits: Vec<usize> = (0..calls.len())
            .filter(|&i| {
                let c = calls[i];
                !matched[i]
                    && c.sym == sym
                    && c.k == k
                    && ((c.m, c.n) == (m, n) || (c.m, c.n) == (n, m))
            })
            .collect();
        assert_eq!(
            hits.len(),
            1,
            "{}: {line}: want one {sym} record with m,n,k = {m},{n},{k}; trace: {:?}",
            stack.name,
            calls
                .iter()
                .map(|c| (&c.sym, c.m, c.n, c.k))
                .collect::<Vec<_>>()
        );
        let c = calls[hits[0]];
        assert_eq!(c.ilp64, ilp64, "{}: {sym} ilp64 flag", stack.name);
        matched[hits[0]] = true;
    }
    let vendor = &trace.headers[0].vendor;
    assert!(
        vendor.values().all(|v| !v.contains("libozaki_shim")),
        "a symbol resolved to the shim itself: {vendor:?}"
    );
    let extra: Vec<_> = calls
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|(c, _)| (&c.sym, c.m, c.n, c.k))
        .collect();
    assert!(
        extra.is_empty(),
        "{}: records for calls the script did not make (double counting?): {extra:?}",
        stack.name
    );
}

#[test]
fn debian_numpy_and_scipy_reference_blas() {
    if python_with(
        DEBIAN_PYTHON,
        "numpy, scipy.linalg.blas",
        "apt-get install python3-numpy python3-scipy",
    ) {
        check_stack(DEBIAN_PYTHON, &DEBIAN);
    }
}

#[test]
fn pip_numpy_and_scipy_wheels_in_a_venv() {
    let py = venv_python();
    let py = py.to_str().unwrap();
    if python_with(
        py,
        "numpy, scipy.linalg.blas",
        "python3 -m venv .venv && .venv/bin/pip install numpy scipy threadpoolctl",
    ) {
        check_stack(py, &PIP);
    }
}

/// threadpoolctl finds BLAS libraries by file name; with the shim preloaded it must list
/// exactly what it lists without it (the wheels' OpenBLAS builds for the venv).
#[test]
fn threadpoolctl_still_reports_the_blas() {
    let script = repo_root().join("tests/python/threadpool_info.py");
    let venv = venv_python();
    for (python, must_find_blas) in [(DEBIAN_PYTHON, false), (venv.to_str().unwrap(), true)] {
        if !python_with(
            python,
            "numpy, scipy, threadpoolctl",
            "python3-threadpoolctl / pip install threadpoolctl",
        ) {
            continue;
        }
        let without = run_ok(plain(python).arg(&script));
        let with = run_ok(shimmed(python, None).arg(&script));
        assert_same_output(
            &format!("threadpoolctl under {python}"),
            &without.stdout,
            &with.stdout,
        );
        let out = String::from_utf8(with.stdout).unwrap();
        if must_find_blas {
            assert!(
                out.lines().filter(|l| l.starts_with("openblas ")).count() >= 2,
                "{python}: {out}"
            );
        }
    }
}

/// The caller's floating-point exception flags are the vendor's: NumPy's `errstate(...=
/// 'raise')` around products of finite operands spanning 2^-1003 .. 2^6 (nothing in a
/// correct evaluation overflows or underflows) raises exactly what it raises without the
/// shim, while cpu-ozaki really computes every call (no fallback in the trace).
#[test]
fn cpu_ozaki_leaves_the_fp_flags_numpy_sees_as_the_vendor_does() {
    let script = repo_root().join("tests/python/fp_flags.py");
    let venv = venv_python();
    for (name, python) in [("debian", DEBIAN_PYTHON), ("pip", venv.to_str().unwrap())] {
        if !python_with(python, "numpy", "python3-numpy / pip install numpy") {
            continue;
        }
        let dir = work_dir(&format!("fp-flags-{name}"));
        let trace_path = dir.join("trace.jsonl");
        let without = run_ok(plain(python).arg(&script));
        let with = run_ok(
            // The accuracy rule declines these wide-range lines (their small entries cannot
            // keep fp64 accuracy); a forced count runs the internal scaling under test.
            shimmed(python, Some(&trace_path))
                .env("OZAKI_ROUTE", "cpu-ozaki")
                .env("OZAKI_MODULI", "20")
                .arg(&script),
        );
        assert_same_output(
            &format!("{name}: FP flags under cpu-ozaki"),
            &without.stdout,
            &with.stdout,
        );
        let trace = read_trace(&trace_path);
        let calls = calls_in_order(&trace);
        assert!(!calls.is_empty(), "{name}: no BLAS call recorded");
        for c in calls {
            assert_eq!(
                (c.route.as_str(), c.fallback.as_deref()),
                ("cpu-ozaki", None),
                "{name}: {} {}x{}x{} was not emulated",
                c.sym,
                c.m,
                c.n,
                c.k
            );
        }
    }
}
