//! Deterministic random inputs for tests, the accuracy suite and benchmarks (no external
//! RNG crate: results must be reproducible from a seed on every machine).
//!
//! The matrix families of the accuracy suite: uniform, normal, exponent spread
//! `(u - 0.5) · exp(φ z)` (GEMMul8's `make_matrix`, φ = 0.5 ... 8), rank-1 plus noise
//! (heavy cancellation), and small integers; and the reference BLAS's loops, literally, to
//! test results against (values, NaN/Inf propagation and signed zeros).

use crate::blas::{GemmArgs, SyrkArgs, Trans, Uplo};

/// SplitMix64: small, fast, good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Uniform integer in `[lo, hi]`.
    pub fn int_in(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }
}

/// A family of test matrices (accuracy suite).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Family {
    /// Entries uniform in `[0, 1)`.
    Uniform,
    /// Standard normal entries.
    Normal,
    /// `(u - 0.5) · exp(φ z)`, `u` uniform, `z` normal: exponent spread grows with φ.
    Spread(f64),
    /// Integers uniform in `[-b, b]`.
    Integer(i64),
    /// `x_i y_j + 1e-8 · noise`: a rank-1 matrix plus small noise (products cancel when
    /// multiplied by a matrix with alternating signs; see [`cancellation_pair`]).
    Rank1Noise,
}

impl Family {
    /// Short name for tables.
    pub fn name(&self) -> String {
        match self {
            Family::Uniform => "uniform".into(),
            Family::Normal => "normal".into(),
            Family::Spread(phi) => format!("phi={phi}"),
            Family::Integer(b) => format!("int[-{b},{b}]"),
            Family::Rank1Noise => "rank1+noise".into(),
        }
    }
}

/// A column-major `rows x cols` matrix of the family.
pub fn matrix(fam: Family, rows: usize, cols: usize, rng: &mut Rng) -> Vec<f64> {
    match fam {
        Family::Uniform => (0..rows * cols).map(|_| rng.uniform()).collect(),
        Family::Normal => (0..rows * cols).map(|_| rng.normal()).collect(),
        Family::Spread(phi) => (0..rows * cols)
            .map(|_| (rng.uniform() - 0.5) * (phi * rng.normal()).exp())
            .collect(),
        Family::Integer(b) => (0..rows * cols).map(|_| rng.int_in(-b, b) as f64).collect(),
        Family::Rank1Noise => {
            let x: Vec<f64> = (0..rows).map(|_| rng.normal()).collect();
            let y: Vec<f64> = (0..cols).map(|_| rng.normal()).collect();
            let mut a = vec![0.0; rows * cols];
            for j in 0..cols {
                for i in 0..rows {
                    a[i + j * rows] = x[i] * y[j] + 1e-8 * rng.normal();
                }
            }
            a
        }
    }
}

/// A pair `(A, B)` (`m x k`, `k x n`) whose product cancels heavily: `A = x yᵀ + noise`
/// and the columns of `B` are orthogonal to `y` up to noise, so `|AB| << |A||B|`.
pub fn cancellation_pair(m: usize, n: usize, k: usize, rng: &mut Rng) -> (Vec<f64>, Vec<f64>) {
    let x: Vec<f64> = (0..m).map(|_| rng.normal()).collect();
    let y: Vec<f64> = (0..k).map(|_| rng.normal()).collect();
    let yy: f64 = y.iter().map(|v| v * v).sum();
    let mut a = vec![0.0; m * k];
    for l in 0..k {
        for i in 0..m {
            a[i + l * m] = x[i] * y[l] + 1e-6 * rng.normal();
        }
    }
    let mut b = vec![0.0; k * n];
    for j in 0..n {
        let mut col: Vec<f64> = (0..k).map(|_| rng.normal()).collect();
        let proj: f64 = col.iter().zip(&y).map(|(c, v)| c * v).sum::<f64>() / yy;
        for (c, v) in col.iter_mut().zip(&y) {
            *c -= proj * v;
        }
        b[j * k..(j + 1) * k].copy_from_slice(&col);
    }
    (a, b)
}

/// The reference loops' start of C in the axpy form: `0` (C not read), `C` or `beta C`.
fn axpy_start(beta: f64, c: f64) -> f64 {
    if beta == 0.0 {
        0.0
    } else if beta != 1.0 {
        beta * c
    } else {
        c
    }
}

/// The reference loops' end of the dot form: `alpha temp`, or `alpha temp + beta C`.
fn dot_finish(alpha: f64, temp: f64, beta: f64, c: f64) -> f64 {
    if beta == 0.0 {
        alpha * temp
    } else {
        alpha * temp + beta * c
    }
}

/// Reference `dgemm.f` (LAPACK 3.11) loops, literally: NN/NT column axpys
/// (`C = beta C`, then `C += (alpha B_lj) A_il`), TN/TT dot products
/// (`C = alpha temp + beta C`). `c` column-major with `a.ldc`.
pub fn reference_gemm(a: &GemmArgs<'_>, c: &mut [f64]) {
    let (m, n, k, ldc) = (a.m, a.n, a.k, a.ldc);
    if m == 0 || n == 0 || ((a.alpha == 0.0 || k == 0) && a.beta == 1.0) {
        return;
    }
    for j in 0..n {
        for i in 0..m {
            let x = &mut c[i + j * ldc];
            if a.alpha == 0.0 || a.transa == Trans::No {
                *x = axpy_start(a.beta, *x);
            }
        }
        if a.alpha == 0.0 {
            continue;
        }
        if a.transa == Trans::No {
            for l in 0..k {
                let temp = a.alpha * a.op_b(l, j);
                for i in 0..m {
                    c[i + j * ldc] += temp * a.op_a(i, l);
                }
            }
        } else {
            for i in 0..m {
                let mut temp = 0.0;
                for l in 0..k {
                    temp += a.op_a(i, l) * a.op_b(l, j);
                }
                let x = &mut c[i + j * ldc];
                *x = dot_finish(a.alpha, temp, a.beta, *x);
            }
        }
    }
}

/// Reference `dsyrk.f` (LAPACK 3.11) loops, literally: `trans = N` column axpys that skip
/// zero multipliers (`if A(j,l) != 0: C(i,j) += (alpha A(j,l)) A(i,l)`), `trans = T` dot
/// products. Only the `s.uplo` triangle of `c` is touched.
pub fn reference_syrk(s: &SyrkArgs<'_>, c: &mut [f64]) {
    let (n, k, ldc) = (s.n, s.k, s.ldc);
    if n == 0 || ((s.alpha == 0.0 || k == 0) && s.beta == 1.0) {
        return;
    }
    let rows = |j: usize| match s.uplo {
        Uplo::Upper => 0..j + 1,
        Uplo::Lower => j..n,
    };
    for j in 0..n {
        if s.alpha == 0.0 || s.trans == Trans::No {
            for i in rows(j) {
                let x = &mut c[i + j * ldc];
                *x = axpy_start(s.beta, *x);
            }
        }
        if s.alpha == 0.0 {
            continue;
        }
        if s.trans == Trans::No {
            for l in 0..k {
                if s.op_a(j, l) != 0.0 {
                    let temp = s.alpha * s.op_a(j, l);
                    for i in rows(j) {
                        c[i + j * ldc] += temp * s.op_a(i, l);
                    }
                }
            }
        } else {
            for i in rows(j) {
                let mut temp = 0.0;
                for l in 0..k {
                    temp += s.op_a(i, l) * s.op_a(j, l);
                }
                let x = &mut c[i + j * ldc];
                *x = dot_finish(s.alpha, temp, s.beta, *x);
            }
        }
    }
}

/// GPUs as the driver describes them (datasheet clocks and bandwidths), for tests of what the
/// engine makes of a GPU: the H200 and H100 SXM the built-in profiles were measured on, an
/// H100 PCIe of the same architecture without one, and an A100 of another.
pub mod gpus {
    use crate::engine::adapt::GpuTraits;

    fn gpu(name: &str, cc: (i32, i32), sms: u32, mhz: u32, tb_s: f64, gib: u64) -> GpuTraits {
        GpuTraits {
            name: name.into(),
            cc,
            sms,
            clock_khz: mhz * 1000,
            memory_bytes_per_s: tb_s * 1e12,
            memory_bytes: gib << 30,
        }
    }

    /// NVIDIA H200 (sm_90, 132 SMs, 1980 MHz, 4.8 TB/s, 140 GiB).
    pub fn h200() -> GpuTraits {
        gpu("NVIDIA H200", (9, 0), 132, 1980, 4.8, 140)
    }

    /// NVIDIA H100 SXM (sm_90, 132 SMs, 1980 MHz, 3.35 TB/s, 80 GiB).
    pub fn h100() -> GpuTraits {
        gpu("NVIDIA H100 80GB HBM3", (9, 0), 132, 1980, 3.35, 80)
    }

    /// NVIDIA H100 PCIe (sm_90, 114 SMs, 1755 MHz, 2.0 TB/s, 80 GiB): no profile of its own.
    pub fn h100_pcie() -> GpuTraits {
        gpu("NVIDIA H100 PCIe", (9, 0), 114, 1755, 2.0, 80)
    }

    /// NVIDIA A100 (sm_80, 108 SMs, 1410 MHz, 1.555 TB/s, 40 GiB).
    pub fn a100() -> GpuTraits {
        gpu("NVIDIA A100-SXM4-40GB", (8, 0), 108, 1410, 1.555, 40)
    }
}
