//! `ozaki report TRACE... --out DIR`: a self-contained HTML page with PNG plots, for people
//! deciding whether the GPU routes would help their program.
//!
//! The page holds, for every trace (one "workload" each):
//! - the FLOP-weighted histogram of call sizes nbar = 2mn/(m+n) in log2 buckets, drawn like
//!   the paper's Fig. 8 (Ozaki 2.5, section 6.1) with its crossover band 128 <= nbar < 512;
//! - the route mix (share of FLOPs each route computed);
//! - the speedup per workload: predicted by the engine's replay (the machine
//!   profile or paper platform chosen as for `ozaki replay`, `--no-predict` to leave it out),
//!   and measured from the A/B fields (vendor time / route time over the compared calls)
//!   when the trace has them;
//! - the A/B error histogram per route;
//! - summary tables (calls, GFLOP, nbar median and quartiles, work at nbar <= 256, routes,
//!   A/B verdicts).
//!
//! The PNGs are written beside `index.html` and also embedded in it as data URIs, so the
//! page alone can be mailed or attached to an issue.

mod html;
mod paths;
mod plot;

use crate::ab_report::{self, AbSummary};
use crate::explain::{Model, ModelArgs};
use crate::progress::Progress;
use crate::tracefile;
use anyhow::Context;
use clap::Parser;
use ozaki_core::engine::CallShape;
use ozaki_core::engine::priced_moduli::priced_moduli;
use ozaki_core::engine::replay::{self, ReplayModel};
use ozaki_core::stats::{NbarStats, SMALL_NBAR};
use ozaki_core::trace::{CallRecord, Trace};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    about = "Write an HTML report with plots (call sizes, routes, speedup, A/B errors) for one or more traces"
)]
struct Args {
    /// Trace files (JSON Lines, plain or gzip); each is one workload in the report.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Directory to write index.html and the PNG plots into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Page title.
    #[arg(long, default_value = "ozaki-shim report")]
    title: String,
    /// Normwise tolerance of the A/B verdicts (as `ozaki ab-report --tol`).
    #[arg(long, default_value_t = ab_report::DEFAULT_TOL)]
    tol: f64,
    /// Leave out the engine's predicted speedups (show only measured A/B ones).
    #[arg(long)]
    no_predict: bool,
    #[command(flatten)]
    model: ModelArgs,
}

pub fn main(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let args = Args::try_parse_from(args)?;
    let mut workloads = Vec::new();
    for path in &args.traces {
        let trace = tracefile::read(path)?;
        workloads.push(Workload::new(workload_name(path), trace));
    }
    if !args.no_predict {
        let model = args.model.load()?;
        let mut progress = Progress::new("replaying", workloads.len() as u64, "traces");
        for w in &mut workloads {
            w.predicted = Some(predict(&w.trace.calls, &model));
            progress.add(1);
        }
    }
    let report = Report {
        title: args.title,
        workloads,
        tol: args.tol,
    };
    let page = report.write(&args.out)?;
    if let Some(note) = report
        .workloads
        .iter()
        .find_map(|w| w.predicted.as_ref()?.no_gpu_note())
    {
        eprintln!("ozaki report: {note}");
    }
    print!("{}", report.markdown_table());
    println!("wrote {}", page.display());
    Ok(ExitCode::SUCCESS)
}

/// The workload name shown for a trace file: its name without `.jsonl`/`.gz`.
fn workload_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut s = name.as_str();
    for ext in [".gz", ".zst", ".jsonl", ".json"] {
        s = s.strip_suffix(ext).unwrap_or(s);
    }
    s.to_string()
}

/// The engine's replay of one workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicted {
    /// What priced it (profile or platform).
    pub model: String,
    /// The baseline route: `vendor` (measured profile) or `native` (paper platform).
    pub baseline: String,
    /// Σ baseline seconds / Σ seconds of the engine's per-call choice.
    pub speedup: f64,
    /// FLOP share per route the engine would choose.
    pub work_share: Vec<(String, f64)>,
    /// Whether the model prices any GPU route. A profile without a GPU (the CPU-only one a
    /// machine without a GPU resolves to) keeps every call on the vendor BLAS, so its
    /// speedups are 1.00x by construction, not a finding.
    pub gpu_routes: bool,
}

impl Predicted {
    /// What the reader must be told when the speedups cannot show anything: that a profile
    /// or platform with a GPU gives predictions.
    pub fn no_gpu_note(&self) -> Option<String> {
        (!self.gpu_routes).then(|| {
            format!(
                "{} prices no GPU route, so every predicted speedup is 1.00x; pass --profile FILE \
                 (a GPU machine's, e.g. profiles/h200.json) or --platform NAME (rubin, gb300, b200, \
                 h200-datasheet) for predictions",
                self.model
            )
        })
    }
}

/// Replays `calls` through `model` as `ozaki replay` does (records without a product are
/// not work; shapes priced at the moduli count a record carries, else the engine's default).
pub fn predict(calls: &[CallRecord], model: &Model) -> Predicted {
    let calls: Vec<CallRecord> = calls
        .iter()
        .filter(|c| c.route != "xerbla")
        .cloned()
        .collect();
    let moduli_of: std::collections::HashMap<(u64, u64, u64), u32> = calls
        .iter()
        .filter_map(|c| c.moduli.map(|r| ((c.m, c.n, c.k), r)))
        .collect();
    let moduli = move |s: &CallShape| {
        moduli_of
            .get(&(s.m, s.n, s.k))
            .copied()
            .or(Some(priced_moduli(s.k, None)))
    };
    let gpu_routes = match model {
        Model::Measured(engine, _) => engine.profile().gpu.is_some(),
        Model::Reduced(..) => true,
    };
    let (desc, baseline, rm) = match model {
        Model::Measured(engine, src) => (
            format!("profile {} [{src}]", engine.profile().name),
            "vendor",
            ReplayModel::Measured {
                engine,
                moduli: &moduli,
            },
        ),
        Model::Reduced(pl, opt) => (
            format!("platform {} (paper reduced model)", pl.name),
            "native",
            ReplayModel::Reduced {
                platform: pl,
                options: *opt,
            },
        ),
    };
    let (_, c) = replay::replay(&calls, &rm);
    let speedup = c
        .speedup_vs
        .iter()
        .find(|(n, _)| n == baseline)
        .map_or(f64::NAN, |x| x.1);
    Predicted {
        model: desc,
        baseline: baseline.into(),
        speedup,
        work_share: c.work_share,
        gpu_routes,
    }
}

/// One trace and what the report derives from it.
pub struct Workload {
    /// Name (from the file name).
    pub name: String,
    /// The trace.
    pub trace: Trace,
    /// FLOP-weighted nbar statistics (None when the trace has no work).
    pub stats: Option<NbarStats>,
    /// FLOPs per route.
    pub route_flops: BTreeMap<String, f64>,
    /// Speedup over the vendor BLAS measured side by side (A/B), and the calls compared.
    pub measured: Option<(f64, usize)>,
    /// The engine's prediction, when asked for.
    pub predicted: Option<Predicted>,
}

impl Workload {
    /// Derives the statistics of one trace.
    pub fn new(name: String, trace: Trace) -> Workload {
        let stats = NbarStats::of(&trace.calls);
        let mut route_flops = BTreeMap::new();
        for c in &trace.calls {
            *route_flops.entry(c.route.clone()).or_insert(0.0) += c.flops();
        }
        let measured = measured_speedup(&trace.calls);
        Workload {
            name,
            trace,
            stats,
            route_flops,
            measured,
            predicted: None,
        }
    }

    /// Total FLOPs.
    pub fn flops(&self) -> f64 {
        self.route_flops.values().sum()
    }

    /// FLOP share per nbar bucket (see [`NBAR_BUCKETS`]).
    pub fn nbar_shares(&self) -> Vec<f64> {
        let mut w = vec![0.0; NBAR_BUCKETS];
        for c in &self.trace.calls {
            w[nbar_bucket(c.nbar())] += c.flops();
        }
        let total: f64 = w.iter().sum();
        if total > 0.0 {
            w.iter_mut().for_each(|x| *x /= total);
        }
        w
    }
}

/// Vendor time / route time summed over the calls with A/B results, when there are any.
fn measured_speedup(calls: &[CallRecord]) -> Option<(f64, usize)> {
    let (mut vendor, mut route, mut n) = (0u64, 0u64, 0usize);
    for ab in calls
        .iter()
        .filter_map(|c| c.ab.as_ref())
        .filter(|ab| ab.skipped.is_none())
    {
        vendor += ab.vendor_ns;
        route += ab.route_ns;
        n += 1;
    }
    (n > 0 && route > 0).then(|| (vendor as f64 / route as f64, n))
}

/// Number of nbar buckets: `< 16`, then `[2^j, 2^(j+1))` for 16 <= 2^j <= 4096, then `>= 8192`.
pub const NBAR_BUCKETS: usize = 11;

/// nbar bucket index: 0 for nbar < 16 (the paper's smallest edge), 1 for [16, 32), ...,
/// 9 for [4096, 8192), 10 for >= 8192.
pub fn nbar_bucket(nbar: f64) -> usize {
    // Also NaN.
    if nbar.is_nan() || nbar < 16.0 {
        return 0;
    }
    ((nbar.log2().floor() as usize) - 3).min(NBAR_BUCKETS - 1)
}

/// Label of nbar bucket `b` (its lower edge).
pub fn nbar_bucket_label(b: usize) -> String {
    match b {
        0 => "<16".into(),
        b if b == NBAR_BUCKETS - 1 => ">=8192".into(),
        b => format!("{}", 1u64 << (b + 3)),
    }
}

/// All workloads of one report.
pub struct Report {
    /// Page title.
    pub title: String,
    /// The workloads, in command-line order.
    pub workloads: Vec<Workload>,
    /// A/B verdict tolerance.
    pub tol: f64,
}

/// One rendered plot: file name, caption, PNG bytes.
pub struct Figure {
    /// File name in the output directory.
    pub file: &'static str,
    /// Caption under the image.
    pub caption: String,
    /// Alt text.
    pub alt: &'static str,
    /// PNG data.
    pub png: Vec<u8>,
    /// Width and height in pixels.
    pub size: (u32, u32),
}

impl Report {
    /// Renders every plot.
    pub fn figures(&self) -> anyhow::Result<Vec<Figure>> {
        let names: Vec<&str> = self.workloads.iter().map(|w| w.name.as_str()).collect();
        let series = |i: usize, values: Vec<f64>| plot::Series {
            name: names[i],
            color: plot::PALETTE[i % plot::PALETTE.len()],
            values,
        };

        let nbar = plot::bars(
            &plot::Bars {
                title: "Where the work is: FLOP-weighted call size",
                x_desc: "nbar = 2mn/(m+n), log2 buckets (label = lower edge)",
                y_desc: "share of FLOPs",
                categories: (0..NBAR_BUCKETS).map(nbar_bucket_label).collect(),
                series: self
                    .workloads
                    .iter()
                    .enumerate()
                    .map(|(i, w)| series(i, w.nbar_shares()))
                    .collect(),
                band: Some((4, 6, "crossover band 128 <= nbar < 512")),
                hline: None,
                y_fmt: |y| format!("{:.0}%", y * 100.0),
            },
            "no call with floating-point work in these traces",
        )?;

        // Route mix: one bar for what ran in the traced process, one for the engine's choice.
        let mut mix_rows: Vec<(String, BTreeMap<String, f64>)> = Vec::new();
        for w in &self.workloads {
            let total = w.flops().max(f64::MIN_POSITIVE);
            mix_rows.push((
                format!("{} (traced)", w.name),
                w.route_flops
                    .iter()
                    .map(|(r, f)| (r.clone(), f / total))
                    .collect(),
            ));
            if let Some(p) = &w.predicted {
                mix_rows.push((
                    format!("{} (predicted)", w.name),
                    p.work_share.iter().cloned().collect(),
                ));
            }
        }
        let routes: Vec<String> = {
            let mut r: Vec<String> = mix_rows
                .iter()
                .flat_map(|(_, m)| m.keys().cloned())
                .collect();
            r.sort();
            r.dedup();
            r
        };
        let route_series: Vec<plot::Series> = routes
            .iter()
            .map(|r| plot::Series {
                name: r,
                color: plot::route_color(r),
                values: mix_rows
                    .iter()
                    .map(|(_, m)| m.get(r).copied().unwrap_or(0.0))
                    .collect(),
            })
            .collect();
        let mix_labels: Vec<String> = mix_rows.iter().map(|(n, _)| n.clone()).collect();
        let mix = plot::stacked_shares(
            "Route mix: share of FLOPs per route",
            &mix_labels,
            &route_series,
            "no calls",
        )?;
        let rows: Vec<String> = self.workloads.iter().map(|w| w.name.clone()).collect();
        let mut speed_series = Vec::new();
        if self.workloads.iter().any(|w| w.predicted.is_some()) {
            speed_series.push(plot::Series {
                name: "predicted (engine replay)",
                color: plot::PALETTE[0],
                values: self
                    .workloads
                    .iter()
                    .map(|w| w.predicted.as_ref().map_or(0.0, |p| p.speedup))
                    .collect(),
            });
        }
        if self.workloads.iter().any(|w| w.measured.is_some()) {
            speed_series.push(plot::Series {
                name: "measured (A/B, side by side)",
                color: plot::PALETTE[1],
                values: self
                    .workloads
                    .iter()
                    .map(|w| w.measured.map_or(0.0, |m| m.0))
                    .collect(),
            });
        }

        let speed = plot::grouped_hbars(
            "Speedup over the baseline per workload",
            "baseline time / chosen routes' time",
            &rows,
            &speed_series,
            (1.0, "parity with the baseline"),
            |x| format!("{x:.2}x"),
            "no speedup data: run without --no-predict, or record A/B times with OZAKI_AB=1",
        )?;

        let all_calls: Vec<CallRecord> = self
            .workloads
            .iter()
            .flat_map(|w| w.trace.calls.iter().cloned())
            .collect();
        let ab = AbSummary::of(&all_calls, self.tol);
        // The difference on the data's scale when the records have it (what the verdict
        // judges), else the normwise one.
        let scaled = ab.routes.values().any(|r| r.worst_bound_ratio.is_some());
        let ab_png = plot::bars(
            &plot::Bars {
                title: "A/B: difference from the vendor BLAS, per route",
                x_desc: if scaled {
                    "||dC||_F / (|alpha| ||A||_F ||B||_F + |beta| ||C||_F) (bucket = upper decade)"
                } else {
                    "||C_route - C_vendor||_F / ||C_vendor||_F (bucket = upper decade)"
                },
                y_desc: "calls",
                categories: (0..ab_report::BUCKETS)
                    .map(ab_report::bucket_label)
                    .collect(),
                series: ab
                    .routes
                    .iter()
                    .map(|(r, s)| plot::Series {
                        name: r,
                        color: plot::route_color(r),
                        values: if scaled { &s.hist_scaled } else { &s.hist_norm }
                            .iter()
                            .map(|&n| n as f64)
                            .collect(),
                    })
                    .collect(),
                band: None,
                hline: None,
                y_fmt: |y| format!("{y:.0}"),
            },
            "no A/B data: run with OZAKI_AB=1 (or a fraction) to compare against the vendor BLAS",
        )?;

        Ok(vec![
            Figure {
                file: "nbar.png",
                caption: format!(
                    "Share of each workload's FLOPs by call size nbar (the paper's Fig. 8 view). Emulation pays off above the crossover; work at nbar <= {SMALL_NBAR:.0} mostly stays on the vendor BLAS."
                ),
                alt: "FLOP-weighted nbar histogram",
                png: nbar,
                size: plot::SIZE,
            },
            Figure {
                file: "routes.png",
                caption: "Share of FLOPs per route: what ran in the traced process, and what the engine would choose (predicted).".into(),
                alt: "route mix",
                png: mix,
                size: (plot::SIZE.0, plot::stacked_height(mix_labels.len())),
            },
            Figure {
                file: "speedup.png",
                caption: self.speedup_caption(),
                alt: "speedup per workload",
                png: speed,
                size: (plot::SIZE.0, plot::stacked_height(rows.len())),
            },
            Figure {
                file: "ab-errors.png",
                caption: "Distribution of the difference between each route's C and the vendor's over the A/B-compared calls, on the data's scale (any two correct fp64 results stay below about k times 2.2e-16) when recorded, else relative to C.".into(),
                alt: "A/B error histogram",
                png: ab_png,
                size: plot::SIZE,
            },
        ])
    }

    fn speedup_caption(&self) -> String {
        let mut c = String::from("Above 1: faster than the baseline. ");
        if let Some(p) = self.workloads.iter().find_map(|w| w.predicted.as_ref()) {
            c.push_str(&format!(
                "Predicted: the engine's replay with {}, sum of {} times over sum of the chosen routes' times (FLOP-weighted harmonic composite, paper section 6.1). ",
                p.model, p.baseline
            ));
        }
        c.push_str("Measured: vendor BLAS time over the route's time, summed over the calls compared side by side (OZAKI_AB).");
        c
    }

    /// The workload statistics as a Markdown table (what `traces/README.md` quotes).
    pub fn markdown_table(&self) -> String {
        let mut t = format!(
            "| workload | calls | GFLOP | nbar median (q25-q75) | work at nbar <= {SMALL_NBAR:.0} |\n|---|---|---|---|---|\n"
        );
        for w in &self.workloads {
            let (nbar, small) = match &w.stats {
                Some(s) => (
                    format!("{:.0} ({:.0}-{:.0})", s.median, s.q1, s.q3),
                    format!("{:.0}%", s.share_small * 100.0),
                ),
                None => ("-".into(), "-".into()),
            };
            t.push_str(&format!(
                "| {} | {} | {:.1} | {nbar} | {small} |\n",
                w.name,
                w.trace.calls.len(),
                w.flops() / 1e9
            ));
        }
        t
    }

    /// Writes `index.html` and the PNGs into `dir`; returns the page's path.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let figures = self.figures()?;
        for f in &figures {
            let path = dir.join(f.file);
            std::fs::write(&path, &f.png)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        let page = dir.join("index.html");
        std::fs::write(&page, html::page(self, &figures))
            .with_context(|| format!("cannot write {}", page.display()))?;
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nbar_buckets_follow_the_papers_log2_edges() {
        assert_eq!(nbar_bucket(0.0), 0);
        assert_eq!(nbar_bucket(15.9), 0);
        assert_eq!(nbar_bucket(16.0), 1);
        assert_eq!(nbar_bucket(127.9), 3);
        assert_eq!(nbar_bucket(128.0), 4);
        assert_eq!(nbar_bucket(511.0), 5);
        assert_eq!(nbar_bucket(4096.0), 9);
        assert_eq!(nbar_bucket(1e9), 10);
        assert_eq!(nbar_bucket(f64::NAN), 0);
        assert_eq!(
            (nbar_bucket_label(4), nbar_bucket_label(10)),
            ("128".to_string(), ">=8192".to_string())
        );
    }

    #[test]
    fn workload_names_drop_trace_extensions() {
        assert_eq!(
            workload_name(Path::new("traces/lobpcg-b64.jsonl.gz")),
            "lobpcg-b64"
        );
        assert_eq!(workload_name(Path::new("x.jsonl")), "x");
    }
}
