//! Validated, FFI-free descriptions of one dgemm / dsyrk call, shared by every route
//! (built-in, `cpu-ozaki`, GPU), plus the built-in cache-blocked fp64 kernels.
//!
//! All matrices are column-major. The shim converts CBLAS row-major calls to column-major
//! before building these (a row-major C = op(A) op(B) is the column-major
//! C^T = op(B)^T op(A)^T; a row-major syrk flips `uplo` and `trans`), so routes see one
//! storage order. Arguments have already passed the reference-BLAS checks when a
//! [`GemmArgs`]/[`SyrkArgs`] exists: dimensions are non-negative and leading dimensions are
//! large enough, so indexing `a[i + j * lda]` inside the logical shape is in bounds.

/// op(X) for one operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trans {
    /// op(X) = X.
    No,
    /// op(X) = X^T (BLAS `T` and, for real matrices, `C`).
    Yes,
}

/// Which triangle of C a dsyrk reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Uplo {
    /// Upper triangle (i <= j).
    Upper,
    /// Lower triangle (i >= j).
    Lower,
}

/// C = alpha op(A) op(B) + beta C, column-major; C is m x n, op(A) m x k, op(B) k x n.
#[derive(Debug)]
pub struct GemmArgs<'a> {
    /// op(A).
    pub transa: Trans,
    /// op(B).
    pub transb: Trans,
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Scalar on the product.
    pub alpha: f64,
    /// A, stored `lda` apart; m x k if `transa == No`, else k x m.
    pub a: &'a [f64],
    /// Leading dimension of A.
    pub lda: usize,
    /// B, stored `ldb` apart; k x n if `transb == No`, else n x k.
    pub b: &'a [f64],
    /// Leading dimension of B.
    pub ldb: usize,
    /// Scalar on the old C (beta == 0 means C is not read: NaN in C does not propagate).
    pub beta: f64,
    /// Leading dimension of C.
    pub ldc: usize,
}

/// C = alpha A A^T + beta C (`trans == No`, A is n x k) or alpha A^T A + beta C
/// (`trans == Yes`, A is k x n); only the `uplo` triangle of C is referenced.
#[derive(Debug)]
pub struct SyrkArgs<'a> {
    /// Triangle of C.
    pub uplo: Uplo,
    /// Whether A is transposed.
    pub trans: Trans,
    /// Order of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Scalar on the product.
    pub alpha: f64,
    /// A, stored `lda` apart.
    pub a: &'a [f64],
    /// Leading dimension of A.
    pub lda: usize,
    /// Scalar on the old C (beta == 0 means C is not read).
    pub beta: f64,
    /// Leading dimension of C.
    pub ldc: usize,
}

/// The reference quick return of dgemm/dsyrk (`dgemm.f`, `dsyrk.f`): C (`rows x cols`) is
/// left as it is, not even scaled, when it is empty or when there is nothing to add to an
/// unscaled C (`alpha == 0` or `k == 0`, with `beta == 1`). The built-in routines and the
/// shim's argument decoder both answer it.
pub fn quick_return(rows: usize, cols: usize, k: usize, alpha: f64, beta: f64) -> bool {
    rows == 0 || cols == 0 || ((alpha == 0.0 || k == 0) && beta == 1.0)
}

/// Rows of column `j` of an `m`-row C that a call writes: all of them, or those of the `tri`
/// triangle (dsyrk).
pub fn column_rows(j: usize, m: usize, tri: Option<Uplo>) -> std::ops::Range<usize> {
    match tri {
        None => 0..m,
        Some(Uplo::Upper) => 0..(j + 1).min(m),
        Some(Uplo::Lower) => j.min(m)..m,
    }
}

/// Elements of a column-major `rows x cols` matrix with leading dimension `ld` that a BLAS
/// call may touch: `ld (cols - 1) + rows`, 0 for an empty matrix (the caller's array may be
/// longer; reading past this span is what the reference forbids).
pub fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        ld * (cols - 1) + rows
    }
}

impl<'a> GemmArgs<'a> {
    /// C = A B: both operands untransposed and tightly packed (lda = m, ldb = k, ldc = m),
    /// alpha = 1, beta = 0, the plain product that benchmarks and tests time and check.
    pub fn product(m: usize, n: usize, k: usize, a: &'a [f64], b: &'a [f64]) -> Self {
        GemmArgs {
            transa: Trans::No,
            transb: Trans::No,
            m,
            n,
            k,
            alpha: 1.0,
            a,
            lda: m,
            b,
            ldb: k,
            beta: 0.0,
            ldc: m,
        }
    }
}

impl GemmArgs<'_> {
    /// (rows, columns) of A as stored: m x k, or k x m when transposed.
    pub fn a_dims(&self) -> (usize, usize) {
        match self.transa {
            Trans::No => (self.m, self.k),
            Trans::Yes => (self.k, self.m),
        }
    }

    /// (rows, columns) of B as stored: k x n, or n x k when transposed.
    pub fn b_dims(&self) -> (usize, usize) {
        match self.transb {
            Trans::No => (self.k, self.n),
            Trans::Yes => (self.n, self.k),
        }
    }

    /// Element (i, l) of op(A), 0 <= i < m, 0 <= l < k.
    #[inline]
    pub fn op_a(&self, i: usize, l: usize) -> f64 {
        match self.transa {
            Trans::No => self.a[i + l * self.lda],
            Trans::Yes => self.a[l + i * self.lda],
        }
    }

    /// Element (l, j) of op(B), 0 <= l < k, 0 <= j < n.
    #[inline]
    pub fn op_b(&self, l: usize, j: usize) -> f64 {
        match self.transb {
            Trans::No => self.b[l + j * self.ldb],
            Trans::Yes => self.b[j + l * self.ldb],
        }
    }
}

impl SyrkArgs<'_> {
    /// (rows, columns) of A as stored: n x k, or k x n when transposed.
    pub fn a_dims(&self) -> (usize, usize) {
        match self.trans {
            Trans::No => (self.n, self.k),
            Trans::Yes => (self.k, self.n),
        }
    }

    /// Element (i, l) of the n x k operand op(A) (A if `trans == No`, else A^T).
    #[inline]
    pub fn op_a(&self, i: usize, l: usize) -> f64 {
        match self.trans {
            Trans::No => self.a[i + l * self.lda],
            Trans::Yes => self.a[l + i * self.lda],
        }
    }
}

// -------------------------------------------------------------------------------------------
// Built-in kernels: the route used when no vendor BLAS exists anywhere.
//
// Reference-BLAS semantics exactly (`dgemm.f`, `dsyrk.f`, LAPACK 3.11), bit for bit: quick
// return when m == 0, n == 0, or (alpha == 0 or k == 0) and beta == 1; alpha == 0 only scales
// C (beta == 0 sets C to zero without reading it, so NaN in C does not propagate). Otherwise
// each form follows the reference's loop:
// - op(A) = A (dgemm NN, NT; dsyrk trans = N), the column axpys: C = beta C (zeros for
//   beta == 0, untouched for beta == 1), then the terms (alpha op(B)(l,j)) op(A)(i,l) in
//   increasing l, one multiply and one add each. dsyrk skips a zero multiplier A(j,l), as the
//   reference does (`syrk_columns_skipping_zeros`); dgemm skips nothing.
// - op(A) = A^T (dgemm TN, TT; dsyrk trans = T), the dot products ([`DotForm`]): temp summed
//   from +0 in increasing l, then C = alpha temp (beta == 0) or alpha temp + beta C, also
//   when k == 0 (an infinite alpha then gives NaN, alpha x 0).
// The product is cache-blocked (KC x NC panels of op(B), MC x KC blocks of op(A), packed
// contiguously) around an MR x NR register tile that the compiler vectorises, without
// changing any element's sequence of operations.

/// Rows of the register tile.
const MR: usize = 4;
/// Columns of the register tile.
const NR: usize = 4;
/// Depth of a packed block.
const KC: usize = 256;
/// Rows of a packed block of op(A).
const MC: usize = 128;
/// Columns of a packed panel of op(B).
const NC: usize = 512;

/// Which elements of C a kernel may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Region {
    /// All of C (dgemm).
    Full,
    /// i <= j (dsyrk, upper).
    Upper,
    /// i >= j (dsyrk, lower).
    Lower,
}

impl Region {
    fn contains(self, i: usize, j: usize) -> bool {
        match self {
            Region::Full => true,
            Region::Upper => i <= j,
            Region::Lower => i >= j,
        }
    }

    /// Whether any element of rows `i0..i1` x columns `j0..j1` (non-empty) is in the region.
    fn meets(self, i0: usize, i1: usize, j0: usize, j1: usize) -> bool {
        match self {
            Region::Full => true,
            Region::Upper => i0 < j1,
            Region::Lower => i1 > j0,
        }
    }

    /// Whether every element of the block is in the region.
    fn covers(self, i0: usize, i1: usize, j0: usize, j1: usize) -> bool {
        match self {
            Region::Full => true,
            Region::Upper => i1 - 1 <= j0,
            Region::Lower => i0 >= j1 - 1,
        }
    }
}

/// C = beta C on the region of the n-column, m-row C; beta == 0 writes zeros without reading.
fn scale(c: &mut [f64], ldc: usize, m: usize, n: usize, beta: f64, region: Region) {
    if beta == 1.0 {
        return;
    }
    for j in 0..n {
        let (lo, hi) = match region {
            Region::Full => (0, m),
            Region::Upper => (0, (j + 1).min(m)),
            Region::Lower => (j.min(m), m),
        };
        let col = &mut c[j * ldc + lo..j * ldc + hi];
        if beta == 0.0 {
            col.fill(0.0);
        } else {
            col.iter_mut().for_each(|x| *x *= beta);
        }
    }
}

/// t += sum over l of b[l] (row of NR) times a[l] (column of MR), in increasing l.
#[inline(always)]
fn tile_kernel(kc: usize, a: &[f64], b: &[f64], t: &mut [[f64; MR]; NR]) {
    for (av, bv) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        for j in 0..NR {
            let bj = bv[j];
            for i in 0..MR {
                t[j][i] += bj * av[i];
            }
        }
    }
}

/// C(region) += op_a * op_b over m x n x k, where `op_a(i, l)` and `op_b(l, j)` (alpha already
/// applied) read the operands; blocked and packed as the section comment describes.
#[allow(clippy::too_many_arguments)]
fn blocked(
    m: usize,
    n: usize,
    k: usize,
    op_a: impl Fn(usize, usize) -> f64,
    op_b: impl Fn(usize, usize) -> f64,
    c: &mut [f64],
    ldc: usize,
    region: Region,
) {
    let kc_max = KC.min(k);
    let mut apack = vec![0.0; MC.min(m.div_ceil(MR) * MR) * kc_max];
    let mut bpack = vec![0.0; NC.min(n.div_ceil(NR) * NR) * kc_max];
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        if !region.meets(0, m, jc, jc + nc) {
            continue;
        }
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            // op(B) panels of NR columns: bpack[q][l * NR + j], zero-padded.
            for (q, panel) in bpack
                .chunks_exact_mut(kc * NR)
                .take(nc.div_ceil(NR))
                .enumerate()
            {
                for l in 0..kc {
                    for j in 0..NR {
                        let col = jc + q * NR + j;
                        panel[l * NR + j] = if col < jc + nc {
                            op_b(pc + l, col)
                        } else {
                            0.0
                        };
                    }
                }
            }
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                if !region.meets(ic, ic + mc, jc, jc + nc) {
                    continue;
                }
                // op(A) panels of MR rows: apack[p][l * MR + i], zero-padded.
                for (p, panel) in apack
                    .chunks_exact_mut(kc * MR)
                    .take(mc.div_ceil(MR))
                    .enumerate()
                {
                    for l in 0..kc {
                        for i in 0..MR {
                            let row = ic + p * MR + i;
                            panel[l * MR + i] = if row < ic + mc {
                                op_a(row, pc + l)
                            } else {
                                0.0
                            };
                        }
                    }
                }
                for q in 0..nc.div_ceil(NR) {
                    let j0 = jc + q * NR;
                    let nr = NR.min(jc + nc - j0);
                    let bp = &bpack[q * kc * NR..(q + 1) * kc * NR];
                    for p in 0..mc.div_ceil(MR) {
                        let i0 = ic + p * MR;
                        let mr = MR.min(ic + mc - i0);
                        if !region.meets(i0, i0 + mr, j0, j0 + nr) {
                            continue;
                        }
                        let ap = &apack[p * kc * MR..(p + 1) * kc * MR];
                        let whole = mr == MR && nr == NR && region.covers(i0, i0 + mr, j0, j0 + nr);
                        let mut t = [[0.0; MR]; NR];
                        for (j, tj) in t.iter_mut().enumerate().take(nr) {
                            for (i, x) in tj.iter_mut().enumerate().take(mr) {
                                if whole || region.contains(i0 + i, j0 + j) {
                                    *x = c[(j0 + j) * ldc + i0 + i];
                                }
                            }
                        }
                        tile_kernel(kc, ap, bp, &mut t);
                        for (j, tj) in t.iter().enumerate().take(nr) {
                            for (i, x) in tj.iter().enumerate().take(mr) {
                                if whole || region.contains(i0 + i, j0 + j) {
                                    c[(j0 + j) * ldc + i0 + i] = *x;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Built-in dgemm: C = alpha op(A) op(B) + beta C with reference-BLAS semantics.
///
/// `c` holds C column-major, `args.ldc` apart, at least `ldc * (n - 1) + m` elements when
/// m, n > 0. When `alpha == 0` or `k == 0`, A and B are not read (they may be empty).
///
/// # Panics
/// - `c`, `args.a` or `args.b` is shorter than the shape it must hold (a caller bug; the
///   shim's decoder builds them from checked dimensions).
pub fn gemm(args: &GemmArgs<'_>, c: &mut [f64]) {
    let (m, n, k) = (args.m, args.n, args.k);
    if quick_return(m, n, k, args.alpha, args.beta) {
        return;
    }
    if args.transa == Trans::Yes && args.alpha != 0.0 {
        let (op_a, op_b) = (|i, l| args.op_a(i, l), |l, j| args.op_b(l, j));
        let form = DotForm {
            m,
            n,
            k,
            alpha: args.alpha,
            beta: args.beta,
        };
        return form.run(op_a, op_b, c, args.ldc, Region::Full);
    }
    scale(c, args.ldc, m, n, args.beta, Region::Full);
    if args.alpha == 0.0 || k == 0 {
        return;
    }
    let alpha = args.alpha;
    blocked(
        m,
        n,
        k,
        |i, l| args.op_a(i, l),
        |l, j| alpha * args.op_b(l, j),
        c,
        args.ldc,
        Region::Full,
    );
}

/// The reference's dot-product form (dgemm with `op(A) = A^T`, dsyrk with `trans = T`):
/// `temp = op(A) op(B)` summed from +0, then `C = alpha temp` (beta = 0) or
/// `alpha temp + beta C`, with k = 0 too (temp = +0). Scaling by alpha last is what decides
/// NaN against Inf for an infinite alpha (`Inf x 0` only where temp is 0, so everywhere when
/// k = 0) and the sign of zero results (`alpha x +0`, and `+0 + beta C` for a zero `beta C`),
/// which the axpy form of the blocked kernel, or scaling C alone, would get differently.
struct DotForm {
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    beta: f64,
}

impl DotForm {
    fn run(
        &self,
        op_a: impl Fn(usize, usize) -> f64,
        op_b: impl Fn(usize, usize) -> f64,
        c: &mut [f64],
        ldc: usize,
        region: Region,
    ) {
        let (m, n) = (self.m, self.n);
        let mut temp = vec![0.0; m * n];
        if self.k > 0 {
            blocked(m, n, self.k, op_a, op_b, &mut temp, m, region);
        }
        for j in 0..n {
            for i in (0..m).filter(|&i| region.contains(i, j)) {
                let (t, x) = (temp[i + j * m], &mut c[i + j * ldc]);
                *x = if self.beta == 0.0 {
                    self.alpha * t
                } else {
                    self.alpha * t + self.beta * *x
                };
            }
        }
    }
}

/// Built-in dsyrk: C = alpha op(A) op(A)^T + beta C on the `uplo` triangle only (the other
/// triangle is neither read nor written), reference-BLAS semantics.
///
/// # Panics
/// - `c` or `args.a` is shorter than the shape it must hold.
pub fn syrk(args: &SyrkArgs<'_>, c: &mut [f64]) {
    let (n, k) = (args.n, args.k);
    if quick_return(n, n, k, args.alpha, args.beta) {
        return;
    }
    let region = match args.uplo {
        Uplo::Upper => Region::Upper,
        Uplo::Lower => Region::Lower,
    };
    if args.trans == Trans::Yes && args.alpha != 0.0 {
        let form = DotForm {
            m: n,
            n,
            k,
            alpha: args.alpha,
            beta: args.beta,
        };
        let op_a = |i, l| args.op_a(i, l);
        return form.run(op_a, |l, j| args.op_a(j, l), c, args.ldc, region);
    }
    scale(c, args.ldc, n, n, args.beta, region);
    if args.alpha == 0.0 || k == 0 {
        return;
    }
    let alpha = args.alpha;
    if !alpha.is_finite()
        || (0..k).any(|l| (0..n).any(|i| !args.op_a(i, l).is_finite()))
        || has_negative_zero(c, args.ldc, n, region)
    {
        return syrk_columns_skipping_zeros(args, c, region);
    }
    blocked(
        n,
        n,
        k,
        |i, l| args.op_a(i, l),
        |l, j| alpha * args.op_a(j, l),
        c,
        args.ldc,
        region,
    );
}

/// Whether the region of the n x n C holds a `-0` (after the beta scaling): adding a skipped
/// term `+0` would turn it into `+0`.
fn has_negative_zero(c: &[f64], ldc: usize, n: usize, region: Region) -> bool {
    (0..n).any(|j| {
        let rows = match region {
            Region::Upper => 0..j + 1,
            _ => j..n,
        };
        rows.into_iter().any(|i| {
            let x = c[i + j * ldc];
            x == 0.0 && x.is_sign_negative()
        })
    })
}

/// The reference's dsyrk column loop for `trans = N` (after the beta scaling): for each
/// column j and l in increasing order, `C(i,j) += (alpha A(j,l)) A(i,l)` over the triangle's
/// rows, skipping a zero multiplier `A(j,l)`. The blocked kernel adds those skipped terms
/// too. With finite alpha and A they are zeros, which change an element only when it is
/// `-0` (`-0 + +0 = +0`), and that can only be so when C starts at `-0` (a sum of nonzero
/// terms that cancels is `+0`); with an infinite or NaN alpha or `A(i,l)` they are NaN
/// (`Inf x 0`, `0 x Inf`). Such calls run this loop instead.
fn syrk_columns_skipping_zeros(args: &SyrkArgs<'_>, c: &mut [f64], region: Region) {
    let (n, ldc) = (args.n, args.ldc);
    for j in 0..n {
        let (lo, hi) = match region {
            Region::Upper => (0, j + 1),
            _ => (j, n),
        };
        for l in 0..args.k {
            let ajl = args.op_a(j, l);
            if ajl == 0.0 {
                continue;
            }
            let temp = args.alpha * ajl;
            for i in lo..hi {
                c[i + j * ldc] += temp * args.op_a(i, l);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testutil::Rng;

    /// `len` deterministic values in [-1, 1).
    fn fill(rng: &mut Rng, len: usize) -> Vec<f64> {
        (0..len).map(|_| 2.0 * rng.uniform() - 1.0).collect()
    }

    const SIZES: [usize; 8] = [0, 1, 2, 3, 63, 64, 65, 257];
    const NAN_PAD: f64 = f64::NAN;

    fn check_close(got: &[f64], want: &[f64], k: usize, what: &str) {
        for (idx, (g, w)) in got.iter().zip(want).enumerate() {
            if w.is_nan() {
                assert!(
                    g.is_nan(),
                    "{what}: element {idx} should be untouched NaN, got {g}"
                );
                continue;
            }
            let tol = 4.0 * (k as f64 + 2.0) * f64::EPSILON * (1.0 + w.abs()) * (k as f64).max(1.0);
            assert!((g - w).abs() <= tol, "{what}: element {idx}: {g} vs {w}");
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm_case(
        rng: &mut Rng,
        ta: Trans,
        tb: Trans,
        m: usize,
        n: usize,
        k: usize,
        alpha: f64,
        beta: f64,
    ) {
        let (ar, ac) = if ta == Trans::No { (m, k) } else { (k, m) };
        let (br, bc) = if tb == Trans::No { (k, n) } else { (n, k) };
        let (lda, ldb, ldc) = (ar.max(1) + 3, br.max(1) + 1, m.max(1) + 2);
        let a = fill(rng, lda * ac.max(1));
        let b = fill(rng, ldb * bc.max(1));
        let mut c0 = fill(rng, ldc * n.max(1));
        for j in 0..n.max(1) {
            for i in m..ldc {
                c0[i + j * ldc] = NAN_PAD; // padding rows must stay untouched
            }
        }
        if beta == 0.0 && m > 0 && n > 0 {
            c0[0] = f64::NAN; // beta == 0 must not read C
        }
        let args = GemmArgs {
            transa: ta,
            transb: tb,
            m,
            n,
            k,
            alpha,
            a: &a,
            lda,
            b: &b,
            ldb,
            beta,
            ldc,
        };
        let mut got = c0.clone();
        gemm(&args, &mut got);
        let mut want = c0.clone();
        crate::testutil::reference_gemm(&args, &mut want);
        let what = format!("gemm {ta:?}{tb:?} m={m} n={n} k={k} alpha={alpha} beta={beta}");
        let same = got
            .iter()
            .zip(&want)
            .all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()));
        assert!(same, "{what}: not bit-identical to the reference loops");
    }

    #[test]
    fn gemm_matches_reference_loops_at_tile_edges() {
        let mut rng = Rng::new(0x9E3779B97F4A7C15);
        let trans = [Trans::No, Trans::Yes];
        for ta in trans {
            for tb in trans {
                for &s in &SIZES {
                    gemm_case(&mut rng, ta, tb, s, s, s, 1.5, -0.5);
                }
                for &m in &[1, 3, 64, 65] {
                    for &n in &[0, 2, 63, 65] {
                        for &k in &[1, 3, 64, 257] {
                            gemm_case(&mut rng, ta, tb, m, n, k, -1.0, 0.0);
                        }
                    }
                }
                gemm_case(&mut rng, ta, tb, 257, 65, 300, 2.0, 1.0);
            }
        }
    }

    #[test]
    fn gemm_alpha_beta_special_cases() {
        let mut rng = Rng::new(7);
        for (alpha, beta) in [(0.0, 0.0), (0.0, 2.0), (0.0, 1.0), (1.0, 1.0), (2.5, 0.0)] {
            for k in [0, 5] {
                gemm_case(&mut rng, Trans::No, Trans::Yes, 5, 6, k, alpha, beta);
            }
        }
        // alpha == 0: A and B are not read, even when empty.
        let mut c = vec![f64::NAN, 2.0, 3.0, 4.0];
        let args = GemmArgs {
            transa: Trans::No,
            transb: Trans::No,
            m: 2,
            n: 2,
            k: 3,
            alpha: 0.0,
            a: &[],
            lda: 2,
            b: &[],
            ldb: 3,
            beta: 0.0,
            ldc: 2,
        };
        gemm(&args, &mut c);
        assert_eq!(c, [0.0; 4]);
    }

    fn naive_syrk(s: &SyrkArgs<'_>, c: &mut [f64]) {
        let n = s.n;
        for j in 0..n {
            for i in 0..n {
                let inside = match s.uplo {
                    Uplo::Upper => i <= j,
                    Uplo::Lower => i >= j,
                };
                if !inside {
                    continue;
                }
                let mut sum = 0.0;
                for l in 0..s.k {
                    sum += s.op_a(i, l) * s.op_a(j, l);
                }
                let x = &mut c[i + j * s.ldc];
                *x = if s.beta == 0.0 {
                    s.alpha * sum
                } else {
                    s.alpha * sum + s.beta * *x
                };
            }
        }
    }

    #[test]
    fn syrk_matches_naive_and_leaves_the_other_triangle_alone() {
        let mut rng = Rng::new(42);
        for uplo in [Uplo::Upper, Uplo::Lower] {
            for trans in [Trans::No, Trans::Yes] {
                for &n in &SIZES {
                    for &k in &[0usize, 1, 3, 64, 65, 257] {
                        if n == 257 && k == 257 {
                            continue;
                        }
                        let (ar, ac) = if trans == Trans::No { (n, k) } else { (k, n) };
                        let (lda, ldc) = (ar.max(1) + 1, n.max(1) + 3);
                        let a = fill(&mut rng, lda * ac.max(1));
                        let mut c0 = fill(&mut rng, ldc * n.max(1));
                        for j in 0..n {
                            for i in 0..ldc {
                                let outside = i >= n
                                    || match uplo {
                                        Uplo::Upper => i > j,
                                        Uplo::Lower => i < j,
                                    };
                                if outside {
                                    c0[i + j * ldc] = NAN_PAD;
                                }
                            }
                        }
                        for (alpha, beta) in [(0.75, 0.25), (-1.0, 0.0)] {
                            let s = SyrkArgs {
                                uplo,
                                trans,
                                n,
                                k,
                                alpha,
                                a: &a,
                                lda,
                                beta,
                                ldc,
                            };
                            let mut got = c0.clone();
                            syrk(&s, &mut got);
                            let mut want = c0.clone();
                            if !(n == 0 || (k == 0 && beta == 1.0)) {
                                naive_syrk(&s, &mut want);
                            }
                            check_close(
                                &got,
                                &want,
                                k,
                                &format!("syrk {uplo:?} {trans:?} n={n} k={k}"),
                            );
                        }
                    }
                }
            }
        }
    }

    /// Special scalars and zero signs follow the reference loops bit for bit: NaN only where
    /// the reference meets Inf x 0 (NN: any zero term; TN: a zero sum, so every element when
    /// k = 0), -0 = alpha x (+0) and +0 = alpha x 0 + (-0) in the dot form, NaN and infinite
    /// beta as the reference scales with them; dsyrk with trans = N skips zero multipliers,
    /// as the reference does, where a skipped term would be NaN (an infinite or NaN alpha, an
    /// infinite entry of A) or would turn a -0 of C into +0.
    #[test]
    fn special_scalars_and_signed_zeros_match_the_reference_loops() {
        let a = [1.0, 0.0, -0.0, 2.0, 3.0, -1.0, 0.0, 1.0, 1.0];
        let b = [1.0, 0.0, 2.0, -0.0, 1.0, 1.0, -1.0, 0.0, 0.0];
        let same = |got: &[f64], want: &[f64], what: &str| {
            for (g, w) in got.iter().zip(want) {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{what}: {got:?} vs {want:?}"
                );
            }
        };
        let scalars = [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -1.0,
            2.0,
            0.0,
            -0.0,
            5e-324,
        ];
        let c_starts: [[f64; 9]; 3] = [
            [0.0, -0.0, 1.0, 0.0, -0.0, 0.0, 2.0, 0.0, -0.0],
            [-0.0; 9],
            [1.5, f64::NAN, -0.0, 1.5, 2.0, f64::INFINITY, -0.0, 0.0, 1.5],
        ];
        for alpha in scalars {
            for beta in [0.0, -0.0, 1.0, -1.0, f64::NAN, f64::INFINITY] {
                for k in [0, 3] {
                    for c0 in c_starts {
                        for ta in [Trans::No, Trans::Yes] {
                            for tb in [Trans::No, Trans::Yes] {
                                let args = GemmArgs {
                                    transa: ta,
                                    transb: tb,
                                    alpha,
                                    beta,
                                    lda: 3,
                                    ldb: 3,
                                    ..GemmArgs::product(3, 3, k, &a, &b)
                                };
                                let (mut got, mut want) = (c0, c0);
                                gemm(&args, &mut got);
                                crate::testutil::reference_gemm(&args, &mut want);
                                same(
                                    &got,
                                    &want,
                                    &format!("gemm {ta:?}{tb:?} k {k} alpha {alpha} beta {beta}"),
                                );
                            }
                        }
                        // A as given, with an infinite entry beside zeros of its row and
                        // column, and with a zero row (only skipped terms in its element of
                        // the diagonal)
                        let mut with_inf = a;
                        with_inf[3] = f64::INFINITY;
                        let mut zero_row = a;
                        for l in 0..3 {
                            zero_row[3 * l] = 0.0;
                        }
                        for a in [&a, &with_inf, &zero_row] {
                            for trans in [Trans::No, Trans::Yes] {
                                for uplo in [Uplo::Lower, Uplo::Upper] {
                                    let args = SyrkArgs {
                                        uplo,
                                        trans,
                                        n: 3,
                                        k,
                                        alpha,
                                        a,
                                        lda: 3,
                                        beta,
                                        ldc: 3,
                                    };
                                    let (mut got, mut want) = (c0, c0);
                                    syrk(&args, &mut got);
                                    crate::testutil::reference_syrk(&args, &mut want);
                                    same(
                                        &got,
                                        &want,
                                        &format!(
                                            "syrk {uplo:?} {trans:?} k {k} alpha {alpha} beta {beta} {a:?} C {c0:?}"
                                        ),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
