//! `ozaki bench --split 0,1`: one host-resident dgemm on one GPU vs its C split across the
//! given device slots (target >= 1.8x on 2 GPUs at 32768^3), both routes,
//! interleaved repetitions in one run so the two sides see the same machine state.
//!
//! The one-device side is `gpu_kernels::host::gemm` (the process's default GPU); the split
//! side is `gpu_kernels::multi::gemm` with `split_c`'s default plan over the given slots.
//! Each timing is the whole host-resident call (staging, transfers, compute, write-back into
//! the caller's C), i.e. what an LD_PRELOAD caller waits for. The split C is also compared
//! with the one-device C (bit-identical expected for gpu-ozaki with fixed moduli).

use super::{parse_shape, random_matrix};
use anyhow::{Result, anyhow};
use gpu_kernels::host::{self, Engine};
use gpu_kernels::multi;
use gpu_kernels::ozaki::Options;
use ozaki_core::blas::GemmArgs;
use ozaki_core::devices::{parse_devices, split_c};
use std::time::Instant;

/// Runs the comparison for each shape; `emit` receives one JSON object per shape and route.
pub fn run(
    devices: &str,
    shapes: &str,
    reps: usize,
    moduli: Option<usize>,
    tunings: &[(String, host::Tuning)],
    emit: &mut dyn FnMut(serde_json::Value) -> Result<()>,
) -> Result<()> {
    let slots = parse_devices(devices).map_err(|e| anyhow!("--split: {e}"))?;
    let one = gpu_kernels::gpu().map_err(|e| anyhow!("{e}"))?.describe();
    println!("# ozaki bench --split {devices}: one device = {one}");
    for &d in &slots {
        let g =
            gpu_kernels::device::gpu_slot(d, 0).map_err(|e| anyhow!("slot on device {d}: {e}"))?;
        println!("# slot device: {}", g.describe());
    }
    println!(
        "| shape | tuning | route | 1 GPU (s) | split (s) | speedup | grid | split C vs 1 GPU |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut timelines = Vec::new();
    for shape in shapes.split(',').filter(|s| !s.trim().is_empty()) {
        let (m, n, k) = parse_shape(shape.trim())?;
        let a = random_matrix(m * k, 0.0, 11);
        let b = random_matrix(k * n, 0.0, 12);
        let args = GemmArgs::product(m, n, k, &a, &b);
        let plan = split_c(m as u64, n as u64, &slots, &Default::default());
        let moduli = moduli.or(Some(14));
        for (name, engine) in [
            ("gpu-native", Engine::Native),
            (
                "gpu-ozaki",
                Engine::Ozaki(Options {
                    moduli,
                    max_block: 0,
                    scaling: None,
                    ..Options::default()
                }),
            ),
        ] {
            for (label, tuning) in tunings {
                host::set_tuning(Some(*tuning));
                let mut c1 = vec![0.0; m * n];
                let mut cs = vec![0.0; m * n];
                // warm-up both (allocations, kernel compilation per slot)
                host::gemm(&args, &mut c1, engine)
                    .map_err(|e| anyhow!("{name} one device: {e}"))?;
                multi::gemm(&args, &mut cs, engine, &plan)
                    .map_err(|e| anyhow!("{name} split: {e}"))?;
                let identical = c1.iter().zip(&cs).all(|(x, y)| x.to_bits() == y.to_bits());
                let diff = c1
                    .iter()
                    .zip(&cs)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f64::max);
                let (mut t1, mut ts) = (Vec::new(), Vec::new());
                let (mut o1, mut os) = (None, None);
                for _ in 0..reps.max(1) {
                    let t = Instant::now();
                    o1 = Some(
                        host::gemm(&args, &mut c1, engine)
                            .map_err(|e| anyhow!("{name} one device: {e}"))?,
                    );
                    t1.push(t.elapsed().as_secs_f64());
                    let t = Instant::now();
                    os = Some(
                        multi::gemm(&args, &mut cs, engine, &plan)
                            .map_err(|e| anyhow!("{name} split: {e}"))?,
                    );
                    ts.push(t.elapsed().as_secs_f64());
                }
                let (o1, os) = (o1.unwrap_or_default(), os.unwrap_or_default());
                timelines.push(format!(
                    "{m}x{n}x{k} {label} {name}: 1 GPU: {}; split: commit {:.1}{}",
                    super::timeline_text(o1.timeline.as_ref()),
                    os.commit_ms,
                    os.tiles
                        .iter()
                        .zip(&os.devices)
                        .map(|(o, d)| format!(
                            "; GPU {d}: {}",
                            super::timeline_text(o.timeline.as_ref())
                        ))
                        .collect::<String>()
                ));
                let med = |v: &mut Vec<f64>| {
                    v.sort_by(f64::total_cmp);
                    v[v.len() / 2]
                };
                let (s1, ss) = (med(&mut t1), med(&mut ts));
                let verdict = if identical {
                    "bit-identical".to_string()
                } else {
                    format!("max |diff| {diff:.1e}")
                };
                println!(
                    "| {m}x{n}x{k} | {label} | {name} | {s1:.3} | {ss:.3} | {:.2}x | {}x{} on {:?} | {verdict} |",
                    s1 / ss,
                    plan.grid_rows,
                    plan.grid_cols,
                    plan.tiles.iter().map(|t| t.device).collect::<Vec<_>>()
                );
                emit(
                    serde_json::json!({"kind": "split", "m": m, "n": n, "k": k, "route": name, "tuning": label, "devices": slots,
                "commit_ms": os.commit_ms,
                "grid": [plan.grid_rows, plan.grid_cols], "one_gpu_s": s1, "split_s": ss, "speedup": s1 / ss,
                "one_gpu_all_s": t1, "split_all_s": ts, "bit_identical": identical, "max_abs_diff": diff,
                "moduli": if name == "gpu-ozaki" { moduli } else { None }}),
                )?;
            }
        }
        host::set_tuning(None);
    }
    println!();
    println!("Timelines of the last repetition (ms after staging began):");
    for t in timelines {
        println!("- {t}");
    }
    Ok(())
}
