//! A property test of the trace reader as users meet it, through `ozaki summary` (text and
//! `--json`): traces with lines torn in the middle, cut short at the end, overwritten with
//! arbitrary bytes (not UTF-8 included), and files of arbitrary bytes. The reader never
//! panics: it exits 0 or 2. When it exits 0, every intact call is counted and every damaged
//! line is skipped with a note naming `file:line`.
//!
//! The traces come from a seed: `OZAKI_TEST_SEED=N` replays a run; a failure names its seed
//! and the smallest damaged trace proptest found.

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Traces per run: each costs two short runs of `ozaki summary`.
const CASES: u32 = 128;

fn ozaki() -> Command {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let bin = BIN.get_or_init(|| install_ozaki(&work_dir("summary-props-prefix")));
    let mut cmd = plain(bin);
    cmd.env_remove("RUST_BACKTRACE");
    cmd
}

const HEADER: &str = r#"{"type":"header","schema":3,"pid":1,"exe":"x","shim_version":"0","start_unix_s":0.0,"cpus":16,"blas_threads":16}"#;

/// A call record with the given numbers (every value in range for the schema).
fn call_line(seq: usize, m: u64, n: u64, k: u64, dur_ns: u64, route: &str) -> String {
    format!(
        r#"{{"type":"call","seq":{seq},"t_ns":{t},"dur_ns":{dur_ns},"tid":7,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"N","transb":"N","m":{m},"n":{n},"k":{k},"lda":{m},"ldb":{k},"ldc":{m},"alpha":1.0,"beta":0.0,"ilp64":false,"route":"{route}"}}"#,
        t = seq as u64 * 1000
    )
}

/// What happens to one line of a trace.
#[derive(Debug, Clone)]
enum Damage {
    Intact,
    /// Cut to this fraction of its length (never its whole length).
    Torn(f64),
    /// Replaced by these bytes (newlines removed).
    Garbage(Vec<u8>),
}

/// One call record's numbers: m, n, k, dur_ns, route.
type Call = (u64, u64, u64, u64, &'static str);

#[derive(Debug, Clone)]
struct DamagedTrace {
    /// Call lines and what happens to each.
    calls: Vec<(Call, Damage)>,
    /// The file ends without the last line's newline, cut at this fraction of it.
    cut_last: Option<f64>,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        6 => Just(Damage::Intact),
        2 => (0.0..0.999f64).prop_map(Damage::Torn),
        1 => prop::collection::vec(any::<u8>(), 1..60).prop_map(Damage::Garbage),
    ]
}

fn damaged_trace() -> impl Strategy<Value = DamagedTrace> {
    let call = (
        0..100_000u64,
        0..100_000u64,
        0..100_000u64,
        0..u64::from(u32::MAX),
        prop::sample::select(vec![
            "vendor",
            "builtin",
            "cpu-ozaki",
            "gpu-ozaki",
            "xerbla",
        ]),
    );
    (
        prop::collection::vec((call, damage()), 1..40),
        prop::option::weighted(0.3, 0.0..0.999f64),
    )
        .prop_map(|(calls, cut_last)| DamagedTrace { calls, cut_last })
}

impl DamagedTrace {
    /// The file's bytes, the number of intact calls, and the 1-based numbers of the lines
    /// that must be skipped.
    fn render(&self) -> (Vec<u8>, usize, Vec<usize>) {
        let mut bytes = HEADER.as_bytes().to_vec();
        bytes.push(b'\n');
        let (mut intact, mut skipped) = (0, Vec::new());
        for (i, ((m, n, k, dur, route), damage)) in self.calls.iter().enumerate() {
            let (m, n, k, dur, route) = (*m, *n, *k, *dur, *route);
            let line_no = i + 2;
            let line = call_line(i, m, n, k, dur, route);
            let last = i + 1 == self.calls.len();
            let body: Vec<u8> = match damage {
                Damage::Intact => line.into_bytes(),
                Damage::Torn(f) => line.as_bytes()[..(line.len() as f64 * f) as usize].to_vec(),
                Damage::Garbage(g) => g.iter().copied().filter(|&b| b != b'\n').collect(),
            };
            let cut = last.then_some(self.cut_last).flatten();
            let body = match cut {
                Some(f) => body[..(body.len() as f64 * f) as usize].to_vec(),
                None => body,
            };
            // JSON's whitespace only: what the reader skips without a note
            let blank = body.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'));
            if matches!(damage, Damage::Intact) && cut.is_none() {
                intact += 1;
            } else if !blank {
                skipped.push(line_no);
            }
            bytes.extend_from_slice(&body);
            if cut.is_none() {
                bytes.push(b'\n');
            }
        }
        (bytes, intact, skipped)
    }
}

fn summary(path: &Path, json: bool) -> Output {
    let mut cmd = ozaki();
    cmd.arg("summary");
    if json {
        cmd.arg("--json");
    }
    cmd.arg(path).output().expect("ozaki runs")
}

/// Exit status 0 or 2, and no panic message.
fn no_panic(what: &str, o: &Output) -> Result<(), TestCaseError> {
    let err = String::from_utf8_lossy(&o.stderr);
    prop_assert!(
        matches!(o.status.code(), Some(0 | 2)) && !err.contains("panicked"),
        "{what}: exit {:?}, stderr: {err}",
        o.status
    );
    Ok(())
}

#[test]
fn damaged_traces_are_summarised_with_their_torn_lines_skipped_and_named() {
    let dir = work_dir("summary-props");
    let path = dir.join("t.jsonl");
    let (seed, mut runner) = seeded_runner(CASES);
    let result = runner.run(&damaged_trace(), |t| {
        let (bytes, intact, skipped) = t.render();
        std::fs::write(&path, &bytes).unwrap();
        let text = summary(&path, false);
        no_panic("summary", &text)?;
        let json = summary(&path, true);
        no_panic("summary --json", &json)?;
        // The header line is intact, so the file always has a trace line.
        prop_assert_eq!(
            text.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&text.stderr)
        );
        prop_assert_eq!(json.status.code(), Some(0));
        let totals: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON totals");
        prop_assert_eq!(
            totals["calls"].as_u64(),
            Some(intact as u64),
            "every intact call counted"
        );
        let out = String::from_utf8_lossy(&text.stdout);
        prop_assert!(
            out.contains(&format!("{intact} call(s)")),
            "every intact call counted: {out}"
        );
        // The text summary lists its notes with the files it read.
        let notes = format!("{out}{}", String::from_utf8_lossy(&text.stderr));
        let shown = path.display().to_string();
        for line in skipped.iter().take(5) {
            prop_assert!(
                notes.contains(&format!("{shown}:{line}: ")),
                "line {line} skipped with a note: {notes}"
            );
        }
        if skipped.len() > 5 {
            prop_assert!(
                notes.contains(&format!("{} more invalid lines skipped", skipped.len() - 5)),
                "the rest counted: {notes}"
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("seed {seed} (replay with OZAKI_TEST_SEED={seed}): {e}");
    }
}

#[test]
fn arbitrary_bytes_never_make_the_summary_panic() {
    let dir = work_dir("summary-bytes");
    let path = dir.join("t.jsonl");
    let (seed, mut runner) = seeded_runner(CASES);
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..400),
        // JSON-looking fragments: brackets, quotes, keys, numbers out of range.
        prop::collection::vec(
            prop::sample::select(vec![
                "{",
                "}",
                "[",
                "]",
                "\"",
                ":",
                ",",
                "\n",
                "\"type\"",
                "\"call\"",
                "\"header\"",
                "\"schema\"",
                "1e999",
                "-1",
                "18446744073709551616",
                "null",
                "NaN",
                "\"m\"",
                "\"routine\"",
                "\"dgemm\"",
                "\"route\"",
            ]),
            0..80
        )
        .prop_map(|parts| parts.concat().into_bytes()),
    ];
    let result = runner.run(&bytes, |b| {
        std::fs::write(&path, &b).unwrap();
        no_panic("summary", &summary(&path, false))?;
        no_panic("summary --json", &summary(&path, true))?;
        Ok(())
    });
    if let Err(e) = result {
        panic!("seed {seed} (replay with OZAKI_TEST_SEED={seed}): {e}");
    }
}
