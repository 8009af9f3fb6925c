//! A host-resident dgemm split across device slots against the same call on one
//! slot. Skips itself visibly with "skipped: no CUDA driver" without a GPU; the `0,1` case
//! skips visibly with fewer than two GPUs. Runs in the GPU round.
//!
//! What a user relies on: `OZAKI_DEVICES=0,0` (one GPU, two slots) and `0,1` give the same C
//! as one device: bit for bit for `gpu-ozaki` with the same moduli; for `gpu-native` within
//! fp64 rounding (cuBLAS may pick another kernel for a tile's shape; the test says whether
//! the bits matched). A tile that fails leaves all of C untouched.

mod support;

use gpu_kernels::host::{self, Engine};
use gpu_kernels::multi;
use gpu_kernels::ozaki::Options;
use ozaki_core::blas::{GemmArgs, Trans};
use ozaki_core::devices::{SplitParams, split_c};
use support::{centered_seeded as vec, have_gpu, skip, test_name};

/// Random operands of a (transa, transb) m x n x k call with padded leading dimensions.
struct Operands {
    a: Vec<f64>,
    b: Vec<f64>,
    c0: Vec<f64>,
    ld: (usize, usize, usize),
}

impl Operands {
    fn new((transa, transb): (Trans, Trans), (m, n, k): (usize, usize, usize), seed: u64) -> Self {
        let ld = (
            if transa == Trans::No { m + 3 } else { k + 3 },
            if transb == Trans::No { k + 1 } else { n + 1 },
            m + 2,
        );
        Operands {
            a: vec(seed, ld.0 * if transa == Trans::No { k } else { m }),
            b: vec(seed + 1, ld.1 * if transb == Trans::No { n } else { k }),
            c0: vec(seed + 2, ld.2 * n),
            ld,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn args(
        &self,
        (transa, transb): (Trans, Trans),
        (m, n, k): (usize, usize, usize),
        alpha: f64,
        beta: f64,
    ) -> GemmArgs<'_> {
        GemmArgs {
            transa,
            transb,
            m,
            n,
            k,
            alpha,
            a: &self.a,
            lda: self.ld.0,
            b: &self.b,
            ldb: self.ld.1,
            beta,
            ldc: self.ld.2,
        }
    }

    /// `c` is the call's result: every entry within 1e-12 of the reference BLAS's (relative
    /// to |alpha| |op(A)| |op(B)| + |beta C|; |a|, |b|, |c0| <= 1). Catches a C never written
    /// or written at the wrong place.
    fn is_the_product(&self, args: &GemmArgs<'_>, c: &[f64]) {
        let mut want = self.c0.clone();
        ozaki_core::blas::gemm(args, &mut want);
        let scale = args.alpha.abs() * args.k as f64 + args.beta.abs();
        for j in 0..args.n {
            for i in 0..args.m {
                let (x, y) = (c[i + j * args.ldc], want[i + j * args.ldc]);
                assert!((x - y).abs() <= 1e-12 * scale, "C[{i},{j}] = {x}, want {y}");
            }
        }
    }

    /// Nothing outside the m x n block of C (the ldc padding) differs from the input.
    fn padding_untouched(&self, c: &[f64], m: usize, n: usize) {
        let ldc = self.ld.2;
        for j in 0..n {
            for i in m..ldc {
                assert_eq!(c[i + j * ldc].to_bits(), self.c0[i + j * ldc].to_bits());
            }
        }
    }
}

/// C's download ring (beta = 0, `host::Tuning::c_ring`) shrunk to 2 slots of 1 MiB while the
/// guard lives, so every beta = 0 call of the tests holding it is larger than the ring: its
/// slots are reused within the call and the download waits for the writer (and, where the
/// writes wait for a call's acceptance, for the go). Serialises the tests that hold it.
fn small_ring() -> support::Tuned {
    support::tuned("cslots=2,cslot=1")
}

/// Both routes; gpu-ozaki with a fixed moduli count (bit-identity needs the same count).
fn engines() -> [(&'static str, Engine); 2] {
    [
        ("gpu-native", Engine::Native),
        (
            "gpu-ozaki",
            Engine::Ozaki(Options {
                moduli: Some(14),
                max_block: 0,
                scaling: None,
                ..Options::default()
            }),
        ),
    ]
}

fn compare(slots: &[u32]) {
    let _ring = small_ring();
    let (m, n, k) = (1100usize, 1300usize, 700usize);
    let params = SplitParams {
        min_rows: 256,
        min_cols: 256,
        align: 256,
    };
    // beta = 0 (NT): the tiles write their blocks early (early_write)
    for (t, beta) in [
        ((Trans::No, Trans::No), -1.25),
        ((Trans::Yes, Trans::Yes), -1.25),
        ((Trans::No, Trans::Yes), 0.0),
    ] {
        let (transa, transb) = t;
        let ops = Operands::new(t, (m, n, k), 1);
        let args = ops.args(t, (m, n, k), 0.5, beta);
        let c0 = &ops.c0;
        for plan in [
            split_c(m as u64, n as u64, slots, &params),
            split_c(m as u64, n as u64, &[slots[0]; 4], &params),
        ] {
            assert!(plan.is_split());
            for (name, engine) in engines() {
                let mut one = c0.clone();
                host::gemm(&args, &mut one, engine).expect("single-device gemm");
                ops.is_the_product(&args, &one);
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
                ops.padding_untouched(&split, m, n);
            }
        }
    }
}

/// Whether two CUDA devices are present (saying why not when they are not).
fn have_two_gpus(test: &str) -> bool {
    if !support::gpu_for(test) {
        return false;
    }
    let count = gpu_kernels::device::device_count().unwrap_or(0);
    if count < 2 {
        skip(test, format_args!("{count} CUDA device(s), need 2"));
    }
    count >= 2
}

#[test]
fn split_on_one_gpu_twice_matches_one_device() {
    if !have_gpu!() {
        return;
    }
    compare(&[0, 0]);
}

#[test]
fn split_on_two_gpus_matches_one_device() {
    if !have_two_gpus(test_name!()) {
        return;
    }
    compare(&[0, 1]);
}

#[test]
fn a_failing_tile_leaves_c_untouched() {
    if !have_gpu!() {
        return;
    }
    let (m, n, k) = (512usize, 512usize, 64usize);
    let mut a = vec(4, m * k);
    let b = vec(5, k * n);
    a[m - 1] = f64::NAN; // row m-1 of A: only the second row tile sees it
    let c0 = vec(6, m * n);
    let args = GemmArgs {
        beta: 1.0,
        ..GemmArgs::product(m, n, k, &a, &b)
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

/// The host-resident pipeline (`host::gemm_grid`: C in column blocks, op(A) in row panels,
/// uploads, products and downloads overlapped) gives the same C as one block and one panel:
/// bit for bit for `gpu-ozaki` with a fixed moduli count, within fp64 rounding for
/// `gpu-native`; the ldc padding of C is never written. All transposes, padded leading
/// dimensions, beta != 0 and beta = 0 (blocks written into C as they arrive, through a
/// download ring smaller than C), ragged last block and panel.
#[test]
fn pipelined_host_gemm_matches_one_block() {
    if !have_gpu!() {
        return;
    }
    let _ring = small_ring();
    let (m, n, k) = (600usize, 1100usize, 300usize);
    for (t, beta) in [
        ((Trans::No, Trans::No), 1.5),
        ((Trans::Yes, Trans::No), 1.5),
        ((Trans::No, Trans::Yes), 1.5),
        ((Trans::Yes, Trans::Yes), 1.5),
        ((Trans::No, Trans::No), 0.0),
        ((Trans::Yes, Trans::No), 0.0),
    ] {
        let (transa, transb) = t;
        let ops = Operands::new(t, (m, n, k), 7);
        let args = ops.args(t, (m, n, k), 0.75, beta);
        let c0 = &ops.c0;
        for (name, engine) in engines() {
            let mut one = c0.clone();
            let mut g = gpu_kernels::gpu().expect("gpu");
            let grid = |blocks, panels| host::Grid { blocks, panels };
            host::gemm_grid(&mut g, &args, &mut one, engine, grid(1, 1)).expect("one block");
            ops.is_the_product(&args, &one);
            for (blocks, panels) in [(3, 1), (5, 1), (1, 3), (3, 2), (5, 4)] {
                let mut piped = c0.clone();
                host::gemm_grid(&mut g, &args, &mut piped, engine, grid(blocks, panels))
                    .expect("pipelined");
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
                        "{name} {transa:?}{transb:?} {blocks} x {panels} changed bits ({worst:e})"
                    ),
                    Engine::Native => assert!(
                        worst <= 1e-12,
                        "{name} {transa:?}{transb:?} {blocks} x {panels} differ by {worst:e}"
                    ),
                }
                ops.padding_untouched(&piped, m, n);
            }
        }
    }
}

/// With registration on (`OZAKI_HOST_REGISTER=1`, here the tuning's `register=1`), a call
/// large enough (A, B and C of 96 MiB or more) page-locks op(A) and op(B) and uploads them
/// from the caller's memory, strided row panels included; C is bit for bit what the staged
/// uploads give, for both routes, all transposes and padded leading dimensions, beta = 0
/// and beta != 0, and its ldc padding is never written. A call below the size stages.
#[test]
fn page_locked_operands_give_the_staged_result_bit_for_bit() {
    if !have_gpu!() {
        return;
    }
    let _ring = small_ring();
    let (m, n, k) = (2100usize, 2200usize, 2000usize);
    let with = |register: &str| {
        host::set_tuning(Some(
            format!("cslots=2,cslot=1,register={register}")
                .parse()
                .expect("tuning"),
        ))
    };
    for (t, beta) in [
        ((Trans::No, Trans::No), 0.0),
        ((Trans::Yes, Trans::No), 1.5),
        ((Trans::No, Trans::Yes), 1.5),
        ((Trans::Yes, Trans::Yes), 0.0),
    ] {
        let ops = Operands::new(t, (m, n, k), 11);
        let args = ops.args(t, (m, n, k), 0.75, beta);
        for (name, engine) in engines() {
            for (blocks, panels) in [(1, 1), (3, 2)] {
                let grid = host::Grid { blocks, panels };
                let mut g = gpu_kernels::gpu().expect("gpu");
                with("0");
                let mut staged = ops.c0.clone();
                let o = host::gemm_grid(&mut g, &args, &mut staged, engine, grid).expect("staged");
                assert!(!o.page_locked, "{name}: staged with register=0");
                with("1");
                let mut locked = ops.c0.clone();
                let o =
                    host::gemm_grid(&mut g, &args, &mut locked, engine, grid).expect("page-locked");
                assert!(o.page_locked, "{name} {t:?}: operands not page-locked");
                assert!(
                    staged
                        .iter()
                        .zip(&locked)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{name} {t:?} beta {beta} {blocks} x {panels}: page-locked uploads changed C"
                );
                ops.padding_untouched(&locked, m, n);
            }
        }
    }
    // below the size: staged even with registration on
    let small = Operands::new((Trans::No, Trans::No), (300, 200, 100), 3);
    let args = small.args((Trans::No, Trans::No), (300, 200, 100), 1.0, 0.0);
    let mut c = small.c0.clone();
    let mut g = gpu_kernels::gpu().expect("gpu");
    let o = host::gemm_grid(
        &mut g,
        &args,
        &mut c,
        Engine::Native,
        host::Grid {
            blocks: 1,
            panels: 1,
        },
    )
    .expect("small");
    assert!(!o.page_locked);
    small.is_the_product(&args, &c);
}

/// A NaN that only the last column block of the pipeline sees fails the emulated call
/// after earlier blocks were computed and downloaded. Where C is an input (beta != 0), or
/// with beta = 0 while the writes wait for the whole call's rule (the default), the
/// caller's C is still untouched, with a C (4 MiB) larger than its download ring (2 MiB),
/// whose download must then wait for a go that never comes without hanging the call. With
/// beta = 0 and blocks written as they arrive (`ozaki_write=downloaded`) the call still
/// fails, and the next call on the same memory computes all of C as the shim's fallback
/// would.
#[test]
fn a_nan_in_the_last_block_fails_the_call_and_leaves_a_read_c_untouched() {
    if !have_gpu!() {
        return;
    }
    let (m, n, k) = (512usize, 1024usize, 64usize);
    let a = vec(10, m * k);
    let mut b = vec(11, k * n);
    b[k * n - 1] = f64::NAN; // last column of B: only the last block sees it
    let c0 = vec(12, m * n);
    let cases = [
        (1.0, "cslots=2,cslot=1", true),
        (0.0, "cslots=2,cslot=1", true),
        (0.0, "cslots=2,cslot=1,ozaki_write=downloaded", false),
    ];
    for (beta, tuning, untouched) in cases {
        let _ring = support::tuned(tuning);
        let args = GemmArgs {
            beta,
            ..GemmArgs::product(m, n, k, &a, &b)
        };
        let mut c = c0.clone();
        let mut g = gpu_kernels::gpu().expect("gpu");
        let grid = host::Grid {
            blocks: 4,
            panels: 1,
        };
        let r = host::gemm_grid(
            &mut g,
            &args,
            &mut c,
            Engine::Ozaki(Options::default()),
            grid,
        );
        assert!(
            r.is_err(),
            "NaN in B must fail the emulated route ({tuning})"
        );
        if untouched {
            assert!(
                c.iter().zip(&c0).all(|(x, y)| x.to_bits() == y.to_bits()),
                "C was written although the last block failed (beta {beta}, {tuning})"
            );
        }
        // the GPU is still usable afterwards, on the same C: the fallback's product, whole
        let ok = GemmArgs {
            b: &a[..k * 64],
            n: 64,
            ..args
        };
        let mut want = c[..m * 64].to_vec();
        ozaki_core::blas::gemm(&ok, &mut want);
        let grid = host::Grid {
            blocks: 2,
            panels: 2,
        };
        host::gemm_grid(&mut g, &ok, &mut c[..m * 64], Engine::Native, grid)
            .expect("after a failure");
        let scale = k as f64 + beta;
        for (at, (x, y)) in c[..m * 64].iter().zip(&want).enumerate() {
            assert!(
                (x - y).abs() <= 1e-12 * scale,
                "the call after a failure: C[{at}] = {x}, want {y} ({tuning})"
            );
        }
    }
}

/// On two GPUs, where A is staged once and shared between the devices before the tiles
/// run, a NaN that only the second GPU's tile sees still leaves all of C untouched, and the
/// next split call works.
#[test]
fn a_failing_tile_on_two_gpus_leaves_c_untouched() {
    if !have_two_gpus(test_name!()) {
        return;
    }
    let (m, n, k) = (512usize, 1024usize, 96usize);
    let a = vec(13, m * k);
    let mut b = vec(14, k * n);
    b[k * n - 1] = f64::NAN; // last column of B: only the second column tile sees it
    let c0 = vec(15, m * n);
    let params = SplitParams {
        min_rows: 128,
        min_cols: 128,
        align: 128,
    };
    let plan = split_c(m as u64, n as u64, &[0, 1], &params);
    assert_eq!(plan.grid_rows, 1, "{plan:?}");
    // each tile's C (2 MiB) fills its download ring before the gate fails; with beta = 0 and
    // the writes waiting for acceptance (the default), the first tile, whose data pass, must
    // not write early either (early_write::Gate)
    for (beta, tuning) in [(0.5, "cslots=2,cslot=1"), (0.0, "cslots=2,cslot=1")] {
        let _ring = support::tuned(tuning);
        let args = GemmArgs {
            beta,
            ..GemmArgs::product(m, n, k, &a, &b)
        };
        let mut c = c0.clone();
        let r = multi::gemm(&args, &mut c, Engine::Ozaki(Options::default()), &plan);
        assert!(r.is_err(), "NaN in B must fail the emulated route");
        assert!(
            c.iter().zip(&c0).all(|(x, y)| x.to_bits() == y.to_bits()),
            "C was written although a tile failed (beta {beta})"
        );
    }
    b[k * n - 1] = 0.25;
    let args = GemmArgs {
        beta: 0.5,
        ..GemmArgs::product(m, n, k, &a, &b)
    };
    let mut split = c0.clone();
    multi::gemm(&args, &mut split, Engine::Native, &plan).expect("split after a failure");
    let mut one = c0.clone();
    host::gemm(&args, &mut one, Engine::Native).expect("one device");
    let worst = one
        .iter()
        .zip(&split)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(worst <= 1e-12, "split after a failure differs by {worst:e}");
}

/// gpu-ozaki with the automatic moduli count in a pipeline whose blocks would need different
/// counts on their own (the last quarter of B's columns spread over 2^-12..2^12): the
/// accuracy rule runs once on the whole call, so every cut (column blocks x row panels) gives
/// the untiled call's count and C bit for bit, with beta = 0 (early writes) and beta != 0,
/// a padded ldc whose padding stays untouched, both when the units' expected count is
/// wrong (the first pipelined call after a call on plain data: the call runs again with the
/// whole call's count) and when it is right (the calls after it).
#[test]
fn pipelined_automatic_moduli_are_the_whole_calls() {
    if !have_gpu!() {
        return;
    }
    let (m, n, k) = (384usize, 1024usize, 256usize);
    let ldc = m + 5;
    let a = vec(21, m * k);
    let plain = vec(22, k * n);
    let mut b = plain.clone();
    let wide = 3 * n / 4;
    let mut r = ozaki_core::testutil::Rng::new(23);
    for x in &mut b[wide * k..] {
        *x *= 2f64.powi((r.uniform() * 24.0) as i32 - 12);
    }
    let c0 = vec(24, ldc * n);
    let auto = Engine::Ozaki(Options::default());
    let grid = |blocks, panels| host::Grid { blocks, panels };
    let mut g = gpu_kernels::gpu().expect("gpu");
    for beta in [0.0, 0.5] {
        let args = GemmArgs {
            beta,
            ldc,
            ..GemmArgs::product(m, n, k, &a, &b)
        };
        let mut untiled = c0.clone();
        let whole = host::gemm_grid(&mut g, &args, &mut untiled, auto, grid(1, 1))
            .expect("untiled")
            .moduli;
        for (blocks, panels) in [(4, 1), (4, 2), (3, 3)] {
            for expected in ["wrong", "right"] {
                if expected == "wrong" {
                    // a call on plain data: the next call expects its (smaller) count
                    let plain_args = GemmArgs { b: &plain, ..args };
                    let mut c = c0.clone();
                    let o = host::gemm_grid(&mut g, &plain_args, &mut c, auto, grid(1, 1))
                        .expect("plain call");
                    assert!(o.moduli < whole, "plain data takes fewer moduli");
                }
                let mut piped = c0.clone();
                let o = host::gemm_grid(&mut g, &args, &mut piped, auto, grid(blocks, panels))
                    .expect("pipelined");
                let what = format!("{blocks} x {panels}, beta {beta}, expected count {expected}");
                assert_eq!(o.moduli, whole, "{what}: not the whole call's count");
                assert!(
                    untiled
                        .iter()
                        .zip(&piped)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{what}: C differs from the untiled call"
                );
                for j in 0..n {
                    for i in m..ldc {
                        assert_eq!(piped[i + j * ldc].to_bits(), c0[i + j * ldc].to_bits());
                    }
                }
            }
        }
    }
}
