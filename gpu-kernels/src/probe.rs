//! Can this process use a GPU at all? Checked before any cudarc call, because cudarc panics
//! (it does not return an error) when a CUDA library cannot be loaded (ecosystem-facts §1).
//!
//! The check dlopens each library by cudarc's own candidate names, so a `true` here means
//! cudarc's lazy loader will find it too. Missing symbols inside a present library still
//! panic in cudarc; [`contain`] turns such a panic into an error.

use crate::error::GpuError;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

/// The reason for a missing CUDA 13 library, with where to get it.
macro_rules! not_found {
    ($file:literal) => {
        concat!(
            $file,
            " not found; pip install 'ozaki-shim[cu13]' brings it, \
             or set OZAKI_CUDA_LIB_DIRS to its directory"
        )
    };
}

/// Which CUDA libraries this process can load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Libraries {
    /// libcuda (the driver): needed by every GPU route.
    pub driver: bool,
    /// libcublas: the native route and the bench's cuBLAS baselines.
    pub cublas: bool,
    /// libcublasLt: the int8 products of the emulated route.
    pub cublaslt: bool,
    /// libnvrtc: compiling the emulation kernels.
    pub nvrtc: bool,
}

impl Libraries {
    /// Looks for each library, once per process (several callers ask on the way to the
    /// first GPU call, and which libraries the process can load does not change while it
    /// runs). Nothing is initialised; with a driver here, a library found stays loaded.
    pub fn detect() -> Libraries {
        static FOUND: OnceLock<Libraries> = OnceLock::new();
        *FOUND.get_or_init(|| {
            // Without a driver no GPU route can run, and looking for the libraries (each a
            // dlopen of every candidate name, about 3 ms in all on a CPU-only machine) would
            // cost every process for nothing: the driver is reported missing first anyway.
            if !driver_present() {
                return Libraries::default();
            }
            // pip's CUDA wheels first, so that the names below find them (cuda_lib_dirs.rs).
            crate::cuda_lib_dirs::preload();
            // With a driver here, the libraries found are about to be used: they stay loaded
            // ([`open_for_good`]).
            Libraries {
                driver: true,
                cublas: open_for_good("cublas"),
                cublaslt: open_for_good("cublasLt"),
                nvrtc: open_for_good("nvrtc"),
            }
        })
    }

    /// The first missing library needed by the native route, if any.
    pub fn native_missing(&self) -> Option<&'static str> {
        if !self.driver {
            Some("no CUDA driver: libcuda.so.1 not loadable")
        } else if !self.cublas {
            Some(not_found!("libcublas.so.13"))
        } else {
            None
        }
    }

    /// Whether the GPU routes are missing a CUDA library although a CUDA driver is here: a
    /// machine with a GPU that the user most likely means to use.
    pub fn driver_without_libraries(&self) -> bool {
        self.driver && self.native_missing().is_some()
    }

    /// The first missing library needed by the emulated route, if any.
    pub fn ozaki_missing(&self) -> Option<&'static str> {
        self.native_missing().or(if !self.cublaslt {
            Some(not_found!("libcublasLt.so.13"))
        } else if !self.nvrtc {
            Some(not_found!("libnvrtc.so.13"))
        } else {
            None
        })
    }
}

/// Whether the CUDA driver library can be loaded, once per process. Cheaper than
/// [`Libraries::detect`], whose dlopen of cuBLAS and cuBLASLt cost about 160 ms on the H200
/// machine: the shim's pre-engine asks only this before deciding that a small call goes to the
/// vendor BLAS, so a process whose calls are all small never pays for loading cuBLAS.
pub fn driver_present() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    // SAFETY: is_culib_present only dlopens candidate names and drops the handle.
    *FOUND.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

/// Where the NVIDIA kernel driver lists the GPUs, one folder per device with an
/// `information` file (`Model: \t\t NVIDIA H100 80GB HBM3`, the name `cuDeviceGetName`
/// gives).
const DRIVER_GPUS: &str = "/proc/driver/nvidia/gpus";

/// The model of this machine's GPUs as the kernel driver lists them, read without loading
/// or initialising any CUDA library (a few small file reads): `None` when the list is missing
/// or empty, or names more than one model (which of them the process would use is CUDA's
/// device order, known only after `cuInit`). The shim prices the calls made before the GPU
/// starts with this GPU's profile.
pub fn gpu_model_without_init() -> Option<&'static str> {
    static MODEL: OnceLock<Option<String>> = OnceLock::new();
    MODEL
        .get_or_init(|| gpu_model_in(std::path::Path::new(DRIVER_GPUS)))
        .as_deref()
}

/// [`gpu_model_without_init`] of the device folders under `dir`.
fn gpu_model_in(dir: &std::path::Path) -> Option<String> {
    let mut model: Option<String> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let text = std::fs::read_to_string(entry.path().join("information")).ok()?;
        let this = text
            .lines()
            .find_map(|l| l.strip_prefix("Model:"))
            .map(str::trim)
            .filter(|m| !m.is_empty())?;
        match &model {
            Some(m) if m != this => return None,
            Some(_) => {}
            None => model = Some(this.to_string()),
        }
    }
    model
}

/// Opens the first of cudarc's candidate file names for the library `name` (as cudarc's
/// `sys` module of it spells it) that loads, with the flags of cudarc's lazy loader, and
/// keeps it loaded for the life of the process: the loader's own open of the same name
/// later finds it loaded. A probe that closed it again would make the GPU start load a
/// library twice (its relocations and initialisers run again after it was unloaded)
/// wherever `cuda_lib_dirs::preload` had not already kept it loaded: a library the loader
/// finds only by its versioned name, on a machine without a CUDA toolkit directory.
fn open_for_good(name: &str) -> bool {
    cudarc::get_lib_name_candidates(name)
        .iter()
        .any(|choice| crate::cuda_lib_dirs::loadable_by_name(choice))
}

/// Loads the CUDA libraries that [`Libraries::detect`] found, for good (cudarc's own lazy
/// loaders, which keep them), and returns what was found. The shim's background start calls
/// this first, so that the libraries' static constructors and exit handlers are all in place
/// before it registers its own exit handler (`start_gate`): handlers run in the reverse order
/// of registration, so the shim's then runs before those of the libraries it waits for.
pub fn load_present() -> Libraries {
    let libs = Libraries::detect();
    // A panic (a library that vanished since detect()) is contained.
    let load = |present: bool, f: fn()| {
        if present {
            let _ = catch_unwind(f);
        }
    };
    // SAFETY (each): culib only dlopens a library that detect() just found loadable.
    load(libs.driver, || {
        // SAFETY: as above.
        unsafe { cudarc::driver::sys::culib() };
    });
    load(libs.cublas, || {
        // SAFETY: as above.
        unsafe { cudarc::cublas::sys::culib() };
    });
    load(libs.cublaslt, || {
        // SAFETY: as above.
        unsafe { cudarc::cublaslt::sys::culib() };
    });
    load(libs.nvrtc, || {
        // SAFETY: as above.
        unsafe { cudarc::nvrtc::sys::culib() };
    });
    libs
}

/// Runs `f`, turning a panic inside it (cudarc's missing-library or missing-symbol panics)
/// into [`GpuError::Unavailable`], so no unwind ever reaches the C boundary from here.
pub fn contain<T>(what: &str, f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, GpuError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(GpuError::Unavailable(format!("{what}: {msg}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The driver's device list as the kernel writes it: one model for all devices, none for
    /// a mix of models, a missing list or a device folder without its model line.
    #[test]
    fn the_gpu_model_comes_from_the_drivers_device_list() {
        let root = std::env::temp_dir().join(format!("ozaki-gpus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let device = |bus: &str, model: &str| {
            let d = root.join(bus);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("information"),
                format!("Model: \t\t {model}\nIRQ:   \t\t 35\nBus Type: \t PCIe\n"),
            )
            .unwrap();
        };
        assert_eq!(gpu_model_in(&root), None, "no list");
        device("0000:18:00.0", "NVIDIA H100 80GB HBM3");
        device("0000:2a:00.0", "NVIDIA H100 80GB HBM3");
        assert_eq!(
            gpu_model_in(&root).as_deref(),
            Some("NVIDIA H100 80GB HBM3")
        );
        device("0000:3a:00.0", "NVIDIA H200");
        assert_eq!(gpu_model_in(&root), None, "two models");
        std::fs::remove_dir_all(&root).unwrap();
        device("0000:18:00.0", "NVIDIA H200");
        std::fs::create_dir_all(root.join("0000:2a:00.0")).unwrap();
        assert_eq!(gpu_model_in(&root), None, "a device without its model");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_missing_library_says_how_to_get_it() {
        let all = Libraries {
            driver: true,
            cublas: true,
            cublaslt: true,
            nvrtc: true,
        };
        assert_eq!((all.native_missing(), all.ozaki_missing()), (None, None));
        assert!(!all.driver_without_libraries());
        let no_nvrtc = Libraries {
            nvrtc: false,
            ..all
        };
        assert_eq!(no_nvrtc.native_missing(), None);
        let why = no_nvrtc.ozaki_missing().unwrap();
        assert!(why.starts_with("libnvrtc.so.13 not found"), "{why}");
        assert!(
            why.contains("ozaki-shim[cu13]") && why.contains("OZAKI_CUDA_LIB_DIRS"),
            "{why}"
        );
        let no_cublas = Libraries {
            cublas: false,
            ..all
        };
        assert!(
            no_cublas
                .native_missing()
                .unwrap()
                .starts_with("libcublas.so.13")
        );
        assert!(no_cublas.driver_without_libraries());
        let no_driver = Libraries {
            driver: false,
            cublas: false,
            ..all
        };
        assert!(
            no_driver
                .native_missing()
                .unwrap()
                .contains("no CUDA driver")
        );
        assert!(!no_driver.driver_without_libraries());
    }
}
