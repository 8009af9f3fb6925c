//! Calls that return with their work still running on the caller's stream (the cuBLAS
//! hook's emulated calls), on a real device; skipped visibly without a GPU (CI), run by
//! `scripts/gpu-check`.
//!
//! What a user relies on: a call on one stream that starts while an earlier call still runs
//! on another stream gives the same bits as when each call is waited for, although both use
//! the GPU's one set of buffers.

mod support;

use cudarc::driver::sys;
use gpu_kernels::device::{current_context, sync};
use gpu_kernels::measure::{download, upload};
use gpu_kernels::ozaki::{self, DeviceCall, Options};
use gpu_kernels::{gpu, gpu_on};
use ozaki_core::testutil::Rng;
use support::{bits_differ, centered, device_product, have_gpu};

/// A fresh non-blocking stream of the current context.
fn new_stream() -> sys::CUstream {
    let mut s = std::ptr::null_mut();
    // SAFETY: out-parameter; the GPU's context was made current by `gpu()`.
    let r =
        unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "cuStreamCreate");
    s
}

/// A 4096³ product left running on one stream, then at once a 1024³ product on another
/// stream, also left running: the second call's scan, shifts and residues reuse the
/// buffers the first call's products and reconstruction still read, unless its stream is
/// ordered after them. Each C must equal, bit for bit, the same call waited for.
#[test]
fn a_call_on_another_stream_waits_for_the_buffers_of_a_call_left_running() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(57);
    let (big, small) = (4096, 1024);
    let opts = Options {
        moduli: Some(14),
        ..Options::default()
    };
    let ops = |n: usize, rng: &mut Rng| (centered(rng, n * n), centered(rng, n * n));
    let (a1, b1) = ops(big, &mut rng);
    let (a2, b2) = ops(small, &mut rng);
    // The references, each waited for; the larger one first, so that the workspace already
    // fits both and the calls below grow no buffer (growing waits for the whole context).
    let waited = |n: usize, a: &[f64], b: &[f64]| {
        let (out, c) = device_product((n, n, n), 1.0, (a, b), 0.0, &vec![0.0; n * n], opts);
        out.unwrap();
        c
    };
    let want1 = waited(big, &a1, &b1);
    let want2 = waited(small, &a2, &b2);

    let s1 = gpu().unwrap().stream();
    let s2 = new_stream();
    let ctx = current_context().unwrap();
    let d1 = [&a1, &b1, &vec![0.0; big * big]].map(|x| upload(x).unwrap());
    let d2 = [&a2, &b2, &vec![0.0; small * small]].map(|x| upload(x).unwrap());
    for (n, d, s) in [(big, &d1, s1), (small, &d2, s2)] {
        let call = DeviceCall::product((n, n, n), 1.0, (d[0].ptr(), d[1].ptr()), 0.0, d[2].ptr());
        let mut g = gpu_on(ctx, s)
            .unwrap()
            .expect("the test's streams are this GPU's");
        // SAFETY: the buffers are live device copies of packed operands, kept until both
        // streams are synchronised below.
        let pending = unsafe { ozaki::enqueue(&mut g, s, &call, opts) }.unwrap();
        assert_eq!(pending.planned().moduli, 14);
        g.leave_in_flight(s).unwrap();
    }
    sync(s1).unwrap();
    sync(s2).unwrap();
    for (n, d, want) in [(big, &d1, &want1), (small, &d2, &want2)] {
        let mut c = vec![0.0f64; n * n];
        download(&d[2], &mut c).unwrap();
        let diff = bits_differ(&c, want);
        assert_eq!(
            diff, 0,
            "n = {n}: {diff} entries differ from the call waited for"
        );
    }
    // SAFETY: s2 was created above and nothing runs on it any more.
    unsafe { sys::cuStreamDestroy_v2(s2) };
}

/// Whoever takes the GPU without a stream of its own ([`gpu()`]: the host-resident routes)
/// finds the work a call left running finished.
#[test]
fn taking_the_gpu_waits_for_a_call_left_running() {
    if !have_gpu!() {
        return;
    }
    let mut rng = Rng::new(58);
    let n = 2048;
    let (a, b) = (centered(&mut rng, n * n), centered(&mut rng, n * n));
    let s = new_stream();
    let ctx = current_context().unwrap();
    let d = [&a, &b, &vec![0.0; n * n]].map(|x| upload(x).unwrap());
    let call = DeviceCall::product((n, n, n), 1.0, (d[0].ptr(), d[1].ptr()), 0.0, d[2].ptr());
    let done = {
        let mut g = gpu_on(ctx, s)
            .unwrap()
            .expect("the test's streams are this GPU's");
        // SAFETY: as in the test above; the stream is passed before the buffers are freed.
        let pending = unsafe { ozaki::enqueue(&mut g, s, &call, Options::default()) }.unwrap();
        g.leave_in_flight(s).unwrap();
        pending
    };
    drop(gpu().unwrap());
    // SAFETY: a live stream; a query never waits.
    let state = unsafe { sys::cuStreamQuery(s) };
    assert_eq!(
        state,
        sys::CUresult::CUDA_SUCCESS,
        "the call's stream still runs"
    );
    assert!(done.finish().is_ok(), "the phase events have completed");
    // SAFETY: nothing runs on s any more.
    unsafe { sys::cuStreamDestroy_v2(s) };
}
