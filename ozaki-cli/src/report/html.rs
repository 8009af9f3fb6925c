//! The report page: plain HTML with inline CSS and the plots embedded as PNG data URIs, so
//! the one file is the whole report (no scripts, no network, no external files).

use super::{Figure, Report};
use crate::ab_report::AbSummary;
use ozaki_core::stats::SMALL_NBAR;
use ozaki_core::trace::CallRecord;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Standard base64 (RFC 4648, with padding), for the data URIs.
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}\
th{background:#eee}td.l,th.l{text-align:left}figure{margin:1.5em 0}figcaption{color:#555;font-size:90%}\
img{max-width:100%;border:1px solid #ddd}code{background:#f4f4f4;padding:0 3px}.fail{color:#b00}.pass{color:#070}";

/// The whole page.
pub fn page(report: &Report, figures: &[Figure]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n",
        t = escape(&report.title)
    );
    let _ = writeln!(
        h,
        "<p>{} trace(s), written by <code>ozaki report</code> {}. Call sizes use nbar = 2mn/(m+n); quantiles are FLOP-weighted (Ozaki 2.5, section 6.1).</p>",
        report.workloads.len(),
        env!("CARGO_PKG_VERSION")
    );
    if let Some(p) = report.workloads.iter().find_map(|w| w.predicted.as_ref()) {
        let _ = writeln!(h, "<p>Predictions: {}.</p>", escape(&p.model));
        if let Some(note) = p.no_gpu_note() {
            let _ = writeln!(
                h,
                "<p class=\"note\"><strong>Note:</strong> {}.</p>",
                escape(&note)
            );
        }
    }
    workloads_table(&mut h, report);
    for f in figures {
        let _ = writeln!(
            h,
            "<figure><img id=\"{id}\" src=\"data:image/png;base64,{data}\" alt=\"{alt}\" width=\"{w}\" height=\"{ht}\"><figcaption>{cap} (also saved as <code>{file}</code>)</figcaption></figure>",
            id = f.file.trim_end_matches(".png"),
            data = base64(&f.png),
            alt = escape(f.alt),
            w = f.size.0,
            ht = f.size.1,
            cap = escape(&f.caption),
            file = escape(f.file)
        );
    }
    routes_table(&mut h, report);
    ab_section(&mut h, report);
    h.push_str("</body></html>\n");
    h
}

fn workloads_table(h: &mut String, report: &Report) {
    h.push_str("<h2>Workloads</h2>\n<table><tr><th class=\"l\">workload</th><th class=\"l\">program</th><th>calls</th><th>GFLOP</th>");
    let _ = writeln!(
        h,
        "<th>nbar median (q25&ndash;q75)</th><th>work at nbar &le; {SMALL_NBAR:.0}</th><th>BLAS time (s)</th><th>speedup</th></tr>"
    );
    for w in &report.workloads {
        let program = w
            .trace
            .headers
            .first()
            .map(|hd| {
                super::paths::command_line(
                    hd.argv.as_deref().unwrap_or(std::slice::from_ref(&hd.exe)),
                )
            })
            .unwrap_or_default();
        let blas_s: f64 = w.trace.calls.iter().map(|c| c.dur_ns as f64).sum::<f64>() / 1e9;
        let (nbar, small) = match &w.stats {
            Some(s) => (
                format!("{:.0} ({:.0}&ndash;{:.0})", s.median, s.q1, s.q3),
                format!("{:.0}%", s.share_small * 100.0),
            ),
            None => ("&ndash;".into(), "&ndash;".into()),
        };
        let mut speedup = Vec::new();
        if let Some(p) = &w.predicted {
            speedup.push(format!(
                "{:.2}x predicted vs {}",
                p.speedup,
                escape(&p.baseline)
            ));
        }
        if let Some((s, calls)) = w.measured {
            speedup.push(format!("{s:.2}x measured ({calls} A/B calls)"));
        }
        let speedup = if speedup.is_empty() {
            "&ndash;".to_string()
        } else {
            speedup.join("<br>")
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\"><code>{}</code></td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td></tr>",
            escape(&w.name),
            escape(&truncate(&program, 80)),
            w.trace.calls.len(),
            w.flops() / 1e9,
            nbar,
            small,
            blas_s,
            speedup
        );
    }
    h.push_str("</table>\n");
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        s.chars()
            .take(max - 1)
            .chain(std::iter::once('…'))
            .collect()
    }
}

fn routes_table(h: &mut String, report: &Report) {
    h.push_str("<h2>Routes</h2>\n<table><tr><th class=\"l\">workload</th><th class=\"l\">route</th><th>calls</th><th>GFLOP</th><th>share of FLOPs</th><th>time (s)</th><th class=\"l\">fallback reasons</th></tr>\n");
    for w in &report.workloads {
        // route -> (calls, FLOPs, ns, fallback reason -> count)
        type PerRoute<'a> = (usize, f64, u64, BTreeMap<&'a str, usize>);
        let mut per: BTreeMap<&str, PerRoute> = BTreeMap::new();
        for c in &w.trace.calls {
            let e = per.entry(c.route.as_str()).or_default();
            e.0 += 1;
            e.1 += c.flops();
            e.2 += c.dur_ns;
            if let Some(f) = &c.fallback {
                *e.3.entry(f.as_str()).or_default() += 1;
            }
        }
        let total = w.flops().max(f64::MIN_POSITIVE);
        for (route, (calls, flops, ns, reasons)) in per {
            let reasons: Vec<String> = reasons
                .iter()
                .map(|(r, n)| format!("{} &times;{n}", escape(r)))
                .collect();
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{calls}</td><td>{:.3}</td><td>{:.1}%</td><td>{:.3}</td><td class=\"l\">{}</td></tr>",
                escape(&w.name),
                escape(route),
                flops / 1e9,
                100.0 * flops / total,
                ns as f64 / 1e9,
                reasons.join(", ")
            );
        }
    }
    h.push_str("</table>\n");
}

fn ab_section(h: &mut String, report: &Report) {
    h.push_str("<h2>A/B comparison against the vendor BLAS</h2>\n");
    let all: Vec<CallRecord> = report
        .workloads
        .iter()
        .flat_map(|w| w.trace.calls.iter().cloned())
        .collect();
    let ab = AbSummary::of(&all, report.tol);
    if ab.is_empty() {
        h.push_str("<p>No call was compared. Run the program with <code>OZAKI_AB=1</code> (or a fraction such as <code>0.1</code>) to record the vendor's result and time beside each chosen route's.</p>\n");
        return;
    }
    h.push_str("<ul>\n");
    for (route, r) in &ab.routes {
        let class = if r.passes(report.tol) { "pass" } else { "fail" };
        let _ = writeln!(
            h,
            "<li class=\"{class}\">{}</li>",
            escape(&r.verdict(route, report.tol))
        );
    }
    h.push_str("</ul>\n<table><tr><th class=\"l\">route</th><th>compared</th><th>skipped</th><th>worst normwise</th><th>worst componentwise</th><th>vendor s</th><th>route s</th><th>vendor/route</th></tr>\n");
    for (route, r) in &ab.routes {
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.4}</td><td>{:.4}</td><td>{}</td></tr>",
            escape(route),
            r.compared,
            r.skipped,
            r.worst_norm,
            r.worst_comp,
            r.vendor_ns as f64 / 1e9,
            r.route_ns as f64 / 1e9,
            r.speedup().map_or("&ndash;".into(), |s| format!("{s:.2}x"))
        );
    }
    h.push_str("</table>\n<p>Worst calls (normwise):</p>\n<table><tr><th>seq</th><th class=\"l\">route</th><th class=\"l\">symbol</th><th>m</th><th>n</th><th>k</th><th>normwise</th><th>componentwise</th></tr>\n");
    for c in ab.worst.iter().take(10) {
        if let Some(a) = &c.ab {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2e}</td><td>{:.2e}</td></tr>",
                c.seq,
                escape(&c.route),
                escape(&c.sym),
                c.m,
                c.n,
                c.k,
                a.rel_norm,
                a.max_rel_comp
            );
        }
    }
    h.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn escape_neutralises_markup() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
