//! How much margin the accuracy rule leaves at full size: its count (and its estimate at
//! fixed counts) for n x n operands with k = n, normal or exponent spread phi, and the
//! measured error of 64 x 64 entries at those counts against native fp64's, on blocks of
//! consecutive lines and on the pairing the rule fears most. In norm scaling a line's shift
//! depends on that line and the count only, so these are the entries' errors in the full
//! product. Usage: `rule_margin n [phi]` (n = 8192: about 1 GB and some minutes).
use ozaki_core::accuracy::Reference;
use ozaki_core::emulate::{self, EmulationConfig, Moduli};
use ozaki_core::rule::{LineTable, Request, choose};
use ozaki_core::scaling::ScalingMode;
use ozaki_core::testutil::{Family, Rng, matrix};
fn main() {
    let n: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let phi: f64 = std::env::args().nth(2).map_or(0.0, |s| s.parse().unwrap());
    let fam = if phi > 0.0 {
        Family::Spread(phi)
    } else {
        Family::Normal
    };
    let rs: Vec<usize> = if phi > 0.0 {
        vec![16, 18, 20]
    } else {
        vec![13, 14, 15]
    };
    let k = n;
    let mut rng = Rng::new(5);
    let x = matrix(fam, k, n, &mut rng);
    let y = matrix(fam, k, n, &mut rng);
    let (tx, ty) = (
        LineTable::of_packed(&x, n, k),
        LineTable::of_packed(&y, n, k),
    );
    let req = Request::new(k, ScalingMode::Norm);
    println!("n = {n}: rule {:?}", choose(tx.view(), ty.view(), &req));
    for &r in &rs {
        let f = Request {
            forced: Some(r),
            ..req
        };
        println!("  forced {r}: {:?}", choose(tx.view(), ty.view(), &f));
    }
    // 64 rows of A (lines of x) and 64 columns of B (lines of y): three blocks of consecutive
    // lines, then the rule's worst pairing: the deepest lines of x (largest mean depth, the
    // smallest typical entry) against the most concentrated lines of y (largest
    // ||y||_2^2 / ||y||_1^2, fewest effective entries)
    let s = 64;
    let by = |key: &dyn Fn(usize) -> f64| {
        let mut idx: Vec<usize> = (0..n).collect();
        idx.sort_by(|&i, &j| key(j).total_cmp(&key(i)));
        idx.truncate(s);
        idx
    };
    let deep = by(&|i| tx.log_depth[i] as f64 / tx.nonzeros[i].max(1) as f64);
    let conc = by(&|j| ty.abs2[j] as f64 / (ty.abs1[j] as f64).powi(2));
    let mut sets: Vec<(String, Vec<usize>, Vec<usize>)> = (0..3)
        .map(|blk| {
            let r: Vec<usize> = (blk * s..(blk + 1) * s).collect();
            (format!("block {blk}"), r.clone(), r)
        })
        .collect();
    sets.push(("deepest x, concentrated y".into(), deep, conc));
    for (blk, rows, cols) in sets {
        let mut a = vec![0.0; s * k];
        for (i, &ri) in rows.iter().enumerate() {
            for l in 0..k {
                a[i + l * s] = x[ri * k + l];
            }
        }
        let b: Vec<f64> = cols
            .iter()
            .flat_map(|&c| y[c * k..(c + 1) * k].iter().copied())
            .collect();
        let rf = Reference::new(&a, &b, s, s, k);
        let nat = rf.native_errors(k, |_, _| true).max;
        let mut line = format!("  {blk}: native {nat:.2e}");
        for &r in &rs {
            let cfg = EmulationConfig {
                moduli: Moduli::Fixed(r),
                scaling: ScalingMode::Norm,
                ..EmulationConfig::default()
            };
            let (c, _) = emulate::matmul(&a, &b, s, s, k, &cfg).unwrap();
            let e = rf.errors(&c, k, |_, _| true).max;
            line += &format!(", r={r} {e:.2e} ({:.2}x)", e / nat);
        }
        println!("{line}");
    }
}
