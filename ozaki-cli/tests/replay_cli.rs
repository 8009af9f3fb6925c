//! `ozaki replay` as a user runs it: a trace from `traces/` priced with a
//! measured profile gives the same per-record CSV and the same composites as the engine gave
//! when the fixtures were recorded (before the replay priced each record once
//! instead of twice). The engine is deterministic for a given profile and thread count, so
//! any change in a chosen route, a predicted time, a reason or a composite shows here.
//!
//! To re-record after an intended change of the engine's numbers, from the repository root:
//! `ozaki replay traces/lobpcg-b64.jsonl.gz --profile profiles/h200-x2.json --threads 16
//! [--moduli 0 | --csv - | gzip -9n]` into `ozaki-cli/tests/fixtures/replay-lobpcg-b64-h200-x2*`.

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use common::*;
use std::io::Read;
use std::process::Command;

const TRACE: &str = "traces/lobpcg-b64.jsonl.gz";
const PROFILE: &str = "profiles/h200-x2.json";

/// stdout of `ozaki replay TRACE --profile PROFILE --threads 16 <extra>`, run from the
/// repository root (the profile's path is part of the output).
fn replay(extra: &[&str]) -> String {
    let o = Command::new(ozaki_bin())
        .current_dir(repo_root())
        .args(["replay", TRACE, "--profile", PROFILE, "--threads", "16"])
        .args(extra)
        .output()
        .expect("run ozaki replay");
    assert!(
        o.status.success(),
        "ozaki replay {extra:?}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8 output")
}

fn fixture(name: &str) -> String {
    let path = repo_root().join("ozaki-cli/tests/fixtures").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if name.ends_with(".gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_string(&mut s)
            .expect("gzip fixture");
        s
    } else {
        String::from_utf8(bytes).expect("utf-8 fixture")
    }
}

/// The per-record CSV of `ozaki replay TRACE --profile profiles/h200.json --threads 16`, run
/// from the repository root (TRACE relative to it or absolute).
fn replay_csv_h200(trace: &std::path::Path) -> String {
    let o = Command::new(ozaki_bin())
        .current_dir(repo_root())
        .arg("replay")
        .arg(trace)
        .args([
            "--profile",
            "profiles/h200.json",
            "--threads",
            "16",
            "--csv",
            "-",
        ])
        .output()
        .expect("run ozaki replay");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("utf-8 output")
}

/// Line by line, so a difference names the record.
fn assert_same(got: &str, want: &str, what: &str) {
    for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
        assert_eq!(g, w, "{what}, line {}", i + 1);
    }
    assert_eq!(
        got.lines().count(),
        want.lines().count(),
        "{what}: line count"
    );
}

#[test]
fn replay_csv_rows_are_the_recorded_ones() {
    let got = replay(&["--csv", "-"]);
    // the premise: the trace exercises more than one chosen route and every route's column
    assert!(got.contains(",vendor,") && got.contains(",gpu-native,"));
    assert!(got.starts_with(
        "seq,routine,m,n,k,nbar,flops,route,storage,recon_host,moduli,rate_gflops,t_vendor_s,t_gpu-native_s,t_gpu-ozaki_s,reason\n"
    ));
    assert_same(
        &got,
        &fixture("replay-lobpcg-b64-h200-x2.csv.gz"),
        "per-record CSV",
    );
}

#[test]
fn replay_composites_are_the_recorded_ones() {
    assert_same(
        &replay(&[]),
        &fixture("replay-lobpcg-b64-h200-x2.txt"),
        "composites",
    );
    // --moduli 0: the accuracy contract is never met, so gpu-ozaki takes no record
    assert_same(
        &replay(&["--moduli", "0"]),
        &fixture("replay-lobpcg-b64-h200-x2-moduli0.txt"),
        "composites with --moduli 0",
    );
}

/// `ozaki replay` of PySCF CCSD (benzene, cc-pVDZ; a trace without `engine.concurrent`):
/// the calls in flight are reconstructed from the recorded intervals (up to 2 at once on
/// the machine it was recorded on), and the vendor is priced at each call's share of the
/// CPU. Priced alone at 16 threads, the vendor's total is about 2.5 s against 242 s measured;
/// at each call's share it is 3.77 s with this profile. The largest products (1953x977x1953)
/// price the GPU faster.
#[test]
fn concurrent_calls_price_the_vendor_at_their_share_of_the_cpu() {
    let csv = replay_csv_h200(std::path::Path::new("traces/ccsd-benzene-ccpvdz.jsonl.gz"));
    let mut vendor_total = 0.0;
    let mut largest = Vec::new();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (cm, cn, ck, croute, cv) = (
        col("m"),
        col("n"),
        col("k"),
        col("route"),
        col("t_vendor_s"),
    );
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        vendor_total += f[cv].parse::<f64>().unwrap();
        if (f[cm], f[cn], f[ck]) == ("1953", "977", "1953") {
            largest.push(f[croute].to_string());
        }
    }
    assert!(
        vendor_total > 3.4,
        "vendor priced {vendor_total:.3} s in all: concurrency not priced (alone: about 2.5 s)"
    );
    assert!(
        !largest.is_empty() && largest.iter().all(|r| r.starts_with("gpu")),
        "{largest:?}"
    );
}

/// A trace whose header says the shim shared the vendor's threads among calls beside each
/// other (`vendor_threads_shared`) is replayed so: PySCF CCSD's vendor calls made beside
/// another are priced at their share of 16 threads alone (8 each), not at a shared pool's
/// rate, so their vendor total changes; the same trace without the field replays as before.
#[test]
fn a_trace_of_shared_vendor_threads_is_priced_at_each_calls_share() {
    let dir = work_dir("replay-shared-threads");
    let mut text = String::new();
    let gz = std::fs::read(repo_root().join("traces/ccsd-benzene-ccpvdz.jsonl.gz")).unwrap();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .expect("gzip trace");
    let (header, rest) = text.split_once('\n').expect("a header line");
    assert!(header.contains("\"header\"") && !header.contains("vendor_threads_shared"));
    let shared = format!(
        "{},\"vendor_threads_shared\":true}}\n{rest}",
        header.trim_end().trim_end_matches('}')
    );
    let (plain, marked) = (dir.join("plain.jsonl"), dir.join("shared.jsonl"));
    std::fs::write(&plain, &text).unwrap();
    std::fs::write(&marked, shared).unwrap();
    let vendor_total = |trace: &std::path::Path| {
        let csv = replay_csv_h200(trace);
        let mut lines = csv.lines();
        let head: Vec<&str> = lines.next().unwrap().split(',').collect();
        let cv = head.iter().position(|h| *h == "t_vendor_s").unwrap();
        lines
            .map(|l| l.split(',').nth(cv).unwrap().parse::<f64>().unwrap())
            .sum::<f64>()
    };
    let (p, s) = (vendor_total(&plain), vendor_total(&marked));
    assert!(
        (s - p).abs() > 0.01 * p,
        "the shared threads changed no price: {p:.3} s against {s:.3} s"
    );
}

/// `--spin N` prices the trace as if its OpenBLAS pools had spun 2^N cycles after each call
/// (`OZAKI_VENDOR_SPIN=N`): with the shortest spin a GPU call made after a threaded vendor
/// call finds no wake, so LOBPCG's trace (recorded without a spin in its header, priced with
/// the profile's measured wake) is priced faster under `auto` than with 2^28 cycles; a spin
/// outside 4-30 is refused.
#[test]
fn replay_prices_the_vendor_spin_it_is_given() {
    let auto_s = |spin: &str| -> f64 {
        let o = Command::new(ozaki_bin())
            .current_dir(repo_root())
            .args(["replay", TRACE, "--profile", "profiles/h100.json"])
            .args(["--threads", "16", "--spin", spin])
            .output()
            .expect("run ozaki replay");
        assert!(o.status.success(), "--spin {spin}: {o:?}");
        let out = String::from_utf8(o.stdout).unwrap();
        out.lines()
            .find_map(|l| l.strip_prefix("auto: predicted "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no auto line: {out}"))
    };
    let (short, long) = (auto_s("4"), auto_s("28"));
    assert!(short < long, "2^4 cycles {short} s, 2^28 cycles {long} s");
    let refused = Command::new(ozaki_bin())
        .current_dir(repo_root())
        .args(["replay", TRACE, "--spin", "31"])
        .output()
        .unwrap();
    assert!(!refused.status.success(), "--spin 31 is refused");
}
