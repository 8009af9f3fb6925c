//! Soak: 16 threads making many small dgemm/dsyrk calls under tracing, over a million calls
//! in one process on `auto`, with the shim's paths mixed in that process (tests/c/soak.c:
//! LP64 names on the vendor BLAS, ILP64 names on the built-in kernel, CBLAS names with their
//! nested `dgemm_`, quick returns and illegal calls), then the same mix on `cpu-ozaki`. Every
//! call must be recorded once, on the path its kind takes, and the process's memory must not
//! grow once it is warm: a leak of 8 bytes per call in the shim, its trace queue or the routes
//! fails the bound. Kept well under a minute on a 2-core CI machine.

mod common;

use common::*;
use ozaki_core::trace::CallRecord;
use std::collections::BTreeMap;

/// Threads of the client.
const THREADS: u64 = 16;
/// Calls per thread of the `auto` run: a million calls in all.
const AUTO_CALLS: u64 = 62_500;
/// Calls per thread of the `cpu-ozaki` run (each call is emulated).
const CPU_OZAKI_CALLS: u64 = 1_000;

/// Resident memory growth allowed between the warm-up point (after the first tenth of the
/// calls) and the end. The client's processes run with one malloc arena
/// (`MALLOC_ARENA_MAX=1`): with glibc's default of one arena per thread, records allocated
/// by the calling threads and freed by the trace sink's flush thread leave each arena at its
/// own high-water mark, which settles only after several megabytes (measured: 4 to 6 MiB
/// more at the end than at the tenth, for 0.3 to 2.4 million calls, that is bounded, not
/// per call). With one arena the growth measured -0.2 to +0.1 MiB.
const MAX_GROWTH_KIB: i64 = 2 * 1024;

/// The smallest per-call leak the bound must catch, in bytes.
const LEAK_PER_CALL: u64 = 8;

fn rss(stderr: &str) -> (i64, i64) {
    let (_, v) =
        numbers_after(stderr, "rss_kib").unwrap_or_else(|| panic!("no rss line:\n{stderr}"));
    (v[0], v[1])
}

/// The client's count of its calls of each kind (`calls lp64 N ilp64 N ...`).
fn kinds(stdout: &str) -> BTreeMap<String, u64> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("calls "))
        .unwrap_or_else(|| panic!("no calls line:\n{stdout}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    w.chunks(2)
        .map(|p| (p[0].to_string(), p[1].parse().expect("a count")))
        .collect()
}

/// Records per (path, route) class: the LP64 names, the ILP64 ones, the CBLAS ones.
fn classes(calls: &[CallRecord]) -> BTreeMap<(&'static str, String), u64> {
    let mut out = BTreeMap::new();
    for c in calls {
        let names = if c.sym.starts_with("cblas_") {
            "cblas"
        } else if c.ilp64 {
            "ilp64"
        } else {
            "lp64"
        };
        *out.entry((names, c.route.clone())).or_insert(0) += 1;
    }
    out
}

/// Runs the client on `route` with `calls` per thread and checks its records; returns the
/// output and the resident memory after the tenth and at the end.
fn soak(
    dir: &std::path::Path,
    prog: &std::path::Path,
    route: &str,
    calls: u64,
) -> (String, i64, i64) {
    let trace = dir.join(format!("{route}.jsonl"));
    let o = run_ok(
        shimmed(prog, Some(&trace))
            .args([THREADS.to_string(), calls.to_string()])
            .env("OZAKI_ROUTE", route)
            .env("OZAKI_THREADS", "1")
            .env("MALLOC_ARENA_MAX", "1"),
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let k = kinds(&out);
    let t = read_trace(&trace);
    let _ = std::fs::remove_file(&trace);
    assert_eq!(
        t.calls.len() as u64,
        THREADS * calls,
        "{route}: records lost"
    );
    let mut seqs: Vec<u64> = t.calls.iter().map(|c| c.seq).collect();
    seqs.sort_unstable();
    assert!(
        seqs.iter().enumerate().all(|(i, &s)| s == i as u64),
        "{route}: seq has gaps or repeats"
    );
    // Every kind of call took its own path: the computed ones the route (the ILP64 names
    // have no vendor, so `auto` computes them on the built-in kernel), quick returns and
    // illegal calls their own records.
    let computed = |ilp64: bool| match route {
        "auto" if ilp64 => "builtin",
        "auto" => "vendor",
        other => other,
    };
    let want: BTreeMap<(&'static str, String), u64> = [
        (("lp64", computed(false).to_string()), k["lp64"]),
        (("lp64", "quick".to_string()), k["quick"]),
        (("lp64", "xerbla".to_string()), k["illegal"]),
        (("ilp64", computed(true).to_string()), k["ilp64"]),
        (("cblas", computed(false).to_string()), k["cblas"]),
    ]
    .into_iter()
    .collect();
    assert_eq!(classes(&t.calls), want, "{route}: records per kind of call");
    assert_eq!(
        k["reports"], k["illegal"],
        "{route}: one report per illegal call"
    );
    let (tenth, end) = rss(&String::from_utf8_lossy(&o.stderr));
    eprintln!(
        "{route}: {} calls, resident {tenth} KiB after a tenth, {end} KiB at the end",
        THREADS * calls
    );
    (out, tenth, end)
}

#[test]
fn sixteen_threads_of_mixed_calls_keep_every_record_and_flat_memory() {
    let dir = work_dir("soak");
    let Some(prog) = build_c(&dir, "soak", &["-lblas", "-lpthread"]) else {
        return;
    };
    if !require(
        std::path::Path::new("/usr/lib/x86_64-linux-gnu/libblas64.so.3").exists(),
        "Debian's ILP64 reference BLAS (the soak client's ILP64 calls without the shim)",
        "apt-get install libblas64-dev",
    ) {
        return;
    }
    let started = std::time::Instant::now();
    let without = run_ok(plain(&prog).args([THREADS.to_string(), AUTO_CALLS.to_string()]));

    // The bound must be tighter than the smallest leak it is there to catch.
    let after_warm_up = THREADS * (AUTO_CALLS - AUTO_CALLS / 10);
    let smallest_leak_kib = (LEAK_PER_CALL * after_warm_up / 1024) as i64;
    assert!(
        smallest_leak_kib >= 3 * MAX_GROWTH_KIB,
        "a leak of {LEAK_PER_CALL} bytes per call ({smallest_leak_kib} KiB) must clearly exceed the bound"
    );

    for (route, calls) in [("auto", AUTO_CALLS), ("cpu-ozaki", CPU_OZAKI_CALLS)] {
        let (out, tenth, end) = soak(&dir, &prog, route, calls);
        if route == "auto" {
            // The vendor's bits for the LP64 and CBLAS names, the built-in kernel's (the
            // reference's) for the ILP64 ones: exactly the program's own output.
            assert_same_output("soak on auto", &without.stdout, out.as_bytes());
        }
        assert!(
            end - tenth <= MAX_GROWTH_KIB,
            "{route}: resident memory grew from {tenth} KiB to {end} KiB"
        );
    }
    eprintln!("soak took {:.1} s", started.elapsed().as_secs_f64());
}
