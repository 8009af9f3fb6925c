//! The tracked text explains the code, not the history of its making: no line of a tracked
//! file names a tracker number ("issue" and a number), a work session ("session" and a
//! number), a parallel work branch (`h-` and a name) or a helper engineer. A reader has no
//! tracker or diary to decode such references; the history is in `git log`, and
//! measurements are cited by the BENCHMARKS.md section that holds them.
//!
//! Without git or outside a checkout (a source tarball) the test prints a visible skip line.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What a line must not contain, checked on the lowercased line. Each check returns the
/// matched text so that the failure names it.
fn diary_reference(line: &str) -> Option<String> {
    let lower = line.to_ascii_lowercase();
    let b = lower.as_bytes();
    let word_start = |i: usize| i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    // the word, an optional plural "s", spaces, an optional '#', then a digit
    for word in ["issue", "session"] {
        for (i, _) in lower.match_indices(word) {
            if !word_start(i) {
                continue;
            }
            let mut j = i + word.len();
            if b.get(j) == Some(&b's') {
                j += 1;
            }
            if b.get(j) != Some(&b' ') {
                continue;
            }
            j += 1;
            if b.get(j) == Some(&b'#') {
                j += 1;
            }
            if b.get(j).is_some_and(u8::is_ascii_digit) {
                return Some(lower[i..=j].to_string());
            }
        }
    }
    if let Some(i) = lower.find("helper") {
        return Some(lower[i..i + 6].to_string());
    }
    // A branch name: "h-" at the start of a word, then lowercase letters and the end of the
    // word ("h-engine", not "h-1" or "each-").
    for (i, _) in lower.match_indices("h-") {
        if !word_start(i) {
            continue;
        }
        let rest = &b[i + 2..];
        let len = rest.iter().take_while(|c| c.is_ascii_lowercase()).count();
        let ends = rest
            .get(len)
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == b'_'));
        if len >= 2 && ends {
            return Some(lower[i..i + 2 + len].to_string());
        }
    }
    None
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tracked_files(root: &Path) -> Option<Vec<PathBuf>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        out.stdout
            .split(|&c| c == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .collect(),
    )
}

#[test]
fn no_tracked_line_names_a_tracker_number_a_session_or_a_work_branch() {
    let root = repo_root();
    let Some(files) = tracked_files(&root) else {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: no_tracked_line_names_a_tracker_number_a_session_or_a_work_branch: not a git checkout"
        );
        return;
    };
    let me = Path::new("shim/tests/docs_text.rs");
    let mut found = Vec::new();
    for rel in files.iter().filter(|f| f.as_path() != me) {
        let Ok(bytes) = std::fs::read(root.join(rel)) else {
            continue; // deleted in the work tree
        };
        // Binary files (compressed traces, images) are not text a reader reads.
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        if text.contains('\0') {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = diary_reference(line) {
                found.push(format!(
                    "{}:{}: {what:?}: {}",
                    rel.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} tracked lines name project history (say what the code does and why; cite \
         measurements by their BENCHMARKS.md section):\n{}",
        found.len(),
        found.join("\n")
    );
    // The scan saw the tree: README.md is tracked.
    assert!(files.iter().any(|f| f == Path::new("README.md")));
}

#[test]
fn the_pattern_finds_each_kind_of_reference_and_spares_ordinary_words() {
    // Built at run time, so that this file's own text never matches a plain search of the
    // tree for such references.
    let (issue, session) = (["Iss", "ue"].concat(), ["Sess", "ion"].concat());
    for hit in [
        format!("see {} #7", issue.to_lowercase()),
        format!("{issue} 4: the target"),
        format!("({}s #4 and #7)", issue.to_lowercase()),
        format!("measured in {} 3", session.to_lowercase()),
        format!("{session} 4: C without"),
        "the helper `stage`".to_string(),
        "merged h-engine here".to_string(),
        "(branch h-docs)".to_string(),
    ] {
        assert!(diary_reference(&hit).is_some(), "{hit:?} should be found");
    }
    for clean in [
        "a tissue 4 cells",
        "the session ends",
        "issue a warning",
        "each-row",
        "h-1 spacing",
        "high-water mark",
        "an open issue: none",
    ] {
        assert_eq!(diary_reference(clean), None, "{clean:?} should pass");
    }
}
