//! The process-wide GPU: found and initialised once, shared behind a lock.
//!
//! Initialisation order: library presence first ([`Libraries::detect`]), then the
//! driver, the primary context of device `OZAKI_GPU` (default: by MPI local rank from
//! `OZAKI_DEVICES` or all devices, `ozaki_core::devices`), cuBLAS and cuBLASLt handles,
//! and the NVRTC-compiled kernels. Each step that can panic inside cudarc runs in
//! [`contain`]. A missing piece disables the routes that need it, with the reason kept for the
//! one stderr line and the trace's `fallback` field. Missing NVRTC/cuBLASLt only disables
//! `gpu-ozaki`; `gpu-native` still works.

use crate::error::{Context, GpuError};
use crate::kernels::Kernels;
use crate::memory::{PinnedBuffer, Workspace};
use crate::probe::{Libraries, contain};
pub use crate::timing::sync;
use cudarc::cublas::sys as cublas;
use cudarc::driver::sys;
use ozaki_core::engine::adapt::GpuTraits;
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::Instant;

/// A CUDA stream handle as C callers pass it (`cudaStream_t` and `CUstream` are the same).
pub type Stream = sys::CUstream;

/// An initialised GPU with its library handles, kernels and reusable buffers.
pub struct Gpu {
    /// Device ordinal (`OZAKI_GPU`, else chosen by local rank): the trace's `device` field.
    pub ordinal: u32,
    /// Device name as the driver reports it.
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// Multiprocessor count.
    pub sms: i32,
    /// Peak SM clock, kHz.
    pub clock_khz: i32,
    /// Peak memory bandwidth, bytes per second (memory clock x bus width, double data rate).
    pub memory_bytes_per_s: f64,
    /// Device memory, bytes.
    pub memory_bytes: u64,
    /// Driver API version (e.g. 13000).
    pub driver_version: i32,
    /// cuBLAS version (e.g. 130100).
    pub cublas_version: i32,
    pub(crate) ctx: sys::CUcontext,
    /// Stream of the host-resident routes (the device API uses the caller's).
    pub(crate) stream: sys::CUstream,
    /// Second stream, for transfers overlapping compute.
    pub(crate) copy_stream: sys::CUstream,
    pub(crate) blas: cublas::cublasHandle_t,
    /// cuBLASLt: handle, workspace and per-shape algorithms of the int8 products.
    pub(crate) lt: crate::lt_int8::Lt,
    /// The emulation kernels, or why they are unavailable.
    pub(crate) kernels: Result<Kernels, GpuError>,
    pub(crate) workspace: Workspace,
    pub(crate) staging: Vec<PinnedBuffer>,
    pub(crate) small: PinnedBuffer,
    /// Passed by the stream once the last upload from `small` (the emulation's shift table)
    /// is done: the host waits for it before writing `small` again, since a host-resident
    /// pipeline returns from a call before its stream finished (`ozaki::enqueue`).
    pub(crate) small_busy: Option<crate::timing::Fence>,
    /// The last call that returned with its work still running on its stream
    /// ([`Gpu::leave_in_flight`]); [`gpu()`] waits for it, [`gpu_on`] orders its stream
    /// after it (`in_flight` module).
    pub(crate) in_flight: Option<crate::in_flight::InFlight>,
}

// SAFETY: the raw handles are only used while the Mutex around the Gpu is held, and each
// use first makes the context current on the calling thread.
unsafe impl Send for Gpu {}

/// A GPU slot: initialised, or why it could not be.
type Cell = Result<Mutex<Gpu>, GpuError>;

static GPU: OnceLock<Cell> = OnceLock::new();

/// Ordinal of the process's default GPU, known without locking it ([`gpu_slot`] must not
/// wait for the default GPU's lock just to learn which device it is: a split's tile on
/// device 1 would then wait for the whole tile on device 0, serialising the split).
static DEFAULT_ORDINAL: OnceLock<u32> = OnceLock::new();

/// The default GPU's context, known without locking it, for [`bind_default_context`].
static DEFAULT_CONTEXT: OnceLock<ContextHandle> = OnceLock::new();

/// A context handle that may be read from any thread: the default GPU's primary context,
/// retained for the life of the process and only ever passed to `cuCtxSetCurrent`, which
/// the driver allows from any thread.
struct ContextHandle(sys::CUcontext);

// SAFETY: see the type's contract: the handle is never freed, and binding it is thread-safe.
unsafe impl Send for ContextHandle {}
// SAFETY: as above; shared reads of a pointer that never changes.
unsafe impl Sync for ContextHandle {}

/// Whether the process's default GPU has been initialised and works: `false` before its
/// first use and after a failed initialisation. Touches no driver (a process without one
/// must not load it just to ask).
pub(crate) fn default_ready() -> bool {
    matches!(GPU.get(), Some(Ok(_)))
}

fn default_cell() -> &'static Cell {
    GPU.get_or_init(|| {
        let g = contain("GPU initialisation", Gpu::init);
        if let Ok(g) = &g {
            let _ = DEFAULT_ORDINAL.set(g.ordinal);
            let _ = DEFAULT_CONTEXT.set(ContextHandle(g.ctx));
        }
        g.map(Mutex::new)
    })
}

/// The process's GPU, initialised on first use; `Err` (forever, for this process) when there
/// is none or it could not be initialised. Idle: work a call left running
/// ([`Gpu::leave_in_flight`]) has passed. Never panics.
pub fn gpu() -> Result<MutexGuard<'static, Gpu>, GpuError> {
    idle(lock(default_cell())?)
}

/// The process's GPU for work enqueued on the caller's `stream` (a live stream, not being
/// captured, of the context `caller` that was current on the caller's thread before, from
/// [`current_context`]): as [`gpu()`], but instead of waiting on the host for work a call
/// left running, `stream` is ordered after it on the device, so the GPU's buffers are free
/// for what is enqueued on `stream` next. `None` when the caller works in another device's
/// context ([`Gpu::serves`]); its stream is left alone then.
pub fn gpu_on(
    caller: sys::CUcontext,
    stream: Stream,
) -> Result<Option<MutexGuard<'static, Gpu>>, GpuError> {
    let g = lock(default_cell())?;
    if !g.serves(caller, stream)? {
        return Ok(None);
    }
    if let Some(w) = &g.in_flight {
        w.order(stream)?;
    }
    Ok(Some(g))
}

/// `g` once work a call left running has passed.
fn idle(mut g: MutexGuard<'static, Gpu>) -> Result<MutexGuard<'static, Gpu>, GpuError> {
    if let Some(w) = &g.in_flight {
        w.wait()?;
        g.in_flight = None;
    }
    Ok(g)
}

/// The process's GPU as [`gpu()`] gives it, and the nanoseconds this call waited for it:
/// for the lock while another caller's call held it, and for work an earlier call left
/// running. That is the caller's place in the process's GPU queue, not its own work, which
/// the engine prices apart (a call's measured time less this wait is what its route's
/// prediction is corrected with).
pub fn gpu_queued() -> Result<(MutexGuard<'static, Gpu>, u64), GpuError> {
    let (g, contended) = lock_timed(default_cell())?;
    let waited_from = contended.or_else(|| g.in_flight.is_some().then(Instant::now));
    let g = idle(g)?;
    Ok((g, waited_from.map_or(0, |t| t.elapsed().as_nanos() as u64)))
}

/// Locks an initialised GPU and makes its context current on this thread.
fn lock(cell: &'static Cell) -> Result<MutexGuard<'static, Gpu>, GpuError> {
    lock_timed(cell).map(|(g, _)| g)
}

/// [`lock`], with the instant it began waiting when another caller held the lock (`None`
/// when it was free: an uncontended call reads no clock).
fn lock_timed(
    cell: &'static Cell,
) -> Result<(MutexGuard<'static, Gpu>, Option<Instant>), GpuError> {
    let m = cell.as_ref().map_err(Clone::clone)?;
    let (g, contended) = match m.try_lock() {
        Ok(g) => (g, None),
        Err(TryLockError::Poisoned(p)) => (p.into_inner(), None),
        Err(TryLockError::WouldBlock) => {
            let t = Instant::now();
            let holder = holder::noted().then(holder::current);
            let g = m.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(holder) = holder {
                tracing::debug!(
                    waited_ms = t.elapsed().as_secs_f64() * 1e3,
                    holder = %holder,
                    "GPU lock: waited for another thread's GPU work"
                );
            }
            (g, Some(t))
        }
    };
    if holder::noted() {
        holder::took();
    }
    g.make_current()?;
    Ok((g, contended))
}

/// Which thread last took the GPU's lock, so that a call that had to wait for it can say for
/// whom (`OZAKI_LOG=gpu_kernels=debug`): the process's threads all share one GPU.
mod holder {
    use std::sync::Mutex;

    static LAST: Mutex<String> = Mutex::new(String::new());

    /// Whether holders are noted: only while the debug line that names them is enabled.
    pub(super) fn noted() -> bool {
        tracing::enabled!(tracing::Level::DEBUG)
    }

    /// Notes the calling thread as the lock's holder: its name, else its id.
    pub(super) fn took() {
        let t = std::thread::current();
        let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
        last.clear();
        match t.name() {
            Some(name) => last.push_str(name),
            None => last.push_str(&format!("{:?}", t.id())),
        }
    }

    /// The last holder noted.
    pub(super) fn current() -> String {
        LAST.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The `Gpu` of one slot of a split plan: device `ordinal`, `replica`-th slot on
/// that device (`OZAKI_DEVICES=0,0` has replicas 0 and 1 of device 0). Each slot is its own
/// `Gpu`, so it has its own streams, workspace and staging buffers and slots run
/// concurrently. Replica 0 of the default device is the process-wide [`gpu()`] (no second
/// workspace for the common case). Initialised on first use, kept for the process; a failed
/// initialisation is remembered like [`gpu()`]'s. Never panics.
pub fn gpu_slot(ordinal: u32, replica: u32) -> Result<MutexGuard<'static, Gpu>, GpuError> {
    static SLOTS: Mutex<Vec<((u32, u32), &'static Cell)>> = Mutex::new(Vec::new());
    let default = default_cell();
    let is_default = replica == 0 && DEFAULT_ORDINAL.get() == Some(&ordinal);
    let cell: &'static Cell = if is_default {
        default
    } else {
        let mut slots = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
        match slots.iter().find(|(key, _)| *key == (ordinal, replica)) {
            Some((_, cell)) => cell,
            None => {
                let cell: &'static Cell = Box::leak(Box::new(
                    contain("GPU initialisation", || Gpu::init_on(Some(ordinal))).map(Mutex::new),
                ));
                slots.push(((ordinal, replica), cell));
                cell
            }
        }
    };
    idle(lock(cell)?)
}

/// Number of CUDA devices the driver shows (initialises the default GPU first, so a
/// missing library or driver is the same `Err` as [`gpu()`]'s).
pub fn device_count() -> Result<u32, GpuError> {
    available()?;
    let mut count = 0;
    // SAFETY: out-parameter; cuInit ran in the default GPU's initialisation.
    unsafe { sys::cuDeviceGetCount(&mut count) }
        .result()
        .ctx("cuDeviceGetCount")?;
    Ok(count.max(0) as u32)
}

/// Whether a GPU route can run in this process (initialises on first call).
pub fn available() -> Result<(), GpuError> {
    gpu().map(|_| ())
}

fn attribute(dev: sys::CUdevice, a: sys::CUdevice_attribute) -> Result<i32, GpuError> {
    let mut v = 0;
    // SAFETY: out-parameter, valid device.
    unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) }
        .result()
        .ctx("cuDeviceGetAttribute")?;
    Ok(v)
}

impl Gpu {
    /// Waits until no upload from `small` is pending ([`Gpu::small_busy`]), before the host
    /// writes or replaces it.
    pub(crate) fn small_idle(&mut self) -> Result<(), GpuError> {
        match self.small_busy.take() {
            Some(f) => f.wait(),
            None => Ok(()),
        }
    }

    /// Lets the call whose work was just enqueued on `stream` return without waiting for
    /// it: the GPU's buffers stay reserved for that work until it has passed (`in_flight`
    /// module). The work enqueued on `stream` before comes after any earlier call's (the
    /// stream was taken with [`gpu_on`]), so this one mark covers both.
    pub fn leave_in_flight(&mut self, stream: Stream) -> Result<(), GpuError> {
        self.in_flight = Some(crate::in_flight::InFlight::record(stream)?);
        Ok(())
    }

    fn init() -> Result<Gpu, GpuError> {
        Gpu::init_on(None)
    }

    /// Initialises device `pin` (a slot of a split, [`gpu_slot`]), or the default device
    /// when `None`.
    fn init_on(pin: Option<u32>) -> Result<Gpu, GpuError> {
        let libs = Libraries::detect();
        if let Some(missing) = libs.native_missing() {
            return Err(GpuError::Unavailable(missing.into()));
        }
        let explicit: Option<u32> = match (pin, ozaki_core::env::var(ozaki_core::env::GPU)) {
            (Some(o), _) => Some(o),
            (None, Some(v)) => Some(v.trim().parse().map_err(|_| {
                GpuError::Unavailable(format!("OZAKI_GPU={v:?} is not a device number"))
            })?),
            (None, None) => None,
        };
        // Each step runs inside the start gate, which a process exit closes and waits on
        // (`start_gate`: the shim may run this on a background thread).
        use crate::start_gate::step;
        let found = step("cuInit", || find_device(explicit))?;
        let (dev, cc, driver_version) = (found.dev, found.cc, found.driver_version);
        let (ctx, stream, copy_stream) = step("context", || {
            blocking_sync_if_new(dev);
            let mut ctx = std::ptr::null_mut();
            // SAFETY: retains the device's primary context (the one the CUDA runtime uses
            // too, so device pointers from a runtime-API program are valid here).
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev) }
                .result()
                .ctx("cuDevicePrimaryCtxRetain")?;
            // SAFETY: ctx was just retained.
            unsafe { sys::cuCtxSetCurrent(ctx) }
                .result()
                .ctx("cuCtxSetCurrent")?;
            Ok((ctx, new_stream()?, new_stream()?))
        })?;
        let (blas, cublas_version, lt_workspace) = step("cuBLAS", || {
            let mut blas = std::ptr::null_mut();
            // SAFETY: out-parameter; a context is current.
            unsafe { cublas::cublasCreate_v2(&mut blas) }
                .result()
                .ctx("cublasCreate")?;
            let mut cublas_version = 0;
            // SAFETY: live handle, out-parameter.
            unsafe { cublas::cublasGetVersion_v2(blas, &mut cublas_version) }
                .result()
                .ctx("cublasGetVersion")?;
            Ok((
                blas,
                cublas_version,
                crate::memory::DeviceBuffer::new(crate::lt_int8::LT_WORKSPACE)?,
            ))
        })?;
        let lt = if libs.cublaslt {
            step("cuBLASLt", || {
                contain("cuBLASLt", || {
                    cudarc::cublaslt::result::create_handle().ctx("cublasLtCreate")
                })
            })
            .unwrap_or(std::ptr::null_mut())
        } else {
            std::ptr::null_mut()
        };
        let kernels = match libs.ozaki_missing() {
            Some(missing) => Err(GpuError::Unavailable(missing.into())),
            None if lt.is_null() => Err(GpuError::Unavailable(
                "cuBLASLt handle could not be created".into(),
            )),
            None => step("kernels", || {
                contain("kernel compilation", || Kernels::load(cc, driver_version))
            }),
        };
        // A start cut short by the process exit is not worth a warning.
        if crate::start_gate::closed() {
            return Err(GpuError::Unavailable(crate::start_gate::EXITING.into()));
        }
        if let Err(e) = &kernels {
            tracing::warn!(error = %e, "gpu-ozaki unavailable; gpu-native still works");
        }
        Ok(Gpu {
            ordinal: found.ordinal,
            name: found.name,
            cc,
            sms: found.sms,
            clock_khz: found.clock_khz,
            memory_bytes_per_s: found.memory_bytes_per_s,
            memory_bytes: found.memory_bytes,
            driver_version,
            cublas_version,
            ctx,
            stream,
            copy_stream,
            blas,
            lt: crate::lt_int8::Lt::new(lt, lt_workspace),
            kernels,
            workspace: Workspace::default(),
            staging: Vec::new(),
            small: step("pinned table", || PinnedBuffer::new(1 << 20))?,
            small_busy: None,
            in_flight: None,
        })
    }

    /// Binds this GPU's context to the calling thread (contexts are per thread).
    pub(crate) fn make_current(&self) -> Result<(), GpuError> {
        // SAFETY: ctx is retained for the life of the process.
        unsafe { sys::cuCtxSetCurrent(self.ctx) }
            .result()
            .ctx("cuCtxSetCurrent")
    }

    /// Whether a caller whose thread had `caller` current (from [`current_context`], taken
    /// before [`gpu()`] made this GPU's context current) works in this GPU's context on
    /// `stream`: a program's own stream, such as a cuBLAS handle's, may belong to another
    /// device. The NULL, legacy and per-thread stream handles mean the caller's context.
    pub fn serves(&self, caller: sys::CUcontext, stream: Stream) -> Result<bool, GpuError> {
        if caller != self.ctx {
            return Ok(false);
        }
        // 0: NULL stream, 1: CU_STREAM_LEGACY, 2: CU_STREAM_PER_THREAD.
        if (stream as usize) <= 2 {
            return Ok(true);
        }
        let mut ctx = std::ptr::null_mut();
        // SAFETY: `stream` is a live stream handle of the caller (its cuBLAS handle's).
        unsafe { sys::cuStreamGetCtx(stream, &mut ctx) }
            .result()
            .ctx("cuStreamGetCtx")?;
        Ok(ctx == self.ctx)
    }

    /// The kernels, or why gpu-ozaki cannot run.
    pub(crate) fn kernels(&self) -> Result<&Kernels, GpuError> {
        self.kernels.as_ref().map_err(Clone::clone)
    }

    /// Whether the emulated route can run on this GPU (kernels compiled, cuBLASLt present).
    pub fn ozaki_ready(&self) -> Result<(), GpuError> {
        self.kernels().map(|_| ())
    }

    /// Pinned staging buffer `i` of at least `bytes` (grow-only, kept across calls).
    pub(crate) fn staging(&mut self, i: usize, bytes: usize) -> Result<*mut u8, GpuError> {
        while self.staging.len() <= i {
            self.staging.push(PinnedBuffer::new(64)?);
        }
        if self.staging[i].len() < bytes {
            self.staging[i] = PinnedBuffer::new(bytes)?;
        }
        Ok(self.staging[i].as_mut_ptr())
    }

    /// Puts `buf` in place of pinned staging buffer `i` and returns the buffer it held, or
    /// gives `buf` back when there is no buffer `i` yet: a call takes its result with it this
    /// way (`host::handoff`).
    pub(crate) fn swap_staging(
        &mut self,
        i: usize,
        buf: PinnedBuffer,
    ) -> Result<PinnedBuffer, PinnedBuffer> {
        match self.staging.get_mut(i) {
            Some(s) => Ok(std::mem::replace(s, buf)),
            None => Err(buf),
        }
    }

    /// What the engine reads of the device to price it ([`GpuTraits`]: a profile measured on
    /// another GPU of this architecture is scaled by these).
    pub fn traits(&self) -> GpuTraits {
        GpuTraits {
            name: self.name.clone(),
            cc: self.cc,
            sms: self.sms.max(0) as u32,
            clock_khz: self.clock_khz.max(0) as u32,
            memory_bytes_per_s: self.memory_bytes_per_s,
            memory_bytes: self.memory_bytes,
        }
    }

    /// One line describing the device, for logs and the bench header.
    pub fn describe(&self) -> String {
        format!(
            "GPU {}: {} (sm_{}{}, {} SMs), driver {}.{}, cuBLAS {}",
            self.ordinal,
            self.name,
            self.cc.0,
            self.cc.1,
            self.sms,
            self.driver_version / 1000,
            self.driver_version % 1000 / 10,
            self.cublas_version
        )
    }

    /// The stream the host-resident routes use.
    pub fn stream(&self) -> sys::CUstream {
        self.stream
    }
}

/// The device [`Gpu::init_on`] takes, with what the driver says about it.
struct Found {
    ordinal: u32,
    dev: sys::CUdevice,
    name: String,
    cc: (i32, i32),
    sms: i32,
    clock_khz: i32,
    memory_bytes_per_s: f64,
    memory_bytes: u64,
    driver_version: i32,
}

/// Initialises the driver and finds the device: `explicit` (a slot's, or `OZAKI_GPU`), else
/// the first of this process's local-rank block.
/// Whether a primary context this process creates blocks a waiting thread
/// (`OZAKI_GPU_SYNC`, default `blocking`; `spin` keeps CUDA's automatic choice).
fn blocking_sync_wanted() -> bool {
    match ozaki_core::env::var(ozaki_core::env::GPU_SYNC)
        .as_deref()
        .map(str::trim)
    {
        None | Some("") | Some("blocking") => true,
        Some("spin") => false,
        Some(other) => {
            tracing::warn!("OZAKI_GPU_SYNC={other:?} is neither blocking nor spin; using blocking");
            true
        }
    }
}

/// Makes the primary context of `dev`, when no one has created it yet, one whose waiting
/// threads sleep (`CU_CTX_SCHED_BLOCKING_SYNC`). With CUDA's automatic choice a thread
/// waiting in `cuEventSynchronize` / `cuStreamSynchronize` spins on its core while the
/// process has fewer contexts than cores: under a program whose every core runs BLAS calls
/// (PySCF's 16 OpenMP threads), each caller waiting for a GPU call takes a core from the
/// others. The shim's GPU calls last milliseconds, so the wake-up latency of a blocking wait
/// (tens of microseconds) costs them little. A context the program made itself (PyTorch,
/// CuPy) keeps the program's flags. Failures leave the flags as they are.
fn blocking_sync_if_new(dev: sys::CUdevice) {
    if !blocking_sync_wanted() {
        return;
    }
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: out-parameters; `dev` is a device handle from cuDeviceGet.
    let state = unsafe { sys::cuDevicePrimaryCtxGetState(dev, &mut flags, &mut active) };
    if state.result().is_err() || active != 0 {
        return;
    }
    // The low three bits are the scheduling mode (CU_CTX_SCHED_MASK); the rest are kept.
    let sched = sys::CUctx_flags_enum::CU_CTX_SCHED_BLOCKING_SYNC as u32;
    // SAFETY: plain call on a device handle; the context is not active yet.
    let set = unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(dev, (flags & !0x07) | sched) };
    if let Err(e) = set.result() {
        tracing::info!("cuDevicePrimaryCtxSetFlags: {e:?}; the context keeps CUDA's default");
    }
}

/// The driver's `cuInit`, looked up ahead of the call, so that a thread can initialise the
/// driver while another loads the other CUDA libraries: glibc's symbol look-up waits for a
/// library being loaded on another thread (its initialisers run under the loader's lock),
/// and cudarc's wrapper looks `cuInit` up at its first call.
pub struct DriverInit(unsafe extern "C" fn(std::ffi::c_uint) -> sys::CUresult);

impl DriverInit {
    /// Loads the driver library (cudarc's loader, which keeps it) and looks `cuInit` up.
    pub fn resolve() -> Result<DriverInit, GpuError> {
        crate::probe::contain("cuInit's look-up", || {
            // SAFETY: the signature is cuInit's in the CUDA driver API (cudarc's binding of
            // it has the same); the library stays loaded for the process, so the pointer
            // outlives its use.
            let f = unsafe {
                sys::culib()
                    .get::<unsafe extern "C" fn(std::ffi::c_uint) -> sys::CUresult>(b"cuInit\0")
            }
            .map_err(|e| GpuError::Unavailable(format!("cuInit: {e}")))?;
            Ok(DriverInit(*f))
        })
    }

    /// Initialises the driver (`cuInit(0)`); the GPU's own initialisation calls cuInit again,
    /// which then returns at once.
    pub fn run(self) -> Result<(), GpuError> {
        // SAFETY: cuInit may be called any number of times, from any thread.
        cuinit_result(unsafe { (self.0)(0) })
    }
}

/// What `cuInit` returned, as the GPU's initialisation reports it.
fn cuinit_result(r: sys::CUresult) -> Result<(), GpuError> {
    r.result()
        .map_err(|e| GpuError::Unavailable(format!("cuInit: {e:?}")))
}

fn find_device(explicit: Option<u32>) -> Result<Found, GpuError> {
    // SAFETY: cuInit may be called any number of times.
    cuinit_result(unsafe { sys::cuInit(0) })?;
    let mut count = 0;
    // SAFETY: out-parameter.
    unsafe { sys::cuDeviceGetCount(&mut count) }
        .result()
        .ctx("cuDeviceGetCount")?;
    // Without OZAKI_GPU, an MPI rank takes the first GPU of its local-rank block
    // of the host's pool (OZAKI_DEVICES, else all devices). Only that first slot is used
    // until the route executes multi-slot split plans.
    let ordinal = match explicit {
        Some(o) => o,
        None => {
            use ozaki_core::devices::{DEVICES_VAR, DeviceAssignment, LauncherEnv};
            let pool = ozaki_core::env::var(DEVICES_VAR);
            DeviceAssignment::resolve(
                pool.as_deref(),
                count.max(0) as u32,
                &LauncherEnv::from_process_env(),
            )
            .map_err(|e| GpuError::Unavailable(e.to_string()))?
            .slots[0]
        }
    };
    if count <= ordinal as i32 {
        return Err(GpuError::Unavailable(format!(
            "no CUDA device {ordinal} ({count} found)"
        )));
    }
    let mut dev = 0;
    // SAFETY: out-parameter; ordinal < count.
    unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) }
        .result()
        .ctx("cuDeviceGet")?;
    let mut name_buf = [0 as std::ffi::c_char; 128];
    // SAFETY: buffer of the stated length.
    unsafe { sys::cuDeviceGetName(name_buf.as_mut_ptr(), 128, dev) }
        .result()
        .ctx("cuDeviceGetName")?;
    let name = name_buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8 as char)
        .collect();
    use sys::CUdevice_attribute::*;
    let cc = (
        attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    let sms = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let clock_khz = attribute(dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?;
    // kHz x bits x 2 transfers per clock / 8 bits per byte
    let memory_bytes_per_s = attribute(dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)? as f64
        * 1e3
        * attribute(dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)? as f64
        / 4.0;
    let mut memory_bytes = 0usize;
    // SAFETY: out-parameter; `dev` is a valid device.
    unsafe { sys::cuDeviceTotalMem_v2(&mut memory_bytes, dev) }
        .result()
        .ctx("cuDeviceTotalMem")?;
    let mut driver_version = 0;
    // SAFETY: out-parameter.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .ctx("cuDriverGetVersion")?;
    Ok(Found {
        ordinal,
        dev,
        name,
        cc,
        sms,
        clock_khz,
        memory_bytes_per_s,
        memory_bytes: memory_bytes as u64,
        driver_version,
    })
}

fn new_stream() -> Result<sys::CUstream, GpuError> {
    let mut s = std::ptr::null_mut();
    // SAFETY: out-parameter; a context is current.
    unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) }
        .result()
        .ctx("cuStreamCreate")?;
    Ok(s)
}

/// The context current on the calling thread (NULL when none): the one a program's own
/// CUDA calls on this thread use. A missing driver is an `Err`, never a panic.
pub fn current_context() -> Result<sys::CUcontext, GpuError> {
    contain("cuCtxGetCurrent", || {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: writes one context handle; needs no initialised driver state beyond the
        // library (an uninitialised driver reports an error).
        unsafe { sys::cuCtxGetCurrent(&mut ctx) }
            .result()
            .ctx("cuCtxGetCurrent")?;
        Ok(ctx)
    })
}

/// Makes the default GPU's context current on this thread, without waiting for the GPU's
/// lock; `false` when the default GPU is not up or the driver refused. A thread's first
/// host-resident call binds it inside the lock anyway (and leaves it bound); binding it
/// before lets the call allocate pinned memory of its own outside the lock, for its host
/// copies (`host::handoff`), instead of making them inside it on its first call.
pub(crate) fn bind_default_context() -> bool {
    let Some(ContextHandle(ctx)) = DEFAULT_CONTEXT.get() else {
        return false;
    };
    contain("cuCtxSetCurrent", || {
        // SAFETY: the default GPU's primary context, retained for the life of the process.
        unsafe { sys::cuCtxSetCurrent(*ctx) }
            .result()
            .ctx("cuCtxSetCurrent")
    })
    .is_ok()
}

/// Makes `ctx` current on this thread again, as [`current_context`] found it (a NULL `ctx`
/// leaves none current).
pub fn restore_context(ctx: sys::CUcontext) -> Result<(), GpuError> {
    contain("cuCtxSetCurrent", || {
        // SAFETY: `ctx` was current on this thread and its owner still holds it (the caller is
        // inside a call on it); NULL unbinds.
        unsafe { sys::cuCtxSetCurrent(ctx) }
            .result()
            .ctx("cuCtxSetCurrent")
    })
}
