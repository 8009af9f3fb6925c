//! The adversarial accuracy suite (`ozaki accuracy`): runs methods (a route's public entry
//! point, cuBLAS, a deliberately broken method in tests) on every case of the
//! [`families`](super::families), measures their componentwise errors against the exact
//! product ([`Reference`]) beside native fp64's, and judges the contract.
//!
//! # The contract
//! For every call, an emulated method's largest error `|ĉ - c| / (|A||B|)` over the measured
//! entries is at most `max(NATIVE_FACTOR x native's largest error, FLOOR_ULPS u)`, native
//! being the standard-order fp64 dot product on the same entries; or the call went to native
//! fp64 (a fallback, allowed and counted, with its reason). A method that writes a
//! non-finite value where the exact product is finite has an infinite error.
//!
//! # Measured entries
//! All of C when it has at most `SAMPLE x SAMPLE` entries; otherwise `SAMPLE` rows and
//! `SAMPLE` columns spread evenly over C (first and last included) and every entry where
//! they cross, each with its exact dot product (dsyrk: the crossings in its triangle).

use super::families::{Case, Family, Op};
use super::{ErrorStats, Reference};
use crate::blas::{GemmArgs, SyrkArgs, Trans, Uplo};

/// Emulated error allowed, in multiples of native fp64's error on the same entries.
pub const NATIVE_FACTOR: f64 = 2.0;
/// Emulated error always allowed, in units of `u = 2^-53` (the final rounding both carry).
pub const FLOOR_ULPS: f64 = 4.0;
/// Rows and columns measured in a large C.
pub const SAMPLE: usize = 64;
const U: f64 = f64::EPSILON / 2.0;

/// One call of the suite, with its operands as the BLAS sees them.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The family's name.
    pub family: &'static str,
    /// Operation and shape.
    pub case: Case,
    /// A as stored (`op(A)` transposed when the call says so), leading dimension `lda`.
    pub a: Vec<f64>,
    /// Leading dimension of `a`.
    pub lda: usize,
    /// B as stored (empty for dsyrk), leading dimension `ldb`.
    pub b: Vec<f64>,
    /// Leading dimension of `b`.
    pub ldb: usize,
}

fn transpose(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0.0; x.len()];
    for j in 0..cols {
        for i in 0..rows {
            t[j + i * cols] = x[i + j * rows];
        }
    }
    t
}

/// `x` (column-major `rows x cols`) stored as the BLAS reads it with `trans`: itself, or
/// its transpose; with the leading dimension.
fn stored(x: Vec<f64>, rows: usize, cols: usize, trans: Trans) -> (Vec<f64>, usize) {
    match trans {
        Trans::No => (x, rows.max(1)),
        Trans::Yes => (transpose(&x, rows, cols), cols.max(1)),
    }
}

impl Problem {
    /// The family's operands for `case`, stored for its transposes.
    pub fn new(family: &Family, case: Case) -> Problem {
        let (opa, opb) = family.generate(&case);
        let (m, n, k) = (case.m, case.n, case.k);
        let ((a, lda), (b, ldb)) = match case.op {
            Op::Gemm(ta, tb) => (stored(opa, m, k, ta), stored(opb, k, n, tb)),
            Op::Syrk(_, tr) => (stored(opa, n, k, tr), (Vec::new(), 1)),
        };
        Problem {
            family: family.name,
            case,
            a,
            lda,
            b,
            ldb,
        }
    }

    /// The dgemm call `C = op(A) op(B)` (alpha = 1, beta = 0, `ldc = m`); `None` for dsyrk.
    pub fn gemm_args(&self) -> Option<GemmArgs<'_>> {
        let Op::Gemm(transa, transb) = self.case.op else {
            return None;
        };
        Some(GemmArgs {
            transa,
            transb,
            m: self.case.m,
            n: self.case.n,
            k: self.case.k,
            alpha: 1.0,
            a: &self.a,
            lda: self.lda,
            b: &self.b,
            ldb: self.ldb,
            beta: 0.0,
            ldc: self.case.m.max(1),
        })
    }

    /// The dsyrk call `C = op(A) op(A)^T` on its triangle (alpha = 1, beta = 0, `ldc = n`);
    /// `None` for dgemm.
    pub fn syrk_args(&self) -> Option<SyrkArgs<'_>> {
        let Op::Syrk(uplo, trans) = self.case.op else {
            return None;
        };
        Some(SyrkArgs {
            uplo,
            trans,
            n: self.case.n,
            k: self.case.k,
            alpha: 1.0,
            a: &self.a,
            lda: self.lda,
            beta: 0.0,
            ldc: self.case.n.max(1),
        })
    }

    /// Element (i, l) of op(A).
    fn op_a(&self, i: usize, l: usize) -> f64 {
        match (self.gemm_args(), self.syrk_args()) {
            (Some(g), _) => g.op_a(i, l),
            (_, Some(s)) => s.op_a(i, l),
            _ => unreachable!(),
        }
    }

    /// Element (l, j) of op(B) (dsyrk: op(A)^T).
    fn op_b(&self, l: usize, j: usize) -> f64 {
        match self.gemm_args() {
            Some(g) => g.op_b(l, j),
            None => self.op_a(j, l),
        }
    }

    /// Whether entry (i, j) of C is computed by the call (dsyrk: its triangle).
    pub fn in_result(&self, i: usize, j: usize) -> bool {
        match self.case.op {
            Op::Gemm(..) => true,
            Op::Syrk(Uplo::Lower, _) => i >= j,
            Op::Syrk(Uplo::Upper, _) => i <= j,
        }
    }
}

/// `count` indices spread evenly over `0..len`, first and last included (all when fewer).
fn spread_indices(len: usize, count: usize) -> Vec<usize> {
    if len <= count {
        return (0..len).collect();
    }
    let mut v: Vec<usize> = (0..count).map(|t| t * (len - 1) / (count - 1)).collect();
    v.dedup();
    v
}

/// The measured rows and columns of a problem and their exact reference.
pub struct Measured {
    /// Rows of C measured.
    pub rows: Vec<usize>,
    /// Columns of C measured.
    pub cols: Vec<usize>,
    /// Exact products, scale and native fp64 on `rows x cols`.
    pub reference: Reference,
}

impl Measured {
    /// The reference for a problem (all of C, or the sample).
    pub fn new(p: &Problem) -> Measured {
        let (m, n, k) = (p.case.m, p.case.n, p.case.k);
        let (rows, cols) = if m * n <= SAMPLE * SAMPLE {
            ((0..m).collect(), (0..n).collect())
        } else {
            (spread_indices(m, SAMPLE), spread_indices(n, SAMPLE))
        };
        let (mr, nc) = (rows.len(), cols.len());
        let mut a = vec![0.0; mr * k];
        for l in 0..k {
            for (t, &i) in rows.iter().enumerate() {
                a[t + l * mr] = p.op_a(i, l);
            }
        }
        let mut b = vec![0.0; k * nc];
        for (t, &j) in cols.iter().enumerate() {
            for l in 0..k {
                b[l + t * k] = p.op_b(l, j);
            }
        }
        let reference = Reference::new(&a, &b, mr, nc, k);
        Measured {
            rows,
            cols,
            reference,
        }
    }

    /// Measured entries (dsyrk: those in its triangle).
    pub fn entries(&self, p: &Problem) -> usize {
        self.keep(p, |_, _| 1).iter().sum()
    }

    fn keep<T>(&self, p: &Problem, f: impl Fn(usize, usize) -> T) -> Vec<T> {
        let mut v = Vec::new();
        for &j in &self.cols {
            for &i in &self.rows {
                if p.in_result(i, j) {
                    v.push(f(i, j));
                }
            }
        }
        v
    }

    /// Error statistics of a full C (column-major, `ldc = m`) on the measured entries.
    pub fn errors(&self, p: &Problem, c: &[f64]) -> ErrorStats {
        let m = p.case.m;
        let sample: Vec<f64> = self
            .cols
            .iter()
            .flat_map(|&j| self.rows.iter().map(move |&i| c[i + j * m]))
            .collect();
        self.reference.errors(&sample, p.case.k, |t, s| {
            p.in_result(self.rows[t], self.cols[s])
        })
    }

    /// Native fp64's error statistics on the measured entries.
    pub fn native(&self, p: &Problem) -> ErrorStats {
        self.reference
            .native_errors(p.case.k, |t, s| p.in_result(self.rows[t], self.cols[s]))
    }
}

/// What a method did with one problem.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It computed C (column-major `m x n`, `ldc = m`; dsyrk: its triangle is read).
    Computed {
        /// The result.
        c: Vec<f64>,
        /// Moduli the emulation used, when it reports them.
        moduli: Option<u32>,
    },
    /// It declined and native fp64 computed the call instead, for this reason.
    Fallback(String),
}

/// A method the suite measures.
pub struct Method<'a> {
    /// Column name.
    pub name: String,
    /// Whether the contract applies (an emulated route) or it is shown beside native only
    /// (cuBLAS, a vendor BLAS).
    pub checked: bool,
    /// Runs one problem.
    pub run: Box<dyn Fn(&Problem) -> Outcome + 'a>,
}

/// One method's result on one problem.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodResult {
    /// The method's name.
    pub name: String,
    /// Whether the contract applies.
    pub checked: bool,
    /// Its errors when it computed C; `Err(reason)` when it fell back.
    pub errors: Result<ErrorStats, String>,
    /// Moduli it reported.
    pub moduli: Option<u32>,
}

/// Every method's result on one problem.
#[derive(Debug, Clone, PartialEq)]
pub struct ProblemReport {
    /// The call.
    pub case: Case,
    /// Entries measured.
    pub entries: usize,
    /// Whether they are a sample of C.
    pub sampled: bool,
    /// Native fp64 (standard-order dot product) on the same entries.
    pub native: ErrorStats,
    /// One per method, in the order given.
    pub results: Vec<MethodResult>,
}

impl ProblemReport {
    /// The largest error the contract allows on this problem.
    pub fn bound(&self) -> f64 {
        (NATIVE_FACTOR * self.native.max).max(FLOOR_ULPS * U)
    }

    /// Whether a checked method's result breaks the contract.
    pub fn breaks(&self, r: &MethodResult) -> bool {
        // NaN compares false: a NaN error breaks it too.
        r.checked
            && r.errors
                .as_ref()
                .is_ok_and(|e| e.max.is_nan() || e.max > self.bound())
    }

    /// Whether any checked method breaks the contract.
    pub fn broken(&self) -> bool {
        self.results.iter().any(|r| self.breaks(r))
    }
}

/// One family's results.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyReport {
    /// The family's name.
    pub name: &'static str,
    /// What its inputs look like.
    pub about: &'static str,
    /// Whether a correct method is exact on it.
    pub exact: bool,
    /// One per case.
    pub problems: Vec<ProblemReport>,
}

impl FamilyReport {
    /// Whether any call breaks the contract.
    pub fn broken(&self) -> bool {
        self.problems.iter().any(ProblemReport::broken)
    }

    /// Calls where a checked method fell back, with their reasons (deduplicated).
    pub fn fallbacks(&self) -> (usize, Vec<String>) {
        let mut reasons: Vec<String> = Vec::new();
        let mut count = 0;
        for r in self.problems.iter().flat_map(|p| &p.results) {
            if let (true, Err(why)) = (r.checked, &r.errors) {
                count += 1;
                if !reasons.contains(why) {
                    reasons.push(why.clone());
                }
            }
        }
        (count, reasons)
    }

    /// The largest error of a checked method over the family's computed calls.
    pub fn max_error(&self, method: &str) -> f64 {
        self.problems
            .iter()
            .flat_map(|p| &p.results)
            .filter(|r| r.name == method)
            .filter_map(|r| r.errors.as_ref().ok().map(|e| e.max))
            .fold(0.0, f64::max)
    }
}

/// Runs `methods` on one problem.
pub fn measure(p: &Problem, methods: &[Method<'_>]) -> ProblemReport {
    let measured = Measured::new(p);
    let results = methods
        .iter()
        .map(|method| {
            let (errors, moduli) = match (method.run)(p) {
                Outcome::Computed { c, moduli } => (Ok(measured.errors(p, &c)), moduli),
                Outcome::Fallback(why) => (Err(why), None),
            };
            MethodResult {
                name: method.name.clone(),
                checked: method.checked,
                errors,
                moduli,
            }
        })
        .collect();
    ProblemReport {
        case: p.case,
        entries: measured.entries(p),
        sampled: measured.rows.len() < p.case.m || measured.cols.len() < p.case.n,
        native: measured.native(p),
        results,
    }
}

/// Runs `methods` on every case of `family` at `sizes`.
pub fn run_family(
    family: &Family,
    sizes: &[(usize, usize, usize)],
    quick: bool,
    methods: &[Method<'_>],
) -> FamilyReport {
    let problems = family
        .cases(sizes, quick)
        .into_iter()
        .map(|case| measure(&Problem::new(family, case), methods))
        .collect();
    FamilyReport {
        name: family.name,
        about: family.about,
        exact: family.exact,
        problems,
    }
}

fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.1e}")
    }
}

/// The family's table (Markdown): per call the measured entries, native's max error, each
/// method's max error, its ratio to native's, moduli or fallback reason, and the verdict.
pub fn table(report: &FamilyReport) -> String {
    let mut s = format!("### {} — {}\n\n", report.name, report.about);
    let Some(first) = report.problems.first() else {
        return s + "(no calls)\n";
    };
    s += "| call | m x n x k | entries | native max |";
    for r in &first.results {
        s += &format!(" {}: max (x native), moduli |", r.name);
    }
    s += " verdict |\n|---|---|---|---|";
    s += &"---|".repeat(first.results.len() + 1);
    s += "\n";
    for p in &report.problems {
        let c = p.case;
        s += &format!(
            "| {} | {}x{}x{} | {}{} | {} |",
            c.op.label(),
            c.m,
            c.n,
            c.k,
            p.entries,
            if p.sampled { " (sampled)" } else { "" },
            sci(p.native.max)
        );
        for r in &p.results {
            s += &match &r.errors {
                Ok(e) => {
                    let ratio = if p.native.max > 0.0 {
                        format!("{:.2}", e.max / p.native.max)
                    } else if e.max == 0.0 {
                        "-".into()
                    } else {
                        "inf".into()
                    };
                    let moduli = r.moduli.map_or("-".into(), |m| m.to_string());
                    let flag = if p.breaks(r) { " **BREAKS**" } else { "" };
                    format!(" {} ({ratio}), {moduli}{flag} |", sci(e.max))
                }
                Err(why) => format!(" fallback: {why} |"),
            };
        }
        s += if p.broken() { " FAIL |\n" } else { " ok |\n" };
    }
    let (count, reasons) = report.fallbacks();
    s += &format!(
        "\n{}: {} calls, {} fell back{}.\n",
        if report.broken() {
            "FAIL"
        } else {
            "contract holds"
        },
        report.problems.len(),
        count,
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join("; "))
        }
    );
    s
}

#[cfg(test)]
mod tests {
    use super::super::families::{self, QUICK_SIZES};
    use super::*;
    use crate::emulate::{self, EmulationConfig, Fallback};
    use crate::testutil::Rng;

    fn emulated<'a>() -> Method<'a> {
        Method {
            name: "cpu-ozaki".into(),
            checked: true,
            run: Box::new(|p: &Problem| {
                let (m, n) = (p.case.m, p.case.n);
                let mut c = vec![f64::NAN; m * n];
                let cfg = EmulationConfig {
                    threads: 2,
                    ..Default::default()
                };
                let r: Result<_, Fallback> = match (p.gemm_args(), p.syrk_args()) {
                    (Some(g), _) => emulate::gemm(&g, &mut c, &cfg),
                    (_, Some(s)) => emulate::syrk(&s, &mut c, &cfg),
                    _ => unreachable!(),
                };
                match r {
                    Ok(info) => Outcome::Computed {
                        c,
                        moduli: Some(info.moduli as u32),
                    },
                    Err(f) => Outcome::Fallback(f.to_string()),
                }
            }),
        }
    }

    fn family(name: &str) -> Family {
        families::select(name).unwrap()[0]
    }

    #[test]
    fn the_emulation_holds_the_contract_on_normal_inputs_and_is_exact_on_integers() {
        for name in ["normal", "integers", "transposes", "dsyrk-normal"] {
            let report = run_family(&family(name), &QUICK_SIZES, true, &[emulated()]);
            assert!(!report.broken(), "{}", table(&report));
            assert_eq!(report.fallbacks().0, 0, "{}", table(&report));
        }
        let ints = run_family(&family("integers"), &QUICK_SIZES, true, &[emulated()]);
        assert!(ints.exact);
        assert_eq!(ints.max_error("cpu-ozaki"), 0.0, "{}", table(&ints));
        // The sampled case measures 64 x 64 entries of the 96 x 80 product.
        assert_eq!(ints.problems[1].entries, SAMPLE * SAMPLE);
        assert!(ints.problems[1].sampled && !ints.problems[0].sampled);
    }

    #[test]
    fn a_method_with_added_noise_breaks_the_contract() {
        // The emulation's result with a relative perturbation of ~16u on every entry: well
        // within what a user might not notice, well outside 2x native on these sizes.
        let noisy = Method {
            name: "noisy".into(),
            checked: true,
            run: Box::new(|p: &Problem| match (emulated().run)(p) {
                Outcome::Computed { mut c, moduli } => {
                    let mut rng = Rng::new(7);
                    for x in &mut c {
                        *x *= 1.0 + 64.0 * U * (rng.uniform() - 0.5);
                    }
                    Outcome::Computed { c, moduli }
                }
                other => other,
            }),
        };
        let report = run_family(&family("normal"), &QUICK_SIZES, true, &[emulated(), noisy]);
        assert!(report.broken(), "{}", table(&report));
        let p = &report.problems[0];
        assert!(!p.breaks(&p.results[0]) && p.breaks(&p.results[1]));
        assert!(table(&report).contains("**BREAKS**"));
        // A method that leaves an entry unwritten (NaN) breaks it too.
        let hole = Method {
            name: "hole".into(),
            checked: true,
            run: Box::new(|p: &Problem| match (emulated().run)(p) {
                Outcome::Computed { mut c, moduli } => {
                    c[0] = f64::NAN;
                    Outcome::Computed { c, moduli }
                }
                other => other,
            }),
        };
        let report = run_family(&family("odd-sizes"), &QUICK_SIZES, true, &[hole]);
        assert!(report.problems.iter().all(ProblemReport::broken));
    }

    #[test]
    fn a_fallback_is_allowed_and_counted() {
        let decline = Method {
            name: "decline".into(),
            checked: true,
            run: Box::new(|_: &Problem| Outcome::Fallback("accuracy target unreachable".into())),
        };
        let report = run_family(&family("phi=4"), &QUICK_SIZES, true, &[decline]);
        assert!(!report.broken());
        assert_eq!(
            report.fallbacks(),
            (2, vec!["accuracy target unreachable".into()])
        );
        assert!(table(&report).contains("2 fell back (accuracy target unreachable)"));
    }

    #[test]
    fn families_are_seeded_by_name_and_case_and_cover_the_calls_asked_for() {
        let all = families::all();
        assert!(all.len() >= 25);
        let f = family("transposes");
        let cases = f.cases(&QUICK_SIZES, true);
        assert_eq!(cases.len(), 4);
        let (a1, _) = f.generate(&cases[0]);
        let (a2, _) = family("transposes").generate(&cases[0]);
        assert_eq!(a1, a2);
        let ks: Vec<usize> = family("k-range")
            .cases(&QUICK_SIZES, true)
            .iter()
            .map(|c| c.k)
            .collect();
        assert_eq!((ks[0], *ks.last().unwrap()), (1, 131072));
        assert!(families::select("normal,nonsense").is_err());
        // Stored operands are op(A)/op(B) transposed for T: the problem reads them back.
        let p = Problem::new(&f, cases[3]);
        let (opa, opb) = f.generate(&cases[3]);
        let (m, k) = (cases[3].m, cases[3].k);
        assert_eq!(p.op_a(3, 5), opa[3 + 5 * m]);
        assert_eq!(p.op_b(5, 2), opb[5 + 2 * k]);
    }
}
