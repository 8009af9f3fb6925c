//! `ozaki explain m n k [...]`: the engine's predicted time of every route for one call
//! shape, each term with how it was derived from the profile, and the choice with its reason
//!. With `--platform NAME` it shows the paper's reduced model on that platform
//! instead (rates per route and storage mode). With two or more GPU slots (`--devices`,
//! `OZAKI_DEVICES`, or this machine's GPUs) it also shows each GPU route priced split over
//! them, per device and with the host terms, and whether the split is taken.

use anyhow::Context;
use clap::Parser;
use ozaki_core::engine::adapt::GpuTraits;
use ozaki_core::engine::choose::{self, Engine};
use ozaki_core::engine::platforms::{self, Platform};
use ozaki_core::engine::priced_moduli::priced_moduli;
use ozaki_core::engine::profile::{self, Profile, ProfileSource};
use ozaki_core::engine::reduced::{self, RateOptions};
use ozaki_core::engine::{CallShape, Residency};
use ozaki_core::trace::Routine;
use std::io::Write;
use std::process::ExitCode;

/// Where the engine's numbers come from: `--profile`, `--platform`, or the default lookup.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// Machine profile JSON (default: OZAKI_PROFILE, the per-GPU profile in the cache dir,
    /// or the built-in one).
    #[arg(long, conflicts_with = "platform")]
    pub profile: Option<std::path::PathBuf>,
    /// Built-in paper platform for a what-if projection: rubin, gb300, b200, h200-datasheet.
    #[arg(long)]
    pub platform: Option<String>,
    /// GPU name to pick the default or built-in profile for (default: OZAKI_GPU_NAME, else the
    /// GPU of this machine, if any).
    #[arg(long)]
    pub gpu: Option<String>,
    /// CPU BLAS threads to price (default: the BLAS/OpenMP thread variables, else all CPUs).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Price the reduced model's co-design roof (ComputeRate returns P_roof; --platform only).
    #[arg(long)]
    pub codesign: bool,
}

/// The model the arguments select.
pub enum Model {
    /// A measured profile with its engine.
    Measured(Box<Engine>, String),
    /// A platform for the reduced model.
    Reduced(Platform, RateOptions),
}

impl ModelArgs {
    /// Loads the profile or platform; prints the profile warning once on stderr.
    pub fn load(&self) -> anyhow::Result<Model> {
        self.load_as_traced(None, false)
    }

    /// [`ModelArgs::load`] for the process a trace header describes: its OpenBLAS pools spun
    /// `2^vendor_spin_log2` cycles, which bounds the profile's vendor wake as it bounded the
    /// shim's (`ozaki_core::engine::spin`), and with `threads_shared` its vendor calls made
    /// beside others ran at their share of the vendor's threads, priced so
    /// (`Engine::with_vendor_threads_shared`).
    pub fn load_as_traced(
        &self,
        vendor_spin_log2: Option<u32>,
        threads_shared: bool,
    ) -> anyhow::Result<Model> {
        if let Some(p) = &self.platform {
            let pl = platforms::by_name(p).with_context(|| {
                let names: Vec<&str> = platforms::all().iter().map(|x| x.name).collect();
                format!("unknown platform {p:?} (known: {})", names.join(", "))
            })?;
            return Ok(Model::Reduced(
                pl,
                RateOptions {
                    codesign: self.codesign,
                    no_garner: false,
                },
            ));
        }
        let threads = self.threads.unwrap_or_else(|| {
            let avail = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
            choose::blas_threads(ozaki_core::env::var, avail)
        });
        let (prof, src) = match &self.profile {
            Some(path) => (
                Profile::load(path).map_err(anyhow::Error::msg)?,
                format!("{}", path.display()),
            ),
            None => {
                // A GPU named on the command line or in the environment is known by name only.
                let gpu = self
                    .gpu
                    .clone()
                    .or_else(|| ozaki_core::env::var(ozaki_core::env::GPU_NAME))
                    .map(|n| GpuTraits::named(&n))
                    .or_else(ozaki_shim::route::choose::gpu_traits);
                let env = ozaki_core::env::var(ozaki_core::env::PROFILE);
                let (p, s, warn) =
                    profile::resolve(env.as_deref(), gpu.as_ref()).map_err(anyhow::Error::msg)?;
                if let Some(w) = warn {
                    eprintln!("ozaki: {w}");
                }
                let s = match s {
                    ProfileSource::Env(p) => format!("OZAKI_PROFILE={}", p.display()),
                    ProfileSource::Cache(p) => format!("{}", p.display()),
                    ProfileSource::BuiltIn(n) => format!("built-in {n}"),
                    ProfileSource::Scaled(n) => format!("built-in {n}, scaled to this GPU"),
                };
                (p, s)
            }
        };
        let mut prof = prof;
        prof.cpu.wake = ozaki_core::engine::spin::bounded(prof.cpu.wake, vendor_spin_log2);
        let engine = Engine::new(prof, threads).with_vendor_threads_shared(threads_shared);
        Ok(Model::Measured(Box::new(engine), src))
    }
}

/// Whether an operand is transposed, from the BLAS letter (`N`, `T` or `C`, either case).
#[derive(Debug, Clone, Copy)]
struct Transposed(bool);

/// The BLAS transpose letters; anything else is refused (clap's error, exit status 2), as the
/// reference BLAS refuses it, rather than priced as `N`.
fn transposed(s: &str) -> Result<Transposed, String> {
    match s {
        "N" | "n" => Ok(Transposed(false)),
        "T" | "t" | "C" | "c" => Ok(Transposed(true)),
        _ => Err(format!("{s:?} is not a transpose letter (N, T or C)")),
    }
}

/// Print the predicted time of every route for one call shape, and the choice.
#[derive(Parser, Debug)]
#[command(about = "predicted time of every route for one call shape, and the choice")]
struct Args {
    /// Rows of C.
    m: u64,
    /// Columns of C.
    n: u64,
    /// Inner dimension.
    k: u64,
    /// dgemm or dsyrk (dsyrk uses n and k; m is ignored).
    #[arg(long, default_value = "dgemm")]
    routine: String,
    /// transa: N (op(A) = A), T or C (op(A) = A^T); for dsyrk, trans.
    #[arg(long, default_value = "N", value_parser = transposed)]
    transa: Transposed,
    /// transb: N, T or C.
    #[arg(long, default_value = "N", value_parser = transposed)]
    transb: Transposed,
    /// beta is nonzero (C is read, so it is uploaded too).
    #[arg(long)]
    beta: bool,
    /// Operands already on the GPU (device entry points).
    #[arg(long)]
    device_resident: bool,
    /// Leading dimension of C (default: its rows); above them C is a block of a larger
    /// array, whose rows a host-resident GPU route copies to and from pinned staging as it
    /// would a contiguous C's (priced the same).
    #[arg(long)]
    ldc: Option<u64>,
    /// Moduli count the numerics would choose (default: the accuracy rule's count for
    /// normally distributed data at this k, as `auto` prices it; 0 = the contract cannot be
    /// met).
    #[arg(long)]
    moduli: Option<u32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// GPU slots to price a split over, e.g. `0,1` (default: OZAKI_DEVICES, else this
    /// machine's GPUs; one slot prices no split).
    #[arg(long)]
    devices: Option<String>,
    #[command(flatten)]
    model: ModelArgs,
}

/// The slots to price splits over (see `--devices`).
fn slots(arg: Option<&str>) -> anyhow::Result<Vec<u32>> {
    let var = ozaki_core::env::var(ozaki_core::devices::DEVICES_VAR);
    match arg.or(var.as_deref().filter(|v| !v.trim().is_empty())) {
        Some(list) => ozaki_core::devices::parse_devices(list).map_err(anyhow::Error::msg),
        None => Ok(gpu_kernels::multi::slots().to_vec()),
    }
}

fn fmt_s(s: f64) -> String {
    if !s.is_finite() {
        "-".into()
    } else if s.abs() < 1e-3 {
        format!("{:.1} us", s * 1e6)
    } else if s.abs() < 1.0 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{s:.3} s")
    }
}

/// One indented line per priced term: name, seconds, how it was derived.
fn write_terms(
    out: &mut dyn Write,
    terms: &[ozaki_core::engine::model::Term],
) -> std::io::Result<()> {
    for t in terms {
        writeln!(
            out,
            "    {:<12} {:>12}  {}",
            t.name,
            fmt_s(t.seconds),
            t.how
        )?;
    }
    Ok(())
}

fn fmt_rate(flops: f64, s: f64) -> String {
    if !s.is_finite() || s <= 0.0 {
        return "-".into();
    }
    let r = flops / s;
    if r >= 1e12 {
        format!("{:.2} TFLOP/s", r / 1e12)
    } else {
        format!("{:.1} GFLOP/s", r / 1e9)
    }
}

pub fn main(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let a = Args::parse_from(args);
    let routine = match a.routine.to_ascii_lowercase().as_str() {
        "dgemm" => Routine::Dgemm,
        "dsyrk" => Routine::Dsyrk,
        other => anyhow::bail!("unknown routine {other:?} (dgemm or dsyrk)"),
    };
    let mut shape = match routine {
        Routine::Dgemm => CallShape::gemm(a.m, a.n, a.k),
        Routine::Dsyrk => CallShape::syrk(a.n, a.k),
    };
    shape.transa = a.transa.0;
    shape.transb = a.transb.0;
    shape.beta_zero = !a.beta;
    shape.c_gaps = a.ldc.is_some_and(|ldc| ldc > shape.m);
    if a.device_resident {
        shape.residency = Residency::Device;
    }
    let moduli = match a.moduli {
        Some(0) => None,
        Some(r) => Some(r),
        None => Some(priced_moduli(shape.k, None)),
    };
    match a.model.load()? {
        Model::Measured(engine, src) => {
            let engine = (*engine).with_slots(slots(a.devices.as_deref())?);
            explain_measured(&engine, &src, &shape, moduli, a.json)
        }
        Model::Reduced(pl, opt) => explain_reduced(&pl, opt, &shape, a.json),
    }
}

fn explain_measured(
    engine: &Engine,
    src: &str,
    shape: &CallShape,
    moduli: Option<u32>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let est = engine.estimates(shape, moduli);
    let d = engine.decide_from_estimates(shape, moduli, &est);
    let splits: Vec<serde_json::Value> = d
        .splits
        .iter()
        .map(|s| {
            serde_json::json!({
                "route": s.route.name(), "devices": s.devices(), "seconds": s.seconds,
                "one_gpu_seconds": s.single_s, "taken": s.pays, "link_shared": s.link_shared,
                "per_device_s": s.price.per_device_s, "terms": s.terms,
            })
        })
        .collect();
    if json {
        let v = serde_json::json!({
            "shape": {"routine": format!("{:?}", shape.routine).to_lowercase(), "m": shape.m, "n": shape.n, "k": shape.k,
                       "transa": shape.transa, "transb": shape.transb, "beta_zero": shape.beta_zero, "residency": shape.residency.name(),
                       "c_gaps": shape.c_gaps},
            "profile": src, "threads": engine.threads(), "moduli": moduli,
            "routes": est, "choice": d.route.name(), "reason": d.prediction.reason,
            "slots": engine.slots(), "splits": splits,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let p = engine.profile();
    writeln!(
        out,
        "{} m={} n={} k={} trans=({},{}) beta{}{} {}-resident: n̄ = {:.0}, {:.3} GFLOP",
        format!("{:?}", shape.routine).to_lowercase(),
        shape.m,
        shape.n,
        shape.k,
        if shape.transa { 'T' } else { 'N' },
        if shape.transb { 'T' } else { 'N' },
        if shape.beta_zero { "=0" } else { "!=0" },
        if shape.c_gaps { ", C with gaps" } else { "" },
        shape.residency.name(),
        shape.nbar(),
        shape.flops() / 1e9
    )?;
    writeln!(
        out,
        "profile: {} [{}] ({}); CPU BLAS threads priced: {}",
        p.name,
        src,
        p.source,
        engine.threads()
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<12} {:>12} {:>16}  storage / reconstruction",
        "route", "predicted", "rate"
    )?;
    for e in &est {
        match &e.excluded {
            Some(why) => writeln!(
                out,
                "{:<12} {:>12} {:>16}  excluded: {why}",
                e.route.name(),
                "-",
                "-"
            )?,
            None => {
                writeln!(
                    out,
                    "{:<12} {:>12} {:>16}  {} / {}{}",
                    e.route.name(),
                    fmt_s(e.seconds),
                    fmt_rate(shape.flops(), e.seconds),
                    e.storage,
                    e.recon_host,
                    e.moduli.map_or(String::new(), |r| format!(", r = {r}"))
                )?;
                write_terms(&mut out, &e.terms)?;
            }
        }
    }
    for s in &d.splits {
        writeln!(
            out,
            "{:<12} {:>12} {:>16}  split over GPUs {:?} ({}x{} grid), {:.2}x one GPU's {}: {}",
            s.route.name(),
            fmt_s(s.seconds),
            fmt_rate(shape.flops(), s.seconds),
            s.devices(),
            s.plan.grid_rows,
            s.plan.grid_cols,
            s.single_s / s.seconds,
            fmt_s(s.single_s),
            if s.pays {
                "taken"
            } else {
                "not taken (below the switch margin)"
            }
        )?;
        writeln!(
            out,
            "    host link    {:>12}  {}",
            "",
            if s.link_shared {
                "shared by the GPUs (calibrated, or not measured)"
            } else {
                "one per GPU (calibrated)"
            }
        )?;
        write_terms(&mut out, &s.terms)?;
    }
    if d.splits.is_empty() && engine.slots().len() > 1 {
        writeln!(
            out,
            "(no split priced over GPU slots {:?}: not a host dgemm, or C too small for two tiles)",
            engine.slots()
        )?;
    }
    writeln!(out)?;
    writeln!(out, "choice: {}  ({})", d.route.name(), d.prediction.reason)?;
    Ok(ExitCode::SUCCESS)
}

fn explain_reduced(
    pl: &Platform,
    opt: RateOptions,
    shape: &CallShape,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let rates = reduced::rate_record(pl, &shape.with_residency(Residency::Device), opt);
    let w = match shape.routine {
        Routine::Dgemm => 2.0 * shape.m as f64 * shape.n as f64 * shape.k as f64,
        Routine::Dsyrk => shape.m as f64 * shape.n as f64 * shape.k as f64,
    };
    if json {
        let routes: Vec<_> = rates
            .routes
            .iter()
            .map(|(n, s)| serde_json::json!({"route": n, "rate_flops": s.rate, "seconds": w / s.rate, "storage": s.tag, "q0": s.q0, "q_plane": s.q_plane, "q_red": s.q_red}))
            .collect();
        let v = serde_json::json!({"platform": pl.name, "m": shape.m, "n": shape.n, "k": shape.k, "routes": routes,
            "native_flops": pl.native_fp64, "best": rates.routes[rates.best].0, "codesign": opt.codesign});
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "platform {}: {}", pl.name, pl.description)?;
    writeln!(
        out,
        "reduced model (paper Alg. 4{}), device-resident, m={} n={} k={}, n̄ = {:.0}",
        if opt.codesign { ", co-design roof" } else { "" },
        shape.m,
        shape.n,
        shape.k,
        shape.nbar()
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<10} {:>10} {:>12}  {:<20} {:>10} {:>10} {:>10}",
        "route", "TFLOP/s", "time", "storage", "Q0 MB", "Qplane MB", "Qred MB"
    )?;
    for (i, (n, s)) in rates.routes.iter().enumerate() {
        writeln!(
            out,
            "{:<10} {:>10.1} {:>12}  {:<20} {:>10.1} {:>10.1} {:>10.1}{}",
            n,
            s.rate / 1e12,
            fmt_s(w / s.rate),
            s.tag,
            s.q0 / 1e6,
            s.q_plane / 1e6,
            s.q_red / 1e6,
            if i == rates.best {
                "  <- best emulated"
            } else {
                ""
            }
        )?;
    }
    writeln!(
        out,
        "{:<10} {:>10.1} {:>12}  (flat native fp64 reference)",
        "native",
        pl.native_fp64 / 1e12,
        fmt_s(w / pl.native_fp64)
    )?;
    Ok(ExitCode::SUCCESS)
}
