//! GPU routes of ozaki-shim: `gpu-native` (cuBLAS fp64) and `gpu-ozaki` (Ozaki
//! scheme II on the INT8 tensor cores), for device-resident and host-resident operands.
//!
//! cudarc is used with dynamic loading, so this crate builds and its tests run on machines
//! without CUDA; every entry point first checks that the libraries load ([`probe`]) and
//! contains cudarc's panics, so a missing GPU is an `Err`, never a crash.
//!
//! | module | what it holds |
//! |---|---|
//! | [`probe`] | library presence, panic containment |
//! | [`device`] | the process-wide [`Gpu`]: context, handles, kernels, reusable buffers |
//! | [`nvrtc_cache`] | NVRTC compilation to CUBIN and the private disk cache |
//! | [`kernels`] | `kernels/ozaki.cu` entry points |
//! | `in_flight` | work a call left running on its stream, and who waits for it |
//! | [`lt_int8`] | batched int8 products through cuBLASLt |
//! | [`native`] | cuBLAS DGEMM / DSYRK |
//! | [`ozaki`] | the emulated pipeline on device memory; its host plan and moduli rule |
//! | [`host`] | host-resident calls: staging, transfers, write-back after success |
//! | `host::early_write` | with beta = 0, blocks of C written as they arrive once the call is accepted |
//! | `host::handoff` | a call beside other BLAS calls copies its operands in and C out outside the GPU's lock |
//! | [`host_copy`] | streaming (non-temporal) copies between pageable and pinned memory |
//! | [`host_link`] | host-memory and host-link microbenchmarks (`ozaki bench --host-link`) |
//! | [`multi`] | one host-resident dgemm split across several device slots |
//! | [`timing`] | phase times from CUDA events |
//! | [`start_gate`] | steps of the GPU start that a process exit waits for |
//! | [`warm_up`] | the first call's one-off costs, paid on the background start's thread |
//! | [`measure`] | rates and baselines for `ozaki bench` |
//! | [`energy`] | joules per call and power-cap state from NVML (`ozaki bench`) |

// CUstream / CUdeviceptr-like handles are opaque values passed through to the driver, never
// dereferenced by this crate; clippy cannot tell them from data pointers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod cuda_lib_dirs;
pub mod device;
pub mod energy;
pub mod error;
pub mod host;
pub mod host_copy;
pub mod host_link;
mod in_flight;
pub mod kernels;
pub mod loaded_objects;
pub mod lt_int8;
pub mod measure;
pub mod memory;
pub mod multi;
pub mod native;
pub mod nvrtc_cache;
pub mod ozaki;
pub mod probe;
pub mod start_gate;
pub mod timing;
pub mod warm_up;

pub use device::{Gpu, gpu, gpu_on};
pub use error::GpuError;
