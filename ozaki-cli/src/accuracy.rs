//! `ozaki accuracy [--route cpu-ozaki|gpu-ozaki] [--families ...] [--sizes ...] [--quick]`:
//! the adversarial accuracy suite on a route's public entry points, one table per family,
//! exit status 1 when any call breaks the contract (`ozaki_core::accuracy::suite`).
//!
//! - `cpu-ozaki`: the shim's route function (`ozaki_shim::route::cpu_ozaki`), configured
//!   from the environment like the shim (`OZAKI_MODULI`, `OZAKI_SCALING`, ...), so whatever
//!   the route decides (moduli, scaling, declining) is what is measured.
//! - `gpu-ozaki`: the host-resident route (`ozaki_shim::route::gpu`, forced `gpu-ozaki`) and
//!   the device-resident pipeline the `ozaki_dgemm_device` entry point runs
//!   (`gpu_kernels::ozaki::gemm` with the same options), beside cuBLAS fp64 (shown, not
//!   judged). Without a usable GPU it prints `skipped: no GPU (...)` and exits 0.
//!
//! Native fp64, the contract's yardstick, is the standard-order dot product on the same
//! entries (what reference BLAS computes).

use anyhow::{Result, bail};
use clap::Parser;
use gpu_kernels::GpuError;
use gpu_kernels::ozaki::{DeviceCall, Op as DeviceOp};
use ozaki_core::accuracy::families::{self, FULL_SIZES, Family, QUICK_SIZES};
use ozaki_core::accuracy::suite::{
    self, FLOOR_ULPS, FamilyReport, Method, NATIVE_FACTOR, Outcome, Problem,
};
use ozaki_core::route::Route;
use ozaki_shim::abi::{CView, Region};
use ozaki_shim::config::{Config, RawConfig};
use ozaki_shim::route::{RouteError, RouteOutcome, cpu_ozaki, gpu};
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

/// Sizes of the GPU route's run: realistic products, measured on sampled entries.
const GPU_SIZES: [(usize, usize, usize); 2] = [(4096, 4096, 4096), (8192, 8192, 8192)];

#[derive(Parser, Debug)]
#[command(
    about = "Adversarial accuracy suite: emulated error vs native fp64 against exact products",
    after_help = "Exit status: 0 when every family holds the contract (or no GPU for \
                  --route gpu-ozaki: `skipped: no GPU`), 1 when a call breaks it, 2 on bad arguments."
)]
struct Args {
    /// Route to measure: cpu-ozaki or gpu-ozaki.
    #[arg(long, default_value = "cpu-ozaki")]
    route: String,
    /// Families, comma separated (default: all; see --list).
    #[arg(long, default_value = "all")]
    families: String,
    /// Sizes N or MxNxK, comma separated (default: the route's sizes; families with their own
    /// shapes, k-range and odd-sizes, keep them).
    #[arg(long)]
    sizes: Option<String>,
    /// Small sizes and a shorter k range (CI).
    #[arg(long)]
    quick: bool,
    /// List the families and exit.
    #[arg(long)]
    list: bool,
}

fn parse_sizes(s: &str) -> Result<Vec<(usize, usize, usize)>> {
    s.split(',').map(crate::bench::parse_shape).collect()
}

/// A route call's result as the suite sees it.
fn outcome(r: Result<RouteOutcome, RouteError>, route: Route, c: Vec<f64>) -> Outcome {
    match r {
        Ok(o) => Outcome::Computed {
            c,
            moduli: o.moduli,
        },
        Err(e) => Outcome::Fallback(e.reason(route)),
    }
}

/// C for a problem, NaN where the call must write (an entry left unwritten is an error).
fn fresh_c(p: &Problem) -> Vec<f64> {
    vec![f64::NAN; p.case.m * p.case.n]
}

fn cpu_methods(config: &Config) -> Vec<Method<'_>> {
    vec![Method {
        name: "cpu-ozaki".into(),
        checked: true,
        run: Box::new(move |p: &Problem| {
            let mut c = fresh_c(p);
            let r = match (p.gemm_args(), p.syrk_args()) {
                (Some(g), _) => cpu_ozaki::gemm(&g, &mut c, config),
                (_, Some(s)) => cpu_ozaki::syrk(&s, &mut c, config),
                _ => unreachable!("a problem is dgemm or dsyrk"),
            };
            outcome(r, Route::CpuOzaki, c)
        }),
    }]
}

/// The host-resident GPU route `route` (gpu-ozaki or gpu-native).
fn gpu_host<'a>(route: Route, config: &'a Config, name: &str, checked: bool) -> Method<'a> {
    Method {
        name: name.into(),
        checked,
        run: Box::new(move |p: &Problem| {
            let mut c = fresh_c(p);
            let at = c.as_mut_ptr();
            // SAFETY: `c` holds the problem's C (leading dimension its rows), outlives the
            // view and nothing else touches it during the call.
            let view = |region| unsafe { CView::new(at, region) };
            let r = match (p.gemm_args(), p.syrk_args()) {
                (Some(g), _) => {
                    let c = view(Region::gemm(g.m, g.n, g.ldc));
                    gpu::gemm(route, &g, &c, config, None) // one device
                }
                (_, Some(s)) => {
                    gpu::syrk(route, &s, &view(Region::syrk(s.n, s.ldc, s.uplo)), config)
                }
                _ => unreachable!("a problem is dgemm or dsyrk"),
            };
            outcome(r, route, c)
        }),
    }
}

/// The device-resident pipeline on device copies of the problem's operands; a decline
/// (NaN/Inf, a shape or range it does not take) is a fallback, as `ozaki_dgemm_device`
/// then runs cuBLAS fp64; any other error (upload, CUDA, memory) is a failure.
fn gpu_device_run(p: &Problem, config: &Config) -> Result<Outcome, GpuError> {
    use gpu_kernels::measure::{download, upload};
    let (m, n, k) = (p.case.m, p.case.n, p.case.k);
    let c0 = fresh_c(p);
    let da = upload(&p.a)?;
    let db = upload(if p.b.is_empty() { &[0.0][..] } else { &p.b })?;
    let dc = upload(&c0)?;
    let op = match p.case.op {
        families::Op::Gemm(transa, transb) => DeviceOp::Gemm {
            transa,
            transb,
            b: db.ptr(),
            ldb: p.ldb,
        },
        families::Op::Syrk(uplo, trans) => DeviceOp::Syrk { uplo, trans },
    };
    let call = DeviceCall {
        op,
        m,
        n,
        k,
        alpha: 1.0,
        a: da.ptr(),
        lda: p.lda,
        beta: 0.0,
        c: dc.ptr(),
        ldc: m.max(1),
    };
    let result = {
        let mut g = gpu_kernels::gpu()?;
        let stream = g.stream();
        // SAFETY: `gpu()` made its context current on this thread and `stream` is its own;
        // `da`, `db` and `dc` are buffers of that context sized for the operands with their
        // leading dimensions, owned here and alive until `gemm` has synchronised the stream.
        unsafe { gpu_kernels::ozaki::gemm(&mut g, stream, &call, gpu::ozaki_options(config)) }
    };
    match result {
        Ok(o) => {
            let mut c = c0;
            download(&dc, &mut c)?;
            Ok(Outcome::Computed {
                c,
                moduli: Some(o.moduli),
            })
        }
        // A decline: `ozaki_dgemm_device` runs cuBLAS fp64 (its return value 1).
        Err(e @ (GpuError::NonFinite | GpuError::Unsupported(_))) => {
            Ok(Outcome::Fallback(format!("device: {e}")))
        }
        // Anything else is a failure with no result (its return value 2).
        Err(e) => Ok(Outcome::Failed(format!("device: {e}"))),
    }
}

fn gpu_methods(config: &Config) -> Vec<Method<'_>> {
    vec![
        gpu_host(Route::GpuOzaki, config, "gpu-ozaki host", true),
        Method {
            name: "gpu-ozaki device".into(),
            checked: true,
            run: Box::new(move |p: &Problem| {
                gpu_kernels::probe::contain("accuracy suite", || gpu_device_run(p, config))
                    .unwrap_or_else(|e| Outcome::Failed(format!("device: {e}")))
            }),
        },
        gpu_host(Route::GpuNative, config, "cuBLAS fp64", false),
    ]
}

pub fn main(argv: Vec<String>) -> Result<ExitCode> {
    let args = Args::parse_from(argv);
    if args.list {
        for f in families::all() {
            println!("{:<18} {}", f.name, f.about);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let fams: Vec<Family> = families::select(&args.families).map_err(anyhow::Error::msg)?;
    let route: Route = args.route.parse().map_err(anyhow::Error::msg)?;
    let (config, problems) = Config::from_raw(&RawConfig::from_env());
    for p in problems {
        eprintln!("ozaki accuracy: {p}");
    }
    let (methods, default_sizes) = match route {
        Route::CpuOzaki => (
            cpu_methods(&config),
            if args.quick {
                &QUICK_SIZES
            } else {
                &FULL_SIZES
            },
        ),
        Route::GpuOzaki => {
            if let Err(e) = gpu_kernels::device::available() {
                println!("skipped: no GPU ({e})");
                return Ok(ExitCode::SUCCESS);
            }
            let sizes = if args.quick { &QUICK_SIZES } else { &GPU_SIZES };
            (gpu_methods(&config), sizes)
        }
        other => bail!("--route {other}: expected cpu-ozaki or gpu-ozaki"),
    };
    let sizes = match &args.sizes {
        Some(s) => parse_sizes(s)?,
        None => default_sizes.to_vec(),
    };
    if sizes.is_empty() {
        bail!("--sizes: no size given");
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "## ozaki accuracy --route {route}{}\n\nContract: per call, emulated max |c - s| / (|A||B|) <= max({NATIVE_FACTOR} x native's, {FLOOR_ULPS} u) on the same entries (native: standard-order fp64 dot product; s exact), or the call fell back to native fp64. Sizes: {}.\n",
        if args.quick { " --quick" } else { "" },
        sizes
            .iter()
            .map(|(m, n, k)| format!("{m}x{n}x{k}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    let start = Instant::now();
    let mut reports: Vec<FamilyReport> = Vec::new();
    for f in &fams {
        let t = Instant::now();
        let report = suite::run_family(f, &sizes, args.quick, &methods);
        writeln!(out, "{}", suite::table(&report))?;
        out.flush()?;
        tracing::debug!(
            family = f.name,
            seconds = t.elapsed().as_secs_f64(),
            "family measured"
        );
        reports.push(report);
    }
    let broken: Vec<&str> = reports
        .iter()
        .filter(|r| r.broken())
        .map(|r| r.name)
        .collect();
    let calls: usize = reports.iter().map(|r| r.problems.len()).sum();
    let fallbacks: usize = reports.iter().map(|r| r.fallbacks().0).sum();
    writeln!(
        out,
        "accuracy: {} families, {calls} calls, {fallbacks} fallbacks, {} ({:.0} s)",
        reports.len(),
        if broken.is_empty() {
            "contract holds".to_string()
        } else {
            format!("CONTRACT BROKEN by {}", broken.join(", "))
        },
        start.elapsed().as_secs_f64()
    )?;
    Ok(if broken.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
