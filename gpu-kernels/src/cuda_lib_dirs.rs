//! CUDA libraries outside the loader's search path: those of pip's CUDA 13 wheels
//! (`nvidia-cublas`, `nvidia-cuda-nvrtc`, installed by `pip install ozaki-shim[cu13]` or by
//! another package such as PyTorch), which live in `site-packages/nvidia/cu13/lib`, and a
//! system CUDA toolkit whose `lib64` the loader is not told about.
//!
//! cudarc opens every library by its bare name (`dlopen("libcublas.so.13")`), which searches
//! only `LD_LIBRARY_PATH` (as it was when the program started) and the system directories.
//! Opening the same file first by its absolute path, with `RTLD_GLOBAL`, makes that later
//! bare-name open find the already loaded library by its soname; no environment variable of
//! the program is changed. A library found in none of the directories is left to the
//! ordinary search, so a system CUDA on the loader's path keeps working as before.
//!
//! Directories, first hit wins per library:
//! 1. `OZAKI_CUDA_LIB_DIRS` (colon-separated): the user's, then those the `ozaki` command of
//!    the pip package adds (where pip installed the `cu13` extra's wheels, from their
//!    installed-files records);
//! 2. `nvidia/*/lib` of the `site-packages` that holds the shim's own package (the shim
//!    library of the wheel is `site-packages/ozaki_shim/lib/libozaki_shim.so`);
//! 3. `nvidia/*/lib` of every `site-packages` the running program has loaded objects from:
//!    a Python program's own packages (PyTorch, CuPy and JAX pull in the same wheels);
//! 4. only for a library the loader cannot find by its bare name: `$CUDA_HOME/lib64`,
//!    `$CUDA_PATH/lib64` and `/usr/local/cuda/lib64`.
//!
//! cudarc opens the unversioned name (`libcublas.so`) before the versioned one, so a system
//! toolkit whose development links the loader finds is what cudarc runs on in any case:
//! such a family (cuBLAS with cuBLASLt, NVRTC with its builtins) is then loaded from none of
//! the directories above, which would only put a second copy, or a cuBLAS beside another
//! version's cuBLASLt, into the process. The trace's `cuda_libs` says which files were used.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The variable with extra directories to look in (colon-separated).
pub const DIRS_VAR: &str = ozaki_core::env::CUDA_LIB_DIRS;

/// One library to load.
struct Library {
    /// File name; one ending in `.` is a prefix: NVRTC's builtins carry the minor version
    /// (`libnvrtc-builtins.so.13.0`).
    name: &'static str,
    /// The first name cudarc opens for the library's family (cuBLAS with cuBLASLt, NVRTC
    /// with its builtins): the unversioned one of a toolkit's development links. When the
    /// loader finds it, cudarc runs on that family whatever was loaded before, so the
    /// family is loaded from nowhere else.
    family: &'static str,
    /// The bare name whose failing open by the loader sends the search on to a system
    /// toolkit's directory: the builtins go with the NVRTC they belong to.
    probe: &'static str,
}

/// The libraries, in dependency order (cuBLAS needs cuBLASLt; NVRTC opens its builtins
/// library by name when it compiles).
const LIBRARIES: &[Library] = &[
    Library {
        name: "libcublasLt.so.13",
        family: "libcublas.so",
        probe: "libcublasLt.so.13",
    },
    Library {
        name: "libcublas.so.13",
        family: "libcublas.so",
        probe: "libcublas.so.13",
    },
    Library {
        name: "libnvrtc-builtins.so.13.",
        family: "libnvrtc.so",
        probe: "libnvrtc.so.13",
    },
    Library {
        name: "libnvrtc.so.13",
        family: "libnvrtc.so",
        probe: "libnvrtc.so.13",
    },
];

/// Where a system CUDA toolkit keeps its libraries when the loader is not told about them.
const SYSTEM_TOOLKIT: &str = "/usr/local/cuda/lib64";

/// Loads the CUDA libraries found in the directories above, once per process; returns the
/// files loaded. Called before cudarc first looks for a library.
pub fn preload() -> &'static [PathBuf] {
    static LOADED: OnceLock<Vec<PathBuf>> = OnceLock::new();
    LOADED.get_or_init(|| {
        let pip = pip_dirs(
            ozaki_core::env::var_os(DIRS_VAR).as_deref(),
            own_object_path().as_deref(),
            &crate::loaded_objects::package_dirs(&crate::loaded_objects::paths()),
        );
        let system = system_dirs(&[
            ozaki_core::env::var_os("CUDA_HOME"),
            ozaki_core::env::var_os("CUDA_PATH"),
        ]);
        let loaded: Vec<PathBuf> = plan(&pip, &system, loadable_by_name)
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

/// The directories of pip's CUDA wheels, in search order: those of `env_dirs`
/// (`OZAKI_CUDA_LIB_DIRS`), then `nvidia/*/lib` of the `site-packages` two levels above
/// `own_object` (the shim library), then `nvidia/*/lib` of each of `program_packages` (the
/// package directories the program has loaded from); existing directories only, each once.
pub fn pip_dirs(
    env_dirs: Option<&OsStr>,
    own_object: Option<&Path>,
    program_packages: &[PathBuf],
) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = env_dirs
        .map(|v| {
            std::env::split_paths(v)
                .filter(|d| !d.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    let own_site = own_object.and_then(|f| f.parent()?.parent()?.parent());
    for site in own_site
        .into_iter()
        .chain(program_packages.iter().map(PathBuf::as_path))
    {
        dirs.extend(nvidia_lib_dirs(site));
    }
    keep_existing_once(dirs)
}

/// `site/nvidia/*/lib`, sorted (pip's CUDA 13 wheels all use `nvidia/cu13/lib`; the CUDA 12
/// ones had one directory per library).
fn nvidia_lib_dirs(site: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(site.join("nvidia")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| Some(e.ok()?.path().join("lib")))
        .filter(|d| d.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The system toolkit directories: `lib64` of each of `homes` (`$CUDA_HOME`, `$CUDA_PATH`),
/// then [`SYSTEM_TOOLKIT`]; existing directories only, each once.
pub fn system_dirs(homes: &[Option<std::ffi::OsString>]) -> Vec<PathBuf> {
    let dirs = homes
        .iter()
        .flatten()
        .filter(|h| !h.is_empty())
        .map(|h| Path::new(h).join("lib64"))
        .chain([PathBuf::from(SYSTEM_TOOLKIT)])
        .collect();
    keep_existing_once(dirs)
}

/// `dirs` without those that are not directories, and without repeats of the same directory
/// (compared by their canonical paths; the first spelling is kept).
fn keep_existing_once(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut out = Vec::new();
    for d in dirs {
        let Ok(canon) = d.canonicalize() else {
            continue;
        };
        if canon.is_dir() && !seen.contains(&canon) {
            seen.push(canon);
            out.push(d);
        }
    }
    out
}

/// The files to load: for each of [`LIBRARIES`] whose family's first name the loader cannot
/// open by itself (`loadable`, asked once per name), the first of the `pip` directories that
/// has it; failing that, when the loader cannot open its probe by the bare name either, the
/// first of the `system` directories that has it.
pub fn plan(
    pip: &[PathBuf],
    system: &[PathBuf],
    mut loadable: impl FnMut(&str) -> bool,
) -> Vec<PathBuf> {
    let mut asked: Vec<(&str, bool)> = Vec::new();
    let mut found_by_loader = |name: &'static str| match asked.iter().find(|(n, _)| *n == name) {
        Some(&(_, ok)) => ok,
        None => {
            let ok = loadable(name);
            asked.push((name, ok));
            ok
        }
    };
    let mut files = Vec::new();
    for lib in LIBRARIES {
        let first_in = |dirs: &[PathBuf]| dirs.iter().find_map(|d| find_in(d, lib.name));
        if found_by_loader(lib.family) {
            continue;
        }
        if let Some(f) = first_in(pip) {
            files.push(f);
            continue;
        }
        if !system.is_empty()
            && !found_by_loader(lib.probe)
            && let Some(f) = first_in(system)
        {
            files.push(f);
        }
    }
    files
}

/// Whether the loader finds `name` by itself, opened with the flags of cudarc's lazy loader
/// (libloading's defaults). A library it finds stays loaded: cudarc opens the same one a
/// moment later.
pub(crate) fn loadable_by_name(name: &str) -> bool {
    let Ok(c) = CString::new(name) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated name; loading runs the library's constructors, which
    // cudarc's own open of it would do anyway.
    !unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) }.is_null()
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

    fn scratch(name: &str) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("ozaki-cuda-dirs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        root
    }

    fn names(files: &[PathBuf]) -> Vec<String> {
        files
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
            .collect()
    }

    const ALL: &[&str] = &[
        "libcublas.so.13",
        "libcublasLt.so.13",
        "libnvrtc.so.13",
        "libnvrtc-builtins.so.13.0",
        "libnvrtc-builtins.alt.so.13.0",
    ];

    #[test]
    fn wheel_layout_beside_the_shim_and_the_variable_first() {
        let root = scratch("beside");
        let site = root.join("site-packages");
        let pip = site.join("nvidia/cu13/lib");
        touch(&pip, ALL);
        let extra = root.join("extra");
        touch(&extra, &["libcublas.so.13"]);
        let shim = site.join("ozaki_shim/lib/libozaki_shim.so");
        std::fs::create_dir_all(shim.parent().unwrap()).unwrap();

        let env =
            std::env::join_paths([extra.clone(), root.join("missing"), extra.clone()]).unwrap();
        let dirs = pip_dirs(Some(&env), Some(&shim), &[]);
        assert_eq!(dirs, [extra.clone(), pip.clone()]);

        let found = plan(&dirs, &[], |n| {
            assert!(n == "libcublas.so" || n == "libnvrtc.so", "asked for {n}");
            false
        });
        assert_eq!(
            names(&found),
            [
                "libcublasLt.so.13",
                "libcublas.so.13",
                "libnvrtc-builtins.so.13.0",
                "libnvrtc.so.13"
            ]
        );
        // cuBLAS from the variable's directory, the rest from the wheel layout.
        assert_eq!(found[1], extra.join("libcublas.so.13"));
        assert!(found[0].starts_with(&pip));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_running_pythons_packages_are_searched_after_the_shims_own() {
        // The shim installed in one venv, pip's CUDA wheels (pulled in by another package) in
        // the site-packages of the Python the program runs on, and the same directory seen
        // twice (the shim's own site-packages also loaded from) counted once.
        let root = scratch("program");
        let own = root.join("venv/site-packages");
        let shim = own.join("ozaki_shim/lib/libozaki_shim.so");
        std::fs::create_dir_all(shim.parent().unwrap()).unwrap();
        let theirs = root.join("system/dist-packages");
        let cu13 = theirs.join("nvidia/cu13/lib");
        touch(&cu13, ALL);
        touch(&theirs.join("nvidia/cublas/lib"), &["libcublas.so.12"]);
        let dirs = pip_dirs(None, Some(&shim), &[own.clone(), theirs.clone()]);
        assert_eq!(
            dirs,
            [
                theirs.join("nvidia/cu13/lib"),
                theirs.join("nvidia/cublas/lib")
            ]
        );
        let found = plan(&dirs, &[], |_| false);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found.iter().all(|f| f.starts_with(&cu13)), "{found:?}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_system_toolkit_only_for_what_the_loader_cannot_find() {
        let root = scratch("system");
        let toolkit = root.join("cuda/lib64");
        touch(&toolkit, ALL);
        let system = system_dirs(&[Some(root.join("cuda").into()), None, Some("".into())]);
        assert_eq!(system.first(), Some(&toolkit));
        // The loader finds cuBLAS(Lt) itself but not NVRTC: only NVRTC and its builtins come
        // from the toolkit, and each bare name is asked once.
        let mut asked = Vec::new();
        let found = plan(&[], &system, |n| {
            asked.push(n.to_string());
            n.starts_with("libcublas") && n.ends_with(".13")
        });
        assert_eq!(
            names(&found),
            ["libnvrtc-builtins.so.13.0", "libnvrtc.so.13"]
        );
        assert!(found.iter().all(|f| f.starts_with(&toolkit)));
        assert_eq!(
            asked,
            [
                "libcublas.so",
                "libcublasLt.so.13",
                "libcublas.so.13",
                "libnvrtc.so",
                "libnvrtc.so.13"
            ]
        );
        // A library pip's directories have is never looked up elsewhere.
        let pip = root.join("site/nvidia/cu13/lib");
        touch(&pip, &["libnvrtc.so.13"]);
        let found = plan(std::slice::from_ref(&pip), &system, |_| false);
        assert_eq!(found[3], pip.join("libnvrtc.so.13"));
        assert!(found[..3].iter().all(|f| f.starts_with(&toolkit)));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_family_the_loader_finds_first_is_loaded_from_nowhere_else() {
        // A toolkit with its development links on the loader's path: cudarc opens its
        // `libcublas.so` first, so pip's cuBLAS and cuBLASLt stay unloaded (no second copy,
        // no cuBLAS beside another version's cuBLASLt); NVRTC, which that toolkit lacks,
        // still comes from pip.
        let root = scratch("family");
        let pip = root.join("site/nvidia/cu13/lib");
        touch(&pip, ALL);
        let found = plan(std::slice::from_ref(&pip), &[], |n| n == "libcublas.so");
        assert_eq!(
            names(&found),
            ["libnvrtc-builtins.so.13.0", "libnvrtc.so.13"]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn nothing_to_load_outside_a_pip_layout() {
        let dirs = pip_dirs(None, Some(Path::new("/usr/lib/libozaki_shim.so")), &[]);
        assert!(plan(&dirs, &[], |_| true).is_empty());
        assert!(pip_dirs(Some(OsStr::new("")), None, &[]).is_empty());
    }

    #[test]
    fn own_object_is_this_test_binary() {
        let me = std::env::current_exe().unwrap().canonicalize().unwrap();
        let own = own_object_path().unwrap().canonicalize().unwrap();
        assert_eq!(own, me);
    }
}
