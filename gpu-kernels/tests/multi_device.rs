//! A host-resident dgemm split across device slots (issue #7) against the same call on one
//! slot. Skips itself visibly with "skipped: no CUDA driver" without a GPU; the `0,1` case
//! skips visibly with fewer than two GPUs. Runs in the GPU round.
//!
//! What a user relies on: `OZAKI_DEVICES=0,0` (one GPU, two slots) and `0,1` give the same C
//! as one device: bit for bit for `gpu-ozaki` with the same moduli; for `gpu-native` within
//! fp64 rounding (cuBLAS may pick another kernel for a tile's shape; the test says whether
//! the bits matched). A tile that fails leaves all of C untouched.

use gpu_kernels::host::{self, Engine};
use gpu_kernels::multi;
use gpu_kernels::ozaki::Options;
use ozaki_core::blas::{GemmArgs, Trans};
use ozaki_core::devices::{SplitParams, split_c};

fn have_gpu() -> bool {
    match gpu_kernels::device::available() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skipped: no CUDA driver ({e})");
            false
        }
    }
}

fn vec(seed: u64, n: usize) -> Vec<f64> {
    let mut r = ozaki_core::testutil::Rng::new(seed);
    (0..n).map(|_| r.uniform() - 0.5).collect()
}

fn compare(slots: &[u32]) {
    let (m, n, k) = (1100usize, 1300usize, 700usize);
    let params = SplitParams {
        min_rows: 256,
        min_cols: 256,
        align: 256,
    };
    for (transa, transb) in [(Trans::No, Trans::No), (Trans::Yes, Trans::Yes)] {
        let (lda, ldb, ldc) = (
            if transa == Trans::No { m + 3 } else { k + 3 },
            if transb == Trans::No { k + 1 } else { n + 1 },
            m + 2,
        );
        let a = vec(1, lda * if transa == Trans::No { k } else { m });
        let b = vec(2, ldb * if transb == Trans::No { n } else { k });
        let c0 = vec(3, ldc * n);
        let args = GemmArgs {
            transa,
            transb,
            m,
            n,
            k,
            alpha: 0.5,
            a: &a,
            lda,
            b: &b,
            ldb,
            beta: -1.25,
            ldc,
        };
        for plan in [
            split_c(m as u64, n as u64, slots, &params),
            split_c(m as u64, n as u64, &[slots[0]; 4], &params),
        ] {
            assert!(plan.is_split());
            for (name, engine) in [
                ("gpu-native", Engine::Native),
                (
                    "gpu-ozaki",
                    Engine::Ozaki(Options {
                        moduli: Some(14),
                        max_block: 0,
                    }),
                ),
            ] {
                let mut one = c0.clone();
                host::gemm(&args, &mut one, engine).expect("single-device gemm");
                let mut split = c0.clone();
                let o = multi::gemm(&args, &mut split, engine, &plan).expect("split gemm");
                assert_eq!(
                    o.devices,
                    plan.tiles.iter().map(|t| t.device).collect::<Vec<_>>()
                );
                let identical = one
                    .iter()
                    .zip(&split)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                let worst = one
                    .iter()
                    .zip(&split)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f64::max);
                eprintln!(
                    "{name} {transa:?}{transb:?} slots {:?} grid {}x{}: bit-identical to one device: {identical} (max |diff| {worst:e})",
                    plan.tiles.iter().map(|t| t.device).collect::<Vec<_>>(),
                    plan.grid_rows,
                    plan.grid_cols
                );
                match engine {
                    Engine::Ozaki(_) => assert!(identical, "gpu-ozaki split must be bit-identical"),
                    // |C| <= 0.5 * k/4 + 1.25/2; a few ulps of that.
                    Engine::Native => {
                        assert!(worst <= 1e-12, "gpu-native split differs by {worst:e}")
                    }
                }
                // Outside the m x n block (ldc padding) nothing was written.
                for j in 0..n {
                    for i in m..ldc {
                        assert_eq!(split[i + j * ldc].to_bits(), c0[i + j * ldc].to_bits());
                    }
                }
            }
        }
    }
}

#[test]
fn split_on_one_gpu_twice_matches_one_device() {
    if !have_gpu() {
        return;
    }
    compare(&[0, 0]);
}

#[test]
fn split_on_two_gpus_matches_one_device() {
    if !have_gpu() {
        return;
    }
    let count = gpu_kernels::device::device_count().unwrap_or(0);
    if count < 2 {
        eprintln!("skipped: {count} CUDA device(s), need 2");
        return;
    }
    compare(&[0, 1]);
}

#[test]
fn a_failing_tile_leaves_c_untouched() {
    if !have_gpu() {
        return;
    }
    let (m, n, k) = (512usize, 512usize, 64usize);
    let mut a = vec(4, m * k);
    let b = vec(5, k * n);
    a[m - 1] = f64::NAN; // row m-1 of A: only the second row tile sees it
    let c0 = vec(6, m * n);
    let args = GemmArgs {
        transa: Trans::No,
        transb: Trans::No,
        m,
        n,
        k,
        alpha: 1.0,
        a: &a,
        lda: m,
        b: &b,
        ldb: k,
        beta: 1.0,
        ldc: m,
    };
    let plan = split_c(
        m as u64,
        n as u64,
        &[0, 0, 0, 0],
        &SplitParams {
            min_rows: 128,
            min_cols: 128,
            align: 128,
        },
    );
    assert!(plan.grid_rows >= 2, "{plan:?}");
    let mut c = c0.clone();
    let r = multi::gemm(&args, &mut c, Engine::Ozaki(Options::default()), &plan);
    assert!(r.is_err(), "NaN in A must fail the emulated route");
    assert!(
        c.iter().zip(&c0).all(|(x, y)| x.to_bits() == y.to_bits()),
        "C was written although a tile failed"
    );
}

/// The host-resident pipeline (`host::gemm_blocks`: C in column blocks, uploads, products
/// and downloads overlapped) gives the same C as one block: bit for bit for `gpu-ozaki`
/// with a fixed moduli count, within fp64 rounding for `gpu-native`; the ldc padding of C
/// is never written. All transposes, beta != 0, ragged last block.
#[test]
fn pipelined_host_gemm_matches_one_block() {
    if !have_gpu() {
        return;
    }
    let (m, n, k) = (600usize, 1100usize, 300usize);
    for (transa, transb) in [
        (Trans::No, Trans::No),
        (Trans::Yes, Trans::No),
        (Trans::No, Trans::Yes),
        (Trans::Yes, Trans::Yes),
    ] {
        let (lda, ldb, ldc) = (
            if transa == Trans::No { m + 3 } else { k + 3 },
            if transb == Trans::No { k + 1 } else { n + 1 },
            m + 2,
        );
        let a = vec(7, lda * if transa == Trans::No { k } else { m });
        let b = vec(8, ldb * if transb == Trans::No { n } else { k });
        let c0 = vec(9, ldc * n);
        let args = GemmArgs {
            transa,
            transb,
            m,
            n,
            k,
            alpha: 0.75,
            a: &a,
            lda,
            b: &b,
            ldb,
            beta: 1.5,
            ldc,
        };
        for (name, engine) in [
            ("gpu-native", Engine::Native),
            (
                "gpu-ozaki",
                Engine::Ozaki(Options {
                    moduli: Some(14),
                    max_block: 0,
                }),
            ),
        ] {
            let mut one = c0.clone();
            let mut g = gpu_kernels::gpu().expect("gpu");
            host::gemm_blocks(&mut g, &args, &mut one, engine, 1).expect("one block");
            for blocks in [3, 5] {
                let mut piped = c0.clone();
                host::gemm_blocks(&mut g, &args, &mut piped, engine, blocks).expect("pipelined");
                let worst = one
                    .iter()
                    .zip(&piped)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f64::max);
                match engine {
                    Engine::Ozaki(_) => assert!(
                        one.iter()
                            .zip(&piped)
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{name} {transa:?}{transb:?} {blocks} blocks changed bits ({worst:e})"
                    ),
                    Engine::Native => assert!(
                        worst <= 1e-12,
                        "{name} {transa:?}{transb:?} {blocks} blocks differ by {worst:e}"
                    ),
                }
                for j in 0..n {
                    for i in m..ldc {
                        assert_eq!(piped[i + j * ldc].to_bits(), c0[i + j * ldc].to_bits());
                    }
                }
            }
        }
    }
}

/// A NaN that only the last column block of the pipeline sees fails the emulated call
/// after earlier blocks were computed and downloaded; the caller's C is still untouched.
#[test]
fn a_nan_in_the_last_block_leaves_c_untouched() {
    if !have_gpu() {
        return;
    }
    let (m, n, k) = (256usize, 1024usize, 64usize);
    let a = vec(10, m * k);
    let mut b = vec(11, k * n);
    b[k * n - 1] = f64::NAN; // last column of B: only the last block sees it
    let c0 = vec(12, m * n);
    for beta in [0.0, 1.0] {
        let args = GemmArgs {
            transa: Trans::No,
            transb: Trans::No,
            m,
            n,
            k,
            alpha: 1.0,
            a: &a,
            lda: m,
            b: &b,
            ldb: k,
            beta,
            ldc: m,
        };
        let mut c = c0.clone();
        let mut g = gpu_kernels::gpu().expect("gpu");
        let r = host::gemm_blocks(&mut g, &args, &mut c, Engine::Ozaki(Options::default()), 4);
        assert!(r.is_err(), "NaN in B must fail the emulated route");
        assert!(
            c.iter().zip(&c0).all(|(x, y)| x.to_bits() == y.to_bits()),
            "C was written although the last block failed (beta {beta})"
        );
        // the GPU is still usable afterwards
        let ok = GemmArgs {
            b: &a[..k * 64],
            n: 64,
            ..args
        };
        let mut c2 = c0[..m * 64].to_vec();
        host::gemm_blocks(&mut g, &ok, &mut c2, Engine::Native, 2).expect("after a failure");
    }
}
