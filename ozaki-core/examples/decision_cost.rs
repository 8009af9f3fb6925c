//! Host time of one `auto` decision with the built-in H200 profile: uncached (a shape the
//! engine has not seen, so every route is priced and the reason written) and cached (the
//! same shapes again), side by side in one run, with the fully worded estimates
//! `ozaki explain` prints beside them for scale. Each figure is the fastest of `ROUNDS`
//! rounds (default 5; the machine may be shared) of `SHAPES` shapes (default 2000).
//! Usage: `decision_cost [profile]`.
use ozaki_core::engine::CallShape;
use ozaki_core::engine::choose::Engine;
use ozaki_core::engine::profile::Profile;
use std::time::Instant;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "h200".into());
    let profile = Profile::built_in(&name).expect("a built-in profile name");
    let (rounds, shapes) = (env("ROUNDS", 5), env("SHAPES", 2000));
    let shape = |round: u64, i: u64| CallShape::gemm(300 + i + round * shapes, 37 + i % 64, 700);
    let per = |t: Instant| t.elapsed().as_nanos() as f64 / shapes as f64;
    let (mut uncached, mut cached, mut worded) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for round in 0..rounds {
        // A fresh engine per round: every shape is new to it.
        let e = Engine::new(profile.clone(), 16);
        let t = Instant::now();
        for i in 0..shapes {
            std::hint::black_box(e.decide_loaded(&shape(round, i), None, || Some(14), 2));
        }
        uncached = uncached.min(per(t));
        let t = Instant::now();
        for i in 0..shapes {
            std::hint::black_box(e.decide_loaded(&shape(round, i), None, || Some(14), 2));
        }
        cached = cached.min(per(t));
        let t = Instant::now();
        for i in 0..shapes {
            std::hint::black_box(e.estimates_loaded(&shape(round, i), Some(14), 2));
        }
        worded = worded.min(per(t));
    }
    println!(
        "profile {name}: uncached decision {uncached:.0} ns, cached {cached:.0} ns, \
         worded estimates (ozaki explain) {worded:.0} ns"
    );
}
