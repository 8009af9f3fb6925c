//! The C boundary under what real programs and vendors do at its edges: every vendor's own
//! argument checks and error reports, error handlers that throw or `longjmp`, `fork` during
//! the first call, C with huge leading dimensions, BLAS calls made by library constructors.
//!
//! Every client runs over Debian's reference BLAS and Debian's OpenBLAS (pinned per process
//! by library folder, [`vendors`] and [`over`]), each without the shim and with it: the
//! program must see exactly what its BLAS gives it.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd`, killing it after `limit`; `None` when it had to be killed.
fn run_within(cmd: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

/// Runs an xerbla client's `ilp64` mode (the ILP64 names, which have no vendor, so the shim
/// calls the program's handler itself) under the shim with `route`, traced to `trace`;
/// panics if it hangs.
fn run_ilp64(prog: &Path, trace: &Path, route: &str) -> Output {
    let mut cmd = shimmed(prog, Some(trace));
    run_within(
        cmd.arg("ilp64").env("OZAKI_ROUTE", route),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|| panic!("ILP64 names, OZAKI_ROUTE={route}: the program hung"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `text` without the C hash of the cases the shim computes itself (named "... legal"): a
/// non-vendor route may round those differently; every other line must be the vendor's.
fn without_computed_results(text: &str) -> String {
    let mut out = Vec::new();
    let mut computed = false;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("case ") {
            computed = name.ends_with(" legal") || name.ends_with(" legal row");
        } else if computed && line.trim_start().starts_with("c=") {
            continue;
        }
        out.push(line);
    }
    out.join("\n")
}

/// The lines `vendor_args` printed for the case named `name`: its reports and its hash of C.
fn case_lines<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let header = format!("case {name}");
    let mut lines = text.lines().skip_while(|l| *l != header);
    assert!(lines.next().is_some(), "no case {name:?} in:\n{text}");
    lines.take_while(|l| !l.starts_with("case ")).collect()
}

/// Asserts that the BLAS the matrix calls `name` behaves as that vendor where the vendors
/// differ, so that a matrix whose second vendor is really the reference again (a broken
/// OpenBLAS folder, a library path that falls through to the system default) fails instead
/// of testing the reference twice. The edge: `dgemm_` with k = 0 and ldb = 0 is illegal to
/// the reference (it requires LDB >= max(1, k): parameter 10 is reported, C left alone),
/// while OpenBLAS accepts it and computes C = beta C.
fn assert_is_the_vendor_named(name: &str, text: &str) {
    // "dgemm transa" is rejected by every vendor: its hash is that of the untouched C.
    let untouched = case_lines(text, "dgemm transa");
    let untouched = untouched.last().expect("a hash line");
    let edge = case_lines(text, "dgemm k=0 ldb=0");
    let reported = edge.iter().any(|l| l.contains("xerbla [DGEMM] info=10"));
    let scaled = edge.last() != Some(untouched);
    match name {
        "reference" => assert!(
            reported && !scaled,
            "the reference BLAS reports dgemm k=0 ldb=0 and leaves C alone: {edge:?}"
        ),
        "openblas" => assert!(
            !reported && scaled,
            "OpenBLAS computes C = beta C for dgemm k=0 ldb=0 without a report (a library \
             that reports it is not OpenBLAS): {edge:?}"
        ),
        other => panic!("no known behaviour for the vendor {other}"),
    }
}

#[test]
fn illegal_and_degenerate_arguments_give_what_each_vendor_gives_on_every_route() {
    let dir = work_dir("vendor-args");
    let Some(prog) = compile(
        &dir,
        "cc",
        "vendor_args.c",
        "vendor_args",
        &["-lblas", "-lm"],
    ) else {
        return;
    };
    for (name, folder) in vendors() {
        let without = run_ok(&mut over(plain(&prog), folder));
        let want = stdout(&without);
        let cases: usize = want
            .lines()
            .find_map(|l| l.strip_prefix("cases "))
            .and_then(|n| n.parse().ok())
            .expect("the client prints its case count");
        assert_is_the_vendor_named(name, &want);
        for route in ["vendor", "auto", "builtin", "cpu-ozaki"] {
            let trace = dir.join(format!("{name}-{route}.jsonl"));
            let mut cmd = over(shimmed(&prog, Some(&trace)), folder);
            let got = stdout(&run_ok(cmd.env("OZAKI_ROUTE", route)));
            let what = format!("{name} BLAS, OZAKI_ROUTE={route}");
            if route == "vendor" || route == "auto" {
                assert_same_output(&what, want.as_bytes(), got.as_bytes());
            } else {
                assert_same_output(
                    &what,
                    without_computed_results(&want).as_bytes(),
                    without_computed_results(&got).as_bytes(),
                );
            }
            let t = read_trace(&trace);
            assert_eq!(
                calls_in_order(&t).len(),
                cases,
                "{what}: one record per call"
            );
        }
        // Untraced, small legal calls whose route is known go straight to the vendor
        // (`route::small`) between the illegal and degenerate ones, which do not.
        for route in ["vendor", "auto"] {
            let mut cmd = over(shimmed(&prog, None), folder);
            let got = stdout(&run_ok(cmd.env("OZAKI_ROUTE", route)));
            let what = format!("{name} BLAS, OZAKI_ROUTE={route}, untraced");
            assert_same_output(&what, want.as_bytes(), got.as_bytes());
        }
    }
}

#[test]
fn a_throwing_cxx_xerbla_reaches_the_programs_catch() {
    let dir = work_dir("xerbla-throw");
    let Some(prog) = compile(
        &dir,
        "g++",
        "xerbla_throw.cpp",
        "xerbla_throw",
        &["-lblas", "-ldl"],
    ) else {
        return;
    };
    let reference = stdout(&run_ok(&mut plain(&prog)));
    assert_eq!(reference.matches(": caught ").count(), 5, "{reference}");
    for (name, folder) in vendors() {
        let want = stdout(&run_ok(&mut over(plain(&prog), folder)));
        assert_eq!(want.matches(": caught ").count(), 5, "{name}: {want}");
        for route in ["vendor", "builtin"] {
            let trace = dir.join(format!("{name}-{route}.jsonl"));
            let mut cmd = over(shimmed(&prog, Some(&trace)), folder);
            let got = run_ok(cmd.env("OZAKI_ROUTE", route));
            assert_same_output(
                &format!("{name} BLAS, OZAKI_ROUTE={route}"),
                want.as_bytes(),
                &got.stdout,
            );
        }
    }
    // The ILP64 names have no vendor: the shim itself calls the program's xerbla_, and the
    // exception must cross the shim's frames to the catch. The reports and the legal call's
    // C are the reference's.
    for route in ["vendor", "auto", "builtin"] {
        let trace = dir.join(format!("ilp64-{route}.jsonl"));
        let got = run_ilp64(&prog, &trace, route);
        assert!(
            got.status.success(),
            "ILP64 names, OZAKI_ROUTE={route}: {} {}",
            got.status,
            String::from_utf8_lossy(&got.stderr)
        );
        assert_same_output(
            &format!("ILP64 names, OZAKI_ROUTE={route}"),
            reference.as_bytes(),
            &got.stdout,
        );
        let t = read_trace(&trace);
        let reports = calls_in_order(&t)
            .iter()
            .filter(|c| c.route == "xerbla" && c.ilp64)
            .count();
        assert_eq!(
            reports, 5,
            "ILP64 names, OZAKI_ROUTE={route}: one record per report"
        );
    }
}

#[test]
fn a_longjmp_out_of_xerbla_leaves_later_calls_intercepted() {
    let dir = work_dir("xerbla-longjmp");
    let Some(prog) = compile(
        &dir,
        "cc",
        "xerbla_longjmp.c",
        "xerbla_longjmp",
        &["-lblas", "-lm", "-ldl"],
    ) else {
        return;
    };
    // The builtin kernel gives the reference BLAS's bits whatever BLAS lies below it, so its
    // expected output is the reference's; the vendor route must give the vendor's own.
    let reference = stdout(&run_ok(&mut plain(&prog)));
    let check = |what: &str, trace: &Path, route: &str, want: &str| {
        let t = read_trace(trace);
        let calls = calls_in_order(&t);
        let legal: Vec<_> = calls.iter().filter(|c| c.route != "xerbla").collect();
        assert!(
            legal.iter().all(|c| c.route == route),
            "{what}: every legal call after a longjmp is routed as OZAKI_ROUTE says"
        );
        let seen: Vec<_> = legal.iter().map(|c| observed(c)).collect();
        assert_eq!(
            seen,
            expectations(want),
            "{what}: every legal call after a longjmp is traced, once"
        );
    };
    for (name, folder) in vendors() {
        let own = stdout(&run_ok(&mut over(plain(&prog), folder)));
        assert!(own.contains("jumps 2"), "{name}: {own}");
        for (route, want) in [("vendor", &own), ("builtin", &reference)] {
            let trace = dir.join(format!("{name}-{route}.jsonl"));
            let mut cmd = over(shimmed(&prog, Some(&trace)), folder);
            let got = run_ok(cmd.env("OZAKI_ROUTE", route));
            let what = format!("{name} BLAS, OZAKI_ROUTE={route}");
            assert_same_output(&what, want.as_bytes(), &got.stdout);
            check(&what, &trace, route, want);
        }
    }
    // The ILP64 names have no vendor: the shim itself calls the program's xerbla_, which
    // longjmps out of the shim's frames. Every legal call is then the built-in kernel's (the
    // reference's bits) and traced once under its ILP64 name.
    let without_expect = |text: &str| -> String {
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("expect ")).collect();
        lines.join("\n")
    };
    for route in ["vendor", "builtin"] {
        let trace = dir.join(format!("ilp64-{route}.jsonl"));
        let out = run_ilp64(&prog, &trace, route);
        let what = format!("ILP64 names, OZAKI_ROUTE={route}");
        assert!(out.status.success(), "{what}: {out:?}");
        let got = stdout(&out);
        assert!(got.contains("jumps 2"), "{what}: {got}");
        assert_same_output(
            &what,
            without_expect(&reference).as_bytes(),
            without_expect(&got).as_bytes(),
        );
        let want: Vec<Expect> = expectations(&got);
        assert!(
            want.len() == 5 && want.iter().all(|e| e.ilp64),
            "{what}: the client made its legal calls through the ILP64 names: {got}"
        );
        check(&what, &trace, "builtin", &got);
        let reports = calls_in_order(&read_trace(&trace))
            .iter()
            .filter(|c| c.route == "xerbla")
            .count();
        assert_eq!(reports, 2, "{what}: one record per report");
    }
}

#[test]
fn children_forked_during_the_first_call_finish_their_own() {
    let dir = work_dir("fork-race");
    let Some(prog) = compile(&dir, "cc", "fork_race.c", "fork_race", &["-lblas", "-lm"]) else {
        return;
    };
    for (name, folder) in vendors() {
        let trace = dir.join(format!("{name}-%p.jsonl"));
        for route in ["auto", "vendor"] {
            let mut cmd = over(shimmed(&prog, Some(&trace)), folder);
            cmd.args(["48", "75"]).env("OZAKI_ROUTE", route);
            let out = run_within(&mut cmd, Duration::from_secs(240))
                .expect("the fork-race client finishes (each child has 5 s)");
            let text = stdout(&out);
            assert!(
                text.contains("trials 48 hung 0"),
                "{name} BLAS, OZAKI_ROUTE={route}: children hung at their first call: {text}"
            );
        }
    }
}

#[test]
fn a_strided_c_is_touched_only_in_its_block() {
    let dir = work_dir("strided-c");
    let Some(prog) = compile(&dir, "cc", "strided_c.c", "strided_c", &["-lblas", "-lm"]) else {
        return;
    };
    let results = |o: &Output| -> Vec<String> {
        stdout(o)
            .lines()
            .filter(|l| l.starts_with("result "))
            .map(String::from)
            .collect()
    };
    let time = |o: &Output| -> f64 {
        stdout(o)
            .lines()
            .find_map(|l| l.strip_prefix("time ms="))
            .and_then(|t| t.parse().ok())
            .expect("a timing line")
    };
    for (name, folder) in vendors() {
        let without = run_ok(&mut over(plain(&prog), folder));
        assert_eq!(results(&without).len(), 5, "{name}");
        let vendor_ms = time(&without);
        // The GPU routes fall back to the vendor where no GPU is; on the GPU machine they
        // compute on the packed block.
        for (route, ab) in [
            ("vendor", None),
            ("builtin", None),
            ("cpu-ozaki", None),
            ("builtin", Some("1")),
            ("gpu-native", None),
            ("gpu-ozaki", None),
        ] {
            let mut cmd = over(shimmed(&prog, None), folder);
            cmd.env("OZAKI_ROUTE", route);
            if let Some(ab) = ab {
                cmd.env("OZAKI_AB", ab);
            }
            // A read or write of the gaps between C's columns is a SIGSEGV here.
            let with = run_ok(&mut cmd);
            assert_eq!(
                results(&with),
                results(&without),
                "{name} BLAS, OZAKI_ROUTE={route} OZAKI_AB={ab:?}: exact integer results"
            );
            if route == "builtin" && ab.is_none() {
                let builtin_ms = time(&with);
                eprintln!(
                    "{name} BLAS, 8 x 2000 (k = 16) with ldc = 20000: vendor {vendor_ms:.3} ms, builtin {builtin_ms:.3} ms"
                );
                assert!(
                    builtin_ms < 20.0 * vendor_ms + 20.0,
                    "{name} BLAS: the built-in route copies more than the block: {builtin_ms} ms vs the vendor's {vendor_ms} ms"
                );
            }
        }
    }
}

#[test]
fn a_call_from_a_constructor_that_runs_before_ours_is_this_processs_own() {
    let dir = work_dir("early-call");
    let (Some(prog), Some(early)) = (
        compile(&dir, "cc", "one_call.c", "one_call", &["-lblas"]),
        shared_lib(&dir, "early_blas.c", "libearly_blas.so", &["-lblas"]),
    ) else {
        return;
    };
    for (name, folder) in vendors() {
        let trace = dir.join(format!("{name}.jsonl"));
        // The loader runs the later preload's constructor first.
        let preload = format!("{} {}", shim_lib().display(), early.display());
        let mut cmd = over(shimmed(&prog, Some(&trace)), folder);
        let out = run_ok(cmd.env("LD_PRELOAD", preload));
        assert!(
            stdout(&out).contains("early c = 1 2 3 4"),
            "{name} BLAS: {}",
            stdout(&out)
        );
        let t = read_trace(&trace);
        assert_eq!(
            t.headers.len(),
            1,
            "{name} BLAS: one header, in the file named (not a child's)"
        );
        let h = &t.headers[0];
        assert_eq!(
            h.parent_pid, None,
            "{name} BLAS: the process is not a fork child"
        );
        assert!(
            h.start_unix_s > 1.0e9,
            "{name} BLAS: a real start time: {}",
            h.start_unix_s
        );
        assert_eq!(
            calls_in_order(&t).len(),
            2,
            "{name} BLAS: the constructor's call and main's"
        );
    }
}

/// With `OZAKI_VENDOR_THREADS=share`, `auto` runs vendor calls made while other BLAS calls
/// are in flight at their share of the vendor's threads, and the last such call to end sets
/// the vendor's count back; the default (`team`, and these threads are in no OpenMP team),
/// `keep` and the forced vendor route leave the count alone. Four threads call a stand-in
/// OpenBLAS that notes the count at each call and computes exactly, so C is the same in every
/// mode.
#[test]
fn auto_shares_the_vendors_threads_among_calls_beside_each_other() {
    let dir = work_dir("vendor-threads");
    let (Some(prog), Some(vendor)) = (
        build_c(&dir, "threads", &["-lblas"]),
        shared_lib(&dir, "narrow_vendor.c", "libnarrow_vendor.so", &[]),
    ) else {
        return;
    };
    let mut hashes = Vec::new();
    for (route, setting, narrowed) in [
        ("auto", None, false),
        ("auto", Some("share"), true),
        ("auto", Some("keep"), false),
        ("vendor", Some("share"), false),
    ] {
        let what = format!("OZAKI_ROUTE={route} OZAKI_VENDOR_THREADS={setting:?}");
        let (fewer, all, last, line, out) =
            run_narrowed(&prog, &vendor, (route, setting, "1"), &what, None);
        assert_eq!(
            fewer + all,
            80,
            "{what}: every call reached the vendor: {line}"
        );
        assert_eq!(last, 16, "{what}: the vendor's count is set back: {line}");
        if narrowed {
            assert!(
                fewer > 40,
                "{what}: calls beside others ran at a share of the threads: {line}"
            );
        } else {
            assert_eq!(fewer, 0, "{what}: the vendor's count was changed: {line}");
        }
        hashes.push(out);
    }
    assert!(
        hashes.windows(2).all(|w| w[0] == w[1]),
        "C differs between modes: {hashes:?}"
    );
}

/// Runs `prog 4 20` under the shim over the stand-in OpenBLAS (`tests/c/narrow_vendor.c`)
/// with `OZAKI_ROUTE=route`, `OZAKI_VENDOR_THREADS=setting` and the stand-in's threading
/// model `model` (`NARROW_VENDOR_PARALLEL`), and returns what that vendor reported at exit:
/// its calls made at fewer than its 16 threads, those made at 16, the count set at the end,
/// the line, and the program's output.
fn run_narrowed(
    prog: &Path,
    vendor: &Path,
    (route, setting, model): (&str, Option<&str>, &str),
    what: &str,
    trace: Option<&Path>,
) -> (u32, u32, u32, String, String) {
    let mut cmd = shimmed(prog, trace);
    cmd.args(["4", "20"])
        .env("OZAKI_VENDOR_BLAS", vendor)
        .env("OZAKI_ROUTE", route)
        .env("NARROW_VENDOR_PARALLEL", model);
    if let Some(v) = setting {
        cmd.env("OZAKI_VENDOR_THREADS", v);
    }
    let out = run_ok(&mut cmd);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let (line, n) = numbers_after(&err, "narrow-vendor: ")
        .unwrap_or_else(|| panic!("{what}: no report from the stand-in vendor: {err}"));
    let [fewer, all, last] = n[..] else {
        panic!("{what}: {line}")
    };
    let count = |x: i64| x as u32;
    (
        count(fewer),
        count(all),
        count(last),
        line.to_string(),
        stdout(&out),
    )
}

/// With `OZAKI_VENDOR_THREADS=team` (the default), `auto` runs the vendor calls made from
/// inside an OpenMP parallel region at the vendor's count divided by the team, and those the
/// main thread makes after the region at the whole count, which is set back at the end;
/// `keep`, the forced vendor route and an OpenBLAS built for OpenMP (which runs such calls on
/// their caller's thread by itself) leave the count alone. A team of 4 and then the main
/// thread call a stand-in OpenBLAS that notes the count at each call and computes exactly, so
/// C is the same in every mode.
#[test]
fn auto_runs_the_vendor_at_one_share_per_openmp_team_member() {
    let dir = work_dir("vendor-team");
    let (Some(prog), Some(vendor)) = (
        build_c(&dir, "omp_team", &["-fopenmp", "-lblas"]),
        shared_lib(&dir, "narrow_vendor.c", "libnarrow_vendor.so", &[]),
    ) else {
        return;
    };
    let mut hashes = Vec::new();
    // (the last case: an OpenBLAS built for OpenMP, whose count is its caller's team size)
    for (route, setting, model, narrowed) in [
        ("auto", Some("team"), "1", true),
        ("auto", None, "1", true),
        ("auto", Some("keep"), "1", false),
        ("vendor", Some("team"), "1", false),
        ("auto", Some("team"), "2", false),
    ] {
        let what = format!(
            "OZAKI_ROUTE={route} OZAKI_VENDOR_THREADS={setting:?} vendor threading model {model}"
        );
        let trace = dir.join(format!(
            "{route}-{}-{model}.jsonl",
            setting.unwrap_or("default")
        ));
        let (fewer, all, last, line, out) =
            run_narrowed(&prog, &vendor, (route, setting, model), &what, Some(&trace));
        assert_eq!(last, 16, "{what}: the vendor's count is set back: {line}");
        let teams: Vec<Option<u32>> = read_trace(&trace)
            .calls
            .iter()
            .map(|c| c.engine.as_ref().and_then(|e| e.team))
            .collect();
        assert_eq!(teams.len(), 100, "{what}: every call recorded");
        if narrowed {
            assert_eq!(
                (fewer, all),
                (80, 20),
                "{what}: the team's calls at a share, the main thread's alone at all: {line}"
            );
            let in_team = teams.iter().filter(|t| **t == Some(4)).count();
            assert_eq!(
                (in_team, teams.iter().filter(|t| t.is_none()).count()),
                (80, 20),
                "{what}: the records name the team of the calls made from it"
            );
        } else {
            assert!(
                setting != Some("keep") && route == "auto" || teams.iter().all(Option::is_none),
                "{what}: no team asked for"
            );
            assert_eq!(
                (fewer, all),
                (0, 100),
                "{what}: the count was changed: {line}"
            );
        }
        hashes.push(out);
    }
    assert!(
        hashes.windows(2).all(|w| w[0] == w[1]),
        "C differs between modes: {hashes:?}"
    );
}

/// Over the real vendors (the reference BLAS, which has no thread count to set, and
/// Debian's pthreads OpenBLAS at 2 threads, whose count the team rule sets from every
/// member of a real libgomp team while the others' calls run), an OpenMP program under
/// `auto` ends, gets the C it gets without the shim (48 x 48 x 48: below the size at which
/// OpenBLAS splits a call, so any thread setting gives the same bits), and its records name
/// the team of each call made from it; the trace names the kernels the vendor says it runs
/// (an OpenBLAS does, the reference BLAS has no such entry point) and the CPU's vector width.
#[test]
fn an_openmp_program_over_each_vendor_gets_its_own_results_under_the_team_rule() {
    let dir = work_dir("vendor-team-real");
    let Some(prog) = build_c(&dir, "omp_team", &["-fopenmp", "-lblas"]) else {
        return;
    };
    for (name, folder) in vendors() {
        let want = run_ok(
            over(plain(&prog), folder)
                .args(["4", "200"])
                .env("OPENBLAS_NUM_THREADS", "2"),
        );
        let trace = dir.join(format!("{name}.jsonl"));
        let mut cmd = over(shimmed(&prog, Some(&trace)), folder);
        cmd.args(["4", "200"])
            .env("OPENBLAS_NUM_THREADS", "2")
            .env("OZAKI_ROUTE", "auto");
        let got = run_within(&mut cmd, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{name}: the program did not end within 60 s"));
        assert!(got.status.success(), "{name}: {got:?}");
        assert_same_output(
            &format!("{name}: C under the team rule"),
            &want.stdout,
            &got.stdout,
        );
        let teams: Vec<Option<u32>> = read_trace(&trace)
            .calls
            .iter()
            .map(|c| c.engine.as_ref().and_then(|e| e.team))
            .collect();
        assert_eq!(
            (teams.len(), teams.iter().filter(|t| **t == Some(4)).count()),
            (1000, 800),
            "{name}: every call recorded, the team's 800 with their team"
        );
        let trace = read_trace(&trace);
        let header = &trace.headers[0];
        let core = header.vendor_core.get("dgemm_").cloned().or_else(|| {
            trace
                .calls
                .iter()
                .find_map(|c| c.vendor.as_ref().and(c.vendor_core.clone()))
        });
        assert_eq!(
            core.is_some(),
            name == "openblas",
            "{name}: the vendor's kernels named where it names them: {core:?}"
        );
        assert!(header.cpu_simd.is_some(), "{name}: the CPU's vector width");
    }
}

#[test]
fn a_vendor_calling_dgemm_from_its_constructor_does_not_hang() {
    let dir = work_dir("ctor-vendor");
    let (Some(prog), Some(vendor)) = (
        compile(&dir, "cc", "one_call.c", "one_call", &["-lblas"]),
        shared_lib(&dir, "ctor_vendor.c", "libctor_vendor.so", &[]),
    ) else {
        return;
    };
    // The program is linked with the system's BLAS, which stays loaded under the named
    // vendor: the reference, or OpenBLAS with its own threads and constructors.
    for (name, folder) in vendors() {
        let want = stdout(&run_ok(&mut over(plain(&prog), folder)));
        let mut cmd = over(shimmed(&prog, None), folder);
        cmd.env("OZAKI_VENDOR_BLAS", &vendor)
            .env("OZAKI_ROUTE", "vendor");
        let out = run_within(&mut cmd, Duration::from_secs(30)).unwrap_or_else(|| {
            panic!(
                "{name} BLAS: the program hung (its vendor calls dgemm_ while the shim loads it)"
            )
        });
        let got = stdout(&out);
        assert!(out.status.success(), "{name} BLAS: {got}");
        assert!(
            got.contains("vendor constructor c = 2 4 6 8"),
            "{name} BLAS: the constructor's own call is computed: {got}"
        );
        assert!(
            got.contains(want.trim()),
            "{name} BLAS: main's call: {got} vs {want}"
        );
    }
}

/// A program's signal handlers that call BLAS: a process-directed signal never runs its
/// handler on one of the shim's own threads (which may hold the trace sink's lock), and a
/// timer's handler calling `dgemm_` while the main thread is inside the shim, on every CPU
/// route with a trace, gets the vendor's C (nested calls go straight to the vendor), the
/// main thread's calls are right, and the program ends. On `cpu-ozaki` each of the main
/// thread's calls starts worker threads, so a fast timer also meets threads being born: one
/// whose handler ran in its first steps (allocator set-up, before its closure) deadlocked in
/// `malloc` in more than half of such runs. Over OpenBLAS only the first part runs (see
/// below why), with and without OpenBLAS's own worker threads.
#[test]
fn blas_calls_from_signal_handlers_are_answered_on_the_programs_threads() {
    let dir = work_dir("signal-blas");
    let Some(prog) = compile(&dir, "cc", "signal_blas.c", "signal_blas", &["-lblas"]) else {
        return;
    };
    // (cpu-ozaki emulates every call, the handler's too: fewer calls, a slower timer, which
    // still fires several times within each call)
    let routes = [
        ("vendor", "3000", "50"),
        ("auto", "3000", "50"),
        ("builtin", "3000", "50"),
        ("cpu-ozaki", "100", "500"),
    ];
    for (name, folder) in vendors() {
        if name != "reference" {
            continue; // below
        }
        for (route, calls, every_us) in routes {
            let mut without = over(plain(&prog), folder);
            let want = stdout(&run_ok(without.args([calls, every_us])));
            assert!(
                want.contains("ran on the main thread: yes")
                    && want.contains("handler calls: some"),
                "{want}"
            );
            let trace = dir.join(format!("{route}.jsonl"));
            let mut cmd = over(shimmed(&prog, Some(&trace)), folder);
            cmd.args([calls, every_us]).env("OZAKI_ROUTE", route);
            let out = run_within(&mut cmd, Duration::from_secs(120))
                .unwrap_or_else(|| panic!("OZAKI_ROUTE={route}: the program hung"));
            assert!(out.status.success(), "OZAKI_ROUTE={route}: {out:?}");
            let got = stdout(&out);
            if route == "cpu-ozaki" {
                // The handler's calls that interrupt the shim get the vendor's C, the others
                // the emulation's, which may round differently: only the main thread's are
                // compared.
                let usr1 = want.lines().next().unwrap();
                assert!(
                    got.contains(usr1) && got.contains("main calls wrong: 0;"),
                    "OZAKI_ROUTE={route}: {got} vs {want}"
                );
            } else {
                assert_same_output(
                    &format!("OZAKI_ROUTE={route}"),
                    want.as_bytes(),
                    got.as_bytes(),
                );
            }
        }
    }
    // OpenBLAS: the process-directed signal only (no timed calls, `0` main calls). A handler's
    // dgemm_ that interrupts OpenBLAS's own dgemm_ deadlocks in OpenBLAS without the shim
    // (blas_memory_alloc's mutex, held by the interrupted call), so the timer part cannot run
    // over it. With OpenBLAS's worker threads (2), which do not block signals, the handler
    // runs on one of them: with the shim it must run where it runs without, never on one of
    // the shim's threads, and give the same C.
    for (name, folder) in vendors() {
        if name == "reference" {
            continue;
        }
        for blas_threads in ["1", "2"] {
            let mut without = over(plain(&prog), folder);
            without
                .args(["0", "50"])
                .env("OPENBLAS_NUM_THREADS", blas_threads);
            let want = stdout(&run_ok(&mut without));
            assert!(want.contains("c ok: yes"), "{name} BLAS: {want}");
            for (route, _, _) in routes {
                let what = format!("{name} BLAS, {blas_threads} threads, OZAKI_ROUTE={route}");
                let trace = dir.join(format!("{name}-{blas_threads}-{route}.jsonl"));
                let mut cmd = over(shimmed(&prog, Some(&trace)), folder);
                cmd.args(["0", "50"])
                    .env("OPENBLAS_NUM_THREADS", blas_threads)
                    .env("OZAKI_ROUTE", route);
                let out = run_within(&mut cmd, Duration::from_secs(60))
                    .unwrap_or_else(|| panic!("{what}: the program hung"));
                assert!(out.status.success(), "{what}: {out:?}");
                assert_same_output(&what, want.as_bytes(), &out.stdout);
            }
        }
    }
}
