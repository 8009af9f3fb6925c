//! What else runs in the process when a call is decided: the calls in flight (each vendor
//! call gets only its share of the CPU) and the GPU's queue (one device shared by all
//! callers).
//!
//! A program that calls the BLAS from many threads at once (PySCF from 16 OpenMP threads)
//! gets from each vendor call a fraction of the machine the profile measured it on: priced
//! alone, that program's vendor calls took 23x their predicted total. [`vendor_share`]
//! prices a call at the share it gets; decisions are cached per [`concurrency_class`], so a
//! repeated shape still costs one lookup. The GPU is priced alone in the cached decision and
//! the wait for the calls already queued on it ([`keeps_gpu`]) is checked per call.
//!
//! Where the shim runs vendor calls made beside others at their share of the vendor's
//! threads (its `OZAKI_VENDOR_THREADS=team`, counting a call's OpenMP team in flight, or
//! `share`), the engine prices such a call at the rate for that many threads, alone
//! (`choose::Engine::with_vendor_threads_shared`): each caller then has cores of its own, and
//! a call sent to the GPU frees cores that no other call takes up. The per-class corrections
//! (`correct`) price such a vendor call at what it measures, and the GPU start counts each
//! call's gain at its share of the wall clock (the shim's `route::start::ledger_gain`), but
//! the per-call choice cannot see that a parallel loop ends with its slowest call.

use super::profile::{ConcurrentRate, CpuProfile};

/// How the vendor BLAS is priced for one call under concurrency.
#[derive(Debug, Clone, PartialEq)]
pub struct VendorShare {
    /// The thread count whose measured work model prices the call.
    pub model_threads: u32,
    /// Factor on that model's work terms (1 alone).
    pub slowdown: f64,
    /// How the factor was derived (for `ozaki explain` and the trace reason).
    pub how: String,
}

/// The vendor pricing for a call made while `concurrent` calls (itself included) are in
/// flight, with the BLAS running `threads` threads:
/// - alone: the model measured at `threads`, unchanged;
/// - with the profile's measured concurrency for the nearest thread setting: its slowdown at
///   `concurrent` callers (log-linear between measured counts, proportional to the count
///   beyond the last one);
/// - otherwise each caller gets `threads / concurrent` cores: the model measured at the
///   thread count nearest that share, stretched by measured threads / share when the share
///   is smaller (a work model measured at 16 threads runs 16x longer on one core).
pub fn vendor_share(cpu: &CpuProfile, threads: u32, concurrent: u32) -> VendorShare {
    // 0 is the library's default thread count: the profile's first work model, measured at
    // that default (pricing it at 1 thread would make a 16-thread vendor look 16x slower).
    let threads = match threads {
        0 => cpu.model_for(0).map_or(1, |(t, _)| t.max(1)),
        t => t,
    };
    if concurrent <= 1 {
        return VendorShare {
            model_threads: threads,
            slowdown: 1.0,
            how: "alone".into(),
        };
    }
    if let Some(s) = measured_slowdown(&cpu.concurrency, threads, concurrent) {
        return VendorShare {
            model_threads: threads,
            slowdown: s,
            how: "measured under concurrent callers by ozaki calibrate".into(),
        };
    }
    let share = threads as f64 / concurrent as f64;
    let want = share.round().max(1.0) as u32;
    let used = cpu.model_for(want).map_or(want, |(t, _)| t.max(1));
    VendorShare {
        model_threads: want,
        slowdown: (used as f64 / share).max(1.0),
        how: format!(
            "default model: {share:.2} of {threads} cores each, priced from the {used}-thread rate"
        ),
    }
}

/// The measured slowdown at `callers`, from the points of the thread setting nearest
/// `threads`; `None` when nothing was measured.
fn measured_slowdown(points: &[ConcurrentRate], threads: u32, callers: u32) -> Option<f64> {
    let near = points
        .iter()
        .map(|p| p.threads)
        .min_by_key(|&t| t.abs_diff(threads))?;
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.threads == near && p.callers >= 1 && p.slowdown.is_finite())
        .map(|p| (p.callers as f64, p.slowdown.max(f64::MIN_POSITIVE)))
        .collect();
    pts.push((1.0, 1.0));
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 == b.0);
    let c = callers as f64;
    let last = *pts.last()?;
    if c >= last.0 {
        return Some(last.1 * c / last.0);
    }
    let i = pts.iter().position(|p| p.0 >= c)?;
    let (lo, hi) = (pts[i - 1], pts[i]);
    let t = (c.ln() - lo.0.ln()) / (hi.0.ln() - lo.0.ln());
    Some((lo.1.ln() + t * (hi.1.ln() - lo.1.ln())).exp())
}

/// The concurrency a decision is priced and cached at: calls in flight rounded down to a
/// power of two (1, 2, 4, 8, ...), so that a program whose in-flight count wanders between
/// 9 and 15 re-prices nothing.
pub fn concurrency_class(in_flight: u32) -> u32 {
    let c = in_flight.max(1);
    1 << (31 - c.leading_zeros())
}

/// Whether a call the cached decision sends to the GPU still goes there once it waits
/// `wait_s` behind the calls queued on the GPU: the GPU time plus the wait must still beat
/// the vendor's by the switch margin that chose the GPU.
pub fn keeps_gpu(vendor_s: f64, gpu_s: f64, wait_s: f64, margin: f64) -> bool {
    wait_s.is_nan()
        || wait_s <= 0.0
        || !vendor_s.is_finite()
        || vendor_s >= margin * (gpu_s + wait_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::profile::Profile;

    #[test]
    fn alone_nothing_changes_and_sixteen_callers_on_sixteen_threads_get_one_core_each() {
        let mut p = Profile::built_in("h200").unwrap();
        // the default share model: without measured concurrency
        p.cpu.concurrency.clear();
        let alone = vendor_share(&p.cpu, 16, 1);
        assert_eq!((alone.model_threads, alone.slowdown), (16, 1.0));
        // The built-in profile measured 16 threads and 1: one core each is the 1-thread rate.
        let s = vendor_share(&p.cpu, 16, 16);
        assert_eq!((s.model_threads, s.slowdown), (1, 1.0), "{s:?}");
        // More callers than cores: each gets half a core.
        assert!((vendor_share(&p.cpu, 16, 32).slowdown - 2.0).abs() < 1e-9);
        // With the 16-thread rate alone, one core each is 16x slower, four each 4x.
        p.cpu.blas.retain(|b| b.threads == 16);
        let s = vendor_share(&p.cpu, 16, 16);
        assert!((s.slowdown - 16.0).abs() < 1e-9, "{s:?}");
        assert!((vendor_share(&p.cpu, 16, 4).slowdown - 4.0).abs() < 1e-9);
    }

    #[test]
    fn the_librarys_default_thread_count_is_priced_at_the_default_model() {
        let p = Profile::built_in("h200").unwrap();
        let default = p.cpu.blas[0].threads;
        assert!(
            default > 1,
            "the built-in profile measured its default first"
        );
        let s = vendor_share(&p.cpu, 0, 1);
        assert_eq!((s.model_threads, s.slowdown), (default, 1.0), "{s:?}");
        // and under concurrent callers, the same as naming that count
        assert_eq!(vendor_share(&p.cpu, 0, 4), vendor_share(&p.cpu, default, 4));
    }

    #[test]
    fn measured_concurrency_interpolates_and_extrapolates() {
        let mut p = Profile::built_in("h200").unwrap();
        p.cpu.concurrency = vec![
            ConcurrentRate {
                threads: 16,
                callers: 2,
                slowdown: 1.5,
            },
            ConcurrentRate {
                threads: 16,
                callers: 8,
                slowdown: 6.0,
            },
        ];
        let at = |c| vendor_share(&p.cpu, 16, c).slowdown;
        assert!((at(2) - 1.5).abs() < 1e-12);
        assert!((at(8) - 6.0).abs() < 1e-12);
        assert!(at(4) > 1.5 && at(4) < 6.0, "{}", at(4));
        assert!(
            (at(16) - 12.0).abs() < 1e-12,
            "proportional beyond the last point"
        );
    }

    #[test]
    fn classes_are_powers_of_two() {
        let got: Vec<u32> = [0, 1, 2, 3, 4, 7, 8, 15, 16, 17]
            .iter()
            .map(|&c| concurrency_class(c))
            .collect();
        assert_eq!(got, vec![1, 1, 2, 2, 4, 4, 8, 8, 16, 16]);
    }

    #[test]
    fn a_long_gpu_queue_sends_the_call_back_to_the_vendor() {
        assert!(keeps_gpu(10.0, 1.0, 0.0, 1.2));
        assert!(keeps_gpu(10.0, 1.0, 5.0, 1.2));
        assert!(!keeps_gpu(10.0, 1.0, 8.0, 1.2));
    }
}
