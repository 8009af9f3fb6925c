//! IEEE edge cases through the whole emulation (issue #3): subnormal and very large
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
