//! Host-resident gemms made from several threads at once, as PySCF's OpenMP team makes them:
//! each call hands its C off (it gives up the GPU once C is in a pinned buffer of its own and
//! writes it into the caller's memory after), so every caller must get its own product, in
//! its own C's block only, bit for bit what the same call gives made alone (which keeps the
//! early writes or the write inside the call, and stages its operands through the ring),
//! for both routes and both kinds of beta; calls made together also copy their operands
//! into pinned memory of their own before they queue for the GPU, a thread's first call on
//! the GPU included.
//! Skips itself visibly with "skipped: ..." without a GPU; runs in the GPU round
//! (`scripts/gpu-check`).

mod support;

use gpu_kernels::host::{self, Engine, HostC};
use gpu_kernels::ozaki::Options;
use ozaki_core::blas::{GemmArgs, Trans, span};
use std::sync::atomic::{AtomicU32, Ordering};
use support::{bits_differ, centered_seeded as vec, have_gpu};

/// The BLAS calls in flight the host path sees (`host::set_cpu_sharers`): 1 while the
/// reference runs alone, the team's size while the team runs.
static IN_FLIGHT: AtomicU32 = AtomicU32::new(1);

fn in_flight() -> u32 {
    IN_FLIGHT.load(Ordering::Relaxed)
}

/// One caller's call: its own seeded A, B and C (C with gaps of NaN guards between its
/// columns), beta 0 or not by its index.
struct Call {
    a: Vec<f64>,
    b: Vec<f64>,
    c0: Vec<f64>,
    beta: f64,
}

const M: usize = 389;
const N: usize = 517;
const K: usize = 61;
const LDC: usize = M + 23;

impl Call {
    fn new(i: u64) -> Call {
        let c = vec(3 * i + 3, span(M, N, LDC));
        Call {
            a: vec(3 * i + 1, M * K),
            b: vec(3 * i + 2, K * N),
            c0: c
                .iter()
                .enumerate()
                .map(|(at, x)| if at % LDC < M { *x } else { f64::NAN })
                .collect(),
            beta: if i.is_multiple_of(2) { 0.0 } else { -0.5 },
        }
    }

    fn args(&self) -> GemmArgs<'_> {
        GemmArgs {
            transa: Trans::No,
            transb: Trans::No,
            m: M,
            n: N,
            k: K,
            alpha: 1.25,
            a: &self.a,
            lda: M,
            b: &self.b,
            ldb: K,
            beta: self.beta,
            ldc: LDC,
        }
    }

    /// C after the call on the GPU route `engine`, whether the call handed C off, whether
    /// it copied its operands into pinned memory of its own, and how long it page-locked
    /// memory for that (`phases.pinned_ns`).
    fn run(&self, engine: Engine) -> (Vec<f64>, bool, bool, u64) {
        let mut c = self.c0.clone();
        let view = HostC::of_slice(&mut c, M, N, LDC).expect("C");
        let out = host::gemm_c(&self.args(), view, engine).expect("the GPU call");
        (c, out.handed_off, out.operands_pinned, out.phases.pinned_ns)
    }
}

#[test]
fn calls_made_at_once_each_get_their_own_c_as_made_alone() {
    if !have_gpu!() {
        return;
    }
    host::set_cpu_sharers(in_flight);
    let team = 8u32;
    let calls: Vec<Call> = (0..u64::from(team)).map(Call::new).collect();
    for (name, engine) in [
        ("gpu-native", Engine::Native),
        (
            "gpu-ozaki",
            Engine::Ozaki(Options {
                moduli: Some(14),
                ..Options::default()
            }),
        ),
    ] {
        IN_FLIGHT.store(1, Ordering::Relaxed);
        let alone: Vec<Vec<f64>> = calls
            .iter()
            .map(|c| {
                let (c, handed_off, pinned, _) = c.run(engine);
                assert!(
                    !handed_off && !pinned,
                    "{name}: a call alone keeps the ring"
                );
                c
            })
            .collect();
        for (i, (call, c)) in calls.iter().zip(&alone).enumerate() {
            let mut want = call.c0.clone();
            ozaki_core::blas::gemm(&call.args(), &mut want);
            let tol = 1e-12 * (1.25 * K as f64 + call.beta.abs());
            for (at, (x, y)) in c.iter().zip(&want).enumerate() {
                if at % LDC < M {
                    assert!(
                        (x - y).abs() <= tol,
                        "{name} call {i} alone: C[{at}] = {x}, want {y}"
                    );
                } else {
                    assert!(x.is_nan(), "{name} call {i} alone: a gap changed at {at}");
                }
            }
        }
        IN_FLIGHT.store(team, Ordering::Relaxed);
        let mut pinned_calls = 0;
        for round in 0..3 {
            let together: Vec<(Vec<f64>, bool, bool, u64)> = std::thread::scope(|s| {
                let runs: Vec<_> = calls
                    .iter()
                    .map(|c| s.spawn(move || c.run(engine)))
                    .collect();
                runs.into_iter()
                    .map(|h| h.join().expect("a caller"))
                    .collect()
            });
            // the pool is empty before the first route's first round: its calls page-lock
            // their buffers, and say so (the `handoff_reserve` test relies on it)
            if round == 0 && name == "gpu-native" {
                assert!(
                    together.iter().any(|r| r.3 > 0),
                    "{name}: the first round grew no pinned memory, or did not say so"
                );
            }
            for (i, ((c, handed_off, pinned, _), want)) in together.iter().zip(&alone).enumerate() {
                assert!(
                    handed_off,
                    "{name} round {round}: call {i} beside others kept its C"
                );
                pinned_calls += usize::from(*pinned);
                assert_eq!(
                    bits_differ(c, want),
                    0,
                    "{name} round {round}: call {i} made beside {} others differs from it alone",
                    team - 1
                );
            }
        }
        // every round's callers are new threads that never called on the GPU: each binds the
        // GPU's context and copies its operands apart, its first call included
        assert_eq!(
            pinned_calls,
            3 * team as usize,
            "{name}: calls beside others that staged their operands through the ring"
        );
    }
    IN_FLIGHT.store(1, Ordering::Relaxed);
}
