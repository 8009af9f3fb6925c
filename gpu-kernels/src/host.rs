//! Host-resident calls (everything LD_PRELOAD sees): operands are staged through pinned
//! buffers reused across calls, moved to the device, computed by the native or emulated
//! route, and C is copied back into the caller's memory only after the device work
//! succeeded (issue #4). Any error leaves the caller's C untouched, so the shim can still run
//! the vendor BLAS on the original data.
//!
//! Host copies into and out of pinned memory run on several threads and overlap the DMA of
//! the previous chunk (two staging buffers alternate).

use crate::device::{Gpu, gpu, sync};
use crate::error::{Context, GpuError};
use crate::ozaki::{self, DeviceCall, Op, Options};
use crate::timing::{Marks, Phase};
use cudarc::driver::sys;
use ozaki_core::blas::{GemmArgs, SyrkArgs, Trans, Uplo};
use ozaki_core::trace::Phases;

/// Which device computation a host-resident call runs.
#[derive(Debug, Clone, Copy)]
pub enum Engine {
    /// cuBLAS DGEMM / DSYRK (`gpu-native`).
    Native,
    /// Ozaki scheme II on the INT8 tensor cores (`gpu-ozaki`).
    Ozaki(Options),
}

/// What a host-resident call did (trace fields `device`, `moduli`, `phases`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostOutcome {
    /// Device ordinal.
    pub device: u32,
    /// Moduli used, for the emulated route.
    pub moduli: Option<u32>,
    /// Measured phases; `transfer_ns` is host-to-device plus device-to-host time.
    pub phases: Phases,
}

const CHUNK: usize = 64 << 20;

/// Elements of a column-major rows x cols matrix with leading dimension ld that a BLAS
/// call may touch (the caller's slice may be longer).
fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        ld * (cols - 1) + rows
    }
}

fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
}

/// dst[..] = src[..] on several threads (large copies between pageable and pinned memory
/// are limited by one core's bandwidth otherwise).
fn par_copy(dst: &mut [u8], src: &[u8]) {
    let t = if src.len() < (4 << 20) { 1 } else { threads() };
    let per = src.len().div_ceil(t);
    std::thread::scope(|s| {
        for (d, c) in dst.chunks_mut(per).zip(src.chunks(per)) {
            s.spawn(move || d.copy_from_slice(c));
        }
    });
}

fn as_bytes(x: &[f64]) -> &[u8] {
    // SAFETY: f64 has no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(x.as_ptr() as *const u8, std::mem::size_of_val(x)) }
}

/// Copies `src` to device address `dst` through the two pinned staging buffers.
fn upload(gpu: &mut Gpu, dst: u64, src: &[f64]) -> Result<(), GpuError> {
    let bytes = as_bytes(src);
    let stream = gpu.copy_stream;
    let mut events: [Option<sys::CUevent>; 2] = [None, None];
    let result = (|| {
        for (i, chunk) in bytes.chunks(CHUNK).enumerate() {
            let slot = i % 2;
            if let Some(e) = events[slot] {
                // SAFETY: e was recorded after the copy that last read this staging buffer.
                unsafe { sys::cuEventSynchronize(e) }
                    .result()
                    .ctx("cuEventSynchronize")?;
            }
            let stage = gpu.staging(slot, CHUNK)?;
            // SAFETY: staging holds CHUNK bytes and no copy is reading it (waited above).
            par_copy(
                unsafe { std::slice::from_raw_parts_mut(stage, chunk.len()) },
                chunk,
            );
            // SAFETY: pinned source of chunk.len() bytes, device destination inside dst's span.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    dst + (i * CHUNK) as u64,
                    stage as *const _,
                    chunk.len(),
                    stream,
                )
            }
            .result()
            .ctx("cuMemcpyHtoDAsync")?;
            let e = match events[slot] {
                Some(e) => e,
                None => cudarc::driver::result::event::create(
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                )
                .ctx("cuEventCreate")?,
            };
            events[slot] = Some(e);
            // SAFETY: live event and stream.
            unsafe { sys::cuEventRecord(e, stream) }
                .result()
                .ctx("cuEventRecord")?;
        }
        sync(stream)
    })();
    for e in events.into_iter().flatten() {
        // SAFETY: each event destroyed once.
        let _ = unsafe { sys::cuEventDestroy_v2(e) };
    }
    result
}

/// Copies the device span of C back into staging, waits, and only then writes the call's
/// m x n result (or its `uplo` triangle) into the caller's C: nothing of C is touched unless
/// the whole download succeeded. `c` is exactly the call's span of C.
fn copy_out(
    gpu: &mut Gpu,
    src: u64,
    c: &mut [f64],
    m: usize,
    n: usize,
    ldc: usize,
    uplo: Option<Uplo>,
) -> Result<(), GpuError> {
    let elems = c.len();
    let stage = gpu.staging(2, elems * 8)?;
    // SAFETY: staging buffer 2 holds elems doubles; src spans elems doubles on the device.
    unsafe { sys::cuMemcpyDtoHAsync_v2(stage as *mut _, src, elems * 8, gpu.stream) }
        .result()
        .ctx("cuMemcpyDtoHAsync")?;
    sync(gpu.stream)?;
    // SAFETY: staging holds elems doubles just copied from the device, synchronised.
    let staged = unsafe { std::slice::from_raw_parts(stage as *const f64, elems) };
    write_back(c, staged, m, n, ldc, uplo);
    Ok(())
}

/// Writes the m x n result (or one triangle of it) from staging into the caller's C.
fn write_back(c: &mut [f64], staged: &[f64], m: usize, n: usize, ldc: usize, uplo: Option<Uplo>) {
    let t = if m * n < (1 << 19) { 1 } else { threads() };
    let cols_per = n.div_ceil(t).max(1);
    std::thread::scope(|s| {
        let mut rest = c;
        let mut j0 = 0;
        while j0 < n {
            let cols = cols_per.min(n - j0);
            let all = std::mem::take(&mut rest);
            let take = if j0 + cols == n {
                all.len()
            } else {
                (cols * ldc).min(all.len())
            };
            let (mine, tail) = all.split_at_mut(take);
            rest = tail;
            let base = j0;
            s.spawn(move || {
                for jj in 0..cols {
                    let j = base + jj;
                    let (lo, hi) = match uplo {
                        None => (0, m),
                        Some(Uplo::Upper) => (0, (j + 1).min(m)),
                        Some(Uplo::Lower) => (j.min(m), m),
                    };
                    let off = jj * ldc;
                    mine[off + lo..off + hi].copy_from_slice(&staged[j * ldc + lo..j * ldc + hi]);
                }
            });
            j0 += cols;
        }
    });
}

struct Staged {
    a: u64,
    b: u64,
    c: u64,
}

fn stage_operands(
    gpu: &mut Gpu,
    a: &[f64],
    b: Option<&[f64]>,
    c: &[f64],
    c_span: usize,
    read_c: bool,
) -> Result<Staged, GpuError> {
    let da = gpu.workspace.get("host_a", a.len() * 8)?;
    let db = match b {
        Some(b) => gpu.workspace.get("host_b", b.len() * 8)?,
        None => 0,
    };
    let dc = gpu.workspace.get("host_c", c_span * 8)?;
    upload(gpu, da, a)?;
    if let Some(b) = b {
        upload(gpu, db, b)?;
    }
    if read_c {
        upload(gpu, dc, &c[..c_span])?;
    }
    Ok(Staged {
        a: da,
        b: db,
        c: dc,
    })
}

/// C = alpha op(A) op(B) + beta C on the GPU for host-resident operands.
pub fn gemm(args: &GemmArgs, c: &mut [f64], engine: Engine) -> Result<HostOutcome, GpuError> {
    let _flags = crate::fpenv::KeepFpFlags::new();
    gemm_on(&mut *gpu()?, args, c, engine)
}

/// [`gemm`] on a given GPU (one slot of a split, `crate::multi`).
pub fn gemm_on(
    gpu: &mut Gpu,
    args: &GemmArgs,
    c: &mut [f64],
    engine: Engine,
) -> Result<HostOutcome, GpuError> {
    let (ra, ca) = if args.transa == Trans::No {
        (args.m, args.k)
    } else {
        (args.k, args.m)
    };
    let (rb, cb) = if args.transb == Trans::No {
        (args.k, args.n)
    } else {
        (args.n, args.k)
    };
    let a = &args.a[..span(ra, ca, args.lda)];
    let b = &args.b[..span(rb, cb, args.ldb)];
    let c_span = span(args.m, args.n, args.ldc);
    let t0 = std::time::Instant::now();
    let st = stage_operands(gpu, a, Some(b), c, c_span, args.beta != 0.0)?;
    let up_ns = t0.elapsed().as_nanos() as u64;
    let stream = gpu.stream;
    let mut out = HostOutcome {
        device: gpu.ordinal,
        ..Default::default()
    };
    match engine {
        Engine::Native => {
            let marks = {
                let mut mk = Marks::start(stream)?;
                crate::native::dgemm(
                    gpu,
                    stream,
                    args.transa,
                    args.transb,
                    (args.m, args.n, args.k),
                    args.alpha,
                    (st.a, args.lda),
                    (st.b, args.ldb),
                    args.beta,
                    (st.c, args.ldc),
                )?;
                mk.mark(Phase::Products)?;
                sync(stream)?;
                mk
            };
            out.phases = marks.phases()?;
        }
        Engine::Ozaki(opts) => {
            let call = DeviceCall {
                op: Op::Gemm {
                    transa: args.transa,
                    transb: args.transb,
                    b: st.b,
                    ldb: args.ldb,
                },
                m: args.m,
                n: args.n,
                k: args.k,
                alpha: args.alpha,
                a: st.a,
                lda: args.lda,
                beta: args.beta,
                c: st.c,
                ldc: args.ldc,
            };
            let o = ozaki::gemm(gpu, stream, &call, opts)?;
            out.moduli = Some(o.moduli);
            out.phases = o.phases;
        }
    }
    let t1 = std::time::Instant::now();
    copy_out(gpu, st.c, &mut c[..c_span], args.m, args.n, args.ldc, None)?;
    out.phases.transfer_ns += up_ns + t1.elapsed().as_nanos() as u64;
    Ok(out)
}

/// C = alpha op(A) op(A)^T + beta C (one triangle) on the GPU for host-resident operands.
pub fn syrk(args: &SyrkArgs, c: &mut [f64], engine: Engine) -> Result<HostOutcome, GpuError> {
    let _flags = crate::fpenv::KeepFpFlags::new();
    let mut g = gpu()?;
    let gpu = &mut *g;
    let (ra, ca) = if args.trans == Trans::No {
        (args.n, args.k)
    } else {
        (args.k, args.n)
    };
    let a = &args.a[..span(ra, ca, args.lda)];
    let c_span = span(args.n, args.n, args.ldc);
    let t0 = std::time::Instant::now();
    let st = stage_operands(gpu, a, None, c, c_span, args.beta != 0.0)?;
    let up_ns = t0.elapsed().as_nanos() as u64;
    let stream = gpu.stream;
    let mut out = HostOutcome {
        device: gpu.ordinal,
        ..Default::default()
    };
    match engine {
        Engine::Native => {
            let mut mk = Marks::start(stream)?;
            crate::native::dsyrk(
                gpu,
                stream,
                args.uplo,
                args.trans,
                (args.n, args.k),
                args.alpha,
                (st.a, args.lda),
                args.beta,
                (st.c, args.ldc),
            )?;
            mk.mark(Phase::Products)?;
            sync(stream)?;
            out.phases = mk.phases()?;
        }
        Engine::Ozaki(opts) => {
            let call = DeviceCall {
                op: Op::Syrk {
                    uplo: args.uplo,
                    trans: args.trans,
                },
                m: args.n,
                n: args.n,
                k: args.k,
                alpha: args.alpha,
                a: st.a,
                lda: args.lda,
                beta: args.beta,
                c: st.c,
                ldc: args.ldc,
            };
            let o = ozaki::gemm(gpu, stream, &call, opts)?;
            out.moduli = Some(o.moduli);
            out.phases = o.phases;
        }
    }
    let t1 = std::time::Instant::now();
    copy_out(
        gpu,
        st.c,
        &mut c[..c_span],
        args.n,
        args.n,
        args.ldc,
        Some(args.uplo),
    )?;
    out.phases.transfer_ns += up_ns + t1.elapsed().as_nanos() as u64;
    Ok(out)
}
