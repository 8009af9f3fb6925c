//! Where `NORM_BASE_BITS` comes from (`gpu_kernels::ozaki`, norm scaling's moduli rule): a
//! CPU sweep of ozaki-core's norm emulation, whose bits are the GPU route's for the same
//! moduli (tests/device.rs), against native fp64 on the same entries.
//!
//! ```text
//! cargo run --release -p gpu-kernels --example norm_rule_fit      # about 2 minutes on 2 cores
//! ```
//!
//! Per case (input family, k, seed; a 48 x 48 block of the product): `r_ok`, the fewest
//! moduli whose max componentwise error is below native's (standard-order dot products), and
//! the *headroom* `H(r) = fewest_norm_bits(r) - (needed_bits(Norm) - NORM_BASE_BITS)`, the
//! largest base at which the rule accepts r. The rule is safe on a case when the base exceeds
//! `H(r_ok - 1)`, and gives normal data 14 moduli when the base is at most `H(14)`. The last
//! lines print the interval these bounds leave and where `NORM_BASE_BITS` lies in it.

use gpu_kernels::ozaki::{self, NORM_BASE_BITS, RowStats, ScalingMode};
use ozaki_core::accuracy::Reference;
use ozaki_core::emulate::{self, EmulationConfig, Moduli};
use ozaki_core::testutil::{Family, Rng, matrix};

/// Max |x| bits, sum |x| and the coarse square sum per line; `rows`: lines are the rows of a
/// column-major `lines x k` matrix, else its columns (`k x lines`).
fn stats(x: &[f64], lines: usize, k: usize, rows: bool) -> (Vec<u64>, Vec<f64>, Vec<u64>) {
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..lines {
        let line: Vec<f64> = if rows {
            (0..k).map(|l| x[i + l * lines]).collect()
        } else {
            x[i * k..(i + 1) * k].to_vec()
        };
        let mx = line.iter().map(|v| v.abs().to_bits()).max().unwrap_or(0);
        out.0.push(mx);
        out.1.push(line.iter().map(|v| v.abs()).sum());
        out.2.push(
            ozaki::exponent_of_bits(mx)
                .map_or(0, |e| ozaki_core::scaling::coarse_square_sum(&line, e)),
        );
    }
    out
}

fn main() {
    const SIDE: usize = 48;
    const COUNTS: std::ops::RangeInclusive<usize> = 12..=18;
    let families = [
        Family::Uniform,
        Family::Normal,
        Family::Spread(0.5),
        Family::Spread(1.0),
        Family::Spread(2.0),
    ];
    let (mut lo, mut hi) = (
        (f64::NEG_INFINITY, String::new()),
        (f64::INFINITY, String::new()),
    );
    println!(
        "| inputs | k | seed | r_ok | H(r_ok - 1) | H(r_ok) | rule's r | its error / native's |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for seed in 1..=3u64 {
        let mut rng = Rng::new(seed);
        for fam in families {
            for k in [64usize, 256, 1024, 4096, 8192, 16384] {
                let (m, n) = (SIDE, SIDE);
                let a = matrix(fam, m, k, &mut rng);
                let b = matrix(fam, k, n, &mut rng);
                let reference = Reference::new(&a, &b, m, n, k);
                let native = reference.native_errors(k, |_, _| true).max;
                let ratio = |r| {
                    let cfg = EmulationConfig {
                        moduli: Moduli::Fixed(r),
                        scaling: ScalingMode::Norm,
                        ..Default::default()
                    };
                    emulate::matmul(&a, &b, m, n, k, &cfg).map_or(f64::INFINITY, |(c, _)| {
                        reference.errors(&c, k, |_, _| true).max / native
                    })
                };
                let (sa, sb) = (stats(&a, m, k, true), stats(&b, n, k, false));
                let ra = RowStats {
                    maxbits: &sa.0,
                    abssum: &sa.1,
                    coarse_sq: &sa.2,
                };
                let rb = RowStats {
                    maxbits: &sb.0,
                    abssum: &sb.1,
                    coarse_sq: &sb.2,
                };
                let asked = ozaki::needed_bits(&ra, &rb, k, ScalingMode::Norm) - NORM_BASE_BITS;
                let headroom = |r| ozaki::fewest_norm_bits(&ra, &rb, r) - asked;
                let Some(r_ok) = COUNTS.clone().find(|&r| ratio(r) < 1.0) else {
                    println!("| {} | {k} | {seed} | > 18 | | | | |", fam.name());
                    continue;
                };
                let name = format!("{} k = {k} seed {seed}", fam.name());
                let below = headroom(r_ok - 1);
                if below > lo.0 {
                    lo = (below, format!("{name}, {} moduli", r_ok - 1));
                }
                if fam == Family::Normal && k >= 4096 && headroom(14) < hi.0 {
                    hi = (headroom(14), format!("{name}, 14 moduli"));
                }
                let rule = ozaki::choose_moduli_norm(&ra, &rb, k);
                println!(
                    "| {} | {k} | {seed} | {r_ok} | {below:.2} | {:.2} | {rule} | {:.2} |",
                    fam.name(),
                    headroom(r_ok),
                    ratio(rule)
                );
            }
        }
    }
    println!();
    println!(
        "Safe for every case above: base > {:.2} ({}); 14 moduli on normal data at k >= 4096: base <= {:.2} ({}). NORM_BASE_BITS = {NORM_BASE_BITS}.",
        lo.0, lo.1, hi.0, hi.1
    );
}
