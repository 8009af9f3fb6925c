//! Load-time code: the shim library installs its constructor, the `ozaki` command carries
//! none of the interposer's.
//!
//! The `ozaki` executable links the shim crate as a Rust library (for the routes it measures
//! and explains); the interposer's process set-up must run only where the library is
//! preloaded. Both ELF files are read with binutils (`readelf`, `objdump`, `nm`): the
//! addresses in the executable's `.init_array` must name no function of the shim crate, and
//! the library's `DT_INIT` must be `_ozaki_shim_on_load`.

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use common::{ozaki_bin, shim_lib};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn tool(name: &str, args: &[&str], file: &Path) -> String {
    let out = Command::new(name)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{name} (binutils) runs: {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?} {} failed",
        file.display()
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Defined symbols by address.
fn symbols(file: &Path) -> BTreeMap<u64, Vec<String>> {
    let mut map: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in tool("nm", &["--defined-only"], file).lines() {
        let mut f = line.split_whitespace();
        let (Some(addr), Some(_), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if let Ok(a) = u64::from_str_radix(addr, 16) {
            map.entry(a).or_default().push(name.to_string());
        }
    }
    map
}

/// A hexadecimal field of `readelf` output.
fn hex(field: &str) -> Option<u64> {
    u64::from_str_radix(field.trim_start_matches("0x"), 16).ok()
}

/// The value of a dynamic-section tag (`INIT`, `INIT_ARRAY`, `INIT_ARRAYSZ`).
fn dynamic(file: &Path, tag: &str) -> Option<u64> {
    let want = format!("({tag})");
    tool("readelf", &["-dW"], file).lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let _ = f.next();
        if f.next()? != want {
            return None;
        }
        let v = f.next()?;
        hex(v).or_else(|| v.parse().ok())
    })
}

/// The function addresses in `.init_array`. In a position-independent file the words are
/// filled at load time from `R_X86_64_RELATIVE` relocations, whose addends are the addresses;
/// otherwise the words hold them.
fn init_array(file: &Path) -> Vec<u64> {
    let (Some(start), Some(size)) = (dynamic(file, "INIT_ARRAY"), dynamic(file, "INIT_ARRAYSZ"))
    else {
        return Vec::new();
    };
    let mut out: Vec<u64> = tool("readelf", &["-rW"], file)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let offset = hex(f.first()?)?;
            (f.len() >= 4 && (start..start + size).contains(&offset)).then(|| hex(f.last()?))?
        })
        .collect();
    let dump = tool("objdump", &["-s", "-j", ".init_array"], file);
    let mut bytes = Vec::new();
    for line in dump
        .lines()
        .skip_while(|l| !l.starts_with("Contents of section"))
        .skip(1)
    {
        for w in line.split_whitespace().skip(1).take(4) {
            if w.len() != 8 || !w.bytes().all(|b| b.is_ascii_hexdigit()) {
                break;
            }
            for i in (0..8).step_by(2) {
                bytes.push(u8::from_str_radix(&w[i..i + 2], 16).unwrap());
            }
        }
    }
    out.extend(
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .filter(|&a| a != 0),
    );
    out
}

#[test]
fn ozaki_binary_runs_no_interposer_constructor() {
    let bin = ozaki_bin();
    let syms = symbols(&bin);
    let entries = init_array(&bin);
    // Rust's own start-up (std's argv capture) is always there: an empty list means the
    // parsing above failed, not that the binary is clean.
    assert!(
        !entries.is_empty(),
        "no .init_array entries read from {}",
        bin.display()
    );
    assert!(
        entries.iter().any(|a| syms.contains_key(a)),
        "no .init_array entry of {} names a symbol: {entries:x?}",
        bin.display()
    );
    for a in entries {
        let names = syms.get(&a).cloned().unwrap_or_default();
        assert!(
            !names.iter().any(|n| n.contains("ozaki_shim")),
            "the ozaki binary's .init_array runs a shim function at {a:#x}: {names:?}"
        );
    }
}

#[test]
fn shim_library_constructor_is_dt_init() {
    let lib = shim_lib();
    let addr = dynamic(&lib, "INIT").unwrap_or_else(|| panic!("{} has no DT_INIT", lib.display()));
    let names = symbols(&lib).remove(&addr).unwrap_or_default();
    assert!(
        names.iter().any(|n| n == "_ozaki_shim_on_load"),
        "DT_INIT of {} is {addr:#x} ({names:?}), not _ozaki_shim_on_load",
        lib.display()
    );
}
