//! IEEE edge cases through the whole emulation: subnormal and very large
//! exponents inside the guard, zero lines, signed zeros, NaN in an unread C, and the
//! exponent-range fallback at the edge of fp64.

use ozaki_core::accuracy::Reference;
use ozaki_core::blas::{GemmArgs, Trans};
use ozaki_core::emulate::{self, EmulationConfig};
use ozaki_core::testutil::{Family, Rng, matrix};

fn scaled(fam: Family, rows: usize, cols: usize, factor: f64, rng: &mut Rng) -> Vec<f64> {
    matrix(fam, rows, cols, rng)
        .into_iter()
        .map(|x| x * factor)
        .collect()
}

/// Emulated max error against the exact product, next to native's, with an absolute floor
/// of one subnormal ulp (both round into the subnormal range).
fn compare(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> (f64, f64, usize) {
    let r = Reference::new(a, b, m, n, k);
    let (c, info) = emulate::matmul(
        a,
        b,
        m,
        n,
        k,
        &EmulationConfig {
            threads: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let mut worst = (0.0f64, 0.0f64);
    assert_eq!(c.len(), m * n);
    for (((exact, &scale), &native), &ct) in r.exact.iter().zip(&r.scale).zip(&r.native).zip(&c) {
        let floor = 5e-324 / scale.max(f64::MIN_POSITIVE);
        let e = exact.abs_diff(ct) / scale;
        let en = exact.abs_diff(native) / scale;
        worst = (worst.0.max(e - floor), worst.1.max(en));
    }
    (worst.0, worst.1, info.moduli)
}

#[test]
fn tiny_and_huge_exponents_are_handled_like_native() {
    let mut rng = Rng::new(31);
    let (m, n, k) = (9, 7, 40);
    // Products deep in the subnormal range, near the bottom of the normal range, and large.
    for (fa, fb) in [
        (1e-160, 1e-160),
        (1e-300, 1e-10),
        (2e-308, 1.0),
        (1e-320, 1e3),
        (1e150, 1e150),
        (1e300, 1e-300),
    ] {
        let a = scaled(Family::Normal, m, k, fa, &mut rng);
        let b = scaled(Family::Normal, k, n, fb, &mut rng);
        let (emul, native, r) = compare(&a, &b, m, n, k);
        assert!(
            emul <= 2.0 * native.max(f64::EPSILON / 2.0),
            "scale {fa:e} x {fb:e}: {emul:e} vs native {native:e} ({r} moduli)"
        );
    }
}

#[test]
fn zero_lines_signed_zeros_and_unread_nan_c() {
    let (m, n, k) = (3, 3, 2);
    // Row 1 of A and column 2 of B are zero; -0.0 entries.
    let a = [1.0, 0.0, -2.0, 3.0, -0.0, 0.5];
    let b = [1.0, -1.0, 2.0, 0.25, 0.0, -0.0];
    let mut c = [f64::NAN; 9];
    let args = GemmArgs {
        transa: Trans::No,
        transb: Trans::No,
        m,
        n,
        k,
        alpha: -1.0,
        a: &a,
        lda: m,
        b: &b,
        ldb: k,
        beta: 0.0,
        ldc: m,
    };
    emulate::gemm(&args, &mut c, &EmulationConfig::default()).unwrap();
    let want = [2.0, 0.0, 2.5, -2.75, 0.0, 3.875, 0.0, 0.0, 0.0];
    assert_eq!(c, want);
    // Exact zero products are +0, as the reference loop gives (C starts at +0).
    for (i, x) in c.iter().enumerate() {
        if *x == 0.0 {
            assert!(x.is_sign_positive(), "entry {i} is -0");
        }
    }
}

#[test]
fn overflowing_exponent_range_falls_back_but_large_finite_products_do_not() {
    let mut rng = Rng::new(32);
    let (m, n, k) = (4, 4, 16);
    let a = scaled(Family::Normal, m, k, 1e200, &mut rng);
    let b = scaled(Family::Normal, k, n, 1e100, &mut rng);
    let (emul, native, _) = compare(&a, &b, m, n, k);
    assert!(emul <= 2.0 * native.max(f64::EPSILON / 2.0));
    let b_big = scaled(Family::Normal, k, n, 1e110, &mut rng);
    let err = emulate::matmul(&a, &b_big, m, n, k, &EmulationConfig::default()).unwrap_err();
    assert_eq!(err.reason(), "exponent range");
}

/// Small-integer operands with signed zeros, zero lines and exactly cancelling rows, where
/// every reference loop is exact: the emulation must give the reference BLAS's bits,
/// zero signs included, for every transpose, dsyrk form, alpha and beta (-0 among them).
#[test]
fn signed_zeros_match_the_reference_loops_bit_for_bit() {
    use ozaki_core::blas::{SyrkArgs, Uplo};
    use ozaki_core::testutil::{reference_gemm, reference_syrk};
    let mut rng = Rng::new(41);
    let vals = [-2.0, -1.0, -0.0, 0.0, 0.0, -0.0, 1.0, 2.0];
    let pick = |len: usize, rng: &mut Rng| -> Vec<f64> {
        (0..len)
            .map(|_| vals[rng.int_in(0, vals.len() as i64 - 1) as usize])
            .collect()
    };
    let (m, n, k) = (5, 4, 6);
    let trans = [Trans::No, Trans::Yes];
    let same = |got: &[f64], want: &[f64], what: &str| {
        for (t, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{what}: entry {t}: {g:?} vs reference {w:?}"
            );
        }
    };
    for trial in 0..12 {
        // A (stored m x k or k x m) with a -0 row and a +0 row of op(A); B with zero columns.
        let mut a = pick(m * k, &mut rng);
        let mut b = pick(k * n, &mut rng);
        let c0 = pick(m * n, &mut rng)
            .iter()
            .map(|x| x * 1.5)
            .collect::<Vec<_>>();
        for l in 0..k {
            a[l * m] = -0.0; // row 0 of A (NN layout)
            a[1 + l * m] = 0.0;
            b[l + 3 * k] = if l % 2 == 0 { -0.0 } else { 0.0 };
        }
        // Row 2 cancels exactly against column 0: terms +x and -x.
        for l in 0..k {
            a[2 + l * m] = if l < k / 2 { 1.0 } else { -1.0 };
            b[l] = 1.0;
        }
        for alpha in [1.0, -1.0, -0.5, 2.0] {
            for beta in [0.0, -0.0, 1.0, -1.0, 3.0] {
                for ta in trans {
                    for tb in trans {
                        // The same op(A), op(B) stored for each transpose.
                        let sa = if ta == Trans::No {
                            a.clone()
                        } else {
                            transposed(&a, m, k)
                        };
                        let sb = if tb == Trans::No {
                            b.clone()
                        } else {
                            transposed(&b, k, n)
                        };
                        let args = GemmArgs {
                            transa: ta,
                            transb: tb,
                            m,
                            n,
                            k,
                            alpha,
                            a: &sa,
                            lda: if ta == Trans::No { m } else { k },
                            b: &sb,
                            ldb: if tb == Trans::No { k } else { n },
                            beta,
                            ldc: m,
                        };
                        let mut want = c0.clone();
                        reference_gemm(&args, &mut want);
                        let mut got = c0.clone();
                        emulate::gemm(&args, &mut got, &EmulationConfig::default()).unwrap();
                        same(
                            &got,
                            &want,
                            &format!(
                                "trial {trial} dgemm {ta:?}{tb:?} alpha {alpha} beta {beta:?}"
                            ),
                        );
                    }
                }
                for uplo in [Uplo::Lower, Uplo::Upper] {
                    for tr in trans {
                        // op(A) = the first n rows of the NN-layout A (n x k).
                        let opa: Vec<f64> = (0..k)
                            .flat_map(|l| (0..n).map(move |i| (i, l)))
                            .map(|(i, l)| a[i + l * m])
                            .collect();
                        let sa = if tr == Trans::No {
                            opa
                        } else {
                            transposed(&opa, n, k)
                        };
                        let args = SyrkArgs {
                            uplo,
                            trans: tr,
                            n,
                            k,
                            alpha,
                            a: &sa,
                            lda: if tr == Trans::No { n } else { k },
                            beta,
                            ldc: m,
                        };
                        let mut want = c0.clone();
                        reference_syrk(&args, &mut want);
                        let mut got = c0.clone();
                        emulate::syrk(&args, &mut got, &EmulationConfig::default()).unwrap();
                        same(
                            &got,
                            &want,
                            &format!(
                                "trial {trial} dsyrk {uplo:?}{tr:?} alpha {alpha} beta {beta:?}"
                            ),
                        );
                    }
                }
            }
        }
    }
}

fn transposed(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0.0; x.len()];
    for j in 0..cols {
        for i in 0..rows {
            t[j + i * cols] = x[i + j * rows];
        }
    }
    t
}

/// alpha = +-Inf or NaN (and a non-finite beta) is the native route's: the reference gives
/// NaN where its loop meets Inf x 0 and +-Inf elsewhere, which depends on its loop order;
/// the emulation declines with C untouched.
#[test]
fn non_finite_alpha_or_beta_fall_back_with_c_untouched() {
    let a = [1.0, 0.0, 2.0, 3.0];
    let b = [1.0, 0.0, 2.0, 1.0];
    for (alpha, beta) in [
        (f64::INFINITY, 0.0),
        (f64::NEG_INFINITY, 1.0),
        (f64::NAN, 0.0),
        (1.0, f64::INFINITY),
        (1.0, f64::NAN),
    ] {
        let args = GemmArgs {
            alpha,
            beta,
            ..GemmArgs::product(2, 2, 2, &a, &b)
        };
        let mut c = [5.0; 4];
        let err = emulate::gemm(&args, &mut c, &EmulationConfig::default()).unwrap_err();
        assert_eq!(
            err.reason(),
            "non-finite input",
            "alpha {alpha} beta {beta}"
        );
        assert_eq!(c, [5.0; 4]);
    }
    // What the native route then returns for alpha = Inf (reference NN: NaN where a zero
    // of B or A meets Inf, Inf elsewhere).
    let mut c = [0.0; 4];
    ozaki_core::testutil::reference_gemm(
        &GemmArgs {
            alpha: f64::INFINITY,
            ..GemmArgs::product(2, 2, 2, &a, &b)
        },
        &mut c,
    );
    assert!(c[0].is_nan() && c[2] == f64::INFINITY, "{c:?}");
}
