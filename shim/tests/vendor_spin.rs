//! The vendor's spin timeout under the shim (`OZAKI_VENDOR_SPIN`): an OpenBLAS the program
//! loads after start-up, as Python loads NumPy's, gets the short spin, so its idle threads
//! stop burning the cores within milliseconds of a call; a timeout the user set, `keep`, and
//! an OpenBLAS that initialised before the shim's constructor are left alone.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;

const OPENBLAS: &str = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3";

/// The client, or `None` after a visible skip without a compiler or Debian's OpenBLAS.
fn client() -> Option<PathBuf> {
    if !require(
        std::path::Path::new(OPENBLAS).exists(),
        "Debian's OpenBLAS",
        "apt-get install libopenblas0-pthread",
    ) {
        return None;
    }
    static BIN: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BIN.get_or_init(|| build_c(&work_dir("vendor-spin"), "vendor_spin", &[]))
        .clone()
}

/// What one run printed: the timeout it was given and the CPU its idle pool burned in 300 ms.
struct Seen {
    timeout: String,
    idle_cpu_ms: f64,
}

fn run(mut cmd: Command) -> Seen {
    cmd.env("OPENBLAS_NUM_THREADS", "2")
        .env_remove("OPENBLAS_THREAD_TIMEOUT");
    let out = String::from_utf8_lossy(&run_ok(&mut cmd).stdout).into_owned();
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name:?} in {out}"))
            .trim()
            .to_string()
    };
    Seen {
        timeout: field("timeout "),
        idle_cpu_ms: field("idle_cpu_ms ").parse().unwrap(),
    }
}

/// The lowest idle CPU of three runs, and the highest: a busy test machine can starve a
/// spinning thread (on 2 loaded cores the default's 0.1 s of spinning burned 12-103 ms, with
/// builds running beside the tests 11.6-28 ms) but cannot make a sleeping one burn (the short
/// spin's: 0-2 ms).
fn idle_range(make: impl Fn() -> Command) -> (String, f64, f64) {
    let seen: Vec<Seen> = (0..3).map(|_| run(make())).collect();
    let lo = seen
        .iter()
        .map(|s| s.idle_cpu_ms)
        .fold(f64::INFINITY, f64::min);
    let hi = seen.iter().map(|s| s.idle_cpu_ms).fold(0.0, f64::max);
    (seen[0].timeout.clone(), lo, hi)
}

/// Under the shim, a later-loaded OpenBLAS's idle thread sleeps within milliseconds of the
/// call; with `OZAKI_VENDOR_SPIN=keep` it spins for OpenBLAS's own ~0.1 s, as without the
/// shim.
#[test]
fn a_later_loaded_openblas_stops_spinning_soon_after_a_call() {
    let Some(prog) = client() else { return };
    let with = |spin: Option<&str>| {
        let mut c = shimmed(&prog, None);
        c.arg(OPENBLAS);
        if let Some(s) = spin {
            c.env("OZAKI_VENDOR_SPIN", s);
        }
        c
    };
    let (timeout, short, _) = idle_range(|| with(None));
    assert_eq!(timeout, "22", "the shim's default spin");
    let (timeout, _, kept) = idle_range(|| with(Some("keep")));
    assert_eq!(timeout, "unset");
    let (_, _, plain_hi) = idle_range(|| {
        let mut c = plain(&prog);
        c.arg(OPENBLAS);
        c
    });
    assert!(
        short < 5.0 && kept > 8.0 && plain_hi > 8.0,
        "idle CPU in 300 ms after a call: {short:.1} ms under the shim, {kept:.1} ms with \
         keep, {plain_hi:.1} ms without the shim"
    );
}

/// A timeout the user set reaches the program unchanged and is what the trace header
/// records; a bad setting is reported and changes nothing.
#[test]
fn the_users_timeout_is_kept_and_recorded() {
    let Some(prog) = client() else { return };
    let dir = work_dir("vendor-spin-user");
    let trace = dir.join("t.jsonl");
    let mut c = shimmed(&prog, Some(&trace));
    c.arg(OPENBLAS).env("OPENBLAS_NUM_THREADS", "2");
    c.env("OPENBLAS_THREAD_TIMEOUT", "25");
    let out = String::from_utf8_lossy(&run_ok(&mut c).stdout).into_owned();
    assert!(out.contains("timeout 25\n"), "{out}");
    assert!(out.contains("c00 9.0"), "{out}");
    let t = read_trace(&trace);
    assert_eq!(t.headers[0].vendor_spin_log2, Some(25));

    let mut c = shimmed(&prog, None);
    c.env("OZAKI_VENDOR_SPIN", "forever");
    let o = run_ok(&mut c);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("OZAKI_VENDOR_SPIN=\"forever\"") && err.contains("left as it is"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("timeout unset"));
}

/// A program linked with OpenBLAS initialised it before the shim's constructor ran: the
/// shim sets nothing it could not apply, and its trace says the spin is unknown.
#[test]
fn an_openblas_loaded_before_the_shim_keeps_its_spin() {
    let Some(_) = client() else { return };
    let dir = work_dir("vendor-spin-linked");
    let Some(prog) = build_c(&dir, "vendor_spin", &["-Wl,--no-as-needed", "-lblas"]) else {
        return;
    };
    let trace = dir.join("t.jsonl");
    let mut c = over(
        shimmed(&prog, Some(&trace)),
        "/usr/lib/x86_64-linux-gnu/openblas-pthread",
    );
    c.arg(OPENBLAS).env_remove("OPENBLAS_THREAD_TIMEOUT");
    let out = String::from_utf8_lossy(&run_ok(&mut c).stdout).into_owned();
    assert!(out.contains("timeout unset"), "{out}");
    assert_eq!(read_trace(&trace).headers[0].vendor_spin_log2, None);
}
