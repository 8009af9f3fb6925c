//! The input families of the adversarial accuracy suite (`ozaki accuracy`): seeded
//! generators of op(A) and op(B), and the calls (shape, transposes, dgemm or dsyrk) each
//! family is measured on.
//!
//! A family describes a structure real data has or that stresses one step of the scheme:
//! magnitudes (subnormal, near overflow, outliers, per-line scaling, grading), dynamic range
//! inside one line (exponent spread, block scaling, integral-like rows), cancellation
//! (|AB| << |A||B|), exact data (integers), zeros (signed zeros, zero lines, bands) and the
//! call's own parameters (transposes, k from 1 to 131072, odd sizes, dsyrk).
//! The seed of a problem depends only on the family and the case, so a table is the same on
//! every machine and for any subset of families.

use crate::blas::{Trans, Uplo};
use crate::testutil::{Rng, cancellation_pair};

/// The operation of one measured call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// dgemm with these transposes.
    Gemm(Trans, Trans),
    /// dsyrk of this triangle and transpose (`op(B) = op(A)^T`).
    Syrk(Uplo, Trans),
}

impl Op {
    /// Short label for tables: `dgemm NT`, `dsyrk LN`.
    pub fn label(&self) -> String {
        let t = |t: &Trans| if *t == Trans::No { 'N' } else { 'T' };
        match self {
            Op::Gemm(a, b) => format!("dgemm {}{}", t(a), t(b)),
            Op::Syrk(u, tr) => {
                let u = if *u == Uplo::Lower { 'L' } else { 'U' };
                format!("dsyrk {u}{}", t(tr))
            }
        }
    }
}

/// One call of a family: operation and `m x n x k` (dsyrk: `m = n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// The operation.
    pub op: Op,
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
}

/// Which calls a family is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cases {
    /// The suite's sizes (or `--sizes`), dgemm NN.
    Sizes,
    /// The suite's first size with all four transposes.
    Transposes,
    /// dsyrk on the suite's sizes, lower/N and upper/T.
    Syrk,
    /// Small m, n; k from 1 to 131072.
    KRange,
    /// Odd, degenerate and prime sizes.
    Odd,
}

/// `(op(A), op(B))`, column-major `m x k` and `k x n`, for a family at one shape.
type Generator = fn(&mut Rng, usize, usize, usize) -> (Vec<f64>, Vec<f64>);

/// A family of the suite.
#[derive(Clone, Copy)]
pub struct Family {
    /// Name used by `--families` and in the tables.
    pub name: &'static str,
    /// What its inputs look like.
    pub about: &'static str,
    /// Whether every product is exactly representable, so a correct method makes no error.
    pub exact: bool,
    generate: Generator,
    cases: Cases,
}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Sizes the families of [`Cases::Sizes`] use: `--quick` (CI, all entries of the first,
/// sampled entries of the second) and the full run.
pub const QUICK_SIZES: [(usize, usize, usize); 2] = [(40, 36, 300), (96, 80, 257)];
/// Sizes of the full run on the CPU.
pub const FULL_SIZES: [(usize, usize, usize); 2] = [(128, 128, 1024), (384, 320, 2048)];

impl Family {
    /// The calls measured, given the suite's sizes (`quick` shortens the k range).
    pub fn cases(&self, sizes: &[(usize, usize, usize)], quick: bool) -> Vec<Case> {
        let nn = Op::Gemm(Trans::No, Trans::No);
        let case = |op, (m, n, k): (usize, usize, usize)| Case { op, m, n, k };
        match self.cases {
            Cases::Sizes => sizes.iter().map(|&s| case(nn, s)).collect(),
            Cases::Transposes => [Trans::No, Trans::Yes]
                .iter()
                .flat_map(|&a| [Trans::No, Trans::Yes].map(move |b| Op::Gemm(a, b)))
                .map(|op| case(op, sizes[0]))
                .collect(),
            Cases::Syrk => sizes
                .iter()
                .flat_map(|&(_, n, k)| {
                    [
                        case(Op::Syrk(Uplo::Lower, Trans::No), (n, n, k)),
                        case(Op::Syrk(Uplo::Upper, Trans::Yes), (n, n, k)),
                    ]
                })
                .collect(),
            Cases::KRange => {
                let ks: &[usize] = if quick {
                    &[1, 2, 17, 1000, 16384, 131072]
                } else {
                    &[1, 2, 3, 17, 255, 1000, 4096, 16384, 65536, 131072]
                };
                ks.iter()
                    .map(|&k| case(nn, if k > 20000 { (4, 4, k) } else { (8, 8, k) }))
                    .collect()
            }
            Cases::Odd => [
                (1, 1, 1),
                (3, 5, 7),
                (17, 13, 129),
                (127, 1, 33),
                (1, 61, 999),
                (65, 63, 67),
            ]
            .iter()
            .map(|&s| case(nn, s))
            .collect(),
        }
    }

    /// `(op(A), op(B))` for one case, seeded by the family and the case alone (for dsyrk
    /// only op(A), `n x k`, is used).
    pub fn generate(&self, case: &Case) -> (Vec<f64>, Vec<f64>) {
        let mut h = 0xcbf2_9ce4_8422_2325u64; // FNV-1a of the name, then the shape
        for b in self.name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        for x in [case.m, case.n, case.k] {
            h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
        }
        let mut rng = Rng::new(h);
        (self.generate)(&mut rng, case.m, case.n, case.k)
    }
}

fn each(rng: &mut Rng, len: usize, f: impl Fn(&mut Rng) -> f64) -> Vec<f64> {
    (0..len).map(|_| f(rng)).collect()
}

fn elementwise(
    rng: &mut Rng,
    m: usize,
    n: usize,
    k: usize,
    f: impl Fn(&mut Rng) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let a = each(rng, m * k, &f);
    let b = each(rng, k * n, &f);
    (a, b)
}

fn normal(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    elementwise(rng, m, n, k, Rng::normal)
}

/// GEMMul8's `(u - 0.5) exp(φ z)`.
fn spread(phi: f64) -> impl Fn(&mut Rng) -> f64 {
    move |r: &mut Rng| (r.uniform() - 0.5) * (phi * r.normal()).exp()
}

/// Scales row `i` of the column-major `rows x cols` matrix `x` by `f(i)`.
fn scale_rows(x: &mut [f64], rows: usize, f: impl Fn(usize) -> f64) {
    for (t, v) in x.iter_mut().enumerate() {
        *v *= f(t % rows);
    }
}

/// Scales column `j` of the column-major `rows x cols` matrix `x` by `f(j)`.
fn scale_cols(x: &mut [f64], rows: usize, f: impl Fn(usize) -> f64) {
    for (t, v) in x.iter_mut().enumerate() {
        *v *= f(t / rows);
    }
}

/// Normal entries, each multiplied by `factor` with probability 1/1000 (at least one per
/// operand).
fn outliers(rng: &mut Rng, m: usize, n: usize, k: usize, factor: f64) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = normal(rng, m, n, k);
    for x in [&mut a, &mut b] {
        let len = x.len();
        for v in x.iter_mut() {
            if rng.uniform() < 1e-3 {
                *v *= factor;
            }
        }
        x[rng.int_in(0, len as i64 - 1) as usize] *= factor;
    }
    (a, b)
}

/// Normal entries scaled by `2^(lo + (hi - lo) t)`, `t` from `f` in [0, 1], per row of A and
/// per column of B.
fn line_scaled(
    rng: &mut Rng,
    (m, n, k): (usize, usize, usize),
    (lo, hi): (f64, f64),
    t: impl Fn(&mut Rng, usize, usize) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = normal(rng, m, n, k);
    let ra: Vec<f64> = (0..m)
        .map(|i| (lo + (hi - lo) * t(rng, i, m)).exp2())
        .collect();
    let cb: Vec<f64> = (0..n)
        .map(|j| (lo + (hi - lo) * t(rng, j, n)).exp2())
        .collect();
    scale_rows(&mut a, m, |i| ra[i]);
    scale_cols(&mut b, k, |j| cb[j]);
    (a, b)
}

fn rows_cols_scaled(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    line_scaled(rng, (m, n, k), (-40.0, 40.0), |r, _, _| r.uniform())
}

fn graded(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // Rows of A and columns of B graded geometrically over 2^60, and the inner index over
    // 2^30 (the large terms of every dot product come first).
    let (mut a, mut b) = line_scaled(rng, (m, n, k), (-60.0, 0.0), |_, i, len| {
        1.0 - i as f64 / len.max(2) as f64
    });
    let g = |l: usize| (-30.0 * l as f64 / k.max(2) as f64).exp2();
    scale_cols(&mut a, m, g);
    scale_rows(&mut b, k, g);
    (a, b)
}

fn block_scaled(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // 32 x 32 blocks, each with its own power-of-two scale in 2^[-20, 20] (block-float data).
    let (mut a, mut b) = normal(rng, m, n, k);
    for (x, rows, cols) in [(&mut a, m, k), (&mut b, k, n)] {
        let (br, bc) = (rows.div_ceil(32), cols.div_ceil(32));
        let s: Vec<f64> = (0..br * bc)
            .map(|_| (rng.int_in(-20, 20) as f64).exp2())
            .collect();
        for j in 0..cols {
            for i in 0..rows {
                x[i + j * rows] *= s[i / 32 + (j / 32) * br];
            }
        }
    }
    (a, b)
}

fn integrals(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // Mixed signs, magnitudes exp(-25 t) (1 down to 1e-11) within every line, as in the
    // electron-repulsion integrals quantum-chemistry codes contract.
    elementwise(rng, m, n, k, |r| {
        let sign = if r.uniform() < 0.5 { -1.0 } else { 1.0 };
        sign * (-25.0 * r.uniform()).exp()
    })
}

fn low_rank(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let rank = 3;
    let product = |rng: &mut Rng, rows: usize, cols: usize| {
        let u = each(rng, rows * rank, Rng::normal);
        let v = each(rng, rank * cols, Rng::normal);
        let mut x = vec![0.0; rows * cols];
        for j in 0..cols {
            for i in 0..rows {
                x[i + j * rows] = (0..rank).map(|t| u[i + t * rows] * v[t + j * rank]).sum();
            }
        }
        x
    };
    let a = product(rng, m, k);
    let b = product(rng, k, n);
    (a, b)
}

fn hilbert(_: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let a = (0..m * k)
        .map(|t| 1.0 / ((t % m + t / m) as f64 + 1.0))
        .collect();
    let b = (0..k * n)
        .map(|t| 1.0 / ((t % k + t / k) as f64 + 1.0))
        .collect();
    (a, b)
}

fn banded(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // Bandwidth 4 around the diagonal of each operand (rectangular: the scaled diagonal).
    let band = |rng: &mut Rng, rows: usize, cols: usize| {
        (0..rows * cols)
            .map(|t| {
                let (i, j) = ((t % rows) * cols, (t / rows) * rows);
                if i.abs_diff(j) <= 4 * rows.max(cols) {
                    rng.normal()
                } else {
                    0.0
                }
            })
            .collect::<Vec<f64>>()
    };
    let a = band(rng, m, k);
    let b = band(rng, k, n);
    (a, b)
}

fn signed_zeros(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // 30% of the entries +0 or -0, and whole zero rows of A / columns of B of either sign.
    let (mut a, mut b) = normal(rng, m, n, k);
    for x in [&mut a, &mut b] {
        for v in x.iter_mut() {
            if rng.uniform() < 0.3 {
                *v = if rng.uniform() < 0.5 { -0.0 } else { 0.0 };
            }
        }
    }
    let neg = |i: usize| if i.is_multiple_of(2) { -0.0 } else { 0.0 };
    for i in (0..m).step_by(7) {
        (0..k).for_each(|l| a[i + l * m] = neg(i));
    }
    for j in (0..n).step_by(5) {
        (0..k).for_each(|l| b[l + j * k] = neg(j + 1));
    }
    (a, b)
}

fn zero_lines(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // 10% of the rows of A and columns of B zero, and one zero column of A (inner index).
    let (mut a, mut b) = normal(rng, m, n, k);
    scale_rows(&mut a, m, |i| if i % 10 == 3 { 0.0 } else { 1.0 });
    scale_cols(&mut b, k, |j| if j % 10 == 7 { 0.0 } else { 1.0 });
    scale_cols(&mut a, m, |l| if l == k / 2 { 0.0 } else { 1.0 });
    (a, b)
}

fn pairwise_cancellation(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // Terms cancel in pairs: a_{i,2t+1} = a_{i,2t}, b_{2t+1,j} = -b_{2t,j} (1 + 1e-12 d), so
    // C is about 1e-12 |A||B| (C = B0-style corrections, differences of near-equal products).
    let (mut a, mut b) = normal(rng, m, n, k);
    for l in (0..k.saturating_sub(1)).step_by(2) {
        for i in 0..m {
            a[i + (l + 1) * m] = a[i + l * m];
        }
        for j in 0..n {
            b[l + 1 + j * k] = -b[l + j * k] * (1.0 + 1e-12 * rng.normal());
        }
    }
    (a, b)
}

fn rank1_cancellation(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    cancellation_pair(m, n, k, rng)
}

fn subnormal(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // A in the subnormal range (about 2^-1050), B around 2^30: normal products of inputs
    // that have lost bits; and a few entries of A down to the last subnormals.
    let (mut a, mut b) = normal(rng, m, n, k);
    a.iter_mut().for_each(|v| *v *= (-1050.0f64).exp2());
    b.iter_mut().for_each(|v| *v *= 30.0f64.exp2());
    for v in a.iter_mut().step_by(13) {
        *v *= (-20.0f64).exp2();
    }
    (a, b)
}

fn subnormal_products(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // Normal inputs near 2^-530: every product and C itself in the subnormal range, where
    // fp64 keeps an absolute, not a relative, precision of 2^-1074.
    elementwise(rng, m, n, k, |r| r.normal() * (-530.0f64).exp2())
}

fn tiny_and_large(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // Entries near 2^-1003 and near 2^6 in the same operand (alternate rows of A), normal B:
    // scaling such a call must not overflow or underflow anywhere but in its result.
    let (mut a, b) = normal(rng, m, n, k);
    scale_rows(&mut a, m, |i| {
        if i % 2 == 0 {
            (-1003.0f64).exp2()
        } else {
            64.0
        }
    });
    (a, b)
}

fn near_overflow(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // Products near 2^990: inside fp64, close to the top of its range.
    elementwise(rng, m, n, k, |r| r.normal() * 495.0f64.exp2())
}

fn integers(rng: &mut Rng, m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    // |entries| <= 2^15, k <= 2^20: every partial sum is an integer below 2^50, exact in fp64.
    elementwise(rng, m, n, k, |r| r.int_in(-(1 << 15), 1 << 15) as f64)
}

macro_rules! fam {
    ($name:expr, $about:expr, $gen:expr, $cases:ident) => {
        Family {
            name: $name,
            about: $about,
            exact: false,
            generate: $gen,
            cases: Cases::$cases,
        }
    };
}

/// Every family of the suite, in table order.
pub fn all() -> Vec<Family> {
    vec![
        fam!("normal", "standard normal entries", normal, Sizes),
        fam!(
            "uniform",
            "uniform in [0, 1)",
            |r, m, n, k| elementwise(r, m, n, k, Rng::uniform),
            Sizes
        ),
        Family {
            exact: true,
            ..fam!(
                "integers",
                "integers in [-2^15, 2^15] (every sum exact in fp64)",
                integers,
                Sizes
            )
        },
        fam!(
            "phi=0.5",
            "(u - 0.5) exp(0.5 z)",
            |r, m, n, k| elementwise(r, m, n, k, spread(0.5)),
            Sizes
        ),
        fam!(
            "phi=1",
            "(u - 0.5) exp(z)",
            |r, m, n, k| elementwise(r, m, n, k, spread(1.0)),
            Sizes
        ),
        fam!(
            "phi=2",
            "(u - 0.5) exp(2 z)",
            |r, m, n, k| elementwise(r, m, n, k, spread(2.0)),
            Sizes
        ),
        fam!(
            "phi=4",
            "(u - 0.5) exp(4 z)",
            |r, m, n, k| elementwise(r, m, n, k, spread(4.0)),
            Sizes
        ),
        fam!(
            "rows-cols-2^40",
            "normal; rows of A, columns of B scaled by 2^U(-40,40)",
            rows_cols_scaled,
            Sizes
        ),
        fam!(
            "outliers-1e8",
            "normal; 0.1% of entries x 1e8",
            |r, m, n, k| outliers(r, m, n, k, 1e8),
            Sizes
        ),
        fam!(
            "outliers-1e12",
            "normal; 0.1% of entries x 1e12",
            |r, m, n, k| outliers(r, m, n, k, 1e12),
            Sizes
        ),
        fam!(
            "cancel-rank1",
            "A = x y^T + 1e-6 noise, B's columns orthogonal to y: |AB| << |A||B|",
            rank1_cancellation,
            Sizes
        ),
        fam!(
            "cancel-pairs",
            "terms cancel in pairs up to 1e-12: C ~ 1e-12 |A||B|",
            pairwise_cancellation,
            Sizes
        ),
        fam!(
            "subnormal",
            "A ~ 2^-1050 (subnormal, some down to 2^-1070), B ~ 2^30",
            subnormal,
            Sizes
        ),
        fam!(
            "subnormal-products",
            "entries ~ 2^-530: products and C in the subnormal range",
            subnormal_products,
            Sizes
        ),
        fam!(
            "tiny-and-large",
            "rows of A near 2^-1003 and near 2^6, normal B",
            tiny_and_large,
            Sizes
        ),
        fam!(
            "near-overflow",
            "entries ~ 2^495: products ~ 2^990",
            near_overflow,
            Sizes
        ),
        fam!(
            "signed-zeros",
            "30% of entries +-0, zero rows of A / columns of B of either sign",
            signed_zeros,
            Sizes
        ),
        fam!(
            "zero-lines",
            "10% zero rows of A and columns of B, one zero inner index",
            zero_lines,
            Sizes
        ),
        fam!(
            "graded",
            "rows/columns graded over 2^60, inner index over 2^30",
            graded,
            Sizes
        ),
        fam!(
            "block-scaled",
            "32 x 32 blocks scaled by 2^[-20, 20]",
            block_scaled,
            Sizes
        ),
        fam!("low-rank", "rank-3 operands", low_rank, Sizes),
        fam!("hilbert", "1 / (i + l + 1)", hilbert, Sizes),
        fam!(
            "banded",
            "bandwidth-4 operands (most of C is exactly zero)",
            banded,
            Sizes
        ),
        fam!(
            "integrals",
            "mixed signs, |x| = exp(-25 t): 1 to 1e-11 in every line",
            integrals,
            Sizes
        ),
        fam!(
            "transposes",
            "normal, all four transposes",
            normal,
            Transposes
        ),
        fam!("k-range", "normal, k = 1 ... 131072", normal, KRange),
        fam!("odd-sizes", "normal, sizes 1, primes, vectors", normal, Odd),
        fam!(
            "dsyrk-normal",
            "dsyrk of normal A (L/N and U/T)",
            normal,
            Syrk
        ),
        fam!(
            "dsyrk-phi=2",
            "dsyrk of (u - 0.5) exp(2 z)",
            |r, m, n, k| elementwise(r, m, n, k, spread(2.0)),
            Syrk
        ),
        fam!(
            "dsyrk-rows-2^40",
            "dsyrk of A with rows scaled by 2^U(-40,40)",
            rows_cols_scaled,
            Syrk
        ),
    ]
}

/// The families named in `names` (comma separated; `all` or empty: every family).
///
/// # Errors
/// An unknown name, with the list of known ones.
pub fn select(names: &str) -> Result<Vec<Family>, String> {
    let all = all();
    if names.trim().is_empty() || names.trim() == "all" {
        return Ok(all);
    }
    names
        .split(',')
        .map(|n| {
            let n = n.trim();
            all.iter().find(|f| f.name == n).copied().ok_or_else(|| {
                let known: Vec<&str> = all.iter().map(|f| f.name).collect();
                format!("unknown family {n:?}; known: {}", known.join(", "))
            })
        })
        .collect()
}
