//! `include/ozaki_shim.h` is what cbindgen makes of the exported functions today.
//!
//! The header is regenerated in memory (with `shim/cbindgen.toml`) and compared with the
//! checked-in file; any difference fails with "header is stale, regenerate with
//! scripts/gen-header". `scripts/gen-header` runs this test with `OZAKI_WRITE_HEADER=1`,
//! which writes the file instead.

use std::path::PathBuf;

fn generate() -> Vec<u8> {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("shim/cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen can read the shim crate");
    let mut out = Vec::new();
    bindings.write(&mut out);
    out
}

fn header_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include/ozaki_shim.h")
}

#[test]
fn checked_in_header_is_current() {
    let fresh = generate();
    let path = header_path();
    if std::env::var_os("OZAKI_WRITE_HEADER").is_some_and(|v| v == "1") {
        std::fs::write(&path, &fresh).expect("write include/ozaki_shim.h");
        eprintln!("wrote {}", path.display());
        return;
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(
        current == fresh,
        "header is stale, regenerate with scripts/gen-header ({})",
        path.display()
    );
}

#[test]
fn header_declares_the_reference_signatures() {
    let text = String::from_utf8(generate()).unwrap();
    let decl = |name: &str| {
        let start = text
            .find(&format!(" {name}("))
            .unwrap_or_else(|| panic!("{name} not declared:\n{text}"));
        let end = start + text[start..].find(';').unwrap();
        text[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let dgemm = decl("dgemm_");
    assert!(
        dgemm.contains("const char *transa")
            && dgemm.contains("const int32_t *m")
            && dgemm.ends_with("size_t transb_len)"),
        "{dgemm}"
    );
    let cblas64 = decl("scipy_cblas_dgemm64_");
    assert!(
        cblas64.contains("int layout")
            && cblas64.contains("int64_t m")
            && cblas64.contains("double *c"),
        "{cblas64}"
    );
    assert!(decl("dsyrk_64_").contains("const int64_t *ldc"));
}
