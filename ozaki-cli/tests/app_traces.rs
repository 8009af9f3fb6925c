//! The committed application traces (`traces/*.jsonl.gz`, issue #6) load through the CLI and
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
