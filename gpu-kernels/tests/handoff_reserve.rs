//! The GPU start's warm-up readies pinned memory for the calls that started it: a team of
//! callers making host-resident gemms at once, each on a thread that never called on the
//! GPU, finds a buffer for its operands and one for its C in the pool, so no call of its
//! first round page-locks memory for them (`phases.pinned_ns`; the first call to hold the
//! GPU still grows the GPU's own C staging) and each copies its operands apart. Without the
//! reserve the first round page-locks (the `handoff` test checks that). The test is a target
//! of its own, so its process's pool holds only what the test put there.
//! Skips itself visibly with "skipped: ..." without a GPU; runs in the GPU round
//! (`scripts/gpu-check`).

mod support;

use gpu_kernels::host::{self, Engine, HostC};
use ozaki_core::blas::GemmArgs;
use support::{centered_seeded as vec, have_gpu};

const M: usize = 1953;
const N: usize = 122;
const K: usize = 541;
const TEAM: u32 = 8;

#[test]
fn a_team_that_started_the_gpu_finds_its_pinned_memory_ready() {
    if !have_gpu!() {
        return;
    }
    host::set_cpu_sharers(|| TEAM);
    let added = host::reserve_operands(M, N, K, TEAM);
    assert_eq!(
        added,
        2 * TEAM as usize,
        "a buffer for the operands and one for C per caller"
    );
    let operands: Vec<(Vec<f64>, Vec<f64>)> = (0..u64::from(TEAM))
        .map(|i| (vec(2 * i + 1, M * K), vec(2 * i + 2, K * N)))
        .collect();
    let outcomes: Vec<(u64, bool, bool, Vec<f64>)> = std::thread::scope(|s| {
        let runs: Vec<_> = operands
            .iter()
            .map(|(a, b)| {
                s.spawn(move || {
                    let args = GemmArgs::product(M, N, K, a, b);
                    let mut c = vec![f64::NAN; M * N];
                    let view = HostC::of_slice(&mut c, M, N, M).expect("C");
                    let out = host::gemm_c(&args, view, Engine::Native).expect("the GPU call");
                    (out.phases.pinned_ns, out.operands_pinned, out.handed_off, c)
                })
            })
            .collect();
        runs.into_iter()
            .map(|h| h.join().expect("a caller"))
            .collect()
    });
    // the first caller to hold the GPU grows its C staging, which the later ones are then
    // handed from the pool; none page-locks a buffer for its operands
    let grew = outcomes.iter().filter(|o| o.0 > 0).count();
    assert!(
        grew <= 1,
        "{grew} of {TEAM} calls page-locked memory in their first round"
    );
    for (i, ((_, apart, handed_off, c), (a, b))) in outcomes.iter().zip(&operands).enumerate() {
        assert!(
            *apart && *handed_off,
            "call {i} kept its copies in the lock"
        );
        let mut want = vec![0.0; M * N];
        ozaki_core::blas::gemm(&GemmArgs::product(M, N, K, a, b), &mut want);
        let worst = c
            .iter()
            .zip(&want)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 1e-12 * K as f64, "call {i}: C off by {worst}");
    }
}
