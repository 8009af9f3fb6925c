//! fp64 dgemm / dsyrk by Ozaki scheme II on exact small-integer products: the CPU
//! reference route `cpu-ozaki` (issue #3; paper brief §1).
//!
//! # Pipeline (one call)
//! 1. **Quick returns** with reference-BLAS semantics: `m = 0` or `n = 0` does nothing; a
//!    non-finite alpha or beta → [`Fallback::NonFinite`] (native computes `Inf x 0 = NaN`
//!    where its own loop meets it); `alpha = 0` or `k = 0` sets `C = beta C` (`C = 0` when
//!    `beta = 0`) without reading A/B.
//! 2. **Scan** ([`crate::scaling`] step 1): line exponents; NaN/Inf anywhere in A/B →
//!    [`Fallback::NonFinite`] (IEEE semantics are the native route's job). If
//!    `max e_i + max f_j + clog2(k) + 8 > 1023` the product could overflow fp64 →
//!    [`Fallback::ExponentRange`].
//! 3. **Coarse bounds** (the product `G` in accurate mode, the coarse line norms in norm
//!    mode) and the scaled line norms; **choice of r**
//!    ([`crate::select`]) and the **shifts** ([`crate::scaling`] step 3).
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
use crate::exact::{exponent, ldexp, pow2};
use crate::kernel;
use crate::moduli::{CrtPlan, INT8_MODULI, MAX_MODULI, MIN_MODULI};
pub use crate::reconstruct::Reconstruction;
use crate::residues::centred_into;
use crate::scaling::{CoarseBounds, Exponents, clog2, coarse, line_exponent, quantize};
pub use crate::scaling::{Quantizer, ScalingMode};
use crate::select::{self, CallStats, DEFAULT_TARGET_ULPS};
use crate::write_back::{Form, Product as WriteProduct, write_back};
use std::fmt;
use std::time::Instant;

/// How many moduli a call uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Moduli {
    /// Chosen per call from k, the exponent spread and the accuracy target ([`crate::select`]).
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
    /// Accuracy target for [`Moduli::Auto`], in units of `u = 2^-53` relative to `|A||B|`.
    pub target_ulps: f64,
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
            quantizer: Quantizer::Nearest,
            scaling: ScalingMode::Accurate,
            reconstruction: Reconstruction::Exact,
            threads: 0,
        }
    }
}

/// Why a call must go to native fp64 instead (C is untouched).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fallback {
    /// A or B holds a NaN or an infinity.
    NonFinite,
    /// The product's exponent range could overflow fp64.
    ExponentRange,
    /// Even 20 moduli miss the accuracy target (estimate at 20 moduli, in units of u).
    AccuracyUnreachable {
        /// `ρ / u` at 20 moduli (infinite when 20 cannot even cover the spread).
        estimate_ulps: f64,
    },
    /// The forced moduli count cannot cover the exponent spread of the inputs.
    SpreadNotCoverable {
        /// The forced count.
        moduli: usize,
    },
    /// `OZAKI_MODULI` outside `2..=20`.
    InvalidModuli {
        /// The requested count.
        moduli: usize,
    },
}

impl Fallback {
    /// The stable short reason recorded in traces (`fallback` field).
    pub fn reason(&self) -> &'static str {
        match self {
            Fallback::NonFinite => "non-finite input",
            Fallback::ExponentRange => "exponent range",
            Fallback::AccuracyUnreachable { .. } => "accuracy target unreachable",
            Fallback::SpreadNotCoverable { .. } => "exponent spread not coverable",
            Fallback::InvalidModuli { .. } => "invalid moduli count",
        }
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::AccuracyUnreachable { estimate_ulps } => {
                write!(
                    f,
                    "{}: estimate {estimate_ulps:.3e} u at {MAX_MODULI} moduli",
                    self.reason()
                )
            }
            Fallback::SpreadNotCoverable { moduli } => {
                write!(f, "{} with {moduli} moduli", self.reason())
            }
            Fallback::InvalidModuli { moduli } => write!(
                f,
                "{}: {moduli} (expected {MIN_MODULI}..={MAX_MODULI})",
                self.reason()
            ),
            _ => f.write_str(self.reason()),
        }
    }
}

impl std::error::Error for Fallback {}

/// What an emulated call did.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulationInfo {
    /// Moduli used (0 for the quick returns that compute no product).
    pub moduli: usize,
    /// The error estimate `ρ` in units of `u` ([`crate::select`]); 0 for quick returns.
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

fn threads(cfg: &EmulationConfig) -> usize {
    if cfg.threads > 0 {
        cfg.threads
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// What the scan learns about the lines of one packed operand.
struct LineScan {
    exps: Vec<Option<i32>>,
    /// Coarse magnitudes `ā` (packed like the operand).
    coarse: Vec<i16>,
    /// `2^(E(x) - e)` per entry (0 for zeros and below 2^-1074), packed like the operand.
    pow: Vec<f64>,
    /// Scaled 2-norms `||x||_2 2^-e`.
    norms: Vec<f64>,
}

/// Line exponents, coarse magnitudes, exponent powers and scaled 2-norms of a packed operand.
fn scan_lines(x: &[f64], lines: usize, k: usize) -> Result<LineScan, Fallback> {
    let mut exps = Vec::with_capacity(lines);
    let mut coarse_vals = vec![0i16; lines * k];
    let mut pow = vec![0.0f64; lines * k];
    let mut norms = vec![0.0; lines];
    for i in 0..lines {
        let line = &x[i * k..(i + 1) * k];
        let e = line_exponent(line.iter().copied()).map_err(|_| Fallback::NonFinite)?;
        if let Some(e) = e {
            let mut s = 0.0;
            for ((c, pw), &v) in coarse_vals[i * k..(i + 1) * k]
                .iter_mut()
                .zip(&mut pow[i * k..(i + 1) * k])
                .zip(line)
            {
                *c = i16::from(coarse(v, e));
                if v != 0.0 {
                    let d = exponent(v) - e;
                    *pw = if d >= -1074 { pow2(d) } else { 0.0 };
                }
                let t = ldexp(v, -i64::from(e));
                s += t * t;
            }
            norms[i] = s.sqrt();
        }
        exps.push(e);
    }
    Ok(LineScan {
        exps,
        coarse: coarse_vals,
        pow,
        norms,
    })
}

fn emulate(p: &Packed, cfg: &EmulationConfig, out: &mut [f64]) -> Result<EmulationInfo, Fallback> {
    let (m, n, k) = (p.m, p.n, p.k);
    let th = threads(cfg);
    let mut ph = Phases::new();
    if let Moduli::Fixed(r) = cfg.moduli
        && !(MIN_MODULI..=MAX_MODULI).contains(&r)
    {
        return Err(Fallback::InvalidModuli { moduli: r });
    }
    // 2. Scan.
    let sa = scan_lines(&p.a, m, k)?;
    let sb = if p.b.is_some() {
        Some(scan_lines(p.b(), n, k)?)
    } else {
        None
    };
    let sb_ref = sb.as_ref().unwrap_or(&sa);
    let exps = Exponents {
        rows: sa.exps.clone(),
        cols: sb_ref.exps.clone(),
    };
    if let Some(s) = exps.max_sum()
        && s + clog2(k as u64) + 8 > 1023
    {
        return Err(Fallback::ExponentRange);
    }
    ph.mark("scan");
    // 3. Coarse product and choice.
    let bounds = match cfg.scaling {
        ScalingMode::Fast => CoarseBounds::fast(m, n, k),
        ScalingMode::Norm => CoarseBounds::norm(&exps, &p.a, p.b(), k),
        ScalingMode::Accurate => {
            let g = kernel::coarse_product(&sa.coarse, &sb_ref.coarse, m, n, k, p.tri, th);
            let mut bounds = CoarseBounds::from_product(&g, m, n);
            if let Some(_t) = p.tri {
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
    let (h, h2) = kernel::f64_product2(&sa.pow, &sb_ref.pow, m, n, k, p.tri, th);
    ph.mark("coarse");
    let stats = CallStats {
        k,
        a: &p.a,
        b: p.b(),
        m,
        n,
        exps: &exps,
        bounds: &bounds,
        scale: &h,
        scale2: &h2,
        row_norms: &sa.norms,
        col_norms: &sb_ref.norms,
        tri: p.tri,
        scaling: cfg.scaling,
    };
    let forced = match cfg.moduli {
        Moduli::Auto => None,
        Moduli::Fixed(r) => Some(r),
    };
    let sel = select::choose(&stats, cfg.quantizer, forced, cfg.target_ulps)?;
    let r = sel.moduli;
    let sc = &sel.scaling;
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
        estimate_ulps: sel.estimate,
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
