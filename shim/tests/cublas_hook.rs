//! The cuBLAS hook seen from a GPU program, on a machine without a GPU: a fake cuBLAS and
//! cuBLASLt (tests/c/fake_cublas_api.c and tests/c/fake_cublaslt.c, built as libcublas.so.13
//! and libcublasLt.so.13, over the fake driver of tests/c/fake_cuda.c) log every call they
//! receive with all its arguments (for cuBLASLt, every descriptor attribute), and a client
//! library that links it is loaded `RTLD_LOCAL` (as Python loads PyTorch and CuPy), so the
//! hook must find the real entry points by the library's handle. The fake driver's GPU
//! never starts, so every routed call ends on cuBLAS: what cuBLAS receives must be exactly
//! what it receives without the shim, each real entry point reached once per call (the
//! fake's fp64 `cublasGemmEx` calls its own exported `cublasDgemm_v2`, which the hook must
//! pass straight through), and the trace must hold one record per fp64 call, naming it, and
//! saying why it stayed on cuBLAS.

mod common;

use common::*;
use ozaki_core::trace::CallRecord;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fp64 calls of tests/c/cublas_user.c in order, with their batch counts: the cuBLAS
/// calls (the last with alpha and beta in device memory), then the cuBLASLt ones (see
/// [`ROUTABLE`], [`LT_REFUSED`]; the last in device pointer mode).
const FP64_CALLS: [(&str, Option<u64>); 19] = [
    ("cublasDgemm_v2", None),
    ("cublasGemmEx", None),
    ("cublasDgemmStridedBatched", Some(3)),
    ("cublasGemmStridedBatchedEx", Some(2)),
    ("cublasDsyrk_v2", None),
    ("cublasDgemm_v2_64", None),
    ("cublasGemmEx_64", None),
    ("cublasDgemmStridedBatched_64", Some(4)),
    ("cublasGemmStridedBatchedEx_64", Some(2)),
    ("cublasDsyrk_v2_64", None),
    ("cublasDgemm_v2", None),
    ("cublasLtMatmul", None),
    ("cublasLtMatmul", None),
    ("cublasLtMatmul", Some(3)),
    ("cublasLtMatmul", None),
    ("cublasLtMatmul", None),
    ("cublasLtMatmul", None),
    ("cublasLtMatmul", None),
    ("cublasLtMatmul", None),
];

/// The records of calls only the missing GPU kept off the emulation: the ten cuBLAS calls in
/// host pointer mode and the five plain cuBLASLt products.
const ROUTABLE: [usize; 15] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 16];
/// The cuBLASLt calls the hook cannot compute, with what their records must say.
const LT_REFUSED: [(usize, &str); 2] = [(15, "epilogue"), (17, "column-major")];
/// The two calls with alpha and beta in device memory (cuBLAS's pointer mode, cuBLASLt's
/// descriptor).
const DEVICE_SCALARS: [usize; 2] = [10, 18];

fn cc(args: &[&str], dir: &Path) {
    let o = Command::new("cc")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Builds the fake driver and cuBLAS, the client library and the client into `dir`; `None`
/// (after a visible skip) without a C compiler.
fn build(dir: &Path) -> Option<PathBuf> {
    if !require(
        runs("cc", &["--version"]),
        "a C compiler (cc)",
        "apt-get install gcc",
    ) {
        return None;
    }
    let src = repo_root().join("tests/c");
    let s = |name: &str| src.join(name).to_string_lossy().into_owned();
    cc(
        &[
            "-O2",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            "libcuda.so.1",
            &s("fake_cuda.c"),
        ],
        dir,
    );
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    cc(
        &[
            "-O2",
            "-Wall",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcublas.so.13",
            "-o",
            "libcublas.so.13",
            &s("fake_cublas_api.c"),
            "-Wl,--no-as-needed",
            "./libcuda.so.1",
        ],
        dir,
    );
    cc(
        &[
            "-O2",
            "-Wall",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcublasLt.so.13",
            "-o",
            "libcublasLt.so.13",
            &s("fake_cublaslt.c"),
        ],
        dir,
    );
    cc(
        &[
            "-O2",
            "-Wall",
            "-shared",
            "-fPIC",
            "-o",
            "libcublas_user.so",
            &s("cublas_user.c"),
            "./libcublas.so.13",
            "./libcublasLt.so.13",
            "-Wl,-rpath,$ORIGIN",
        ],
        dir,
    );
    cc(
        &[
            "-O2",
            "-Wall",
            "-o",
            "cublas_client",
            &s("cublas_client.c"),
            "-ldl",
        ],
        dir,
    );
    cc(
        &[
            "-O2",
            "-Wall",
            "-o",
            "cublas_dlsym_client",
            &s("cublas_dlsym_client.c"),
            "-ldl",
        ],
        dir,
    );
    Some(dir.join("cublas_client"))
}

/// What one run of the client left: the fake's call log, the trace's call records and
/// stderr.
struct Run {
    log: String,
    calls: Vec<CallRecord>,
    stderr: String,
}

/// Runs the client in `dir` (with the shim when `shim`), `env` added.
fn run(dir: &Path, prog: &Path, shim: bool, env: &[(&str, &str)], tag: &str) -> Run {
    let log = dir.join(format!("{tag}.log"));
    let trace = dir.join(format!("{tag}.jsonl"));
    let mut cmd = if shim {
        shimmed(prog, Some(&trace))
    } else {
        plain(prog)
    };
    cmd.arg(dir)
        .current_dir(dir)
        .env("FAKE_CUBLAS_LOG", &log)
        .env("LD_LIBRARY_PATH", dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = run_ok(&mut cmd);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "done\n",
        "{tag}: every call succeeded"
    );
    let calls = if trace.exists() {
        calls_in_order(&read_trace(&trace))
            .into_iter()
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    Run {
        log: std::fs::read_to_string(&log).unwrap(),
        calls,
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// The client's run without the shim, the reference for what cuBLAS must receive.
fn reference(name: &str) -> Option<(PathBuf, PathBuf, Run)> {
    let dir = work_dir(name);
    let prog = build(&dir)?;
    let plain = run(&dir, &prog, false, &[], "plain");
    assert_eq!(
        plain.log.lines().count(),
        22,
        "the fake logged every call:\n{}",
        plain.log
    );
    Some((dir, prog, plain))
}

/// The record names, batches and the device-resident mark, in call order.
fn described(calls: &[CallRecord]) -> Vec<(String, Option<u64>)> {
    for c in calls {
        assert!(c.device_resident, "{}: device_resident", c.sym);
    }
    calls.iter().map(|c| (c.sym.clone(), c.batch)).collect()
}

/// [`FP64_CALLS`] as [`described`] shows them.
fn expected_calls() -> Vec<(String, Option<u64>)> {
    FP64_CALLS
        .iter()
        .map(|&(s, b)| (s.to_string(), b))
        .collect()
}

#[test]
fn cublas_receives_every_call_unchanged_once_and_each_fp64_call_is_recorded_once() {
    let Some((dir, prog, plain)) = reference("cublas-hook-forward") else {
        return;
    };
    let with = run(&dir, &prog, true, &[("OZAKI_ROUTE", "gpu-ozaki")], "shim");
    assert_eq!(
        with.log, plain.log,
        "what cuBLAS received, without vs with the shim"
    );
    // the fp32 cublasGemmEx has no record; the fp64 cublasGemmEx's inner cublasDgemm_v2
    // (the library's own call) has none either
    assert_eq!(described(&with.calls), expected_calls());
    let dgemm = &with.calls[0];
    assert_eq!((dgemm.m, dgemm.n, dgemm.k, dgemm.ldc), (96, 80, 64, 100));
    assert_eq!((dgemm.alpha, dgemm.beta), (1.5, 0.25));
    assert!(with.calls[5].ilp64 && !dgemm.ilp64);
    assert_eq!(with.calls[4].routine, ozaki_core::trace::Routine::Dsyrk);
    for &i in &ROUTABLE {
        let c = &with.calls[i];
        assert_eq!(c.route, "gpu-native", "{i} {}: no GPU, so cuBLAS", c.sym);
        let why = c.fallback.as_deref().unwrap_or("");
        assert!(
            why.contains("unavailable"),
            "{i} {}: the GPU did not start: {why}",
            c.sym
        );
    }
    // cuBLASLt: the product's shape from the layouts, op(A) from the descriptor
    let lt = &with.calls[11];
    assert_eq!(
        (lt.m, lt.n, lt.k, lt.lda, lt.ldb, lt.ldc),
        (96, 80, 64, 96, 64, 100)
    );
    assert_eq!((lt.alpha, lt.beta), (1.5, 0.25));
    assert!(lt.ilp64);
    assert_eq!(with.calls[12].transa.as_deref(), Some("T"));
    assert_eq!(with.calls[12].lda, 64);
    let batched = &with.calls[13];
    assert_eq!((batched.m, batched.n, batched.k), (32, 16, 8));
    assert_eq!(with.calls[14].beta, 0.0);
    for (i, what) in LT_REFUSED {
        let c = &with.calls[i];
        assert_eq!(c.route, "gpu-native");
        let why = c.fallback.as_deref().unwrap_or("");
        assert!(why.contains(what), "{i}: {why}");
    }
    // alpha and beta in device memory: not read (the made-up addresses would crash), cuBLAS
    for i in DEVICE_SCALARS {
        let device = &with.calls[i];
        assert!(device.alpha.is_nan() && device.beta.is_nan(), "{i}");
        let why = device.fallback.as_deref().unwrap_or("");
        assert!(why.contains("pointer mode device"), "{i}: {why}");
    }
}

#[test]
fn ozaki_cublas_0_hands_every_call_to_cublas_unrecorded() {
    let Some((dir, prog, plain)) = reference("cublas-hook-off") else {
        return;
    };
    let off = run(
        &dir,
        &prog,
        true,
        &[("OZAKI_CUBLAS", "0"), ("OZAKI_ROUTE", "gpu-ozaki")],
        "off",
    );
    assert_eq!(off.log, plain.log);
    assert!(
        off.calls.is_empty(),
        "no record with the hook off: {:?}",
        described(&off.calls)
    );
    assert!(!off.stderr.contains("cuBLAS hook"), "{}", off.stderr);
}

#[test]
fn a_capturing_stream_goes_to_cublas_with_nothing_decided_or_started() {
    let Some((dir, prog, plain)) = reference("cublas-hook-capture") else {
        return;
    };
    let env = [("FAKE_CAPTURING", "1"), ("OZAKI_ROUTE", "gpu-ozaki")];
    let captured = run(&dir, &prog, true, &env, "capture");
    assert_eq!(captured.log, plain.log);
    assert_eq!(described(&captured.calls), expected_calls());
    for &i in ROUTABLE.iter().chain(&DEVICE_SCALARS) {
        let c = &captured.calls[i];
        let why = c.fallback.as_deref().unwrap_or("");
        assert!(why.contains("capturing"), "{}: {why}", c.sym);
        assert!(
            c.engine.is_none() && c.moduli.is_none(),
            "{}: nothing decided",
            c.sym
        );
    }
    // no GPU start was attempted (it would have said on stderr that it found no GPU)
    assert!(
        !captured.stderr.contains("cuBLAS hook"),
        "{}",
        captured.stderr
    );
}

#[test]
fn ozaki_ab_compares_nothing_that_stays_on_cublas() {
    let Some((dir, prog, plain)) = reference("cublas-hook-ab") else {
        return;
    };
    let env = [("OZAKI_AB", "1"), ("OZAKI_ROUTE", "gpu-ozaki")];
    let ab = run(&dir, &prog, true, &env, "ab");
    // cuBLAS received every call once, unchanged: no second, comparing computation
    assert_eq!(ab.log, plain.log);
    assert_eq!(described(&ab.calls), expected_calls());
    for c in &ab.calls {
        assert_eq!(c.route, "gpu-native", "{}", c.sym);
        assert!(
            c.ab.is_none(),
            "{}: cuBLAS is not compared with itself",
            c.sym
        );
    }
}

/// A program that resolves cuBLAS's entry points with `dlsym` on its own handle (JAX's XLA
/// plugin does) never reaches a preloaded library; with the audit library
/// (`LD_AUDIT=libozaki_audit.so`) its fp64 calls go through the hook, each recorded once,
/// while cuBLAS receives exactly what it receives without the shim (the fp32 call, the
/// handle's creation and the fake's own inner call untouched).
#[test]
fn entry_points_found_with_dlsym_reach_the_hook_through_the_audit_library() {
    let Some(audit) = audit_lib() else {
        require(
            false,
            "libozaki_audit.so of this build",
            "cargo build --workspace (scripts/test-all does)",
        );
        return;
    };
    let dir = work_dir("cublas-hook-dlsym");
    let Some(_) = build(&dir) else {
        return;
    };
    let prog = dir.join("cublas_dlsym_client");
    let route = ("OZAKI_ROUTE", "gpu-ozaki");
    let plain = run(&dir, &prog, false, &[], "plain");
    assert!(
        plain.log.lines().count() >= 4,
        "the fake logged the calls:\n{}",
        plain.log
    );
    let preloaded = run(&dir, &prog, true, &[route], "preloaded");
    assert_eq!(preloaded.log, plain.log);
    // dlsym on cuBLAS's handle finds cuBLAS, not the preloaded shim: no record of the
    // program's own calls (the fake's fp64 cublasGemmEx calls its exported cublasDgemm_v2
    // through its PLT, which the preload does reach, unguarded here)
    assert!(
        preloaded
            .calls
            .iter()
            .all(|c| c.sym == "cublasDgemm_v2" && c.m == 96 && c.ldc == 96),
        "{:?}",
        described(&preloaded.calls)
    );
    let audit = audit.to_string_lossy().into_owned();
    let audited = run(&dir, &prog, true, &[route, ("LD_AUDIT", &audit)], "audited");
    assert_eq!(
        audited.log, plain.log,
        "what cuBLAS received, without vs through the hook"
    );
    assert_eq!(
        described(&audited.calls),
        [
            ("cublasDgemm_v2".to_string(), None),
            ("cublasGemmEx".to_string(), None)
        ]
    );
    for c in &audited.calls {
        assert_eq!(c.route, "gpu-native", "{}: no GPU, so cuBLAS", c.sym);
        let why = c.fallback.as_deref().unwrap_or("");
        assert!(why.contains("unavailable"), "{}: {why}", c.sym);
    }
    assert_eq!((audited.calls[0].m, audited.calls[0].ldc), (96, 100));
    // the audit library without the shim redirects nothing
    let mut alone = plain_audit(&dir, &prog, &audit);
    assert_eq!(alone.remove(0), plain.log);
}

/// The client run with the audit library and no shim: the fake's log.
fn plain_audit(dir: &Path, prog: &Path, audit: &str) -> Vec<String> {
    let log = dir.join("audit-alone.log");
    let o = run_ok(
        plain(prog)
            .arg(dir)
            .current_dir(dir)
            .env("FAKE_CUBLAS_LOG", &log)
            .env("LD_LIBRARY_PATH", dir)
            .env("LD_AUDIT", audit),
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done\n");
    vec![std::fs::read_to_string(&log).unwrap()]
}
