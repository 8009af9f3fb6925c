//! Host time of the accuracy rule per call, from the line statistics of n x n operands
//! (normal and phi = 2 entries, k = n), in its two parts:
//! - **summaries**: the per-line keys reduced to the two side summaries
//!   (`ozaki_core::rule::SideSummary::of`): what `cpu-ozaki` does on the host and the GPU route
//!   does on the device (`line_summary`);
//! - **rule**: the count from the two summaries (`ozaki_core::rule::choose_summarised`): the
//!   GPU route's whole host step.
//!
//! Each the fastest of `REPS` repetitions (default 20; the machine may be shared). Usage:
//! `rule_cost [n...]` (default 4096 8192 16384).
use ozaki_core::rule::{LineTable, Request, SideSummary, choose_summarised};
use ozaki_core::scaling::ScalingMode;
use ozaki_core::testutil::{Family, Rng, matrix};
use std::time::Instant;

/// The fastest of `reps` runs of `f`, in seconds, and its last result.
fn fastest<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = f();
    for _ in 0..reps {
        let t0 = Instant::now();
        out = f();
        best = best.min(t0.elapsed().as_secs_f64());
    }
    (best, out)
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("sizes"))
        .collect();
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for n in if sizes.is_empty() {
        vec![4096, 8192, 16384]
    } else {
        sizes
    } {
        for fam in [Family::Normal, Family::Spread(2.0)] {
            let k = n.min(4096); // statistics of shorter lines: the rule's work is per line
            let mut rng = Rng::new(1);
            let x = matrix(fam, k, n, &mut rng);
            let t = LineTable::of_packed(&x, n, k);
            let req = Request::new(k, ScalingMode::Norm);
            let (build, (sa, sb)) = fastest(reps, || {
                (
                    SideSummary::of(&t.view(), &req),
                    SideSummary::of(&t.view(), &req),
                )
            });
            let (rule, r) = fastest(reps, || {
                choose_summarised(sa.view(), sb.view(), &req).map_or(0, |c| c.moduli)
            });
            println!(
                "{} n = {n}: {r} moduli; summaries of 2 x {n} lines {:.1} us ({:.1} ns per line), \
                 rule from the summaries {:.1} us",
                fam.name(),
                build * 1e6,
                build * 1e9 / (2 * n) as f64,
                rule * 1e6,
            );
        }
    }
}
