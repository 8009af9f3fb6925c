//! Host time of the accuracy rule (`ozaki_core::rule::choose`) per call, from the line
//! statistics of n x n operands (normal and phi = 2 entries, k = n): what a GPU call's plan
//! adds on the host (the fastest of `REPS` repetitions, default 20). Usage: `rule_cost [n...]`.
use ozaki_core::rule::{LineTable, Request, choose};
use ozaki_core::scaling::ScalingMode;
use ozaki_core::testutil::{Family, Rng, matrix};
use std::time::Instant;

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("sizes"))
        .collect();
    for n in if sizes.is_empty() {
        vec![4096, 8192, 16384]
    } else {
        sizes
    } {
        for fam in [Family::Normal, Family::Spread(2.0)] {
            let k = n.min(4096); // statistics of shorter lines, scaled counts: the rule's work is per line
            let mut rng = Rng::new(1);
            let x = matrix(fam, k, n, &mut rng);
            let t = LineTable::of_packed(&x, n, k);
            let req = Request::new(k, ScalingMode::Norm);
            let reps: usize = std::env::var("REPS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(20);
            // the fastest of the repetitions: the machine may be shared
            let (mut r, mut best) = (0, f64::INFINITY);
            for _ in 0..reps {
                let t0 = Instant::now();
                r = choose(t.view(), t.view(), &req).map_or(0, |c| c.moduli);
                best = best.min(t0.elapsed().as_secs_f64());
            }
            println!(
                "{} n = {n}: {r} moduli, {:.1} us per call (2 x {n} lines, {:.1} ns per line)",
                fam.name(),
                best * 1e6,
                best * 1e9 / (2 * n) as f64
            );
        }
    }
}
