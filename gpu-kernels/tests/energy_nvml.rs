//! `ozaki bench`'s energy reading through a real `dlopen` of `libnvidia-ml.so.1`: a fake NVML
//! (C, built here) whose energy counter moves 40 mJ per read and whose clock-event reasons
//! say "software power cap", loaded under NVML's soname before `Nvml::open` asks for it.
//! Needs a C compiler (`cc`); without one the test prints "skipped: ..." and passes.

use gpu_kernels::energy::{self, EnergySource, Nvml};
use std::process::Command;

const FAKE_NVML: &str = r#"
typedef struct dev *nvmlDevice_t;
static struct dev { int unused; } board;
static unsigned long long mj = 5000;
static int inits = 0;
int nvmlInit_v2(void) { inits++; return 0; }
int nvmlShutdown(void) { inits--; return 0; }
const char *nvmlErrorString(int rc) { return rc ? "fake error" : "ok"; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    if (i != 0) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = &board;
    return 0;
}
int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *e) {
    if (d != &board) return 2;
    mj += 40;
    *e = mj;
    return 0;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    if (d != &board) return 2;
    *r = 0x4; /* SW power cap */
    return 0;
}
int fake_inits(void) { return inits; }
"#;

#[test]
fn energy_and_power_cap_come_through_nvml() {
    let dir = std::env::temp_dir().join(format!("ozaki-fake-nvml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, lib) = (dir.join("nvml.c"), dir.join("libnvidia-ml.so.1"));
    std::fs::write(&src, FAKE_NVML).unwrap();
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-o"])
        .arg(&lib)
        .arg(&src)
        .status();
    if !matches!(built, Ok(s) if s.success()) {
        eprintln!("skipped: energy_and_power_cap_come_through_nvml: no C compiler ({built:?})");
        return;
    }
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: dlopen of a library this test just built; it stays loaded for the process, so
    // the later dlopen by soname finds this one (the fake, not a driver's NVML).
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!handle.is_null(), "fake NVML did not load");

    match Nvml::open(None, 3) {
        Err(e) => assert!(e.contains("NVML error 2"), "{e}"),
        Ok(_) => panic!("board 3 of a one-board NVML opened"),
    }
    let nvml = Nvml::open(None, 0).unwrap();
    let first = nvml.total_energy_mj().unwrap();
    assert_eq!(nvml.total_energy_mj(), Some(first + 40));
    let e = energy::measure(&nvml, 4, 0.0, || Ok::<(), ()>(()))
        .unwrap()
        .unwrap();
    // one read before and one after the 4 calls: 40 mJ over 4 calls
    assert_eq!(e.calls, 4);
    assert!((e.joules_per_call - 0.010).abs() < 1e-12, "{e:?}");
    assert!(e.power_capped, "{e:?}");
    drop(nvml);
    // SAFETY: the fake's own counter of init/shutdown pairs, a plain C function.
    let inits: unsafe extern "C" fn() -> i32 = unsafe {
        let f = libc::dlsym(handle, c"fake_inits".as_ptr());
        assert!(!f.is_null());
        std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn() -> i32>(f)
    };
    // SAFETY: a plain C function of the fake.
    assert_eq!(unsafe { inits() }, 0, "every init paired with a shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
