//! What the GPU test programs share (`device.rs`, `multi_device.rs`, and the shim's
//! `device_entry.rs`): the visible skip without a GPU, seeded operands from
//! `ozaki_core::testutil` (the generator of the accuracy suite and `ozaki bench`), and a dgemm
//! on device-resident copies.
#![allow(dead_code)] // each test program uses its part

use gpu_kernels::host::Engine;
use gpu_kernels::measure::{download, upload};
use gpu_kernels::ozaki::{self, DeviceCall, Options, Outcome};
use gpu_kernels::{GpuError, gpu};
use ozaki_core::blas::Trans;
use ozaki_core::emulate::{EmulationConfig, Moduli, Reconstruction, ScalingMode};
use ozaki_core::testutil::Rng;

/// Whether a GPU is usable; otherwise prints a visible skip line ([`skip`]). CI has no GPU, so this never fails a run: the GPU machine
/// runs these through `scripts/gpu-check`.
pub fn have_gpu() -> bool {
    match gpu_kernels::device::available() {
        Ok(()) => true,
        Err(e) => {
            skip(format_args!("no CUDA driver ({e})"));
            false
        }
    }
}

/// Prints `skipped: <why>` where a passing run shows it (`scripts/test-all` counts these):
/// straight to stderr, which the harness does not capture, in one write so that parallel
/// tests do not interleave inside the line.
pub fn skip(why: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(format!("skipped: {why}\n").as_bytes());
}

/// `n` entries uniform in `[-0.5, 0.5)`.
pub fn centered(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.uniform() - 0.5).collect()
}

/// [`centered`] from a fresh generator seeded `seed`.
pub fn centered_seeded(seed: u64, n: usize) -> Vec<f64> {
    centered(&mut Rng::new(seed), n)
}

/// `n` integers uniform in `[-bound, bound]`, as f64.
pub fn integers(rng: &mut Rng, n: usize, bound: i64) -> Vec<f64> {
    (0..n).map(|_| rng.int_in(-bound, bound) as f64).collect()
}

/// C = alpha A B + beta C0 through `ozaki::gemm` on device-resident copies of packed
/// column-major operands ([`DeviceCall::product`]): the outcome, and C afterwards (C0 where
/// the call was refused).
pub fn device_product(
    (m, n, k): (usize, usize, usize),
    alpha: f64,
    (a, b): (&[f64], &[f64]),
    beta: f64,
    c0: &[f64],
    opts: Options,
) -> (Result<Outcome, GpuError>, Vec<f64>) {
    let (da, db, dc) = (upload(a).unwrap(), upload(b).unwrap(), upload(c0).unwrap());
    let call = DeviceCall::product((m, n, k), alpha, (da.ptr(), db.ptr()), beta, dc.ptr());
    let out = {
        let mut g = gpu().unwrap();
        let s = g.stream();
        // SAFETY: da, db, dc are live device copies of the packed operands; gemm waits.
        unsafe { ozaki::gemm(&mut g, s, &call, opts) }
    };
    let mut c = vec![0.0f64; m * n];
    download(&dc, &mut c).unwrap();
    (out, c)
}

/// (rows, columns) of an operand stored as op^-1 of a `rows x cols` op(X).
pub fn dims(t: Trans, rows: usize, cols: usize) -> (usize, usize) {
    if t == Trans::No {
        (rows, cols)
    } else {
        (cols, rows)
    }
}

/// The GPU route's and ozaki-core's settings for the same moduli count and scaling.
pub fn same_numerics(scaling: ScalingMode, r: usize) -> (Engine, EmulationConfig) {
    (
        Engine::Ozaki(Options {
            moduli: Some(r),
            scaling: Some(scaling),
            ..Default::default()
        }),
        EmulationConfig {
            moduli: Moduli::Fixed(r),
            scaling,
            reconstruction: Reconstruction::Exact,
            ..Default::default()
        },
    )
}

/// How many entries of two results differ in any bit.
pub fn bits_differ(x: &[f64], y: &[f64]) -> usize {
    x.iter()
        .zip(y)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count()
}
