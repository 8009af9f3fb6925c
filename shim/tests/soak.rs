//! Soak: 16 threads making many small dgemm/dsyrk calls under tracing, on the vendor, the
//! built-in and the `cpu-ozaki` routes. Every call must be recorded, and the process's
//! memory must not grow once it is warm (no leak per call in the shim, its trace buffer or
//! the routes). Kept well under a minute on a small CI machine.

mod common;

use common::*;

/// Memory growth allowed between the first tenth of the calls and the end: the allocator's
/// arenas settle during the run, but a leak of even 16 bytes per call over the 320,000
/// vendor calls would pass this.
const MAX_GROWTH_KIB: i64 = 8 * 1024;

fn rss(stderr: &str) -> (i64, i64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("rss_kib"))
        .unwrap_or_else(|| panic!("no rss line:\n{stderr}"));
    let v: Vec<i64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (v[0], v[1])
}

#[test]
fn sixteen_threads_of_small_calls_keep_every_record_and_flat_memory() {
    let dir = work_dir("soak");
    let Some(prog) = build_c(&dir, "soak", &["-lblas", "-lpthread"]) else {
        return;
    };
    let started = std::time::Instant::now();
    let without = run_ok(plain(&prog).args(["16", "20000"]));
    for (route, calls) in [
        ("vendor", 20000u64),
        ("builtin", 20000),
        ("cpu-ozaki", 1000),
    ] {
        let trace = dir.join(format!("{route}.jsonl"));
        let o = run_ok(
            shimmed(&prog, Some(&trace))
                .args(["16", &calls.to_string()])
                .env("OZAKI_ROUTE", route)
                .env("OZAKI_THREADS", "1"),
        );
        if route == "vendor" {
            assert_same_output("soak on the vendor route", &without.stdout, &o.stdout);
        }
        let t = read_trace(&trace);
        assert_eq!(t.calls.len() as u64, 16 * calls, "{route}: records lost");
        let mut seqs: Vec<u64> = t.calls.iter().map(|c| c.seq).collect();
        seqs.sort_unstable();
        assert!(
            seqs.iter().enumerate().all(|(i, &s)| s == i as u64),
            "{route}: seq has gaps or repeats"
        );
        assert!(
            t.calls.iter().all(|c| c.route == route),
            "{route}: some calls took another route"
        );
        let (tenth, end) = rss(&String::from_utf8_lossy(&o.stderr));
        eprintln!(
            "{route}: {} calls, resident {tenth} KiB after a tenth, {end} KiB at the end",
            16 * calls
        );
        assert!(
            end - tenth <= MAX_GROWTH_KIB,
            "{route}: resident memory grew from {tenth} KiB to {end} KiB"
        );
    }
    eprintln!("soak took {:.1} s", started.elapsed().as_secs_f64());
}
