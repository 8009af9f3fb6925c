//! The background GPU start of the `auto` route (shim/src/route/start.rs) seen from a program,
//! on a machine without a GPU: with no CUDA driver nothing changes; with a driver that sees no
//! GPU (a fake libcuda whose cuInit fails, tests/c/fake_cuda.c) the start fails on its thread,
//! every call stays on the vendor BLAS with the same results, stderr says so once; and a
//! program that exits while cuInit is still running exits at once with status 0, its exit
//! waiting (bounded) for the step under way.

mod common;

use common::*;
use ozaki_core::trace::DuringStart;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The fake CUDA driver and cuBLAS (`libcuda.so`, `libcublas.so`) built into `dir/fake`.
fn fake_cuda(dir: &Path) -> PathBuf {
    let fake = dir.join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    let src = repo_root().join("tests/c/fake_cuda.c");
    for (lib, def) in [
        ("libcuda.so", "-DFAKE_CUDA"),
        ("libcublas.so", "-DFAKE_CUBLAS"),
    ] {
        let o = Command::new("cc")
            .args(["-O2", "-shared", "-fPIC", def, "-o"])
            .arg(fake.join(lib))
            .arg(&src)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    write_profile(&fake.join("quick-start.json"), |p| {
        p["gpu"]["start_s"] = serde_json::json!(1e-4);
        // A CPU BLAS 10x slower: the GPU is priced well ahead (the start only counts such
        // gains), so these tests' products of 384² start it.
        slow_cpu_blas(p, 10.0);
    });
    fake
}

/// A profile's CPU BLAS work model made `factor` times slower.
fn slow_cpu_blas(p: &mut serde_json::Value, factor: f64) {
    for b in p["cpu"]["blas"].as_array_mut().unwrap() {
        let s = b["model"]["s_per_mnk"].as_f64().unwrap();
        b["model"]["s_per_mnk"] = serde_json::json!(s * factor);
    }
}

/// The shipped H200 profile changed by `edit`, written to `path`.
fn write_profile(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let text = std::fs::read_to_string(repo_root().join("profiles/h200.json")).unwrap();
    let mut p: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut p);
    std::fs::write(path, serde_json::to_string(&p).unwrap()).unwrap();
}

/// `cmd` with `fake` first on the library path, and a profile whose GPU starts in 0.1 ms and
/// whose CPU BLAS is 10x slow: any call priced on the GPU covers its start, so the calls of these tests start it (the
/// start's own rule has tests of its own below).
fn with_fake(mut cmd: Command, fake: &Path) -> Command {
    cmd.env("OZAKI_PROFILE", fake.join("quick-start.json"));
    let old = cmd
        .get_envs()
        .find(|(k, _)| *k == "LD_LIBRARY_PATH")
        .and_then(|(_, v)| v.map(|v| v.to_os_string()))
        .unwrap_or_default();
    let mut path = fake.as_os_str().to_os_string();
    path.push(":");
    path.push(old);
    cmd.env("LD_LIBRARY_PATH", path);
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `cmd` with a deterministic thread count for the engine's pricing (2 BLAS threads:
/// 384² then prices the GPU as faster, so the calls are not "clearly vendor").
fn run(mut cmd: Command) -> (Output, Duration) {
    cmd.env("OMP_NUM_THREADS", "2");
    let t = Instant::now();
    let o = cmd.output().unwrap();
    (o, t.elapsed())
}

#[test]
fn without_a_cuda_driver_nothing_changes() {
    if gpu_kernels::probe::driver_present() {
        require(
            false,
            "a machine without a CUDA driver",
            "run on a CPU-only machine",
        );
        return;
    }
    let dir = work_dir("gpu-start-none");
    let Some(prog) = build_c(&dir, "gpu_start", &["-lblas"]) else {
        return;
    };
    let (plain_out, _) = run(plain(&prog));
    let trace = dir.join("trace.jsonl");
    let (auto, _) = run(shimmed(&prog, Some(&trace)));
    assert!(auto.status.success(), "{}", text(&auto.stderr));
    assert_same_output("gpu_start, auto", &plain_out.stdout, &auto.stdout);
    assert_eq!(
        text(&auto.stderr),
        "",
        "auto without a driver is silent, as before"
    );
    let t = read_trace(&trace);
    assert_eq!(t.calls.len(), 8);
    assert!(t.calls.iter().all(|c| c.route == "vendor"), "{:?}", t.calls);
    // A forced GPU route: the vendor computes, and stderr says why once.
    let (forced, _) = run({
        let mut c = shimmed(&prog, None);
        c.env("OZAKI_ROUTE", "gpu-native");
        c
    });
    assert!(forced.status.success());
    assert_same_output("gpu_start, gpu-native", &plain_out.stdout, &forced.stdout);
    let err = text(&forced.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no usable GPU"), "{err}");
}

#[test]
fn a_gpu_that_cannot_start_leaves_every_call_on_the_vendor_and_says_so_once() {
    let dir = work_dir("gpu-start-fails");
    let Some(prog) = build_c(&dir, "gpu_start", &["-lblas"]) else {
        return;
    };
    let fake = fake_cuda(&dir);
    let (plain_out, _) = run(plain(&prog));
    let trace = dir.join("trace.jsonl");
    let (o, _) = run(with_fake(shimmed(&prog, Some(&trace)), &fake));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_same_output("gpu_start, failing start", &plain_out.stdout, &o.stdout);
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "one line, from one start: {err}");
    assert!(
        err.contains("the GPU could not be started") && err.contains("cuInit"),
        "{err}"
    );
    let t = read_trace(&trace);
    assert_eq!(t.calls.len(), 8, "4 threads x 2 calls");
    assert!(
        t.calls
            .iter()
            .all(|c| c.route == "vendor" && c.fallback.is_none())
    );
    // The calls that came before the start failed say why they ran on the vendor BLAS: the
    // start was under way, it failed, or the call waited for it and it failed meanwhile
    // (which of these a thread sees depends on when its call comes).
    let reasons: Vec<&str> = t
        .calls
        .iter()
        .filter_map(|c| c.engine.as_ref().map(|e| e.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 8);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("starting in the background")
                || r.contains("could not be started")
                || (r.contains("for the GPU start") && r.contains("then gave up"))),
        "{reasons:#?}"
    );
}

/// `gpu_start` built in `dir` for one thread making one call, the fake CUDA libraries, and
/// what the program prints without the shim (`None`: no C compiler or BLAS, said by
/// `build_c`).
fn one_call_program(dir: &Path) -> Option<(PathBuf, PathBuf, Output)> {
    let prog = build_c(dir, "gpu_start", &["-lblas"])?;
    let fake = fake_cuda(dir);
    let (plain_out, _) = run({
        let mut c = plain(&prog);
        c.args(["1", "1"]);
        c
    });
    Some((prog, fake, plain_out))
}

/// `OZAKI_GPU_START=blocking`: the first call that may use the GPU waits for the start (here
/// a cuInit that takes 0.8 s and fails) instead of running on the vendor BLAS at once, as it
/// does by default; either way the results are the vendor's.
#[test]
fn ozaki_gpu_start_blocking_makes_the_first_call_wait_for_the_start() {
    let dir = work_dir("gpu-start-blocking");
    let Some((prog, fake, plain_out)) = one_call_program(&dir) else {
        return;
    };
    let first_call = |mode: Option<&str>| {
        let trace = dir.join(format!("trace-{}.jsonl", mode.unwrap_or("default")));
        let mut cmd = with_fake(shimmed(&prog, Some(&trace)), &fake);
        cmd.args(["1", "1"]).env("FAKE_CUINIT_MS", "800");
        if let Some(m) = mode {
            cmd.env("OZAKI_GPU_START", m);
        }
        let (o, _) = run(cmd);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_same_output("gpu_start, 1 call", &plain_out.stdout, &o.stdout);
        let t = read_trace(&trace);
        assert_eq!(t.calls.len(), 1);
        let c = &t.calls[0];
        assert_eq!(c.route, "vendor");
        let e = c
            .engine
            .clone()
            .expect("auto records the engine's prediction");
        (Duration::from_nanos(c.dur_ns), e, text(&o.stderr))
    };
    let (took, e, err) = first_call(Some("blocking"));
    assert!(took >= Duration::from_millis(700), "{took:?}: {e:?}");
    assert!(e.reason.contains("could not be started (waited"), "{e:?}");
    let n = e.gpu_start.expect("trace field engine.gpu_start");
    assert_eq!(n.during, DuringStart::Failed);
    assert!(n.waited_s.is_some_and(|w| w >= 0.6), "{n:?}");
    assert_eq!(
        err.lines().count(),
        1,
        "the failed start says so once: {err}"
    );
    // By default the call runs on the vendor BLAS beside the start: at once, or (this
    // profile's start is priced at 0.1 ms, already over) after waiting at most the few
    // milliseconds in which the GPU could still have beaten the vendor.
    // The bound is the 0.8 s start it must not wait for, less a margin: on a loaded 2-core
    // machine a 2x2 call has been seen to take a few hundred milliseconds of wall time.
    let (took, e, _) = first_call(None);
    assert!(took < Duration::from_millis(650), "{took:?}: {e:?}");
    assert!(
        e.reason.contains("starting in the background") || e.reason.contains("then gave up"),
        "{e:?}"
    );
    let n = e.gpu_start.expect("trace field engine.gpu_start");
    assert_eq!(n.during, DuringStart::Vendor);
    assert!(n.waited_s.is_none_or(|w| w < 0.05), "{n:?}");
}

/// Whether a run of `gpu_start` under the fake driver found its cuInit under way at exit:
/// the fake marks cuInit's entry and return in files (`FAKE_CUINIT_MARK`).
struct CuInitMarks(PathBuf);

impl CuInitMarks {
    fn new(dir: &Path, name: &str) -> CuInitMarks {
        let m = CuInitMarks(dir.join(name));
        for s in ["entered", "returned"] {
            let _ = std::fs::remove_file(m.file(s));
        }
        m
    }
    fn file(&self, suffix: &str) -> PathBuf {
        self.0.with_extension(suffix)
    }
    fn entered(&self) -> bool {
        self.file("entered").exists()
    }
    fn returned(&self) -> bool {
        self.file("returned").exists()
    }
}

#[test]
fn a_program_that_exits_while_cuinit_runs_exits_cleanly_and_soon() {
    let dir = work_dir("gpu-start-exit");
    let Some((prog, fake, plain_out)) = one_call_program(&dir) else {
        return;
    };
    // One run of the program: its one call runs on the vendor BLAS while the start runs, main
    // lingers 300 ms (so the start thread is inside cuInit however loaded the machine is) and
    // returns. Retried when cuInit was still not reached: then the exit had nothing to wait
    // for, and this test nothing to check.
    let exit_during = |cuinit_ms: &str| {
        for attempt in 0..3 {
            let marks = CuInitMarks::new(&dir, &format!("cuinit-{cuinit_ms}-{attempt}"));
            let mut cmd = with_fake(shimmed(&prog, None), &fake);
            cmd.args(["1", "1"])
                .env("FAKE_CUINIT_MS", cuinit_ms)
                .env("FAKE_CUINIT_MARK", &marks.0)
                .env("GPU_START_LINGER_MS", "300");
            let (o, took) = run(cmd);
            assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
            assert_same_output(
                "gpu_start, exit while starting",
                &plain_out.stdout,
                &o.stdout,
            );
            assert_eq!(text(&o.stderr), "", "an exit during the start is silent");
            if marks.entered() {
                return (took, marks.returned());
            }
        }
        panic!("the start never reached cuInit within 300 ms of the call, in 3 runs");
    };
    // cuInit takes 1.5 s: the exit waits for it to return (no thread of ours inside CUDA
    // while the process tears down), then finishes without a word.
    let (took, returned) = exit_during("1500");
    assert!(returned, "the process exited while cuInit ran ({took:?})");
    assert!(took < Duration::from_millis(300 + 1500 + 2500), "{took:?}");
    // A cuInit that never seems to end: the exit waits at most EXIT_WAIT (3 s), no hang.
    let (took, returned) = exit_during("60000");
    assert!(!returned);
    assert!(took >= Duration::from_millis(2900), "{took:?}");
    assert!(took < Duration::from_secs(9), "the exit hung: {took:?}");
}

/// The crash seen on the H200 machine: a script exited while the start thread was loading
/// cuBLAS, whose static objects' exit handlers (registered by its constructors) ran while its
/// loading went on. The exit must wait for the load before any library's handler runs.
#[test]
fn a_program_that_exits_while_cublas_loads_waits_before_its_teardown() {
    let dir = work_dir("gpu-start-exit-load");
    let Some(prog) = build_c(&dir, "gpu_start", &["-lblas"]) else {
        return;
    };
    let fake = fake_cuda(&dir);
    for _ in 0..3 {
        let mut cmd = with_fake(shimmed(&prog, None), &fake);
        cmd.args(["1", "1"]).env("FAKE_LOAD_MS", "400");
        let (o, took) = run(cmd);
        assert_eq!(
            o.status.code(),
            Some(0),
            "exit status {} (an abort: library code ran after its teardown); stderr: {}",
            o.status,
            text(&o.stderr)
        );
        // The program's own first dlsym (the vendor's dgemm_) may wait for the loader lock
        // that the slow constructor holds, so the start can fail (fake cuInit) before the
        // exit: then its one line is there.
        let err = text(&o.stderr);
        assert!(
            err.is_empty() || (err.lines().count() == 1 && err.contains("could not be started")),
            "{err}"
        );
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
}

/// The start loads cuBLAS while another thread initialises the driver: with a cuInit and a
/// cuBLAS load of 0.8 s each, the start (here failing, as the fake driver sees no GPU) takes
/// about 0.8 s, not the 1.6 s of one after the other (`OZAKI_LOG=info` reports its length).
#[test]
fn the_start_loads_the_libraries_while_the_driver_initialises() {
    let dir = work_dir("gpu-start-overlap");
    let Some((prog, fake, _)) = one_call_program(&dir) else {
        return;
    };
    let marks = CuInitMarks::new(&dir, "overlap");
    let mut cmd = with_fake(shimmed(&prog, None), &fake);
    cmd.args(["1", "1"])
        .env("FAKE_CUINIT_MS", "800")
        .env("FAKE_LOAD_MS", "800")
        .env("FAKE_CUINIT_MARK", &marks.0)
        .env("GPU_START_LINGER_MS", "2500")
        .env("OZAKI_LOG", "ozaki_shim=info")
        .env("NO_COLOR", "1");
    let (o, _) = run(cmd);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(marks.entered() && marks.returned(), "{err}");
    // `... auto: GPU start ms=812.3 up=false`
    let ms: f64 = err
        .lines()
        .find(|l| l.contains("auto: GPU start") && !l.contains("warm-up"))
        .and_then(|l| l.split("ms=").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no start length in: {err}"));
    assert!(
        (750.0..1400.0).contains(&ms),
        "the start took {ms} ms with cuInit and the cuBLAS load at 800 ms each"
    );
}

/// What the shim prices a `gpu_start` product at with `profile` (the fake CUDA libraries, no
/// start): the first call's predicted seconds per route, from its trace, and the seconds it
/// took on the vendor BLAS. The tests below set up their scenarios from these prices rather
/// than from one profile's numbers, so a refitted profile keeps them meaningful.
fn priced(dir: &Path, profile: &Path) -> Option<(std::collections::BTreeMap<String, f64>, f64)> {
    priced_at(dir, profile, "384")
}

/// [`priced`] for products of order `n`.
fn priced_at(
    dir: &Path,
    profile: &Path,
    n: &str,
) -> Option<(std::collections::BTreeMap<String, f64>, f64)> {
    let prog = build_c(dir, "gpu_start", &["-lblas"])?;
    let fake = fake_cuda(dir);
    let trace = dir.join("priced.jsonl");
    let mut cmd = with_fake(shimmed(&prog, Some(&trace)), &fake);
    cmd.args(["1", "1", n]).env("OZAKI_PROFILE", profile);
    let (o, _) = run(cmd);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let calls = read_trace(&trace).calls;
    let e = calls[0].engine.as_ref().expect("engine field");
    let prices = e.predicted_s.iter().map(|(k, v)| (k.clone(), *v)).collect();
    Some((prices, calls[0].dur_ns as f64 * 1e-9))
}

/// The factor on `base`'s CPU BLAS rate that prices a `gpu_start` product `ratio` times the
/// price of `route` on the vendor (the rate term is nearly all of the vendor's price at that
/// size), with the call's measured vendor time.
fn cpu_factor_for_profile(dir: &Path, base: &Path, route: &str, ratio: f64) -> Option<(f64, f64)> {
    let (prices, measured) = priced(dir, base)?;
    Some((ratio * prices[route] / prices["vendor"], measured))
}

/// [`cpu_factor_for_profile`] of the shipped profile.
fn cpu_factor_for(dir: &Path, route: &str, ratio: f64) -> Option<f64> {
    cpu_factor_for_profile(dir, &repo_root().join("profiles/h200.json"), route, ratio).map(|f| f.0)
}

/// A profile's GPU routes priced `extra_s` more per call.
fn slow_gpu_calls(p: &mut serde_json::Value, extra_s: f64) {
    for o in p["gpu"]["route_overhead_s"]
        .as_object_mut()
        .unwrap()
        .values_mut()
    {
        *o = serde_json::json!(o.as_f64().unwrap() + extra_s);
    }
}

/// Runs `gpu_start` with `args`, traced, with the fake CUDA libraries and `profile`, staying
/// 300 ms before it returns so that a start under way reaches cuInit; asserts a clean exit
/// and returns the calls and whether cuInit was entered. `name` keeps the files of one run
/// apart from another's in `dir`.
fn traced_start(
    dir: &Path,
    name: &str,
    profile: &Path,
    args: &[&str],
) -> (Vec<ozaki_core::trace::CallRecord>, bool) {
    let prog = build_c(dir, "gpu_start", &["-lblas"]).expect("a C compiler and BLAS");
    let fake = fake_cuda(dir);
    let marks = CuInitMarks::new(dir, name);
    let trace = dir.join(format!("{name}.jsonl"));
    let mut cmd = with_fake(shimmed(&prog, Some(&trace)), &fake);
    cmd.args(args)
        .env("OZAKI_PROFILE", profile)
        .env("FAKE_CUINIT_MARK", &marks.0)
        .env("GPU_START_LINGER_MS", "300");
    let (o, _) = run(cmd);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    (read_trace(&trace).calls, marks.entered())
}

/// Runs `gpu_start THREADS CALLS` traced, with the fake CUDA libraries and `profile`, asserts
/// that the GPU start never reached cuInit (`what` names the calls that must not start it)
/// and that every call says so, and returns the calls; `None` without a C compiler or BLAS.
fn calls_that_leave_the_gpu_unstarted(
    dir: &Path,
    profile: &Path,
    args: &[&str],
    what: &str,
) -> Option<Vec<ozaki_core::trace::CallRecord>> {
    let prog = build_c(dir, "gpu_start", &["-lblas"])?;
    let fake = fake_cuda(dir);
    let trace = dir.join("t.jsonl");
    let marks = CuInitMarks::new(dir, "unstarted");
    let mut cmd = with_fake(shimmed(&prog, Some(&trace)), &fake);
    cmd.args(args)
        .env("OZAKI_PROFILE", profile)
        .env("FAKE_CUINIT_MARK", &marks.0);
    let (o, _) = run(cmd);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!marks.entered(), "the GPU was started for {what}");
    let calls = read_trace(&trace).calls;
    for c in &calls {
        assert_eq!(c.route, "vendor");
        let e = c.engine.as_ref().expect("engine field");
        assert!(e.reason.contains("not started"), "{}", e.reason);
    }
    Some(calls)
}

/// Calls that gain, but never enough to pay for the start, never start it: products priced
/// 4x faster on the GPU than on the vendor, whose gains together stay far below a quarter of
/// a 10 s start.
#[test]
fn calls_that_never_gain_enough_never_start_the_gpu() {
    let dir = work_dir("gpu-start-never-pays");
    let Some(factor) = cpu_factor_for(&dir, "gpu-ozaki", 4.0) else {
        return;
    };
    let slow_start = dir.join("slow-start.json");
    write_profile(&slow_start, |p| {
        p["gpu"]["start_s"] = serde_json::json!(10.0);
        slow_cpu_blas(p, factor);
    });
    let what = "calls that never pay";
    if let Some(calls) = calls_that_leave_the_gpu_unstarted(&dir, &slow_start, &["2", "4"], what) {
        assert_eq!(calls.len(), 8);
        let mut gained = 0.0;
        for c in &calls {
            let p = &c.engine.as_ref().expect("engine field").predicted_s;
            assert!(p["vendor"] > 2.0 * p["gpu-ozaki"], "{p:?}: no gain priced");
            gained += p["vendor"] - p["gpu-ozaki"];
        }
        assert!(gained < 0.25 * 10.0, "{gained} s gained: enough to start");
    }
}

/// A gain priced by a GPU only a little faster than the vendor does not count toward the
/// start, however cheap the start: with a start priced at 0.1 ms, products of 384² priced
/// 1.5x faster on the GPU leave cuInit untouched. The GPU is priced at least the product's
/// measured vendor time twice over, so that what the calls measure does not credit the
/// start either, even a call slowed twofold by tests running beside it (a vendor call
/// measured several times the GPU's price does credit it, by design).
#[test]
fn calls_priced_only_a_little_faster_on_the_gpu_never_start_it() {
    let dir = work_dir("gpu-start-close");
    let Some((_, measured)) = priced(&dir, &repo_root().join("profiles/h200.json")) else {
        return;
    };
    let slow_gpu = dir.join("slow-gpu.json");
    write_profile(&slow_gpu, |p| slow_gpu_calls(p, 2.0 * measured));
    let Some((factor, _)) = cpu_factor_for_profile(&dir, &slow_gpu, "gpu-ozaki", 1.5) else {
        return;
    };
    let cheap = dir.join("cheap-start.json");
    write_profile(&cheap, |p| {
        p["gpu"]["start_s"] = serde_json::json!(1e-4);
        slow_gpu_calls(p, 2.0 * measured);
        slow_cpu_blas(p, factor);
    });
    let what = "margin-close gains";
    let Some(calls) = calls_that_leave_the_gpu_unstarted(&dir, &cheap, &["1", "4"], what) else {
        return;
    };
    assert_eq!(calls.len(), 4);
    for c in &calls {
        let p = &c.engine.as_ref().expect("engine field").predicted_s;
        assert!(
            p["vendor"] < 2.0 * p["gpu-ozaki"],
            "{p:?}: not margin-close"
        );
        assert!(
            p["vendor"] > 1.2 * p["gpu-ozaki"],
            "{p:?}: not a gain at all"
        );
    }
}

/// A vendor call priced close to the GPU but measured far slower than the GPU's price credits
/// the start with what it measured: margin-close products, with the GPU priced far below what
/// the vendor measures, start the GPU as the first call ends.
#[test]
fn vendor_calls_measured_far_slower_than_the_gpus_price_start_it() {
    let dir = work_dir("gpu-start-measured");
    // Products of order 768: the reference BLAS's time grows with n^3 while the GPU's price
    // is mostly its fixed costs, so the premise below holds on a fast machine too (at 384 a
    // machine that ran the product in 25 ms came within 1% of it).
    const N: &str = "768";
    let Some((prices, measured)) = priced_at(&dir, &repo_root().join("profiles/h200.json"), N)
    else {
        return;
    };
    // a 768² product on the reference BLAS takes a few hundred milliseconds, the GPU is
    // priced a few: a vendor call measured above `CREDIT_RATIO` (4x) times the GPU's price
    // credits the start (with a margin for timing noise)
    assert!(
        measured > 6.5 * prices["gpu-ozaki"],
        "the vendor's {measured} s is not far above the GPU's price {prices:?}"
    );
    // the vendor priced 1.5x the GPU (no gain counted), measured more than 4x the GPU's price
    let factor = 1.5 * prices["gpu-ozaki"] / prices["vendor"];
    let close = dir.join("close.json");
    write_profile(&close, |p| {
        p["gpu"]["start_s"] = serde_json::json!(1e-4);
        slow_cpu_blas(p, factor);
    });
    // two calls: the first one's measured time starts the GPU, before the vendor's class
    // could be corrected by a streak of measurements
    let (calls, started) = traced_start(&dir, "measured", &close, &["1", "2", N]);
    assert!(started, "the measured gains did not start the GPU");
    let first = calls[0].engine.as_ref().expect("engine field");
    assert!(first.reason.contains("not started"), "{}", first.reason);
    // the start begins as that call ends, not at the next call priced close to the GPU: a
    // program that makes no such call after it still gets its GPU started
    let (calls, started) = traced_start(&dir, "measured-alone", &close, &["1", "1", N]);
    assert_eq!(calls.len(), 1);
    assert!(
        started,
        "a call whose measured time covered the start did not start the GPU as it ended"
    );
}

/// One call whose priced gain covers the start starts it at once: a profile whose CPU BLAS
/// is 1000x slower prices one 384² product about 1.5 s faster on the GPU, above a quarter
/// of the 0.9 s start, and cuInit is entered while the program runs.
#[test]
fn one_call_whose_gain_covers_the_start_starts_it() {
    let dir = work_dir("gpu-start-pays");
    let Some(prog) = build_c(&dir, "gpu_start", &["-lblas"]) else {
        return;
    };
    let fake = fake_cuda(&dir);
    let slow = dir.join("slow-cpu.json");
    write_profile(&slow, |p| slow_cpu_blas(p, 1000.0));
    let marks = CuInitMarks::new(&dir, "pays");
    let mut cmd = with_fake(shimmed(&prog, None), &fake);
    cmd.args(["1", "1"])
        .env("OZAKI_PROFILE", &slow)
        .env("FAKE_CUINIT_MARK", &marks.0)
        .env("GPU_START_LINGER_MS", "300");
    let (o, _) = run(cmd);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        marks.entered(),
        "one call worth the start did not start the GPU"
    );
}

/// A vendor BLAS measured far slower than the profile prices it is no longer "clearly
/// faster" than the GPU: with a profile whose CPU BLAS prices every 384² product 8x ahead of
/// the GPU (clearly the vendor's), the reference BLAS takes hundreds of times longer than
/// that price. Those calls are timed, their class's correction reaches its limit after a few
/// samples, the corrected vendor is then well behind the GPU, and the gains start the GPU
/// while the program runs.
#[test]
fn a_vendor_measured_much_slower_than_priced_starts_the_gpu() {
    let dir = work_dir("gpu-start-measured");
    let Some(factor) = cpu_factor_for(&dir, "gpu-native", 1.0 / 8.0) else {
        return;
    };
    let fast = dir.join("fast-cpu.json");
    write_profile(&fast, |p| {
        p["gpu"]["start_s"] = serde_json::json!(1e-4);
        slow_cpu_blas(p, factor);
    });
    let (calls, started) = traced_start(&dir, "slow-vendor", &fast, &["1", "16"]);
    let first = calls[0].engine.as_ref().expect("engine field");
    let p = &first.predicted_s;
    assert!(
        p["gpu-native"] >= 2.0 * p["vendor"] && p["gpu-native"] <= 64.0 * p["vendor"],
        "{p:?}: the first call is not priced clearly (and correctably) the vendor's"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.engine.as_ref().is_some_and(|e| e.gpu_start.is_some())),
        "no call saw the GPU start"
    );
    assert!(
        started,
        "a vendor measured far slower than priced did not start the GPU"
    );
}

/// Writes to `path` a profile that prices the `gpu_start` products of order `n`
/// `vendor_over_gpu` times faster on a quiet GPU than on the vendor BLAS, the vendor at what
/// the first one measured; whose vendor wake (`copy_slowdown` 1000 for 10 s) stretches a GPU
/// call's copies after every vendor call past half the vendor's price; and whose GPU start
/// costs three quiet gains of such calls priced 4x faster on the GPU (more than one call
/// measured twice its time on a busy machine credits). Returns the quiet GPU price.
fn profile_with_wake(dir: &Path, path: &Path, n: &str, vendor_over_gpu: f64) -> Option<f64> {
    let base = repo_root().join("profiles/h200.json");
    build_c(dir, "gpu_start", &["-lblas"])?;
    // the prices of the first call, and the vendor's time from the fastest of a few: a first
    // call on a busy machine (tests running beside it) can take twice as long as the others
    let (calls, _) = traced_start(dir, "vendor-time", &base, &["1", "4", n]);
    let prices = &calls[0].engine.as_ref().expect("engine field").predicted_s;
    let measured = calls.iter().map(|c| c.dur_ns).min().expect("calls") as f64 * 1e-9;
    let gpu = prices["gpu-native"].min(prices["gpu-ozaki"]);
    let quiet = measured / vendor_over_gpu;
    // the GPU's fixed costs leave room below the vendor's measured time
    assert!(
        quiet > 1.2 * gpu,
        "order {n}: the vendor's {measured} s is too close to the GPU's price {prices:?}"
    );
    // three quiet gains of a program priced 4x faster on the GPU, whatever this profile's
    // ratio (a background start costs a quarter of its time: `BACKGROUND_COST_SHARE`)
    let start_s = 4.0 * 3.0 * (measured - measured / 4.0);
    write_profile(path, |p| {
        p["gpu"]["start_s"] = serde_json::json!(start_s);
        slow_cpu_blas(p, measured / prices["vendor"]);
        slow_gpu_calls(p, quiet - gpu);
        p["cpu"]["wake"] = serde_json::json!({"window_s": 10.0, "copy_slowdown": 1000.0});
    });
    Some(quiet)
}

/// Calls made one after another, each priced 4x faster on a quiet GPU but slower on the GPU
/// in the vendor's wake, start the GPU once the program is seen to be on the GPU's side: once
/// the GPU is up its calls follow GPU calls, where no wake is left. Only the first call,
/// made before any wake, would count otherwise, and the start costs three. The same calls
/// priced only 1.1x faster on a quiet GPU (the program on the vendor's side) leave it
/// unstarted.
#[test]
fn a_program_on_the_gpus_side_starts_it_despite_the_vendors_wake() {
    let dir = work_dir("gpu-start-sides");
    const N: &str = "512";
    let gpu_side = dir.join("gpu-side.json");
    let Some(quiet) = profile_with_wake(&dir, &gpu_side, N, 4.0) else {
        return;
    };
    let (calls, started) = traced_start(&dir, "sides", &gpu_side, &["1", "12", N]);
    // the second call came in the first one's wake, priced past twice the vendor's price
    let second = calls[1].engine.as_ref().expect("engine field");
    let wake = second.wake_s.expect("the wake was priced");
    assert!(
        second.predicted_s["vendor"] < 2.0 * (quiet + wake),
        "{second:?}: the wake leaves the GPU a gain worth counting"
    );
    assert!(second.reason.contains("not started"), "{}", second.reason);
    assert!(started, "a program on the GPU's side did not start the GPU");

    let vendor_side = dir.join("vendor-side.json");
    profile_with_wake(&dir, &vendor_side, N, 1.1).expect("priced above");
    let what = "a program on the vendor's side";
    calls_that_leave_the_gpu_unstarted(&dir, &vendor_side, &["1", "12", N], what);
}

/// A product `auto` keeps on the vendor while the GPU starts in the background runs the
/// vendor at one thread fewer than its count, which it gets back once the call returned: the
/// start's thread keeps a core busy. `OZAKI_VENDOR_THREADS=keep` leaves the count alone. The
/// stand-in OpenBLAS (`tests/c/narrow_vendor.c`, 16 threads, exact loops) counts the calls it
/// saw at fewer threads; here cuInit takes 0.8 s, so the first calls run beside the start.
#[test]
fn calls_beside_the_start_leave_it_a_vendor_thread() {
    let dir = work_dir("gpu-start-spare");
    let Some((prog, fake, _)) = one_call_program(&dir) else {
        return;
    };
    let Some(vendor) = shared_lib(&dir, "narrow_vendor.c", "libnarrow_vendor.so", &[]) else {
        return;
    };
    let mut outputs = Vec::new();
    for (setting, spared) in [(None, true), (Some("keep"), false)] {
        let what = format!("OZAKI_VENDOR_THREADS={setting:?}");
        let trace = dir.join(format!("{}.jsonl", setting.unwrap_or("default")));
        let mut cmd = with_fake(shimmed(&prog, Some(&trace)), &fake);
        cmd.args(["1", "3"])
            .env("FAKE_CUINIT_MS", "800")
            .env("OZAKI_VENDOR_BLAS", &vendor);
        if let Some(s) = setting {
            cmd.env("OZAKI_VENDOR_THREADS", s);
        }
        let (o, _) = run(cmd);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{what}: {err}");
        let (line, n) = numbers_after(&err, "narrow-vendor: ")
            .unwrap_or_else(|| panic!("{what}: no report from the stand-in vendor: {err}"));
        let [fewer, all, last] = n[..] else {
            panic!("{what}: {line}")
        };
        let calls = read_trace(&trace).calls;
        let beside = calls
            .iter()
            .filter(|c| {
                c.engine
                    .as_ref()
                    .and_then(|e| e.gpu_start.as_ref())
                    .is_some_and(|s| s.during == DuringStart::Vendor)
            })
            .count() as i64;
        assert_eq!(
            fewer + all,
            3,
            "{what}: every call reached the vendor: {line}"
        );
        assert!(beside >= 1, "{what}: the first call ran beside the start");
        assert_eq!(
            fewer,
            if spared { beside } else { 0 },
            "{what}: the calls beside the start, and only those, left it a thread: {line}"
        );
        assert_eq!(last, 16, "{what}: the vendor's count is set back: {line}");
        outputs.push(o.stdout);
    }
    assert_eq!(outputs[0], outputs[1], "C is the vendor's either way");
}
