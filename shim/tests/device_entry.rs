//! The device-resident C entry points `ozaki_dgemm_device` and `ozaki_dsyrk_device` (issue
//! #4) computing on a real GPU: what a program whose matrices live in device memory gets back
//! (return value 0 = emulated, 1 = cuBLAS fp64), C's m x n block (or one triangle) right, and
//! nothing else of C written. Their argument checks and quick returns are unit tests in
//! `device_api.rs`; these need a GPU and skip themselves visibly ("skipped: no CUDA driver")
//! without one (CI), and run in the GPU round.

use core::ffi::{c_char, c_int, c_void};
use gpu_kernels::measure::{download, upload};
use ozaki_core::blas::{self, GemmArgs, SyrkArgs, Trans, Uplo};
use ozaki_core::testutil::Rng;
use std::ptr::null_mut;

// The exported symbols of the shim library (linked from its rlib).
use ozaki_shim as _;

// The GPU test programs' shared support (visible skip without a GPU, operands).
#[path = "../../gpu-kernels/tests/support/mod.rs"]
mod support;
use support::{centered, have_gpu};

/// These tests check the emulated device path on small operands, which `auto` would send to
/// cuBLAS: the route is forced to GPU Ozaki before the shim reads its configuration (at its
/// first call), as a user would with `OZAKI_ROUTE=gpu-ozaki`.
fn force_emulation() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: called before the first shim call of this process, from the test thread;
        // the tests of this file set nothing else and read the environment only through
        // the shim, which reads it once at its first call, after this.
        unsafe { std::env::set_var("OZAKI_ROUTE", "gpu-ozaki") };
    });
}

unsafe extern "C" {
    fn ozaki_dgemm_device(
        transa: c_char,
        transb: c_char,
        m: i64,
        n: i64,
        k: i64,
        alpha: f64,
        a: *const f64,
        lda: i64,
        b: *const f64,
        ldb: i64,
        beta: f64,
        c: *mut f64,
        ldc: i64,
        stream: *mut c_void,
    ) -> c_int;
    fn ozaki_dsyrk_device(
        uplo: c_char,
        trans: c_char,
        n: i64,
        k: i64,
        alpha: f64,
        a: *const f64,
        lda: i64,
        beta: f64,
        c: *mut f64,
        ldc: i64,
        stream: *mut c_void,
    ) -> c_int;
}

/// `got` equals the built-in reference BLAS's `want` within fp64 rounding of these sizes
/// (operands below 1 in magnitude, k <= 100), and equals C0 bit for bit wherever `outside`.
fn check(got: &[f64], want: &[f64], c0: &[f64], outside: impl Fn(usize) -> bool, what: &str) {
    for (idx, ((g, w), c)) in got.iter().zip(want).zip(c0).enumerate() {
        if outside(idx) {
            assert_eq!(
                g.to_bits(),
                c.to_bits(),
                "{what}: entry {idx} outside C written"
            );
        } else {
            let tol = 1e-13 * (1.0 + w.abs());
            assert!((g - w).abs() <= tol, "{what}: entry {idx}: {g} vs {w}");
        }
    }
}

#[test]
fn dgemm_device_computes_c_and_writes_nothing_else() {
    if !have_gpu() {
        return;
    }
    force_emulation();
    let mut rng = Rng::new(43);
    let (m, n, k) = (37, 29, 70);
    for (ta, tb) in [(b'N', b'N'), (b'T', b'N'), (b'n', b'c')] {
        let (transa, transb) = (
            if ta == b'T' { Trans::Yes } else { Trans::No },
            if tb == b'c' { Trans::Yes } else { Trans::No },
        );
        let (ra, ca) = if transa == Trans::No { (m, k) } else { (k, m) };
        let (rb, cb) = if transb == Trans::No { (k, n) } else { (n, k) };
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
            alpha: -0.75,
            a: &a,
            lda,
            b: &b,
            ldb,
            beta: 1.5,
            ldc,
        };
        let mut want = c0.clone();
        blas::gemm(&g, &mut want);
        let (ret, got) = dgemm_device(
            (ta, tb),
            (m, n, k),
            -0.75,
            (&a, lda),
            (&b, ldb),
            1.5,
            (&c0, ldc),
        );
        assert_eq!(ret, 0, "{}{}: emulated", ta as char, tb as char);
        let what = format!("dgemm {}{}", ta as char, tb as char);
        check(&got, &want, &c0, |idx| idx % ldc >= m, &what);
    }
    // NaN in A: the emulation declines, cuBLAS fp64 computes C (return 1)
    let (a, b, c0) = ([f64::NAN; 4], centered(&mut rng, 4), centered(&mut rng, 4));
    let (ret, got) = dgemm_device(
        (b'N', b'N'),
        (2, 2, 2),
        1.0,
        (&a, 2),
        (&b, 2),
        0.0,
        (&c0, 2),
    );
    assert_eq!(ret, 1, "NaN input: cuBLAS fp64");
    assert!(got.iter().all(|x| x.is_nan()), "{got:?}");
}

/// `ozaki_dgemm_device` on device copies of A, B and C (the default stream): its return
/// value and C afterwards.
fn dgemm_device(
    (ta, tb): (u8, u8),
    (m, n, k): (usize, usize, usize),
    alpha: f64,
    (a, lda): (&[f64], usize),
    (b, ldb): (&[f64], usize),
    beta: f64,
    (c0, ldc): (&[f64], usize),
) -> (c_int, Vec<f64>) {
    let (da, db, dc) = (upload(a).unwrap(), upload(b).unwrap(), upload(c0).unwrap());
    // SAFETY: device copies of the caller's matrices, whose shapes the leading dimensions
    // imply; the default stream.
    let ret = unsafe {
        ozaki_dgemm_device(
            ta as c_char,
            tb as c_char,
            m as i64,
            n as i64,
            k as i64,
            alpha,
            da.ptr() as *const f64,
            lda as i64,
            db.ptr() as *const f64,
            ldb as i64,
            beta,
            dc.ptr() as *mut f64,
            ldc as i64,
            null_mut(),
        )
    };
    let mut c = vec![0.0; c0.len()];
    download(&dc, &mut c).unwrap();
    (ret, c)
}

#[test]
fn dsyrk_device_writes_one_triangle() {
    if !have_gpu() {
        return;
    }
    force_emulation();
    let mut rng = Rng::new(47);
    let (n, k) = (45, 33);
    for (ul, tr) in [(b'U', b'N'), (b'l', b'T')] {
        let uplo = if ul == b'U' { Uplo::Upper } else { Uplo::Lower };
        let trans = if tr == b'N' { Trans::No } else { Trans::Yes };
        let (ra, ca) = if trans == Trans::No { (n, k) } else { (k, n) };
        let (lda, ldc) = (ra + 2, n + 1);
        let a = centered(&mut rng, lda * ca);
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
        let mut want = c0.clone();
        blas::syrk(&s, &mut want);
        let (da, dc) = (upload(&a).unwrap(), upload(&c0).unwrap());
        // SAFETY: device buffers of the shapes the leading dimensions imply; default stream.
        let ret = unsafe {
            ozaki_dsyrk_device(
                ul as c_char,
                tr as c_char,
                n as i64,
                k as i64,
                0.5,
                da.ptr() as *const f64,
                lda as i64,
                -1.0,
                dc.ptr() as *mut f64,
                ldc as i64,
                null_mut(),
            )
        };
        assert_eq!(ret, 0, "{}{}: emulated", ul as char, tr as char);
        let mut got = vec![0.0; ldc * n];
        download(&dc, &mut got).unwrap();
        let outside = |idx: usize| {
            let (i, j) = (idx % ldc, idx / ldc);
            i >= n
                || match uplo {
                    Uplo::Upper => i > j,
                    Uplo::Lower => i < j,
                }
        };
        let what = format!("dsyrk {}{}", ul as char, tr as char);
        check(&got, &want, &c0, outside, &what);
    }
}
