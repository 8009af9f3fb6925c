//! Calibration aid for the accuracy rule: per family, the count the rule takes, the
//! emulated and native errors against the exact product, and whether the contract holds.
use ozaki_core::accuracy::Reference;
use ozaki_core::emulate::{self, EmulationConfig};
use ozaki_core::testutil::{Family, Rng, matrix};

fn outliers(x: &mut [f64], rate: f64, factor: f64, rng: &mut Rng) {
    for v in x.iter_mut() {
        if rng.uniform() < rate {
            *v *= factor;
        }
    }
}

/// Draws op(A) and op(B) of one input family.
type Operands = Box<dyn Fn(&mut Rng) -> (Vec<f64>, Vec<f64>)>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (m, k) = (
        args.get(1).map_or(64, |s| s.parse().unwrap()),
        args.get(2).map_or(4096, |s| s.parse().unwrap()),
    );
    let n = m;
    let fams: Vec<(&str, Operands)> = vec![
        (
            "normal",
            Box::new(move |r| {
                (
                    matrix(Family::Normal, m, k, r),
                    matrix(Family::Normal, k, n, r),
                )
            }),
        ),
        (
            "uniform",
            Box::new(move |r| {
                (
                    matrix(Family::Uniform, m, k, r),
                    matrix(Family::Uniform, k, n, r),
                )
            }),
        ),
        (
            "int",
            Box::new(move |r| {
                (
                    matrix(Family::Integer(100), m, k, r),
                    matrix(Family::Integer(100), k, n, r),
                )
            }),
        ),
        (
            "phi0.5",
            Box::new(move |r| {
                (
                    matrix(Family::Spread(0.5), m, k, r),
                    matrix(Family::Spread(0.5), k, n, r),
                )
            }),
        ),
        (
            "phi1",
            Box::new(move |r| {
                (
                    matrix(Family::Spread(1.0), m, k, r),
                    matrix(Family::Spread(1.0), k, n, r),
                )
            }),
        ),
        (
            "phi2",
            Box::new(move |r| {
                (
                    matrix(Family::Spread(2.0), m, k, r),
                    matrix(Family::Spread(2.0), k, n, r),
                )
            }),
        ),
        (
            "phi4",
            Box::new(move |r| {
                (
                    matrix(Family::Spread(4.0), m, k, r),
                    matrix(Family::Spread(4.0), k, n, r),
                )
            }),
        ),
        (
            "out1e3",
            Box::new(move |r| {
                let mut a = matrix(Family::Normal, m, k, r);
                let mut b = matrix(Family::Normal, k, n, r);
                outliers(&mut a, 1e-3, 1e3, r);
                outliers(&mut b, 1e-3, 1e3, r);
                (a, b)
            }),
        ),
        (
            "out1e8",
            Box::new(move |r| {
                let mut a = matrix(Family::Normal, m, k, r);
                let mut b = matrix(Family::Normal, k, n, r);
                outliers(&mut a, 1e-3, 1e8, r);
                outliers(&mut b, 1e-3, 1e8, r);
                (a, b)
            }),
        ),
        (
            "outA1e8",
            Box::new(move |r| {
                let mut a = matrix(Family::Normal, m, k, r);
                let b = matrix(Family::Normal, k, n, r);
                outliers(&mut a, 1e-3, 1e8, r);
                (a, b)
            }),
        ),
        (
            "out1e12",
            Box::new(move |r| {
                let mut a = matrix(Family::Normal, m, k, r);
                let mut b = matrix(Family::Normal, k, n, r);
                outliers(&mut a, 1e-3, 1e12, r);
                outliers(&mut b, 1e-3, 1e12, r);
                (a, b)
            }),
        ),
        (
            "scaled",
            Box::new(move |r| {
                let mut a = matrix(Family::Normal, m, k, r);
                let mut b = matrix(Family::Normal, k, n, r);
                let sr: Vec<f64> = (0..m)
                    .map(|_| 2f64.powi((r.uniform() * 80.0 - 40.0) as i32))
                    .collect();
                let sc: Vec<f64> = (0..n)
                    .map(|_| 2f64.powi((r.uniform() * 80.0 - 40.0) as i32))
                    .collect();
                for l in 0..k {
                    for i in 0..m {
                        a[i + l * m] *= sr[i];
                    }
                }
                for j in 0..n {
                    for l in 0..k {
                        b[l + j * k] *= sc[j];
                    }
                }
                (a, b)
            }),
        ),
        (
            "cancel",
            Box::new(move |r| ozaki_core::testutil::cancellation_pair(m, n, k, r)),
        ),
    ];
    let only = args.get(3).cloned();
    for (name, f) in &fams {
        if only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        let mut rng = Rng::new(7);
        let (a, b) = f(&mut rng);
        let refr = Reference::new(&a, &b, m, n, k);
        let nat = refr.native_errors(k, |_, _| true).max;
        let mut line = format!("{name:8} {m}x{n}x{k} native {nat:.2e}");
        for acc in ["default", "normwise", "guaranteed"] {
            let cfg = EmulationConfig {
                accuracy: acc.parse().unwrap(),
                ..EmulationConfig::default()
            };
            match emulate::matmul(&a, &b, m, n, k, &cfg) {
                Ok((c, info)) => {
                    let e = refr.errors(&c, k, |_, _| true).max;
                    let bound = (2.0 * nat).max(4.0 * f64::EPSILON / 2.0);
                    if std::env::var("WORST").is_ok() && acc == "default" {
                        let (i, j, e) = worst(&refr, &c, m, n);
                        let row: Vec<f64> = (0..k).map(|l| a[i + l * m]).collect();
                        let col = &b[j * k..(j + 1) * k];
                        let big = |v: &[f64]| v.iter().filter(|x| x.abs() > 1e2).count();
                        println!(
                            "worst ({i},{j}) {e:.2e} row outliers {} col outliers {} rowstat {:?} colstat {:?}",
                            big(&row),
                            big(col),
                            ozaki_core::rule::LineStat::of(&row),
                            ozaki_core::rule::LineStat::of(col)
                        );
                    }
                    line += &format!(
                        " | {acc}: r={} est={:.2} err={e:.2e} {}",
                        info.moduli,
                        info.estimate_ulps,
                        if e <= bound { "ok" } else { "BROKEN" }
                    );
                }
                Err(fb) => line += &format!(" | {acc}: {fb}"),
            }
        }
        println!("{line}");
    }
}

#[allow(dead_code)]
pub fn worst(refr: &Reference, c: &[f64], m: usize, n: usize) -> (usize, usize, f64) {
    let mut w = (0, 0, 0.0);
    for j in 0..n {
        for i in 0..m {
            let e = refr.errors(c, 1, |a, b| a == i && b == j).max;
            if e > w.2 {
                w = (i, j, e);
            }
        }
    }
    w
}
