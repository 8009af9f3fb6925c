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

/// The name of the test function it expands in, for its skip line. libtest's thread name
/// is not always the test's (with one test thread the tests run on the main thread), so the
/// name comes from the type name of a function item declared in place.
macro_rules! test_name {
    () => {{
        fn here() {}
        $crate::support::function_name(std::any::type_name_of_val(&here))
    }};
}
pub(crate) use test_name;

/// Whether a GPU is usable; otherwise the test prints its skip line ([`skip`]) and returns.
/// CI has no GPU, so this never fails a run: the GPU machine runs these through
/// `scripts/gpu-check`.
macro_rules! have_gpu {
    () => {
        $crate::support::gpu_for($crate::support::test_name!())
    };
}
pub(crate) use have_gpu;

/// The last path segment of `here`'s type name (`device::some_test::here`): the test's name.
pub fn function_name(here: &'static str) -> &'static str {
    let path = here.strip_suffix("::here").unwrap_or(here);
    path.rsplit("::").next().unwrap_or(path)
}

/// [`have_gpu!`] for the test named `test`.
pub fn gpu_for(test: &str) -> bool {
    match gpu_kernels::device::available() {
        Ok(()) => true,
        Err(e) => {
            skip(test, format_args!("{e}"));
            false
        }
    }
}

/// Prints `skipped: <test>: <why>`, the one line `scripts/test-all` counts as a skipped
/// test: straight to stderr, which the harness does not capture, in one write so that
/// parallel tests do not interleave inside the line.
pub fn skip(test: &str, why: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(format!("skipped: {test}: {why}\n").as_bytes());
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

/// A process-wide host tuning (`gpu_kernels::host::set_tuning`) held while the guard lives,
/// then the default again; the guards of one test program take turns, so tests that set a
/// tuning never see each other's.
pub struct Tuned(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

/// The tuning `spec` (`gpu_kernels::host::Tuning`'s syntax) until the guard is dropped.
pub fn tuned(spec: &str) -> Tuned {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let g = ONE.lock().unwrap_or_else(|p| p.into_inner());
    gpu_kernels::host::set_tuning(Some(spec.parse().expect("tuning")));
    Tuned(g)
}

impl Drop for Tuned {
    fn drop(&mut self) {
        gpu_kernels::host::set_tuning(None);
    }
}
