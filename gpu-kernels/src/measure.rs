//! Measurements for `ozaki bench` and the engine's calibration: the rates the emulated route
//! depends on (int8 GEMM through cuBLASLt and through cublasGemmEx), the native and cuBLAS-
//! emulated DGEMM baselines, and the pinned host-link bandwidth. All timings are medians of
//! CUDA-event-timed repetitions after one warm-up.

use crate::device::Gpu;
use crate::error::{Context, GpuError};
use crate::memory::{DeviceBuffer, PinnedBuffer};
use crate::timing::sync;
pub use crate::timing::{time_median, time_once};
use cudarc::cublas::sys as cb;
use cudarc::driver::sys;
use std::ffi::c_void;

/// Device buffer filled from host data (synchronous copy; for benchmarks and tests).
pub fn upload<T: Copy>(data: &[T]) -> Result<DeviceBuffer, GpuError> {
    let buf = DeviceBuffer::new(std::mem::size_of_val(data))?;
    // SAFETY: buf holds the whole slice.
    unsafe {
        sys::cuMemcpyHtoD_v2(
            buf.ptr(),
            data.as_ptr() as *const c_void,
            std::mem::size_of_val(data),
        )
    }
    .result()
    .ctx("cuMemcpyHtoD")?;
    Ok(buf)
}

/// Copies a device buffer back into `out` (synchronous).
pub fn download<T: Copy>(buf: &DeviceBuffer, out: &mut [T]) -> Result<(), GpuError> {
    assert!(std::mem::size_of_val(out) <= buf.len());
    // SAFETY: out fits in buf.
    unsafe {
        sys::cuMemcpyDtoH_v2(
            out.as_mut_ptr() as *mut c_void,
            buf.ptr(),
            std::mem::size_of_val(out),
        )
    }
    .result()
    .ctx("cuMemcpyDtoH")
}

/// Int8 GEMM rates at n x n x n in TOPS (2n^3 / s): cuBLASLt (TN, batch `batch`, per
/// product) and cublasGemmEx (A transposed, int32 out, CUBLAS_COMPUTE_32I).
pub fn int8_rates(
    gpu: &mut Gpu,
    n: usize,
    batch: usize,
    reps: usize,
) -> Result<(f64, f64), GpuError> {
    let stream = gpu.stream;
    let (a, b, d) = int8_operands(stream, (n, n, n), batch)?;
    let nn = (n * n) as i64;
    let shape = crate::lt_int8::Shape {
        m: n as u64,
        n: n as u64,
        k: n as u64,
        batch: batch as u32,
        strides: (nn, nn, nn),
    };
    let t_lt = time_median(stream, reps, || {
        // SAFETY: the context is current; a, b, d are live device buffers of `batch` n x n
        // planes, and the timing synchronises the stream before they are freed.
        unsafe { crate::lt_int8::batched(&mut gpu.lt, stream, shape, a.ptr(), b.ptr(), d.ptr()) }
    })?;
    let (alpha, beta) = (1i32, 0i32);
    let blas = gpu.blas;
    let t_ex = time_median(stream, reps, || {
        // SAFETY: live handle and buffers of n x n elements.
        unsafe {
            cb::cublasSetStream_v2(blas, stream as cb::cudaStream_t)
                .result()
                .ctx("cublasSetStream")?;
            cb::cublasGemmEx(
                blas,
                cb::cublasOperation_t::CUBLAS_OP_T,
                cb::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                n as i32,
                n as i32,
                &alpha as *const i32 as *const c_void,
                a.ptr() as *const c_void,
                cb::cudaDataType_t::CUDA_R_8I,
                n as i32,
                b.ptr() as *const c_void,
                cb::cudaDataType_t::CUDA_R_8I,
                n as i32,
                &beta as *const i32 as *const c_void,
                d.ptr() as *mut c_void,
                cb::cudaDataType_t::CUDA_R_32I,
                n as i32,
                cb::cublasComputeType_t::CUBLAS_COMPUTE_32I,
                cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
            .result()
            .ctx("cublasGemmEx (int8)")
        }
    })?;
    let ops = 2.0 * (n as f64).powi(3);
    Ok((ops * batch as f64 / t_lt / 1e12, ops / t_ex / 1e12))
}

/// `batch` pseudo-random int8 planes of m x k (A) and k x n (B), and room for the int32 m x n
/// products (not zeros: zeros run faster).
fn int8_operands(
    stream: sys::CUstream,
    (m, n, k): (usize, usize, usize),
    batch: usize,
) -> Result<(DeviceBuffer, DeviceBuffer, DeviceBuffer), GpuError> {
    let a = DeviceBuffer::new(batch * m * k)?;
    let b = DeviceBuffer::new(batch * k * n)?;
    let d = DeviceBuffer::new(batch * m * n * 4)?;
    // SAFETY: buffers of the stated sizes.
    unsafe {
        fill_bytes(a.ptr(), batch * m * k, stream)?;
        fill_bytes(b.ptr(), batch * k * n, stream)?;
    }
    Ok((a, b, d))
}

/// The rates of cuBLASLt's int8 algorithms for one m x n x k product shape, `batch` products
/// back to back per timing as the emulated route issues them (`lt_int8::sweep`).
pub fn int8_sweep(
    gpu: &mut Gpu,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    max_algos: usize,
    reps: usize,
) -> Result<Vec<crate::lt_int8::AlgoRate>, GpuError> {
    let (a, b, d) = int8_operands(gpu.stream, (m, n, k), batch)?;
    let shape = crate::lt_int8::Shape {
        m: m as u64,
        n: n as u64,
        k: k as u64,
        batch: batch as u32,
        strides: ((m * k) as i64, (k * n) as i64, (m * n) as i64),
    };
    // SAFETY: a, b, d are live device buffers of `batch` planes of the shape's sizes, freed
    // only after the sweep returned.
    unsafe {
        crate::lt_int8::sweep(
            &gpu.lt,
            gpu.stream,
            shape,
            max_algos,
            reps,
            (a.ptr(), b.ptr(), d.ptr()),
        )
    }
}

/// Fills device bytes with a fixed pseudo-random pattern (through a pinned host buffer).
unsafe fn fill_bytes(dst: u64, bytes: usize, stream: sys::CUstream) -> Result<(), GpuError> {
    let chunk = bytes.min(64 << 20);
    let mut host = PinnedBuffer::new(chunk)?;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    // SAFETY: host holds chunk bytes.
    let h = unsafe { std::slice::from_raw_parts_mut(host.as_mut_ptr(), chunk) };
    for v in h.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *v = (x >> 56) as u8;
    }
    let mut off = 0;
    while off < bytes {
        let len = chunk.min(bytes - off);
        // SAFETY: pinned source of len bytes; destination inside the caller's buffer.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst + off as u64, h.as_ptr() as *const c_void, len, stream)
        }
        .result()
        .ctx("cuMemcpyHtoDAsync")?;
        sync(stream)?;
        off += len;
    }
    Ok(())
}

/// A cuBLAS handle with cuBLAS's own fp64 emulation forced on (math mode
/// CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH, strategy EAGER), for the bench's baseline.
pub struct EmulatedBlas(cb::cublasHandle_t);

impl EmulatedBlas {
    /// Creates the handle; `Err` when this cuBLAS has no fp64 emulation API.
    pub fn new() -> Result<EmulatedBlas, GpuError> {
        crate::probe::contain("cuBLAS fp64 emulation", || {
            let mut h = std::ptr::null_mut();
            // SAFETY: out-parameter; a context is current.
            unsafe { cb::cublasCreate_v2(&mut h) }
                .result()
                .ctx("cublasCreate")?;
            let h = EmulatedBlas(h);
            // SAFETY: live handle; enum values from the cuBLAS 13 headers.
            unsafe {
                cb::cublasSetMathMode(h.0, cb::cublasMath_t::CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
                    .result()
                    .ctx("cublasSetMathMode")?;
                cb::cublasSetEmulationStrategy(
                    h.0,
                    cb::cublasEmulationStrategy_t::CUBLAS_EMULATION_STRATEGY_EAGER,
                )
                .result()
                .ctx("cublasSetEmulationStrategy")?;
            }
            Ok(h)
        })
    }

    /// DGEMM (no transposes) on device buffers through the emulating handle.
    #[allow(clippy::too_many_arguments)]
    pub fn dgemm(
        &self,
        stream: sys::CUstream,
        m: usize,
        n: usize,
        k: usize,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), GpuError> {
        let (alpha, beta) = (1.0f64, 0.0f64);
        // SAFETY: live handle; buffers hold the column-major operands.
        unsafe {
            cb::cublasSetStream_v2(self.0, stream as cb::cudaStream_t)
                .result()
                .ctx("cublasSetStream")?;
            cb::cublasDgemm_v2_64(
                self.0,
                cb::cublasOperation_t::CUBLAS_OP_N,
                cb::cublasOperation_t::CUBLAS_OP_N,
                m as i64,
                n as i64,
                k as i64,
                &alpha,
                a as *const f64,
                m as i64,
                b as *const f64,
                k as i64,
                &beta,
                c as *mut f64,
                m as i64,
            )
            .result()
            .ctx("cublasDgemm (emulated)")
        }
    }
}

impl Drop for EmulatedBlas {
    fn drop(&mut self) {
        // SAFETY: handle created in new, destroyed once.
        let _ = unsafe { cb::cublasDestroy_v2(self.0) };
    }
}

/// Pinned host-to-device and device-to-host bandwidth in GB/s for a `bytes` transfer.
pub fn link_bandwidth(gpu: &mut Gpu, bytes: usize) -> Result<(f64, f64), GpuError> {
    let stream = gpu.stream;
    let d = DeviceBuffer::new(bytes)?;
    let mut h = PinnedBuffer::new(bytes)?;
    let hp = h.as_mut_ptr();
    // SAFETY: both buffers hold `bytes`.
    let t_h2d = time_median(stream, 5, || unsafe {
        sys::cuMemcpyHtoDAsync_v2(d.ptr(), hp as *const c_void, bytes, stream)
            .result()
            .ctx("H2D")
    })?;
    // SAFETY: as above.
    let t_d2h = time_median(stream, 5, || unsafe {
        sys::cuMemcpyDtoHAsync_v2(hp as *mut c_void, d.ptr(), bytes, stream)
            .result()
            .ctx("D2H")
    })?;
    Ok((bytes as f64 / t_h2d / 1e9, bytes as f64 / t_d2h / 1e9))
}

/// Errors of one computed entry against the exact dot product of fp64 inputs: returns
/// (|c - s| / |s|, |c - s| / sum |a_l b_l|), where s = sum a_l b_l is evaluated exactly
/// (every fp64 is an integer times a power of two, so the sum is an exact big integer).
pub fn entry_errors(
    a: impl Iterator<Item = f64> + Clone,
    b: impl Iterator<Item = f64> + Clone,
    c: f64,
) -> (f64, f64) {
    use num_bigint::BigInt;
    use num_traits::{Signed, ToPrimitive, Zero};
    fn split(x: f64) -> (i64, i32) {
        if x == 0.0 {
            return (0, 0);
        }
        let bits = x.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i32;
        let frac = (bits & ((1u64 << 52) - 1)) as i64;
        let (mant, e) = if exp == 0 {
            (frac, -1074)
        } else {
            (frac | (1i64 << 52), exp - 1075)
        };
        (if x < 0.0 { -mant } else { mant }, e)
    }
    let terms: Vec<(i128, i32)> = a
        .clone()
        .zip(b.clone())
        .map(|(x, y)| {
            let ((mx, ex), (my, ey)) = (split(x), split(y));
            (mx as i128 * my as i128, ex + ey)
        })
        .filter(|t| t.0 != 0)
        .collect();
    let abs_sum: f64 = a.zip(b).map(|(x, y)| (x * y).abs()).sum();
    let (mc, ec) = split(c);
    let e_min = terms
        .iter()
        .map(|t| t.1)
        .chain(std::iter::once(ec))
        .min()
        .unwrap_or(0);
    let mut s = BigInt::zero();
    for (m, e) in &terms {
        s += BigInt::from(*m) << (e - e_min) as usize;
    }
    let cb = BigInt::from(mc) << (ec - e_min) as usize;
    let diff = (&cb - &s).abs();
    // Both ratios share the scale 2^e_min, which cancels in |c - s| / |s|.
    let to_f64_scaled = |x: &BigInt| -> (f64, i64) {
        let bits = x.bits() as i64;
        let shift = (bits - 64).max(0);
        ((x >> shift as usize).to_f64().unwrap_or(0.0), shift)
    };
    let (d, ds) = to_f64_scaled(&diff);
    let (sv, ss) = to_f64_scaled(&s.abs());
    let comp = if diff.is_zero() {
        0.0
    } else if s.is_zero() {
        f64::INFINITY
    } else {
        d / sv * 2f64.powi((ds - ss) as i32)
    };
    // |c - s| in fp64: d * 2^(ds + e_min), computed in two steps to avoid over/underflow.
    let abs_err = d
        * 2f64.powi(((ds + e_min as i64) / 2) as i32)
        * 2f64.powi((ds + e_min as i64 - (ds + e_min as i64) / 2) as i32);
    let norm = if abs_sum > 0.0 {
        abs_err / abs_sum
    } else if diff.is_zero() {
        0.0
    } else {
        f64::INFINITY
    };
    (comp, norm)
}

#[cfg(test)]
mod tests {
    use super::entry_errors;

    #[test]
    fn exact_reference_sees_cancellation_that_fp64_loses() {
        // 1e16 + 1 - 1e16 = 1 exactly; fp64 summation gives 0.
        let a = [1e16, 1.0, -1e16];
        let b = [1.0, 1.0, 1.0];
        let (comp, _) = entry_errors(a.iter().copied(), b.iter().copied(), 1.0);
        assert_eq!(comp, 0.0);
        let (comp, norm) = entry_errors(a.iter().copied(), b.iter().copied(), 0.0);
        assert_eq!(comp, 1.0);
        assert!((norm - 1.0 / 2e16).abs() < 1e-30);
    }

    #[test]
    fn one_ulp_off_is_measured_as_such() {
        let a = [0.1, 0.2];
        let b = [3.0, 7.0];
        let exact_rounded = 0.1 * 3.0 + 0.2 * 7.0; // not necessarily exact; compare ulps
        let (c1, _) = entry_errors(a.iter().copied(), b.iter().copied(), exact_rounded);
        let (c2, _) = entry_errors(
            a.iter().copied(),
            b.iter().copied(),
            f64::from_bits(exact_rounded.to_bits() + 4),
        );
        assert!(c1 < 5e-16 && c2 > c1 && c2 < 2e-15, "{c1} {c2}");
    }
}
