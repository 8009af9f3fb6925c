//! `scripts/test-totals`, the last line of `scripts/test-all`: a test that skips itself
//! (one line `skipped: <test name>: <why>`) counts as skipped, not as passed.

mod common;

use std::process::Command;

#[test]
fn a_skipped_test_counts_as_skipped_not_passed() {
    let dir = common::work_dir("test-totals");
    let log = dir.join("cargo-test.log");
    std::fs::write(
        &log,
        "running 3 tests\n\
         skipped: needs_a_gpu: GPU unavailable: no CUDA driver\n\
         test needs_a_gpu ... ok\n\
         test also_needs_one ... skipped: also_needs_one: 1 CUDA device(s), need 2\n\
         ok\n\
         test runs_anywhere ... ok\n\
         test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\
         test result: FAILED. 4 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n",
    )
    .unwrap();
    let o = Command::new(common::repo_root().join("scripts/test-totals"))
        .arg(&log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "5 passed, 1 failed, 2 skipped\n"
    );
}
