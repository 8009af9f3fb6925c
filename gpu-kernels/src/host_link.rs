//! Host-memory and host-link microbenchmarks (`ozaki bench --host-link`).
//!
//! Host-resident calls are bound by moving A, B and C between the caller's pageable memory
//! and the GPUs, not by the GPUs (BENCHMARKS.md). Which way of moving them is fastest
//! depends on the host: parallel `memcpy` into pinned staging, the driver's own staging of
//! pageable copies, or page-locking the caller's arrays in place (`cuMemHostRegister`) and
//! letting the copy engines DMA from them. These measurements price each, plus the link
//! itself per GPU, both GPUs at once, and full duplex, so the design of `crate::host` and
//! `crate::multi` rests on numbers from the machine it runs on.
//!
//! Every rate is the median of three wall-clock repetitions of a synchronous operation on
//! `bytes` bytes (1 GiB by default), after one warm-up where noted.

use crate::device::{gpu_slot, sync};
use crate::error::{Context, GpuError};
use crate::host_copy::{self, CopyKind, Width};
use crate::memory::{DeviceBuffer, PinnedBuffer, Registered};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::time::Instant;

/// One measured quantity.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What was measured.
    pub what: String,
    /// The value, in `unit`.
    pub value: f64,
    /// `GB/s` (10^9 bytes per second) or `ms/GB`.
    pub unit: &'static str,
}

/// Raw pointer that may cross into scoped threads (each thread touches a disjoint range).
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: only used for disjoint byte ranges of live buffers inside thread scopes.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

/// Copies `bytes` from `src` to `dst` on `threads` threads with `memcpy`.
///
/// # Safety
/// Both ranges must be live, `bytes` long, and not overlap.
unsafe fn copy_threads(dst: *mut u8, src: *const u8, bytes: usize, threads: usize) {
    // SAFETY: the caller's contract.
    unsafe { host_copy::par_copy(dst, src, bytes, threads, CopyKind::Memcpy) }
}

/// Copies `bytes` as columns of `col` bytes (the column-by-column write-back of C) on
/// `threads` threads, each a contiguous run of columns, with `kind`.
///
/// # Safety
/// As [`copy_threads`].
unsafe fn copy_columns(
    dst: *mut u8,
    src: *const u8,
    bytes: usize,
    col: usize,
    threads: usize,
    kind: CopyKind,
) {
    let cols = bytes / col;
    let per = cols.div_ceil(threads.max(1)).max(1);
    let (d, s) = (SendPtr(dst), SendPtr(src as *mut u8));
    std::thread::scope(|sc| {
        for j0 in (0..cols).step_by(per) {
            sc.spawn(move || {
                let (d, s) = (d, s);
                for j in j0..(j0 + per).min(cols) {
                    // SAFETY: column j lies inside both ranges.
                    unsafe { host_copy::copy(d.0.add(j * col), s.0.add(j * col), col, kind) }
                }
            });
        }
    });
}

/// Writes `bytes` of `value` at `dst` on `threads` threads.
///
/// # Safety
/// The range must be live and `bytes` long.
unsafe fn fill_threads(dst: *mut u8, value: u8, bytes: usize, threads: usize) {
    let per = bytes.div_ceil(threads.max(1)).max(1);
    let d = SendPtr(dst);
    std::thread::scope(|sc| {
        for i in 0..threads.max(1) {
            let lo = (i * per).min(bytes);
            let hi = ((i + 1) * per).min(bytes);
            sc.spawn(move || {
                let d = d;
                // SAFETY: [lo, hi) lies inside the live buffer.
                unsafe { std::ptr::write_bytes(d.0.add(lo), value, hi - lo) }
            });
        }
    });
}

/// Median of three timed runs of `f` in seconds (after one warm-up when `warm`).
fn median3(warm: bool, mut f: impl FnMut() -> Result<(), GpuError>) -> Result<f64, GpuError> {
    if warm {
        f()?;
    }
    let mut t = Vec::with_capacity(3);
    for _ in 0..3 {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(t[1])
}

fn rate(what: impl Into<String>, bytes: usize, secs: f64) -> Row {
    Row {
        what: what.into(),
        value: bytes as f64 / secs / 1e9,
        unit: "GB/s",
    }
}

fn cost(what: impl Into<String>, bytes: usize, secs: f64) -> Row {
    Row {
        what: what.into(),
        value: secs * 1e3 / (bytes as f64 / 1e9),
        unit: "ms/GB",
    }
}

/// A touched pageable buffer (the state of a caller's array).
fn pageable(bytes: usize, value: u8) -> Vec<u8> {
    let mut v = vec![0u8; bytes];
    // SAFETY: v holds `bytes` bytes.
    unsafe { fill_threads(v.as_mut_ptr(), value, bytes, 16) };
    v
}

fn h2d(dst: u64, src: *const u8, bytes: usize, stream: sys::CUstream) -> Result<(), GpuError> {
    // SAFETY: callers pass live ranges of `bytes` bytes on the current context.
    unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, bytes, stream) }
        .result()
        .ctx("cuMemcpyHtoDAsync")?;
    sync(stream)
}

fn d2h(dst: *mut u8, src: u64, bytes: usize, stream: sys::CUstream) -> Result<(), GpuError> {
    // SAFETY: as h2d.
    unsafe { sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, bytes, stream) }
        .result()
        .ctx("cuMemcpyDtoHAsync")?;
    sync(stream)
}

/// Host memory alone: parallel copies between pageable and pinned memory, and first-touch
/// page faults of fresh allocations.
fn host_memory(rows: &mut dyn FnMut(Row), bytes: usize) -> Result<(), GpuError> {
    let src = pageable(bytes, 1);
    let mut dst = pageable(bytes, 2);
    let mut pinned = {
        let _g = gpu_slot(0, 0)?; // a current context for cuMemHostAlloc
        PinnedBuffer::new(bytes)?
    };
    let pp = pinned.as_mut_ptr();
    for t in [1usize, 4, 8, 16, 32] {
        let s = median3(true, || {
            // SAFETY: the buffers hold `bytes` bytes and are distinct.
            unsafe { copy_threads(pp, src.as_ptr(), bytes, t) };
            Ok(())
        })?;
        rows(rate(
            format!("memcpy pageable -> pinned, {t} threads"),
            bytes,
            s,
        ));
        let s = median3(true, || {
            // SAFETY: the buffers hold `bytes` bytes and are distinct.
            unsafe { copy_threads(dst.as_mut_ptr(), pp, bytes, t) };
            Ok(())
        })?;
        rows(rate(
            format!("memcpy pinned -> pageable, {t} threads"),
            bytes,
            s,
        ));
    }
    for t in [16usize, 32] {
        for w in Width::all().into_iter().filter(|w| w.available()) {
            let s = median3(true, || {
                // SAFETY: the buffers hold `bytes` bytes and are distinct.
                unsafe { host_copy::par_stream(pp, src.as_ptr(), bytes, t, w) };
                Ok(())
            })?;
            rows(rate(
                format!(
                    "streaming ({}) copy pageable -> pinned, {t} threads",
                    w.name()
                ),
                bytes,
                s,
            ));
            let s = median3(true, || {
                // SAFETY: the buffers hold `bytes` bytes and are distinct.
                unsafe { host_copy::par_stream(dst.as_mut_ptr(), pp, bytes, t, w) };
                Ok(())
            })?;
            rows(rate(
                format!(
                    "streaming ({}) copy pinned -> pageable, {t} threads",
                    w.name()
                ),
                bytes,
                s,
            ));
        }
        for kind in [CopyKind::Memcpy, CopyKind::Stream] {
            for col in [64usize << 10, 256 << 10] {
                let s = median3(true, || {
                    // SAFETY: the buffers hold `bytes` bytes and are distinct.
                    unsafe { copy_columns(dst.as_mut_ptr(), pp, bytes, col, t, kind) };
                    Ok(())
                })?;
                rows(rate(
                    format!(
                        "{kind:?} pinned -> pageable in {} KiB columns (C's write-back), {t} threads",
                        col >> 10
                    ),
                    bytes,
                    s,
                ));
            }
        }
    }
    for t in [8usize, 16, 32] {
        let s = median3(true, || {
            // SAFETY: the buffers hold `bytes` bytes and are distinct.
            unsafe { copy_threads(dst.as_mut_ptr(), src.as_ptr(), bytes, t) };
            Ok(())
        })?;
        rows(rate(
            format!("memcpy pageable -> pageable, {t} threads"),
            bytes,
            s,
        ));
    }
    for t in [1usize, 8, 16, 32] {
        // fresh allocation (calloc: untouched zero pages) written once: faults + writes
        let mut t_fill = Vec::with_capacity(3);
        for _ in 0..3 {
            let mut fresh = vec![0u8; bytes];
            let t0 = Instant::now();
            // SAFETY: fresh holds `bytes` bytes.
            unsafe { fill_threads(fresh.as_mut_ptr(), 3, bytes, t) };
            t_fill.push(t0.elapsed().as_secs_f64());
            std::hint::black_box(&fresh);
        }
        t_fill.sort_by(f64::total_cmp);
        let s = t_fill[1];
        rows(rate(
            format!("first-touch write of a fresh allocation, {t} threads"),
            bytes,
            s,
        ));
        let s = median3(true, || {
            // SAFETY: the buffers hold `bytes` bytes and are distinct.
            unsafe { fill_threads(dst.as_mut_ptr(), 4, bytes, t) };
            Ok(())
        })?;
        rows(rate(
            format!("write of a touched buffer, {t} threads"),
            bytes,
            s,
        ));
    }
    drop(pinned);
    Ok(())
}

/// One GPU's link: pinned, pageable (driver-staged) and registered transfers, duplex, the
/// cost of registering, and the staged upload of `crate::host`.
fn one_gpu(rows: &mut dyn FnMut(Row), dev: u32, bytes: usize) -> Result<(), GpuError> {
    let mut src = pageable(bytes, 1);
    let mut dst = pageable(bytes, 2);
    let mut g = gpu_slot(dev, 0)?;
    let (stream, copy) = (g.stream, g.copy_stream);
    let d0 = DeviceBuffer::new(bytes)?;
    let d1 = DeviceBuffer::new(bytes)?;
    let mut p0 = PinnedBuffer::new(bytes)?;
    let mut p1 = PinnedBuffer::new(bytes)?;
    let (pp0, pp1) = (p0.as_mut_ptr(), p1.as_mut_ptr());
    let s = median3(true, || h2d(d0.ptr(), pp0, bytes, stream))?;
    rows(rate(format!("GPU {dev}: H2D from pinned"), bytes, s));
    let s = median3(true, || d2h(pp0, d0.ptr(), bytes, stream))?;
    rows(rate(format!("GPU {dev}: D2H to pinned"), bytes, s));
    let s = median3(true, || {
        // SAFETY: distinct live buffers of `bytes` bytes, two streams of this context.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(d0.ptr(), pp0 as *const c_void, bytes, stream)
                .result()
                .ctx("H2D")?;
            sys::cuMemcpyDtoHAsync_v2(pp1 as *mut c_void, d1.ptr(), bytes, copy)
                .result()
                .ctx("D2H")?;
        }
        sync(stream)?;
        sync(copy)
    })?;
    rows(rate(
        format!("GPU {dev}: duplex H2D + D2H at once, each way"),
        bytes,
        s,
    ));
    let s = median3(true, || {
        // SAFETY: live pageable source of `bytes` bytes.
        unsafe { sys::cuMemcpyHtoD_v2(d0.ptr(), src.as_ptr() as *const c_void, bytes) }
            .result()
            .ctx("cuMemcpyHtoD")
    })?;
    rows(rate(
        format!("GPU {dev}: H2D from pageable (driver-staged)"),
        bytes,
        s,
    ));
    let s = median3(true, || {
        // SAFETY: live pageable destination of `bytes` bytes.
        unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, d0.ptr(), bytes) }
            .result()
            .ctx("cuMemcpyDtoH")
    })?;
    rows(rate(
        format!("GPU {dev}: D2H to pageable (driver-staged)"),
        bytes,
        s,
    ));
    for (flags, name) in [
        (0u32, "plain"),
        (sys::CU_MEMHOSTREGISTER_PORTABLE, "portable"),
    ] {
        for part in [bytes / 8, bytes] {
            let (mut reg_s, mut unreg_s) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                let t0 = Instant::now();
                // SAFETY: src outlives the registration; nothing else registered it.
                let r = unsafe { Registered::new(src.as_mut_ptr(), part, flags) }?;
                reg_s.push(t0.elapsed().as_secs_f64());
                let t0 = Instant::now();
                drop(r);
                unreg_s.push(t0.elapsed().as_secs_f64());
            }
            reg_s.sort_by(f64::total_cmp);
            unreg_s.sort_by(f64::total_cmp);
            rows(cost(
                format!(
                    "GPU {dev}: cuMemHostRegister ({name}) of {} MiB touched pageable",
                    part >> 20
                ),
                part,
                reg_s[1],
            ));
            rows(cost(
                format!(
                    "GPU {dev}: cuMemHostUnregister ({name}) of {} MiB",
                    part >> 20
                ),
                part,
                unreg_s[1],
            ));
        }
    }
    {
        // SAFETY: src / dst outlive the registrations (dropped at the end of this block).
        let _rs = unsafe { Registered::new(src.as_mut_ptr(), bytes, 0) }?;
        // SAFETY: as above.
        let _rd = unsafe { Registered::new(dst.as_mut_ptr(), bytes, 0) }?;
        let s = median3(true, || h2d(d0.ptr(), src.as_ptr(), bytes, stream))?;
        rows(rate(
            format!("GPU {dev}: H2D from registered pageable"),
            bytes,
            s,
        ));
        let s = median3(true, || d2h(dst.as_mut_ptr(), d0.ptr(), bytes, stream))?;
        rows(rate(
            format!("GPU {dev}: D2H to registered pageable"),
            bytes,
            s,
        ));
    }
    {
        // unaligned start (a Vec<f64> from malloc is 16-byte, not page, aligned)
        let t0 = Instant::now();
        // SAFETY: as above; the range lies inside src.
        let r = unsafe { Registered::new(src.as_mut_ptr().add(16), bytes - 4096, 0) };
        let el = t0.elapsed().as_secs_f64();
        match r {
            Ok(r) => {
                drop(r);
                rows(cost(
                    format!("GPU {dev}: cuMemHostRegister of an unaligned range (works)"),
                    bytes,
                    el,
                ));
            }
            Err(e) => tracing::warn!(error = %e, "unaligned cuMemHostRegister refused"),
        }
    }
    {
        let src64: Vec<f64> = vec![1.5; bytes / 8];
        let s = median3(true, || crate::host::upload(&mut g, d0.ptr(), &src64))?;
        rows(rate(
            format!("GPU {dev}: staged upload of host::upload (memcpy + DMA, 2 x 64 MiB)"),
            bytes,
            s,
        ));
    }
    for kind in [CopyKind::Memcpy, CopyKind::Stream] {
        // a copy into pinned while the copy engine streams from another pinned buffer
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut dma_bytes = 0usize;
        let mut dma_s = 0.0;
        let mut cpy_s = 0.0;
        std::thread::scope(|sc| -> Result<(), GpuError> {
            let (dst1, src0) = (SendPtr(pp1), SendPtr(src.as_ptr() as *mut u8));
            let stop = &stop;
            let h = sc.spawn(move || {
                let (dst1, src0) = (dst1, src0);
                let t0 = Instant::now();
                for _ in 0..3 {
                    // SAFETY: p1 and src hold `bytes` bytes.
                    unsafe { host_copy::par_copy(dst1.0, src0.0, bytes, 16, kind) };
                }
                let el = t0.elapsed().as_secs_f64();
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                el
            });
            let t0 = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                h2d(d0.ptr(), pp0, bytes / 8, stream)?;
                dma_bytes += bytes / 8;
            }
            dma_s = t0.elapsed().as_secs_f64();
            cpy_s = h.join().unwrap_or(f64::NAN);
            Ok(())
        })?;
        rows(rate(
            format!("GPU {dev}: {kind:?} pageable -> pinned (16 threads) while H2D runs"),
            3 * bytes,
            cpy_s,
        ));
        rows(rate(
            format!("GPU {dev}: H2D while that {kind:?} copy runs"),
            dma_bytes,
            dma_s,
        ));
    }
    drop((p0, p1));
    Ok(())
}

/// Both GPUs at once: each from its own pinned buffer, then both from one portable buffer.
fn two_gpus(rows: &mut dyn FnMut(Row), devs: [u32; 2], bytes: usize) -> Result<(), GpuError> {
    let mut shared = {
        let _g = gpu_slot(devs[0], 0)?;
        let mut p = PinnedBuffer::portable(bytes)?;
        // SAFETY: p holds `bytes` bytes.
        unsafe { fill_threads(p.as_mut_ptr(), 5, bytes, 16) };
        p
    };
    let shared_ptr = SendPtr(shared.as_mut_ptr());
    for (mode, label) in [
        (0, "own pinned buffers"),
        (1, "one portable buffer"),
        (2, "own pinned buffers, D2H"),
    ] {
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<Result<f64, GpuError>> = std::thread::scope(|sc| {
            let hs: Vec<_> = devs
                .iter()
                .map(|&d| {
                    let barrier = &barrier;
                    sc.spawn(move || -> Result<f64, GpuError> {
                        let shared_ptr = shared_ptr;
                        let g = gpu_slot(d, 0)?;
                        let stream = g.stream;
                        let dev = DeviceBuffer::new(bytes)?;
                        let mut own = PinnedBuffer::new(bytes)?;
                        let host = if mode == 1 {
                            shared_ptr.0
                        } else {
                            own.as_mut_ptr()
                        };
                        let go = || {
                            if mode == 2 {
                                d2h(host, dev.ptr(), bytes, stream)
                            } else {
                                h2d(dev.ptr(), host, bytes, stream)
                            }
                        };
                        go()?;
                        let mut t = Vec::new();
                        for _ in 0..3 {
                            barrier.wait();
                            let t0 = Instant::now();
                            go()?;
                            t.push(t0.elapsed().as_secs_f64());
                        }
                        t.sort_by(f64::total_cmp);
                        Ok(t[1])
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(GpuError::Cuda("thread panicked".into())))
                })
                .collect()
        });
        for (d, r) in devs.iter().zip(results) {
            rows(rate(format!("GPU {d} of 2 at once ({label})"), bytes, r?));
        }
    }
    drop(shared);
    Ok(())
}

/// All measurements: host memory, each GPU of `devices`, and the first two together; each
/// row goes to `row` as soon as it is measured (a run cut short keeps what it measured).
pub fn measure(devices: &[u32], bytes: usize, row: &mut dyn FnMut(Row)) -> Result<(), GpuError> {
    let _flags = fp_flags::KeepFpFlags::new();
    host_memory(row, bytes)?;
    for &d in devices {
        one_gpu(row, d, bytes)?;
    }
    if let [a, b, ..] = *devices {
        two_gpus(row, [a, b], bytes)?;
    }
    Ok(())
}
