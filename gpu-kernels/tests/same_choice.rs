//! The GPU route's plan and `cpu-ozaki` choose alike: fed the host-computed line statistics
//! of the same matrices (what the GPU's scan passes compute, `ozaki_core::rule::LineTable`),
//! `gpu_kernels::ozaki::plan` takes the moduli count `ozaki_core::emulate` takes, and declines
//! the calls it declines with the same reason. No GPU needed: the plan is host code.

use gpu_kernels::ozaki::{self, Accuracy, LineTable, ScalingMode};
use ozaki_core::emulate::{self, EmulationConfig};
use ozaki_core::testutil::{Family, Rng, matrix};

fn outliers(x: &mut [f64], factor: f64, rng: &mut Rng) {
    for v in x.iter_mut() {
        if rng.uniform() < 1e-3 {
            *v *= factor;
        }
    }
}

#[test]
fn gpu_plan_and_cpu_ozaki_choose_the_same_moduli_for_the_same_inputs() {
    let (m, n) = (24, 20);
    let mut declined = 0;
    let mut emulated = 0;
    for k in [16usize, 1024, 4096] {
        for (name, fam, factor) in [
            ("normal", Family::Normal, 1.0),
            ("uniform", Family::Uniform, 1.0),
            ("integers", Family::Integer(50), 1.0),
            ("phi=1", Family::Spread(1.0), 1.0),
            ("phi=2", Family::Spread(2.0), 1.0),
            ("phi=4", Family::Spread(4.0), 1.0),
            ("outliers 1e8", Family::Normal, 1e8),
        ] {
            let mut rng = Rng::new(k as u64);
            let mut a = matrix(fam, m, k, &mut rng);
            let mut b = matrix(fam, k, n, &mut rng);
            if factor != 1.0 {
                outliers(&mut a, factor, &mut rng);
                outliers(&mut b, factor, &mut rng);
            }
            // op(A) by rows, op(B) by columns: the lines the GPU scans
            let rows: Vec<f64> = (0..m)
                .flat_map(|i| (0..k).map(move |l| (i, l)))
                .map(|(i, l)| a[i + l * m])
                .collect();
            let (ta, tb) = (
                LineTable::of_packed(&rows, m, k),
                LineTable::of_packed(&b, n, k),
            );
            for (scaling, accuracy) in [
                (ScalingMode::Norm, Accuracy::Default),
                (ScalingMode::Fast, Accuracy::Default),
                (ScalingMode::Norm, Accuracy::Guaranteed),
                (ScalingMode::Norm, Accuracy::Normwise),
            ] {
                let gpu = ozaki::plan(ta.view(), tb.view(), k, None, scaling, accuracy);
                let cfg = EmulationConfig {
                    scaling,
                    accuracy,
                    ..EmulationConfig::default()
                };
                let cpu = emulate::matmul(&a, &b, m, n, k, &cfg);
                let what = format!("{name} k = {k} {scaling:?} {accuracy:?}");
                match (gpu, cpu) {
                    (Ok(p), Ok((_, info))) => {
                        assert_eq!(p.moduli, info.moduli, "{what}");
                        emulated += 1;
                    }
                    (Err(g), Err(c)) => {
                        assert_eq!(g, ozaki::decline(c), "{what}");
                        declined += 1;
                    }
                    (g, c) => panic!("{what}: gpu {g:?}, cpu {:?}", c.map(|x| x.1)),
                }
            }
        }
    }
    assert!(
        emulated > 30 && declined > 5,
        "{emulated} emulated, {declined} declined"
    );
}
