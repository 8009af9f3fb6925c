//! The vendor libraries a set of traces names, with the kernels each said it runs: from the
//! headers (`vendor`, `vendor_core`) and from the records that name a library resolved after
//! the header was written. One gatherer for the text summary and `--json`.

use ozaki_core::trace::{CallRecord, Header};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One vendor library of one symbol: the kernels it said it runs and the vector width of the
/// CPU it ran on (`cpu_simd` of its trace).
#[derive(Debug, Default)]
pub struct Seen {
    pub core: Option<String>,
    pub cpu_simd: Option<String>,
}

impl Seen {
    /// Its kernels and the CPU's vector width when it ran SSE kernels on a CPU with AVX2 or
    /// wider (`ozaki_core::vendor_core::behind_the_cpu`).
    pub fn behind_the_cpu(&self) -> Option<(&str, &str)> {
        let (core, simd) = (self.core.as_deref()?, self.cpu_simd.as_deref()?);
        ozaki_core::vendor_core::behind_the_cpu(core, simd).then_some((core, simd))
    }
}

/// Vendor libraries per (symbol, library), gathered line by line.
#[derive(Debug, Default)]
pub struct Vendors(BTreeMap<(String, String), Seen>);

impl Vendors {
    /// The libraries a header names.
    pub fn add_header(&mut self, h: &Header) {
        for (sym, lib) in &h.vendor {
            self.add(sym, lib, h.vendor_core.get(sym), h.cpu_simd.as_ref());
        }
    }

    /// The library a record names, if any, under `header`, its trace's latest header (the
    /// CPU's vector width).
    pub fn add_call(&mut self, c: &CallRecord, header: Option<&Header>) {
        if let Some(lib) = &c.vendor {
            let simd = header.and_then(|h| h.cpu_simd.as_ref());
            self.add(&c.sym, lib, c.vendor_core.as_ref(), simd);
        }
    }

    fn add(&mut self, sym: &str, lib: &str, core: Option<&String>, simd: Option<&String>) {
        let seen = self
            .0
            .entry((sym.to_string(), lib.to_string()))
            .or_default();
        seen.core = seen.core.take().or_else(|| core.cloned());
        seen.cpu_simd = seen.cpu_simd.take().or_else(|| simd.cloned());
    }

    /// (symbol, library, what was seen), by symbol then library.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Seen)> {
        self.0
            .iter()
            .map(|((s, l), seen)| (s.as_str(), l.as_str(), seen))
    }

    /// As JSON: one object per (symbol, library) with its `kernels`, `cpu_simd` and
    /// `behind_the_cpu`.
    pub fn json(&self) -> Value {
        Value::Array(
            self.iter()
                .map(|(sym, lib, seen)| {
                    json!({"symbol": sym, "library": lib, "kernels": seen.core,
                           "cpu_simd": seen.cpu_simd, "behind_the_cpu": seen.behind_the_cpu().is_some()})
                })
                .collect(),
        )
    }
}
