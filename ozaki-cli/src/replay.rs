//! `ozaki replay TRACE [--profile FILE | --platform NAME] [--csv OUT] [--spin N]`: replays a
//! trace through the engine for this or another machine: one CSV row per record and the
//! composites (work-weighted harmonic speedups of auto against every all-one-route baseline,
//! FLOP-weighted n̄ quartiles, the per-route work share).

use crate::explain::{Model, ModelArgs};
use anyhow::Context;
use clap::Parser;
use ozaki_core::engine::CallShape;
use ozaki_core::engine::priced_moduli::priced_moduli;
use ozaki_core::engine::replay::{self, ReplayModel};
use ozaki_core::engine::spin;
use std::io::Write;
use std::process::ExitCode;

/// Replay a trace through the per-record engine.
#[derive(Parser, Debug)]
#[command(about = "replay a trace through the engine for this or another machine")]
struct Args {
    /// Trace file(s) (JSON Lines written by the shim).
    #[arg(required = true)]
    traces: Vec<std::path::PathBuf>,
    /// Write the per-record rows here as CSV (`-` for stdout).
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
    /// Moduli count to price for records that carry none (default: the accuracy rule's count
    /// for normally distributed data at the record's k, as `auto` priced it; 0 = contract
    /// never met).
    #[arg(long)]
    moduli: Option<u32>,
    /// Price as if the traced process's OpenBLAS pools had spun 2^N cycles after each call
    /// (4-30, what `OZAKI_VENDOR_SPIN=N` sets; default: the spin its header records): the
    /// vendor's wake a GPU call finds after a threaded vendor call lasts that long.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(4..=30))]
    spin: Option<u32>,
    #[command(flatten)]
    model: ModelArgs,
}

pub fn main(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let mut a = Args::parse_from(args);
    let mut calls = Vec::new();
    let mut in_flight = Vec::new();
    let mut recorded_threads = None;
    let mut vendor_spin_log2 = None;
    let mut threads_shared = false;
    for path in &a.traces {
        let mut loaded = crate::tracefile::load(path)?;
        for n in &loaded.notes {
            eprintln!("ozaki replay: {n}");
        }
        recorded_threads =
            recorded_threads.or(loaded.trace.headers.iter().find_map(|h| h.blas_threads));
        // The vendor's wake as the traced process's spin left it (an OpenBLAS vendor's).
        vendor_spin_log2 = vendor_spin_log2.or(loaded
            .trace
            .headers
            .iter()
            .filter(|h| h.vendor.values().any(|lib| spin::is_openblas(lib)))
            .find_map(|h| h.vendor_spin_log2));
        threads_shared |= loaded
            .trace
            .headers
            .iter()
            .any(|h| h.vendor_threads_shared == Some(true));
        // Records the shim answered without a product (illegal arguments, quick returns)
        // are not work for any route; they still occupied their thread, so the calls in
        // flight are counted over every record of the file first.
        let flights = replay::in_flight(&loaded.trace.calls);
        for (c, f) in loaded.trace.calls.drain(..).zip(flights) {
            if c.route != "xerbla" {
                calls.push(c);
                in_flight.push(f);
            }
        }
    }
    // The trace's own machine: the BLAS thread count its header recorded, unless --threads
    // says otherwise; a trace without one is priced at this machine's, as before.
    match (a.model.threads, recorded_threads) {
        (None, Some(t)) => a.model.threads = Some(t),
        (None, None) => eprintln!(
            "ozaki replay: the trace header records no BLAS thread count (schema < 3); \
             pricing with this machine's (--threads sets it)"
        ),
        _ => {}
    }
    let most = in_flight.iter().copied().max().unwrap_or(1);
    // A record without a count is priced as `auto` priced it: the rule's count at its k.
    let default_r = move |k: u64| match a.moduli {
        Some(0) => None,
        Some(r) => Some(r),
        None => Some(priced_moduli(k, None)),
    };
    let moduli_of: std::collections::HashMap<(u64, u64, u64), u32> = calls
        .iter()
        .filter_map(|c| c.moduli.map(|r| ((c.m, c.n, c.k), r)))
        .collect();
    let moduli = move |s: &CallShape| {
        moduli_of
            .get(&(s.m, s.n, s.k))
            .copied()
            .or_else(|| default_r(s.k))
    };
    let model = a
        .model
        .load_as_traced(a.spin.or(vendor_spin_log2), threads_shared)?;
    let (desc, rm) = match &model {
        Model::Measured(engine, src) => (
            format!("profile {} [{src}]", engine.profile().name),
            ReplayModel::Measured {
                engine,
                moduli: &moduli,
            },
        ),
        Model::Reduced(pl, opt) => (
            format!(
                "platform {} (paper reduced model, device-resident{})",
                pl.name,
                if opt.codesign { ", co-design roof" } else { "" }
            ),
            ReplayModel::Reduced {
                platform: pl,
                options: *opt,
            },
        ),
    };
    let (rows, c) = replay::replay_loaded(&calls, &in_flight, &rm);
    if let Some(path) = &a.csv {
        if path.as_os_str() == "-" {
            replay::write_csv(&rows, &mut std::io::stdout().lock())?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("{}", path.display()))?,
        );
        replay::write_csv(&rows, &mut f)?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "replay of {} records ({:.3} GFLOP) with {desc}",
        c.records,
        c.flops / 1e9
    )?;
    if most > 1 {
        writeln!(
            out,
            "calls in flight: up to {most} at once (vendor priced at each call's share of the CPU)"
        )?;
        let waited: Vec<f64> = rows
            .iter()
            .map(|r| r.queue_s)
            .filter(|&w| w > 0.0)
            .collect();
        if !waited.is_empty() {
            writeln!(
                out,
                "GPU queue: {} records sent to the GPU waited behind the ones before them, {:.6} s \
                 in all (in auto's time; the all-on rows price each record alone)",
                waited.len(),
                waited.iter().sum::<f64>()
            )?;
        }
    }
    if c.records == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "FLOP-weighted n̄: median {:.0} (q25 {:.0}, q75 {:.0}); work at n̄ <= 256: {:.1}%",
        c.nbar_quartiles.1,
        c.nbar_quartiles.0,
        c.nbar_quartiles.2,
        100.0 * c.work_nbar_le_256
    )?;
    writeln!(
        out,
        "auto: predicted {:.6} s, {:.2} GFLOP/s composite",
        c.auto_seconds,
        c.flops / c.auto_seconds / 1e9
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<12} {:>14} {:>22} {:>12}",
        "all on", "predicted s", "auto speedup (x)", "cannot take"
    )?;
    for ((name, secs, missing), (_, sp)) in c.all_route_seconds.iter().zip(&c.speedup_vs) {
        writeln!(
            out,
            "{:<12} {:>14.6} {:>22.3} {:>12}",
            name, secs, sp, missing
        )?;
    }
    writeln!(out)?;
    writeln!(out, "auto's work share per route:")?;
    for (name, share) in &c.work_share {
        writeln!(out, "  {:<12} {:>6.1}%", name, 100.0 * share)?;
    }
    if let Some(path) = &a.csv {
        writeln!(out)?;
        writeln!(out, "per-record rows: {}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}
