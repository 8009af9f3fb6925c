//! Integer-valued inputs small enough for the chosen moduli give the exact product, bit for
//! bit, through the whole pipeline ("Exactness").

use ozaki_core::blas::{GemmArgs, SyrkArgs, Trans, Uplo};
use ozaki_core::emulate::{self, EmulationConfig, Moduli, Quantizer, Reconstruction, ScalingMode};
use ozaki_core::testutil::{Family, Rng, matrix};

fn exact_product(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    // Integer entries with |c| < 2^53: i128 sums are exact and convert exactly.
    let mut c = vec![0.0; m * n];
    for j in 0..n {
        for i in 0..m {
            let s: i128 = (0..k)
                .map(|l| a[i + l * m] as i128 * b[l + j * k] as i128)
                .sum();
            c[i + j * m] = s as f64;
        }
    }
    c
}

#[test]
fn integer_matrices_multiply_exactly_in_every_mode() {
    let mut rng = Rng::new(1);
    for &(m, n, k, bound) in &[
        (1, 1, 1, 1000),
        (7, 5, 33, 1 << 20),
        (40, 31, 300, 1 << 10),
        (3, 4, 5000, 255),
    ] {
        let a = matrix(Family::Integer(bound), m, k, &mut rng);
        let b = matrix(Family::Integer(bound), k, n, &mut rng);
        let want = exact_product(&a, &b, m, n, k);
        for scaling in [ScalingMode::Accurate, ScalingMode::Fast, ScalingMode::Norm] {
            for quantizer in [Quantizer::Nearest, Quantizer::Truncate] {
                for reconstruction in [Reconstruction::Exact, Reconstruction::Fp64] {
                    for moduli in [Moduli::Auto, Moduli::Fixed(16), Moduli::Fixed(20)] {
                        let cfg = EmulationConfig {
                            moduli,
                            quantizer,
                            scaling,
                            reconstruction,
                            threads: 2,
                            ..Default::default()
                        };
                        let (c, info) = emulate::matmul(&a, &b, m, n, k, &cfg).unwrap();
                        assert_eq!(c, want, "{m}x{n}x{k} {cfg:?} -> {} moduli", info.moduli);
                    }
                }
            }
        }
    }
}

#[test]
fn transposes_alpha_beta_and_syrk_triangles_follow_blas_semantics() {
    let mut rng = Rng::new(2);
    let (m, n, k) = (6, 5, 9);
    let a = matrix(Family::Integer(50), k, m, &mut rng); // stored k x m: op(A) = A^T
    let b = matrix(Family::Integer(50), n, k, &mut rng); // stored n x k: op(B) = B^T
    let mut c = matrix(Family::Integer(9), m + 2, n, &mut rng); // ldc = m + 2
    let c0 = c.clone();
    let args = GemmArgs {
        transa: Trans::Yes,
        transb: Trans::Yes,
        m,
        n,
        k,
        alpha: 2.0,
        a: &a,
        lda: k,
        b: &b,
        ldb: n,
        beta: -1.0,
        ldc: m + 2,
    };
    emulate::gemm(&args, &mut c, &EmulationConfig::default()).unwrap();
    for j in 0..n {
        for i in 0..m + 2 {
            let want = if i < m {
                let s: f64 = (0..k).map(|l| a[l + i * k] * b[j + l * n]).sum();
                2.0 * s - c0[i + j * (m + 2)]
            } else {
                c0[i + j * (m + 2)] // padding rows untouched
            };
            assert_eq!(c[i + j * (m + 2)], want);
        }
    }
    // dsyrk lower, trans = Yes: C = A^T A on the lower triangle; upper untouched.
    let mut cs = vec![f64::NAN; m * m];
    let sargs = SyrkArgs {
        uplo: Uplo::Lower,
        trans: Trans::Yes,
        n: m,
        k,
        alpha: 1.0,
        a: &a,
        lda: k,
        beta: 0.0,
        ldc: m,
    };
    emulate::syrk(&sargs, &mut cs, &EmulationConfig::default()).unwrap();
    for j in 0..m {
        for i in 0..m {
            if i >= j {
                let s: f64 = (0..k).map(|l| a[l + i * k] * a[l + j * k]).sum();
                assert_eq!(cs[i + j * m], s);
            } else {
                assert!(cs[i + j * m].is_nan());
            }
        }
    }
}

#[test]
fn non_finite_inputs_fall_back_and_leave_c_untouched() {
    let a = [1.0, f64::NAN, 2.0, 3.0];
    let b = [1.0, 2.0, 3.0, 4.0];
    let args = GemmArgs {
        transa: Trans::No,
        transb: Trans::No,
        m: 2,
        n: 2,
        k: 2,
        alpha: 1.0,
        a: &a,
        lda: 2,
        b: &b,
        ldb: 2,
        beta: 0.0,
        ldc: 2,
    };
    let mut c = [7.0; 4];
    let err = emulate::gemm(&args, &mut c, &EmulationConfig::default()).unwrap_err();
    assert_eq!(err.reason(), "non-finite input");
    assert_eq!(c, [7.0; 4]);
    // alpha = 0: A and B are not read, C = beta C.
    let args0 = GemmArgs {
        alpha: 0.0,
        beta: 2.0,
        ..args
    };
    emulate::gemm(&args0, &mut c, &EmulationConfig::default()).unwrap();
    assert_eq!(c, [14.0; 4]);
    // Exponent range: the product could overflow.
    let big = [1e300, 1.0, 1.0, 1.0];
    let args_big = GemmArgs {
        a: &big,
        b: &big,
        alpha: 1.0,
        beta: 0.0,
        ..args
    };
    assert_eq!(
        emulate::gemm(&args_big, &mut c, &EmulationConfig::default())
            .unwrap_err()
            .reason(),
        "exponent range"
    );
    assert_eq!(c, [14.0; 4]);
}
