//! CUDA libraries outside the loader's search path: those of pip's CUDA 13 wheels
//! (`nvidia-cublas`, `nvidia-cuda-nvrtc`, installed by `pip install ozaki-shim[cu13]`), which
//! live in `site-packages/nvidia/cu13/lib`.
//!
//! cudarc opens every library by its bare name (`dlopen("libcublas.so.13")`), which searches
//! only `LD_LIBRARY_PATH` (as it was when the program started) and the system directories.
//! Opening the same file first by its absolute path, with `RTLD_GLOBAL`, makes that later
//! bare-name open find the already loaded library by its soname; no environment variable of
//! the program is changed. A library found in none of the directories is left to the
//! ordinary search, so a system CUDA keeps working as before.
//!
//! Directories, first hit wins per library:
//! 1. `OZAKI_CUDA_LIB_DIRS` (colon-separated), for CUDA wheels installed elsewhere;
//! 2. `nvidia/cu13/lib` beside the shim's own package: the shim library of the wheel is
//!    `site-packages/ozaki_shim/lib/libozaki_shim.so`, so this is
//!    `<shim dir>/../../nvidia/cu13/lib`.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The variable with extra directories to look in (colon-separated).
pub const DIRS_VAR: &str = ozaki_core::env::CUDA_LIB_DIRS;

/// File names to load, in dependency order (cuBLAS needs cuBLASLt; NVRTC opens its builtins
/// library by name when it compiles). A name ending in `.` is a prefix: NVRTC's builtins carry
/// the minor version (`libnvrtc-builtins.so.13.0`).
const LIBRARIES: &[&str] = &[
    "libcublasLt.so.13",
    "libcublas.so.13",
    "libnvrtc-builtins.so.13.",
    "libnvrtc.so.13",
];

/// Loads the CUDA libraries found in the directories above, once per process; returns the
/// files loaded. Called before cudarc first looks for a library.
pub fn preload() -> &'static [PathBuf] {
    static LOADED: OnceLock<Vec<PathBuf>> = OnceLock::new();
    LOADED.get_or_init(|| {
        let dirs = search_dirs(
            ozaki_core::env::var_os(DIRS_VAR).as_deref(),
            own_object_path().as_deref(),
        );
        let loaded: Vec<PathBuf> = find_libraries(&dirs)
            .into_iter()
            .filter(|f| open_global(f))
            .collect();
        if !loaded.is_empty() {
            tracing::debug!(
                ?loaded,
                "CUDA libraries loaded from outside the search path"
            );
        }
        loaded
    })
}

/// The directories to search: those of `env_dirs` (`OZAKI_CUDA_LIB_DIRS`), then the pip
/// layout relative to `own_object` (the shim library), keeping only existing directories.
pub fn search_dirs(env_dirs: Option<&OsStr>, own_object: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = env_dirs
        .map(|v| {
            std::env::split_paths(v)
                .filter(|d| !d.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if let Some(dir) = own_object.and_then(Path::parent) {
        dirs.push(dir.join("../../nvidia/cu13/lib"));
    }
    dirs.retain(|d| d.is_dir());
    dirs
}

/// For each of [`LIBRARIES`], the file in the first directory of `dirs` that has it.
pub fn find_libraries(dirs: &[PathBuf]) -> Vec<PathBuf> {
    LIBRARIES
        .iter()
        .filter_map(|name| dirs.iter().find_map(|d| find_in(d, name)))
        .collect()
}

/// `dir/name`, or for a prefix name (ending in `.`) the first such file in sorted order.
fn find_in(dir: &Path, name: &str) -> Option<PathBuf> {
    if !name.ends_with('.') {
        let f = dir.join(name);
        return f.is_file().then_some(f);
    }
    let mut hits: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(name))
                && p.is_file()
        })
        .collect();
    hits.sort();
    hits.into_iter().next()
}

/// Opens `file` for good (the handle is never closed) with its symbols global; false, with a
/// debug line, when it cannot be loaded.
fn open_global(file: &Path) -> bool {
    let Ok(c) = CString::new(file.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path. Loading runs the library's constructors, which is
    // what cudarc's own open of the same library would do a moment later.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        tracing::debug!(file = %file.display(), "cannot load CUDA library");
    }
    !handle.is_null()
}

/// The file this code was loaded from (the shim library when preloaded; the executable in a
/// test), from the dynamic loader.
fn own_object_path() -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the address (a function of this object) and fills `info`.
    let found = unsafe { libc::dladdr(own_object_path as *const libc::c_void, info.as_mut_ptr()) };
    // SAFETY: dladdr succeeded (non-zero), so `info` is filled in; it was zeroed before anyway.
    let info = unsafe { info.assume_init() };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader, valid while the object
    // stays loaded (this code runs from it).
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(OsStr::from_bytes(name.to_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(dir: &Path, names: &[&str]) {
        std::fs::create_dir_all(dir).unwrap();
        for n in names {
            std::fs::write(dir.join(n), b"").unwrap();
        }
    }

    #[test]
    fn wheel_layout_beside_the_shim_and_the_variable_first() {
        let root = std::env::temp_dir().join(format!("ozaki-cuda-dirs-{}", std::process::id()));
        let site = root.join("site-packages");
        let pip = site.join("nvidia/cu13/lib");
        touch(
            &pip,
            &["libcublas.so.13", "libcublasLt.so.13", "libnvrtc.so.13"],
        );
        touch(
            &pip,
            &["libnvrtc-builtins.so.13.0", "libnvrtc-builtins.alt.so.13.0"],
        );
        let extra = root.join("extra");
        touch(&extra, &["libcublas.so.13"]);
        let shim = site.join("ozaki_shim/lib/libozaki_shim.so");
        std::fs::create_dir_all(shim.parent().unwrap()).unwrap();

        let env = std::env::join_paths([extra.clone(), root.join("missing")]).unwrap();
        let dirs = search_dirs(Some(&env), Some(&shim));
        assert_eq!(dirs.len(), 2, "{dirs:?}");
        assert_eq!(dirs[0], extra);
        assert!(dirs[1].ends_with("ozaki_shim/lib/../../nvidia/cu13/lib"));

        let found = find_libraries(&dirs);
        let name = |p: &PathBuf| p.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(
            found.iter().map(name).collect::<Vec<_>>(),
            [
                "libcublasLt.so.13",
                "libcublas.so.13",
                "libnvrtc-builtins.so.13.0",
                "libnvrtc.so.13"
            ]
        );
        // cuBLAS from the variable's directory, the rest from the wheel layout.
        assert_eq!(found[1], extra.join("libcublas.so.13"));
        assert!(found[0].starts_with(&dirs[1]));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn nothing_to_load_outside_a_pip_layout() {
        let dirs = search_dirs(None, Some(Path::new("/usr/lib/libozaki_shim.so")));
        assert!(find_libraries(&dirs).is_empty());
        assert!(search_dirs(Some(OsStr::new("")), None).is_empty());
    }

    #[test]
    fn own_object_is_this_test_binary() {
        let me = std::env::current_exe().unwrap().canonicalize().unwrap();
        let own = own_object_path().unwrap().canonicalize().unwrap();
        assert_eq!(own, me);
    }
}
