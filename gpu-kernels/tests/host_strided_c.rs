//! Host-resident calls on a C with wide gaps (its leading dimension far above its rows, the
//! rows between its columns holding NaN guards, as another thread's data would): the host
//! path copies only the call's rows of each column into the pinned ring and back out, so C's
//! block is the reference product and every guard keeps its bits. Covers the pipelined gemm
//! (several column blocks and row panels, C's upload ring and download ring smaller than
//! C), beta != 0 (written from staging after success) and beta = 0 (early writes), dsyrk's
//! triangle, a split over device slots (tiles whose rows start inside C's columns), both
//! upload orders of panels and blocks (the same C, bit for bit), and calls that fail on
//! their data, which leave C untouched where they read it. Skips itself visibly with
//! "skipped: ..." without a GPU; runs in the GPU round (`scripts/gpu-check`).

mod support;

use gpu_kernels::host::{self, Engine, HostC};
use gpu_kernels::ozaki::Options;
use gpu_kernels::{GpuError, multi};
use ozaki_core::blas::{GemmArgs, SyrkArgs, Trans, Uplo, span};
use ozaki_core::devices::{SplitParams, split_c};
use support::{centered_seeded as vec, have_gpu};

/// Both routes; gpu-ozaki with a fixed moduli count.
fn engines() -> [(&'static str, Engine); 2] {
    [
        ("gpu-native", Engine::Native),
        (
            "gpu-ozaki",
            Engine::Ozaki(Options {
                moduli: Some(14),
                ..Options::default()
            }),
        ),
    ]
}

/// The tuning that shrinks the upload ring and C's download ring to 1 MiB slots (2 of them
/// for C), so C's column blocks travel in several chunks and pieces.
const SMALL_RINGS: &str = "ring=1,cslots=2,cslot=1";

/// [`SMALL_RINGS`] while the guard lives; serialises the tests of this file (the tuning is
/// process-wide).
fn small_rings() -> support::Tuned {
    support::tuned(SMALL_RINGS)
}

/// A C of `rows x cols` stored `ld` apart: the block from `vec`, NaN in the gaps.
fn gapped(rows: usize, cols: usize, ld: usize, seed: u64) -> Vec<f64> {
    let v = vec(seed, span(rows, cols, ld));
    v.iter()
        .enumerate()
        .map(|(i, x)| if i % ld < rows { *x } else { f64::NAN })
        .collect()
}

/// C's block is `want`'s within `tol` where `inside(i, j)`; every other element (the gaps,
/// and outside a triangle) keeps its bits from `c0`.
fn check(
    what: &str,
    (c, c0, want): (&[f64], &[f64], &[f64]),
    (rows, ld): (usize, usize),
    tol: f64,
    inside: impl Fn(usize, usize) -> bool,
) {
    for (at, (x, y)) in c.iter().zip(want).enumerate() {
        let (i, j) = (at % ld, at / ld);
        if i < rows && inside(i, j) {
            assert!((x - y).abs() <= tol, "{what}: C({i},{j}) = {x}, want {y}");
        } else {
            assert_eq!(
                x.to_bits(),
                c0[at].to_bits(),
                "{what}: C({i},{j}) outside the call's elements changed"
            );
        }
    }
}

/// `args` on a copy of `c0` (leading dimension `args.ldc`) cut as the pipeline chooses
/// (through [`HostC`], as the shim calls it) and into 3 column blocks x 2 row panels: each
/// cut's C and whether the call succeeded.
type Run = (Vec<f64>, Result<(), GpuError>);
fn both_cuts(args: &GemmArgs, c0: &[f64], engine: Engine) -> [Run; 2] {
    let mut auto = c0.to_vec();
    let view = HostC::of_slice(&mut auto, args.m, args.n, args.ldc).expect("C");
    let done = host::gemm_c(args, view, engine).map(drop);
    let auto = (auto, done);
    let mut cut = c0.to_vec();
    let mut g = gpu_kernels::gpu().expect("gpu");
    let grid = host::Grid {
        blocks: 3,
        panels: 2,
    };
    let done = host::gemm_grid(&mut g, args, &mut cut, engine, grid).map(drop);
    [auto, (cut, done)]
}

/// A pipelined host-resident gemm (automatic cut and 3 blocks x 2 panels) on a C with gaps
/// twice its rows wide, all transposes, beta != 0 and beta = 0: the reference product in
/// C's block, the gaps untouched.
#[test]
fn a_gemm_on_a_c_with_gaps_writes_its_block_only() {
    if !have_gpu!() {
        return;
    }
    let _rings = small_rings();
    let (m, n, k) = (300usize, 700usize, 200usize);
    let ldc = 2 * m + 37;
    for (t, beta) in [
        ((Trans::No, Trans::No), 1.5),
        ((Trans::Yes, Trans::No), 0.0),
        ((Trans::No, Trans::Yes), -1.0),
        ((Trans::Yes, Trans::Yes), 0.0),
    ] {
        let (ra, ca) = if t.0 == Trans::No { (m, k) } else { (k, m) };
        let (rb, cb) = if t.1 == Trans::No { (k, n) } else { (n, k) };
        let (a, b) = (vec(1, ra * ca), vec(2, rb * cb));
        let c0 = gapped(m, n, ldc, 3);
        let args = GemmArgs {
            transa: t.0,
            transb: t.1,
            m,
            n,
            k,
            alpha: 0.75,
            a: &a,
            lda: ra,
            b: &b,
            ldb: rb,
            beta,
            ldc,
        };
        let mut want = c0.clone();
        ozaki_core::blas::gemm(&args, &mut want);
        let tol = 1e-12 * (0.75 * k as f64 + beta.abs());
        for (name, engine) in engines() {
            for (cut, (c, done)) in ["automatic", "3 x 2"]
                .iter()
                .zip(both_cuts(&args, &c0, engine))
            {
                let what = format!("{name} {t:?} beta {beta} {cut}");
                done.unwrap_or_else(|e| panic!("{what}: {e}"));
                check(&what, (&c, &c0, &want), (m, ldc), tol, |_, _| true);
            }
        }
    }
}

/// The upload order of panels and blocks (tuning `order`) changes when each unit starts,
/// not what it computes: a pipelined gemm cut into 3 blocks x 2 panels and 2 blocks x 5
/// panels (where the orders differ) writes the same C, bit for bit, under both orders, and
/// leaves the gaps alone.
#[test]
fn both_upload_orders_write_the_same_c() {
    if !have_gpu!() {
        return;
    }
    let (m, n, k) = (300usize, 700usize, 200usize);
    let ldc = 2 * m + 37;
    let (a, b) = (vec(11, m * k), vec(12, k * n));
    let c0 = gapped(m, n, ldc, 13);
    for beta in [1.5, 0.0] {
        let args = GemmArgs {
            transa: Trans::No,
            transb: Trans::No,
            m,
            n,
            k,
            alpha: 0.75,
            a: &a,
            lda: m,
            b: &b,
            ldb: k,
            beta,
            ldc,
        };
        let mut want = c0.clone();
        ozaki_core::blas::gemm(&args, &mut want);
        let tol = 1e-12 * (0.75 * k as f64 + beta);
        for (blocks, panels) in [(3, 2), (2, 5)] {
            for (name, engine) in engines() {
                let run = |order: &str| {
                    let _t = support::tuned(&format!("{SMALL_RINGS},order={order}"));
                    let mut c = c0.clone();
                    let mut g = gpu_kernels::gpu().expect("gpu");
                    let grid = host::Grid { blocks, panels };
                    host::gemm_grid(&mut g, &args, &mut c, engine, grid)
                        .unwrap_or_else(|e| panic!("{name} {order}: {e}"));
                    c
                };
                let (alternate, balanced) = (run("alternate"), run("balanced"));
                let what = format!("{name} beta {beta} {blocks} x {panels}");
                check(&what, (&balanced, &c0, &want), (m, ldc), tol, |_, _| true);
                for (at, (x, y)) in balanced.iter().zip(&alternate).enumerate() {
                    assert_eq!(x.to_bits(), y.to_bits(), "{what}: element {at} differs");
                }
            }
        }
    }
}

/// A host-resident dsyrk on a C with gaps: its triangle is the reference's, the other
/// triangle and the gaps keep their bits, for both triangles, beta != 0 and beta = 0.
#[test]
fn a_syrk_on_a_c_with_gaps_writes_its_triangle_only() {
    if !have_gpu!() {
        return;
    }
    let _rings = small_rings();
    let (n, k) = (260usize, 90usize);
    let ldc = 3 * n + 1;
    for (uplo, trans, beta) in [
        (Uplo::Upper, Trans::No, 2.0),
        (Uplo::Lower, Trans::Yes, 0.0),
    ] {
        let lda = if trans == Trans::No { n } else { k };
        let a = vec(4, lda * if trans == Trans::No { k } else { n });
        let c0 = gapped(n, n, ldc, 5);
        let args = SyrkArgs {
            uplo,
            trans,
            n,
            k,
            alpha: -0.5,
            a: &a,
            lda,
            beta,
            ldc,
        };
        let mut want = c0.clone();
        ozaki_core::blas::syrk(&args, &mut want);
        let tol = 1e-12 * (0.5 * k as f64 + beta.abs());
        for (name, engine) in engines() {
            let mut c = c0.clone();
            let view = HostC::of_slice(&mut c, n, n, ldc).expect("C");
            host::syrk_c(&args, view, engine).expect("syrk");
            let what = format!("{name} {uplo:?} {trans:?} beta {beta}");
            check(&what, (&c, &c0, &want), (n, ldc), tol, |i, j| match uplo {
                Uplo::Upper => i <= j,
                Uplo::Lower => i >= j,
            });
        }
    }
}

/// A gemm split over four slots of one GPU (a 2 x 2 grid of tiles, so two tiles start
/// inside C's columns) on a C with gaps: each tile reads and writes only its own rows of
/// its own columns, beta != 0 (commit after every tile succeeded) and beta = 0 (early).
#[test]
fn a_split_gemm_on_a_c_with_gaps_writes_its_block_only() {
    if !have_gpu!() {
        return;
    }
    let _rings = small_rings();
    let (m, n, k) = (520usize, 600usize, 150usize);
    let ldc = 2 * m + 3;
    let params = SplitParams {
        min_rows: 128,
        min_cols: 128,
        align: 128,
    };
    let plan = split_c(m as u64, n as u64, &[0, 0, 0, 0], &params);
    assert!(plan.is_split());
    let (a, b) = (vec(6, m * k), vec(7, k * n));
    for beta in [0.5, 0.0] {
        let c0 = gapped(m, n, ldc, 8);
        let args = GemmArgs {
            alpha: 1.25,
            beta,
            ldc,
            ..GemmArgs::product(m, n, k, &a, &b)
        };
        let mut want = c0.clone();
        ozaki_core::blas::gemm(&args, &mut want);
        let tol = 1e-12 * (1.25 * k as f64 + beta.abs());
        for (name, engine) in engines() {
            let mut c = c0.clone();
            let view = HostC::of_slice(&mut c, m, n, ldc).expect("C");
            multi::gemm_c(&args, view, engine, &plan).expect("split");
            let what = format!(
                "{name} split {}x{} beta {beta}",
                plan.grid_rows, plan.grid_cols
            );
            check(&what, (&c, &c0, &want), (m, ldc), tol, |_, _| true);
        }
    }
}

/// gpu-ozaki refuses a NaN in A: a C with gaps is left exactly as it was where the call
/// reads it (beta != 0) and with beta = 0 while the writes wait for the whole call's rule
/// (the default), whole and pipelined; with beta = 0 and blocks written as they arrive
/// (`ozaki_write=downloaded`) the call fails too, and the gaps keep their bits.
#[test]
fn a_refused_call_leaves_a_c_with_gaps_untouched() {
    if !have_gpu!() {
        return;
    }
    let (m, n, k) = (300usize, 700usize, 200usize);
    let ldc = 2 * m + 37;
    let mut a = vec(9, m * k);
    a[m * k / 2] = f64::NAN;
    let b = vec(10, k * n);
    let c0 = gapped(m, n, ldc, 11);
    let engine = engines()[1].1;
    let rings = SMALL_RINGS;
    let downloaded = format!("{rings},ozaki_write=downloaded");
    for (beta, tuning, untouched) in [
        (1.0, rings, true),
        (0.0, rings, true),
        (0.0, downloaded.as_str(), false),
    ] {
        let _rings = support::tuned(tuning);
        let args = GemmArgs {
            beta,
            ldc,
            ..GemmArgs::product(m, n, k, &a, &b)
        };
        for (cut, (c, done)) in ["automatic", "3 x 2"]
            .iter()
            .zip(both_cuts(&args, &c0, engine))
        {
            let what = format!("beta {beta} {cut} ({tuning})");
            assert!(done.is_err(), "{what}: a NaN in A was accepted");
            for (at, (x, y)) in c.iter().zip(&c0).enumerate() {
                if untouched || at % ldc >= m {
                    assert_eq!(x.to_bits(), y.to_bits(), "{what}: C[{at}] changed");
                }
            }
        }
    }
}
