//! Times the `cpu-ozaki` emulation on square products, side by side with a plain fp64
//! triple loop in the same run (the goal: 1024^3 in under 10 s on 2 cores).
//!
//! ```text
//! cargo run --release -p ozaki-core --example cpu_ozaki_bench -- [n] [threads]
//! ```

use ozaki_core::emulate::{self, EmulationConfig, Moduli};
use ozaki_core::testutil::{Family, Rng, matrix};
use std::time::Instant;

fn naive(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    // Column-major, j-l-i loop order (the reference BLAS order), no blocking.
    let mut c = vec![0.0; n * n];
    for j in 0..n {
        for l in 0..n {
            let t = b[l + j * n];
            let (col, acol) = (&mut c[j * n..(j + 1) * n], &a[l * n..(l + 1) * n]);
            for (ci, &ai) in col.iter_mut().zip(acol) {
                *ci += t * ai;
            }
        }
    }
    c
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let mut rng = Rng::new(7);
    let a = matrix(Family::Normal, n, n, &mut rng);
    let b = matrix(Family::Normal, n, n, &mut rng);
    let t = Instant::now();
    let c0 = naive(&a, &b, n);
    let t_naive = t.elapsed().as_secs_f64();
    println!("| config | moduli | seconds | vs naive fp64 | phases (s) |");
    println!("|---|---|---|---|---|");
    println!("| naive fp64 triple loop (1 thread) | - | {t_naive:.3} | 1.00 | |");
    for (name, moduli) in [
        ("auto", Moduli::Auto),
        ("fixed 14", Moduli::Fixed(14)),
        ("fixed 20", Moduli::Fixed(20)),
    ] {
        let cfg = EmulationConfig {
            moduli,
            threads,
            ..Default::default()
        };
        let t = Instant::now();
        let (c, info) = emulate::matmul(&a, &b, n, n, n, &cfg).expect("emulation");
        let secs = t.elapsed().as_secs_f64();
        let diff = c
            .iter()
            .zip(&c0)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        let phases: Vec<String> = info
            .phases
            .iter()
            .map(|(p, s)| format!("{p} {s:.3}"))
            .collect();
        println!(
            "| cpu-ozaki {name}, {threads} threads | {} | {secs:.3} | {:.2} | {} (max |diff| vs naive {diff:.1e}) |",
            info.moduli,
            t_naive / secs,
            phases.join(", ")
        );
    }
}
