//! Names the library's load-time constructor for the cdylib link only.
//!
//! `_ozaki_shim_on_load` (`src/process.rs`) becomes the shared object's `DT_INIT`, which the
//! loader runs when `libozaki_shim.so` is loaded. An `.init_array` entry would instead travel
//! with the crate into every program linking it as a Rust library (the `ozaki` command
//! among them) and start the interposer there.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-init,_ozaki_shim_on_load");
    println!("cargo:rerun-if-changed=build.rs");
}
