//! Names the library's load-time constructor for the cdylib link only.
//!
//! `_ozaki_shim_on_load` (`src/process.rs`) becomes the shared object's `DT_INIT`, which the
//! loader runs when `libozaki_shim.so` is loaded. An `.init_array` entry in the Rust code
//! would instead travel with the crate into every program linking it as a Rust library (the
//! `ozaki` command among them) and start the interposer there.
//!
//! Zig's linker (`cargo zigbuild`, the manylinux wheel build) takes no `-init` option: there
//! the constructor is an `.init_array` entry in a C object (`src/on_load.c`) compiled with
//! zig and handed to the cdylib link alone, which keeps it out of the Rust library all the
//! same.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/on_load.c");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    match std::env::var_os("RUSTC_LINKER").map(PathBuf::from) {
        Some(linker) if is_zig(&linker) => {
            let obj = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
                .join("on_load.o");
            let status = Command::new(&linker)
                .args(["-c", "-O2", "-fPIC", "src/on_load.c", "-o"])
                .arg(&obj)
                .status()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", linker.display()));
            assert!(
                status.success(),
                "{} failed on src/on_load.c",
                linker.display()
            );
            println!("cargo:rustc-cdylib-link-arg={}", obj.display());
        }
        _ => println!("cargo:rustc-cdylib-link-arg=-Wl,-init,_ozaki_shim_on_load"),
    }
}

/// Whether `linker` is one of cargo-zigbuild's `zig cc` wrappers (`zigcc-<target>.sh`).
fn is_zig(linker: &Path) -> bool {
    linker
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("zigcc"))
}
