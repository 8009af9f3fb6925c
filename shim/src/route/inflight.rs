//! Calls in flight in this process and the GPU's queue, for `OZAKI_ROUTE=auto`
//! (`ozaki_core::engine::load`).
//!
//! The calls in flight are the count every call already keeps for `fork`
//! ([`crate::lazy::calls_in_flight`]: each call is in it from its entry to its end, a call
//! `auto` decides runs its route inside that span); [`Flight::enter`] reads it at the
//! decision. [`Flight::reserve_gpu`] adds
//! the GPU time predicted for a call that may go to the GPU and reads the wait in one step,
//! [`Flight::settle_gpu`] keeps it there for a call sent to the GPU (at the class's measured
//! time) or takes it off, and the call's end takes it off again, so [`gpu_wait_s`] is the
//! predicted GPU time of the calls in flight on the GPU, the wait a new GPU call is priced
//! with.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

static GPU_QUEUE_NS: AtomicU64 = AtomicU64::new(0);

/// The calls in flight the process's recent timed calls found at their decision or their
/// end, decaying by one per call noted ([`note_overlap`]).
static RECENT_OVERLAP: AtomicU32 = AtomicU32::new(1);

/// One call from its decision to its end (drop).
pub struct Flight {
    concurrent: u32,
    team: u32,
    queued_ns: u64,
}

impl Flight {
    /// This call's flight, decided now: `concurrent` is the calls in flight, itself
    /// included (at least 1).
    pub fn enter() -> Flight {
        Flight::enter_in_team(1)
    }

    /// [`Flight::enter`] for a call made from inside an OpenMP team of `team` threads
    /// (`super::openmp_team`), counted with at least that many calls in flight: the team's
    /// other threads share the cores with it and, running the same loop, the GPU.
    pub fn enter_in_team(team: u32) -> Flight {
        Flight {
            concurrent: crate::lazy::calls_in_flight().max(team).max(1),
            team: team.max(1),
            queued_ns: 0,
        }
    }

    /// Calls in flight when this one came, itself included.
    pub fn concurrent(&self) -> u32 {
        self.concurrent
    }

    /// The OpenMP team the call was made from (1: none, or not asked).
    pub fn team(&self) -> u32 {
        self.team
    }

    /// Puts `seconds` of predicted GPU time on the queue, before this call's route is
    /// known, and returns the predicted GPU time that was queued before it: the wait this
    /// call would have behind the GPU. Reserving and reading in one step keeps callers that
    /// decide at the same moment (an OpenMP team entering its loop) from each finding the
    /// queue empty; [`Flight::settle_gpu`] then sets what this call really queues.
    pub fn reserve_gpu(&mut self, seconds: f64) -> f64 {
        let ns = (seconds.max(0.0) * 1e9) as u64;
        self.queued_ns += ns;
        GPU_QUEUE_NS.fetch_add(ns, Ordering::Relaxed) as f64 * 1e-9
    }

    /// This call's GPU time on the queue, until it ends: `seconds` (0 for a call that does
    /// not run on the GPU), in place of what [`Flight::reserve_gpu`] put there.
    pub fn settle_gpu(&mut self, seconds: f64) {
        let ns = (seconds.max(0.0) * 1e9) as u64;
        if ns >= self.queued_ns {
            GPU_QUEUE_NS.fetch_add(ns - self.queued_ns, Ordering::Relaxed);
        } else {
            GPU_QUEUE_NS.fetch_sub(self.queued_ns - ns, Ordering::Relaxed);
        }
        self.queued_ns = ns;
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if self.queued_ns > 0 {
            GPU_QUEUE_NS.fetch_sub(self.queued_ns, Ordering::Relaxed);
        }
    }
}

/// Notes the calls in flight a timed call found at its decision or its end, whichever was
/// more (read only for timed calls: the small calls that dominate call counts pay nothing).
pub fn note_overlap(overlap: u32) {
    let _ = RECENT_OVERLAP.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
        Some(decayed(r, overlap))
    });
}

/// The recent overlap `r` after a call that saw `overlap`.
fn decayed(r: u32, overlap: u32) -> u32 {
    overlap.max(r.saturating_sub(1)).max(1)
}

/// The calls in flight the process's recent timed calls saw: the largest noted, less one
/// for each call noted since (at least 1). A call that finds itself alone may be the first
/// of an OpenMP team coming in behind it; this is how many ran beside the last burst.
pub fn recent_overlap() -> u32 {
    RECENT_OVERLAP.load(Ordering::Relaxed).max(1)
}

/// Predicted seconds of GPU work in flight: what a new GPU call waits behind.
pub fn gpu_wait_s() -> f64 {
    GPU_QUEUE_NS.load(Ordering::Relaxed) as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recent overlap keeps a burst's count for as many calls as it had, then falls
    /// back one call at a time, never below 1.
    #[test]
    fn the_recent_overlap_decays_one_call_at_a_time() {
        assert_eq!(decayed(1, 16), 16);
        assert_eq!(decayed(16, 1), 15);
        assert_eq!(decayed(16, 12), 15);
        assert_eq!(decayed(1, 0), 1);
        let mut r = 16;
        for _ in 0..20 {
            r = decayed(r, 1);
        }
        assert_eq!(r, 1);
    }

    /// The queue is the process's: these tests take turns on it.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    use crate::lazy::InFlight;

    /// Two calls deciding at once: the second's reservation sees the first's GPU time as
    /// its wait; a call settled off the GPU leaves nothing on the queue, one settled on it
    /// leaves its own time until it ends.
    #[test]
    fn reservations_are_seen_by_the_next_caller_and_settled() {
        let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let mut a = Flight::enter();
        let mut b = Flight::enter();
        let wait_a = a.reserve_gpu(1000.0);
        let wait_b = b.reserve_gpu(0.5);
        // (other tests of this process may hold a little GPU time of their own meanwhile)
        assert!(wait_b >= 1000.0 && wait_a < 1000.0, "{wait_a} {wait_b}");
        a.settle_gpu(0.0);
        let now = gpu_wait_s();
        assert!(
            now < 1000.0,
            "the call sent to the vendor left the queue: {now}"
        );
        b.settle_gpu(100.0);
        assert!(gpu_wait_s() >= 100.0);
        drop(b);
        assert!(gpu_wait_s() < 100.0, "the call's end took its time off");
    }

    /// The engine's count is the calls counted in flight for `fork`: one counter per call.
    #[test]
    fn flights_see_the_calls_in_flight_and_queue_while_they_live() {
        let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        // (other unit tests may hold calls: compare with what was there before)
        let _first = InFlight::begin();
        let a = Flight::enter();
        let second = InFlight::begin();
        let mut b = Flight::enter();
        assert!(b.concurrent() > a.concurrent());
        let before = gpu_wait_s();
        b.reserve_gpu(0.25);
        assert!(gpu_wait_s() >= before + 0.25 - 1e-9);
        drop(b);
        drop(second);
        let c = Flight::enter();
        assert!(c.concurrent() < a.concurrent() + 1, "the second call ended");
    }
}
