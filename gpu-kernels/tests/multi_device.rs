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
                        scaling: None,
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
