//! The vendor's wake (`ozaki_core::engine::wake`): a host copy of two GPU staging chunks,
//! on as many threads as the GPU routes' staging uses, timed at several delays after
//! a multi-threaded vendor call and on a quiet host.

use super::cpu::{Operands, VendorBlas};
use ozaki_core::engine::wake::WakePoint;
use std::time::{Duration, Instant};

/// Bytes copied: two staging chunks of the GPU routes' upload ring (long enough that the
/// scheduler's time slices between the copy threads and a spinning pool average out).
const BYTES: usize = 128 << 20;

/// Delays after the vendor call's return at which the copy is timed, seconds.
const DELAYS_S: [f64; 9] = [0.0, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4];

/// Copies timed per delay (their median counts).
const REPS: usize = 7;

/// How long the host is left alone before the quiet copies: longer than any pool's spin
/// this measures (OpenBLAS about 0.1 s, Intel OpenMP 0.2 s by default).
const QUIET: Duration = Duration::from_secs(1);

/// `dst = src` on `threads` threads, each a contiguous part; the seconds it took.
fn timed_copy(dst: &mut [u8], src: &[u8], threads: usize) -> f64 {
    let part = src.len().div_ceil(threads.max(1));
    let t = Instant::now();
    std::thread::scope(|s| {
        for (d, c) in dst.chunks_mut(part).zip(src.chunks(part)) {
            s.spawn(move || d.copy_from_slice(c));
        }
    });
    t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The copy's slowdown at each of [`DELAYS_S`] after a `shape` product on `blas` at its
/// current thread count (a product large enough for the vendor to run it on its threads),
/// and the copy's rate on a quiet host, bytes per second.
pub(super) fn measure(blas: &VendorBlas, shape: (u64, u64, u64)) -> (Vec<WakePoint>, f64) {
    let threads = std::thread::available_parallelism().map_or(1, |c| c.get().clamp(1, 16));
    let src: Vec<u8> = (0..BYTES).map(|i| i as u8).collect();
    let mut dst = vec![0u8; BYTES];
    timed_copy(&mut dst, &src, threads);
    std::thread::sleep(QUIET);
    let quiet = median(
        (0..REPS)
            .map(|_| timed_copy(&mut dst, &src, threads))
            .collect(),
    );
    let mut ops = Operands::new(shape.0, shape.1, shape.2);
    let mut out = Vec::new();
    for &delay_s in &DELAYS_S {
        let t = median(
            (0..REPS)
                .map(|_| {
                    blas.call(&mut ops);
                    std::thread::sleep(Duration::from_secs_f64(delay_s));
                    timed_copy(&mut dst, &src, threads)
                })
                .collect(),
        );
        let slowdown = t / quiet;
        eprintln!(
            "wake: {} MiB copied on {threads} threads {:.0} ms after a vendor call: {:.3} ms ({slowdown:.2}x a quiet host's {:.3} ms)",
            BYTES >> 20,
            delay_s * 1e3,
            t * 1e3,
            quiet * 1e3
        );
        out.push(WakePoint { delay_s, slowdown });
    }
    (out, BYTES as f64 / quiet)
}
