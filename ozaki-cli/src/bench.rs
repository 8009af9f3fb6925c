//! `ozaki bench`: the GPU routes against the best peers on this machine, side by side in one
//! run. Per shape: cuBLAS native DGEMM, cuBLAS's own fp64 emulation (fixed-point,
//! eager), ours device-resident (per moduli count), ours host-resident end to end (emulated
//! and native), NVBLAS host-resident when given a CPU BLAS, each with its error against the
//! exact dot products on sampled entries. Also the int8 GEMM rates (cuBLASLt and
//! cublasGemmEx) and the pinned host link, which bound what emulation can reach.
//!
//! Timings are medians of wall-clock repetitions of launch + synchronise after a warm-up,
//! so every column pays its own synchronisation the same way.

use crate::fortran_dgemm::{Dgemm, plain_nn};
use anyhow::{Context as _, Result, bail};
use clap::Parser;
use gpu_kernels::host::{self, Engine};
use gpu_kernels::measure::{self, EmulatedBlas, entry_errors};
use gpu_kernels::ozaki::{self, DeviceCall, Options};
use ozaki_core::blas::GemmArgs;
use ozaki_core::testutil::Rng;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

mod host_link;
mod pipeline;
mod split;

#[derive(Parser, Debug)]
#[command(about = "GPU benchmarks: ours vs cuBLAS native, cuBLAS emulation and NVBLAS")]
struct Args {
    /// Shapes: N (square) or MxNxK, comma separated.
    #[arg(
        long,
        default_value = "1024,2048,4096,8192,16384,110592x64x64,110592x128x128,4096x64x4096,1024x1024x16384"
    )]
    shapes: String,
    /// Moduli counts for our device-resident column: `auto` and/or numbers, comma separated,
    /// each optionally prefixed by a scaling (`fast:15`, `norm:auto`; default: the GPU
    /// route's own, norm), so scaling modes run side by side.
    #[arg(long, default_value = "auto,14,15,16")]
    moduli: String,
    /// Timed repetitions per measurement (median reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Input family: 0 = standard normal entries; phi > 0 = (u - 0.5) exp(phi z).
    #[arg(long, default_value_t = 0.0)]
    phi: f64,
    /// Entries of C checked against the exact reference per shape and method.
    #[arg(long, default_value_t = 32)]
    samples: usize,
    /// Square sizes for the int8 GEMM rate (empty: skip).
    #[arg(long, default_value = "4096,8192,16384")]
    int8: String,
    /// Shapes (N or MxNxK) whose cuBLASLt int8 algorithms are each timed, `--sweep-batch`
    /// products back to back per timing (empty: skip).
    #[arg(long, default_value = "")]
    int8_sweep: String,
    /// Heuristic algorithms timed per sweep shape.
    #[arg(long, default_value_t = 16)]
    sweep_algos: usize,
    /// Products back to back per sweep timing (the route's moduli count).
    #[arg(long, default_value_t = 15)]
    sweep_batch: usize,
    /// Largest column block of C per product batch in our device-resident columns (0: as
    /// memory allows; `gpu_kernels::ozaki::Options::max_block`).
    #[arg(long, default_value_t = 0)]
    max_block: usize,
    /// Skip host-resident measurements.
    #[arg(long)]
    no_host: bool,
    /// Skip cuBLAS's fp64 emulation.
    #[arg(long)]
    no_cublas_emulation: bool,
    /// CPU BLAS library for NVBLAS's fallback (enables the NVBLAS column).
    #[arg(long)]
    nvblas_cpu_blas: Option<String>,
    /// NVBLAS library to load.
    #[arg(long, default_value = "libnvblas.so.13")]
    nvblas: String,
    /// Only compare one GPU with C split across these device slots (e.g. `0,1`),
    /// for --shapes (default here: 16384,32768), with --reps interleaved repetitions.
    #[arg(long)]
    split: Option<String>,
    /// Only run the host-memory and host-link microbenchmarks on these devices (e.g. `0,1`).
    #[arg(long)]
    host_link: Option<String>,
    /// Only time the host-resident pipeline with these column-block counts (`auto` = its
    /// own choice, `none` = not pipelined), for --shapes (default here: 8192,16384), both
    /// routes.
    #[arg(long)]
    pipeline: Option<String>,
    /// Host-path tunings that --pipeline and --split compare side by side, `;` separated,
    /// each `key=value,...` over the defaults (`gpu_kernels::host::Tuning`: up=, back= or copy=memcpy|stream,
    /// threads, write, ring and block in MiB, native, ozaki) or `default`.
    #[arg(long, default_value = "default")]
    tuning: String,
    /// Buffer size of the host-link microbenchmarks, MiB.
    #[arg(long, default_value_t = 1024)]
    link_mib: usize,
    /// Also write one JSON object per measurement to this file.
    #[arg(long)]
    json: Option<String>,
    /// Seconds of back-to-back calls over which the board's energy counter (NVML) is read
    /// for cuBLAS native and our first --moduli column (0: no energy columns).
    #[arg(long, default_value_t = 0.5)]
    energy_secs: f64,
    /// Alignment of our int8 products' m, n, k (`gpu_kernels::ozaki::Options::align`; 0:
    /// the route's default, 1: unpadded m and n), to compare padded and unpadded products.
    #[arg(long, default_value_t = 0)]
    align: usize,
}

fn random_matrix(len: usize, phi: f64, seed: u64) -> Vec<f64> {
    let mut x = vec![0.0; len];
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(32);
    let per = len.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (t, chunk) in x.chunks_mut(per).enumerate() {
            s.spawn(move || {
                // one stream per thread chunk: generation is parallel and reproducible
                let mut r = Rng::new(
                    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        ^ (t as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
                );
                for v in chunk {
                    *v = if phi == 0.0 {
                        r.normal()
                    } else {
                        (r.uniform() - 0.5) * (phi * r.normal()).exp()
                    };
                }
            });
        }
    });
    x
}

/// The `--tuning` list: (label, tuning) pairs.
fn tunings(spec: &str) -> Result<Vec<(String, host::Tuning)>> {
    spec.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| Ok((s.to_string(), s.parse().map_err(anyhow::Error::msg)?)))
        .collect()
}

/// One line of a pipelined call's timeline (ms after it began staging).
fn timeline_text(t: Option<&host::Timeline>) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let first_last = |v: &[f32]| match (v.first(), v.last()) {
        (Some(a), Some(b)) => format!("{a:.1}..{b:.1}"),
        _ => "-".into(),
    };
    format!(
        "uploaded {} / computed {} / downloaded {:.1} / write {:.1}",
        first_last(&t.uploaded_ms),
        first_last(&t.computed_ms),
        t.downloaded_ms,
        t.write_ms
    )
}

/// A shape `N` (square) or `MxNxK`.
pub(crate) fn parse_shape(s: &str) -> Result<(usize, usize, usize)> {
    let parts: Vec<usize> = s
        .split('x')
        .map(|p| p.trim().parse())
        .collect::<Result<_, _>>()
        .with_context(|| format!("bad shape {s:?}"))?;
    match parts[..] {
        [n] => Ok((n, n, n)),
        [m, n, k] => Ok((m, n, k)),
        _ => bail!("shape {s:?} is neither N nor MxNxK"),
    }
}

/// Max errors over sampled entries of C (column-major m x n) for C = A B.
fn sampled_errors(
    a: &[f64],
    b: &[f64],
    c: &[f64],
    (m, n, k): (usize, usize, usize),
    samples: &[(usize, usize)],
) -> (f64, f64) {
    let mut worst = (0.0f64, 0.0f64);
    for &(i, j) in samples {
        let row = (0..k).map(|l| a[i + l * m]);
        let col = (0..k).map(|l| b[l + j * k]);
        let (comp, norm) = entry_errors(row, col, c[i + j * m]);
        worst = (worst.0.max(comp), worst.1.max(norm));
    }
    let _ = n;
    worst
}

fn fmt_err(e: (f64, f64)) -> String {
    format!("{:.1e}", e.1)
}

type NvblasDgemm = Dgemm<i32>;

struct Nvblas {
    _lib: libloading::Library,
    dgemm: NvblasDgemm,
}

fn load_nvblas(lib: &str, cpu_blas: &str) -> Result<Nvblas> {
    let dir = std::env::temp_dir().join(format!("ozaki-bench-nvblas-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let conf = dir.join("nvblas.conf");
    std::fs::write(
        &conf,
        format!(
            "NVBLAS_CPU_BLAS_LIB {cpu_blas}\nNVBLAS_GPU_LIST ALL\nNVBLAS_AUTOPIN_MEM_ENABLED\n"
        ),
    )?;
    // SAFETY: single-threaded at this point of the bench; NVBLAS reads the variable at load.
    unsafe { std::env::set_var("NVBLAS_CONFIG_FILE", &conf) };
    // SAFETY: loading NVBLAS runs its initialisers; it is a vendor library made for this.
    let l = unsafe { libloading::Library::new(lib) }.with_context(|| format!("loading {lib}"))?;
    // SAFETY: dgemm_ has the Fortran BLAS signature declared above.
    let f: NvblasDgemm = unsafe { *l.get::<NvblasDgemm>(b"dgemm_\0")? };
    Ok(Nvblas { _lib: l, dgemm: f })
}

/// Joules per call of `f` over `secs` of back-to-back calls (at least `reps`), where NVML
/// was opened (`None` otherwise).
fn energy_per_call(
    nvml: Option<&gpu_kernels::energy::Nvml>,
    secs: f64,
    reps: usize,
    f: impl FnMut() -> Result<()>,
) -> Result<Option<gpu_kernels::energy::Energy>> {
    match nvml {
        Some(n) => gpu_kernels::energy::measure(n, reps, secs, f),
        None => Ok(None),
    }
}

/// A table cell for an energy reading: joules per call, `capped` when the board was
/// power-capped during the run, `n/a` without a reading.
fn fmt_energy(e: Option<&gpu_kernels::energy::Energy>) -> String {
    match e {
        Some(e) if e.power_capped => format!("{:.3} (capped)", e.joules_per_call),
        Some(e) => format!("{:.3}", e.joules_per_call),
        None => "n/a".into(),
    }
}

/// The JSON fields of an energy reading (nulls without one).
fn energy_json(e: Option<&gpu_kernels::energy::Energy>) -> serde_json::Value {
    serde_json::json!({
        "joules_per_call": e.map(|e| e.joules_per_call),
        "watts": e.map(|e| e.watts()),
        "power_capped": e.map(|e| e.power_capped),
        "clock_reasons": e.map(|e| e.reasons),
        "energy_calls": e.map(|e| e.calls),
    })
}

/// `record` with the fields of `extra` (an object) added.
fn with_fields(mut record: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    if let (Some(r), serde_json::Value::Object(x)) = (record.as_object_mut(), extra) {
        r.extend(x);
    }
    record
}

fn median_wall(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut t = Vec::new();
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

pub fn main(argv: Vec<String>) -> Result<ExitCode> {
    let args = Args::parse_from(argv);
    let mut json = match &args.json {
        Some(p) => Some(std::fs::File::create(p).with_context(|| format!("creating {p}"))?),
        None => None,
    };
    let mut emit = |v: serde_json::Value| -> Result<()> {
        if let Some(f) = json.as_mut() {
            writeln!(f, "{v}")?;
        }
        Ok(())
    };
    if let Some(devices) = &args.host_link {
        host_link::run(devices, args.link_mib, &mut emit)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(blocks) = &args.pipeline {
        let default_shapes = Args::parse_from(["bench"]).shapes;
        let shapes = if args.shapes == default_shapes {
            "8192,16384"
        } else {
            args.shapes.as_str()
        };
        pipeline::run(
            blocks,
            shapes,
            args.reps,
            &tunings(&args.tuning)?,
            &mut emit,
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(devices) = &args.split {
        let default_shapes = Args::parse_from(["bench"]).shapes;
        let shapes = if args.shapes == default_shapes {
            "16384,32768"
        } else {
            args.shapes.as_str()
        };
        let moduli = args.moduli.split(',').find_map(|s| s.trim().parse().ok());
        split::run(
            devices,
            shapes,
            args.reps,
            moduli,
            &tunings(&args.tuning)?,
            &mut emit,
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let describe = {
        let g = gpu_kernels::gpu().map_err(|e| anyhow::anyhow!("{e}"))?;
        g.ozaki_ready()
            .map_err(|e| anyhow::anyhow!("gpu-ozaki not available: {e}"))?;
        g.describe()
    };
    println!("# ozaki bench: {describe}");
    println!(
        "# inputs: {}",
        if args.phi == 0.0 {
            "standard normal".to_string()
        } else {
            format!("(u-0.5) exp({} z)", args.phi)
        }
    );
    emit(serde_json::json!({"kind": "device", "describe": describe, "phi": args.phi}))?;

    // int8 rates and the host link
    {
        let mut g = gpu_kernels::gpu().map_err(|e| anyhow::anyhow!("{e}"))?;
        for n in args.int8.split(',').filter(|s| !s.trim().is_empty()) {
            let n: usize = n.trim().parse()?;
            let (lt1, ex) =
                measure::int8_rates(&mut g, n, 1, args.reps).map_err(|e| anyhow::anyhow!("{e}"))?;
            let (lt16, _) = measure::int8_rates(
                &mut g,
                n,
                16.min((8 << 30) / (n * n * 6)).max(1),
                args.reps.min(3),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            println!(
                "int8 GEMM n = {n}: cuBLASLt {lt1:.0} TOPS (16 back-to-back: {lt16:.0}), cublasGemmEx TN {ex:.0} TOPS; dense peak 1979"
            );
            emit(
                serde_json::json!({"kind": "int8", "n": n, "lt_tops": lt1, "lt_batched_tops": lt16, "gemmex_tops": ex}),
            )?;
        }
        for shape in args.int8_sweep.split(',').filter(|s| !s.trim().is_empty()) {
            let dims = parse_shape(shape)?;
            let rates = measure::int8_sweep(
                &mut g,
                dims,
                args.sweep_batch,
                args.sweep_algos,
                args.reps.min(3),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            println!(
                "int8 sweep {}x{}x{}, {} products back to back:",
                dims.0, dims.1, dims.2, args.sweep_batch
            );
            println!(
                "| rank | algo | tile | stages | splitk | swizzle | custom | cluster | TOPS |"
            );
            for r in &rates {
                let c = r.config;
                println!(
                    "| {}{} | {} | {} | {} | {} | {} | {} | {} | {:.0} |",
                    r.rank,
                    if r.rank == 0 { " (route)" } else { "" },
                    r.algo_id,
                    c[0],
                    c[1],
                    c[2],
                    c[3],
                    c[4],
                    c[5],
                    r.tops
                );
                emit(
                    serde_json::json!({"kind": "int8-sweep", "m": dims.0, "n": dims.1, "k": dims.2,
                    "batch": args.sweep_batch, "algo": r}),
                )?;
            }
        }
        let (h2d, d2h) =
            measure::link_bandwidth(&mut g, 1 << 30).map_err(|e| anyhow::anyhow!("{e}"))?;
        println!("pinned host link: H2D {h2d:.1} GB/s, D2H {d2h:.1} GB/s");
        emit(serde_json::json!({"kind": "link", "h2d_gbs": h2d, "d2h_gbs": d2h}))?;
    }

    let nvblas = match &args.nvblas_cpu_blas {
        Some(cpu) => match load_nvblas(&args.nvblas, cpu) {
            Ok(n) => Some(n),
            Err(e) => {
                println!("NVBLAS column skipped: {e:#}");
                None
            }
        },
        None => None,
    };
    let emulated = if args.no_cublas_emulation {
        None
    } else {
        match EmulatedBlas::new() {
            Ok(e) => Some(e),
            Err(e) => {
                println!("cuBLAS emulation column skipped: {e}");
                None
            }
        }
    };
    let moduli: Vec<(Option<ozaki::ScalingMode>, Option<usize>)> = args
        .moduli
        .split(',')
        .map(|s| -> Result<_> {
            let (scaling, count) = match s.trim().split_once(':') {
                Some((sc, c)) => (Some(sc.parse().map_err(anyhow::Error::msg)?), c),
                None => (None, s.trim()),
            };
            Ok((
                scaling,
                if count == "auto" {
                    None
                } else {
                    Some(count.parse()?)
                },
            ))
        })
        .collect::<Result<_>>()?;

    let nvml = if args.energy_secs > 0.0 {
        let ordinal = gpu_kernels::gpu()
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .ordinal;
        match gpu_kernels::energy::Nvml::for_cuda_device(ordinal) {
            Ok(n) => Some(n),
            Err(e) => {
                println!("energy columns n/a: {e}");
                None
            }
        }
    } else {
        None
    };
    println!();
    let mut header = "| m x n x k | cuBLAS native TF/s (err) | cuBLAS emu (err) |".to_string();
    for (sc, r) in &moduli {
        header += &format!(
            " ours dev {}{} (err) |",
            sc.map_or(String::new(), |s| format!("{}:", s.name())),
            r.map_or("auto".into(), |r| format!("r={r}"))
        );
    }
    if args.energy_secs > 0.0 {
        header += " cuBLAS J/call | ours J/call |";
    }
    if !args.no_host {
        header += " ours host ozaki ms | ours host native ms | host-link bound ms |";
    }
    if nvblas.is_some() {
        header += " NVBLAS ms (err) |";
    }
    println!("{header}");
    println!("|{}", "---|".repeat(header.matches('|').count() - 1));

    for (si, shape) in args
        .shapes
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .enumerate()
    {
        let (m, n, k) = parse_shape(shape)?;
        let flops = 2.0 * m as f64 * n as f64 * k as f64;
        let a = random_matrix(m * k, args.phi, 2 * si as u64 + 1);
        let b = random_matrix(k * n, args.phi, 2 * si as u64 + 2);
        let mut rng = Rng::new(0x5eed + si as u64);
        let samples: Vec<(usize, usize)> = (0..args.samples)
            .map(|_| {
                (
                    (rng.next_u64() % m as u64) as usize,
                    (rng.next_u64() % n as u64) as usize,
                )
            })
            .collect();
        let mut row = format!("| {m} x {n} x {k} |");
        let mut c = vec![0.0f64; m * n];

        let mut g = gpu_kernels::gpu().map_err(|e| anyhow::anyhow!("{e}"))?;
        let stream = g.stream();
        let ge = |e: gpu_kernels::GpuError| anyhow::anyhow!("{e}");
        let da = measure::upload(&a).map_err(ge)?;
        let db = measure::upload(&b).map_err(ge)?;
        let dc = measure::upload(&c).map_err(ge)?;

        // cuBLAS native
        let native_call = || {
            // SAFETY: three live device buffers of the packed shapes; timed to completion.
            unsafe {
                gpu_kernels::native::dgemm_packed(
                    &g,
                    stream,
                    (m, n, k),
                    [da.ptr(), db.ptr(), dc.ptr()],
                )
            }
            .and_then(|_| gpu_kernels::device::sync(stream))
            .map_err(ge)
        };
        let t_native = median_wall(args.reps, native_call)?;
        let j_native = energy_per_call(nvml.as_ref(), args.energy_secs, args.reps, native_call)?;
        measure::download(&dc, &mut c).map_err(ge)?;
        let e_native = sampled_errors(&a, &b, &c, (m, n, k), &samples);
        let tf_native = flops / t_native / 1e12;
        row += &format!(" {tf_native:.1} ({}) |", fmt_err(e_native));
        emit(with_fields(
            serde_json::json!({"kind": "gemm", "m": m, "n": n, "k": k, "method": "cublas-native", "s": t_native, "tflops": tf_native, "err_comp": e_native.0, "err_ab": e_native.1}),
            energy_json(j_native.as_ref()),
        ))?;

        // cuBLAS emulation
        match &emulated {
            Some(em) => {
                let t = median_wall(args.reps, || {
                    em.dgemm(stream, m, n, k, da.ptr(), db.ptr(), dc.ptr())
                        .and_then(|_| gpu_kernels::device::sync(stream))
                        .map_err(ge)
                })?;
                measure::download(&dc, &mut c).map_err(ge)?;
                let e = sampled_errors(&a, &b, &c, (m, n, k), &samples);
                row += &format!(" {:.2}x ({}) |", t_native / t, fmt_err(e));
                emit(
                    serde_json::json!({"kind": "gemm", "m": m, "n": n, "k": k, "method": "cublas-emulated-eager", "s": t, "tflops": flops / t / 1e12, "err_comp": e.0, "err_ab": e.1}),
                )?;
            }
            None => row += " n/a |",
        }

        // ours, device-resident
        let mut j_ours = None;
        for (mi, (scaling, r)) in moduli.iter().enumerate() {
            let call = DeviceCall::product((m, n, k), 1.0, (da.ptr(), db.ptr()), 0.0, dc.ptr());
            let opts = Options {
                moduli: *r,
                scaling: *scaling,
                max_block: args.max_block,
                align: args.align,
                ..Options::default()
            };
            let mut last = None;
            let mut ours_call = || {
                // SAFETY: the call's buffers are live device copies; gemm waits for them.
                last = Some(unsafe { ozaki::gemm(&mut g, stream, &call, opts) }.map_err(ge)?);
                Ok(())
            };
            let res = median_wall(args.reps, &mut ours_call).and_then(|t| {
                let energy = if mi == 0 {
                    j_ours = energy_per_call(
                        nvml.as_ref(),
                        args.energy_secs,
                        args.reps,
                        &mut ours_call,
                    )?;
                    j_ours
                } else {
                    None
                };
                Ok((t, energy))
            });
            match res {
                Ok((t, energy)) => {
                    measure::download(&dc, &mut c).map_err(ge)?;
                    let e = sampled_errors(&a, &b, &c, (m, n, k), &samples);
                    let o = last.unwrap_or_default();
                    row += &format!(" {:.2}x r={} ({}) |", t_native / t, o.moduli, fmt_err(e));
                    emit(with_fields(
                        serde_json::json!({"kind": "gemm", "m": m, "n": n, "k": k, "method": "ours-device", "moduli": o.moduli,
                        "s": t, "tflops": flops / t / 1e12, "speedup_vs_native": t_native / t, "err_comp": e.0, "err_ab": e.1,
                        "estimate": o.estimate, "scaling": o.scaling.map(|s| s.name()), "align": args.align,
                        "phases_ns": [o.phases.convert_ns, o.phases.products_ns, o.phases.reconstruct_ns]}),
                        if mi == 0 {
                            energy_json(energy.as_ref())
                        } else {
                            serde_json::json!({})
                        },
                    ))?;
                }
                Err(e) => row += &format!(" failed: {e} |"),
            }
        }
        if args.energy_secs > 0.0 {
            row += &format!(
                " {} | {} |",
                fmt_energy(j_native.as_ref()),
                fmt_energy(j_ours.as_ref())
            );
        }
        drop((da, db, dc));
        drop(g);

        // ours, host-resident end to end
        if !args.no_host {
            let gemm_args = GemmArgs::product(m, n, k, &a, &b);
            let host_reps = if flops > 1e12 { 3 } else { args.reps };
            let mut out = None;
            let t_oz = median_wall(host_reps, || {
                out = Some(
                    host::gemm(&gemm_args, &mut c, Engine::Ozaki(Options::default()))
                        .map_err(ge)?,
                );
                Ok(())
            })?;
            let e = sampled_errors(&a, &b, &c, (m, n, k), &samples);
            let t_nat = median_wall(host_reps, || {
                host::gemm(&gemm_args, &mut c, Engine::Native)
                    .map(|_| ())
                    .map_err(ge)
            })?;
            let bytes = 8.0 * (m * k + k * n + m * n) as f64;
            let (h2d, _) = {
                let mut g = gpu_kernels::gpu().map_err(ge)?;
                measure::link_bandwidth(&mut g, 256 << 20).map_err(ge)?
            };
            let bound = bytes / (h2d * 1e9);
            row += &format!(
                " {:.1} ({}) | {:.1} | {:.1} |",
                t_oz * 1e3,
                fmt_err(e),
                t_nat * 1e3,
                bound * 1e3
            );
            let o = out.unwrap_or_default();
            emit(
                serde_json::json!({"kind": "gemm", "m": m, "n": n, "k": k, "method": "ours-host-ozaki", "moduli": o.moduli, "s": t_oz,
                "link_bound_s": bound, "err_comp": e.0, "err_ab": e.1,
                "phases_ns": [o.phases.transfer_ns, o.phases.convert_ns, o.phases.products_ns, o.phases.reconstruct_ns]}),
            )?;
            emit(
                serde_json::json!({"kind": "gemm", "m": m, "n": n, "k": k, "method": "ours-host-native", "s": t_nat}),
            )?;
        }

        if let Some(nv) = &nvblas {
            let (mi, ni, ki) = (m as i32, n as i32, k as i32);
            let t = median_wall(args.reps.min(3), || {
                // SAFETY: NVBLAS's LP64 dgemm_ on host arrays of the stated shapes.
                unsafe { plain_nn(nv.dgemm, mi, ni, ki, &a, &b, &mut c) };
                Ok(())
            })?;
            let e = sampled_errors(&a, &b, &c, (m, n, k), &samples);
            row += &format!(" {:.1} ({}) |", t * 1e3, fmt_err(e));
            emit(
                serde_json::json!({"kind": "gemm", "m": m, "n": n, "k": k, "method": "nvblas-host", "s": t, "err_comp": e.0, "err_ab": e.1}),
            )?;
        }
        println!("{row}");
    }
    println!();
    println!(
        "err = max over sampled entries of |c - s| / sum_l |a_il b_lj|, s the exact dot product."
    );
    println!(
        "ratios = cuBLAS native time / method time (higher is faster); host columns in ms end to end."
    );
    if args.energy_secs > 0.0 {
        println!(
            "J/call = the board's energy counter (NVML) over >= {} s of back-to-back calls, per call; ours: the first --moduli column; capped: the board hit its power cap meanwhile.",
            args.energy_secs
        );
    }
    Ok(ExitCode::SUCCESS)
}
