//! The built library, the symbol table and the header name exactly the same BLAS symbols.
//!
//! `nm -D --defined-only` on the `libozaki_shim.so` that cargo built next to this test must
//! list exactly the names of `ozaki_shim::symbols::SYMBOLS` (plus the `ozaki_*` device entry
//! points, which the header must declare too, and the cuBLAS hook's names, which it must
//! not), and `include/ozaki_shim.h` must declare exactly those functions. A name missing anywhere means a client's calls silently bypass the shim.

use ozaki_shim::symbols::SymId;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libozaki_shim.so"),
        deps.join("../libozaki_shim.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("libozaki_shim.so not found next to {}", deps.display()))
}

fn dynamic_symbols() -> BTreeSet<String> {
    let lib = library();
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils) runs");
    assert!(out.status.success(), "nm failed on {}", lib.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| !s.starts_with('_'))
        .map(str::to_string)
        .collect()
}

fn header_functions() -> BTreeSet<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include/ozaki_shim.h");
    let text = std::fs::read_to_string(&path).expect("include/ozaki_shim.h exists");
    text.lines()
        .filter(|l| {
            !l.trim_start().starts_with("//") && !l.trim_start().starts_with('*') && l.contains('(')
        })
        .filter_map(|l| {
            let before = &l[..l.find('(')?];
            let name = before.rsplit([' ', '*']).next()?;
            (!name.is_empty() && !before.trim_start().starts_with('#')).then(|| name.to_string())
        })
        .collect()
}

#[test]
fn library_table_and_header_agree() {
    let table: BTreeSet<String> = SymId::all().map(|id| id.name().to_string()).collect();
    let exported = dynamic_symbols();
    let hooked: BTreeSet<String> = ozaki_shim::cublas_hook::NAMES
        .iter()
        .map(|s| s.to_string())
        .collect();
    let blas_exported: BTreeSet<String> = exported
        .iter()
        .filter(|s| !s.starts_with("ozaki_") && !hooked.contains(*s))
        .cloned()
        .collect();
    assert_eq!(
        blas_exported, table,
        "nm -D of the library vs the symbol table"
    );
    assert!(
        hooked.is_subset(&exported),
        "the cuBLAS hook's names are exported: {:?}",
        hooked.difference(&exported).collect::<Vec<_>>()
    );
    // The cuBLAS names are cuBLAS's own API (cublas_v2.h declares them), not the header's.
    let header = header_functions();
    let declared: BTreeSet<String> = exported.difference(&hooked).cloned().collect();
    assert_eq!(
        header, declared,
        "functions declared in include/ozaki_shim.h vs nm -D of the library"
    );
}

#[test]
fn each_exported_name_carries_its_table_doc_into_the_header() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include/ozaki_shim.h");
    let text = std::fs::read_to_string(&path).unwrap();
    for id in SymId::all() {
        let want = format!("// {}\nvoid {}(", id.symbol().doc, id.name());
        assert!(
            text.contains(&want),
            "{}: the stub's doc line must be the table's doc {:?}",
            id.name(),
            id.symbol().doc
        );
    }
}
