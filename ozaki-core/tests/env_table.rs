//! Every `OZAKI_*` variable the code reads is in `ozaki_core::env::VARIABLES`, and the
//! environment is read only through `ozaki_core::env`.
//!
//! Greps the `src/` folders of every workspace crate (comments left out): each string
//! literal that is exactly an `OZAKI_*` name must be a row of the table, and no file but
//! `ozaki-core/src/env.rs` may call `std::env::var`, `var_os`, `vars` or `vars_os` itself.

use ozaki_core::env::{VARIABLES, variable};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `src/` files of every crate in the workspace.
fn sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(workspace()).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            rust_files(&dir.join("src"), &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    files
}

/// The text of each line before a `//` comment (good enough for this tree: no `//` inside
/// the string literals looked for), up to the file's unit tests (`#[cfg(test)]` then
/// `mod`), which may name variables that do not exist to test the reader.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|l| l.trim_start().starts_with("mod "))
        })
        .unwrap_or(lines.len());
    lines
        .into_iter()
        .take(end)
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
}

/// Every `"OZAKI_..."` string literal on a line.
fn ozaki_literals(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("\"OZAKI_") {
        let after = &rest[i + 1..];
        let len = after
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(after.len());
        if len > "OZAKI_".len() && after[len..].starts_with('"') {
            out.push(&after[..len]);
        }
        rest = &after[len..];
    }
    out
}

#[test]
fn every_ozaki_name_in_the_code_is_in_the_table() {
    let mut missing = Vec::new();
    for file in sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in code_lines(&text) {
            for name in ozaki_literals(line) {
                if variable(name).is_none() {
                    missing.push(format!("{}:{n}: {name}", file.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "OZAKI_* names not in ozaki_core::env::VARIABLES:\n{}",
        missing.join("\n")
    );
}

#[test]
fn only_the_env_module_reads_the_environment() {
    let reader = workspace().join("ozaki-core/src/env.rs");
    let calls = ["env::var(", "env::var_os(", "env::vars(", "env::vars_os("];
    let mut direct = Vec::new();
    for file in sources() {
        if file == reader {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in code_lines(&text) {
            if calls
                .iter()
                .any(|c| line.contains(&format!("std::{c}")) || line.trim_start().starts_with(c))
            {
                direct.push(format!("{}:{n}: {}", file.display(), line.trim()));
            }
        }
    }
    assert!(
        direct.is_empty(),
        "environment read outside ozaki_core::env:\n{}",
        direct.join("\n")
    );
}

#[test]
fn the_table_documents_each_row() {
    for v in VARIABLES {
        assert!(!v.meaning.is_empty() && !v.default.is_empty(), "{}", v.name);
    }
}
