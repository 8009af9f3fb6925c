//! The caller's arguments: the only module that reads raw caller pointers.
//!
//! Each exported stub packs its arguments, untouched, into one of four raw structs
//! ([`FortranGemm`], [`FortranSyrk`], [`CblasGemm`], [`CblasSyrk`], generic over the integer
//! width). [`RawCall::decode`] reads the scalars once and checks them exactly as the reference
//! BLAS does (LAPACK 3.11 `dgemm.f`, `dsyrk.f`, CBLAS `cblas_dgemm.c`, `cblas_dsyrk.c`), giving
//! a [`Decoded`]: the call's [`Shape`] in the caller's own terms (what the trace records) and a
//! [`Verdict`]:
//!
//! - [`Verdict::Illegal`]: a parameter is illegal for the reference;
//! - [`Verdict::Quick`]: the reference returns without touching C (`m == 0`, `n == 0`, or
//!   `(alpha == 0 || k == 0) && beta == 1`);
//! - [`Verdict::Compute`]: a column-major [`Canon`] call. Row-major CBLAS calls are converted
//!   the way reference CBLAS converts them (a row-major C = op(A) op(B) is the column-major
//!   C^T = op(B)^T op(A)^T; a row-major syrk flips `uplo` and `trans`), so routes see one
//!   storage order.
//!
//! Only [`Verdict::Compute`] calls are computed by the shim. The other two go to the vendor
//! BLAS unchanged ([`RawCall::forward`]): vendors differ from the reference at the edges
//! (OpenBLAS accepts `ld >= rows`, so `k = 0` with `ldb = 0` scales C there; it reports an
//! illegal CBLAS layout through `xerbla_`), and the vendor route must be the vendor, its
//! checks, handlers and quick returns included. Only when no vendor BLAS exists does the shim
//! report an illegal call itself, as the reference would ([`xerbla`]): `xerbla_`, or
//! `cblas_xerbla` with CBLAS numbering, C never touched.
//!
//! [`RawCall::forward`] calls a vendor function with the original arguments, Fortran hidden
//! string lengths included, so a fallback is bit-for-bit the call the program made. Its
//! function types are `extern "C-unwind"`: an exception a C++ error handler throws inside the
//! vendor unwinds through to the program.
//!
//! ## Reference error numbering
//! Fortran `dgemm`: 1 transa, 2 transb, 3 m, 4 n, 5 k, 8 lda, 10 ldb, 13 ldc; `dsyrk`: 1 uplo,
//! 2 trans, 3 n, 4 k, 7 lda, 10 ldc (the table `arg`, which every decoder here and the
//! device-resident entry points read).
//! CBLAS adds the layout argument (1) in front. Reference CBLAS (LAPACK 3.11, Debian 12's
//! `libblas3`) reports an illegal enum itself through `cblas_xerbla(position, "cblas_dgemm",
//! form, value)` (its row-major branch reports an illegal `TransB` as 2 and an illegal
//! dsyrk `Uplo` as 3: reproduced), but detects dimension errors by calling the Fortran routine,
//! so they reach `xerbla_("DGEMM ", fortran_info)` for the swapped Fortran call (row-major
//! dgemm: N before M, ldb before lda) with the CBLAS globals `CBLAS_CallFromC = 1` and
//! `RowMajorStrg = (layout == RowMajor)`. The library's own `xerbla_` then calls
//! `cblas_xerbla(info + 1)`, which undoes the row-major swap when `RowMajorStrg` is set; a
//! program's own `xerbla_` (the CBLAS tester `xdcblat3`'s) sees the Fortran numbers. We make
//! the same calls with the same globals (when the BLAS defines them), so every handler sees
//! what it sees without the shim. [`Illegal::info`] is the position in the caller's argument
//! list, for the trace.

pub mod c_view;
pub mod xerbla;

pub use c_view::{CBlock, CView, Region};
use libc::{c_char, c_int, c_void};
use ozaki_core::blas::{GemmArgs, SyrkArgs, Trans, Uplo, quick_return, span};
use ozaki_core::trace::{Layout, Routine};
use std::ffi::CStr;

/// A BLAS integer: `i32` (LP64) or `i64` (ILP64).
pub trait BlasInt: Copy + 'static {
    /// Widening conversion.
    fn to_i64(self) -> i64;
    /// Narrowing conversion for values that fit (parameter positions).
    fn from_small(v: i64) -> Self;
}

impl BlasInt for i32 {
    fn to_i64(self) -> i64 {
        i64::from(self)
    }
    fn from_small(v: i64) -> Self {
        v as i32
    }
}

impl BlasInt for i64 {
    fn to_i64(self) -> i64 {
        self
    }
    fn from_small(v: i64) -> Self {
        v
    }
}

/// CBLAS enum values (`cblas.h`).
pub mod cblas {
    /// `CblasRowMajor`.
    pub const ROW_MAJOR: i32 = 101;
    /// `CblasColMajor`.
    pub const COL_MAJOR: i32 = 102;
    /// `CblasNoTrans`.
    pub const NO_TRANS: i32 = 111;
    /// `CblasTrans`.
    pub const TRANS: i32 = 112;
    /// `CblasConjTrans`.
    pub const CONJ_TRANS: i32 = 113;
    /// `CblasUpper`.
    pub const UPPER: i32 = 121;
    /// `CblasLower`.
    pub const LOWER: i32 = 122;
}

/// Fortran `dgemm_` arguments as received.
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct FortranGemm<I> {
    pub transa: *const c_char,
    pub transb: *const c_char,
    pub m: *const I,
    pub n: *const I,
    pub k: *const I,
    pub alpha: *const f64,
    pub a: *const f64,
    pub lda: *const I,
    pub b: *const f64,
    pub ldb: *const I,
    pub beta: *const f64,
    pub c: *mut f64,
    pub ldc: *const I,
    pub transa_len: usize,
    pub transb_len: usize,
}

/// Fortran `dsyrk_` arguments as received.
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct FortranSyrk<I> {
    pub uplo: *const c_char,
    pub trans: *const c_char,
    pub n: *const I,
    pub k: *const I,
    pub alpha: *const f64,
    pub a: *const f64,
    pub lda: *const I,
    pub beta: *const f64,
    pub c: *mut f64,
    pub ldc: *const I,
    pub uplo_len: usize,
    pub trans_len: usize,
}

/// `cblas_dgemm` arguments as received.
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct CblasGemm<I> {
    pub layout: c_int,
    pub transa: c_int,
    pub transb: c_int,
    pub m: I,
    pub n: I,
    pub k: I,
    pub alpha: f64,
    pub a: *const f64,
    pub lda: I,
    pub b: *const f64,
    pub ldb: I,
    pub beta: f64,
    pub c: *mut f64,
    pub ldc: I,
}

/// `cblas_dsyrk` arguments as received.
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct CblasSyrk<I> {
    pub layout: c_int,
    pub uplo: c_int,
    pub trans: c_int,
    pub n: I,
    pub k: I,
    pub alpha: f64,
    pub a: *const f64,
    pub lda: I,
    pub beta: f64,
    pub c: *mut f64,
    pub ldc: I,
}

/// One call in the caller's own terms: what a trace record shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// dgemm or dsyrk.
    pub routine: Routine,
    /// Storage order the caller used.
    pub layout: Layout,
    /// dgemm: transa; dsyrk: uplo. An upper-case letter, or `?` when illegal.
    pub flag1: u8,
    /// dgemm: transb; dsyrk: trans.
    pub flag2: u8,
    /// Rows of C (dsyrk: n).
    pub m: i64,
    /// Columns of C.
    pub n: i64,
    /// Inner dimension.
    pub k: i64,
    /// Leading dimension of A.
    pub lda: i64,
    /// Leading dimension of B (dsyrk: 0).
    pub ldb: i64,
    /// Leading dimension of C.
    pub ldc: i64,
    /// alpha.
    pub alpha: f64,
    /// beta.
    pub beta: f64,
    /// 64-bit integers.
    pub ilp64: bool,
}

/// A validated column-major call: raw pointers plus checked dimensions.
#[derive(Debug, Clone, Copy)]
pub enum Canon {
    /// C = alpha op(A) op(B) + beta C.
    Gemm {
        /// op(A).
        transa: Trans,
        /// op(B).
        transb: Trans,
        /// Rows of C.
        m: usize,
        /// Columns of C.
        n: usize,
        /// Inner dimension.
        k: usize,
        /// alpha.
        alpha: f64,
        /// A.
        a: *const f64,
        /// Leading dimension of A.
        lda: usize,
        /// B.
        b: *const f64,
        /// Leading dimension of B.
        ldb: usize,
        /// beta.
        beta: f64,
        /// C.
        c: *mut f64,
        /// Leading dimension of C.
        ldc: usize,
    },
    /// C = alpha op(A) op(A)^T + beta C on one triangle.
    Syrk {
        /// Triangle.
        uplo: Uplo,
        /// `No`: C = A A^T; `Yes`: C = A^T A.
        trans: Trans,
        /// Order of C.
        n: usize,
        /// Inner dimension.
        k: usize,
        /// alpha.
        alpha: f64,
        /// A.
        a: *const f64,
        /// Leading dimension of A.
        lda: usize,
        /// beta.
        beta: f64,
        /// C.
        c: *mut f64,
        /// Leading dimension of C.
        ldc: usize,
    },
}

/// Views of a [`Canon`] call's matrices, for the non-vendor routes.
///
/// C is a [`CView`] of the elements the call writes (never a slice over its strided span,
/// whose gaps may be another thread's); a route gets a contiguous block of it from
/// [`CView::block`] and writes it only once its whole result is ready. When `alpha == 0` or
/// `k == 0` the reference BLAS reads neither A nor B (callers may pass NULL then), so `a` and
/// `b` are empty: a route must not index them in that case.
#[derive(Debug)]
pub enum Operands<'a> {
    /// dgemm.
    Gemm(GemmArgs<'a>, CView),
    /// dsyrk.
    Syrk(SyrkArgs<'a>, CView),
}

/// A slice over a caller matrix; empty (never dereferencing `p`) when `len == 0`.
///
/// # Safety
/// - when `len > 0`, `p` points to `len` readable `f64` that stay valid and unwritten by
///   anyone else for `'a` (the BLAS calling contract for A and B).
unsafe fn read_slice<'a>(p: *const f64, len: usize) -> &'a [f64] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract above; BLAS requires A/B to span their logical shape.
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}

impl Canon {
    /// Multiply-adds of the product (dsyrk: n·n·k, both triangles counted), saturating.
    pub fn mnk(&self) -> u64 {
        let (m, n, k) = match *self {
            Canon::Gemm { m, n, k, .. } => (m, n, k),
            Canon::Syrk { n, k, .. } => (n, n, k),
        };
        (m as u64).saturating_mul(n as u64).saturating_mul(k as u64)
    }

    /// Views of A, B and C.
    ///
    /// # Safety
    /// - the pointers came from a call that passed [`RawCall::decode`], and the caller's
    ///   arrays are valid for the whole call (the BLAS contract);
    /// - while the views are used, nothing else writes C's elements (the call's region).
    pub unsafe fn operands<'a>(&self) -> Operands<'a> {
        match *self {
            Canon::Gemm {
                transa,
                transb,
                m,
                n,
                k,
                alpha,
                a,
                lda,
                b,
                ldb,
                beta,
                c,
                ldc,
            } => {
                let reads = alpha != 0.0 && k > 0;
                let (ar, ac) = if transa == Trans::No { (m, k) } else { (k, m) };
                let (br, bc) = if transb == Trans::No { (k, n) } else { (n, k) };
                // SAFETY: decode checked lda >= rows of A and ldb >= rows of B, so the spans are
                // inside the caller's arrays, and ldc >= m for C's region; the contract above
                // covers validity.
                let (a, b, c) = unsafe {
                    (
                        read_slice(a, if reads { span(ar, ac, lda) } else { 0 }),
                        read_slice(b, if reads { span(br, bc, ldb) } else { 0 }),
                        CView::new(c, Region::gemm(m, n, ldc)),
                    )
                };
                Operands::Gemm(
                    GemmArgs {
                        transa,
                        transb,
                        m,
                        n,
                        k,
                        alpha,
                        a,
                        lda,
                        b,
                        ldb,
                        beta,
                        ldc,
                    },
                    c,
                )
            }
            Canon::Syrk {
                uplo,
                trans,
                n,
                k,
                alpha,
                a,
                lda,
                beta,
                c,
                ldc,
            } => {
                let reads = alpha != 0.0 && k > 0;
                let (ar, ac) = if trans == Trans::No { (n, k) } else { (k, n) };
                // SAFETY: as above (lda >= rows of A, ldc >= n checked by decode).
                let (a, c) = unsafe {
                    (
                        read_slice(a, if reads { span(ar, ac, lda) } else { 0 }),
                        CView::new(c, Region::syrk(n, ldc, uplo)),
                    )
                };
                Operands::Syrk(
                    SyrkArgs {
                        uplo,
                        trans,
                        n,
                        k,
                        alpha,
                        a,
                        lda,
                        beta,
                        ldc,
                    },
                    c,
                )
            }
        }
    }
}

/// How to report an illegal argument, exactly as the reference would.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Illegal {
    /// Position of the offending parameter in the caller's argument list (1-based, CBLAS
    /// counting the layout argument).
    pub info: i64,
    /// How the reference reaches its error handler.
    pub report: Report,
}

/// The error-handler call the reference makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Report {
    /// `xerbla_(srname, &arg, 6)` with the Fortran routine name (`"DGEMM "`).
    Fortran {
        /// Six-character routine name, NUL-terminated for C handlers (the length passed is 6).
        srname: &'static [u8; 7],
        /// Fortran info code (of the swapped Fortran call, for a row-major CBLAS call).
        arg: i64,
        /// For a CBLAS call: `Some(row_major)`, the value of `RowMajorStrg` during the report
        /// (and `CBLAS_CallFromC = 1`).
        cblas: Option<bool>,
    },
    /// `cblas_xerbla(arg, rout, form, value)`: an illegal CBLAS enum.
    Cblas {
        /// `"cblas_dgemm"` / `"cblas_dsyrk"`.
        rout: &'static CStr,
        /// The number the reference passes (differs from [`Illegal::info`] for its row-major
        /// `TransB` quirk).
        arg: i64,
        /// Whether the reference has `RowMajorStrg = 1` during the call.
        row_major: bool,
        /// printf format (`"Illegal TransA setting, %d\n"`).
        form: &'static CStr,
        /// The illegal enum value printed by `form`.
        value: c_int,
    },
}

/// What a call asks for.
#[derive(Debug, Clone, Copy)]
pub enum Verdict {
    /// Compute this column-major call.
    Compute(Canon),
    /// Reference quick return: C is not touched.
    Quick,
    /// An illegal argument: report it, touch nothing.
    Illegal(Illegal),
}

/// A decoded call.
#[derive(Debug, Clone, Copy)]
pub struct Decoded {
    /// What the trace records.
    pub shape: Shape,
    /// What to do.
    pub verdict: Verdict,
}

/// Arguments of one exported routine and ABI.
pub trait RawCall: Copy {
    /// The routine.
    const ROUTINE: Routine;

    /// Reads and checks the arguments.
    ///
    /// # Safety
    /// - every pointer argument the reference routine reads unconditionally (the character
    ///   flags and the integer and scalar arguments, for Fortran) is valid, as the BLAS
    ///   calling contract requires.
    unsafe fn decode(&self) -> Decoded;

    /// Calls `f`, a vendor implementation of the same exported name, with these arguments.
    ///
    /// # Safety
    /// - `f` is the address of a function with exactly this name's C signature;
    /// - the arguments satisfy the BLAS calling contract (as they did for our caller).
    unsafe fn forward(&self, f: *const c_void);
}

/// Upper-case letter of a BLAS flag, as `lsame` compares it.
fn upper(ch: u8) -> u8 {
    ch.to_ascii_uppercase()
}

/// A flag for the trace: upper-case letter, or `?` when not a letter.
fn shown(ch: u8) -> u8 {
    if ch.is_ascii_alphabetic() {
        upper(ch)
    } else {
        b'?'
    }
}

/// Fortran transpose letter: `Some(No|Yes)` for N/T/C (any case).
#[inline(always)]
fn trans_letter(ch: u8) -> Option<Trans> {
    match upper(ch) {
        b'N' => Some(Trans::No),
        b'T' | b'C' => Some(Trans::Yes),
        _ => None,
    }
}

/// `max(1, x)` in the reference's leading-dimension checks.
fn max1(x: i64) -> i64 {
    x.max(1)
}

/// Fortran triangle letter: `Some(Upper|Lower)` for U/L (any case).
fn uplo_letter(ch: u8) -> Option<Uplo> {
    match upper(ch) {
        b'U' => Some(Uplo::Upper),
        b'L' => Some(Uplo::Lower),
        _ => None,
    }
}

/// Reference argument positions: the INFO each check of LAPACK 3.11 `dgemm.f` /
/// `dsyrk.f` passes to `xerbla`, which `ozaki_*_device` return negated and CBLAS shifts by
/// its leading layout argument ([`arg::cblas`]). Every decoder takes its numbers from here.
mod arg {
    /// `DGEMM(TRANSA, TRANSB, M, N, K, ALPHA, A, LDA, B, LDB, BETA, C, LDC)`.
    pub mod gemm {
        pub const TRANSA: i64 = 1;
        pub const TRANSB: i64 = 2;
        pub const M: i64 = 3;
        pub const N: i64 = 4;
        pub const K: i64 = 5;
        pub const LDA: i64 = 8;
        pub const LDB: i64 = 10;
        pub const LDC: i64 = 13;
        /// Reference CBLAS calls a row-major dgemm as the Fortran dgemm with M/N and A/B
        /// swapped; these pairs of Fortran positions trade places between that call and the
        /// caller's list (`cblas_xerbla`'s `RowMajorStrg` mapping, 4 <-> 5 and 9 <-> 11 in
        /// CBLAS numbers).
        pub const ROW_MAJOR_SWAPS: [(i64, i64); 2] = [(M, N), (LDA, LDB)];
    }

    /// `DSYRK(UPLO, TRANS, N, K, ALPHA, A, LDA, BETA, C, LDC)`.
    pub mod syrk {
        pub const UPLO: i64 = 1;
        pub const TRANS: i64 = 2;
        pub const N: i64 = 3;
        pub const K: i64 = 4;
        pub const LDA: i64 = 7;
        pub const LDC: i64 = 10;
    }

    /// CBLAS's first argument, the layout.
    pub const CBLAS_LAYOUT: i64 = 1;

    /// The CBLAS position of Fortran argument `fortran` (the layout comes first).
    pub const fn cblas(fortran: i64) -> i64 {
        fortran + 1
    }

    /// The caller's Fortran position for position `pos` of a call made with `swaps` applied.
    pub fn unswap(pos: i64, swaps: &[(i64, i64)]) -> i64 {
        swaps
            .iter()
            .find_map(|&(x, y)| (pos == x).then_some(y).or((pos == y).then_some(x)))
            .unwrap_or(pos)
    }
}

/// The reference's argument checks as a table of (position, illegal?) in its check order:
/// the first illegal position (the Fortran info code), or 0 when all are legal.
#[inline(always)]
fn first_illegal(checks: &[(i64, bool)]) -> i64 {
    checks
        .iter()
        .find(|&&(_, illegal)| illegal)
        .map_or(0, |&(pos, _)| pos)
}

/// The checks of reference `dgemm.f`, column-major; returns the Fortran info code (0 = legal).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gemm_info(
    ta: Option<Trans>,
    tb: Option<Trans>,
    m: i64,
    n: i64,
    k: i64,
    lda: i64,
    ldb: i64,
    ldc: i64,
) -> i64 {
    use arg::gemm::*;
    // (only read once both letters passed)
    let nrowa = if ta == Some(Trans::No) { m } else { k };
    let nrowb = if tb == Some(Trans::No) { k } else { n };
    first_illegal(&[
        (TRANSA, ta.is_none()),
        (TRANSB, tb.is_none()),
        (M, m < 0),
        (N, n < 0),
        (K, k < 0),
        (LDA, lda < max1(nrowa)),
        (LDB, ldb < max1(nrowb)),
        (LDC, ldc < max1(m)),
    ])
}

/// The checks of reference `dsyrk.f`; returns the Fortran info code (0 = legal).
#[inline(always)]
fn syrk_info(uplo: Option<Uplo>, trans: Option<Trans>, n: i64, k: i64, lda: i64, ldc: i64) -> i64 {
    use arg::syrk::*;
    let nrowa = if trans == Some(Trans::No) { n } else { k };
    first_illegal(&[
        (UPLO, uplo.is_none()),
        (TRANS, trans.is_none()),
        (N, n < 0),
        (K, k < 0),
        (LDA, lda < max1(nrowa)),
        (LDC, ldc < max1(n)),
    ])
}

/// Non-negative dimension as `usize` (only called after the checks passed).
fn dim(x: i64) -> usize {
    usize::try_from(x).expect("dimension checked non-negative")
}

/// Column-major dgemm after the checks; shared by the Fortran and CBLAS decoders.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gemm_verdict(
    ta: Trans,
    tb: Trans,
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
) -> Verdict {
    if quick_return(dim(m), dim(n), dim(k), alpha, beta) {
        return Verdict::Quick;
    }
    Verdict::Compute(Canon::Gemm {
        transa: ta,
        transb: tb,
        m: dim(m),
        n: dim(n),
        k: dim(k),
        alpha,
        a,
        lda: dim(lda),
        b,
        ldb: dim(ldb),
        beta,
        c,
        ldc: dim(ldc),
    })
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn syrk_verdict(
    uplo: Uplo,
    trans: Trans,
    n: i64,
    k: i64,
    alpha: f64,
    a: *const f64,
    lda: i64,
    beta: f64,
    c: *mut f64,
    ldc: i64,
) -> Verdict {
    if quick_return(dim(n), dim(n), dim(k), alpha, beta) {
        return Verdict::Quick;
    }
    Verdict::Compute(Canon::Syrk {
        uplo,
        trans,
        n: dim(n),
        k: dim(k),
        alpha,
        a,
        lda: dim(lda),
        beta,
        c,
        ldc: dim(ldc),
    })
}

/// Fortran routine names as the reference passes them to `xerbla_` (six characters,
/// NUL-terminated for C handlers).
const DGEMM: &[u8; 7] = b"DGEMM \0";
const DSYRK: &[u8; 7] = b"DSYRK \0";

/// An illegal argument the reference reports through `xerbla_(srname, arg)`: `info` is the
/// position in the caller's list, `arg` the Fortran info code, `cblas` as in
/// [`Report::Fortran`].
fn fortran_illegal(srname: &'static [u8; 7], info: i64, arg: i64, cblas: Option<bool>) -> Verdict {
    Verdict::Illegal(Illegal {
        info,
        report: Report::Fortran { srname, arg, cblas },
    })
}

/// Decodes Fortran dgemm arguments once they are read (pure, for the tests; the
/// device-resident entry points decode with it too).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn decode_fortran_gemm(
    ta: u8,
    tb: u8,
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
    ilp64: bool,
) -> Decoded {
    let shape = Shape {
        routine: Routine::Dgemm,
        layout: Layout::Col,
        flag1: shown(ta),
        flag2: shown(tb),
        m,
        n,
        k,
        lda,
        ldb,
        ldc,
        alpha,
        beta,
        ilp64,
    };
    let (pa, pb) = (trans_letter(ta), trans_letter(tb));
    let verdict = match (pa, pb, gemm_info(pa, pb, m, n, k, lda, ldb, ldc)) {
        (Some(ta), Some(tb), 0) => {
            gemm_verdict(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        }
        (_, _, info) => fortran_illegal(DGEMM, info, info, None),
    };
    Decoded { shape, verdict }
}

/// Decodes Fortran dsyrk arguments once they are read (as [`decode_fortran_gemm`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn decode_fortran_syrk(
    ul: u8,
    tr: u8,
    n: i64,
    k: i64,
    alpha: f64,
    a: *const f64,
    lda: i64,
    beta: f64,
    c: *mut f64,
    ldc: i64,
    ilp64: bool,
) -> Decoded {
    let shape = Shape {
        routine: Routine::Dsyrk,
        layout: Layout::Col,
        flag1: shown(ul),
        flag2: shown(tr),
        m: n,
        n,
        k,
        lda,
        ldb: 0,
        ldc,
        alpha,
        beta,
        ilp64,
    };
    let (uplo, trans) = (uplo_letter(ul), trans_letter(tr));
    let verdict = match (uplo, trans, syrk_info(uplo, trans, n, k, lda, ldc)) {
        (Some(uplo), Some(trans), 0) => {
            syrk_verdict(uplo, trans, n, k, alpha, a, lda, beta, c, ldc)
        }
        (_, _, info) => fortran_illegal(DSYRK, info, info, None),
    };
    Decoded { shape, verdict }
}

/// CBLAS transpose enum as a trace letter and a transpose.
fn cblas_trans(v: c_int) -> (u8, Option<Trans>) {
    match v {
        cblas::NO_TRANS => (b'N', Some(Trans::No)),
        cblas::TRANS => (b'T', Some(Trans::Yes)),
        cblas::CONJ_TRANS => (b'C', Some(Trans::Yes)),
        _ => (b'?', None),
    }
}

fn cblas_layout(v: c_int) -> Option<Layout> {
    match v {
        cblas::ROW_MAJOR => Some(Layout::Row),
        cblas::COL_MAJOR => Some(Layout::Col),
        _ => None,
    }
}

/// An illegal CBLAS enum, reported through `cblas_xerbla(arg, rout, form, value)`
/// ([`Report::Cblas`]); `info` is its position in the caller's list.
fn cblas_illegal(
    rout: &'static CStr,
    info: i64,
    arg: i64,
    row_major: bool,
    form: &'static CStr,
    value: c_int,
) -> Verdict {
    Verdict::Illegal(Illegal {
        info,
        report: Report::Cblas {
            rout,
            arg,
            row_major,
            form,
            value,
        },
    })
}

/// An illegal CBLAS layout, reported the same way by `cblas_dgemm.c` and `cblas_dsyrk.c`
/// (before `RowMajorStrg` is set).
fn illegal_layout(rout: &'static CStr, value: c_int) -> Verdict {
    let pos = arg::CBLAS_LAYOUT;
    cblas_illegal(
        rout,
        pos,
        pos,
        false,
        c"Illegal layout setting, %d\n",
        value,
    )
}

/// Decodes `cblas_dgemm` (pure, for the tests); mirrors reference `cblas_dgemm.c`.
#[inline(always)]
pub(crate) fn decode_cblas_gemm(r: &CblasGemm<i64>, ilp64: bool) -> Decoded {
    const ROUT: &CStr = c"cblas_dgemm";
    let layout = cblas_layout(r.layout);
    let (fa, ta) = cblas_trans(r.transa);
    let (fb, tb) = cblas_trans(r.transb);
    let shape = Shape {
        routine: Routine::Dgemm,
        layout: layout.unwrap_or(Layout::Col),
        flag1: fa,
        flag2: fb,
        m: r.m,
        n: r.n,
        k: r.k,
        lda: r.lda,
        ldb: r.ldb,
        ldc: r.ldc,
        alpha: r.alpha,
        beta: r.beta,
        ilp64,
    };
    let Some(layout) = layout else {
        return Decoded {
            shape,
            verdict: illegal_layout(ROUT, r.layout),
        };
    };
    let row = layout == Layout::Row;
    let (transa, transb) = (arg::cblas(arg::gemm::TRANSA), arg::cblas(arg::gemm::TRANSB));
    let Some(ta) = ta else {
        return Decoded {
            shape,
            verdict: cblas_illegal(
                ROUT,
                transa,
                transa,
                row,
                c"Illegal TransA setting, %d\n",
                r.transa,
            ),
        };
    };
    let Some(tb) = tb else {
        // LAPACK 3.11's row-major branch reports an illegal TransB as TransA's position.
        let pos = if row { transa } else { transb };
        return Decoded {
            shape,
            verdict: cblas_illegal(
                ROUT,
                transb,
                pos,
                row,
                c"Illegal TransB setting, %d\n",
                r.transb,
            ),
        };
    };
    // The Fortran call reference CBLAS makes, and its checks.
    let (fta, ftb, fm, fn_, fa_, flda, fb_, fldb) = if row {
        (tb, ta, r.n, r.m, r.b, r.ldb, r.a, r.lda)
    } else {
        (ta, tb, r.m, r.n, r.a, r.lda, r.b, r.ldb)
    };
    let info = gemm_info(Some(fta), Some(ftb), fm, fn_, r.k, flda, fldb, r.ldc);
    if info != 0 {
        // Position in the caller's list: the swapped call's position mapped back (what
        // cblas_xerbla's RowMajorStrg mapping does), in CBLAS numbering.
        let caller = if row {
            arg::unswap(info, &arg::gemm::ROW_MAJOR_SWAPS)
        } else {
            info
        };
        return Decoded {
            shape,
            verdict: fortran_illegal(DGEMM, arg::cblas(caller), info, Some(row)),
        };
    }
    let verdict = gemm_verdict(
        fta, ftb, fm, fn_, r.k, r.alpha, fa_, flda, fb_, fldb, r.beta, r.c, r.ldc,
    );
    Decoded { shape, verdict }
}

/// Decodes `cblas_dsyrk` (pure, for the tests); mirrors reference `cblas_dsyrk.c`, including
/// its report of an illegal row-major `Uplo` as parameter 3.
#[inline(always)]
fn decode_cblas_syrk(r: &CblasSyrk<i64>, ilp64: bool) -> Decoded {
    const ROUT: &CStr = c"cblas_dsyrk";
    let layout = cblas_layout(r.layout);
    let uplo = match r.uplo {
        cblas::UPPER => Some(Uplo::Upper),
        cblas::LOWER => Some(Uplo::Lower),
        _ => None,
    };
    let (ft, trans) = cblas_trans(r.trans);
    let shape = Shape {
        routine: Routine::Dsyrk,
        layout: layout.unwrap_or(Layout::Col),
        flag1: match uplo {
            Some(Uplo::Upper) => b'U',
            Some(Uplo::Lower) => b'L',
            None => b'?',
        },
        flag2: ft,
        m: r.n,
        n: r.n,
        k: r.k,
        lda: r.lda,
        ldb: 0,
        ldc: r.ldc,
        alpha: r.alpha,
        beta: r.beta,
        ilp64,
    };
    let Some(layout) = layout else {
        return Decoded {
            shape,
            verdict: illegal_layout(ROUT, r.layout),
        };
    };
    let row = layout == Layout::Row;
    let (uplo_pos, trans_pos) = (arg::cblas(arg::syrk::UPLO), arg::cblas(arg::syrk::TRANS));
    let Some(uplo) = uplo else {
        // LAPACK 3.11's row-major branch reports an illegal Uplo as Trans's position.
        let pos = if row { trans_pos } else { uplo_pos };
        return Decoded {
            shape,
            verdict: cblas_illegal(ROUT, pos, pos, row, c"Illegal Uplo setting, %d\n", r.uplo),
        };
    };
    let Some(trans) = trans else {
        return Decoded {
            shape,
            verdict: cblas_illegal(
                ROUT,
                trans_pos,
                trans_pos,
                row,
                c"Illegal Trans setting, %d\n",
                r.trans,
            ),
        };
    };
    let (fuplo, ftrans) = if row {
        let flipped = if uplo == Uplo::Upper {
            Uplo::Lower
        } else {
            Uplo::Upper
        };
        (
            flipped,
            if trans == Trans::No {
                Trans::Yes
            } else {
                Trans::No
            },
        )
    } else {
        (uplo, trans)
    };
    let info = syrk_info(Some(fuplo), Some(ftrans), r.n, r.k, r.lda, r.ldc);
    if info != 0 {
        // row-major changes no dimension argument: the caller's position is the Fortran one
        return Decoded {
            shape,
            verdict: fortran_illegal(DSYRK, arg::cblas(info), info, Some(row)),
        };
    }
    let verdict = syrk_verdict(
        fuplo, ftrans, r.n, r.k, r.alpha, r.a, r.lda, r.beta, r.c, r.ldc,
    );
    Decoded { shape, verdict }
}

impl<I: BlasInt> RawCall for FortranGemm<I> {
    const ROUTINE: Routine = Routine::Dgemm;

    #[inline(always)]
    unsafe fn decode(&self) -> Decoded {
        // SAFETY: dgemm reads all of these unconditionally (the calling contract of `decode`).
        unsafe {
            decode_fortran_gemm(
                *self.transa as u8,
                *self.transb as u8,
                (*self.m).to_i64(),
                (*self.n).to_i64(),
                (*self.k).to_i64(),
                *self.alpha,
                self.a,
                (*self.lda).to_i64(),
                self.b,
                (*self.ldb).to_i64(),
                *self.beta,
                self.c,
                (*self.ldc).to_i64(),
                std::mem::size_of::<I>() == 8,
            )
        }
    }

    unsafe fn forward(&self, f: *const c_void) {
        type F<I> = unsafe extern "C-unwind" fn(
            *const c_char,
            *const c_char,
            *const I,
            *const I,
            *const I,
            *const f64,
            *const f64,
            *const I,
            *const f64,
            *const I,
            *const f64,
            *mut f64,
            *const I,
            usize,
            usize,
        );
        // SAFETY: `f` has this exact signature (contract of `forward`).
        let f: F<I> = unsafe { std::mem::transmute::<*const c_void, F<I>>(f) };
        let s = *self;
        // SAFETY: the caller's own arguments, unchanged.
        unsafe {
            f(
                s.transa,
                s.transb,
                s.m,
                s.n,
                s.k,
                s.alpha,
                s.a,
                s.lda,
                s.b,
                s.ldb,
                s.beta,
                s.c,
                s.ldc,
                s.transa_len,
                s.transb_len,
            )
        }
    }
}

impl<I: BlasInt> RawCall for FortranSyrk<I> {
    const ROUTINE: Routine = Routine::Dsyrk;

    #[inline(always)]
    unsafe fn decode(&self) -> Decoded {
        // SAFETY: dsyrk reads all of these unconditionally (the calling contract of `decode`).
        unsafe {
            decode_fortran_syrk(
                *self.uplo as u8,
                *self.trans as u8,
                (*self.n).to_i64(),
                (*self.k).to_i64(),
                *self.alpha,
                self.a,
                (*self.lda).to_i64(),
                *self.beta,
                self.c,
                (*self.ldc).to_i64(),
                std::mem::size_of::<I>() == 8,
            )
        }
    }

    unsafe fn forward(&self, f: *const c_void) {
        type F<I> = unsafe extern "C-unwind" fn(
            *const c_char,
            *const c_char,
            *const I,
            *const I,
            *const f64,
            *const f64,
            *const I,
            *const f64,
            *mut f64,
            *const I,
            usize,
            usize,
        );
        // SAFETY: `f` has this exact signature (contract of `forward`).
        let f: F<I> = unsafe { std::mem::transmute::<*const c_void, F<I>>(f) };
        let s = *self;
        // SAFETY: the caller's own arguments, unchanged.
        unsafe {
            f(
                s.uplo,
                s.trans,
                s.n,
                s.k,
                s.alpha,
                s.a,
                s.lda,
                s.beta,
                s.c,
                s.ldc,
                s.uplo_len,
                s.trans_len,
            )
        }
    }
}

impl<I: BlasInt> RawCall for CblasGemm<I> {
    const ROUTINE: Routine = Routine::Dgemm;

    #[inline(always)]
    unsafe fn decode(&self) -> Decoded {
        let s = *self;
        let wide = CblasGemm {
            layout: s.layout,
            transa: s.transa,
            transb: s.transb,
            m: s.m.to_i64(),
            n: s.n.to_i64(),
            k: s.k.to_i64(),
            alpha: s.alpha,
            a: s.a,
            lda: s.lda.to_i64(),
            b: s.b,
            ldb: s.ldb.to_i64(),
            beta: s.beta,
            c: s.c,
            ldc: s.ldc.to_i64(),
        };
        decode_cblas_gemm(&wide, std::mem::size_of::<I>() == 8)
    }

    unsafe fn forward(&self, f: *const c_void) {
        type F<I> = unsafe extern "C-unwind" fn(
            c_int,
            c_int,
            c_int,
            I,
            I,
            I,
            f64,
            *const f64,
            I,
            *const f64,
            I,
            f64,
            *mut f64,
            I,
        );
        // SAFETY: `f` has this exact signature (contract of `forward`).
        let f: F<I> = unsafe { std::mem::transmute::<*const c_void, F<I>>(f) };
        let s = *self;
        // SAFETY: the caller's own arguments, unchanged.
        unsafe {
            f(
                s.layout, s.transa, s.transb, s.m, s.n, s.k, s.alpha, s.a, s.lda, s.b, s.ldb,
                s.beta, s.c, s.ldc,
            )
        }
    }
}

impl<I: BlasInt> RawCall for CblasSyrk<I> {
    const ROUTINE: Routine = Routine::Dsyrk;

    #[inline(always)]
    unsafe fn decode(&self) -> Decoded {
        let s = *self;
        let wide = CblasSyrk {
            layout: s.layout,
            uplo: s.uplo,
            trans: s.trans,
            n: s.n.to_i64(),
            k: s.k.to_i64(),
            alpha: s.alpha,
            a: s.a,
            lda: s.lda.to_i64(),
            beta: s.beta,
            c: s.c,
            ldc: s.ldc.to_i64(),
        };
        decode_cblas_syrk(&wide, std::mem::size_of::<I>() == 8)
    }

    unsafe fn forward(&self, f: *const c_void) {
        type F<I> = unsafe extern "C-unwind" fn(
            c_int,
            c_int,
            c_int,
            I,
            I,
            f64,
            *const f64,
            I,
            f64,
            *mut f64,
            I,
        );
        // SAFETY: `f` has this exact signature (contract of `forward`).
        let f: F<I> = unsafe { std::mem::transmute::<*const c_void, F<I>>(f) };
        let s = *self;
        // SAFETY: the caller's own arguments, unchanged.
        unsafe {
            f(
                s.layout, s.uplo, s.trans, s.n, s.k, s.alpha, s.a, s.lda, s.beta, s.c, s.ldc,
            )
        }
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
mod tests {
    use super::*;
    use std::ptr::{null, null_mut};

    fn fg(ta: u8, tb: u8, m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64) -> Decoded {
        decode_fortran_gemm(
            ta,
            tb,
            m,
            n,
            k,
            1.0,
            null(),
            lda,
            null(),
            ldb,
            0.0,
            null_mut(),
            ldc,
            false,
        )
    }

    fn info(d: &Decoded) -> i64 {
        match d.verdict {
            Verdict::Illegal(i) => i.info,
            _ => 0,
        }
    }

    /// Reference `dgemm.f` info codes (LAPACK 3.11), one row per check, in check order.
    #[test]
    fn fortran_dgemm_info_codes_match_reference() {
        let table: &[(u8, u8, i64, i64, i64, i64, i64, i64, i64)] = &[
            (b'X', b'N', 1, 1, 1, 1, 1, 1, 1),
            (b'/', b'X', 1, 1, 1, 1, 1, 1, 1), // transa checked first
            (b'N', b'X', 1, 1, 1, 1, 1, 1, 2),
            (b'n', b't', 1, 1, 1, 1, 1, 1, 0), // lower case accepted (lsame)
            (b'C', b'c', 1, 1, 1, 1, 1, 1, 0),
            (b'N', b'N', -1, 0, 0, 1, 1, 1, 3),
            (b'N', b'N', -1, -1, -1, 1, 1, 1, 3),
            (b'N', b'N', 0, -1, 0, 1, 1, 1, 4),
            (b'N', b'N', 0, 0, -1, 1, 1, 1, 5),
            (b'N', b'N', 2, 0, 0, 1, 1, 2, 8), // lda < m
            (b'T', b'N', 2, 0, 3, 2, 3, 2, 8), // lda < k when transposed
            (b'T', b'N', 2, 0, 3, 3, 3, 2, 0),
            (b'N', b'N', 0, 0, 0, 0, 1, 1, 8),  // lda < max(1, 0)
            (b'N', b'N', 0, 0, 2, 1, 1, 1, 10), // ldb < k
            (b'N', b'T', 0, 3, 2, 1, 2, 1, 10), // ldb < n when transposed
            (b'N', b'N', 3, 0, 0, 3, 1, 2, 13),
            (b'N', b'N', 0, 0, 0, 1, 1, 0, 13),
        ];
        for &(ta, tb, m, n, k, lda, ldb, ldc, want) in table {
            let d = fg(ta, tb, m, n, k, lda, ldb, ldc);
            assert_eq!(
                info(&d),
                want,
                "{} {} m={m} n={n} k={k} lda={lda} ldb={ldb} ldc={ldc}",
                ta as char,
                tb as char
            );
            if want != 0 {
                let Verdict::Illegal(Illegal {
                    report:
                        Report::Fortran {
                            srname,
                            arg,
                            cblas: None,
                        },
                    ..
                }) = d.verdict
                else {
                    panic!("{:?}", d.verdict)
                };
                assert_eq!((srname, arg), (b"DGEMM \0", want));
            }
        }
    }

    #[test]
    fn fortran_dsyrk_info_codes_match_reference() {
        let table: &[(u8, u8, i64, i64, i64, i64, i64)] = &[
            (b'X', b'N', 1, 1, 1, 1, 1),
            (b'U', b'X', 1, 1, 1, 1, 2),
            (b'l', b'c', 1, 1, 1, 1, 0),
            (b'U', b'N', -1, 0, 1, 1, 3),
            (b'U', b'N', 0, -1, 1, 1, 4),
            (b'U', b'N', 2, 0, 1, 2, 7),
            (b'U', b'T', 2, 3, 2, 2, 7),
            (b'U', b'T', 2, 3, 3, 2, 0),
            (b'L', b'N', 2, 0, 2, 1, 10),
        ];
        for &(ul, tr, n, k, lda, ldc, want) in table {
            let d =
                decode_fortran_syrk(ul, tr, n, k, 1.0, null(), lda, 0.0, null_mut(), ldc, false);
            assert_eq!(
                info(&d),
                want,
                "{} {} n={n} k={k} lda={lda} ldc={ldc}",
                ul as char,
                tr as char
            );
        }
    }

    fn cg(
        layout: i32,
        ta: i32,
        tb: i32,
        m: i64,
        n: i64,
        k: i64,
        lda: i64,
        ldb: i64,
        ldc: i64,
    ) -> Decoded {
        let r = CblasGemm {
            layout,
            transa: ta,
            transb: tb,
            m,
            n,
            k,
            alpha: 1.0,
            a: null(),
            lda,
            b: null(),
            ldb,
            beta: 0.0,
            c: null_mut(),
            ldc,
        };
        decode_cblas_gemm(&r, false)
    }

    fn cblas_report(d: &Decoded) -> (i64, i64, bool) {
        match d.verdict {
            Verdict::Illegal(Illegal {
                info,
                report: Report::Cblas { arg, row_major, .. },
            }) => (info, arg, row_major),
            // Dimension errors: xerbla_ with the Fortran info of the (swapped) Fortran call.
            Verdict::Illegal(Illegal {
                info,
                report:
                    Report::Fortran {
                        arg,
                        cblas: Some(row_major),
                        ..
                    },
            }) => (info, arg, row_major),
            ref v => panic!("expected a CBLAS error, got {v:?}"),
        }
    }

    /// Reference CBLAS numbering: (position in the caller's list, number the reference passes to
    /// its handler, RowMajorStrg): enums to cblas_xerbla, dimensions to xerbla_ with the Fortran
    /// info of the swapped call (what Debian's libblas3 3.11 does, and what `c_d3chke.c`,
    /// xdcblat3's error-exit test, expects after its own xerbla_ adds 1 and undoes the swap).
    #[test]
    fn cblas_dgemm_error_numbering_matches_reference() {
        use cblas::*;
        let (c, r, n, t) = (COL_MAJOR, ROW_MAJOR, NO_TRANS, TRANS);
        let table: &[(
            i32,
            i32,
            i32,
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
            (i64, i64, bool),
        )] = &[
            (0, n, n, 0, 0, 0, 1, 1, 1, (1, 1, false)),
            (c, 0, n, 0, 0, 0, 1, 1, 1, (2, 2, false)),
            (r, 0, n, 0, 0, 0, 1, 1, 1, (2, 2, true)),
            (c, n, 0, 0, 0, 0, 1, 1, 1, (3, 3, false)),
            (r, n, 0, 0, 0, 0, 1, 1, 1, (3, 2, true)), // LAPACK 3.11 reports row-major TransB as 2
            (c, n, n, -1, 0, 0, 1, 1, 1, (4, 3, false)),
            (r, n, n, -1, 0, 0, 1, 1, 1, (4, 4, true)),
            (c, n, n, 0, -1, 0, 1, 1, 1, (5, 4, false)),
            (r, n, n, 0, -1, 0, 1, 1, 1, (5, 3, true)),
            (r, n, n, -1, -1, 0, 1, 1, 1, (5, 3, true)), // row-major checks N first
            (c, n, n, 0, 0, -1, 1, 1, 1, (6, 5, false)),
            (r, n, n, 0, 0, -1, 1, 1, 1, (6, 5, true)),
            (c, n, n, 2, 0, 0, 1, 1, 2, (9, 8, false)),
            (r, n, n, 0, 0, 2, 1, 1, 1, (9, 10, true)), // row-major lda < k (A is m x k, NoTrans)
            (r, t, n, 2, 0, 0, 1, 1, 1, (9, 10, true)), // row-major lda < m (A^T stored k x m)
            (c, n, n, 0, 0, 2, 1, 1, 1, (11, 10, false)),
            (r, n, n, 0, 2, 0, 1, 1, 2, (11, 8, true)), // row-major ldb < n
            (c, n, n, 2, 0, 0, 2, 1, 1, (14, 13, false)),
            (r, n, n, 0, 2, 0, 1, 2, 1, (14, 13, true)), // row-major ldc < n
        ];
        for &(layout, ta, tb, m, nn, k, lda, ldb, ldc, want) in table {
            let d = cg(layout, ta, tb, m, nn, k, lda, ldb, ldc);
            assert_eq!(
                cblas_report(&d),
                want,
                "layout={layout} ta={ta} tb={tb} m={m} n={nn} k={k} lda={lda} ldb={ldb} ldc={ldc}"
            );
        }
    }

    #[test]
    fn cblas_dsyrk_error_numbering_matches_reference() {
        use cblas::*;
        let (c, r) = (COL_MAJOR, ROW_MAJOR);
        let table: &[(i32, i32, i32, i64, i64, i64, i64, (i64, i64, bool))] = &[
            (0, UPPER, NO_TRANS, 0, 0, 1, 1, (1, 1, false)),
            (c, 0, NO_TRANS, 0, 0, 1, 1, (2, 2, false)),
            (r, 0, NO_TRANS, 0, 0, 1, 1, (3, 3, true)), // the reference's row-major quirk
            (c, UPPER, 0, 0, 0, 1, 1, (3, 3, false)),
            (r, UPPER, 0, 0, 0, 1, 1, (3, 3, true)),
            (c, UPPER, NO_TRANS, -1, 0, 1, 1, (4, 3, false)),
            (r, LOWER, TRANS, -1, 0, 1, 1, (4, 3, true)),
            (c, UPPER, NO_TRANS, 0, -1, 1, 1, (5, 4, false)),
            (c, UPPER, NO_TRANS, 2, 0, 1, 2, (8, 7, false)),
            (r, UPPER, NO_TRANS, 0, 2, 1, 1, (8, 7, true)), // row-major NoTrans: A is n x k, lda >= k
            (r, UPPER, TRANS, 2, 0, 1, 2, (8, 7, true)),
            (c, UPPER, NO_TRANS, 2, 0, 2, 1, (11, 10, false)),
            (r, UPPER, NO_TRANS, 2, 0, 2, 1, (11, 10, true)),
        ];
        for &(layout, ul, tr, n, k, lda, ldc, want) in table {
            let s = CblasSyrk {
                layout,
                uplo: ul,
                trans: tr,
                n,
                k,
                alpha: 1.0,
                a: null(),
                lda,
                beta: 0.0,
                c: null_mut(),
                ldc,
            };
            let d = decode_cblas_syrk(&s, false);
            assert_eq!(
                cblas_report(&d),
                want,
                "layout={layout} uplo={ul} trans={tr} n={n} k={k} lda={lda} ldc={ldc}"
            );
        }
    }

    #[test]
    fn quick_returns_follow_reference() {
        assert!(matches!(
            fg(b'N', b'N', 0, 5, 5, 1, 5, 1).verdict,
            Verdict::Quick
        ));
        assert!(matches!(
            fg(b'N', b'N', 5, 0, 5, 5, 5, 5).verdict,
            Verdict::Quick
        ));
        let q = |alpha: f64, beta: f64, k: i64| {
            decode_fortran_gemm(
                b'N',
                b'N',
                2,
                2,
                k,
                alpha,
                null(),
                2,
                null(),
                2,
                beta,
                null_mut(),
                2,
                false,
            )
            .verdict
        };
        assert!(matches!(q(0.0, 1.0, 2), Verdict::Quick));
        assert!(matches!(q(1.0, 1.0, 0), Verdict::Quick));
        // alpha == 0 with beta != 1 scales C: not a quick return.
        assert!(matches!(q(0.0, 0.5, 2), Verdict::Compute(_)));
        assert!(matches!(q(1.0, 0.0, 0), Verdict::Compute(_)));
    }

    #[test]
    fn row_major_cblas_becomes_the_transposed_column_major_call() {
        use cblas::*;
        let mut bufs = [0.0f64; 3];
        let (a, b, c) = (&raw const bufs[0], &raw const bufs[1], &raw mut bufs[2]);
        let r = CblasGemm {
            layout: ROW_MAJOR,
            transa: TRANS,
            transb: NO_TRANS,
            m: 2,
            n: 3,
            k: 4,
            alpha: 2.0,
            a,
            lda: 2,
            b,
            ldb: 3,
            beta: 0.5,
            c,
            ldc: 3,
        };
        let d = decode_cblas_gemm(&r, true);
        assert_eq!(
            (
                d.shape.layout,
                d.shape.flag1,
                d.shape.flag2,
                d.shape.m,
                d.shape.n,
                d.shape.ilp64
            ),
            (Layout::Row, b'T', b'N', 2, 3, true)
        );
        let Verdict::Compute(Canon::Gemm {
            transa,
            transb,
            m,
            n,
            k,
            a: ca,
            lda,
            b: cb,
            ldb,
            ..
        }) = d.verdict
        else {
            panic!("{:?}", d.verdict)
        };
        assert_eq!(
            (transa, transb, m, n, k, lda, ldb),
            (Trans::No, Trans::Yes, 3, 2, 4, 3, 2)
        );
        assert_eq!((ca, cb), (b, a));

        let s = CblasSyrk {
            layout: ROW_MAJOR,
            uplo: UPPER,
            trans: NO_TRANS,
            n: 3,
            k: 2,
            alpha: 1.0,
            a,
            lda: 2,
            beta: 0.0,
            c,
            ldc: 3,
        };
        let Verdict::Compute(Canon::Syrk { uplo, trans, .. }) =
            decode_cblas_syrk(&s, false).verdict
        else {
            panic!()
        };
        assert_eq!((uplo, trans), (Uplo::Lower, Trans::Yes));
    }

    #[test]
    fn operands_leave_a_and_b_empty_when_the_reference_reads_neither() {
        let mut cbuf = [1.0f64; 4];
        let d = decode_fortran_gemm(
            b'N',
            b'N',
            2,
            2,
            3,
            0.0,
            null(),
            2,
            null(),
            3,
            2.0,
            cbuf.as_mut_ptr(),
            2,
            false,
        );
        let Verdict::Compute(canon) = d.verdict else {
            panic!()
        };
        // SAFETY: C is a live 2x2 buffer; A and B are NULL and must not be touched.
        let ops = unsafe { canon.operands() };
        let Operands::Gemm(args, c) = ops else {
            panic!()
        };
        assert!(args.a.is_empty() && args.b.is_empty());
        assert_eq!(c.region().len(), 4);
    }
}
