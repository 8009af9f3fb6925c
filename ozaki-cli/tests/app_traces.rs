//! The committed application traces (`traces/*.jsonl.gz`) load through the CLI and
//! still give the call-size statistics `traces/README.md` quotes next to the paper's
//! (Ozaki 2.5, section 6.1): a guard on the traces, the gzip reader and the statistics.

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use std::process::Command;

#[test]
fn committed_traces_give_the_statistics_in_their_readme() {
    let dir = common::work_dir("app-traces");
    let traces = common::repo_root().join("traces");
    // name -> the Markdown row `ozaki report` prints (and the README quotes).
    let expected = [
        (
            "lapack-dgetrf-4096",
            "| lapack-dgetrf-4096 | 4095 | 45.3 | 3200 (2560-3712) | 1% |",
        ),
        (
            "lapack-dgeqrf-4096",
            "| lapack-dgeqrf-4096 | 248 | 90.6 | 64 (63-3232) | 50% |",
        ),
        (
            "umfpack-convdiff-700",
            "| umfpack-convdiff-700 | 17120 | 12.1 | 665 (383-850) | 16% |",
        ),
        (
            "ccsd-benzene-ccpvdz",
            "| ccsd-benzene-ccpvdz | 40688 | 748.8 | 800 (347-1302) | 20% |",
        ),
        (
            "lobpcg-b64",
            "| lobpcg-b64 | 745 | 274.6 | 128 (64-128) | 100% |",
        ),
        (
            "lobpcg-b128",
            "| lobpcg-b128 | 1195 | 1099.4 | 256 (128-256) | 100% |",
        ),
    ];
    let mut cmd = Command::new(common::ozaki_bin());
    cmd.arg("report").arg("--no-predict").arg("--out").arg(&dir);
    for (name, _) in &expected {
        cmd.arg(traces.join(format!("{name}.jsonl.gz")));
    }
    let o = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (_, row) in expected {
        assert!(text.lines().any(|l| l == row), "missing {row:?} in\n{text}");
    }
}

/// Where a committed trace may name an absolute path: system folders, which say which
/// program and library ran. Anything else (a work tree, a home or temporary folder) is the
/// capturing machine's layout, which `scripts/capture-common.sh` rewrites before committing.
const SYSTEM_FOLDERS: [&str; 6] = ["/usr/", "/lib/", "/lib64/", "/bin/", "/opt/", "/etc/"];

#[test]
fn committed_traces_name_no_folder_of_the_capturing_machine() {
    use std::io::{BufRead as _, BufReader};
    let traces = common::repo_root().join("traces");
    let mut seen = 0;
    let mut leaks = Vec::new();
    for entry in std::fs::read_dir(&traces).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".jsonl.gz") {
            continue;
        }
        let reader = BufReader::new(flate2::read::GzDecoder::new(
            std::fs::File::open(&path).unwrap(),
        ));
        for line in reader.lines() {
            let line = line.unwrap();
            // Only headers carry paths (exe, argv, vendor libraries); one per process.
            if !line.contains(r#""type":"header""#) {
                continue;
            }
            seen += 1;
            let header: serde_json::Value = serde_json::from_str(&line).unwrap();
            let mut strings: Vec<&str> = vec![header["exe"].as_str().unwrap_or("")];
            if let Some(argv) = header["argv"].as_array() {
                strings.extend(argv.iter().filter_map(|a| a.as_str()));
            }
            if let Some(vendor) = header["vendor"].as_object() {
                strings.extend(vendor.values().filter_map(|v| v.as_str()));
            }
            for s in strings {
                if s.starts_with('/') && !SYSTEM_FOLDERS.iter().any(|f| s.starts_with(f)) {
                    leaks.push(format!("{}: {s}", path.display()));
                }
            }
        }
    }
    assert!(seen >= 6, "read the committed traces' headers ({seen})");
    assert!(
        leaks.is_empty(),
        "paths of the capturing machine:\n{}",
        leaks.join("\n")
    );
}
