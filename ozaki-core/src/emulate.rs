//! fp64 dgemm / dsyrk by Ozaki scheme II on exact small-integer products: the CPU
//! reference route `cpu-ozaki` (paper brief §1).
//!
//! # Pipeline (one call)
//! 1. **Quick returns** with reference-BLAS semantics: `m = 0` or `n = 0` does nothing; a
//!    non-finite alpha or beta → [`Fallback::NonFinite`] (native computes `Inf x 0 = NaN`
//!    where its own loop meets it); `alpha = 0` or `k = 0` sets `C = beta C` (`C = 0` when
//!    `beta = 0`) without reading A/B.
//! 2. **Scan** ([`crate::scaling`] step 1): line exponents and the accuracy rule's line
//!    statistics ([`crate::rule::LineTable`]; norm scaling's `S` among them).
//! 3. **Decision** ([`crate::rule::choose`]), before any residue or product: NaN/Inf →
//!    [`Fallback::NonFinite`] (IEEE semantics are the native route's job); a product that
//!    could overflow fp64 → [`Fallback::ExponentRange`]; then the moduli count, or a decline
//!    when the accuracy mode cannot be met. Accurate scaling computes its coarse product `G`
//!    first (its bounds are the rule's input). Then the **shifts** ([`crate::scaling`] step 3).
//! 4. **Quantise** to `i64` ([`crate::scaling`] step 4), then per modulus `m_t`, in the order
//!    of [`crate::moduli::INT8_MODULI`]: **centred residue planes** and their **exact product**
//!    modulo `m_t` ([`crate::residues`], [`crate::kernel`]).
//! 5. **Reconstruct** each entry ([`crate::reconstruct`], exact Garner by default or the
//!    fp64 CRT the GPU uses) as `ĉ_ij = RN(C'_ij 2^-(σ_i + τ_j))`.
//! 6. **alpha/beta** ([`crate::write_back`]): `C_ij = alpha ĉ_ij` if `beta = 0` (old C not
//!    read), else `alpha ĉ_ij + C_ij` if `beta = 1`, else `alpha ĉ_ij + beta C_ij` (each
//!    operation one IEEE rounding, no fma); a zero result has the sign the reference BLAS's
//!    loop for this call gives it (its axpy or dot form).
//!
//! Steps 1-5 are [`gemm_product`] / [`syrk_product`] and step 6 is [`Product::write`], so a
//! caller can keep the floating-point flags of the internal steps from its own caller.
//!
//! C is written only in step 6, after every entry has been computed: an error path never
//! leaves a half-written C. dsyrk computes and writes only the `uplo` triangle, with
//! `op(B) = op(A)^T` (so `τ = σ` and the result is exactly symmetric).
//!
//! With the same moduli count, quantiser, scaling mode and [`Reconstruction::Fp64`], the
//! GPU route must produce the same bits as this module.

use crate::blas::{GemmArgs, SyrkArgs, Trans, Uplo};
use crate::kernel;
use crate::moduli::{CrtPlan, INT8_MODULI, MAX_MODULI};
pub use crate::reconstruct::Reconstruction;
use crate::residues::centred_into;
use crate::rule::{self, Accuracy, DEFAULT_TARGET_ULPS, LineTable};
use crate::scaling::{CoarseBounds, Exponents, Scaling, coarse, quantize};
pub use crate::scaling::{Quantizer, ScalingMode};
use crate::write_back::{Form, Product as WriteProduct, write_back};
use std::time::Instant;

/// How many moduli a call uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Moduli {
    /// Chosen per call by the accuracy rule ([`crate::rule`]).
    #[default]
    Auto,
    /// Exactly this many (`OZAKI_MODULI`), `2..=20`.
    Fixed(usize),
}

/// Settings of the emulation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmulationConfig {
    /// Moduli count.
    pub moduli: Moduli,
    /// The rule's floor `T` for [`Moduli::Auto`], in units of `u = 2^-53` ([`crate::rule`]).
    pub target_ulps: f64,
    /// How strict the rule is (`OZAKI_ACCURACY`).
    pub accuracy: Accuracy,
    /// Rounding of the scaled inputs.
    pub quantizer: Quantizer,
    /// Scaling bound.
    pub scaling: ScalingMode,
    /// Reconstruction variant.
    pub reconstruction: Reconstruction,
    /// Worker threads (0: all available cores).
    pub threads: usize,
}

impl Default for EmulationConfig {
    fn default() -> Self {
        EmulationConfig {
            moduli: Moduli::Auto,
            target_ulps: DEFAULT_TARGET_ULPS,
            accuracy: Accuracy::Default,
            quantizer: Quantizer::Nearest,
            scaling: ScalingMode::Norm,
            reconstruction: Reconstruction::Exact,
            threads: 0,
        }
    }
}

pub use crate::fallback::Fallback;

/// What an emulated call did.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulationInfo {
    /// Moduli used (0 for the quick returns that compute no product).
    pub moduli: usize,
    /// The rule's estimate at the count used ([`crate::rule::Choice::estimate`]); 0 for quick
    /// returns.
    pub estimate_ulps: f64,
    /// Seconds per phase: `scan`, `coarse`, `select`, `quantize`, `products`, `reconstruct`, `write`.
    pub phases: Vec<(&'static str, f64)>,
}

struct Phases(Vec<(&'static str, f64)>, Instant);

impl Phases {
    fn new() -> Self {
        Phases(Vec::new(), Instant::now())
    }
    fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.0.push((name, (now - self.1).as_secs_f64()));
        self.1 = now;
    }
}

/// The two packed operands: op(A) rows (`m x k`, row-major) and op(B) columns (`n x k`,
/// each column contiguous). For dsyrk `b` is `None` (op(B) = op(A)^T: same packing).
struct Packed {
    m: usize,
    n: usize,
    k: usize,
    a: Vec<f64>,
    b: Option<Vec<f64>>,
    tri: Option<Uplo>,
}

impl Packed {
    fn b(&self) -> &[f64] {
        self.b.as_deref().unwrap_or(&self.a)
    }
}

fn request<'a>(cfg: &EmulationConfig, k: usize, bounds: rule::Bounds<'a>) -> rule::Request<'a> {
    rule::Request {
        k,
        scaling: cfg.scaling,
        bounds,
        accuracy: cfg.accuracy,
        forced: match cfg.moduli {
            Moduli::Auto => None,
            Moduli::Fixed(r) => Some(r),
        },
        quantizer: cfg.quantizer,
        target_ulps: cfg.target_ulps,
    }
}

fn threads(cfg: &EmulationConfig) -> usize {
    if cfg.threads > 0 {
        cfg.threads
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Line exponents and the rule's statistics of a packed operand (`lines` lines of `k`).
fn scan_lines(
    x: &[f64],
    lines: usize,
    k: usize,
) -> Result<(Vec<Option<i32>>, LineTable), Fallback> {
    let table = LineTable::of_packed(x, lines, k);
    if table.maxbits.iter().any(|&b| b >= rule::NON_FINITE_BITS) {
        return Err(Fallback::NonFinite);
    }
    Ok((table.view().exponents(), table))
}

/// Coarse magnitudes `ā` of a packed operand (accurate scaling's coarse product).
fn coarse_lines(x: &[f64], exps: &[Option<i32>], k: usize) -> Vec<i16> {
    let mut v = vec![0i16; x.len()];
    for (i, e) in exps.iter().enumerate() {
        if let Some(e) = *e {
            for (c, &x) in v[i * k..(i + 1) * k].iter_mut().zip(&x[i * k..(i + 1) * k]) {
                *c = i16::from(coarse(x, e));
            }
        }
    }
    v
}

thread_local! {
    static PRODUCT_PASSES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// GEMM-sized passes (the coarse product of accurate scaling, one residue product per
/// modulus) this thread's emulated calls have made: with fast or norm scaling a declined
/// call makes none, since the rule decides right after the scan.
pub fn product_passes_on_this_thread() -> u64 {
    PRODUCT_PASSES.with(|c| c.get())
}

fn count_product_pass() {
    PRODUCT_PASSES.with(|c| c.set(c.get() + 1));
}

fn emulate(p: &Packed, cfg: &EmulationConfig, out: &mut [f64]) -> Result<EmulationInfo, Fallback> {
    let (m, n, k) = (p.m, p.n, p.k);
    let th = threads(cfg);
    let mut ph = Phases::new();
    // 2. Scan: exponents and the rule's line statistics.
    let (ea, sa) = scan_lines(&p.a, m, k)?;
    let sb = if p.b.is_some() {
        Some(scan_lines(p.b(), n, k)?)
    } else {
        None
    };
    let (eb, tb) = match &sb {
        Some((e, t)) => (e.clone(), t),
        None => (ea.clone(), &sa),
    };
    let exps = Exponents { rows: ea, cols: eb };
    ph.mark("scan");
    // 3. Bounds (accurate scaling: the coarse product) and the rule's decision.
    let bounds = match cfg.scaling {
        ScalingMode::Fast => CoarseBounds::fast(m, n, k),
        ScalingMode::Norm => CoarseBounds {
            rows: sa.coarse_sq.clone(),
            cols: tb.coarse_sq.clone(),
        },
        ScalingMode::Accurate => {
            // the rule's non-finite and range checks first: the product is work
            rule::choose(sa.view(), tb.view(), &request(cfg, k, rule::Bounds::Fast))?;
            let ca = coarse_lines(&p.a, &exps.rows, k);
            let cb = p.b.as_ref().map(|b| coarse_lines(b, &exps.cols, k));
            count_product_pass();
            let g = kernel::coarse_product(&ca, cb.as_ref().unwrap_or(&ca), m, n, k, p.tri, th);
            let mut bounds = CoarseBounds::from_product(&g, m, n);
            if p.tri.is_some() {
                // Only one triangle of G was computed; G is symmetric, so the line maxima
                // are the maxima over row i and column i of the stored triangle.
                let both: Vec<u64> = bounds
                    .rows
                    .iter()
                    .zip(&bounds.cols)
                    .map(|(a, b)| *a.max(b))
                    .collect();
                bounds = CoarseBounds {
                    rows: both.clone(),
                    cols: both,
                };
            }
            bounds
        }
    };
    ph.mark("coarse");
    let line_bounds = match cfg.scaling {
        ScalingMode::Fast => rule::Bounds::Fast,
        ScalingMode::Norm => rule::Bounds::Norm,
        ScalingMode::Accurate => rule::Bounds::Given(&bounds.rows, &bounds.cols),
    };
    let choice = rule::choose(sa.view(), tb.view(), &request(cfg, k, line_bounds))?;
    let r = choice.moduli;
    let sc = &Scaling::new(cfg.scaling.budget_bits(CrtPlan::get(r)), &exps, &bounds);
    ph.mark("select");
    // 4. Quantise.
    let quant = |x: &[f64], lines: usize, shifts: &[i32]| -> Vec<i64> {
        let mut v = vec![0i64; lines * k];
        for i in 0..lines {
            for (d, &s) in v[i * k..(i + 1) * k].iter_mut().zip(&x[i * k..(i + 1) * k]) {
                *d = quantize(s, shifts[i], cfg.quantizer);
            }
        }
        v
    };
    let aq = quant(&p.a, m, &sc.sigma);
    let bq = if p.b.is_some() {
        Some(quant(p.b(), n, &sc.tau))
    } else {
        None
    };
    ph.mark("quantize");
    // Residue planes and products, modulus by modulus; residues stored entry-major.
    let mut planes = vec![0i8; r * m * n];
    let mut pa = vec![0i16; m * k];
    let mut pb = vec![0i16; if bq.is_some() { n * k } else { 0 }];
    for (t, &mt) in INT8_MODULI[..r].iter().enumerate() {
        count_product_pass();
        centred_into(&aq, mt, &mut pa);
        if let Some(bq) = &bq {
            centred_into(bq, mt, &mut pb);
        }
        let bplane = if bq.is_some() { &pb } else { &pa };
        kernel::residue_product(&pa, bplane, m, n, k, mt, p.tri, &mut planes, r, t, th);
    }
    ph.mark("products");
    // 5. Reconstruct.
    let plan = CrtPlan::get(r);
    kernel::for_each_column(out, m, n, p.tri, th, |j, rows, col| {
        match cfg.reconstruction {
            Reconstruction::Exact => {
                let mut s = [0i64; crate::reconstruct::BATCH];
                for i0 in rows.clone().step_by(crate::reconstruct::BATCH) {
                    let i1 = (i0 + crate::reconstruct::BATCH).min(rows.end);
                    for (e, se) in s[..i1 - i0].iter_mut().enumerate() {
                        *se = i64::from(sc.sigma[i0 + e]) + i64::from(sc.tau[j]);
                    }
                    let res = &planes[(i0 + j * m) * r..(i1 + j * m) * r];
                    crate::reconstruct::exact_f64_batch(res, &s[..i1 - i0], plan, &mut col[i0..i1]);
                }
            }
            Reconstruction::Fp64 => {
                let mut res = [0i32; MAX_MODULI];
                for i in rows {
                    let entry = &planes[(i + j * m) * r..(i + j * m + 1) * r];
                    for (v, &x) in res.iter_mut().zip(entry) {
                        *v = i32::from(x);
                    }
                    let s = i64::from(sc.sigma[i]) + i64::from(sc.tau[j]);
                    col[i] = crate::reconstruct::fp64_f64(&res[..r], plan, s);
                }
            }
        }
    });
    ph.mark("reconstruct");
    Ok(EmulationInfo {
        moduli: r,
        estimate_ulps: choice.estimate,
        phases: ph.0,
    })
}

/// An emulated call's product, computed but not yet written into C: [`Product::write`]
/// does the final `C = alpha ĉ + beta C` (module doc, step 6). The split lets a caller run
/// the internal work under its own guard (the shim keeps the caller's floating-point flags
/// across it) and the write-back, whose arithmetic is the caller's, outside.
pub struct Product {
    info: EmulationInfo,
    /// `(m, n)` of C (dsyrk: `(n, n)`), its triangle, alpha, beta.
    shape: (usize, usize, Option<Uplo>),
    alpha: f64,
    beta: f64,
    /// ĉ (column-major m x n), the packed operands and the reference loop of the call;
    /// `None` when there is nothing to multiply (alpha = 0 or k = 0: `C = beta C`) or
    /// nothing to write (m = 0 or n = 0).
    product: Option<(Vec<f64>, Packed, Form)>,
    /// Nothing to do at all (m = 0 or n = 0, or a quick return with beta = 1).
    nothing: bool,
}

impl Product {
    fn quick(m: usize, n: usize, tri: Option<Uplo>, alpha: f64, beta: f64) -> Product {
        Product {
            info: EmulationInfo {
                moduli: 0,
                estimate_ulps: 0.0,
                phases: Vec::new(),
            },
            shape: (m, n, tri),
            alpha,
            beta,
            product: None,
            nothing: m == 0 || n == 0 || beta == 1.0,
        }
    }

    /// What the emulation did (before the write-back's time is added).
    pub fn info(&self) -> &EmulationInfo {
        &self.info
    }

    /// Writes `C = alpha ĉ + beta C` (`c` column-major with leading dimension `ldc`).
    ///
    /// # Panics
    /// If `c` is too short for `ldc` and the call's columns.
    pub fn write(self, c: &mut [f64], ldc: usize) -> EmulationInfo {
        let (m, n, tri) = self.shape;
        if self.nothing && self.product.is_none() {
            return self.info;
        }
        assert!(c.len() >= (n - 1) * ldc + m, "C too short");
        let t = Instant::now();
        let prod = self
            .product
            .as_ref()
            .map(|(prod, packed, form)| WriteProduct {
                c: prod,
                a_rows: &packed.a,
                b_cols: packed.b(),
                k: packed.k,
                form: *form,
            });
        write_back(c, ldc, m, n, tri, self.alpha, self.beta, prod.as_ref());
        let mut info = self.info;
        if self.product.is_some() {
            info.phases.push(("write", t.elapsed().as_secs_f64()));
        }
        info
    }
}

/// Non-finite alpha or beta: IEEE semantics (Inf x 0 = NaN, ...) are the native route's.
fn check_scalars(alpha: f64, beta: f64) -> Result<(), Fallback> {
    if alpha.is_finite() && beta.is_finite() {
        Ok(())
    } else {
        Err(Fallback::NonFinite)
    }
}

/// The product of `C = alpha op(A) op(B) + beta C` by emulation, to be written with
/// [`Product::write`].
///
/// # Errors
/// A [`Fallback`] when the call must be computed natively (C is not touched by this).
pub fn gemm_product(args: &GemmArgs<'_>, cfg: &EmulationConfig) -> Result<Product, Fallback> {
    let (m, n, k) = (args.m, args.n, args.k);
    if m == 0 || n == 0 {
        return Ok(Product::quick(m, n, None, args.alpha, 1.0));
    }
    check_scalars(args.alpha, args.beta)?;
    if args.alpha == 0.0 || k == 0 {
        return Ok(Product::quick(m, n, None, args.alpha, args.beta));
    }
    let mut a = vec![0.0; m * k];
    for l in 0..k {
        for i in 0..m {
            a[i * k + l] = args.op_a(i, l);
        }
    }
    let mut b = vec![0.0; n * k];
    for j in 0..n {
        for l in 0..k {
            b[j * k + l] = args.op_b(l, j);
        }
    }
    let packed = Packed {
        m,
        n,
        k,
        a,
        b: Some(b),
        tri: None,
    };
    let mut prod = vec![0.0; m * n];
    let info = emulate(&packed, cfg, &mut prod)?;
    Ok(Product {
        info,
        shape: (m, n, None),
        alpha: args.alpha,
        beta: args.beta,
        product: Some((prod, packed, Form::gemm(args.transa))),
        nothing: false,
    })
}

/// The product of `C = alpha op(A) op(A)^T + beta C` (the `uplo` triangle) by emulation.
///
/// # Errors
/// As [`gemm_product`].
pub fn syrk_product(args: &SyrkArgs<'_>, cfg: &EmulationConfig) -> Result<Product, Fallback> {
    let (n, k) = (args.n, args.k);
    let tri = Some(args.uplo);
    if n == 0 {
        return Ok(Product::quick(n, n, tri, args.alpha, 1.0));
    }
    check_scalars(args.alpha, args.beta)?;
    if args.alpha == 0.0 || k == 0 {
        return Ok(Product::quick(n, n, tri, args.alpha, args.beta));
    }
    let mut a = vec![0.0; n * k];
    for l in 0..k {
        for i in 0..n {
            a[i * k + l] = args.op_a(i, l);
        }
    }
    let packed = Packed {
        m: n,
        n,
        k,
        a,
        b: None,
        tri,
    };
    let mut prod = vec![0.0; n * n];
    let info = emulate(&packed, cfg, &mut prod)?;
    Ok(Product {
        info,
        shape: (n, n, tri),
        alpha: args.alpha,
        beta: args.beta,
        product: Some((prod, packed, Form::syrk(args.trans))),
        nothing: false,
    })
}

/// `C = alpha op(A) op(B) + beta C` by emulation; `c` is column-major with `args.ldc`.
///
/// On `Err`, `c` is untouched and the caller must compute the call natively.
///
/// # Panics
/// If `c` is too short for `args.ldc` and `args.n` (the caller validated the arguments).
pub fn gemm(
    args: &GemmArgs<'_>,
    c: &mut [f64],
    cfg: &EmulationConfig,
) -> Result<EmulationInfo, Fallback> {
    Ok(gemm_product(args, cfg)?.write(c, args.ldc))
}

/// `C = alpha op(A) op(A)^T + beta C` on the `uplo` triangle by emulation.
///
/// On `Err`, `c` is untouched and the caller must compute the call natively.
///
/// # Panics
/// If `c` is too short for `args.ldc` and `args.n`.
pub fn syrk(
    args: &SyrkArgs<'_>,
    c: &mut [f64],
    cfg: &EmulationConfig,
) -> Result<EmulationInfo, Fallback> {
    Ok(syrk_product(args, cfg)?.write(c, args.ldc))
}

/// Convenience: `op(A) op(B)` for column-major A (m x k) and B (k x n), alpha = 1, beta = 0.
pub fn matmul(
    a: &[f64],
    b: &[f64],
    m: usize,
    n: usize,
    k: usize,
    cfg: &EmulationConfig,
) -> Result<(Vec<f64>, EmulationInfo), Fallback> {
    let args = GemmArgs {
        transa: Trans::No,
        transb: Trans::No,
        m,
        n,
        k,
        alpha: 1.0,
        a,
        lda: m.max(1),
        b,
        ldb: k.max(1),
        beta: 0.0,
        ldc: m.max(1),
    };
    let mut c = vec![0.0; m * n];
    let info = gemm(&args, &mut c, cfg)?;
    Ok((c, info))
}
