//! `ozaki summary --json`: the totals of `ozaki summary` as one JSON object on stdout, for
//! scripts that compare runs of one program (`scripts/gpu-check`'s `apps` stage).
//!
//! Fields: `files`, `processes` and `calls`; `gflop`; `blas_s`, the time inside BLAS summed
//! over calls (concurrent calls each count); `busy_s`, the time during which at least one
//! call was running, summed over trace files (one process per file, as `%p` or `%r` in the
//! trace name gives): with one caller at a time it equals `blas_s`, with callers on several
//! threads it is what BLAS held of the program's wall time; `max_in_flight`, the most calls
//! that overlapped in one file; `routes` maps each route to its `calls`, `gflop` and `s`, and
//! `fallbacks` each fallback reason to its number of calls; `predictions` how close the
//! engine's predictions came to the measured times (`super::predictions`: per route taken,
//! `all` routes, and `class_bound` for calls priced at their size class's bound); `vendors`
//! the vendor libraries per symbol with the kernels each said it runs (`super::vendors`).

use super::Totals;
use crate::tracefile::Loaded;
use ozaki_core::trace::CallRecord;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::io::Write;

/// Writes the JSON summary of all `files` taken together, one line.
pub fn render(out: &mut dyn Write, files: &[Loaded]) -> std::io::Result<()> {
    let calls: Vec<&CallRecord> = files.iter().flat_map(|f| &f.trace.calls).collect();
    let mut all = Totals::default();
    let mut by_route: BTreeMap<&str, Totals> = BTreeMap::new();
    let mut fallbacks: BTreeMap<&str, u64> = BTreeMap::new();
    let mut predictions = super::predictions::Predictions::default();
    for c in &calls {
        all.add(c);
        predictions.add(c);
        by_route.entry(c.route.as_str()).or_default().add(c);
        if let Some(why) = &c.fallback {
            *fallbacks.entry(why.as_str()).or_default() += 1;
        }
    }
    let mut vendors = super::vendors::Vendors::default();
    for f in files {
        for h in &f.trace.headers {
            vendors.add_header(h);
        }
        for c in &f.trace.calls {
            vendors.add_call(c, f.trace.headers.last());
        }
    }
    let mut busy_ns = 0u64;
    let mut max_in_flight = 0usize;
    for f in files {
        let (busy, most) = occupancy(&f.trace.calls);
        busy_ns += busy;
        max_in_flight = max_in_flight.max(most);
    }
    let routes: Map<String, Value> = by_route
        .iter()
        .map(|(route, t)| (route.to_string(), totals(t)))
        .collect();
    let v = json!({
        "files": files.len(),
        "processes": files.iter().map(|f| f.trace.headers.len()).sum::<usize>(),
        "calls": all.calls,
        "gflop": all.flops / 1e9,
        "blas_s": all.ns as f64 / 1e9,
        "busy_s": busy_ns as f64 / 1e9,
        "max_in_flight": max_in_flight,
        "routes": routes,
        "fallbacks": fallbacks,
        "predictions": predictions.json(),
        "vendors": vendors.json(),
    });
    serde_json::to_writer(&mut *out, &v)?;
    writeln!(out)
}

/// One route's totals as JSON.
fn totals(t: &Totals) -> Value {
    json!({"calls": t.calls, "gflop": t.flops / 1e9, "s": t.ns as f64 / 1e9})
}

/// The length of the union of the calls' intervals `[t_ns, t_ns + dur_ns)` and the most
/// intervals that overlap at one instant (calls of one process: their clock is the same).
fn occupancy(calls: &[CallRecord]) -> (u64, usize) {
    let mut edges: Vec<(u64, i32)> = calls
        .iter()
        .filter(|c| c.dur_ns > 0)
        .flat_map(|c| [(c.t_ns, 1), (c.t_ns + c.dur_ns, -1)])
        .collect();
    // At equal times the ends come first: back-to-back calls do not overlap.
    edges.sort_unstable();
    let (mut busy, mut depth, mut most, mut since) = (0u64, 0i32, 0i32, 0u64);
    for (t, step) in edges {
        if depth == 0 && step > 0 {
            since = t;
        }
        depth += step;
        most = most.max(depth);
        if depth == 0 {
            busy += t - since;
        }
    }
    (busy, most as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const HEADER: &str = r#"{"type":"header","schema":2,"pid":42,"exe":"/bin/prog","shim_version":"0.1.0","vendor":{},"start_unix_s":1.0}"#;

    fn call(t: u64, dur: u64, route: &str, fallback: Option<&str>) -> String {
        let fb = fallback.map_or(String::new(), |f| format!(r#","fallback":"{f}""#));
        format!(
            r#"{{"type":"call","seq":{t},"t_ns":{t},"dur_ns":{dur},"tid":7,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"N","transb":"N","m":100,"n":100,"k":100,"lda":100,"ldb":100,"ldc":100,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"{route}"{fb}}}"#
        )
    }

    fn summary(files: &[&[String]]) -> Value {
        // one folder per call: the tests of this module run at once and each writes t0, t1, ...
        static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("ozaki-summary-json-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let loaded: Vec<Loaded> = files
            .iter()
            .enumerate()
            .map(|(i, lines)| {
                let p: PathBuf = dir.join(format!("t{i}.jsonl"));
                std::fs::write(&p, format!("{HEADER}\n{}\n", lines.join("\n"))).unwrap();
                crate::tracefile::load(&p).unwrap()
            })
            .collect();
        let mut out = Vec::new();
        render(&mut out, &loaded).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn concurrent_calls_count_once_in_busy_time_and_fully_in_blas_time() {
        // Two threads: [0, 100) and [50, 250) overlap; [300, 400) follows later.
        let v = summary(&[&[
            call(0, 100, "vendor", None),
            call(50, 200, "gpu-native", None),
            call(300, 100, "vendor", Some("no GPU")),
        ]]);
        assert_eq!(v["calls"], 3);
        assert!((v["blas_s"].as_f64().unwrap() - 400e-9).abs() < 1e-15);
        assert!((v["busy_s"].as_f64().unwrap() - 350e-9).abs() < 1e-15);
        assert_eq!(v["max_in_flight"], 2);
        assert_eq!(v["routes"]["vendor"]["calls"], 2);
        assert!((v["routes"]["gpu-native"]["s"].as_f64().unwrap() - 200e-9).abs() < 1e-15);
        assert!((v["gflop"].as_f64().unwrap() - 3.0 * 2e6 / 1e9).abs() < 1e-12);
        assert_eq!(v["fallbacks"]["no GPU"], 1);
    }

    /// The vendors of the header and of the records, with their kernels.
    #[test]
    fn vendors_are_listed_with_their_kernels() {
        let named = call(0, 100, "vendor", None).replace(
            r#""route":"vendor""#,
            r#""route":"vendor","vendor":"/w/libopenblas.so","vendor_core":"Prescott""#,
        );
        let v = summary(&[&[named]]);
        let vendors = v["vendors"].as_array().unwrap();
        let libs: Vec<&str> = vendors
            .iter()
            .map(|x| x["library"].as_str().unwrap())
            .collect();
        assert!(libs.contains(&"/w/libopenblas.so"), "{v}");
        let ob = vendors
            .iter()
            .find(|x| x["library"] == "/w/libopenblas.so")
            .unwrap();
        assert_eq!(
            (&ob["symbol"], &ob["kernels"]),
            (&json!("dgemm_"), &json!("Prescott"))
        );
        assert_eq!(
            ob["behind_the_cpu"], false,
            "no CPU width in this header: {v}"
        );
    }

    #[test]
    fn back_to_back_calls_do_not_overlap_and_files_add_up() {
        let v = summary(&[
            &[call(0, 100, "vendor", None), call(100, 100, "vendor", None)],
            // Another process: its clock starts again at 0, so its time adds to the busy total.
            &[call(0, 100, "vendor", None)],
        ]);
        assert_eq!(v["files"], 2);
        assert_eq!(v["processes"], 2);
        assert_eq!(v["max_in_flight"], 1);
        assert!((v["busy_s"].as_f64().unwrap() - 300e-9).abs() < 1e-15);
    }
}
