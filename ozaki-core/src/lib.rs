//! Numerics, routes, the per-record engine and trace types of ozaki-shim, in pure Rust
//! (no FFI, no CUDA), so that everything the shim decides can be tested on any machine.
//!
//! | module | what it holds |
//! |---|---|
//! | [`route`] | route names (`vendor`, `cpu-ozaki`, `gpu-ozaki`, ...) |
//! | [`trace`] | the JSON Lines trace schema (header and call records) |
//! | [`vendor_core`] | the CPU's vector width, and whether an OpenBLAS's kernels are far older than it |
//! | [`blas`] | the built-in cache-blocked fp64 dgemm/dsyrk (used when no vendor BLAS exists) |
//! | [`moduli`], [`scaling`], [`residues`], [`reconstruct`], [`emulate`], [`exact`] | Ozaki scheme II |
//! | [`rule`], [`fallback`] | the accuracy rule every emulated route takes its moduli count from, and the typed decline to native fp64 |
//! | [`devices`] | which GPUs a process uses, and how one large call's C is split across them |
//! | [`crt_tables`] | the residue and CRT tables the GPU kernels take by value (`#[repr(C)]`) |
//! | [`write_back`] | the final `C = alpha ĉ + beta C` with the reference BLAS's signed zeros |
//! | [`kernel`], [`fp8`], [`accuracy`], [`testutil`] | CPU integer kernels, the FP8 sets S/A/E/D and plane encodings, the exact-reference error measure, seeded test data |
//! | [`stats`] | FLOP-weighted quantiles of call sizes (nbar) for summaries and reports |
//! | [`engine`] | machine profile, cost model and per-call route choice, trace replay |
//! | [`host_pipeline`] | how a host-resident gemm is cut into pipelined parts on a GPU, and what that costs |
//! | [`env`] | the one reader of the environment and the table of every `OZAKI_*` variable |
//! | [`private_path`] | whether a file and the folders above it can be trusted by this user (trace, kernel cache, profiles) |
//! | [`spawn`] | the hook the library's worker threads are started under (the shim's blocks signals) |
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod accuracy;
pub mod blas;
pub mod crt_tables;
pub mod devices;
pub mod emulate;
pub mod engine;
pub mod env;
pub mod exact;
pub mod fallback;
pub mod fp8;
pub mod host_pipeline;
pub mod kernel;
pub mod moduli;
pub mod private_path;
pub mod reconstruct;
pub mod residues;
pub mod route;
pub mod rule;
pub mod scaling;
pub mod spawn;
pub mod stats;
pub mod testutil;
pub mod trace;
pub mod vendor_core;
pub mod write_back;
