//! Device and pinned host buffers: RAII owners of raw CUDA allocations, plus the grow-only
//! workspace and staging pools reused across calls (workspace sized from the
//! memory really free, pinned staging reused).

use crate::error::{Context, GpuError};
use cudarc::driver::sys;
use std::ffi::c_void;

/// Bytes free and total on the current device, as the driver reports them now.
pub fn mem_info() -> Result<(usize, usize), GpuError> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: plain out-parameters; a context is current (callers hold the Gpu lock).
    unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) }
        .result()
        .ctx("cuMemGetInfo")?;
    Ok((free, total))
}

/// Memory left for other users of the device: we never take the last slice of it.
pub const DEVICE_RESERVE: usize = 512 << 20;

/// One device allocation, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DeviceBuffer {
    /// Allocates `bytes` (at least 1) after checking that the device has them free beyond
    /// [`DEVICE_RESERVE`], so a large request fails cleanly instead of starving others.
    pub fn new(bytes: usize) -> Result<DeviceBuffer, GpuError> {
        let bytes = bytes.max(256);
        let (free, _) = mem_info()?;
        if bytes + DEVICE_RESERVE > free {
            return Err(GpuError::OutOfMemory {
                needed: bytes,
                free,
            });
        }
        let mut ptr = 0;
        // SAFETY: out-parameter; size checked above.
        unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) }
            .result()
            .map_err(|_| GpuError::OutOfMemory {
                needed: bytes,
                free,
            })?;
        Ok(DeviceBuffer { ptr, bytes })
    }

    /// Device address.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Always false (a buffer has at least 256 bytes); for clippy's len-without-is_empty.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: ptr came from cuMemAlloc and is freed once; cuMemFree synchronises.
        let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Named grow-only device buffers: a slot is reallocated only when a call needs more than it
/// holds, so steady-state calls allocate nothing.
#[derive(Debug, Default)]
pub struct Workspace {
    slots: Vec<(&'static str, DeviceBuffer)>,
}

impl Workspace {
    /// A buffer of at least `bytes` under `name`.
    pub fn get(&mut self, name: &'static str, bytes: usize) -> Result<sys::CUdeviceptr, GpuError> {
        if let Some(pos) = self.slots.iter().position(|(n, _)| *n == name) {
            if self.slots[pos].1.len() >= bytes {
                return Ok(self.slots[pos].1.ptr());
            }
            // Work enqueued but not waited for may still use the old buffer (a host pipeline's
            // previous unit, `ozaki::enqueue`): let it finish before the buffer is freed.
            // SAFETY: the caller made this workspace's context current.
            unsafe { sys::cuCtxSynchronize() }
                .result()
                .ctx("cuCtxSynchronize")?;
            self.slots.swap_remove(pos); // free first, so the new one can reuse the memory
        }
        let buf = DeviceBuffer::new(bytes)?;
        let ptr = buf.ptr();
        self.slots.push((name, buf));
        Ok(ptr)
    }
}

thread_local! {
    /// Nanoseconds this thread spent allocating pinned memory ([`pinned_alloc_ns`]).
    static PINNED_ALLOC_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Nanoseconds the calling thread has spent in `cuMemHostAlloc` so far. A call takes the
/// difference across itself: pinned memory grown for it serves later calls, so that time is
/// a one-off, not its route's rate (`Phases::pinned_ns`). Page-locking is slow and the
/// driver serialises it: PySCF's 16 team threads growing 30 MB each at once took up to
/// 200 ms (H100 host, BENCHMARKS.md "The start narrowing and the vendor's spin, side by side").
pub fn pinned_alloc_ns() -> u64 {
    PINNED_ALLOC_NS.with(std::cell::Cell::get)
}

/// Page-locked host memory (cuMemHostAlloc), freed on drop; the only kind of host memory
/// the copy engines move at full link speed and asynchronously.
#[derive(Debug)]
pub struct PinnedBuffer {
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the buffer is plain memory owned by this value; access is serialised by &mut.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    /// Allocates `bytes` of pinned host memory, DMA-able by the current context's device.
    pub fn new(bytes: usize) -> Result<PinnedBuffer, GpuError> {
        PinnedBuffer::with_flags(bytes, 0)
    }

    /// Allocates `bytes` of pinned host memory that every context of the process can DMA
    /// from (`CU_MEMHOSTALLOC_PORTABLE`): one staged copy of a shared operand serves all
    /// GPUs of a split.
    pub fn portable(bytes: usize) -> Result<PinnedBuffer, GpuError> {
        PinnedBuffer::with_flags(bytes, sys::CU_MEMHOSTALLOC_PORTABLE)
    }

    fn with_flags(bytes: usize, flags: u32) -> Result<PinnedBuffer, GpuError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        let t = std::time::Instant::now();
        // SAFETY: out-parameter; flags are CU_MEMHOSTALLOC_* bits.
        let r = unsafe { sys::cuMemHostAlloc(&mut p, bytes.max(64), flags) };
        PINNED_ALLOC_NS.with(|ns| ns.set(ns.get() + t.elapsed().as_nanos() as u64));
        r.result().ctx("cuMemHostAlloc")?;
        Ok(PinnedBuffer {
            ptr: p as *mut u8,
            bytes: bytes.max(64),
        })
    }

    /// Host address.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    /// Host address, for reading.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Always false; for clippy.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: ptr came from cuMemHostAlloc and is freed once.
        let _ = unsafe { sys::cuMemFreeHost(self.ptr as *mut c_void) };
    }
}

/// Pageable host memory page-locked in place (`cuMemHostRegister`) for as long as this value
/// lives, so the copy engines DMA straight from or into it; unregistered on drop. Used by the
/// host-link measurements (`crate::host_link`) to price registering a caller's array
/// against staging it through [`PinnedBuffer`]s.
#[derive(Debug)]
pub struct Registered {
    ptr: *mut c_void,
}

impl Registered {
    /// Registers `bytes` at `ptr` with `CU_MEMHOSTREGISTER_*` `flags`.
    ///
    /// # Safety
    /// `ptr..ptr + bytes` must stay allocated until the value is dropped, and no page of it
    /// may already be registered.
    pub unsafe fn new(ptr: *mut u8, bytes: usize, flags: u32) -> Result<Registered, GpuError> {
        // SAFETY: the caller guarantees the range is live for our lifetime.
        unsafe { sys::cuMemHostRegister_v2(ptr as *mut c_void, bytes, flags) }
            .result()
            .ctx("cuMemHostRegister")?;
        Ok(Registered {
            ptr: ptr as *mut c_void,
        })
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: ptr was registered by new and is unregistered once.
        let _ = unsafe { sys::cuMemHostUnregister(self.ptr) };
    }
}
