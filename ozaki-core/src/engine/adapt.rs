//! A built-in profile carried over to another GPU of the same architecture.
//!
//! A profile is a measurement of one machine; one is shipped per GPU model that was
//! calibrated (`profiles/*.json`). A GPU of the same architecture without a profile of its
//! own (an H100 beside the shipped H200 profile) runs the same kernels on the same units, so
//! the shipped profile is a far better first guess for it than no GPU at all: the engine
//! takes it, scaled to the device's own resources, and its per-class corrections from the
//! calls it measures (`correct`) fix what the scaling misses within the run. A GPU of
//! another architecture (different compute capability) is not guessed: its rates, tensor-core
//! shapes and kernels differ too much, and it gets no GPU route until `ozaki calibrate`
//! measures it.
//!
//! The scaling, from the resources the driver reports ([`GpuTraits`]):
//! - the products (cuBLAS fp64, the INT8 GEMMs) by multiprocessors x peak SM clock;
//! - the streaming terms (operand traffic of the products, conversion, reconstruction) by
//!   peak memory bandwidth;
//! - device memory is the device's own, with the reserve the profile measured;
//! - the host link, launch and synchronisation latencies, the GPU start and the end-to-end
//!   corrections are the host's and the software's, and stay as measured.
//!
//! The per-device survey of a multi-GPU host is dropped: splits over several GPUs of an
//! unmeasured model wait for `ozaki calibrate`'s survey.

use super::profile::{GpuProfile, PerElement, Profile};
use super::work_model::WorkModel;

/// What the driver reports about a GPU that the adaptation reads.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuTraits {
    /// Name as the driver reports it (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// Multiprocessor count.
    pub sms: u32,
    /// Peak SM clock, kHz.
    pub clock_khz: u32,
    /// Peak memory bandwidth, bytes per second.
    pub memory_bytes_per_s: f64,
    /// Device memory, bytes.
    pub memory_bytes: u64,
}

impl GpuTraits {
    /// A GPU known by name alone (nothing to adapt a profile to).
    pub fn named(name: &str) -> GpuTraits {
        GpuTraits {
            name: name.to_string(),
            cc: (0, 0),
            sms: 0,
            clock_khz: 0,
            memory_bytes_per_s: 0.0,
            memory_bytes: 0,
        }
    }

    /// Whether the resources the scaling reads are all known.
    fn measured(&self) -> bool {
        self.cc.0 > 0
            && self.sms > 0
            && self.clock_khz > 0
            && self.memory_bytes_per_s > 0.0
            && self.memory_bytes > 0
    }

    fn compute(&self) -> f64 {
        self.sms as f64 * self.clock_khz as f64
    }
}

/// The factors a profile measured on `from` is scaled by for `to`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// `to`'s multiprocessors x clock over `from`'s: rates of the products.
    pub compute: f64,
    /// `to`'s memory bandwidth over `from`'s: rates of the streaming terms.
    pub memory: f64,
}

/// The scaling from `from` to `to`, or `None` when they differ in architecture or either
/// lacks a resource the scaling reads.
pub fn scale(from: &GpuTraits, to: &GpuTraits) -> Option<Scale> {
    if !from.measured() || !to.measured() || from.cc != to.cc {
        return None;
    }
    Some(Scale {
        compute: to.compute() / from.compute(),
        memory: to.memory_bytes_per_s / from.memory_bytes_per_s,
    })
}

/// `base` (measured on `from`) carried over to `to` by `s` (module docs): the same profile,
/// its GPU renamed, rescaled and given `to`'s memory.
pub fn adapted(base: &Profile, s: Scale, to: &GpuTraits) -> Profile {
    let mut p = base.clone();
    p.name = format!("{} scaled to {}", base.name, to.name);
    p.machine.gpu = Some(to.name.clone());
    p.devices.clear();
    p.host_share = None;
    if let Some(g) = p.gpu.as_mut() {
        adapt_gpu(g, s, to);
    }
    p
}

fn adapt_gpu(g: &mut GpuProfile, s: Scale, to: &GpuTraits) {
    g.name = to.name.clone();
    let reserve = g.reserve_bytes.min(to.memory_bytes);
    let used_at_calibration = g.memory_bytes.saturating_sub(g.free_bytes);
    g.memory_bytes = to.memory_bytes;
    g.free_bytes = to
        .memory_bytes
        .saturating_sub(used_at_calibration)
        .max(to.memory_bytes / 2);
    g.reserve_bytes = reserve;
    scale_products(&mut g.fp64, s);
    scale_products(&mut g.int8, s);
    scale_streaming(&mut g.convert, s.memory);
    scale_streaming(&mut g.reconstruct, s.memory);
}

/// A product's multiply-adds run at the compute rate, its operand and result traffic at the
/// memory rate; its fixed latency is the launch's.
fn scale_products(m: &mut WorkModel, s: Scale) {
    m.s_per_mnk /= s.compute;
    m.s_per_nk /= s.memory;
    m.s_per_mk /= s.memory;
    m.s_per_mn /= s.memory;
}

fn scale_streaming(e: &mut PerElement, memory: f64) {
    e.s_per_elem /= memory;
    e.s_per_elem_modulus /= memory;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::predict;
    use crate::engine::{CallShape, Residency};
    use crate::route::Route;
    use crate::testutil::gpus::{a100, h100, h200};

    #[test]
    fn another_architecture_or_an_unmeasured_gpu_is_not_scaled() {
        assert_eq!(scale(&h200(), &a100()), None);
        assert_eq!(scale(&h200(), &GpuTraits::named("NVIDIA H100")), None);
        let s = scale(&h200(), &h100()).unwrap();
        assert!((s.compute - 1.0).abs() < 1e-12);
        assert!((s.memory - 3.35 / 4.8).abs() < 1e-12);
    }

    /// Same multiprocessors and clock, 0.70 of the bandwidth: a large product's compute term
    /// is unchanged while the emulation's conversion and reconstruction, which stream, take
    /// 1/0.70 as long; the host link and the device memory follow the machine.
    #[test]
    fn products_follow_compute_and_streaming_follows_bandwidth() {
        let base = Profile::built_in("h200").unwrap();
        let s = scale(&h200(), &h100()).unwrap();
        let p = adapted(&base, s, &h100());
        let (g0, g1) = (base.gpu.as_ref().unwrap(), p.gpu.as_ref().unwrap());
        assert_eq!(g1.name, "NVIDIA H100 80GB HBM3");
        assert_eq!(g1.memory_bytes, 80 << 30);
        assert!(g1.free_bytes <= g1.memory_bytes && g1.free_bytes >= g1.memory_bytes / 2);
        assert_eq!(g1.fp64.s_per_mnk, g0.fp64.s_per_mnk);
        assert_eq!(g1.int8.s_per_mnk, g0.int8.s_per_mnk);
        let ratio = g1.convert.s_per_elem_modulus / g0.convert.s_per_elem_modulus;
        assert!((ratio - 4.8 / 3.35).abs() < 1e-9, "{ratio}");
        assert_eq!(g1.link, g0.link);
        assert_eq!(p.corrections, base.corrections);
        assert!(p.devices.is_empty() && p.host_share.is_none());
        // Every GPU route is still priced, and a large device-resident product costs at
        // least what it did on the faster-memory GPU.
        let shape = CallShape::gemm(8192, 8192, 8192).with_residency(Residency::Device);
        for route in [Route::GpuNative, Route::GpuOzaki] {
            let (t0, t1) = (
                predict(&base, &shape, route, Some(14), 16).seconds,
                predict(&p, &shape, route, Some(14), 16).seconds,
            );
            assert!(
                t1.is_finite() && t1 >= t0 * 0.999,
                "{route:?}: {t0} -> {t1}"
            );
        }
    }
}
