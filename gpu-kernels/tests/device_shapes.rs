//! Odd shapes on a real device: the int8 products run at m, n, k padded to the tensor-core
//! alignment (`gpu_kernels::ozaki::padding`), and that padding must not change a bit of C.
//! Each test prints "skipped: <test>: no GPU" and passes where there is no GPU (CI); the GPU
//! machine runs them through `scripts/gpu-check`.

mod support;

use gpu_kernels::host::{self, Engine};
use gpu_kernels::ozaki::Options;
use ozaki_core::blas::{GemmArgs, SyrkArgs, Trans, Uplo};
use ozaki_core::emulate::{self, ScalingMode};
use ozaki_core::testutil::Rng;
use support::{bits_differ, centered, device_product, dims, have_gpu, same_numerics};

fn aligned(align: usize, max_block: usize) -> Options {
    Options {
        align,
        max_block,
        ..Options::default()
    }
}

/// Device-resident gemm at 4095 x 4097 x 4099 and smaller ragged shapes: the default padding
/// (m, n, k to 16), a wider one (64) and none (align 1, the products at the odd extents)
/// give the same bits, column-blocked or not; the padded result exists at all (the call is
/// not declined).
#[test]
fn padded_products_equal_unpadded_ones_bit_for_bit() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(41);
    for (m, n, k) in [
        (4095, 4099, 4097),
        (37, 29, 51),
        (257, 130, 259),
        (1, 33, 17),
    ] {
        let a = centered(&mut rng, m * k);
        let b = centered(&mut rng, k * n);
        let c0 = centered(&mut rng, m * n);
        let run = |opts: Options| {
            let (out, c) = device_product((m, n, k), 1.5, (&a, &b), -0.75, &c0, opts);
            out.unwrap_or_else(|e| panic!("{m}x{n}x{k} {opts:?}: {e}"));
            c
        };
        let unpadded = run(aligned(1, 0));
        assert_ne!(bits_differ(&unpadded, &c0), 0, "{m}x{n}x{k}: C not written");
        for opts in [
            aligned(0, 0),
            aligned(64, 0),
            aligned(0, 48),
            aligned(1, 48),
        ] {
            let diff = bits_differ(&unpadded, &run(opts));
            assert_eq!(diff, 0, "{m}x{n}x{k} {opts:?}: {diff} entries differ");
        }
    }
}

/// The padded route against the CPU reference route (`ozaki_core::emulate`, exact
/// reconstruction, same moduli and scaling) on odd shapes and every transpose: bit for bit.
#[test]
fn padded_odd_shapes_equal_the_cpu_reference_route_bit_for_bit() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(43);
    let (m, n, k) = (131, 97, 203);
    for (transa, transb) in [
        (Trans::No, Trans::No),
        (Trans::Yes, Trans::No),
        (Trans::No, Trans::Yes),
        (Trans::Yes, Trans::Yes),
    ] {
        let (ra, ca) = dims(transa, m, k);
        let (rb, cb) = dims(transb, k, n);
        let a = centered(&mut rng, ra * ca);
        let b = centered(&mut rng, rb * cb);
        let c0 = centered(&mut rng, m * n);
        let g = GemmArgs {
            transa,
            transb,
            m,
            n,
            k,
            alpha: -1.25,
            a: &a,
            lda: ra,
            b: &b,
            ldb: rb,
            beta: 0.5,
            ldc: m,
        };
        for scaling in [ScalingMode::Fast, ScalingMode::Norm] {
            let (engine, cfg) = same_numerics(scaling, 14);
            let mut cpu = c0.clone();
            emulate::gemm(&g, &mut cpu, &cfg).expect("cpu-ozaki");
            let mut dev = c0.clone();
            host::gemm(&g, &mut dev, engine).unwrap();
            let diff = bits_differ(&cpu, &dev);
            assert_eq!(diff, 0, "{transa:?}{transb:?} {scaling:?}: {diff} differ");
        }
    }
}

/// dsyrk with odd n in column blocks: padded triangles give the unpadded bits and leave the
/// other triangle untouched.
#[test]
fn padded_syrk_triangles_equal_unpadded_ones_bit_for_bit() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(47);
    let (n, k) = (301, 77);
    for trans in [Trans::No, Trans::Yes] {
        for uplo in [Uplo::Upper, Uplo::Lower] {
            let (lda, ca) = dims(trans, n, k);
            let a = centered(&mut rng, lda * ca);
            let c0 = centered(&mut rng, n * n);
            let s = SyrkArgs {
                uplo,
                trans,
                n,
                k,
                alpha: 0.5,
                a: &a,
                lda,
                beta: -1.0,
                ldc: n,
            };
            let run = |opts: Options| {
                let mut c = c0.clone();
                host::syrk(&s, &mut c, Engine::Ozaki(opts)).unwrap();
                c
            };
            let unpadded = run(aligned(1, 0));
            for opts in [aligned(0, 0), aligned(0, 50), aligned(32, 100)] {
                let c = run(opts);
                let diff = bits_differ(&unpadded, &c);
                assert_eq!(diff, 0, "{uplo:?}{trans:?} {opts:?}: {diff} differ");
            }
            for j in 0..n {
                for i in 0..n {
                    let outside = match uplo {
                        Uplo::Upper => i > j,
                        Uplo::Lower => i < j,
                    };
                    if outside {
                        assert_eq!(unpadded[i + j * n].to_bits(), c0[i + j * n].to_bits());
                    }
                }
            }
        }
    }
}
