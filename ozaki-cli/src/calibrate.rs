//! `ozaki calibrate [--out FILE]`: measures this machine and writes its engine profile
//!. The plan, the measurement format and the fits are in
//! `ozaki_core::engine::calibrate`; this file only times things.
//!
//! CPU side: the vendor BLAS is opened with `dlopen` (`--blas`, else the usual sonames, else
//! NumPy's bundled OpenBLAS) and its `dgemm` timed by shape at the default and one thread.
//! GPU side: through `gpu-kernels` (cuBLAS DGEMM, INT8 GEMM, conversion, reconstruction,
//! launch/sync latency, host link pinned/pageable/staged both ways, free memory and the
//! largest allocation, and whether the INT8 kernels reached the tensor cores); without a
//! usable GPU the profile is CPU-only and says so.
//!
//! Every GPU of the host (or of `OZAKI_DEVICES`) is surveyed after the full measurement of
//! the first one: one large DGEMM and INT8 GEMM and its staged host link alone,
//! then all of them copying at once and a few calls split over them by the real executor;
//! the profile's `devices` and `host_share` come from these (`--no-survey` skips it).
//!
//! `--fit MEAS.json` refits a profile from saved measurements without timing anything;
//! `--validate` times the held-out shapes on every available route and prints the
//! predicted-vs-measured table and auto-vs-oracle totals.

use anyhow::Context;
use clap::Parser;
use ozaki_core::engine::CallShape;
use ozaki_core::engine::Residency;
use ozaki_core::engine::calibrate::{
    self as cal, CpuSamples, Measurements, Mnk, Plan, RouteSample, ValidationReport,
};
use ozaki_core::engine::choose::Engine;
use ozaki_core::engine::model::Sample;
use ozaki_core::engine::priced_moduli::priced_moduli;
use ozaki_core::engine::profile::{self, Machine, PROFILE_VERSION, Profile};
use ozaki_core::trace::Routine;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

mod wake;

/// Measure this machine and write its engine profile.
#[derive(Parser, Debug)]
#[command(about = "measure this machine and write its engine profile")]
struct Args {
    /// Profile to write (default: the per-GPU profile in the cache dir).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the raw measurements here (default: next to the profile, .measurements.json).
    #[arg(long)]
    measurements: Option<PathBuf>,
    /// Refit from saved measurements instead of measuring.
    #[arg(long)]
    fit: Option<PathBuf>,
    /// Profile name written into the file.
    #[arg(long)]
    name: Option<String>,
    /// Source line written into the profile (default: the command, host and date).
    #[arg(long)]
    source: Option<String>,
    /// Vendor BLAS library to time (default: libopenblas.so.0, libblas.so.3, NumPy's bundled OpenBLAS).
    #[arg(long)]
    blas: Option<String>,
    /// Smaller plan (smoke test, seconds instead of minutes).
    #[arg(long)]
    quick: bool,
    /// Skip the GPU even when one is present.
    #[arg(long)]
    cpu_only: bool,
    /// Skip the per-device survey even with several GPUs.
    #[arg(long)]
    no_survey: bool,
    /// Only survey the GPUs (each device's rates and staged link, all of them
    /// copying at once, measured splits) and merge that into an existing profile (`--base`,
    /// else the one this machine resolves: OZAKI_PROFILE, the cache, or the built-in one);
    /// seconds instead of minutes.
    #[arg(long, conflicts_with_all = ["fit", "no_survey", "cpu_only"])]
    survey_only: bool,
    /// Fold what these traces measured (each call's time against the engine's prediction
    /// for the route it ran) into an existing profile's end-to-end corrections (`--base`,
    /// else the one this machine resolves), written to `--out` or the per-GPU profile in
    /// the cache dir; nothing is timed.
    #[arg(long, num_args = 1.., conflicts_with_all = ["fit", "survey_only", "validate"])]
    from_trace: Vec<PathBuf>,
    /// With --survey-only or --from-trace: the profile to start from.
    #[arg(long)]
    base: Option<PathBuf>,
    /// After fitting, time the held-out validation shapes and print predicted vs measured.
    #[arg(long)]
    validate: bool,
    /// Write the validation report (JSON) here.
    #[arg(long)]
    validation_out: Option<PathBuf>,
    /// Time one start of the GPU in this process and print its seconds (the child process
    /// with which a calibration measures the start a later program pays).
    #[arg(long, hide = true)]
    time_start: bool,
    /// Validate this profile instead of the one just fitted (no calibration).
    #[arg(long)]
    validate_profile: Option<PathBuf>,
    /// With --validate-profile: score it on the samples of a saved validation report
    /// (--validation-out of an earlier run) instead of timing anything.
    #[arg(long, requires = "validate_profile")]
    rescore: Option<PathBuf>,
}

pub fn main(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let a = Args::parse_from(args);
    if a.time_start {
        let t = Instant::now();
        let started = gpu_kernels::gpu().map_err(|e| anyhow::anyhow!("{e}"))?;
        let s = t.elapsed().as_secs_f64();
        drop(started);
        println!("{s}");
        return Ok(ExitCode::SUCCESS);
    }
    if let (Some(p), Some(r)) = (&a.validate_profile, &a.rescore) {
        let prof = Profile::load(p).map_err(anyhow::Error::msg)?;
        let text = std::fs::read_to_string(r).with_context(|| format!("{}", r.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}", r.display()))?;
        let samples: Vec<RouteSample> =
            serde_json::from_value(v.get("samples").cloned().context("report has no samples")?)?;
        let threads = prof.cpu.blas.first().map_or(1, |c| c.threads);
        let rep = cal::validate(&prof, threads, &samples, &|s: &CallShape| {
            Some(priced_moduli(s.k, None))
        });
        write_validation(&rep, a.validation_out.as_deref())?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(p) = &a.validate_profile {
        let prof = Profile::load(p).map_err(anyhow::Error::msg)?;
        let plan = Plan::standard(a.quick);
        let blas = cpu::VendorBlas::open(a.blas.as_deref())?;
        let rep = validate(&prof, &plan, &blas, a.cpu_only)?;
        write_validation(&rep, a.validation_out.as_deref())?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.survey_only {
        return survey_only(&a);
    }
    if !a.from_trace.is_empty() {
        return from_trace(&a);
    }
    let (meas, plan, blas) = match &a.fit {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
            (
                serde_json::from_str::<Measurements>(&text)
                    .with_context(|| format!("{}", path.display()))?,
                Plan::standard(a.quick),
                None,
            )
        }
        None => {
            let plan = Plan::standard(a.quick);
            let blas = cpu::VendorBlas::open(a.blas.as_deref())?;
            (
                measure(&plan, &blas, a.cpu_only, !a.no_survey)?,
                plan,
                Some(blas),
            )
        }
    };
    let gpu_name = meas.gpu.as_ref().map(|g| g.name.clone());
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| gpu_name.as_deref().map_or("cpu".into(), profile::gpu_slug));
    let source = a.source.clone().unwrap_or_else(|| {
        format!(
            "ozaki calibrate{} on {} at {}",
            if a.fit.is_some() {
                " --fit (refit of saved measurements)"
            } else {
                ""
            },
            meas.machine.host.as_deref().unwrap_or("?"),
            meas.machine.date.as_deref().unwrap_or("?")
        )
    });
    let prof = cal::fit_profile(&meas, &name, &source).map_err(anyhow::Error::msg)?;
    let out = match &a.out {
        Some(p) => p.clone(),
        None => profile::default_path(gpu_name.as_deref())
            .context("no cache directory (set HOME or XDG_CACHE_HOME) and no --out")?,
    };
    prof.save(&out)
        .with_context(|| format!("{}", out.display()))?;
    println!("profile written: {}", out.display());
    if a.fit.is_none() {
        let mpath = a
            .measurements
            .clone()
            .unwrap_or_else(|| out.with_extension("measurements.json"));
        let mut text = serde_json::to_string_pretty(&meas)?;
        text.push('\n');
        std::fs::write(&mpath, text).with_context(|| format!("{}", mpath.display()))?;
        println!("measurements written: {}", mpath.display());
    }
    print_profile_summary(&prof);
    if a.validate {
        let blas = match blas {
            Some(b) => b,
            None => cpu::VendorBlas::open(a.blas.as_deref())?,
        };
        let rep = validate(&prof, &plan, &blas, a.cpu_only)?;
        write_validation(&rep, a.validation_out.as_deref())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--from-trace`: measured calls folded into an existing profile's corrections.
fn from_trace(a: &Args) -> anyhow::Result<ExitCode> {
    let mut prof = match &a.base {
        Some(p) => Profile::load(p).map_err(anyhow::Error::msg)?,
        None => {
            let env = ozaki_core::env::var(ozaki_core::env::PROFILE);
            let gpu = ozaki_shim::route::choose::gpu_traits();
            let (p, _, warn) =
                profile::resolve(env.as_deref(), gpu.as_ref()).map_err(anyhow::Error::msg)?;
            if let Some(w) = warn {
                eprintln!("ozaki calibrate: {w}");
            }
            p
        }
    };
    let mut calls = Vec::new();
    for path in &a.from_trace {
        let loaded = crate::tracefile::load(path)?;
        for n in &loaded.notes {
            eprintln!("ozaki calibrate: {n}");
        }
        calls.extend(loaded.trace.calls);
    }
    let folded = ozaki_core::engine::correct::fold_into_profile(&mut prof, &calls);
    if folded.is_empty() {
        eprintln!(
            "ozaki calibrate: no record carries a prediction for the route it ran alone \
             (traces of OZAKI_ROUTE=auto runs do); the profile is unchanged"
        );
    }
    for (route, records, shapes) in &folded {
        println!("{route}: {records} measured calls folded into {shapes} correction points");
    }
    let out = match &a.out {
        Some(p) => p.clone(),
        None => profile::default_path(prof.gpu.as_ref().map(|g| g.name.as_str()))
            .context("no cache directory (set HOME or XDG_CACHE_HOME) and no --out")?,
    };
    prof.save(&out)
        .with_context(|| format!("{}", out.display()))?;
    println!("profile written: {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// `--survey-only`: the per-device part of a calibration, merged into an existing profile.
fn survey_only(a: &Args) -> anyhow::Result<ExitCode> {
    let t = Instant::now();
    let gpu =
        ozaki_shim::route::choose::gpu_traits().context("--survey-only needs a usable GPU")?;
    let mut prof = match &a.base {
        Some(p) => Profile::load(p).map_err(anyhow::Error::msg)?,
        None => {
            let env = ozaki_core::env::var(ozaki_core::env::PROFILE);
            let (p, src, warn) =
                profile::resolve(env.as_deref(), Some(&gpu)).map_err(anyhow::Error::msg)?;
            if let Some(w) = warn {
                eprintln!("ozaki calibrate: {w}");
            }
            eprintln!("ozaki calibrate: merging the survey into {src:?}");
            p
        }
    };
    let plan = Plan::standard(a.quick);
    let (devices, share) = gpu::survey(&gpu::pool(), &plan);
    if devices.is_empty() {
        anyhow::bail!("no GPU could be surveyed");
    }
    cal::merge_devices(&mut prof, &devices, share.as_ref());
    prof.version = PROFILE_VERSION;
    if let Some(n) = &a.name {
        prof.name = n.clone();
    }
    prof.source = a.source.clone().unwrap_or_else(|| {
        format!(
            "{}; GPUs surveyed by ozaki calibrate --survey-only on {} at {}",
            prof.source,
            machine().host.as_deref().unwrap_or("?"),
            profile::utc_now()
        )
    });
    let out = match &a.out {
        Some(p) => p.clone(),
        None => profile::default_path(Some(&gpu.name))
            .context("no cache directory (set HOME or XDG_CACHE_HOME) and no --out")?,
    };
    prof.save(&out)
        .with_context(|| format!("{}", out.display()))?;
    println!("profile written: {}", out.display());
    let mpath = a
        .measurements
        .clone()
        .unwrap_or_else(|| out.with_extension("survey.json"));
    let raw = serde_json::json!({"version": PROFILE_VERSION, "devices": devices, "share": share});
    std::fs::write(&mpath, serde_json::to_string_pretty(&raw)? + "\n")
        .with_context(|| format!("{}", mpath.display()))?;
    println!("survey measurements written: {}", mpath.display());
    print_profile_summary(&prof);
    println!("survey took {:.1} s", t.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

fn print_profile_summary(p: &Profile) {
    for c in &p.cpu.blas {
        println!(
            "cpu BLAS ({}) at {} threads: {:.1} GFLOP/s sustained on the mnk term",
            p.cpu.vendor_blas,
            c.threads,
            c.model.peak_flops() / 1e9
        );
    }
    match &p.cpu.wake {
        Some(w) => println!(
            "vendor wake: host copies {:.2}x slower for {:.0} ms after a vendor call",
            w.copy_slowdown,
            w.window_s * 1e3
        ),
        None => println!("vendor wake: host copies after a vendor call run as on a quiet host"),
    }
    match &p.gpu {
        None => println!("gpu: none (CPU-only profile; GPU routes are never chosen)"),
        Some(g) => {
            println!(
                "gpu {}: fp64 {:.1} TFLOP/s, int8 {:.0} TOPS (mnk terms)",
                g.name,
                g.fp64.peak_flops() / 1e12,
                g.int8.peak_flops() / 1e12
            );
            println!(
                "link: pinned {:.1}/{:.1} GB/s, pageable {:.1}/{:.1}, staged {:.1}/{:.1} (h2d/d2h); overlap {:.2}",
                g.link.h2d_pinned / 1e9,
                g.link.d2h_pinned / 1e9,
                g.link.h2d_pageable / 1e9,
                g.link.d2h_pageable / 1e9,
                g.link.h2d_staged / 1e9,
                g.link.d2h_staged / 1e9,
                g.overlap
            );
            println!(
                "page-locked uploads (A and B locked for the call): {:.1} GB/s, {}",
                g.link.h2d_registered / 1e9,
                if g.link.registers() {
                    "faster than staged: OZAKI_HOST_REGISTER=auto page-locks"
                } else {
                    "not faster than staged (or not measured): OZAKI_HOST_REGISTER=auto stages"
                }
            );
            for (r, x) in &g.reached {
                println!(
                    "reached {r}: {} ({})",
                    if x.ok { "yes" } else { "NO" },
                    x.evidence
                );
            }
        }
    }
    for d in &p.devices {
        println!(
            "device {} ({}): fp64 {:.1} TFLOP/s, int8 {:.0} TOPS, staged link alone {:.1}/{:.1} GB/s (h2d/d2h)",
            d.id.ordinal,
            d.id.name,
            d.fp64_flops / 1e12,
            d.int8_ops / 1e12,
            d.h2d_staged / 1e9,
            d.d2h_staged / 1e9
        );
    }
    if let Some(h) = &p.host_share {
        // what the engine prices with (a share fitted to measured splits wins over the links)
        let share = ozaki_core::engine::split::link_share(p, h.devices.len());
        println!(
            "host link with GPUs {:?} copying at once: {:.1}/{:.1} GB/s (h2d/d2h) in all: {} (each GPU priced at {:.0}% of its own); split host terms: {:.2} ms fixed + {:.3} ns per byte of C",
            h.devices,
            h.h2d_staged_all / 1e9,
            h.d2h_staged_all / 1e9,
            if ozaki_core::engine::split::shared_link(p) {
                "shared"
            } else {
                "not shared"
            },
            share * 100.0,
            h.split_overhead_s * 1e3,
            h.assemble_s_per_byte * 1e9
        );
    }
}

fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|x| x.trim().to_string())
    });
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string());
    Machine {
        gpu: None,
        driver: None,
        cuda: None,
        cpu,
        host,
        date: Some(ozaki_core::engine::profile::utc_now()),
    }
}

/// Median seconds of `f` over repeats: one warm-up, then at least 3 runs and until 0.2 s of
/// timed work (at most 200 runs).
pub fn time_median(mut f: impl FnMut()) -> f64 {
    f();
    let mut v = Vec::new();
    let start = Instant::now();
    while v.len() < 3 || (start.elapsed().as_secs_f64() < 0.2 && v.len() < 200) {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64());
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The shape whose per-call time is measured under concurrent callers: the largest CPU
/// shape of the plan up to 512³ (long enough to time, short enough for 16 callers at once).
fn concurrency_shape(shapes: &[(u64, u64, u64)]) -> (u64, u64, u64) {
    shapes
        .iter()
        .copied()
        .filter(|&(m, n, k)| m * n * k <= 1 << 27)
        .max_by_key(|&(m, n, k)| m * n * k)
        .unwrap_or((256, 256, 256))
}

/// The vendor BLAS at `threads` threads with 1, 2, 4, ... callers at once (up to the CPU
/// count): the callers start together and each makes the same number of calls (about 50 ms
/// of them alone); the slowdown is the wall time of the whole batch over the time one caller
/// takes for its calls alone, which is what each call in flight costs its caller (the
/// engine's `load::vendor_share` prices concurrent calls with it).
///
/// A per-caller median would not see it: a BLAS that serialises concurrent calls behind an
/// unfair lock (OpenBLAS's level-3 lock) lets one caller make all its calls alone while the
/// others wait inside one long first call, so every median comes out as the time alone.
fn measure_concurrency(
    blas: &cpu::VendorBlas,
    threads: u32,
    shapes: &[(u64, u64, u64)],
) -> Vec<ozaki_core::engine::profile::ConcurrentRate> {
    let (m, n, k) = concurrency_shape(shapes);
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get() as u32);
    let per_call = blas.time_gemm(m, n, k);
    let calls = (0.05 / per_call).clamp(3.0, 200.0) as u32;
    let alone = time_together(blas, 1, calls, (m, n, k));
    let mut out = Vec::new();
    let mut callers = 2;
    while callers <= cpus.max(2) {
        let batch = time_together(blas, callers, calls, (m, n, k));
        let slowdown = batch / alone;
        eprintln!(
            "cpu {threads:>3} threads, {callers:>3} callers at once, {m}x{n}x{k}: {:.3} ms per call in flight ({slowdown:.2}x alone)",
            batch / calls as f64 * 1e3
        );
        out.push(ozaki_core::engine::profile::ConcurrentRate {
            threads,
            callers,
            slowdown,
        });
        callers *= 2;
    }
    out
}

/// Wall seconds from the moment `callers` threads, each holding its own operands, are
/// released together until the last of them has made `calls` products (one caller: the time
/// the same calls take alone, measured the same way).
fn time_together(blas: &cpu::VendorBlas, callers: u32, calls: u32, shape: (u64, u64, u64)) -> f64 {
    let (m, n, k) = shape;
    let ready = std::sync::Barrier::new(callers as usize + 1);
    let released = std::thread::scope(|s| {
        for _ in 0..callers {
            s.spawn(|| {
                let mut ops = cpu::Operands::new(m, n, k);
                ready.wait();
                for _ in 0..calls {
                    blas.call(&mut ops);
                }
            });
        }
        ready.wait();
        Instant::now()
    });
    // the scope has joined every caller
    released.elapsed().as_secs_f64()
}

fn measure(
    plan: &Plan,
    blas: &cpu::VendorBlas,
    cpu_only: bool,
    survey: bool,
) -> anyhow::Result<Measurements> {
    let mut cpu_samples = Vec::new();
    for &t in &plan.cpu_threads {
        let threads = blas.set_threads(t);
        if cpu_samples
            .iter()
            .any(|c: &CpuSamples| c.threads == threads)
        {
            continue;
        }
        let mut samples = Vec::new();
        for &(m, n, k) in &plan.cpu_shapes {
            let s = blas.time_gemm(m, n, k);
            eprintln!(
                "cpu {threads:>3} threads {m}x{n}x{k}: {:.3} ms ({:.1} GFLOP/s)",
                s * 1e3,
                2.0 * (m * n * k) as f64 / s / 1e9
            );
            samples.push(Sample {
                routine: Routine::Dgemm,
                m,
                n,
                k,
                seconds: s,
            });
        }
        cpu_samples.push(CpuSamples { threads, samples });
    }
    let threads = blas.set_threads(0);
    let concurrency = measure_concurrency(blas, threads, &plan.cpu_shapes);
    let (wake, copy_bytes_per_s) = wake::measure(blas, concurrency_shape(&plan.cpu_shapes));
    // Interposer overhead: what the shim adds per call is dominated by the cached decision.
    let engine = Engine::new(Profile::built_in("cpu-only").expect("ships"), 1);
    let shape = CallShape::gemm(8, 8, 8);
    let moduli = Some(priced_moduli(shape.k, None));
    engine.decide(&shape, moduli);
    let n = 200_000;
    let t = Instant::now();
    for i in 0..n {
        std::hint::black_box(engine.decide(
            &CallShape {
                k: 8 + (i & 1),
                ..shape
            },
            moduli,
        ));
    }
    let decision_s = t.elapsed().as_secs_f64() / n as f64;
    eprintln!("cached decision: {:.0} ns per call", decision_s * 1e9);
    let mut m = machine();
    let gpu = if cpu_only {
        None
    } else {
        gpu::measure(plan, &mut m).unwrap_or_else(|e| {
            eprintln!(
                "ozaki calibrate: GPU measurements failed ({e:#}); writing a CPU-only profile"
            );
            None
        })
    };
    let mut routes = Vec::new();
    for &(mm, nn, kk) in &plan.route_shapes {
        routes.extend(time_routes((mm, nn, kk), blas, gpu.is_some())?);
    }
    if gpu.is_some() {
        routes.extend(gpu::time_device_routes(&plan.device_route_shapes));
    }
    let (devices, share) = if survey && gpu.is_some() {
        gpu::survey(&gpu::pool(), plan)
    } else {
        (Vec::new(), None)
    };
    Ok(Measurements {
        version: PROFILE_VERSION,
        machine: m,
        vendor_blas: blas.name.clone(),
        call_overhead_s: decision_s,
        cpu: cpu_samples,
        concurrency,
        wake,
        copy_bytes_per_s,
        gpu,
        routes,
        devices,
        share,
    })
}

/// End-to-end host-resident timings of every available route at one shape.
fn time_routes(
    mnk: Mnk,
    blas: &cpu::VendorBlas,
    with_gpu: bool,
) -> anyhow::Result<Vec<RouteSample>> {
    let (m, n, k) = mnk;
    let mut out = Vec::new();
    let flops = 2.0 * (m * n * k) as f64;
    // Vendor at > ~100 s predicted time would dominate the budget: skip shapes whose work
    // exceeds 2 TFLOP on the CPU.
    if flops <= 2e12 {
        let s = blas.time_gemm(m, n, k);
        out.push(RouteSample {
            route: "vendor".into(),
            m,
            n,
            k,
            residency: Residency::Host,
            moduli: None,
            seconds: s,
        });
    }
    if with_gpu {
        out.extend(gpu::time_routes(mnk)?);
    }
    for r in &out {
        eprintln!(
            "route {:<10} {m}x{n}x{k}: {:.3} ms",
            r.route,
            r.seconds * 1e3
        );
    }
    Ok(out)
}

fn validate(
    prof: &Profile,
    plan: &Plan,
    blas: &cpu::VendorBlas,
    cpu_only: bool,
) -> anyhow::Result<ValidationReport> {
    let with_gpu = !cpu_only && prof.gpu.is_some() && gpu::available();
    let mut samples = Vec::new();
    for &mnk in &plan.validation_shapes {
        samples.extend(time_routes(mnk, blas, with_gpu)?);
    }
    let threads = blas.threads();
    Ok(cal::validate(prof, threads, &samples, &|s: &CallShape| {
        Some(priced_moduli(s.k, None))
    }))
}

fn write_validation(rep: &ValidationReport, out: Option<&std::path::Path>) -> anyhow::Result<()> {
    println!();
    println!("held-out validation ({} shapes)", rep.rows.len());
    println!("| m | n | k | route | measured ms | predicted ms | error | auto | oracle |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rep.rows {
        for (route, meas, pred) in &r.routes {
            println!(
                "| {} | {} | {} | {route} | {:.3} | {:.3} | {:+.0}% | {} | {} |",
                r.mnk.0,
                r.mnk.1,
                r.mnk.2,
                meas * 1e3,
                pred * 1e3,
                (pred / meas - 1.0) * 100.0,
                r.auto,
                r.oracle
            );
        }
    }
    for (route, e) in &rep.median_abs_err {
        println!("median |error| {route}: {:.1}%", e * 100.0);
    }
    println!(
        "median |error| overall: {:.1}%",
        rep.overall_median_abs_err * 100.0
    );
    println!(
        "auto total {:.3} s vs oracle {:.3} s: {:+.1}%",
        rep.auto_total_s,
        rep.oracle_total_s,
        (rep.auto_total_s / rep.oracle_total_s - 1.0) * 100.0
    );
    if let Some(p) = out {
        std::fs::write(p, serde_json::to_string_pretty(rep)?)
            .with_context(|| format!("{}", p.display()))?;
    }
    Ok(())
}

/// The vendor CPU BLAS, opened with dlopen.
mod cpu {
    use anyhow::Context;

    use crate::fortran_dgemm::{Dgemm, plain_nn};
    type Dgemm32 = Dgemm<i32>;
    type Dgemm64 = Dgemm<i64>;
    type SetThreads = unsafe extern "C" fn(i32);
    type GetThreads = unsafe extern "C" fn() -> i32;

    enum Gemm {
        Lp64(Dgemm32),
        Ilp64(Dgemm64),
    }

    /// A loaded vendor BLAS. The library stays loaded until the process exits: its threads
    /// (a pool still spinning after the last call) may be running its code when this is
    /// dropped, and unloading it under them would crash the process.
    pub struct VendorBlas {
        _lib: std::mem::ManuallyDrop<libloading::Library>,
        gemm: Gemm,
        set: Option<SetThreads>,
        get: Option<GetThreads>,
        default_threads: u32,
        /// What was loaded (path and symbol).
        pub name: String,
    }

    fn numpy_openblas() -> Vec<String> {
        let out = std::process::Command::new("python3")
            .args(["-c", "import numpy, glob, os; d=os.path.dirname(numpy.__file__); print('\\n'.join(glob.glob(d+'/../numpy.libs/*openblas*.so*')+glob.glob(d+'/.dylibs/*openblas*')))"])
            .output();
        out.ok()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_string)
                    .filter(|l| !l.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    impl VendorBlas {
        /// Opens `path`, or the first of the usual candidates that loads.
        pub fn open(path: Option<&str>) -> anyhow::Result<VendorBlas> {
            let mut cands: Vec<String> = match path {
                Some(p) => vec![p.to_string()],
                None => [
                    "libopenblas.so.0",
                    "libblas.so.3",
                    "libmkl_rt.so",
                    "libblis.so.4",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            };
            if path.is_none() {
                cands.extend(numpy_openblas());
            }
            let mut errs = Vec::new();
            for c in &cands {
                // SAFETY: loading a BLAS library runs its initialisers, which is what any
                // program linking it does; the candidates are BLAS libraries by name.
                let lib = match unsafe { libloading::Library::new(c) } {
                    Ok(l) => l,
                    Err(e) => {
                        errs.push(format!("{c}: {e}"));
                        continue;
                    }
                };
                // SAFETY: the symbols are looked up by their documented BLAS names and given
                // the reference Fortran signatures (hidden string lengths as size_t).
                unsafe {
                    let gemm = if let Ok(f) = lib.get::<Dgemm32>(b"dgemm_\0") {
                        Some((Gemm::Lp64(*f), "dgemm_"))
                    } else if let Ok(f) = lib.get::<Dgemm64>(b"scipy_dgemm_64_\0") {
                        Some((Gemm::Ilp64(*f), "scipy_dgemm_64_"))
                    } else if let Ok(f) = lib.get::<Dgemm64>(b"dgemm_64_\0") {
                        Some((Gemm::Ilp64(*f), "dgemm_64_"))
                    } else {
                        None
                    };
                    let Some((gemm, sym)) = gemm else {
                        errs.push(format!("{c}: no dgemm symbol"));
                        continue;
                    };
                    let set = [
                        "openblas_set_num_threads",
                        "scipy_openblas_set_num_threads64_",
                        "openblas_set_num_threads64_",
                        "MKL_Set_Num_Threads",
                        "bli_thread_set_num_threads",
                    ]
                    .iter()
                    .find_map(|n| {
                        lib.get::<SetThreads>(format!("{n}\0").as_bytes())
                            .ok()
                            .map(|f| *f)
                    });
                    let get = [
                        "openblas_get_num_threads",
                        "scipy_openblas_get_num_threads64_",
                        "openblas_get_num_threads64_",
                        "MKL_Get_Max_Threads",
                    ]
                    .iter()
                    .find_map(|n| {
                        lib.get::<GetThreads>(format!("{n}\0").as_bytes())
                            .ok()
                            .map(|f| *f)
                    });
                    let default_threads = get.map_or(1, |g| g().max(1) as u32);
                    return Ok(VendorBlas {
                        _lib: std::mem::ManuallyDrop::new(lib),
                        gemm,
                        set,
                        get,
                        default_threads,
                        name: format!("{c} ({sym})"),
                    });
                }
            }
            Err(anyhow::anyhow!(
                "no vendor BLAS could be loaded: {}",
                errs.join("; ")
            ))
            .context("pass --blas PATH")
        }

        /// Sets the thread count (0 = the library default); returns the count in effect.
        pub fn set_threads(&self, t: u32) -> u32 {
            let want = if t == 0 { self.default_threads } else { t };
            if let Some(s) = self.set {
                // SAFETY: documented thread-count setter of the loaded library.
                unsafe { s(want as i32) };
            }
            self.threads_or(want)
        }

        fn threads_or(&self, fallback: u32) -> u32 {
            // SAFETY: documented getter of the loaded library.
            self.get.map_or(fallback, |g| unsafe { g() }.max(1) as u32)
        }

        /// Threads in effect now.
        pub fn threads(&self) -> u32 {
            self.threads_or(self.default_threads)
        }

        /// Median seconds of C = A·B for m×k by k×n (column-major, beta = 0).
        pub fn time_gemm(&self, m: u64, n: u64, k: u64) -> f64 {
            let mut ops = Operands::new(m, n, k);
            super::time_median(|| self.call(&mut ops))
        }

        /// One product C = A·B of `ops`.
        pub fn call(&self, ops: &mut Operands) {
            let (m, n, k) = ops.shape;
            let (a, b, c) = (&ops.a, &ops.b, &mut ops.c);
            match self.gemm {
                // SAFETY: Operands holds m×k, k×n and m×n buffers for its shape; f is the
                // library's dgemm_ of the width it was resolved as.
                Gemm::Lp64(f) => unsafe { plain_nn(f, m as i32, n as i32, k as i32, a, b, c) },
                // SAFETY: as above with 64-bit integers.
                Gemm::Ilp64(f) => unsafe { plain_nn(f, m as i64, n as i64, k as i64, a, b, c) },
            }
        }
    }

    /// One caller's operands of C = A·B for an m×k by k×n product (column-major, nonzero
    /// data).
    pub struct Operands {
        shape: (u64, u64, u64),
        a: Vec<f64>,
        b: Vec<f64>,
        c: Vec<f64>,
    }

    impl Operands {
        pub fn new(m: u64, n: u64, k: u64) -> Operands {
            Operands {
                shape: (m, n, k),
                a: (0..m * k)
                    .map(|i| ((i * 7 + 3) % 17) as f64 / 17.0 - 0.5)
                    .collect(),
                b: (0..k * n)
                    .map(|i| ((i * 5 + 1) % 13) as f64 / 13.0 - 0.5)
                    .collect(),
                c: vec![0.0f64; (m * n) as usize],
            }
        }
    }
}

/// GPU measurements through `gpu-kernels`' public API: cuBLAS DGEMM and the device-resident
/// Ozaki pipeline timed by CUDA events (its phase times give the conversion, INT8 product and
/// reconstruction terms), the pinned link, and the host-resident routes end to end.
mod gpu {
    use super::*;
    use gpu_kernels::host::{self, Engine as HostEngine};
    use gpu_kernels::measure;
    use gpu_kernels::memory::{self, DeviceBuffer};
    use gpu_kernels::ozaki::{self, DeviceCall, Options};
    use ozaki_core::blas::{GemmArgs, Trans};
    use ozaki_core::engine::calibrate::{
        DeviceMeasurements, Direction, GpuMeasurements, HostMemory, LinkSample, ShareMeasurements,
        SplitSample, StagedSample, StreamSample,
    };
    use ozaki_core::engine::profile::{DeviceId, Reached};

    /// Whether a GPU can be measured (initialises it).
    pub fn available() -> bool {
        gpu_kernels::device::available().is_ok()
    }

    fn data(len: usize, seed: u64) -> Vec<f64> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            })
            .collect()
    }

    /// The start-up a program pays once the kernels are in the cache, priced by the shim's
    /// `auto` route when it decides whether to start the GPU and whether a call waits for
    /// it: the median of three child processes that each start the GPU once
    /// (`ozaki calibrate --time-start`); `None` when none of them could.
    fn later_start_s() -> Option<f64> {
        let exe = std::env::current_exe().ok()?;
        let mut v: Vec<f64> = (0..3)
            .filter_map(|_| {
                let o = std::process::Command::new(&exe)
                    .args(["calibrate", "--time-start"])
                    .stderr(std::process::Stdio::null())
                    .output()
                    .ok()?;
                if !o.status.success() {
                    return None;
                }
                String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .filter(|s| s.is_finite() && *s > 0.0)
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }

    /// Measures the GPU side of the plan, or `None` when there is no usable GPU.
    pub fn measure(plan: &Plan, machine: &mut Machine) -> anyhow::Result<Option<GpuMeasurements>> {
        // The first use of the GPU in this process. Its time is not what a program pays: it
        // compiles the kernels into the cache (seconds on a machine that never ran them);
        // every later process loads them from there.
        let t = Instant::now();
        let mut g = match gpu_kernels::gpu() {
            Ok(g) => g,
            Err(e) => {
                eprintln!("ozaki calibrate: no usable GPU ({e}); writing a CPU-only profile");
                return Ok(None);
            }
        };
        let first_s = t.elapsed().as_secs_f64();
        let start_s = later_start_s().unwrap_or(first_s);
        eprintln!(
            "{} (start-up {:.0} ms; {:.0} ms in this first process)",
            g.describe(),
            start_s * 1e3,
            first_s * 1e3
        );
        machine.gpu = Some(g.name.clone());
        machine.driver = Some(format!(
            "{}.{}",
            g.driver_version / 1000,
            g.driver_version % 1000 / 10
        ));
        machine.cuda = Some(format!("cuBLAS {}", g.cublas_version));
        let stream = g.stream();
        let (free, total) = memory::mem_info().map_err(|e| anyhow::anyhow!("{e}"))?;
        // Largest single allocation: free memory minus what contexts, handles and the
        // allocator keep (paper 003's reservation overhead), bracketed in 256 MiB steps.
        let mut largest = 0usize;
        for i in 0..64usize {
            let try_bytes = free.saturating_sub(memory::DEVICE_RESERVE + i * (256 << 20));
            if try_bytes == 0 {
                break;
            }
            if DeviceBuffer::new(try_bytes).is_ok() {
                largest = try_bytes;
                break;
            }
        }
        let mut m = GpuMeasurements {
            start_s: Some(start_s),
            name: g.name.clone(),
            memory_bytes: total as u64,
            free_bytes: free as u64,
            largest_alloc_bytes: largest as u64,
            ozaki_launches: 4,
            ..Default::default()
        };
        // Launch + sync latency: a 1×1×1 DGEMM and a sync, wall clock; sync alone.
        let tiny = [
            measure::upload(&[1.0f64]).map_err(ae)?,
            measure::upload(&[1.0f64]).map_err(ae)?,
            measure::upload(&[0.0f64]).map_err(ae)?,
        ];
        let mut launch_sync = Vec::new();
        let mut sync_only = Vec::new();
        for _ in 0..200 {
            let t = Instant::now();
            // SAFETY: three live one-element device buffers, waited for below.
            unsafe {
                gpu_kernels::native::dgemm(
                    &g,
                    stream,
                    Trans::No,
                    Trans::No,
                    (1, 1, 1),
                    1.0,
                    (tiny[0].ptr(), 1),
                    (tiny[1].ptr(), 1),
                    0.0,
                    (tiny[2].ptr(), 1),
                )
            }
            .map_err(ae)?;
            gpu_kernels::device::sync(stream).map_err(ae)?;
            launch_sync.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            gpu_kernels::device::sync(stream).map_err(ae)?;
            sync_only.push(t.elapsed().as_secs_f64());
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        m.sync_s = med(&mut sync_only);
        m.launch_s = (med(&mut launch_sync) - m.sync_s).max(1e-7);
        eprintln!(
            "launch {:.1} us, sync {:.1} us",
            m.launch_s * 1e6,
            m.sync_s * 1e6
        );
        // Device-resident DGEMM and Ozaki phases by shape.
        let mut int8_4096 = None;
        let mut fp64_4096 = None;
        for &(mm, nn, kk) in &plan.gpu_shapes {
            let mut one = || -> Result<(), gpu_kernels::GpuError> {
                let (mu, nu, ku) = (mm as usize, nn as usize, kk as usize);
                let a = measure::upload(&data(mu * ku, 1))?;
                let b = measure::upload(&data(ku * nu, 2))?;
                let c = DeviceBuffer::new(8 * mu * nu)?;
                let reps = if 2.0 * (mm * nn * kk) as f64 > 1e11 {
                    3
                } else {
                    7
                };
                let t = time_dgemm(&g, (mu, nu, ku), [&a, &b, &c], reps)?;
                m.fp64.push(Sample {
                    routine: Routine::Dgemm,
                    m: mm,
                    n: nn,
                    k: kk,
                    seconds: t,
                });
                if (mm, nn, kk) == (4096, 4096, 4096) {
                    fp64_4096 = Some(2.0 * (mm * nn * kk) as f64 / t);
                }
                let moduli: &[u32] = if matches!(
                    (mm, nn, kk),
                    (2048, 2048, 2048) | (65536, 64, 64) | (1024, 1024, 8192)
                ) {
                    &[8, 14, 18]
                } else {
                    &[14]
                };
                for &r in moduli {
                    let call =
                        DeviceCall::product((mu, nu, ku), 1.0, (a.ptr(), b.ptr()), 0.0, c.ptr());
                    let opts = Options {
                        moduli: Some(r as usize),
                        max_block: 0,
                        scaling: None,
                        ..Options::default()
                    };
                    let mut runs = Vec::new();
                    for i in 0..reps.min(5) + 1 {
                        // SAFETY: the call's buffers are live device buffers; gemm waits.
                        let o = unsafe { ozaki::gemm(&mut g, stream, &call, opts) }?;
                        if i > 0 {
                            runs.push(o.phases);
                        }
                    }
                    let pick = |f: &dyn Fn(&ozaki_core::trace::Phases) -> u64| {
                        let mut v: Vec<f64> = runs.iter().map(|p| f(p) as f64 * 1e-9).collect();
                        med(&mut v)
                    };
                    let (conv, prod, rec) = (
                        pick(&|p| p.convert_ns),
                        pick(&|p| p.products_ns),
                        pick(&|p| p.reconstruct_ns),
                    );
                    m.convert.push(StreamSample {
                        elems: mm * kk + kk * nn,
                        moduli: r,
                        seconds: conv,
                    });
                    m.reconstruct.push(StreamSample {
                        elems: mm * nn,
                        moduli: r,
                        seconds: rec,
                    });
                    if r == 14 {
                        m.int8.push(Sample {
                            routine: Routine::Dgemm,
                            m: mm,
                            n: nn,
                            k: kk,
                            seconds: prod / r as f64,
                        });
                        if (mm, nn, kk) == (4096, 4096, 4096) {
                            int8_4096 = Some(2.0 * (mm * nn * kk) as f64 * r as f64 / prod);
                        }
                    }
                    eprintln!(
                        "gpu {mm}x{nn}x{kk}: fp64 {:.3} ms ({:.1} TF); ozaki r={r}: convert {:.3} ms, products {:.3} ms, reconstruct {:.3} ms",
                        t * 1e3,
                        2.0 * (mm * nn * kk) as f64 / t / 1e12,
                        conv * 1e3,
                        prod * 1e3,
                        rec * 1e3
                    );
                }
                Ok(())
            };
            if let Err(e) = one() {
                eprintln!("gpu {mm}x{nn}x{kk}: skipped ({e})");
            }
        }
        // cuBLAS at sizes not aligned to 16, one per alignment class: the work model is
        // fitted on aligned shapes and cannot tell 4095 from 4096.
        for &size in &ozaki_core::engine::alignment::CALIBRATION_SIZES {
            let n = size as usize;
            let one = || -> Result<f64, gpu_kernels::GpuError> {
                let a = measure::upload(&data(n * n, 1))?;
                let b = measure::upload(&data(n * n, 2))?;
                let c = DeviceBuffer::new(8 * n * n)?;
                time_dgemm(&g, (n, n, n), [&a, &b, &c], 7)
            };
            match one() {
                Ok(t) => {
                    m.fp64_unaligned.push(Sample {
                        routine: Routine::Dgemm,
                        m: size,
                        n: size,
                        k: size,
                        seconds: t,
                    });
                    eprintln!(
                        "gpu {size}^3 (multiples of {} only): fp64 {:.3} ms ({:.1} TF)",
                        1u64 << size.trailing_zeros(),
                        t * 1e3,
                        2.0 * (size * size * size) as f64 / t / 1e12
                    );
                }
                Err(e) => eprintln!("gpu {size}^3: skipped ({e})"),
            }
        }
        // Reached: a measured rate no other unit of the H200 could deliver is the evidence
        // (the SASS/kernel-name check is scripts/gpu-check's `sass` stage).
        if let Some(r) = int8_4096 {
            let ceiling = 2.0 * 4.0 * 64.0 * g.sms as f64 * 1.98e9; // dp4a: 4 MACs per lane-instruction
            m.reached.insert(
                "gpu-ozaki".into(),
                Reached { ok: r > 1.2 * ceiling, evidence: format!("INT8 products at {:.0} TOPS (4096³, r = 14) vs {:.0} TOPS dp4a ceiling of {} SMs", r / 1e12, ceiling / 1e12, g.sms) },
            );
        }
        if let Some(r) = fp64_4096 {
            let ceiling = 2.0 * 64.0 * g.sms as f64 * 1.98e9; // FP64 FMA lanes without DMMA
            m.reached.insert(
                "gpu-native".into(),
                Reached {
                    ok: r > 1.05 * ceiling,
                    evidence: format!(
                        "cuBLAS DGEMM at {:.1} TF (4096³) vs {:.1} TF FP64 SIMT ceiling",
                        r / 1e12,
                        ceiling / 1e12
                    ),
                },
            );
        }
        // Pinned host link both ways by size.
        for &bytes in &plan.link_bytes {
            let (h2d, d2h) = match measure::link_bandwidth(&mut g, bytes as usize) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("link {bytes} B: skipped ({e})");
                    continue;
                }
            };
            for (dir, gbs) in [(Direction::H2d, h2d), (Direction::D2h, d2h)] {
                m.link.push(LinkSample {
                    direction: dir,
                    memory: HostMemory::Pinned,
                    bytes,
                    seconds: bytes as f64 / (gbs * 1e9),
                });
            }
        }
        drop(g);
        // The host path's link from the caller's (pageable) memory, each way: transfer-bound
        // host-resident calls through the real path, staged, and with op(A) and op(B)
        // page-locked for the call where the call is large enough to do so
        // (`host_pipeline::registers_operands`); each timed wall clock less its device work.
        let tuned = host::tuning();
        for &(mm, nn, kk) in &plan.staged_shapes {
            let a = data((mm * kk) as usize, 3);
            let b = data((kk * nn) as usize, 4);
            let mut c = vec![0.0; (mm * nn) as usize];
            let large = ozaki_core::host_pipeline::registers_operands(
                mm as usize,
                nn as usize,
                kk as usize,
            );
            for registered in [false, true] {
                if registered && !large {
                    continue;
                }
                host::set_tuning(Some(host::Tuning {
                    register: Some(registered),
                    ..tuned
                }));
                let mut v = Vec::new();
                for _ in 0..4 {
                    let args = gemm_args(&a, &b, mm, nn, kk);
                    let t = Instant::now();
                    match host::gemm(&args, &mut c, HostEngine::Native) {
                        Ok(o) => {
                            let p = o.phases;
                            let device = p.convert_ns + p.products_ns + p.reconstruct_ns;
                            v.push((t.elapsed().as_secs_f64() - device as f64 * 1e-9).max(1e-9));
                        }
                        Err(e) => eprintln!("host link {mm}x{nn}x{kk}: skipped ({e})"),
                    }
                }
                if v.is_empty() {
                    continue;
                }
                // the first call at a new size also grows the device buffers: left out
                let mut rest = v.split_off(1.min(v.len() - 1));
                let t = med(&mut rest);
                let sample = StagedSample {
                    mnk: (mm, nn, kk),
                    up_bytes: 8 * (mm * kk + kk * nn),
                    down_bytes: 8 * mm * nn,
                    registered,
                    seconds: t,
                };
                eprintln!(
                    "host link {mm}x{nn}x{kk} {}: {:.2} ms ({:.1} GB/s up and down)",
                    if registered { "page-locked" } else { "staged" },
                    t * 1e3,
                    (sample.up_bytes + sample.down_bytes) as f64 / t / 1e9
                );
                m.staged.push(sample);
            }
        }
        host::set_tuning(Some(tuned));
        // the end-to-end route timings that follow run as the shim will: page-locked when
        // that measured faster
        let pays = cal::registration_pays(&m.staged);
        host::set_register(pays);
        eprintln!(
            "host link: page-locking the operands {} staging them",
            if pays { "beats" } else { "does not beat" }
        );
        Ok(Some(m))
    }

    /// Median seconds (CUDA events) of a device-resident C = A B on `g`'s stream, with A, B
    /// and C column-major m x k, k x n and m x n in `bufs`.
    fn time_dgemm(
        g: &gpu_kernels::device::Gpu,
        (m, n, k): (usize, usize, usize),
        [a, b, c]: [&DeviceBuffer; 3],
        reps: usize,
    ) -> Result<f64, gpu_kernels::GpuError> {
        let stream = g.stream();
        measure::time_median(stream, reps, || {
            // SAFETY: three live device buffers of the packed shapes, timed to completion.
            unsafe {
                gpu_kernels::native::dgemm_packed(g, stream, (m, n, k), [a.ptr(), b.ptr(), c.ptr()])
            }
        })
    }

    fn ae(e: gpu_kernels::GpuError) -> anyhow::Error {
        anyhow::anyhow!("{e}")
    }

    fn gemm_args<'a>(a: &'a [f64], b: &'a [f64], m: u64, n: u64, k: u64) -> GemmArgs<'a> {
        GemmArgs {
            transa: Trans::No,
            transb: Trans::No,
            m: m as usize,
            n: n as usize,
            k: k as usize,
            alpha: 1.0,
            a,
            lda: m.max(1) as usize,
            b,
            ldb: k.max(1) as usize,
            beta: 0.0,
            ldc: m.max(1) as usize,
        }
    }

    /// The GPUs to survey: `OZAKI_DEVICES` or every visible one (distinct ordinals), the
    /// device the full model was measured on first.
    pub fn pool() -> Vec<u32> {
        use ozaki_core::devices::{DEVICES_VAR, DeviceAssignment, LauncherEnv};
        let Ok(count) = gpu_kernels::device::device_count() else {
            return Vec::new();
        };
        let var = ozaki_core::env::var(DEVICES_VAR);
        let mut pool =
            match DeviceAssignment::resolve(var.as_deref(), count, &LauncherEnv::default()) {
                Ok(a) => a.ordinals(),
                Err(e) => {
                    eprintln!("ozaki calibrate: {e}; surveying every visible GPU");
                    (0..count).collect()
                }
            };
        if let Ok(g) = gpu_kernels::gpu() {
            let first = g.ordinal;
            pool.retain(|&d| d != first);
            pool.insert(0, first);
        }
        pool
    }

    /// Shape of the transfer-bound host-resident call that measures a staged link: 545 MB
    /// in and out for 8.6 GFLOP.
    const LINK_SHAPE: Mnk = (8192, 8192, 64);

    fn link_samples(bytes: u64, seconds: f64) -> [LinkSample; 2] {
        [Direction::H2d, Direction::D2h].map(|direction| LinkSample {
            direction,
            memory: HostMemory::Staged,
            bytes,
            seconds,
        })
    }

    /// Surveys each device, then (with two or more) all of them at once; a device that
    /// fails is left out with one line.
    pub fn survey(
        ordinals: &[u32],
        plan: &Plan,
    ) -> (Vec<DeviceMeasurements>, Option<ShareMeasurements>) {
        let mut devices = Vec::new();
        for &o in ordinals {
            match survey_one(o, plan) {
                Ok(d) => devices.push(d),
                Err(e) => eprintln!("survey of GPU {o}: skipped ({e})"),
            }
        }
        let ok: Vec<u32> = devices.iter().map(|d| d.id.ordinal).collect();
        let share = (ok.len() >= 2).then(|| together(&ok, plan));
        (devices, share)
    }

    fn survey_one(o: u32, plan: &Plan) -> Result<DeviceMeasurements, gpu_kernels::GpuError> {
        let mut g = gpu_kernels::device::gpu_slot(o, 0)?;
        let (free, total) = memory::mem_info()?;
        let mut d = DeviceMeasurements {
            id: DeviceId {
                ordinal: o,
                name: g.name.clone(),
                memory_bytes: total as u64,
                free_bytes: free as u64,
            },
            ..Default::default()
        };
        // The largest survey shape is the rate the engine scales by; quick plans stay small.
        let sizes: &[u64] = if plan.gpu_shapes.iter().any(|s| s.0 >= 8192) {
            &[4096, 8192]
        } else {
            &[1024]
        };
        for &n in sizes {
            let nu = n as usize;
            let a = measure::upload(&data(nu * nu, 1))?;
            let b = measure::upload(&data(nu * nu, 2))?;
            let c = DeviceBuffer::new(8 * nu * nu)?;
            let t = time_dgemm(&g, (nu, nu, nu), [&a, &b, &c], 3)?;
            d.fp64.push(Sample {
                routine: Routine::Dgemm,
                m: n,
                n,
                k: n,
                seconds: t,
            });
            let (tops, _) = measure::int8_rates(&mut g, nu, 1, 3)?;
            d.int8.push(Sample {
                routine: Routine::Dgemm,
                m: n,
                n,
                k: n,
                seconds: 2.0 * (n * n * n) as f64 / (tops * 1e12),
            });
        }
        let (m, n, k) = LINK_SHAPE;
        let (a, b) = (data((m * k) as usize, 3), data((k * n) as usize, 4));
        let mut c = vec![0.0; (m * n) as usize];
        let mut err = None;
        let t = time_median(|| {
            if let Err(e) = host::gemm_on(
                &mut g,
                &gemm_args(&a, &b, m, n, k),
                &mut c,
                HostEngine::Native,
            ) {
                err = Some(e);
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        d.link.extend(link_samples(8 * (m * k + k * n + m * n), t));
        eprintln!(
            "survey GPU {o} ({}): fp64 {:.1} TFLOP/s, int8 {:.0} TOPS at {}^3; staged link alone {:.1} GB/s",
            d.id.name,
            2.0 * (sizes[sizes.len() - 1].pow(3)) as f64
                / d.fp64.last().map_or(1.0, |s| s.seconds)
                / 1e12,
            2.0 * (sizes[sizes.len() - 1].pow(3)) as f64
                / d.int8.last().map_or(1.0, |s| s.seconds)
                / 1e12,
            sizes[sizes.len() - 1],
            8.0 * (m * k + k * n + m * n) as f64 / t / 1e9
        );
        Ok(d)
    }

    /// All `ordinals` running the link call at once (wall clock until the last finishes),
    /// then dgemms split over them by `gpu_kernels::multi`, end to end.
    fn together(ordinals: &[u32], plan: &Plan) -> ShareMeasurements {
        let (m, n, k) = LINK_SHAPE;
        let reps = 3u32;
        let barrier = std::sync::Barrier::new(ordinals.len() + 1);
        let per_call = 8 * (m * k + k * n + m * n);
        let wall = std::thread::scope(|s| {
            let handles: Vec<_> = ordinals
                .iter()
                .map(|&o| {
                    let barrier = &barrier;
                    s.spawn(move || -> Result<(), gpu_kernels::GpuError> {
                        let (a, b) = (data((m * k) as usize, 3), data((k * n) as usize, 4));
                        let mut c = vec![0.0; (m * n) as usize];
                        let args = gemm_args(&a, &b, m, n, k);
                        let mut g = gpu_kernels::device::gpu_slot(o, 0);
                        if let Ok(g) = g.as_mut() {
                            let _ = host::gemm_on(g, &args, &mut c, HostEngine::Native);
                        }
                        barrier.wait();
                        barrier.wait();
                        let g = g?;
                        let mut g = g;
                        for _ in 0..reps {
                            host::gemm_on(&mut g, &args, &mut c, HostEngine::Native)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            barrier.wait();
            let t0 = Instant::now();
            barrier.wait();
            let ok = handles.into_iter().all(|h| matches!(h.join(), Ok(Ok(()))));
            ok.then(|| t0.elapsed().as_secs_f64())
        });
        let mut share = ShareMeasurements {
            devices: ordinals.to_vec(),
            ..Default::default()
        };
        match wall {
            Some(t) => {
                let bytes = per_call * reps as u64 * ordinals.len() as u64;
                share.link.extend(link_samples(bytes, t));
                eprintln!(
                    "GPUs {ordinals:?} copying at once: {:.1} GB/s in all",
                    bytes as f64 / t / 1e9
                );
            }
            None => {
                eprintln!("GPUs {ordinals:?} at once: a device failed; no shared-link measurement")
            }
        }
        let shapes: &[Mnk] = if plan.gpu_shapes.iter().any(|s| s.0 >= 8192) {
            &[(8192, 8192, 8192), (16384, 16384, 8192)]
        } else {
            &[(4096, 4096, 1024)]
        };
        for &(m, n, k) in shapes {
            eprintln!("split {m}x{n}x{k} over {ordinals:?}: timing");
            let (a, b) = (data((m * k) as usize, 5), data((k * n) as usize, 6));
            let mut c = vec![0.0; (m * n) as usize];
            let split = ozaki_core::devices::split_c(m, n, ordinals, &Default::default());
            if !split.is_split() {
                continue;
            }
            let mut err = None;
            let t = time_median(|| {
                let args = gemm_args(&a, &b, m, n, k);
                if let Err(e) = gpu_kernels::multi::gemm(&args, &mut c, HostEngine::Native, &split)
                {
                    err = Some(e);
                }
            });
            if let Some(e) = err {
                eprintln!("split {m}x{n}x{k} over {ordinals:?}: not timed ({e})");
                continue;
            }
            eprintln!(
                "split {m}x{n}x{k} over {ordinals:?} (gpu-native): {:.3} s",
                t
            );
            share.splits.push(SplitSample {
                route: "gpu-native".into(),
                m,
                n,
                k,
                moduli: None,
                devices: ordinals.to_vec(),
                seconds: t,
            });
        }
        share
    }

    /// Device-resident end-to-end timings of cuBLAS DGEMM and the emulation at each shape
    /// (wall clock around the call and its wait, median; operands already on the GPU, as
    /// the `ozaki_*_device` entry points get them): what the device-resident corrections
    /// are fitted to. A shape that does not fit in memory is skipped with a line.
    pub fn time_device_routes(shapes: &[Mnk]) -> Vec<RouteSample> {
        let mut out = Vec::new();
        let Ok(mut g) = gpu_kernels::gpu() else {
            return out;
        };
        let stream = g.stream();
        for &(m, n, k) in shapes {
            let (mu, nu, ku) = (m as usize, n as usize, k as usize);
            let mut one = || -> Result<[RouteSample; 2], gpu_kernels::GpuError> {
                let a = measure::upload(&data(mu * ku, 7))?;
                let b = measure::upload(&data(ku * nu, 8))?;
                let c = DeviceBuffer::new(8 * mu * nu)?;
                let mut err = None;
                let native = time_median(|| {
                    // SAFETY: live device buffers of the packed shapes; waited for below.
                    let r = unsafe {
                        gpu_kernels::native::dgemm_packed(
                            &g,
                            stream,
                            (mu, nu, ku),
                            [a.ptr(), b.ptr(), c.ptr()],
                        )
                    }
                    .and_then(|()| gpu_kernels::device::sync(stream));
                    err = err.take().or(r.err());
                });
                let call = DeviceCall::product((mu, nu, ku), 1.0, (a.ptr(), b.ptr()), 0.0, c.ptr());
                let mut used = None;
                let ours = time_median(|| {
                    // SAFETY: the call's buffers are live device buffers; gemm waits.
                    match unsafe { ozaki::gemm(&mut g, stream, &call, Options::default()) } {
                        Ok(o) => used = Some(o.moduli),
                        Err(e) => err = Some(e),
                    }
                });
                if let Some(e) = err {
                    return Err(e);
                }
                let sample = |route: &str, moduli, seconds| RouteSample {
                    route: route.into(),
                    m,
                    n,
                    k,
                    residency: Residency::Device,
                    moduli,
                    seconds,
                };
                Ok([
                    sample("gpu-native", None, native),
                    sample("gpu-ozaki", used, ours),
                ])
            };
            match one() {
                Ok(s) => {
                    eprintln!(
                        "device-resident {m}x{n}x{k}: cuBLAS {:.3} ms, ozaki {:.3} ms ({:.2}x)",
                        s[0].seconds * 1e3,
                        s[1].seconds * 1e3,
                        s[0].seconds / s[1].seconds
                    );
                    out.extend(s);
                }
                Err(e) => eprintln!("device-resident {m}x{n}x{k}: skipped ({e})"),
            }
        }
        out
    }

    /// Host-resident end-to-end timings of the GPU routes at one shape (wall clock, median).
    pub fn time_routes((m, n, k): Mnk) -> anyhow::Result<Vec<RouteSample>> {
        let a = data((m * k) as usize, 5);
        let b = data((k * n) as usize, 6);
        let mut c = vec![0.0; (m * n) as usize];
        let mut out = Vec::new();
        for (name, engine) in [
            ("gpu-native", HostEngine::Native),
            ("gpu-ozaki", HostEngine::Ozaki(Options::default())),
        ] {
            let mut used = None;
            let mut err = None;
            let s = time_median(|| {
                let args = gemm_args(&a, &b, m, n, k);
                match host::gemm(&args, &mut c, engine) {
                    Ok(o) => used = o.moduli,
                    Err(e) => err = Some(e),
                }
            });
            if let Some(e) = err {
                eprintln!("route {name} {m}x{n}x{k}: not timed ({e})");
                continue;
            }
            out.push(RouteSample {
                route: name.into(),
                m,
                n,
                k,
                residency: Residency::Host,
                moduli: used,
                seconds: s,
            });
        }
        Ok(out)
    }
}
