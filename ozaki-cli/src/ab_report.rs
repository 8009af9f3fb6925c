//! `ozaki ab-report TRACE...`: what the A/B comparison (`OZAKI_AB`) found.
//!
//! With `OZAKI_AB` set, the shim runs the vendor BLAS beside the chosen route on a private
//! copy of C for each sampled call and records both times and the differences in the
//! call's `ab` field. This command turns those fields into what a user wants to know
//! before trusting a route: the worst calls, how the errors are distributed per route,
//! how the times compare, and one verdict line per route.
//!
//! The verdict measures each difference on the scale of the data,
//! ||C_route - C_vendor||_F / (|alpha| ||A||_F ||B||_F + |beta| ||C_old||_F) (the record's
//! `rel_scaled`), against the bound 2 gamma_{k+2} that any two correct fp64 results of that
//! call respect: a route fails only when some call is further from the vendor than fp64
//! rounding can explain. Differences relative to C itself (normwise, componentwise) are shown
//! too, but cancellation (C much smaller than |A||B|) makes them large for correct results,
//! so they decide only for records without `rel_scaled`, against `--tol`.
//! Exit status: 0 when every route passes, 1 when one fails, 2 on errors.

use crate::tracefile;
use clap::Parser;
use ozaki_core::trace::{CallRecord, ab_scaled_bound};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Default normwise tolerance of the verdict: a few hundred ulps of fp64, above the
/// rounding-order differences of two correct dgemm implementations at k in the thousands
/// (~sqrt(k) u), far below what a wrong result or a truncated emulation gives.
pub const DEFAULT_TOL: f64 = 1e-11;

#[derive(Parser, Debug)]
#[command(
    about = "A/B comparison of routes against the vendor BLAS, from traces written with OZAKI_AB set"
)]
struct Args {
    /// Trace files (JSON Lines, plain or gzip).
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// How many of the worst calls to list.
    #[arg(long, default_value_t = 10)]
    worst: usize,
    /// Normwise relative difference above which a route fails.
    #[arg(long, default_value_t = DEFAULT_TOL)]
    tol: f64,
}

pub fn main(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let args = Args::try_parse_from(args)?;
    let mut calls = Vec::new();
    for path in &args.traces {
        calls.extend(tracefile::read(path)?.calls);
    }
    let summary = AbSummary::of(&calls, args.tol);
    print!("{}", summary.render(args.worst, args.tol));
    Ok(if summary.routes.values().any(|r| !r.passes(args.tol)) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Lower end of the error histogram, as a power of ten: differences at or below 1e-17
/// share the first nonzero bucket.
pub const DECADE_LO: i32 = -17;
/// Upper end: differences above 1e-6 share the last bucket.
pub const DECADE_HI: i32 = -6;
/// Number of histogram buckets: exact, one per decade, and the overflow bucket.
pub const BUCKETS: usize = (DECADE_HI - DECADE_LO) as usize + 3;

/// Histogram bucket of one relative difference: 0 for exactly equal, then
/// `(0, 1e-17]`, `(1e-17, 1e-16]`, ..., `(1e-7, 1e-6]`, and `> 1e-6` (also NaN/inf and
/// negative values, which the trace reader already rejects).
pub fn bucket(err: f64) -> usize {
    if err == 0.0 {
        return 0;
    }
    if !err.is_finite() || err < 0.0 || err > 10f64.powi(DECADE_HI) {
        return BUCKETS - 1;
    }
    let decade = err.log10().ceil() as i32;
    1 + (decade.max(DECADE_LO) - DECADE_LO) as usize
}

/// Label of histogram bucket `b` (see [`bucket`]).
pub fn bucket_label(b: usize) -> String {
    match b {
        0 => "0".into(),
        1 => format!("<=1e{DECADE_LO}"),
        b if b == BUCKETS - 1 => format!(">1e{DECADE_HI}"),
        b => format!("1e{}", DECADE_LO + b as i32 - 1),
    }
}

/// A/B results of one route.
#[derive(Debug, Clone, Default)]
pub struct RouteAb {
    /// Calls compared.
    pub compared: usize,
    /// Calls chosen but skipped (too large for the copy budget).
    pub skipped: usize,
    /// Calls whose result the program got from the vendor (`OZAKI_AB_KEEP=vendor`).
    pub kept_vendor: usize,
    /// Largest componentwise relative difference.
    pub worst_comp: f64,
    /// Largest normwise relative difference.
    pub worst_norm: f64,
    /// Histogram of the normwise differences (see [`bucket`]).
    pub hist_norm: [usize; BUCKETS],
    /// Histogram of the componentwise differences.
    pub hist_comp: [usize; BUCKETS],
    /// Histogram of the differences on the data's scale (`rel_scaled`), where recorded.
    pub hist_scaled: [usize; BUCKETS],
    /// Sum of vendor times, ns.
    pub vendor_ns: u64,
    /// Sum of route times, ns.
    pub route_ns: u64,
    /// FLOPs of the compared calls.
    pub flops: f64,
    /// Per-call vendor/route time ratios.
    ratios: Vec<f64>,
    /// Largest `rel_scaled / 2 gamma_{k+2}` over the calls that record `rel_scaled`.
    pub worst_bound_ratio: Option<f64>,
    /// Calls whose `rel_scaled` exceeds their bound.
    pub over_bound: usize,
    /// Calls judged against their own bound (they record `rel_scaled`).
    pub bounded: usize,
    /// Calls decided by `--tol` (no `rel_scaled` in the record) that exceed it.
    pub over_tol: usize,
}

impl RouteAb {
    /// Vendor time over route time, summed over the compared calls (> 1: route faster).
    pub fn speedup(&self) -> Option<f64> {
        (self.route_ns > 0 && self.vendor_ns > 0)
            .then(|| self.vendor_ns as f64 / self.route_ns as f64)
    }

    /// Median of the per-call vendor/route time ratios.
    pub fn median_ratio(&self) -> Option<f64> {
        let mut r = self.ratios.clone();
        r.sort_by(f64::total_cmp);
        r.get(r.len().checked_sub(1)? / 2).copied()
    }

    /// Whether every compared call is within its bound (or, without `rel_scaled`, `tol`).
    pub fn passes(&self, _tol: f64) -> bool {
        self.over_bound == 0 && self.over_tol == 0
    }

    /// One line saying whether the route can be trusted and what it costs.
    pub fn verdict(&self, route: &str, tol: f64) -> String {
        let mut v = if self.compared == 0 {
            format!("{route}: no call compared")
        } else if self.worst_norm == 0.0 && self.worst_comp == 0.0 {
            format!(
                "{route}: PASS, bit-identical to the vendor BLAS on all {} compared calls",
                self.compared
            )
        } else if self.passes(tol) {
            // The tolerance each PASS was judged against is part of the verdict: a normwise
            // difference of 1e-9 can be within a long call's rounding bound, and a reader
            // seeing it beside "PASS" must be able to tell why it passed.
            match self.worst_bound_ratio {
                Some(r) => format!(
                    "{route}: PASS, agrees with the vendor BLAS to fp64 accuracy on {} calls (worst difference {:.2} of the fp64 rounding bound 2 gamma_k+2 of its call on the data's scale, the tolerance{}; worst normwise {:.1e})",
                    self.compared,
                    r,
                    if self.compared > self.bounded {
                        format!(", calls without that bound normwise <= {tol:.0e}")
                    } else {
                        String::new()
                    },
                    self.worst_norm
                ),
                None => format!(
                    "{route}: PASS, agrees with the vendor BLAS to fp64 accuracy on {} calls (tolerance: normwise <= {:.0e}, worst normwise {:.1e})",
                    self.compared, tol, self.worst_norm
                ),
            }
        } else {
            format!(
                "{route}: FAIL, {} of {} calls differ from the vendor by more than fp64 rounding allows (worst {:.1e} of the bound; normwise {:.1e}); see the worst calls",
                self.over_bound + self.over_tol,
                self.compared,
                self.worst_bound_ratio.unwrap_or(f64::NAN),
                self.worst_norm
            )
        };
        if let Some(s) = self.speedup() {
            let _ = write!(v, "; {s:.2}x the vendor's speed over these calls");
        }
        if self.skipped > 0 {
            let _ = write!(
                v,
                "; {} calls skipped (copy of C over OZAKI_AB_MAX_MB)",
                self.skipped
            );
        }
        v
    }
}

/// Everything the A/B fields of a set of calls say.
#[derive(Debug, Default)]
pub struct AbSummary<'a> {
    /// Calls in the traces.
    pub calls: usize,
    /// Per route (the route that produced the program's C when it was compared).
    pub routes: BTreeMap<String, RouteAb>,
    /// Compared calls, worst (normwise, then componentwise) first.
    pub worst: Vec<&'a CallRecord>,
}

impl<'a> AbSummary<'a> {
    /// Aggregates the `ab` fields of `calls`.
    pub fn of(calls: &'a [CallRecord], tol: f64) -> AbSummary<'a> {
        let mut s = AbSummary {
            calls: calls.len(),
            ..AbSummary::default()
        };
        for c in calls {
            let Some(ab) = &c.ab else { continue };
            let r = s.routes.entry(c.route.clone()).or_default();
            if ab.skipped.is_some() {
                r.skipped += 1;
                continue;
            }
            r.compared += 1;
            r.kept_vendor += usize::from(ab.kept == "vendor");
            r.worst_comp = r.worst_comp.max(ab.max_rel_comp);
            r.worst_norm = r.worst_norm.max(ab.rel_norm);
            // NaN never compares greater; a NaN difference is the worst possible.
            if ab.rel_norm.is_nan() {
                r.worst_norm = f64::INFINITY;
            }
            if ab.max_rel_comp.is_nan() {
                r.worst_comp = f64::INFINITY;
            }
            r.hist_norm[bucket(ab.rel_norm)] += 1;
            r.hist_comp[bucket(ab.max_rel_comp)] += 1;
            match ab.rel_scaled {
                Some(x) => {
                    r.bounded += 1;
                    r.hist_scaled[bucket(x)] += 1;
                    let ratio = x / ab_scaled_bound(c.k);
                    r.worst_bound_ratio = Some(r.worst_bound_ratio.map_or(ratio, |w| w.max(ratio)));
                    // A NaN ratio is over the bound too.
                    r.over_bound += usize::from(ratio.is_nan() || ratio > 1.0);
                }
                None => r.over_tol += usize::from(nan_high(ab.rel_norm) > tol),
            }
            r.vendor_ns += ab.vendor_ns;
            r.route_ns += ab.route_ns;
            r.flops += c.flops();
            if ab.route_ns > 0 {
                r.ratios.push(ab.vendor_ns as f64 / ab.route_ns as f64);
            }
            s.worst.push(c);
        }
        let key = |c: &CallRecord| {
            c.ab.as_ref()
                .map(|a| (nan_high(a.rel_norm), nan_high(a.max_rel_comp)))
                .unwrap_or_default()
        };
        s.worst.sort_by(|a, b| {
            let (ka, kb) = (key(a), key(b));
            kb.0.total_cmp(&ka.0).then(kb.1.total_cmp(&ka.1))
        });
        s
    }

    /// Whether any call carried an `ab` field.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The text report: verdicts, time ratios, histograms, worst calls.
    pub fn render(&self, worst: usize, tol: f64) -> String {
        let mut out = String::new();
        let compared: usize = self.routes.values().map(|r| r.compared).sum();
        let skipped: usize = self.routes.values().map(|r| r.skipped).sum();
        let _ = writeln!(
            out,
            "{} calls, {compared} compared against the vendor BLAS, {skipped} chosen but skipped",
            self.calls
        );
        if self.is_empty() {
            let _ = writeln!(
                out,
                "no call has an `ab` field: run the program with OZAKI_AB=1 (or a fraction such as 0.1) to compare"
            );
            return out;
        }
        let _ = writeln!(
            out,
            "\nVerdict (each difference against the fp64 rounding bound of its call, 2 gamma_k+2 on the data's scale; records without that field: normwise <= {tol:.0e}):"
        );
        for (route, r) in &self.routes {
            let _ = writeln!(out, "  {}", r.verdict(route, tol));
        }
        let _ = writeln!(
            out,
            "\nTimes (vendor / route; > 1 means the route is faster):"
        );
        let _ = writeln!(
            out,
            "  {:<12} {:>8} {:>10} {:>12} {:>12} {:>9} {:>9}",
            "route", "calls", "GFLOP", "vendor s", "route s", "total", "median"
        );
        for (route, r) in &self.routes {
            let fmt_ratio = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}x"));
            let _ = writeln!(
                out,
                "  {:<12} {:>8} {:>10.3} {:>12.4} {:>12.4} {:>9} {:>9}",
                route,
                r.compared,
                r.flops / 1e9,
                r.vendor_ns as f64 / 1e9,
                r.route_ns as f64 / 1e9,
                fmt_ratio(r.speedup()),
                fmt_ratio(r.median_ratio())
            );
        }
        let _ = writeln!(
            out,
            "\nNormwise relative difference, calls per bucket (bucket = upper decade):"
        );
        self.render_hist(&mut out, |r| &r.hist_norm);
        let _ = writeln!(
            out,
            "\nComponentwise (max_ij) relative difference, calls per bucket:"
        );
        self.render_hist(&mut out, |r| &r.hist_comp);
        if self.routes.values().any(|r| r.worst_bound_ratio.is_some()) {
            let _ = writeln!(
                out,
                "\nDifference on the data's scale, ||dC||_F / (|alpha| ||A||_F ||B||_F + |beta| ||C||_F), calls per bucket:"
            );
            self.render_hist(&mut out, |r| &r.hist_scaled);
        }
        let _ = writeln!(out, "\nWorst {} calls:", worst.min(self.worst.len()));
        let _ = writeln!(
            out,
            "  {:>8} {:<12} {:<22} {:>7} {:>7} {:>7} {:>8} {:>10} {:>10} {:>10} {:>10}",
            "seq",
            "route",
            "symbol",
            "m",
            "n",
            "k",
            "nbar",
            "normwise",
            "compwise",
            "vendor ms",
            "route ms"
        );
        for c in self.worst.iter().take(worst) {
            let Some(ab) = &c.ab else { continue };
            let _ = writeln!(
                out,
                "  {:>8} {:<12} {:<22} {:>7} {:>7} {:>7} {:>8.0} {:>10.2e} {:>10.2e} {:>10.3} {:>10.3}",
                c.seq,
                c.route,
                c.sym,
                c.m,
                c.n,
                c.k,
                c.nbar(),
                ab.rel_norm,
                ab.max_rel_comp,
                ab.vendor_ns as f64 / 1e6,
                ab.route_ns as f64 / 1e6
            );
        }
        out
    }

    fn render_hist(&self, out: &mut String, hist: impl Fn(&RouteAb) -> &[usize; BUCKETS]) {
        let _ = write!(out, "  {:<12}", "route");
        for b in 0..BUCKETS {
            let _ = write!(out, " {:>7}", bucket_label(b));
        }
        out.push('\n');
        for (route, r) in &self.routes {
            let _ = write!(out, "  {route:<12}");
            for n in hist(r) {
                let _ = write!(out, " {n:>7}");
            }
            out.push('\n');
        }
    }
}

fn nan_high(x: f64) -> f64 {
    if x.is_nan() { f64::INFINITY } else { x }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::trace::{AbResult, Line, parse_line};

    fn call(seq: u64, route: &str, ab: Option<AbResult>) -> CallRecord {
        let line = format!(
            r#"{{"type":"call","seq":{seq},"t_ns":0,"dur_ns":1,"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","m":100,"n":100,"k":100,"lda":100,"ldb":100,"ldc":100,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"{route}"}}"#
        );
        let Line::Call(mut c) = parse_line(&line, 1).unwrap() else {
            unreachable!()
        };
        c.ab = ab;
        *c
    }

    fn ab(norm: f64, comp: f64, vendor_ns: u64, route_ns: u64) -> Option<AbResult> {
        Some(AbResult {
            max_rel_comp: comp,
            rel_norm: norm,
            vendor_ns,
            route_ns,
            kept: "route".into(),
            skipped: None,
            rel_scaled: None,
        })
    }

    #[test]
    fn buckets_are_decades_with_exact_and_overflow_ends() {
        assert_eq!(bucket(0.0), 0);
        assert_eq!(bucket(1e-30), 1);
        assert_eq!(bucket(1e-17), 1);
        assert_eq!(bucket(2e-17), 2);
        assert_eq!(bucket(1e-16), 2);
        assert_eq!(bucket(1e-6), BUCKETS - 2);
        assert_eq!(bucket(2e-6), BUCKETS - 1);
        assert_eq!(bucket(f64::NAN), BUCKETS - 1);
        assert_eq!(bucket(-1e-16), BUCKETS - 1, "never out of range");
        assert_eq!(bucket(f64::NEG_INFINITY), BUCKETS - 1);
        assert_eq!(bucket_label(0), "0");
        assert_eq!(bucket_label(2), "1e-16");
        assert_eq!(bucket_label(BUCKETS - 1), ">1e-6");
    }

    #[test]
    fn a_pass_shows_the_tolerance_it_was_judged_against() {
        // A long call's normwise difference of 1.4e-9, within its own rounding bound.
        let mut within = ab(1.4e-9, 1e-6, 1000, 1000).unwrap();
        within.rel_scaled = Some(0.3 * ab_scaled_bound(4096));
        let mut c = call(0, "gpu-ozaki", Some(within));
        c.k = 4096;
        let calls = vec![c, call(1, "gpu-ozaki", ab(1e-16, 1e-15, 1000, 1000))];
        let s = AbSummary::of(&calls, DEFAULT_TOL);
        let v = s.routes["gpu-ozaki"].verdict("gpu-ozaki", DEFAULT_TOL);
        assert!(v.starts_with("gpu-ozaki: PASS"), "{v}");
        assert!(
            v.contains("0.30 of the fp64 rounding bound")
                && v.contains("the tolerance")
                && v.contains("worst normwise 1.4e-9")
                && v.contains(&format!("normwise <= {DEFAULT_TOL:.0e}")),
            "{v}"
        );
        // Without recorded bounds the normwise tolerance is the one shown.
        let calls = vec![call(0, "cpu-ozaki", ab(2e-16, 1e-15, 1000, 1000))];
        let v = AbSummary::of(&calls, DEFAULT_TOL).routes["cpu-ozaki"]
            .verdict("cpu-ozaki", DEFAULT_TOL);
        assert!(
            v.contains(&format!(
                "tolerance: normwise <= {DEFAULT_TOL:.0e}, worst normwise 2.0e-16"
            )),
            "{v}"
        );
    }

    #[test]
    fn verdicts_pass_fail_and_count_skips() {
        let skipped = Some(AbResult {
            skipped: Some("too large".into()),
            ..AbResult::default()
        });
        let calls = vec![
            call(0, "cpu-ozaki", ab(1e-16, 1e-13, 2000, 1000)),
            call(1, "cpu-ozaki", ab(3e-16, 1e-15, 4000, 1000)),
            call(2, "gpu-ozaki", ab(2e-5, 1.0, 1000, 1000)),
            call(3, "gpu-ozaki", skipped),
            call(4, "vendor", ab(0.0, 0.0, 10, 10)),
            call(5, "vendor", None),
        ];
        let s = AbSummary::of(&calls, DEFAULT_TOL);
        let cpu = &s.routes["cpu-ozaki"];
        assert_eq!(
            (cpu.compared, cpu.worst_norm, cpu.speedup()),
            (2, 3e-16, Some(3.0))
        );
        assert!(
            cpu.verdict("cpu-ozaki", DEFAULT_TOL)
                .starts_with("cpu-ozaki: PASS, agrees")
        );
        let gpu = &s.routes["gpu-ozaki"];
        assert_eq!((gpu.compared, gpu.skipped), (1, 1));
        let v = gpu.verdict("gpu-ozaki", DEFAULT_TOL);
        assert!(
            v.starts_with("gpu-ozaki: FAIL") && v.contains("1 calls skipped"),
            "{v}"
        );
        assert!(
            s.routes["vendor"]
                .verdict("vendor", DEFAULT_TOL)
                .contains("bit-identical")
        );
        // Worst first: the failing gpu call, then cpu seq 1.
        assert_eq!(
            s.worst.iter().map(|c| c.seq).collect::<Vec<_>>(),
            vec![2, 1, 0, 4]
        );
        let text = s.render(2, DEFAULT_TOL);
        assert!(
            text.contains("6 calls, 4 compared against the vendor BLAS, 1 chosen but skipped"),
            "{text}"
        );
        assert!(text.contains("Worst 2 calls"), "{text}");
    }

    #[test]
    fn scaled_differences_are_judged_against_the_fp64_bound_of_their_k() {
        let scaled = |x: f64| {
            Some(AbResult {
                rel_norm: 1e-9,
                max_rel_comp: 1.0,
                rel_scaled: Some(x),
                kept: "route".into(),
                ..AbResult::default()
            })
        };
        // k = 100: bound 2 * 102 u = 1.13e-14. A large normwise difference (cancellation)
        // within the bound passes; twice the bound fails.
        let bound = ab_scaled_bound(100);
        let ok = vec![call(0, "builtin", scaled(0.5 * bound))];
        let s = AbSummary::of(&ok, DEFAULT_TOL);
        assert!(s.routes["builtin"].passes(DEFAULT_TOL));
        assert!(
            s.routes["builtin"]
                .verdict("builtin", DEFAULT_TOL)
                .contains("0.50 of the fp64 rounding bound")
        );
        let bad = vec![
            call(0, "gpu-ozaki", scaled(0.5 * bound)),
            call(1, "gpu-ozaki", scaled(2.0 * bound)),
        ];
        let s = AbSummary::of(&bad, DEFAULT_TOL);
        assert!(!s.routes["gpu-ozaki"].passes(DEFAULT_TOL));
        assert!(
            s.routes["gpu-ozaki"]
                .verdict("gpu-ozaki", DEFAULT_TOL)
                .starts_with("gpu-ozaki: FAIL, 1 of 2 calls")
        );
    }

    #[test]
    fn nan_difference_is_the_worst_and_fails() {
        let calls = vec![
            call(0, "gpu-ozaki", ab(f64::NAN, f64::NAN, 1, 1)),
            call(1, "gpu-ozaki", ab(1e-3, 1e-3, 1, 1)),
        ];
        let s = AbSummary::of(&calls, DEFAULT_TOL);
        assert!(!s.routes["gpu-ozaki"].passes(DEFAULT_TOL));
        assert_eq!(s.worst[0].seq, 0);
    }

    #[test]
    fn a_trace_without_ab_fields_says_how_to_get_them() {
        let calls = vec![call(0, "vendor", None)];
        assert!(
            AbSummary::of(&calls, DEFAULT_TOL)
                .render(5, DEFAULT_TOL)
                .contains("OZAKI_AB=1")
        );
    }
}
