//! How close the engine's predictions came to what the calls measured: for every call the
//! engine decided (`OZAKI_ROUTE=auto`, trace field `engine`) and that ran the route it was
//! priced for (no `fallback`), the ratio of its measured time `dur_ns` to the prediction for
//! that route as the engine used it (`predicted_s[route]`, plus `engine.wake_s` on a GPU
//! route, times `engine.correction`, plus `engine.queue_s`).
//!
//! Calls priced at their size class's bound (small calls the engine sends to the vendor
//! without pricing their own shape) are counted apart: their prediction is the bound's, an
//! upper bound for the decision's sake, not a prediction of the call.

use ozaki_core::trace::{CLASS_BOUND_NOTE, CallRecord};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::io::Write;

/// A call counts as predicted well within this relative error.
pub const WELL: f64 = 0.15;

/// The key of the calls priced at their size class's bound.
const CLASS_BOUND: &str = "priced at a class bound";

/// Measured / predicted ratios, per route taken.
#[derive(Debug, Default)]
pub struct Predictions {
    by_route: BTreeMap<String, Vec<f64>>,
    class_bound: Vec<f64>,
}

/// The prediction the engine used for the route `c` ran, in seconds, if it priced that
/// route and `c` ran it.
pub fn used_prediction_s(c: &CallRecord) -> Option<f64> {
    let e = c.engine.as_ref()?;
    if c.fallback.is_some() || c.dur_ns == 0 {
        return None;
    }
    let p = *e.predicted_s.get(&c.route)?;
    // The vendor's wake stretches the GPU routes' host copies, never the vendor's own time.
    let wake = match c.route.as_str() {
        "vendor" => 0.0,
        _ => e.wake_s.unwrap_or(0.0),
    };
    let s = (p + wake) * e.correction.unwrap_or(1.0) + e.queue_s.unwrap_or(0.0);
    (s.is_finite() && s > 0.0).then_some(s)
}

/// What a set of ratios says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Calls.
    pub calls: usize,
    /// Median of |measured / predicted - 1|.
    pub median_abs_err: f64,
    /// Median of measured / predicted (above 1: calls ran slower than predicted).
    pub median_ratio: f64,
    /// Share of calls within [`WELL`].
    pub within: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

impl Spread {
    /// The spread of `ratios`; `None` when empty.
    pub fn of(ratios: &[f64]) -> Option<Spread> {
        if ratios.is_empty() {
            return None;
        }
        let mut r = ratios.to_vec();
        let mut e: Vec<f64> = r.iter().map(|x| (x - 1.0).abs()).collect();
        let within = e.iter().filter(|&&x| x <= WELL).count() as f64 / e.len() as f64;
        Some(Spread {
            calls: r.len(),
            median_abs_err: median(&mut e),
            median_ratio: median(&mut r),
            within,
        })
    }

    fn json(&self) -> Value {
        json!({
            "calls": self.calls,
            "median_abs_err": self.median_abs_err,
            "median_ratio": self.median_ratio,
            "within_15pct": self.within,
        })
    }
}

impl Predictions {
    /// Adds one call (ignored when the engine did not price the route it ran).
    pub fn add(&mut self, c: &CallRecord) {
        let Some(p) = used_prediction_s(c) else {
            return;
        };
        let ratio = c.dur_ns as f64 * 1e-9 / p;
        let bound = c
            .engine
            .as_ref()
            .is_some_and(|e| e.reason.contains(CLASS_BOUND_NOTE));
        if bound {
            self.class_bound.push(ratio);
        } else {
            self.by_route
                .entry(c.route.clone())
                .or_default()
                .push(ratio);
        }
    }

    /// The spread over every route's own-shape predictions.
    pub fn all(&self) -> Option<Spread> {
        let all: Vec<f64> = self.by_route.values().flatten().copied().collect();
        Spread::of(&all)
    }

    /// Rows: (what, spread), per route, then all routes, then the class-bound calls.
    fn rows(&self) -> Vec<(String, Spread)> {
        let mut rows: Vec<(String, Spread)> = self
            .by_route
            .iter()
            .filter_map(|(r, v)| Some((r.clone(), Spread::of(v)?)))
            .collect();
        if let Some(a) = self.all() {
            rows.push(("all routes".into(), a));
        }
        if let Some(b) = Spread::of(&self.class_bound) {
            rows.push((CLASS_BOUND.into(), b));
        }
        rows
    }

    /// The text table; nothing when no call was decided by the engine.
    pub fn write(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let rows = self.rows();
        if rows.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "\nPredictions (engine's price for the route taken, against the measured time):"
        )?;
        let mut t = super::Table::new(&[
            "route",
            "calls",
            "median |m/p-1|",
            "median m/p",
            "within 15%",
        ]);
        for (what, s) in rows {
            t.row(vec![
                what,
                s.calls.to_string(),
                format!("{:.1}%", 100.0 * s.median_abs_err),
                format!("{:.2}", s.median_ratio),
                format!("{:.0}%", 100.0 * s.within),
            ]);
        }
        t.write(out)
    }

    /// `ozaki summary --json`'s `predictions`: per route, `all` and `class_bound`.
    pub fn json(&self) -> Value {
        let mut m: Map<String, Value> = self
            .by_route
            .iter()
            .filter_map(|(r, v)| Some((r.clone(), Spread::of(v)?.json())))
            .collect();
        if let Some(a) = self.all() {
            m.insert("all".into(), a.json());
        }
        if let Some(b) = Spread::of(&self.class_bound) {
            m.insert("class_bound".into(), b.json());
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(route: &str, dur_ns: u64, engine: &str, fallback: bool) -> CallRecord {
        let fb = if fallback {
            r#","fallback":"no GPU""#
        } else {
            ""
        };
        let line = format!(
            r#"{{"type":"call","seq":0,"t_ns":0,"dur_ns":{dur_ns},"tid":7,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"N","transb":"N","m":100,"n":100,"k":100,"lda":100,"ldb":100,"ldc":100,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"{route}"{fb},"engine":{engine}}}"#
        );
        serde_json::from_str(&line).unwrap()
    }

    #[test]
    fn the_prediction_used_includes_the_correction_and_the_queue() {
        let c = call(
            "gpu-native",
            3_000_000,
            r#"{"predicted_s":{"gpu-native":0.001,"vendor":0.01},"reason":"r","correction":2.0,"queue_s":0.001}"#,
            false,
        );
        let p = used_prediction_s(&c).unwrap();
        assert!((p - 0.003).abs() < 1e-15, "{p}");
        let mut s = Predictions::default();
        s.add(&c);
        let a = s.all().unwrap();
        assert_eq!(a.calls, 1);
        assert!(a.median_abs_err < 1e-9 && a.within == 1.0, "{a:?}");
    }

    /// A GPU call decided in the vendor's wake was priced with its copies stretched, before
    /// its class's correction; a vendor call's own price never carries the wake.
    #[test]
    fn the_prediction_used_includes_the_wake_on_gpu_routes_only() {
        let engine = r#"{"predicted_s":{"gpu-native":0.001,"vendor":0.01},"reason":"r","correction":2.0,"wake_s":0.0005}"#;
        let gpu = call("gpu-native", 3_000_000, engine, false);
        let p = used_prediction_s(&gpu).unwrap();
        assert!((p - 0.003).abs() < 1e-15, "{p}");
        let vendor = call("vendor", 20_000_000, engine, false);
        let p = used_prediction_s(&vendor).unwrap();
        assert!((p - 0.02).abs() < 1e-15, "{p}");
    }

    #[test]
    fn fallbacks_unpriced_routes_and_class_bounds_are_kept_out_of_the_routes() {
        let mut s = Predictions::default();
        let e = r#"{"predicted_s":{"vendor":0.001},"reason":"r"}"#;
        s.add(&call("vendor", 2_000_000, e, false)); // 2x slower than predicted
        s.add(&call("vendor", 1_100_000, e, false)); // within 15%
        s.add(&call("vendor", 1_000_000, e, true)); // fell back: not the route priced
        s.add(&call("gpu-ozaki", 1_000_000, e, false)); // route not priced
        let bound = format!(
            r#"{{"predicted_s":{{"vendor":0.001}},"reason":"vendor ({CLASS_BOUND_NOTE} 128x128x128)"}}"#
        );
        s.add(&call("vendor", 100_000, &bound, false));
        let a = s.all().unwrap();
        assert_eq!(a.calls, 2);
        assert!((a.median_ratio - 1.55).abs() < 1e-9, "{a:?}");
        assert!((a.within - 0.5).abs() < 1e-12, "{a:?}");
        let v = s.json();
        assert_eq!(v["vendor"]["calls"], 2);
        assert_eq!(v["class_bound"]["calls"], 1);
        assert!(v.get("gpu-ozaki").is_none());
        let mut out = Vec::new();
        s.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("Predictions") && text.contains("priced at a class bound"),
            "{text}"
        );
    }
}
