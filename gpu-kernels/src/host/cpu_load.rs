//! How many of the process's other threads are running when a host-resident call begins,
//! so that its copy and write-back pools take only the cores those threads leave idle.
//!
//! Why: a vendor BLAS keeps its worker threads spinning for a while after each call
//! (OpenBLAS about 0.1 s), and a program's other BLAS (SciPy's own OpenBLAS under LAPACK)
//! does the same out of the shim's sight. A GPU call made then put 16 copy threads beside 15
//! spinning ones, and its copies, split evenly and waited for as a whole, ran at the pace of
//! the threads the scheduler kept waiting: the same LOBPCG products took 17-63 ms within
//! 0.1 s of a vendor call against 5-7 ms otherwise (BENCHMARKS.md, "Real programs under the
//! shim"). A pool no larger than the idle cores, the caller's own included (it waits for
//! the pool), copies at the speed of its threads.
//!
//! The count comes from `/proc/self/task/*/stat` (state `R`: running or runnable), read once
//! per call after the GPU lock is taken: the process's own threads, not the machine's (in a
//! container `/proc/loadavg` counts the whole host). Where `/proc` cannot be read the pools
//! keep their sizes.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Running threads of the process besides the calling one, at the last [`note`].
static OTHERS: AtomicUsize = AtomicUsize::new(0);

/// Smallest call (bytes of its operands and C) whose pools are sized by a count: smaller
/// ones copy each piece on one thread anyway (`super::upload`), and a count costs about
/// 10 us per thread of the process (`what_a_count_costs` below).
const COUNTED_BYTES: usize = 8 << 20;

/// Counts the process's running threads other than the caller and keeps the count for the
/// pools of the call that follows ([`others_running`]), for a call moving `bytes` (a smaller
/// call than [`COUNTED_BYTES`] keeps 0: its pools as they would be).
pub(crate) fn note(bytes: usize) {
    let n = if bytes < COUNTED_BYTES {
        0
    } else {
        running_threads().unwrap_or(0)
    };
    OTHERS.store(n, Ordering::Relaxed);
    tracing::debug!(
        others_running = n,
        "host-resident call: threads of the process running"
    );
}

/// Sets the kept count, as a [`note`] that found `n` threads running.
#[cfg(test)]
pub(crate) fn set_others_running(n: usize) {
    OTHERS.store(n, Ordering::Relaxed);
}

/// The count kept by the last [`note`] (0 before the first one).
pub(crate) fn others_running() -> usize {
    OTHERS.load(Ordering::Relaxed)
}

/// Threads of this process in state `R` other than the calling one; `None` when
/// `/proc/self/task` cannot be read. Each thread's stat is read into one stack buffer
/// through the task directory's descriptor (no path or buffer allocated per thread).
fn running_threads() -> Option<usize> {
    use std::os::unix::ffi::OsStrExt;
    let me = gettid();
    let task = std::fs::File::open("/proc/self/task").ok()?;
    let dir = std::os::fd::AsRawFd::as_raw_fd(&task);
    let mut n = 0;
    let mut name = [0u8; 40];
    let mut buf = [0u8; 512];
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let Ok(entry) = entry else { continue };
        let tid = entry.file_name();
        let tid = tid.as_bytes();
        if tid.len() + 6 > name.len() || std::str::from_utf8(tid).ok()?.parse() == Ok(me) {
            continue;
        }
        name[..tid.len()].copy_from_slice(tid);
        name[tid.len()..tid.len() + 6].copy_from_slice(b"/stat\0");
        // SAFETY: `name` is a NUL-terminated relative path, `dir` an open directory.
        let fd =
            unsafe { libc::openat(dir, name.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
        // a thread that ended since the listing has no stat: not running
        if fd < 0 {
            continue;
        }
        // SAFETY: `buf` is writable for its length; `fd` was opened above and is closed here.
        let len = unsafe {
            let len = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            len
        };
        if len > 0 && state(&buf[..len as usize]) == Some(b'R') {
            n += 1;
        }
    }
    Some(n)
}

/// The state letter of a `/proc/.../stat` line: `tid (comm) S ...`, where `comm` may hold
/// spaces and parentheses, so the state follows the last `)`.
fn state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

/// The calling thread's id (Linux `gettid`).
fn gettid() -> libc::c_long {
    // SAFETY: the gettid system call takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state is the letter after the last `)`, whatever the thread's name holds.
    #[test]
    fn the_state_follows_the_last_parenthesis() {
        assert_eq!(state(b"42 (python3) R 1 42 42 0"), Some(b'R'));
        assert_eq!(state(b"43 (a) b (c)) S 1 2"), Some(b'S'));
        assert_eq!(state(b"44 (x y) D 0"), Some(b'D'));
        assert_eq!(state(b"45 (cut"), None);
        assert_eq!(state(b"46 (cut)"), None);
    }

    /// Threads spinning beside the caller are counted (sleeping ones are not: the count
    /// stays far below the threads there are).
    #[test]
    fn spinning_threads_are_counted() {
        use std::sync::atomic::AtomicBool;
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
            }
            for _ in 0..40 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            let seen = running_threads().expect("/proc/self/task is readable on Linux");
            stop.store(true, Ordering::Relaxed);
            assert!(seen >= 2, "two spinning threads, {seen} counted");
            assert!(
                seen < 40,
                "{seen} counted among 42 threads, 40 of them asleep"
            );
        });
    }

    /// What a count costs among 64 threads (printed; run with `--ignored --nocapture`).
    #[test]
    #[ignore]
    fn what_a_count_costs() {
        use std::sync::atomic::AtomicBool;
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let parked: Vec<_> = (0..63)
                .map(|_| {
                    s.spawn(|| {
                        while !stop.load(Ordering::Relaxed) {
                            std::thread::park();
                        }
                    })
                    .thread()
                    .clone()
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(50));
            let t = std::time::Instant::now();
            for _ in 0..100 {
                running_threads();
            }
            println!("{:?} per count", t.elapsed() / 100);
            stop.store(true, Ordering::Relaxed);
            for h in &parked {
                h.unpark();
            }
        });
    }
}
