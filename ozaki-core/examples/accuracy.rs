//! Regenerates the accuracy table of ACCURACY.md (issue #3):
//!
//! ```text
//! cargo run --release -p ozaki-core --example accuracy > ACCURACY-table.md
//! cargo run --release -p ozaki-core --example accuracy -- --quick   # smaller sizes
//! ```
//!
//! Per family: componentwise error `|ĉ - c| / (|A||B|)` against the exact product, max and
//! median, for native fp64 (standard-order dot product), the default emulation (moduli
//! chosen per call, accurate scaling), fast scaling, and fixed moduli counts.

use ozaki_core::accuracy::{gamma, ErrorStats, Reference};
use ozaki_core::blas::{SyrkArgs, Trans, Uplo};
use ozaki_core::emulate::{self, EmulationConfig, Moduli, ScalingMode};
use ozaki_core::testutil::{cancellation_pair, matrix, Family, Rng};
use std::time::Instant;

const FIXED: [usize; 7] = [12, 13, 14, 15, 16, 18, 20];

struct Case {
    name: String,
    m: usize,
    n: usize,
    k: usize,
    a: Vec<f64>,
    b: Vec<f64>,
    syrk: bool,
}

fn fmt_stats(s: &ErrorStats) -> String {
    format!("{:.1e} / {:.1e}", s.max, s.median)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let sz = |full: usize, small: usize| if quick { small } else { full };
    let mut rng = Rng::new(2026);
    let mut cases = Vec::new();
    let mut add = |name: String, fam_a: Family, fam_b: Family, m: usize, n: usize, k: usize, rng: &mut Rng| {
        let a = matrix(fam_a, m, k, rng);
        let b = matrix(fam_b, k, n, rng);
        cases.push(Case { name, m, n, k, a, b, syrk: false });
    };
    let (e, kk) = (sz(128, 48), sz(1024, 256));
    for fam in [Family::Uniform, Family::Normal, Family::Spread(0.5), Family::Spread(1.0), Family::Spread(2.0), Family::Spread(4.0), Family::Spread(8.0)] {
        add(fam.name(), fam, fam, e, e, kk, &mut rng);
    }
    add("phi=2".into(), Family::Spread(2.0), Family::Spread(2.0), sz(64, 32), sz(64, 32), sz(16384, 2048), &mut rng);
    add("integer".into(), Family::Integer(1000), Family::Integer(1000), e, e, kk, &mut rng);
    add("tall/skinny".into(), Family::Normal, Family::Normal, sz(4096, 1024), 8, sz(256, 64), &mut rng);
    add("skinny k".into(), Family::Normal, Family::Normal, 16, 16, sz(32768, 4096), &mut rng);
    for k in [1usize, 16, 256, 4096, 70000] {
        let k = if quick { k.min(8192) } else { k };
        add(format!("normal k={k}"), Family::Normal, Family::Normal, 16, 16, k, &mut rng);
    }
    {
        let (m, n, k) = (e, e, kk);
        let (a, b) = cancellation_pair(m, n, k, &mut rng);
        cases.push(Case { name: "rank1+noise (cancel)".into(), m, n, k, a, b, syrk: false });
    }
    for fam in [Family::Normal, Family::Spread(2.0)] {
        let (n, k) = (e, kk);
        let a = matrix(fam, n, k, &mut rng);
        let mut b = vec![0.0; k * n];
        for l in 0..k {
            for j in 0..n {
                b[l + j * k] = a[j + l * n];
            }
        }
        cases.push(Case { name: format!("dsyrk {}", fam.name()), m: n, n, k, a, b, syrk: true });
    }

    println!("| family | m x n x k | native max / median | default: moduli, est (u), max / median, max/γ_k | fast: moduli, max | {} |", FIXED.map(|r| format!("r={r} max (est u)")).join(" | "));
    println!("|---|---|---|---|---|{}", "---|".repeat(FIXED.len()));
    for c in &cases {
        let t0 = Instant::now();
        let reference = Reference::new(&c.a, &c.b, c.m, c.n, c.k);
        let keep = |i: usize, j: usize| !c.syrk || i >= j;
        let native = reference.native_errors(c.k, keep);
        let run = |cfg: EmulationConfig| -> Result<(Vec<f64>, emulate::EmulationInfo), emulate::Fallback> {
            if c.syrk {
                let args = SyrkArgs { uplo: Uplo::Lower, trans: Trans::No, n: c.n, k: c.k, alpha: 1.0, a: &c.a, lda: c.n, beta: 0.0, ldc: c.n };
                let mut out = vec![0.0; c.n * c.n];
                emulate::syrk(&args, &mut out, &cfg).map(|i| (out, i))
            } else {
                emulate::matmul(&c.a, &c.b, c.m, c.n, c.k, &cfg)
            }
        };
        let default = match run(EmulationConfig::default()) {
            Ok((out, info)) => {
                let s = reference.errors(&out, c.k, keep);
                format!("{}, {:.2}, {}, {:.1e}", info.moduli, info.estimate_ulps, fmt_stats(&s), s.max_over_gamma)
            }
            Err(f) => format!("fallback ({f})"),
        };
        let fast = match run(EmulationConfig { scaling: ScalingMode::Fast, ..Default::default() }) {
            Ok((out, info)) => format!("{}, {:.1e}", info.moduli, reference.errors(&out, c.k, keep).max),
            Err(f) => format!("fallback ({})", f.reason()),
        };
        let fixed: Vec<String> = FIXED
            .iter()
            .map(|&r| match run(EmulationConfig { moduli: Moduli::Fixed(r), ..Default::default() }) {
                Ok((out, info)) => format!("{:.1e} ({:.2})", reference.errors(&out, c.k, keep).max, info.estimate_ulps),
                Err(f) => format!("fallback ({})", f.reason()),
            })
            .collect();
        println!("| {} | {}x{}x{} | {} | {} | {} | {} |", c.name, c.m, c.n, c.k, fmt_stats(&native), default, fast, fixed.join(" | "));
        eprintln!("{} done in {:.1} s (γ_k = {:.1e})", c.name, t0.elapsed().as_secs_f64(), gamma(c.k));
    }
}
