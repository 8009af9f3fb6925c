//! Energy per call from the board's own counter: NVML's total energy consumption (mJ since
//! the driver loaded) read before and after a run of calls, and its clock-event reasons
//! sampled while they run, to say whether the board was power-capped meanwhile.
//!
//! NVML is opened with `dlopen("libnvidia-ml.so.1")` (it ships with the driver, not with
//! CUDA); where it is missing, or the board does not report energy, [`Nvml::open`] says why
//! and the caller reports the energy as not available. The arithmetic is written against
//! the [`EnergySource`] trait so that it is tested without a GPU.

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// NVML clock-event reason: the software power cap holds the clocks down.
pub const REASON_SW_POWER_CAP: u64 = 0x4;
/// NVML clock-event reason: the hardware power brake (external power limit) slows the board.
pub const REASON_HW_POWER_BRAKE: u64 = 0x80;
/// The reasons that mean "power-capped".
pub const POWER_CAP_REASONS: u64 = REASON_SW_POWER_CAP | REASON_HW_POWER_BRAKE;

/// How often the clock-event reasons are sampled during a measured run.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// What a board reports about its energy.
pub trait EnergySource: Sync {
    /// Total energy since the driver loaded, in millijoules; `None` when unreadable.
    fn total_energy_mj(&self) -> Option<u64>;
    /// The current clock-event (throttle) reason bits; `None` when unreadable.
    fn clock_reasons(&self) -> Option<u64>;
}

/// The energy of a run of calls.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Energy {
    /// Joules per call: the counter's increase over the run divided by the calls.
    pub joules_per_call: f64,
    /// Calls in the run.
    pub calls: usize,
    /// Wall seconds of the run.
    pub seconds: f64,
    /// Whether any sample during the run had a power-cap reason ([`POWER_CAP_REASONS`]).
    pub power_capped: bool,
    /// Every reason bit seen during the run, OR-ed.
    pub reasons: u64,
}

impl Energy {
    /// Average board power over the run, watts.
    pub fn watts(&self) -> f64 {
        self.joules_per_call * self.calls as f64 / self.seconds.max(1e-12)
    }
}

/// Runs `call` at least `min_calls` times and for at least `min_seconds` (the counter moves in
/// steps of milliseconds to tens of them, so a run must be long against one step), reading
/// the energy counter before and after and sampling the clock-event reasons on a second
/// thread meanwhile. `Ok(None)`: the source gave no energy reading (or the counter went
/// backwards); an error of `call` ends the run and is returned.
pub fn measure<E>(
    source: &dyn EnergySource,
    min_calls: usize,
    min_seconds: f64,
    mut call: impl FnMut() -> Result<(), E>,
) -> Result<Option<Energy>, E> {
    let Some(before) = source.total_energy_mj() else {
        return Ok(None);
    };
    let running = AtomicBool::new(true);
    let seen = AtomicU64::new(source.clock_reasons().unwrap_or(0));
    let start = Instant::now();
    let mut calls = 0usize;
    let outcome = std::thread::scope(|s| {
        s.spawn(|| {
            while running.load(Ordering::Relaxed) {
                if let Some(r) = source.clock_reasons() {
                    seen.fetch_or(r, Ordering::Relaxed);
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        let mut result = Ok(());
        while calls < min_calls.max(1) || start.elapsed().as_secs_f64() < min_seconds {
            if let Err(e) = call() {
                result = Err(e);
                break;
            }
            calls += 1;
        }
        running.store(false, Ordering::Relaxed);
        result
    });
    outcome?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(r) = source.clock_reasons() {
        seen.fetch_or(r, Ordering::Relaxed);
    }
    let Some(after) = source.total_energy_mj() else {
        return Ok(None);
    };
    Ok(energy_of(before, after, calls, seconds, seen.into_inner()))
}

/// The run's [`Energy`] from the counter's two readings (mJ); `None` when it went backwards
/// or there were no calls.
fn energy_of(
    before_mj: u64,
    after_mj: u64,
    calls: usize,
    seconds: f64,
    reasons: u64,
) -> Option<Energy> {
    if after_mj < before_mj || calls == 0 {
        return None;
    }
    Some(Energy {
        joules_per_call: (after_mj - before_mj) as f64 * 1e-3 / calls as f64,
        calls,
        seconds,
        power_capped: reasons & POWER_CAP_REASONS != 0,
        reasons,
    })
}

type NvmlReturn = c_int;
type Device = *mut c_void;

/// NVML opened for one board.
pub struct Nvml {
    lib: *mut c_void,
    device: Device,
    energy: unsafe extern "C" fn(Device, *mut c_ulonglong) -> NvmlReturn,
    reasons: unsafe extern "C" fn(Device, *mut c_ulonglong) -> NvmlReturn,
    shutdown: unsafe extern "C" fn() -> NvmlReturn,
}

// SAFETY: NVML's device queries are thread-safe (documented); the handle and library stay
// valid until Drop, which runs once no reference is left.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}

/// `dlsym` of `name` in `lib` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the C signature of the symbol.
unsafe fn symbol<F: Copy>(lib: *mut c_void, name: &str) -> Result<F, String> {
    let c = CString::new(name).expect("symbol names have no NUL");
    // SAFETY: lib is a live dlopen handle; c is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        return Err(format!("libnvidia-ml.so.1 has no {name}"));
    }
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: the caller names the symbol's signature; function and data pointers have the
    // same size on the platforms CUDA supports.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

impl Nvml {
    /// Opens NVML and the board with PCI bus id `pci_bus_id` (as CUDA reports it, e.g.
    /// `0000:19:00.0`), or NVML's board `index` when no id is given. Errors name what is
    /// missing: the library, a symbol, or the board's energy counter.
    pub fn open(pci_bus_id: Option<&str>, index: u32) -> Result<Nvml, String> {
        let name = CString::new("libnvidia-ml.so.1").expect("no NUL");
        // SAFETY: dlopen of a NUL-terminated name.
        let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return Err("no libnvidia-ml.so.1".into());
        }
        // SAFETY: the signatures are NVML's (nvml.h): all return nvmlReturn_t.
        let opened = unsafe { Self::bind(lib, pci_bus_id, index) };
        if opened.is_err() {
            // SAFETY: lib came from dlopen above and nothing of it is kept.
            unsafe { libc::dlclose(lib) };
        }
        opened
    }

    /// [`Nvml::open`] for the board CUDA numbers `ordinal` (matched by PCI bus id, since
    /// NVML and CUDA may number the boards differently; by index when CUDA gives no id).
    /// Call it with CUDA initialised (after [`crate::gpu`]).
    pub fn for_cuda_device(ordinal: u32) -> Result<Nvml, String> {
        use cudarc::driver::sys;
        let mut dev = 0;
        let mut buf = [0 as c_char; 32];
        // SAFETY: out-parameters of the sizes given; CUDA is initialised by the caller.
        let id = unsafe {
            (sys::cuDeviceGet(&mut dev, ordinal as c_int) == sys::CUresult::CUDA_SUCCESS
                && sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, dev)
                    == sys::CUresult::CUDA_SUCCESS)
                .then(|| CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
        };
        Nvml::open(id.as_deref(), ordinal)
    }

    /// # Safety
    /// `lib` is a live dlopen handle of NVML.
    unsafe fn bind(lib: *mut c_void, pci_bus_id: Option<&str>, index: u32) -> Result<Nvml, String> {
        type Init = unsafe extern "C" fn() -> NvmlReturn;
        type ByIndex = unsafe extern "C" fn(c_uint, *mut Device) -> NvmlReturn;
        type ByPci = unsafe extern "C" fn(*const c_char, *mut Device) -> NvmlReturn;
        type Query = unsafe extern "C" fn(Device, *mut c_ulonglong) -> NvmlReturn;
        type ErrorString = unsafe extern "C" fn(NvmlReturn) -> *const c_char;
        // SAFETY: the types are nvml.h's signatures of these symbols.
        let init: Init = unsafe { symbol(lib, "nvmlInit_v2") }?;
        // SAFETY: as above.
        let shutdown: Init = unsafe { symbol(lib, "nvmlShutdown") }?;
        // SAFETY: as above.
        let error_string: Option<ErrorString> = unsafe { symbol(lib, "nvmlErrorString") }.ok();
        // SAFETY: as above.
        let energy: Query = unsafe { symbol(lib, "nvmlDeviceGetTotalEnergyConsumption") }?;
        // SAFETY: as above (the event-reasons name is the newer drivers' alias).
        let reasons: Query = unsafe { symbol(lib, "nvmlDeviceGetCurrentClocksThrottleReasons") }
            // SAFETY: as above.
            .or_else(|_| unsafe { symbol(lib, "nvmlDeviceGetCurrentClocksEventReasons") })?;
        let why = |what: &str, rc: NvmlReturn| {
            let text = error_string
                .map(|f| {
                    // SAFETY: nvmlErrorString returns a static NUL-terminated string.
                    unsafe { CStr::from_ptr(f(rc)) }
                        .to_string_lossy()
                        .into_owned()
                })
                .unwrap_or_default();
            format!("{what}: NVML error {rc} {text}")
        };
        // SAFETY: NVML's initialiser; from here on `nvml`'s Drop pairs it with shutdown.
        let rc = unsafe { init() };
        if rc != 0 {
            return Err(why("nvmlInit", rc));
        }
        // lib stays null until the board answers: on failure the caller closes it
        let mut nvml = Nvml {
            lib: std::ptr::null_mut(),
            device: std::ptr::null_mut(),
            energy,
            reasons,
            shutdown,
        };
        let rc = match pci_bus_id {
            Some(id) => {
                // SAFETY: nvml.h's signature of the symbol.
                let by_pci: ByPci = unsafe { symbol(lib, "nvmlDeviceGetHandleByPciBusId_v2") }?;
                let c = CString::new(id).map_err(|_| "PCI bus id with a NUL".to_string())?;
                // SAFETY: c is NUL-terminated; the device is an out-parameter.
                unsafe { by_pci(c.as_ptr(), &mut nvml.device) }
            }
            None => {
                // SAFETY: nvml.h's signature of the symbol.
                let by_index: ByIndex = unsafe { symbol(lib, "nvmlDeviceGetHandleByIndex_v2") }?;
                // SAFETY: out-parameter.
                unsafe { by_index(index, &mut nvml.device) }
            }
        };
        if rc != 0 {
            return Err(why("the board's NVML handle", rc));
        }
        let mut mj = 0;
        // SAFETY: the handle NVML just gave; out-parameter.
        let rc = unsafe { (nvml.energy)(nvml.device, &mut mj) };
        if rc != 0 {
            return Err(why("nvmlDeviceGetTotalEnergyConsumption", rc));
        }
        nvml.lib = lib;
        Ok(nvml)
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: NVML was initialised by open (a value with a null lib was never fully
        // opened: its shutdown still pairs the successful init); the library is closed once.
        unsafe {
            (self.shutdown)();
            if !self.lib.is_null() {
                libc::dlclose(self.lib);
            }
        }
    }
}

impl EnergySource for Nvml {
    fn total_energy_mj(&self) -> Option<u64> {
        let mut mj = 0;
        // SAFETY: the handle is live while self is.
        (unsafe { (self.energy)(self.device, &mut mj) } == 0).then_some(mj)
    }

    fn clock_reasons(&self) -> Option<u64> {
        let mut r = 0;
        // SAFETY: as above.
        (unsafe { (self.reasons)(self.device, &mut r) } == 0).then_some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A board whose counter the test advances: `per_call_mj` per call of the measured run.
    struct Fake {
        mj: AtomicU64,
        reasons: Option<u64>,
        readable: bool,
    }

    impl EnergySource for Fake {
        fn total_energy_mj(&self) -> Option<u64> {
            self.readable.then(|| self.mj.load(Ordering::SeqCst))
        }
        fn clock_reasons(&self) -> Option<u64> {
            self.reasons
        }
    }

    fn fake(reasons: Option<u64>, readable: bool) -> Fake {
        Fake {
            mj: AtomicU64::new(1_000_000),
            reasons,
            readable,
        }
    }

    #[test]
    fn joules_per_call_are_the_counter_increase_over_the_calls() {
        let board = fake(Some(0x1), true);
        let e = measure(&board, 40, 0.0, || {
            board.mj.fetch_add(250, Ordering::SeqCst);
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
        assert_eq!(e.calls, 40);
        assert!((e.joules_per_call - 0.25).abs() < 1e-12, "{e:?}");
        assert!(!e.power_capped, "idle bit only");
        assert!(e.watts() > 0.0);
    }

    #[test]
    fn a_power_cap_reason_during_the_run_is_reported() {
        for bit in [REASON_SW_POWER_CAP, REASON_HW_POWER_BRAKE] {
            let board = fake(Some(bit | 0x1), true);
            let e = measure(&board, 3, 0.02, || Ok::<(), ()>(()))
                .unwrap()
                .unwrap();
            assert!(e.power_capped && e.reasons & bit != 0, "{e:?}");
            assert!(e.calls >= 3 && e.seconds >= 0.02);
        }
    }

    #[test]
    fn no_reading_is_no_energy_and_an_error_ends_the_run() {
        let unreadable = fake(None, false);
        assert_eq!(measure(&unreadable, 5, 0.0, || Ok::<(), ()>(())), Ok(None));
        let board = fake(None, true);
        let mut n = 0;
        let r = measure(&board, 10, 0.0, || {
            n += 1;
            if n == 3 { Err("boom") } else { Ok(()) }
        });
        assert_eq!(r, Err("boom"));
        assert_eq!(n, 3);
        // a counter that went backwards (driver reload) gives no energy
        assert_eq!(energy_of(10, 5, 1, 1.0, 0), None);
        assert_eq!(energy_of(10, 10, 0, 1.0, 0), None);
    }
}
