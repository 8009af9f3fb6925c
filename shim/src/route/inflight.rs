//! Calls in flight in this process and the GPU's queue, for `OZAKI_ROUTE=auto`
//! (`ozaki_core::engine::load`): two relaxed atomics, touched only by calls the engine
//! decides.
//!
//! [`Flight::enter`] counts a call from its decision to its end; [`Flight::queue_gpu`] adds
//! the GPU time predicted for a call sent to the GPU, and the call's end takes it off again,
//! so [`gpu_wait_s`] is the predicted GPU time of the calls in flight on the GPU, the wait a
//! new GPU call is priced with.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

static IN_FLIGHT: AtomicU32 = AtomicU32::new(0);
static GPU_QUEUE_NS: AtomicU64 = AtomicU64::new(0);

/// One call from its decision to its end (drop).
pub struct Flight {
    concurrent: u32,
    queued_ns: u64,
}

impl Flight {
    /// Counts this call in; `concurrent` is then the calls in flight, itself included.
    pub fn enter() -> Flight {
        Flight {
            concurrent: IN_FLIGHT.fetch_add(1, Ordering::Relaxed).saturating_add(1),
            queued_ns: 0,
        }
    }

    /// Calls in flight when this one came, itself included.
    pub fn concurrent(&self) -> u32 {
        self.concurrent
    }

    /// Puts `seconds` of predicted GPU time on the queue until this call ends.
    pub fn queue_gpu(&mut self, seconds: f64) {
        let ns = (seconds.max(0.0) * 1e9) as u64;
        self.queued_ns += ns;
        GPU_QUEUE_NS.fetch_add(ns, Ordering::Relaxed);
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
        if self.queued_ns > 0 {
            GPU_QUEUE_NS.fetch_sub(self.queued_ns, Ordering::Relaxed);
        }
    }
}

/// Predicted seconds of GPU work in flight: what a new GPU call waits behind.
pub fn gpu_wait_s() -> f64 {
    GPU_QUEUE_NS.load(Ordering::Relaxed) as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flights_count_and_queue_while_they_live() {
        // (other unit tests may hold flights: compare with what was there before)
        let a = Flight::enter();
        let mut b = Flight::enter();
        assert!(b.concurrent() > a.concurrent());
        let before = gpu_wait_s();
        b.queue_gpu(0.25);
        assert!(gpu_wait_s() >= before + 0.25 - 1e-9);
        drop(b);
        let c = Flight::enter();
        assert_eq!(c.concurrent(), a.concurrent() + 1);
    }
}
