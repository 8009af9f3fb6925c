//! A crew of copy threads kept for a stream of jobs: the upload ring's copies into pinned
//! slots ([`super::upload`]) and the early writer's copies out of C's ring
//! ([`crate::early_write`]) hand it one job after another. Spawning the threads once per
//! stream instead of once per job matters because the jobs are small: a 16 MiB piece of C
//! takes about 0.3 ms to write on the H200 host, about what spawning 16 threads costs.

use std::sync::{Barrier, Mutex};

/// The job being worked on; `None` ends the workers.
struct Shared<J> {
    job: Mutex<Option<J>>,
    start: Barrier,
    done: Barrier,
}

/// Runs `lead` with a `run` function that has `workers` threads (the calling one included)
/// each do its share of a job, `work(job, worker, workers)`, and returns once all did. The
/// helper threads exist until `lead` returns (or unwinds).
pub(crate) fn crew<J, R>(
    workers: usize,
    work: &(dyn Fn(J, usize, usize) + Sync),
    lead: impl FnOnce(&mut dyn FnMut(J)) -> R,
) -> R
where
    J: Copy + Send,
{
    let n = workers.max(1);
    if n == 1 {
        return lead(&mut |j| work(j, 0, 1));
    }
    let sh = Shared {
        job: Mutex::new(None),
        start: Barrier::new(n),
        done: Barrier::new(n),
    };
    /// Ends the workers however `lead` leaves, so the scope can join them.
    struct End<'a, J>(&'a Shared<J>);
    impl<J> Drop for End<'_, J> {
        fn drop(&mut self) {
            *self.0.job.lock().unwrap_or_else(|p| p.into_inner()) = None;
            self.0.start.wait();
        }
    }
    std::thread::scope(|s| {
        for w in 1..n {
            let sh = &sh;
            s.spawn(move || {
                loop {
                    sh.start.wait();
                    let Some(job) = *sh.job.lock().unwrap_or_else(|p| p.into_inner()) else {
                        break;
                    };
                    work(job, w, n);
                    sh.done.wait();
                }
            });
        }
        let _end = End(&sh);
        lead(&mut |job| {
            *sh.job.lock().unwrap_or_else(|p| p.into_inner()) = Some(job);
            sh.start.wait();
            work(job, 0, n);
            sh.done.wait();
        })
    })
}

/// Worker `w` of `n`'s part `[lo, hi)` of `len` items, in consecutive ranges.
pub(crate) fn share(len: usize, w: usize, n: usize) -> (usize, usize) {
    let per = len.div_ceil(n.max(1));
    ((w * per).min(len), ((w + 1) * per).min(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every job is done completely (all shares) before the next starts and before `run`
    /// returns, by the requested number of distinct threads; the crew ends when the lead does.
    #[test]
    fn each_job_is_done_by_all_workers_before_run_returns() {
        for workers in [1, 3, 8] {
            let done = AtomicUsize::new(0);
            let threads = Mutex::new(std::collections::HashSet::new());
            let work = |job: usize, w: usize, n: usize| {
                assert_eq!(n, workers);
                threads.lock().unwrap().insert(std::thread::current().id());
                let (lo, hi) = share(job, w, n);
                done.fetch_add(hi - lo, Ordering::SeqCst);
            };
            let sum = crew(workers, &work, |run| {
                let mut sum = 0;
                for job in [10, 0, 7, 1000] {
                    run(job);
                    sum += job;
                    assert_eq!(done.load(Ordering::SeqCst), sum, "job {job} unfinished");
                }
                sum
            });
            assert_eq!(sum, 1017);
            assert_eq!(threads.lock().unwrap().len(), workers);
        }
    }

    /// Shares cover 0..len exactly, in order, whatever the worker count.
    #[test]
    fn shares_cover_the_range_in_order() {
        for (len, n) in [(0, 3), (1, 4), (10, 3), (64, 8), (7, 1)] {
            let mut next = 0;
            for w in 0..n {
                let (lo, hi) = share(len, w, n);
                assert_eq!(lo, next.min(len));
                assert!(hi >= lo);
                next = hi;
            }
            assert_eq!(next, len);
        }
    }
}
