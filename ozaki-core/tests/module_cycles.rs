//! No import cycles between the modules of any crate in the workspace.
//!
//! Runs `scripts/module-cycles` (Python 3) over the workspace, and first over a made-up
//! crate with a known cycle, so that a script which stopped seeing cycles fails here too.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn module_cycles(args: &[&Path]) -> Output {
    Command::new("python3")
        .arg(workspace().join("scripts/module-cycles"))
        .args(args)
        .output()
        .expect("python3 runs scripts/module-cycles")
}

#[test]
fn the_checker_reports_a_known_cycle() {
    let krate = Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cycles-fixture");
    let src = krate.join("src");
    let _ = std::fs::remove_dir_all(&krate);
    std::fs::create_dir_all(src.join("outer")).unwrap();
    std::fs::write(krate.join("Cargo.toml"), "[package]\nname = \"fixture\"\n").unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod outer;\n").unwrap();
    // a -> outer::inner (a path), outer -> inner (a child, named bare), inner -> a
    std::fs::write(src.join("a.rs"), "use crate::outer::inner::X;\n").unwrap();
    std::fs::write(src.join("outer/mod.rs"), "mod inner;\npub use inner::X;\n").unwrap();
    std::fs::write(
        src.join("outer/inner.rs"),
        "pub struct X;\nfn f() { super::super::a::g() }\n// crate::ignored::in_comments\n",
    )
    .unwrap();
    let out = module_cycles(&[&krate]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("a -> outer::inner -> a"), "{text}");
}

#[test]
fn no_crate_has_an_import_cycle() {
    let out = module_cycles(&[]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
