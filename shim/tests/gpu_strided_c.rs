//! A strided C on the GPU routes, computed for real: `dgemm_` (both transposes), row-major
//! `cblas_dgemm` and `dsyrk_` update a C whose leading dimension is far above its rows, with
//! the gaps between its columns unmapped (`PROT_NONE`: a read or write there kills the
//! process), under `OZAKI_ROUTE=gpu-native` and `gpu-ozaki`. C's block must be the exact
//! product (small integers: every route computes them exactly), nothing else of C changes,
//! the trace must say the call ran on the GPU route (no fallback), and a C whose columns
//! would overlap (`ldc < m`) is rejected as the reference rejects it, C untouched.
//!
//! Each route runs in a child process of this test executable (the shim reads
//! `OZAKI_ROUTE` once per process). Without a GPU the test skips visibly; the GPU round
//! (`scripts/gpu-check`, stage `tests`) runs it.

use core::ffi::{c_char, c_int};
use std::process::Command;

// The exported symbols of the shim library (linked from its rlib).
use ozaki_shim as _;

#[path = "../../gpu-kernels/tests/support/mod.rs"]
mod support;
use support::have_gpu;

unsafe extern "C" {
    fn dgemm_(
        ta: *const c_char,
        tb: *const c_char,
        m: *const c_int,
        n: *const c_int,
        k: *const c_int,
        alpha: *const f64,
        a: *const f64,
        lda: *const c_int,
        b: *const f64,
        ldb: *const c_int,
        beta: *const f64,
        c: *mut f64,
        ldc: *const c_int,
        lta: usize,
        ltb: usize,
    );
    fn dsyrk_(
        uplo: *const c_char,
        trans: *const c_char,
        n: *const c_int,
        k: *const c_int,
        alpha: *const f64,
        a: *const f64,
        lda: *const c_int,
        beta: *const f64,
        c: *mut f64,
        ldc: *const c_int,
        lu: usize,
        lt: usize,
    );
    fn cblas_dgemm(
        order: c_int,
        ta: c_int,
        tb: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: f64,
        a: *const f64,
        lda: c_int,
        b: *const f64,
        ldb: c_int,
        beta: f64,
        c: *mut f64,
        ldc: c_int,
    );
}

/// The child's environment variable: the route it runs under.
const CHILD: &str = "OZAKI_GPU_STRIDED_CHILD";

/// C's rows, columns, inner dimension; its leading dimension spans 4 pages, of which only
/// the first (512 doubles, holding the block's rows) is mapped.
const M: usize = 256;
const N: usize = 300;
const K: usize = 64;
const LDC: usize = 2048;

/// A C of `cols` columns `LDC` apart, each mapped only in its first page.
struct GuardedC {
    base: *mut f64,
    bytes: usize,
}

impl GuardedC {
    fn new(cols: usize) -> GuardedC {
        let bytes = cols * LDC * 8;
        // SAFETY: an anonymous private mapping, owned by the returned value.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap");
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        assert!(page >= M * 8, "a page holds a column's block");
        for j in 0..cols {
            // SAFETY: the range lies inside the mapping made above.
            let rc = unsafe {
                libc::mprotect(
                    base.cast::<u8>().add(j * LDC * 8 + page).cast(),
                    LDC * 8 - page,
                    libc::PROT_NONE,
                )
            };
            assert_eq!(rc, 0, "mprotect");
        }
        GuardedC {
            base: base.cast(),
            bytes,
        }
    }

    /// Entry (i, j) of the mapped first page of column j.
    fn at(&self, i: usize, j: usize) -> *mut f64 {
        assert!(i < 512);
        // SAFETY: inside the mapping, in the mapped page of column j.
        unsafe { self.base.add(i + j * LDC) }
    }

    /// The mapped first 512 words of every column.
    fn snapshot(&self, cols: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(cols * 512);
        for j in 0..cols {
            for i in 0..512 {
                // SAFETY: a mapped word of this C.
                out.push(unsafe { self.at(i, j).read() }.to_bits());
            }
        }
        out
    }
}

impl Drop for GuardedC {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}

/// Small integers from a fixed sequence: products and sums stay exact in fp64.
fn ints(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 7) as f64 - 3.0
        })
        .collect()
}

/// Checks C after a call: `want(i, j)` inside the block rows x cols (where `inside` says so),
/// the old bits everywhere else.
fn check(
    what: &str,
    c: &GuardedC,
    before: &[u64],
    cols: usize,
    inside: impl Fn(usize, usize) -> bool,
    want: impl Fn(usize, usize) -> f64,
) {
    let after = c.snapshot(cols);
    for j in 0..cols {
        for i in 0..512 {
            let idx = j * 512 + i;
            if inside(i, j) {
                let w = want(i, j);
                assert_eq!(f64::from_bits(after[idx]), w, "{what}: C({i},{j})");
            } else {
                assert_eq!(
                    after[idx], before[idx],
                    "{what}: C({i},{j}) outside the block changed"
                );
            }
        }
    }
}

/// The child: every call of the file on the route it was started with.
fn child() {
    // A is read as m x k, k x m and (row-major) n x k.
    let a = ints(N * K, 1);
    let b = ints(K * N, 2);
    let c0 = ints(M * N, 3);
    let fill = |c: &GuardedC, cols: usize| {
        for j in 0..cols {
            for i in 0..512 {
                let v = if i < M {
                    c0[(i + j * M) % c0.len()]
                } else {
                    -7.0 - i as f64
                };
                // SAFETY: a mapped word of this C.
                unsafe { c.at(i, j).write(v) };
            }
        }
        c.snapshot(cols)
    };
    let (alpha, beta) = (2.0f64, -1.0f64);
    let (m, n, k, ldc) = (M as c_int, N as c_int, K as c_int, LDC as c_int);
    // dgemm_ N N: A m x k (lda = m), B k x n (ldb = k).
    let c = GuardedC::new(N);
    let before = fill(&c, N);
    let (lda, ldb) = (M as c_int, K as c_int);
    // SAFETY: reference dgemm arguments; C's block lies in the mapped pages.
    unsafe {
        dgemm_(
            c"N".as_ptr(),
            c"N".as_ptr(),
            &m,
            &n,
            &k,
            &alpha,
            a.as_ptr(),
            &lda,
            b.as_ptr(),
            &ldb,
            &beta,
            c.base,
            &ldc,
            1,
            1,
        )
    };
    let old = |i: usize, j: usize| f64::from_bits(before[j * 512 + i]);
    let nn = |i: usize, j: usize| (0..K).map(|l| a[i + l * M] * b[l + j * K]).sum::<f64>();
    check(
        "dgemm_ N N",
        &c,
        &before,
        N,
        |i, _| i < M,
        |i, j| alpha * nn(i, j) + beta * old(i, j),
    );
    // dgemm_ T N: A stored k x m (lda = k).
    let before = fill(&c, N);
    let lda_t = K as c_int;
    // SAFETY: as above, A read as k x m.
    unsafe {
        dgemm_(
            c"T".as_ptr(),
            c"N".as_ptr(),
            &m,
            &n,
            &k,
            &alpha,
            a.as_ptr(),
            &lda_t,
            b.as_ptr(),
            &ldb,
            &beta,
            c.base,
            &ldc,
            1,
            1,
        )
    };
    let old = |i: usize, j: usize| f64::from_bits(before[j * 512 + i]);
    let tn = |i: usize, j: usize| (0..K).map(|l| a[l + i * K] * b[l + j * K]).sum::<f64>();
    check(
        "dgemm_ T N",
        &c,
        &before,
        N,
        |i, _| i < M,
        |i, j| alpha * tn(i, j) + beta * old(i, j),
    );
    // cblas_dgemm row-major: C is N rows of M entries, LDC apart (the column-major M x N).
    let before = fill(&c, N);
    // Row-major A: n x k (lda = k), B: k x m (ldb = m); C(r, s) at r * ldc + s.
    // SAFETY: reference CBLAS arguments; the row-major C is the column-major block above.
    unsafe {
        cblas_dgemm(
            101,
            111,
            111,
            N as c_int,
            M as c_int,
            K as c_int,
            alpha,
            a.as_ptr(),
            K as c_int,
            b.as_ptr(),
            M as c_int,
            beta,
            c.base,
            ldc,
        )
    };
    let old = |i: usize, j: usize| f64::from_bits(before[j * 512 + i]);
    let row = |s: usize, r: usize| (0..K).map(|l| a[r * K + l] * b[l * M + s]).sum::<f64>();
    check(
        "cblas_dgemm row-major",
        &c,
        &before,
        N,
        |i, _| i < M,
        |i, j| alpha * row(i, j) + beta * old(i, j),
    );
    // dsyrk_ U N on an M x M C: only the upper triangle changes.
    let cs = GuardedC::new(M);
    let before = fill(&cs, M);
    let lda_s = M as c_int;
    // SAFETY: reference dsyrk arguments; C's block lies in the mapped pages.
    unsafe {
        dsyrk_(
            c"U".as_ptr(),
            c"N".as_ptr(),
            &m,
            &k,
            &alpha,
            a.as_ptr(),
            &lda_s,
            &beta,
            cs.base,
            &ldc,
            1,
            1,
        )
    };
    let old = |i: usize, j: usize| f64::from_bits(before[j * 512 + i]);
    let aat = |i: usize, j: usize| (0..K).map(|l| a[i + l * M] * a[j + l * M]).sum::<f64>();
    check(
        "dsyrk_ U N",
        &cs,
        &before,
        M,
        |i, j| i <= j && i < M,
        |i, j| alpha * aat(i, j) + beta * old(i, j),
    );
    // Overlapping columns (ldc < m): rejected, C untouched.
    let before = fill(&c, N);
    let small_ldc = (M - 1) as c_int;
    // SAFETY: an illegal ldc, which the checks reject before C is read.
    unsafe {
        dgemm_(
            c"N".as_ptr(),
            c"N".as_ptr(),
            &m,
            &n,
            &k,
            &alpha,
            a.as_ptr(),
            &lda,
            b.as_ptr(),
            &ldb,
            &beta,
            c.base,
            &small_ldc,
            1,
            1,
        )
    };
    check(
        "dgemm_ with ldc < m",
        &c,
        &before,
        N,
        |_, _| false,
        |_, _| 0.0,
    );
    println!("child done");
}

#[test]
fn a_strided_c_on_the_gpu_routes_is_touched_only_in_its_block() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    if !have_gpu!() {
        return;
    }
    // The system's temporary folder: the GPU round runs this executable on another machine.
    let dir = std::env::temp_dir().join(format!("ozaki-gpu-strided-c-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for route in ["gpu-native", "gpu-ozaki"] {
        let trace = dir.join(format!("{route}.jsonl"));
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_strided_c_on_the_gpu_routes_is_touched_only_in_its_block",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, route)
            .env("OZAKI_ROUTE", route)
            .env("OZAKI_TRACE", &trace)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("child done"),
            "OZAKI_ROUTE={route}: {:?}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let t = ozaki_core::trace::Trace::read(std::io::BufReader::new(
            std::fs::File::open(&trace).unwrap(),
        ))
        .unwrap();
        let routes: Vec<(String, Option<String>)> = t
            .calls
            .iter()
            .map(|c| (c.route.clone(), c.fallback.clone()))
            .collect();
        let want: Vec<(String, Option<String>)> = [route, route, route, route, "xerbla"]
            .iter()
            .map(|r| (r.to_string(), None))
            .collect();
        assert_eq!(
            routes, want,
            "OZAKI_ROUTE={route}: each call ran on the GPU route"
        );
    }
}
