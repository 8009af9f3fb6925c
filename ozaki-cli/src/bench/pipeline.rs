//! `ozaki bench --pipeline none,1,2,4,8,auto`: the host-resident pipeline of
//! `gpu_kernels::host` with each given number of column blocks (`auto`: its own choice;
//! `none`: not pipelined, one block and one panel, every upload before the product and the
//! download after it) against the host-link bound, both routes, side by side in one run.
//! Each timing is the whole host-resident call, median of `--reps` after a warm-up; operands
//! standard normal, beta = 0, automatic moduli for gpu-ozaki. With `none` among the counts,
//! each row also gives its speed-up over the unpipelined call of its route.

use super::{median_wall, parse_shape, random_matrix};
use anyhow::{Result, anyhow};
use gpu_kernels::host::{self, Engine};
use gpu_kernels::ozaki::Options;
use ozaki_core::blas::GemmArgs;

/// Runs the sweep for each shape; `emit` receives one JSON object per shape, route and count.
pub fn run(
    blocks: &str,
    shapes: &str,
    reps: usize,
    tunings: &[(String, host::Tuning)],
    emit: &mut dyn FnMut(serde_json::Value) -> Result<()>,
) -> Result<()> {
    let ge = |e: gpu_kernels::GpuError| anyhow!("{e}");
    let counts: Vec<Count> = blocks
        .split(',')
        .map(|s| match s.trim() {
            "auto" => Ok(Count::Auto),
            "none" => Ok(Count::Unpipelined),
            s => s.parse().map(Count::Blocks),
        })
        .collect::<Result<_, _>>()?;
    let (h2d, describe) = {
        let mut g = gpu_kernels::gpu().map_err(ge)?;
        let (h2d, _) = gpu_kernels::measure::link_bandwidth(&mut g, 256 << 20).map_err(ge)?;
        (h2d, g.describe())
    };
    println!("# ozaki bench --pipeline {blocks}: {describe}; pinned H2D {h2d:.1} GB/s");
    println!(
        "| shape | tuning | route | blocks | ms | link bound ms | bound / time | vs unpipelined | moduli | timeline of the last call (ms) |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---|---|");
    for shape in shapes.split(',').filter(|s| !s.trim().is_empty()) {
        let (m, n, k) = parse_shape(shape.trim())?;
        let a = random_matrix(m * k, 0.0, 21);
        let b = random_matrix(k * n, 0.0, 22);
        let args = GemmArgs::product(m, n, k, &a, &b);
        let bound = 8.0 * (m * k + k * n + m * n) as f64 / (h2d * 1e9);
        let mut c = vec![0.0; m * n];
        for (label, tuning) in tunings {
            host::set_tuning(Some(*tuning));
            for (name, engine) in [
                ("gpu-native", Engine::Native),
                ("gpu-ozaki", Engine::Ozaki(Options::default())),
            ] {
                // the unpipelined call first, so every row of the route can compare with it
                let mut order = counts.clone();
                order.sort_by_key(|c| *c != Count::Unpipelined);
                let mut unpipelined = None;
                for &count in &order {
                    let grid = match count {
                        Count::Unpipelined => host::Grid {
                            blocks: 1,
                            panels: 1,
                        },
                        Count::Blocks(b) => host::Grid {
                            blocks: b,
                            panels: host::pipeline_panels(&args, engine),
                        },
                        Count::Auto => host::Grid::of(&args, engine),
                    };
                    let blocks = grid.blocks;
                    let mut last = None;
                    let t = median_wall(reps, || {
                        let mut g = gpu_kernels::gpu().map_err(ge)?;
                        last =
                            Some(host::gemm_grid(&mut g, &args, &mut c, engine, grid).map_err(ge)?);
                        Ok(())
                    })?;
                    let last = last.unwrap_or_default();
                    let moduli = last.moduli;
                    let blocks_label = match count {
                        Count::Unpipelined => "none (1 x 1)".to_string(),
                        Count::Auto => format!("auto ({blocks}) x {}", grid.panels),
                        Count::Blocks(b) => format!("{b} x {}", grid.panels),
                    };
                    if count == Count::Unpipelined {
                        unpipelined = Some(t);
                    }
                    let speedup = unpipelined.map(|u| u / t);
                    println!(
                        "| {m}x{n}x{k} | {label} | {name} | {blocks_label} | {:.1} | {:.1} | {:.2} | {} | {} | {} |",
                        t * 1e3,
                        bound * 1e3,
                        bound / t,
                        speedup.map_or("-".into(), |x| format!("{x:.2}x")),
                        moduli.map_or("-".into(), |r| r.to_string()),
                        super::timeline_text(last.timeline.as_ref())
                    );
                    let tl = last.timeline.as_ref();
                    emit(
                        serde_json::json!({"kind": "pipeline", "m": m, "n": n, "k": k, "route": name, "tuning": label,
                    "blocks": blocks, "panels": grid.panels, "auto": count == Count::Auto,
                    "unpipelined": count == Count::Unpipelined, "vs_unpipelined": speedup, "s": t, "link_bound_s": bound, "moduli": moduli,
                    "uploaded_ms": tl.map(|t| t.uploaded_ms.clone()), "computed_ms": tl.map(|t| t.computed_ms.clone()),
                    "downloaded_ms": tl.map(|t| t.downloaded_ms), "write_ms": tl.map(|t| t.write_ms)}),
                    )?;
                }
            }
        }
        host::set_tuning(None);
    }
    Ok(())
}

/// One column-block count of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Count {
    /// One block and one panel: not pipelined.
    Unpipelined,
    /// This many column blocks, the route's row panels.
    Blocks(usize),
    /// The pipeline's own choice ([`host::Grid::of`]).
    Auto,
}
