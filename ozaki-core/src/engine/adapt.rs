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
//!
//! This module describes GPUs and the factors between them; `Profile::scaled_to` applies
//! them, and profile resolution (`profile::resolve`) decides when.

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::gpus::{a100, h100, h200};

    #[test]
    fn another_architecture_or_an_unmeasured_gpu_is_not_scaled() {
        assert_eq!(scale(&h200(), &a100()), None);
        assert_eq!(scale(&h200(), &GpuTraits::named("NVIDIA H100")), None);
        let s = scale(&h200(), &h100()).unwrap();
        assert!((s.compute - 1.0).abs() < 1e-12);
        assert!((s.memory - 3.35 / 4.8).abs() < 1e-12);
    }
}
