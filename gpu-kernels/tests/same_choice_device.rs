//! The GPU route and `cpu-ozaki` choose alike on a real device: the same operands go through
//! `gpu-ozaki`'s own entries (host-resident `host::gemm` and device-resident `ozaki::gemm`),
//! whose moduli count comes from the GPU's statistics and summary kernels and the host's
//! plan on the downloaded summaries, and through `ozaki_core::emulate`, whose count comes
//! from the host's line statistics. Both must take the same count, or both decline with the
//! same reason. `same_choice.rs` checks the plan on host-computed statistics; this test
//! checks what the device computes and what the route really does with it. Skips itself
//! visibly without a GPU.

mod support;

use gpu_kernels::GpuError;
use gpu_kernels::host::{self, Engine};
use gpu_kernels::ozaki::{self, Accuracy, Options, ScalingMode};
use ozaki_core::blas::GemmArgs;
use ozaki_core::emulate::{self, EmulationConfig};
use ozaki_core::testutil::{Family, Rng, matrix};
use support::{device_product, have_gpu};

/// Multiplies one entry in a thousand by `factor`, and at least the first one, so that
/// every operand has an outlier whatever its size.
fn outliers(x: &mut [f64], factor: f64, rng: &mut Rng) {
    x[0] *= factor;
    for v in x.iter_mut().skip(1) {
        if rng.uniform() < 1e-3 {
            *v *= factor;
        }
    }
}

/// The operands of one case, column-major `m x k` and `k x n`.
fn operands(what: &str, (m, n, k): (usize, usize, usize), seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    let fam = if what == "phi=2" {
        Family::Spread(2.0)
    } else {
        Family::Normal
    };
    let mut a = matrix(fam, m, k, &mut rng);
    let mut b = matrix(fam, k, n, &mut rng);
    match what {
        "rows-cols-2^40" => {
            // row i of A and column j of B times 2^U(-40, 40): lines whose scales differ
            // by up to 2^80, each line itself normal
            for i in 0..m {
                let s = 2f64.powi((rng.uniform() * 80.0 - 40.0) as i32);
                (0..k).for_each(|l| a[i + l * m] *= s);
            }
            for j in 0..n {
                let s = 2f64.powi((rng.uniform() * 80.0 - 40.0) as i32);
                b[j * k..(j + 1) * k].iter_mut().for_each(|v| *v *= s);
            }
        }
        "outliers-1e8" => {
            outliers(&mut a, 1e8, &mut rng);
            outliers(&mut b, 1e8, &mut rng);
        }
        _ => {}
    }
    (a, b)
}

/// The count a call took, or the decline it reported.
fn count(res: Result<u32, GpuError>) -> Result<usize, GpuError> {
    res.map(|r| r as usize)
}

#[test]
fn gpu_route_and_cpu_ozaki_choose_the_same_moduli_from_the_gpu_statistics() {
    if !have_gpu!() {
        return;
    }
    let (m, n) = (48, 40);
    let (mut emulated, mut declined) = (0, 0);
    for k in [64usize, 1024, 4096] {
        for (seed, what) in ["normal", "phi=2", "rows-cols-2^40", "outliers-1e8"]
            .into_iter()
            .enumerate()
        {
            let (a, b) = operands(what, (m, n, k), 100 * k as u64 + seed as u64);
            for (scaling, accuracy) in [
                (ScalingMode::Norm, Accuracy::Default),
                (ScalingMode::Fast, Accuracy::Default),
                (ScalingMode::Norm, Accuracy::Guaranteed),
            ] {
                let what = format!("{what} {m}x{n}x{k} {scaling:?} {accuracy:?}");
                let cfg = EmulationConfig {
                    scaling,
                    accuracy,
                    ..EmulationConfig::default()
                };
                let cpu = emulate::matmul(&a, &b, m, n, k, &cfg)
                    .map(|(_, info)| info.moduli)
                    .map_err(ozaki::decline);
                let opts = Options {
                    scaling: Some(scaling),
                    accuracy,
                    ..Options::default()
                };
                let c0 = vec![0.0; m * n];
                let device = count(
                    device_product((m, n, k), 1.0, (&a, &b), 0.0, &c0, opts)
                        .0
                        .map(|o| o.moduli),
                );
                let mut c = c0.clone();
                let hosted = count(
                    host::gemm(
                        &GemmArgs::product(m, n, k, &a, &b),
                        &mut c,
                        Engine::Ozaki(opts),
                    )
                    .map(|o| o.moduli.expect("an emulated call reports its moduli")),
                );
                assert_eq!(
                    device, cpu,
                    "device-resident gpu-ozaki vs cpu-ozaki: {what}"
                );
                assert_eq!(hosted, cpu, "host-resident gpu-ozaki vs cpu-ozaki: {what}");
                match cpu {
                    Ok(_) => emulated += 1,
                    Err(_) => declined += 1,
                }
            }
        }
    }
    // both outcomes occur, so both the count and the decline were compared
    assert!(
        emulated >= 10 && declined >= 5,
        "{emulated} emulated, {declined} declined"
    );
}
