//! A property test of the argument decoders: random argument lists for `dgemm_`, `dsyrk_`,
//! `cblas_dgemm` and `cblas_dsyrk` (and their ILP64 `64_` names), run by one C client
//! (`tests/c/arg_cases.c`) without the shim and with it, over the reference BLAS and over
//! Debian's OpenBLAS. The program must see what its BLAS gives it: the same error-handler
//! calls (routine name and argument position) and the same bits of C.
//!
//! The generator aims at the edges of the argument checks: valid, lower-case and invalid
//! transpose/triangle letters and CBLAS enums, dimensions 0, 1, small and negative, leading
//! dimensions 0, at the number of rows, one below, at and above the reference minimum
//! `max(1, rows)`, and special scalars (0, -0, 1, NaN, infinities, the smallest subnormal).
//!
//! On the vendor route every bit of C must be the vendor's. A call the trace records as
//! computed by the built-in kernel must give the reference BLAS's bits inside C's block
//! (NaN matching any NaN), over either vendor: the kernel follows the reference's loops, its
//! NaN/Inf propagation and zero signs included. A call `cpu-ozaki` computes may round
//! differently inside the block. Both must leave every other word of C alone, and every call
//! the shim does not compute (rejected, a quick return, or handed to the vendor) must give the
//! vendor's bits. The ILP64 names have no vendor in Debian, so the shim decides those calls
//! alone: it must report and compute as the reference BLAS does on the same arguments.
//!
//! The cases come from a seed: `OZAKI_TEST_SEED=N` replays a run, and a failure names its
//! seed and its cases. A fixed number of cases ([`CASES`]) keeps the run within seconds.

mod common;

use common::*;
use ozaki_core::trace::CallRecord;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Cases per run: each process runs them all, so the cost is a few process starts.
const CASES: usize = 1500;
/// Words of C the client prints (no generated case reaches further).
const C_WORDS: usize = 64;

/// The routine and calling convention of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `dgemm_`: F1 F2 are `transa`, `transb` as characters.
    Gemm,
    /// `dsyrk_`: F1 F2 are `uplo`, `trans`.
    Syrk,
    /// `cblas_dgemm`: F1 the layout, F2 F3 `transa`, `transb`.
    CblasGemm,
    /// `cblas_dsyrk`: F1 the layout, F2 F3 `uplo`, `trans`.
    CblasSyrk,
}

/// One call's arguments (the line format of `tests/c/arg_cases.c`).
#[derive(Debug, Clone)]
struct Case {
    kind: Kind,
    flags: [i32; 3],
    m: i64,
    n: i64,
    k: i64,
    lda: i64,
    ldb: i64,
    ldc: i64,
    alpha: f64,
    beta: f64,
    /// NaNs in C before the call (a `beta = 0` call must overwrite them).
    poison: bool,
}

impl Case {
    fn line(&self) -> String {
        let kind = match self.kind {
            Kind::Gemm => "G",
            Kind::Syrk => "S",
            Kind::CblasGemm => "CG",
            Kind::CblasSyrk => "CS",
        };
        let [f1, f2, f3] = self.flags;
        format!(
            "{kind} {f1} {f2} {f3} {} {} {} {} {} {} {:x} {:x} {}",
            self.m,
            self.n,
            self.k,
            self.lda,
            self.ldb,
            self.ldc,
            self.alpha.to_bits(),
            self.beta.to_bits(),
            u8::from(self.poison)
        )
    }

    fn row_major(&self) -> bool {
        matches!(self.kind, Kind::CblasGemm | Kind::CblasSyrk) && self.flags[0] == 101
    }

    /// C's block in the client's buffer (the words a computed call may write).
    fn block(&self) -> Vec<bool> {
        let (rows, cols) = match self.kind {
            Kind::Gemm | Kind::CblasGemm => (self.m, self.n),
            Kind::Syrk | Kind::CblasSyrk => (self.n, self.n),
        };
        let mut inside = vec![false; C_WORDS];
        for i in 0..rows.max(0) {
            for j in 0..cols.max(0) {
                let at = if self.row_major() {
                    i * self.ldc + j
                } else {
                    i + j * self.ldc
                };
                if let Some(w) = usize::try_from(at).ok().and_then(|a| inside.get_mut(a)) {
                    *w = true;
                }
            }
        }
        inside
    }
}

/// A leading dimension relative to the rows of its matrix.
#[derive(Debug, Clone, Copy)]
enum Ld {
    Zero,
    Rows,
    BelowMin,
    Min,
    AboveMin,
    WellAbove,
}

impl Ld {
    fn value(self, rows: i64) -> i64 {
        let min = rows.max(1);
        match self {
            Ld::Zero => 0,
            Ld::Rows => rows.max(0),
            Ld::BelowMin => min - 1,
            Ld::Min => min,
            Ld::AboveMin => min + 1,
            Ld::WellAbove => min + 3,
        }
    }
}

fn ld() -> impl Strategy<Value = Ld> {
    prop_oneof![
        1 => Just(Ld::Zero),
        1 => Just(Ld::Rows),
        1 => Just(Ld::BelowMin),
        4 => Just(Ld::Min),
        2 => Just(Ld::AboveMin),
        1 => Just(Ld::WellAbove),
    ]
}

/// Dimensions 0 to 6 (so every buffer access stays within the client's arrays), or negative.
fn dim() -> impl Strategy<Value = i64> {
    prop_oneof![6 => 0..=6i64, 1 => -3..=-1i64]
}

/// Mostly one of `valid` (upper or lower case), sometimes one of `invalid`.
fn letter(valid: &'static [u8], invalid: &'static [u8]) -> impl Strategy<Value = i32> {
    let lower: Vec<u8> = valid.iter().map(u8::to_ascii_lowercase).collect();
    prop_oneof![
        6 => prop::sample::select(valid.to_vec()),
        2 => prop::sample::select(lower),
        1 => prop::sample::select(invalid.to_vec()),
    ]
    .prop_map(i32::from)
}

/// Mostly one of `valid`, sometimes one of `invalid`.
fn code(valid: &'static [i32], invalid: &'static [i32]) -> impl Strategy<Value = i32> {
    prop_oneof![
        8 => prop::sample::select(valid.to_vec()),
        1 => prop::sample::select(invalid.to_vec()),
    ]
}

fn scalar() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => prop::sample::select(vec![1.0, 0.5, -1.5, 2.0]),
        3 => prop::sample::select(vec![0.0, 1.0, -0.0]),
        1 => prop::sample::select(vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            5e-324,
            1e300
        ]),
    ]
}

const TRANS: &[u8] = b"NTC";
const BAD_TRANS: &[u8] = b"XUL 0";
const UPLO: &[u8] = b"UL";
const BAD_UPLO: &[u8] = b"NXT 0";
const LAYOUTS: &[i32] = &[101, 102];
const BAD_LAYOUTS: &[i32] = &[0, 100, 103, -1];
const CBLAS_TRANS: &[i32] = &[111, 112, 113];
const BAD_CBLAS_TRANS: &[i32] = &[0, 110, 114, 78];
const CBLAS_UPLO: &[i32] = &[121, 122];
const BAD_CBLAS_UPLO: &[i32] = &[0, 120, 123, 85];

/// Whether a flag means "no transpose" in its convention (anything else is read as a
/// transpose when sizing leading dimensions; an invalid flag is rejected anyway).
fn no_trans(flag: i32) -> bool {
    flag == i32::from(b'N') || flag == i32::from(b'n') || flag == 111
}

fn case() -> impl Strategy<Value = Case> {
    let kind = prop_oneof![
        Just(Kind::Gemm),
        Just(Kind::Syrk),
        Just(Kind::CblasGemm),
        Just(Kind::CblasSyrk)
    ];
    let flags = kind.prop_flat_map(|kind| {
        let f = match kind {
            Kind::Gemm => (
                letter(TRANS, BAD_TRANS).boxed(),
                letter(TRANS, BAD_TRANS).boxed(),
                Just(0).boxed(),
            ),
            Kind::Syrk => (
                letter(UPLO, BAD_UPLO).boxed(),
                letter(TRANS, BAD_TRANS).boxed(),
                Just(0).boxed(),
            ),
            Kind::CblasGemm => (
                code(LAYOUTS, BAD_LAYOUTS).boxed(),
                code(CBLAS_TRANS, BAD_CBLAS_TRANS).boxed(),
                code(CBLAS_TRANS, BAD_CBLAS_TRANS).boxed(),
            ),
            Kind::CblasSyrk => (
                code(LAYOUTS, BAD_LAYOUTS).boxed(),
                code(CBLAS_UPLO, BAD_CBLAS_UPLO).boxed(),
                code(CBLAS_TRANS, BAD_CBLAS_TRANS).boxed(),
            ),
        };
        (Just(kind), f)
    });
    (
        flags,
        (dim(), dim(), dim()),
        (ld(), ld(), ld()),
        (scalar(), scalar()),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |((kind, (f1, f2, f3)), (m, n, k), (la, lb, lc), (alpha, beta), poison)| {
                let row = matches!(kind, Kind::CblasGemm | Kind::CblasSyrk) && f1 == 101;
                // The rows of each matrix as its leading dimension counts them.
                let (a_rows, b_rows, c_rows) = match kind {
                    Kind::Gemm | Kind::CblasGemm => {
                        let (ta, tb) = if kind == Kind::Gemm {
                            (f1, f2)
                        } else {
                            (f2, f3)
                        };
                        let a = if no_trans(ta) { (m, k) } else { (k, m) };
                        let b = if no_trans(tb) { (k, n) } else { (n, k) };
                        if row { (a.1, b.1, n) } else { (a.0, b.0, m) }
                    }
                    Kind::Syrk | Kind::CblasSyrk => {
                        let t = if kind == Kind::Syrk { f2 } else { f3 };
                        let a = if no_trans(t) { (n, k) } else { (k, n) };
                        (if row { a.1 } else { a.0 }, 0, n)
                    }
                };
                Case {
                    kind,
                    flags: [f1, f2, f3],
                    m: if matches!(kind, Kind::Syrk | Kind::CblasSyrk) {
                        n
                    } else {
                        m
                    },
                    n,
                    k,
                    lda: la.value(a_rows),
                    ldb: if b_rows == 0 && matches!(kind, Kind::Syrk | Kind::CblasSyrk) {
                        0
                    } else {
                        lb.value(b_rows)
                    },
                    ldc: lc.value(c_rows),
                    alpha,
                    beta,
                    poison,
                }
            },
        )
}

/// The cases of one run, from its seed.
fn cases() -> (u64, Vec<Case>) {
    let (seed, mut runner) = seeded_runner(CASES as u32);
    let strategy = case();
    let cases = (0..CASES)
        .map(|_| {
            strategy
                .new_tree(&mut runner)
                .expect("the case strategy never rejects")
                .current()
        })
        .collect();
    (seed, cases)
}

/// What the program saw in one call.
#[derive(Debug, PartialEq)]
struct Seen {
    reports: Vec<String>,
    c: Vec<u64>,
}

fn parse(out: &str) -> Vec<Seen> {
    let mut seen: Vec<Seen> = Vec::new();
    for line in out.lines() {
        if line.starts_with("case ") {
            seen.push(Seen {
                reports: Vec::new(),
                c: Vec::new(),
            });
        } else if let Some(words) = line.strip_prefix("  c ") {
            let last = seen.last_mut().expect("C after a case line");
            last.c = words
                .split_whitespace()
                .map(|w| u64::from_str_radix(w, 16).expect("hex word"))
                .collect();
            assert_eq!(last.c.len(), C_WORDS, "C words: {line}");
        } else if line.starts_with("  ") {
            seen.last_mut()
                .expect("a report after a case line")
                .reports
                .push(line.trim().to_string());
        }
    }
    seen
}

/// Whether a computed word is within rounding of the vendor's (NaN matching NaN), where
/// `scale` bounds the magnitude of the terms the entry sums (the accuracy contract measures an
/// emulated entry's error against |alpha| (|A||B|)_ij + |beta C_ij|, not against the entry,
/// which cancellation can make far smaller).
fn close(want: u64, got: u64, scale: f64) -> bool {
    let (x, y) = (f64::from_bits(want), f64::from_bits(got));
    // Relative to the larger magnitude, and a few hundred units of the smallest subnormal
    // for results scaled by a subnormal alpha.
    want == got
        || (x.is_nan() && y.is_nan())
        || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()).max(scale) + 1e-321
}

/// Whether a word is the reference's bits, or NaN where the reference's is NaN (the payload
/// and sign of a NaN depend on which operand carried it).
fn same_or_nan(want: u64, got: u64) -> bool {
    want == got || (f64::from_bits(want).is_nan() && f64::from_bits(got).is_nan())
}

/// The differences between the vendor's view of `case` (`want`; `reference`: the reference
/// BLAS's) and the shim's, if any.
fn differences(
    case: &Case,
    want: &Seen,
    reference: &Seen,
    got: &Seen,
    record: &CallRecord,
    exact: bool,
) -> Option<String> {
    if want.reports != got.reports {
        return Some(format!(
            "handler calls {:?}, with the shim {:?}",
            want.reports, got.reports
        ));
    }
    let shim_computed = !matches!(record.route.as_str(), "xerbla" | "quick" | "vendor");
    let builtin = record.route == "builtin";
    let block = case.block();
    // The clients fill A, B and C from [-1, 1): an entry's terms sum to at most this.
    let scale = case.alpha.abs() * case.k.max(0) as f64 + case.beta.abs();
    let scale = if scale.is_finite() { scale } else { 0.0 };
    for (i, &g) in got.c.iter().enumerate() {
        let by_reference = builtin && !exact && shim_computed && block[i];
        let w = if by_reference {
            reference.c[i]
        } else {
            want.c[i]
        };
        let ok = if exact || !shim_computed || !block[i] {
            w == g
        } else if by_reference {
            same_or_nan(w, g)
        } else {
            close(w, g, scale)
        };
        if !ok {
            return Some(format!(
                "C[{i}] {:e} ({w:016x}{}), with the shim {:e} ({g:016x}) (trace route {}{}{})",
                f64::from_bits(w),
                if by_reference {
                    ", the reference BLAS's"
                } else {
                    ""
                },
                f64::from_bits(g),
                record.route,
                if block[i] {
                    ", inside the block"
                } else {
                    ", outside the block"
                },
                record
                    .fallback
                    .as_deref()
                    .map(|f| format!(", fallback {f}"))
                    .unwrap_or_default()
            ));
        }
    }
    None
}

fn write_cases(dir: &Path, cases: &[Case]) -> PathBuf {
    let mut text = String::new();
    for c in cases {
        writeln!(text, "{}", c.line()).unwrap();
    }
    let path = dir.join("cases.txt");
    std::fs::write(&path, text).unwrap();
    path
}

fn stdout_of(cmd: &mut Command) -> String {
    String::from_utf8(run_ok(cmd).stdout).expect("UTF-8 output")
}

#[test]
fn random_arguments_give_what_each_vendor_gives_on_every_route() {
    let dir = work_dir("arg-props");
    // -rdynamic: the ILP64 error handlers are found by name, as a program's own are.
    let Some(prog) = build_c(&dir, "arg_cases", &["-lblas", "-rdynamic"]) else {
        return;
    };
    let vendors = vendors();
    let (seed, cases) = cases();
    let file = write_cases(&dir, &cases);
    let mut failures = Vec::new();
    // (vendor, route, ILP64 names): the ILP64 names have no Debian vendor, so the shim alone
    // must match the reference BLAS's LP64 answer.
    let mut runs: Vec<(&str, &str, &str, bool)> = Vec::new();
    for &(name, folder) in &vendors {
        for route in ["vendor", "builtin", "cpu-ozaki"] {
            runs.push((name, folder, route, false));
        }
    }
    runs.push(("reference", vendors[0].1, "vendor", true));
    runs.push(("reference", vendors[0].1, "cpu-ozaki", true));
    let mut wants = std::collections::HashMap::new();
    for &(name, folder) in &vendors {
        let out = stdout_of(over(plain(&prog), folder).arg(&file).arg("lp64"));
        let seen = parse(&out);
        assert_eq!(seen.len(), CASES, "{name}: every case ran without the shim");
        wants.insert(name, seen);
    }
    for (name, folder, route, ilp64) in runs {
        let trace = dir.join(format!("{name}-{route}-{ilp64}.jsonl"));
        let mut cmd = over(shimmed(&prog, Some(&trace)), folder);
        cmd.arg(&file)
            .arg(if ilp64 { "ilp64" } else { "lp64" })
            .env("OZAKI_ROUTE", route);
        let got = parse(&stdout_of(&mut cmd));
        let what = format!(
            "{name} BLAS, OZAKI_ROUTE={route}{}",
            if ilp64 { ", ILP64 names" } else { "" }
        );
        assert_eq!(got.len(), CASES, "{what}: every case ran");
        let t = read_trace(&trace);
        let records = calls_in_order(&t);
        assert_eq!(records.len(), CASES, "{what}: one trace record per call");
        let exact = route == "vendor" && !ilp64;
        for (i, case) in cases.iter().enumerate() {
            let reference = &wants["reference"][i];
            if let Some(d) =
                differences(case, &wants[name][i], reference, &got[i], records[i], exact)
            {
                failures.push(format!("{what}: case {i} `{}` {case:?}: {d}", case.line()));
            }
        }
    }
    if !failures.is_empty() {
        let shown: Vec<&str> = failures.iter().take(8).map(String::as_str).collect();
        panic!(
            "seed {seed} (replay with OZAKI_TEST_SEED={seed}): {} of {} cases differ with the shim; first ones:\n{}",
            failures.len(),
            CASES,
            shown.join("\n")
        );
    }
}
