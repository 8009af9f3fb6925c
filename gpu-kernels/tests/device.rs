//! GPU routes on a real device. Each test skips itself visibly with
//! "skipped: no CUDA driver" where there is no GPU (CI), and runs in `scripts/gpu-check`.
//!
//! What a user relies on: results right for every transpose/alpha/beta/leading-dimension
//! combination, only C's m x n block (or one triangle for dsyrk) written, exact results when
//! the product is exactly representable, errors no worse than fp64's on ordinary data,
//! NaN/Inf refused without touching C, and identical bits whichever way the call was tiled or
//! whether operands were host- or device-resident.

mod support;

use gpu_kernels::GpuError;
use gpu_kernels::host::{self, Engine};
use gpu_kernels::measure::entry_errors;
use gpu_kernels::ozaki::Options;
use ozaki_core::blas::{GemmArgs, SyrkArgs, Trans, Uplo};
use ozaki_core::testutil::Rng;
use support::{bits_differ, centered, device_product, dims, have_gpu, integers, same_numerics};

fn op(x: &[f64], ld: usize, t: Trans, i: usize, l: usize) -> f64 {
    match t {
        Trans::No => x[i + l * ld],
        Trans::Yes => x[l + i * ld],
    }
}

/// Worst componentwise error relative to sum |a||b| (plus the exact check for beta terms
/// being applied), against exact dot products.
fn worst_error(g: &GemmArgs, c0: &[f64], c: &[f64]) -> f64 {
    let mut worst = 0.0f64;
    for j in 0..g.n {
        for i in 0..g.m {
            let row = (0..g.k).map(|l| g.alpha * op(g.a, g.lda, g.transa, i, l));
            let col = (0..g.k).map(|l| op(g.b, g.ldb, g.transb, l, j));
            // beta C_ij is one more exact term of the dot product
            let (rowb, colb) = (
                std::iter::once(g.beta),
                std::iter::once(if g.beta == 0.0 {
                    0.0
                } else {
                    c0[i + j * g.ldc]
                }),
            );
            let (_, e) = entry_errors(row.chain(rowb), col.chain(colb), c[i + j * g.ldc]);
            worst = worst.max(e);
        }
    }
    worst
}

#[test]
fn gemm_both_routes_all_transposes_alpha_beta_and_padding() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(7);
    let (m, n, k) = (37, 29, 70);
    for transa in [Trans::No, Trans::Yes] {
        for transb in [Trans::No, Trans::Yes] {
            for (alpha, beta) in [(1.0, 0.0), (-0.75, 1.5)] {
                let (ra, ca) = dims(transa, m, k);
                let (rb, cb) = dims(transb, k, n);
                let (lda, ldb, ldc) = (ra + 3, rb + 1, m + 5);
                let a = centered(&mut rng, lda * ca);
                let b = centered(&mut rng, ldb * cb);
                let c0 = centered(&mut rng, ldc * n);
                let g = GemmArgs {
                    transa,
                    transb,
                    m,
                    n,
                    k,
                    alpha,
                    a: &a,
                    lda,
                    b: &b,
                    ldb,
                    beta,
                    ldc,
                };
                for engine in [Engine::Native, Engine::Ozaki(Options::default())] {
                    let mut c = c0.clone();
                    let out = match engine {
                        Engine::Native => host::gemm(&g, &mut c, engine).expect("gpu-native"),
                        Engine::Ozaki(_) => host::gemm(&g, &mut c, engine).expect("gpu-ozaki"),
                    };
                    let err = worst_error(&g, &c0, &c);
                    assert!(
                        err < 4.0 * k as f64 * f64::EPSILON,
                        "{engine:?} {transa:?}{transb:?} a={alpha} b={beta}: {err:e}"
                    );
                    // rows m..ldc of every column are not C: untouched
                    for j in 0..n {
                        for idx in (j * ldc + m..(j + 1) * ldc).filter(|&i| i < c.len()) {
                            assert_eq!(
                                c[idx].to_bits(),
                                c0[idx].to_bits(),
                                "padding row {idx} of C written"
                            );
                        }
                    }
                    if let Engine::Ozaki(_) = engine {
                        assert!(out.moduli.is_some_and(|r| (2..=20).contains(&r)));
                    }
                }
            }
        }
    }
}

#[test]
fn emulation_is_exact_on_integer_data_and_beats_fp64_on_cancellation() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(11);
    let (m, n, k) = (64, 48, 300);
    let a = integers(&mut rng, m * k, 1000);
    let b = integers(&mut rng, k * n, 1000);
    let g = GemmArgs::product(m, n, k, &a, &b);
    let mut c = vec![f64::NAN; m * n]; // beta = 0: NaN in C must not propagate
    host::gemm(&g, &mut c, Engine::Ozaki(Options::default())).unwrap();
    for j in 0..n {
        for i in 0..m {
            let exact: i64 = (0..k)
                .map(|l| a[i + l * m] as i64 * b[l + j * k] as i64)
                .sum();
            assert_eq!(c[i + j * m], exact as f64, "({i},{j})");
        }
    }
    // heavy cancellation: row [2^60, 1, -2^60], column of ones: exact 1, fp64 summation 0
    let a = [2f64.powi(60), 1.0, -(2f64.powi(60))];
    let b = [1.0, 1.0, 1.0];
    let g = GemmArgs {
        transa: Trans::No,
        transb: Trans::No,
        m: 1,
        n: 1,
        k: 3,
        alpha: 1.0,
        a: &a,
        lda: 1,
        b: &b,
        ldb: 3,
        beta: 0.0,
        ldc: 1,
    };
    let mut c = [0.0];
    host::gemm(
        &g,
        &mut c,
        Engine::Ozaki(Options {
            moduli: Some(20),
            ..Default::default()
        }),
    )
    .unwrap();
    assert_eq!(c[0], 1.0);
}

#[test]
fn nan_or_inf_input_is_refused_and_c_is_untouched() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(3);
    let (m, n, k) = (16, 16, 16);
    for bad in [f64::NAN, f64::INFINITY] {
        let mut a = centered(&mut rng, m * k);
        a[5] = bad;
        let b = centered(&mut rng, k * n);
        let c0 = centered(&mut rng, m * n);
        let mut c = c0.clone();
        let g = GemmArgs {
            beta: 1.0,
            ..GemmArgs::product(m, n, k, &a, &b)
        };
        assert_eq!(
            host::gemm(&g, &mut c, Engine::Ozaki(Options::default())),
            Err(GpuError::NonFinite)
        );
        assert_eq!(c, c0);
    }
}

#[test]
fn syrk_writes_one_triangle_with_the_gemm_values() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(5);
    for (n, k, block) in [(45, 33, 0), (300, 64, 64)] {
        for trans in [Trans::No, Trans::Yes] {
            for uplo in [Uplo::Upper, Uplo::Lower] {
                let (ra, ca) = dims(trans, n, k);
                let lda = ra + 2;
                let a = centered(&mut rng, lda * ca);
                let ldc = n + 1;
                let c0 = centered(&mut rng, ldc * n);
                let s = SyrkArgs {
                    uplo,
                    trans,
                    n,
                    k,
                    alpha: 0.5,
                    a: &a,
                    lda,
                    beta: -1.0,
                    ldc,
                };
                let mut c = c0.clone();
                let out = host::syrk(
                    &s,
                    &mut c,
                    Engine::Ozaki(Options {
                        max_block: block,
                        ..Default::default()
                    }),
                )
                .unwrap();
                assert!(out.moduli.is_some());
                let mut native = c0.clone();
                host::syrk(&s, &mut native, Engine::Native).unwrap();
                for j in 0..n {
                    for i in 0..n {
                        let idx = i + j * ldc;
                        let inside = match uplo {
                            Uplo::Upper => i <= j,
                            Uplo::Lower => i >= j,
                        };
                        if inside {
                            let tol = 8.0 * k as f64 * f64::EPSILON * (1.0 + c0[idx].abs());
                            assert!(
                                (c[idx] - native[idx]).abs() <= tol,
                                "{uplo:?}{trans:?} ({i},{j}): {} vs {}",
                                c[idx],
                                native[idx]
                            );
                        } else {
                            assert_eq!(
                                c[idx].to_bits(),
                                c0[idx].to_bits(),
                                "{uplo:?}{trans:?} ({i},{j}) outside the triangle changed"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn tiling_and_residency_do_not_change_a_single_bit() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(9);
    let (m, n, k) = (200, 520, 130);
    let a = centered(&mut rng, m * k);
    let b = centered(&mut rng, k * n);
    let c0 = centered(&mut rng, m * n);
    let g = GemmArgs {
        alpha: 1.25,
        beta: 0.5,
        ..GemmArgs::product(m, n, k, &a, &b)
    };
    let mut whole = c0.clone();
    host::gemm(&g, &mut whole, Engine::Ozaki(Options::default())).unwrap();
    let mut tiled = c0.clone();
    host::gemm(
        &g,
        &mut tiled,
        Engine::Ozaki(Options {
            max_block: 64,
            ..Default::default()
        }),
    )
    .unwrap();
    assert!(
        whole
            .iter()
            .zip(&tiled)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "column blocks changed bits"
    );

    // the same call on device-resident operands
    let (out, dev) = device_product((m, n, k), 1.25, (&a, &b), 0.5, &c0, Options::default());
    out.unwrap();
    assert!(
        whole
            .iter()
            .zip(&dev)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "device-resident differs from host-resident"
    );
}

#[test]
fn more_moduli_never_hurt_and_default_is_at_least_fp64_grade() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(13);
    let (m, n, k) = (64, 64, 2048);
    let a = centered(&mut rng, m * k);
    let b = centered(&mut rng, k * n);
    let g = GemmArgs::product(m, n, k, &a, &b);
    let mut native = vec![0.0; m * n];
    host::gemm(&g, &mut native, Engine::Native).unwrap();
    let e_native = worst_error(&g, &native, &native);
    let mut prev = f64::INFINITY;
    for r in [8, 12, 14, 16, 18, 20] {
        let mut c = vec![0.0; m * n];
        host::gemm(
            &g,
            &mut c,
            Engine::Ozaki(Options {
                moduli: Some(r),
                ..Default::default()
            }),
        )
        .unwrap();
        let e = worst_error(&g, &c, &c);
        assert!(e <= prev * 1.01 + 1e-300, "r = {r}: {e:e} after {prev:e}");
        prev = e;
    }
    let mut c = vec![0.0; m * n];
    host::gemm(&g, &mut c, Engine::Ozaki(Options::default())).unwrap();
    let e = worst_error(&g, &c, &c);
    // ACCURACY.md's contract for the default choice: at most 2 max(native's error, u). cuBLAS
    // sums this short, wide product (64 x 64 x 2048) in blocks, so its error (5.3e-17 on the
    // H200) is well below u; norm scaling's 14 moduli gave 1.5e-16 there (BENCHMARKS.md, "GPU routes on one H200").
    let u = f64::EPSILON / 2.0;
    assert!(
        e <= 2.0 * e_native.max(u),
        "default moduli: {e:e}, native {e_native:e}"
    );
}

#[test]
fn equals_the_cpu_reference_route_bit_for_bit() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(17);
    for r in [8, 14, 16, 20] {
        for call in [
            (Trans::No, Trans::No, 1.0, 0.0),
            (Trans::Yes, Trans::No, -0.5, 1.0),
            (Trans::No, Trans::Yes, 3.0, 0.25),
        ] {
            let diff = gemm_bits_differ(&mut rng, ScalingMode::Fast, (41, 23, 77), r, call, false);
            assert_eq!(
                diff, 0,
                "r = {r}, {call:?}: {diff} entries differ from cpu-ozaki"
            );
        }
    }
}

/// m % 4 == 0 takes the reconstruction's four-rows-per-thread kernels (`reconstruct_quad`,
/// `reconstruct_quad_w4`); small k makes the scaled entries reach 2^58..2^62 for r >= 16 (the
/// widest inputs of the residue formula), r = 17 and 20 the 5-limb weights.
#[test]
fn row_quads_equal_the_cpu_reference_route_bit_for_bit() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(31);
    for r in [8, 13, 15, 16, 17, 20] {
        for call in [
            (Trans::No, Trans::No, 1.0, 0.0),
            (Trans::Yes, Trans::No, -0.5, 1.0),
            (Trans::No, Trans::Yes, 3.0, 0.25),
        ] {
            for (scaling, wide) in [(ScalingMode::Fast, false), (ScalingMode::Norm, true)] {
                let diff = gemm_bits_differ(&mut rng, scaling, (64, 29, 150), r, call, wide);
                assert_eq!(
                    diff, 0,
                    "r = {r}, {scaling:?} {call:?}: {diff} entries differ from cpu-ozaki"
                );
            }
        }
    }
}

use ozaki_core::emulate::{self, ScalingMode};

/// C = alpha op(A) op(B) + beta C0 through the GPU route and ozaki-core with the same moduli
/// and scaling, on operands whose exponents are spread so the shifts differ per row and
/// column; `wide`: also 2^200-wide spreads within op(B)'s columns, and row 1 of op(A) and
/// column 2 of op(B) zero. Returns how many entries of C differ in any bit.
fn gemm_bits_differ(
    rng: &mut Rng,
    scaling: ScalingMode,
    (m, n, k): (usize, usize, usize),
    r: usize,
    (transa, transb, alpha, beta): (Trans, Trans, f64, f64),
    wide: bool,
) -> usize {
    let (ra, ca) = dims(transa, m, k);
    let (rb, cb) = dims(transb, k, n);
    let mut a: Vec<f64> = centered(rng, ra * ca)
        .iter()
        .enumerate()
        .map(|(i, x)| x * 2f64.powi((i % 7) as i32 * 3 - 9))
        .collect();
    let wide_exp = |i: usize| if wide { (i % 3) as i32 * 200 } else { 0 };
    let mut b: Vec<f64> = centered(rng, rb * cb)
        .iter()
        .enumerate()
        .map(|(i, x)| x * 2f64.powi((i % 5) as i32 * 4 - 8 + wide_exp(i)))
        .collect();
    if wide {
        for l in 0..k {
            a[if transa == Trans::No {
                1 + l * ra
            } else {
                l + ra
            }] = 0.0;
            b[if transb == Trans::No {
                l + 2 * rb
            } else {
                2 + l * rb
            }] = 0.0;
        }
    }
    let c0 = centered(rng, m * n);
    let g = GemmArgs {
        transa,
        transb,
        m,
        n,
        k,
        alpha,
        a: &a,
        lda: ra,
        b: &b,
        ldb: rb,
        beta,
        ldc: m,
    };
    let (engine, cfg) = same_numerics(scaling, r);
    let mut cpu = c0.clone();
    emulate::gemm(&g, &mut cpu, &cfg).expect("cpu-ozaki");
    let mut dev = c0;
    let out = host::gemm(&g, &mut dev, engine).unwrap();
    assert_eq!(out.moduli, Some(r as u32));
    bits_differ(&cpu, &dev)
}

/// A wide C (more columns than one reconstruction grid row of blocks, a ragged width) with
/// 15 moduli, normal-sized and exponent-spread columns and beta != 0: the 4-limb
/// reconstruction (`reconstruct_w4`) and the integer reduction of negative products still give
/// the CPU reference route's bits.
#[test]
fn wide_c_with_fifteen_moduli_equals_the_cpu_reference_route_bit_for_bit() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(23);
    let (m, n, k, r) = (72, 4100, 96, 15);
    let a = centered(&mut rng, m * k);
    let b: Vec<f64> = centered(&mut rng, k * n)
        .iter()
        .enumerate()
        .map(|(i, x)| x * 2f64.powi((i % 9) as i32 - 4))
        .collect();
    let c0 = centered(&mut rng, m * n);
    let g = GemmArgs {
        transa: Trans::No,
        transb: Trans::Yes,
        m,
        n,
        k,
        alpha: -0.75,
        a: &a,
        lda: m,
        b: &b,
        ldb: n,
        beta: 0.5,
        ldc: m,
    };
    let (engine, cfg) = same_numerics(ScalingMode::Fast, r);
    let mut cpu = c0.clone();
    emulate::gemm(&g, &mut cpu, &cfg).expect("cpu-ozaki");
    let mut dev = c0.clone();
    host::gemm(&g, &mut dev, engine).unwrap();
    let diff = bits_differ(&cpu, &dev);
    assert_eq!(diff, 0, "{diff} of {} entries differ from cpu-ozaki", m * n);
}

/// Norm scaling (the GPU default): the coarse square sums of the `line_stats_*`
/// kernels and the per-line shifts give ozaki-core's bits for the same moduli, over both
/// storage orders of each operand (transposes), exponents spread within and across lines,
/// zero rows and columns, beta != 0, and dsyrk's triangles.
#[test]
fn norm_scaling_equals_the_cpu_reference_route_bit_for_bit() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(29);
    for shape in [(41, 23, 77), (7, 300, 1030)] {
        for r in [8, 14, 16, 20] {
            for call in [
                (Trans::No, Trans::No, 1.0, 0.0),
                (Trans::Yes, Trans::No, -0.5, 1.0),
                (Trans::No, Trans::Yes, 3.0, 0.25),
                (Trans::Yes, Trans::Yes, 1.0, -2.0),
            ] {
                let diff = gemm_bits_differ(&mut rng, ScalingMode::Norm, shape, r, call, true);
                assert_eq!(
                    diff, 0,
                    "{shape:?} r = {r}, {call:?}: {diff} entries differ"
                );
            }
            let (n, k) = (shape.1, shape.2);
            for (uplo, trans) in [(Uplo::Lower, Trans::No), (Uplo::Upper, Trans::Yes)] {
                let (ra, ca) = dims(trans, n, k);
                let a: Vec<f64> = centered(&mut rng, ra * ca)
                    .iter()
                    .enumerate()
                    .map(|(i, x)| x * 2f64.powi((i % 11) as i32 * 2 - 10))
                    .collect();
                let c0 = centered(&mut rng, n * n);
                let s = SyrkArgs {
                    uplo,
                    trans,
                    n,
                    k,
                    alpha: 0.75,
                    a: &a,
                    lda: ra,
                    beta: 0.5,
                    ldc: n,
                };
                let (engine, cfg) = same_numerics(ScalingMode::Norm, r);
                let mut cpu = c0.clone();
                emulate::syrk(&s, &mut cpu, &cfg).expect("cpu-ozaki syrk");
                let mut dev = c0;
                host::syrk(&s, &mut dev, engine).unwrap();
                let diff = bits_differ(&cpu, &dev);
                assert_eq!(
                    diff, 0,
                    "dsyrk {n}x{k} r = {r} {uplo:?}{trans:?}: {diff} entries differ"
                );
            }
        }
    }
}

/// Lines whose coarse square sum is exactly a power of two (1.0 once, ā = 32; then twelve
/// entries just below 0.5, ā = 16: S = 1024 + 12 · 256 = 2^12): one unit more in the GPU's
/// S would raise clog2 S and, with 8 moduli (even budget), lower the shift by one, which the
/// inexact entries would show in C. So the GPU's `line_stats_*` sums are exactly
/// ozaki-core's, in both storage orders.
#[test]
fn norm_scaling_sees_exact_coarse_square_sums() {
    use ozaki_core::scaling::{CoarseBounds, Exponents, Scaling};
    let k = 13;
    let line: Vec<f64> = std::iter::once(1.0)
        .chain((0..12).map(|l| 0.47 + 0.0025 * l as f64))
        .collect();
    // the premise: S = 2^12, and S + 1 would change the shift at r = 8
    let e = Some(0);
    let exps = Exponents {
        rows: vec![e],
        cols: vec![e],
    };
    let budget = ScalingMode::Norm.budget_bits(ozaki_core::moduli::CrtPlan::get(8));
    let s = CoarseBounds::norm(&exps, &line, &line, k);
    assert_eq!(s.rows, [4096]);
    let off = CoarseBounds {
        rows: vec![4097],
        cols: vec![4097],
    };
    assert_ne!(
        Scaling::new(budget, &exps, &s).sigma,
        Scaling::new(budget, &exps, &off).sigma
    );
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(31);
    for (transa, transb) in [(Trans::No, Trans::No), (Trans::Yes, Trans::Yes)] {
        let (m, n) = (3, 2);
        // every row of op(A) and column of op(B) is `line` times a sign pattern and a power of 2
        let sign = |i: usize, l: usize| if (i + l).is_multiple_of(3) { -1.0 } else { 1.0 };
        let (ra, ca) = dims(transa, m, k);
        let mut a = vec![0.0; ra * ca];
        for i in 0..m {
            for l in 0..k {
                let v = sign(i, l) * line[l] * 2f64.powi(i as i32 * 7 - 3);
                a[if transa == Trans::No {
                    i + l * ra
                } else {
                    l + i * ra
                }] = v;
            }
        }
        let (rb, cb) = dims(transb, k, n);
        let mut b = vec![0.0; rb * cb];
        for j in 0..n {
            for l in 0..k {
                let v = sign(j + 1, l) * line[(l + j) % k] * 2f64.powi(j as i32 * 11);
                b[if transb == Trans::No {
                    l + j * rb
                } else {
                    j + l * rb
                }] = v;
            }
        }
        let c0 = centered(&mut rng, m * n);
        let g = GemmArgs {
            transa,
            transb,
            m,
            n,
            k,
            alpha: 1.0,
            a: &a,
            lda: ra,
            b: &b,
            ldb: rb,
            beta: 0.0,
            ldc: m,
        };
        let (engine, cfg) = same_numerics(ScalingMode::Norm, 8);
        let mut cpu = c0.clone();
        emulate::gemm(&g, &mut cpu, &cfg).expect("cpu-ozaki");
        let mut dev = c0;
        host::gemm(&g, &mut dev, engine).unwrap();
        assert_eq!(
            bits_differ(&cpu, &dev),
            0,
            "{transa:?}{transb:?}: {cpu:?} vs {dev:?}"
        );
    }
}

/// The route forms shifts and residues for the moduli count it expects (the last automatic
/// choice) while the host plans, and forms them again when the plan picks another count.
/// Alternating data that need different counts (normal entries, then exponent-spread rows),
/// each automatic call must equal, bit for bit, a call forced to the count it chose, in both
/// scalings; and a NaN call refused after the speculative residues leaves C untouched.
#[test]
fn automatic_moduli_equal_forced_ones_whatever_the_previous_call_chose() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(41);
    let (m, n, k) = (96, 72, 400);
    let normal = (centered(&mut rng, m * k), centered(&mut rng, k * n));
    let spread_a: Vec<f64> = centered(&mut rng, m * k)
        .iter()
        .enumerate()
        .map(|(i, x)| x * 2f64.powi(((i * 7919) % 23) as i32 - 11))
        .collect();
    let spread = (spread_a, centered(&mut rng, k * n));
    let c0 = centered(&mut rng, m * n);
    // C = op(A) op(B) + 0.5 C0 on device-resident copies: the outcome and C afterwards
    let run = |(a, b): &(Vec<f64>, Vec<f64>), opts: Options| {
        device_product((m, n, k), 1.0, (a, b), 0.5, &c0, opts)
    };
    let mut counts = Vec::new();
    for scaling in [ScalingMode::Norm, ScalingMode::Fast] {
        for data in [&normal, &spread, &spread, &normal, &spread] {
            let auto = Options {
                scaling: Some(scaling),
                ..Default::default()
            };
            let (out, c_auto) = run(data, auto);
            let r = out.unwrap().moduli;
            let forced = Options {
                moduli: Some(r as usize),
                ..auto
            };
            let (out, c_forced) = run(data, forced);
            assert_eq!(out.unwrap().moduli, r);
            let diff = bits_differ(&c_forced, &c_auto);
            assert_eq!(diff, 0, "{scaling:?}, r = {r}: {diff} entries differ");
            counts.push(r);
        }
    }
    assert!(
        counts.windows(2).any(|w| w[0] != w[1]),
        "the data never changed the moduli count ({counts:?}): the re-forming path went untested"
    );
    // NaN in B: refused after the speculative residues were launched; C untouched
    let mut nan_b = normal.1.clone();
    nan_b[k * 3 + 5] = f64::NAN;
    let (res, c) = run(&(normal.0.clone(), nan_b), Options::default());
    assert_eq!(res.unwrap_err(), GpuError::NonFinite);
    assert_eq!(bits_differ(&c0, &c), 0, "a refused call wrote C");
}

/// The accuracy rule reads the same statistics on both routes: the GPU's per-line kernels
/// give exactly the host mirror's `LineTable` (every field an exact integer), and its
/// `line_summary` kernel exactly the summaries `cpu-ozaki` forms from that table
/// (`SideSummary::of`, every accuracy mode and both scalings), for both storage orders of the
/// operands, for every way of reading the lines (one read per operand in each `ScanStats`
/// variant, the scan then the statistics pass) and for inputs with outliers, subnormals,
/// zeros and a row below 2^-1002. With `OZAKI_RULE_COST=1` it also prints what the rule costs
/// next to the whole call at n = 4096 and 8192 (`scripts/gpu-check` stage `rule`): the time
/// the route's per-line work takes beyond the exponent scan alone (what the call would read
/// without the rule), the summary kernel and the summaries' download (CUDA events) and the
/// host step (`plan_summarised`, as the route calls it), each the fastest of five.
#[test]
fn line_statistics_equal_the_host_mirror() {
    use gpu_kernels::measure::upload;
    use gpu_kernels::ozaki::{self, DeviceCall, LinePass, LineTable, Op, ScanStats};
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(41);
    // k = 700: two passes; 1500: the 16-entry variants; 5000: Contig32 (contiguous lines)
    for (m, n, k) in [(45, 38, 1500), (21, 19, 700), (13, 11, 5000)] {
        let mut a = centered(&mut rng, m * k);
        let mut b = centered(&mut rng, k * n);
        for (i, x) in a.iter_mut().enumerate() {
            match i % 997 {
                0 => *x *= 1e8,
                1 => *x *= 1e-310,
                2 => *x = 0.0,
                _ => {}
            }
        }
        for l in 0..k {
            a[2 + l * m] *= 1e-306; // row 2 entirely below 2^-1002
        }
        b[5..k].fill(0.0); // a column mostly zero
        b[3 * k + 7] = 3.0e12;
        for (transa, transb) in [(Trans::No, Trans::No), (Trans::Yes, Trans::Yes)] {
            // op(A) rows and op(B) columns as stored for this transpose
            let (sa, sb) = (
                if transa == Trans::No {
                    a.clone()
                } else {
                    transpose(&a, m, k)
                },
                if transb == Trans::No {
                    b.clone()
                } else {
                    transpose(&b, k, n)
                },
            );
            let (da, db, dc) = (
                upload(&sa).unwrap(),
                upload(&sb).unwrap(),
                upload(&vec![0.0; m * n]).unwrap(),
            );
            let call = DeviceCall {
                op: Op::Gemm {
                    transa,
                    transb,
                    b: db.ptr(),
                    ldb: if transb == Trans::No { k } else { n },
                },
                m,
                n,
                k,
                alpha: 1.0,
                a: da.ptr(),
                lda: if transa == Trans::No { m } else { k },
                beta: 0.0,
                c: dc.ptr(),
                ldc: m,
            };
            let mut g = gpu_kernels::gpu().unwrap();
            let s = g.stream();
            let rows: Vec<f64> = (0..m)
                .flat_map(|i| (0..k).map(move |l| (i, l)))
                .map(|(i, l)| a[i + l * m])
                .collect();
            let (want_a, want_b) = (
                LineTable::of_packed(&rows, m, k),
                LineTable::of_packed(&b, n, k),
            );
            let passes = [LinePass::Route, LinePass::TwoPass]
                .into_iter()
                .chain(ScanStats::ALL.map(LinePass::With));
            for pass in passes {
                let what = format!("k = {k} {transa:?}{transb:?} {pass:?}");
                // SAFETY: `g`'s context is current on this thread and `s` is its stream; `da`,
                // `db` hold op(A) and op(B) at these leading dimensions and outlive the call.
                let one =
                    unsafe { ozaki::line_statistics(&mut g, s, &call, &Options::default(), pass) }
                        .unwrap();
                assert_eq!(one.a, want_a, "{what}: rows of op(A)");
                assert_eq!(one.b, want_b, "{what}: columns of op(B)");
            }
            for accuracy in [
                ozaki::Accuracy::Default,
                ozaki::Accuracy::Normwise,
                ozaki::Accuracy::Guaranteed,
            ] {
                for scaling in [ozaki::ScalingMode::Norm, ozaki::ScalingMode::Fast] {
                    let opts = Options {
                        accuracy,
                        scaling: Some(scaling),
                        ..Options::default()
                    };
                    // SAFETY: as above.
                    let one =
                        unsafe { ozaki::line_statistics(&mut g, s, &call, &opts, LinePass::Route) }
                            .unwrap();
                    let req = ozaki_core::rule::Request {
                        accuracy,
                        ..ozaki_core::rule::Request::new(k, scaling)
                    };
                    let host = (
                        ozaki::SideSummary::of(&one.a.view(), &req),
                        ozaki::SideSummary::of(&one.b.view(), &req),
                    );
                    assert!(
                        one.summaries == host,
                        "k = {k} {transa:?}{transb:?} {accuracy:?} {scaling:?}: GPU summaries differ from the host's"
                    );
                }
            }
        }
    }
    if std::env::var_os("OZAKI_RULE_COST").is_some() {
        for n in [4096usize, 8192] {
            let a = centered(&mut rng, n * n);
            let (da, dc) = (upload(&a).unwrap(), upload(&vec![0.0; n * n]).unwrap());
            let call = DeviceCall::product((n, n, n), 1.0, (da.ptr(), da.ptr()), 0.0, dc.ptr());
            let mut g = gpu_kernels::gpu().unwrap();
            let s = g.stream();
            let opts = Options::default();
            // SAFETY: `g`'s context is current on this thread and `s` is its stream; `da` and
            // `dc` are n x n buffers of that context, alive until `gemm` has waited for them.
            unsafe { ozaki::gemm(&mut g, s, &call, opts) }.unwrap(); // warm
            // the fastest of five of each part (a shared host may delay any one of them)
            let best = |x: &mut f64, y: f64| *x = x.min(y);
            // the route's way, the exponent scan alone (both forms), the two passes, then each
            // one-read variant that fits one of the operands (the route's way for the other);
            // each per operand
            let passes: Vec<LinePass> = [
                LinePass::Route,
                LinePass::ScanOnly,
                LinePass::ScanOnlyOneRead,
                LinePass::TwoPass,
            ]
            .into_iter()
            .chain(
                ScanStats::ALL
                    .into_iter()
                    .filter(|v| v.fits(true, n) || v.fits(false, n))
                    .map(LinePass::With),
            )
            .collect();
            let mut times = vec![[f64::INFINITY; 2]; passes.len()];
            let [mut summary, mut down, mut host, mut whole] = [f64::INFINITY; 4];
            for _ in 0..5 {
                for (t, &pass) in times.iter_mut().zip(&passes) {
                    // SAFETY: as for the warm-up call above (C is not touched).
                    let each = unsafe { ozaki::lines_cost(&mut g, s, &call, pass) }.unwrap();
                    best(&mut t[0], each[0]);
                    best(&mut t[1], each[1]);
                }
                // SAFETY: as above.
                let one =
                    unsafe { ozaki::line_statistics(&mut g, s, &call, &opts, LinePass::Route) }
                        .unwrap();
                best(&mut summary, one.cost.summary);
                best(&mut down, one.cost.download);
                // the route's host step: the plan from the summaries (the device forms the
                // shifts)
                let t = std::time::Instant::now();
                let plan = ozaki::plan_summarised(
                    one.summaries.0.view(),
                    one.summaries.1.view(),
                    n,
                    (None, ozaki::Accuracy::Default),
                    ozaki::DEFAULT_SCALING,
                );
                best(&mut host, t.elapsed().as_secs_f64());
                assert!(plan.is_ok());
                let t = std::time::Instant::now();
                // SAFETY: as for the warm-up call above.
                unsafe { ozaki::gemm(&mut g, s, &call, opts) }.unwrap();
                best(&mut whole, t.elapsed().as_secs_f64());
            }
            // the rule's part: what the route's per-line work takes beyond the exponent scan
            // alone, in the faster of its two forms per operand, which every call needs (the
            // rule's part includes norm scaling's S), the summary kernel, the summaries'
            // download and the host step
            let route = times[0][0] + times[0][1];
            let scan: f64 = (0..2).map(|o| times[1][o].min(times[2][o])).sum();
            let statistics = (route - scan).max(0.0);
            let rule = statistics + summary + down + host;
            // what the rule would cost if the route read each operand with the fastest
            // one-read variant that fits its lines (this call: op(A)'s rows are strided,
            // op(B)'s columns contiguous), for choosing `ScanStats::for_lines`
            let fastest = |o: usize, contig: bool| {
                passes
                    .iter()
                    .zip(&times)
                    .filter(|(p, _)| match p {
                        LinePass::Route | LinePass::TwoPass => true,
                        LinePass::With(v) => v.fits(contig, n),
                        _ => false,
                    })
                    .map(|(p, t)| (t[o], *p))
                    .min_by(|x, y| x.0.total_cmp(&y.0))
                    .expect("the route's own pass is always there")
            };
            let (fa, fb) = (fastest(0, false), fastest(1, true));
            let best_rule = (fa.0 + fb.0 - scan).max(0.0) + summary + down + host;
            println!(
                "rule statistics n = {n}, fastest pass per operand ({:?} + {:?}): {:.3} ms of a {:.3} ms call ({:.1}%)",
                fa.1,
                fb.1,
                best_rule * 1e3,
                whole * 1e3,
                100.0 * best_rule / whole,
            );
            let each: Vec<String> = passes
                .iter()
                .zip(&times)
                .map(|(p, t)| format!("{p:?} {:.3} + {:.3}", t[0] * 1e3, t[1] * 1e3))
                .collect();
            println!(
                "rule line passes n = {n} (ms, op(A) rows + op(B) columns): {}",
                each.join(", ")
            );
            println!(
                "rule statistics n = {n}: statistics {:.3} ms (per-line work {:.3} ms less the exponent scan alone {:.3} ms) + summary kernel {:.3} ms + download {:.3} ms + host rule {:.3} ms = {:.3} ms of a {:.3} ms call ({:.1}%, {})",
                statistics * 1e3,
                route * 1e3,
                scan * 1e3,
                summary * 1e3,
                down * 1e3,
                host * 1e3,
                rule * 1e3,
                whole * 1e3,
                100.0 * rule / whole,
                if rule <= 0.05 * whole {
                    "within 5%"
                } else {
                    "ABOVE 5%"
                },
            );
        }
    }
}

fn transpose(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0.0; x.len()];
    for j in 0..cols {
        for i in 0..rows {
            t[j + i * cols] = x[i + j * rows];
        }
    }
    t
}

/// A skipped test's line names it (`scripts/test-totals` counts such lines as skipped).
#[test]
fn skip_lines_name_their_test() {
    assert_eq!(support::test_name!(), "skip_lines_name_their_test");
    assert_eq!(support::function_name("device::a_test::here"), "a_test");
}
