//! The shared objects this process has loaded, from the dynamic loader: where the running
//! Python's packages live (for pip's CUDA wheels, [`crate::cuda_lib_dirs`]), and which CUDA
//! library files a GPU route actually runs on (the trace's `cuda_libs`).

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// File-name prefixes of the CUDA libraries the GPU routes use: the driver, cuBLAS(Lt) and
/// NVRTC (with its builtins).
const CUDA_PREFIXES: &[&str] = &["libcuda.so", "libcublas", "libnvrtc"];

/// Paths of every loaded object with a file name (the executable itself and the vDSO have
/// none), in load order.
pub fn paths() -> Vec<PathBuf> {
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `info` for the duration of the call, and `data`
        // is the `Vec` handed to dl_iterate_phdr below, borrowed mutably only here.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<PathBuf>)) };
        if !info.dlpi_name.is_null() {
            // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
            if !name.is_empty() {
                out.push(PathBuf::from(OsStr::from_bytes(name)));
            }
        }
        0
    }
    let mut out: Vec<PathBuf> = Vec::new();
    // SAFETY: `collect` matches the callback type, touches only `out` through `data`, and
    // never unwinds (it neither panics nor calls anything that could).
    unsafe { libc::dl_iterate_phdr(Some(collect), &mut out as *mut Vec<PathBuf> as *mut _) };
    out
}

/// The loaded CUDA library files among `paths` (see [`CUDA_PREFIXES`]), each once, sorted.
pub fn cuda_libraries(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut hits: Vec<PathBuf> = paths
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| CUDA_PREFIXES.iter().any(|pre| n.starts_with(pre)))
        })
        .cloned()
        .collect();
    hits.sort();
    hits.dedup();
    hits
}

/// The Python package directories (`.../site-packages`, Debian's `.../dist-packages`) that
/// hold any of `paths`, each once, in first-seen order: a Python program has loaded its
/// extension modules (NumPy's among them) from there before its first BLAS call.
pub fn package_dirs(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for p in paths {
        if let Some(d) = package_dir_of(p)
            && !dirs.contains(&d)
        {
            dirs.push(d);
        }
    }
    dirs
}

/// The innermost `site-packages` or `dist-packages` ancestor of `path`.
fn package_dir_of(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|a| {
            a.file_name()
                .is_some_and(|n| n == "site-packages" || n == "dist-packages")
        })
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn package_dirs_of_a_python_process() {
        let loaded = paths(&[
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/v/lib/python3.11/site-packages/numpy/_core/_multiarray_umath.cpython-311.so",
            "/v/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_.so",
            "/usr/lib/python3/dist-packages/scipy/linalg/_fblas.so",
            "/home/u/.local/lib/python3.11/site-packages/x.so",
        ]);
        assert_eq!(
            package_dirs(&loaded),
            paths(&[
                "/v/lib/python3.11/site-packages",
                "/usr/lib/python3/dist-packages",
                "/home/u/.local/lib/python3.11/site-packages",
            ])
        );
        // A directory merely named like one is not taken for the file itself.
        assert!(package_dirs(&paths(&["/opt/site-packages"])).is_empty());
    }

    #[test]
    fn cuda_libraries_are_picked_by_name() {
        let loaded = paths(&[
            "/s/nvidia/cu13/lib/libnvrtc.so.13",
            "/lib/x86_64-linux-gnu/libcuda.so.1",
            "/s/nvidia/cu13/lib/libcublasLt.so.13",
            "/s/nvidia/cu13/lib/libcublas.so.13",
            "/lib/x86_64-linux-gnu/libcudart_static_not.so",
            "/lib/x86_64-linux-gnu/libm.so.6",
            "/s/nvidia/cu13/lib/libcublas.so.13",
        ]);
        assert_eq!(
            cuda_libraries(&loaded),
            paths(&[
                "/lib/x86_64-linux-gnu/libcuda.so.1",
                "/s/nvidia/cu13/lib/libcublas.so.13",
                "/s/nvidia/cu13/lib/libcublasLt.so.13",
                "/s/nvidia/cu13/lib/libnvrtc.so.13",
            ])
        );
    }

    #[test]
    fn this_process_has_loaded_libc() {
        let all = super::paths();
        assert!(
            all.iter().any(|p| p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libc.so"))),
            "{all:?}"
        );
    }
}
