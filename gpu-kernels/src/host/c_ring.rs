//! C's download ring: with beta = 0 (early writes, [`crate::host::early_write`]) each block of C
//! comes home in pieces through a few pinned slots instead of a pinned buffer the size of C.
//!
//! Why: that buffer grows with the largest C a process has seen, and growing it is
//! `cuMemHostAlloc` of the whole C: with main's staging the first 8192^2 product of a NumPy
//! session took 234-328 ms, 214-308 ms of it in transfers, against 44-58 ms for the next
//! ones, and every new larger size paid again (BENCHMARKS.md, "C without full-size
//! pinned staging"). The ring's size comes from the tuning ([`Tuning::c_ring`]),
//! not from C.
//!
//! The protocol: the download thread takes a free slot for each piece (whole columns of a
//! block, [`CBlock::pieces`]), waiting while every slot is full; it copies the piece into
//! the slot, records the slot's event and hands the slot on ([`fill_slot`]). The writer
//! threads take the filled slots in order; each writes its slot into the caller's C once the
//! slot's event fired and only then gives the slot back ([`empty_slots`]). Before the call
//! is accepted the writer writes nothing and gives nothing back, so the download waits with
//! the remaining blocks still on the device, which holds all of C anyway (the route's
//! contract is unchanged). A writer that will not write (the call was refused, or a write
//! failed) gives every slot back unwritten, so the download never waits for a slot that
//! cannot come.
//!
//! With beta != 0 C is an input of the vendor fallback and may be written only after the
//! whole call succeeded: C keeps its full staging there (`C_SLOT` in `super`).
//!
//! [`Tuning::c_ring`]: super::Tuning::c_ring

use super::grid::CBlock;
use super::tuning::tuning;
use super::{CallResources, Handle, SendPtr};
use crate::device::Gpu;
use crate::error::GpuError;
use cudarc::driver::sys;
use std::sync::mpsc::{Receiver, Sender, channel};

/// Staging index of the ring's first slot (the upload ring uses 0, 1 and 3, C's full
/// staging 2).
const FIRST: usize = 4;

/// The ring of one call: its pinned slots (kept by the GPU across calls, grow-only), one
/// event per slot recorded after the copy into it (made for the call), and the most bytes a
/// piece may span.
pub(crate) struct CRing {
    slots: Vec<SendPtr<u8>>,
    ready: Vec<Handle<sys::CUevent>>,
    pub(crate) piece_bytes: usize,
}

impl CRing {
    /// The ring for a C with `rows` rows: [`Tuning::c_ring`] slots, each holding at least one
    /// column. Its events belong to `res` (destroyed after the call's streams drained).
    ///
    /// [`Tuning::c_ring`]: super::Tuning::c_ring
    pub(super) fn new(
        gpu: &mut Gpu,
        rows: usize,
        res: &mut CallResources,
    ) -> Result<CRing, GpuError> {
        let (count, bytes) = tuning().c_ring;
        let piece_bytes = bytes.max(8 * rows);
        let mut ring = CRing {
            slots: Vec::new(),
            ready: Vec::new(),
            piece_bytes,
        };
        for i in 0..count.max(1) {
            ring.slots
                .push(SendPtr(gpu.staging(FIRST + i, piece_bytes)?));
            ring.ready.push(Handle(res.sync_event()?));
        }
        Ok(ring)
    }

    /// Number of slots.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Host address of slot `i`.
    pub(crate) fn slot(&self, i: usize) -> *mut u8 {
        self.slots[i].0
    }

    /// Event recorded after the copy into slot `i`.
    pub(crate) fn ready(&self, i: usize) -> sys::CUevent {
        self.ready[i].0
    }
}

/// A filled slot on its way to the writer: `block` (a piece of a block of C) lies at the
/// slot's first byte, contiguous (leading dimension = its rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Filled {
    pub(crate) slot: usize,
    pub(crate) block: CBlock,
}

/// The download thread's end of the free slots.
pub(crate) struct Taker(Receiver<usize>);

/// The writer's end: gives slots back once their contents are no longer needed.
pub(crate) struct Giver(Sender<usize>);

/// Free-slot ends of a ring of `n` slots, all free. The one [`Giver`] goes to the writer:
/// once it is dropped, a download waiting for a slot stops instead of waiting for ever.
pub(crate) fn free_slots(n: usize) -> (Taker, Giver) {
    let (tx, rx) = channel();
    for i in 0..n {
        let _ = tx.send(i);
    }
    (Taker(rx), Giver(tx))
}

/// Download side: takes a free slot for `block` (waiting while every slot is full), has
/// `fill` copy it in (and record the slot's event), and hands the slot on to the writer.
pub(crate) fn fill_slot(
    free: &Taker,
    block: CBlock,
    filled: &Sender<Filled>,
    fill: impl FnOnce(usize) -> Result<(), GpuError>,
) -> Result<(), GpuError> {
    let ended = || GpuError::Cuda("early writer ended early".into());
    let slot = free.0.recv().map_err(|_| ended())?;
    fill(slot)?;
    filled.send(Filled { slot, block }).map_err(|_| ended())
}

/// Writer side: `threads` threads take the filled slots in the order they were filled; each
/// writes its slot with `write` and then gives it back. Once a `write` returned false
/// (nothing more may be written), every later slot is only given back. Each `Some(n)` that
/// arrives on `more` grows the crew to `n` threads (the call's other host work is done and
/// its cores are free); the crew stops growing when `more`'s sender is gone. Returns when the
/// download side is done, every slot taken was given back and `more`'s sender is gone.
///
/// Each piece is written whole by one thread, so the threads never wait for each other: a
/// crew of threads sharing out every piece (a barrier per piece) made NumPy's calls 3-47 ms
/// slower than main (NumPy's C is freshly allocated memory on every call, faulted in by the
/// writes), while this pool made them as fast or faster (BENCHMARKS.md, "C without
/// full-size pinned staging").
pub(crate) fn empty_slots(
    filled: Receiver<Filled>,
    free: Giver,
    threads: usize,
    more: Option<Receiver<Option<usize>>>,
    write: &(dyn Fn(&Filled) -> bool + Sync),
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let filled = std::sync::Mutex::new(filled);
    let writing = AtomicBool::new(true);
    let free = &free;
    let run = || {
        loop {
            let next = filled.lock().unwrap_or_else(|p| p.into_inner()).recv();
            let Ok(f) = next else { break };
            if writing.load(Ordering::SeqCst) && !write(&f) {
                writing.store(false, Ordering::SeqCst);
            }
            let _ = free.0.send(f.slot);
        }
    };
    let run = &run;
    std::thread::scope(|s| {
        // Started under the spawn hook (the shim's blocks the program's signals in them).
        let hire = |n: usize| {
            ozaki_core::spawn::spawning(|| {
                for _ in 0..n {
                    s.spawn(run);
                }
            })
        };
        hire(threads.max(1) - 1);
        if let Some(more) = more {
            let mut crew = threads.max(1);
            ozaki_core::spawn::spawning(|| {
                s.spawn(move || {
                    while let Ok(ask) = more.recv() {
                        let n = ask.unwrap_or(0);
                        if n > crew {
                            hire(n - crew);
                            crew = n;
                        }
                    }
                })
            });
        }
        run();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    fn piece(j: usize) -> CBlock {
        CBlock {
            col0: j,
            rows: 10,
            cols: 1,
        }
    }

    /// A slow writer (one or three threads) and a fast download through 3 slots: never more
    /// than 3 pieces filled and not yet written, no slot filled again before its contents
    /// were written, every piece written once, and with one writer thread in download order.
    #[test]
    fn the_ring_is_bounded_in_order_and_never_overwrites_an_unwritten_slot() {
        const SLOTS: usize = 3;
        for threads in [1, 3] {
            let (free, giver) = free_slots(SLOTS);
            let (tx, rx) = channel();
            let busy: Vec<AtomicBool> = (0..SLOTS).map(|_| AtomicBool::new(false)).collect();
            let outstanding = AtomicUsize::new(0);
            let most = AtomicUsize::new(0);
            let written = std::sync::Mutex::new(Vec::new());
            std::thread::scope(|s| {
                let (busy, outstanding, most) = (&busy, &outstanding, &most);
                s.spawn(move || {
                    for j in 0..40 {
                        fill_slot(&free, piece(j), &tx, |slot| {
                            assert!(
                                !busy[slot].swap(true, Ordering::SeqCst),
                                "slot {slot} filled again before it was written"
                            );
                            let now = outstanding.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            Ok(())
                        })
                        .expect("writer alive");
                    }
                });
                empty_slots(rx, giver, threads, None, &|f| {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    written.lock().unwrap().push(f.block);
                    outstanding.fetch_sub(1, Ordering::SeqCst);
                    busy[f.slot].store(false, Ordering::SeqCst);
                    true
                });
            });
            let mut written = written.into_inner().unwrap();
            if threads > 1 {
                written.sort_by_key(|b| b.col0);
            }
            assert_eq!(written, (0..40).map(piece).collect::<Vec<_>>());
            assert_eq!(
                most.load(Ordering::SeqCst),
                SLOTS,
                "the ring was not used fully"
            );
        }
    }

    /// Before the writer starts, the download fills every slot and then waits: it does not
    /// run ahead of the ring (blocks stay on the device until the call is accepted).
    #[test]
    fn the_download_waits_while_every_slot_is_full() {
        let (free, giver) = free_slots(2);
        let (tx, rx) = channel();
        let filled = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let filled = &filled;
            let down = s.spawn(move || {
                for j in 0..5 {
                    fill_slot(&free, piece(j), &tx, |_| {
                        filled.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .expect("writer alive");
                }
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert_eq!(filled.load(Ordering::SeqCst), 2, "ran ahead of the ring");
            assert!(!down.is_finished());
            // the call is accepted: the writer empties the slots and the download finishes
            let seen = AtomicUsize::new(0);
            empty_slots(rx, giver, 2, None, &|_| {
                seen.fetch_add(1, Ordering::SeqCst);
                true
            });
            assert_eq!(seen.load(Ordering::SeqCst), 5);
        });
    }

    /// A writer that stops writing (refused call, failed write) still gives every slot back,
    /// so the download completes; once the writer is gone, a download waiting for a slot
    /// gets an error instead of waiting for ever.
    #[test]
    fn a_writer_that_stops_still_frees_the_download() {
        let (free, giver) = free_slots(2);
        let (tx, rx) = channel();
        let writes = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(move || {
                for j in 0..6 {
                    fill_slot(&free, piece(j), &tx, |_| Ok(())).expect("slots come back");
                }
            });
            // the second write fails: nothing after it is written
            empty_slots(rx, giver, 1, None, &|_| {
                writes.fetch_add(1, Ordering::SeqCst) + 1 < 2
            });
        });
        assert_eq!(writes.load(Ordering::SeqCst), 2);

        let (free, giver) = free_slots(1);
        let (tx, rx) = channel();
        fill_slot(&free, piece(0), &tx, |_| Ok(())).unwrap();
        drop((giver, rx));
        assert!(fill_slot(&free, piece(1), &tx, |_| Ok(())).is_err());
    }

    /// A crew of one grows to three when asked: three slots are then written at once, and
    /// the writer returns only once the asking side is gone.
    #[test]
    fn the_crew_grows_when_asked() {
        let (free, giver) = free_slots(4);
        let (tx, rx) = channel();
        let (ask, more) = channel();
        let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            s.spawn(move || {
                for j in 0..8 {
                    fill_slot(&free, piece(j), &tx, |_| Ok(())).expect("writer alive");
                    if j == 1 {
                        ask.send(Some(3)).unwrap();
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(30));
                drop(ask);
            });
            empty_slots(rx, giver, 1, Some(more), &|_| {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
                now.fetch_sub(1, Ordering::SeqCst);
                true
            });
        });
        assert_eq!(most.load(Ordering::SeqCst), 3, "the crew did not grow to 3");
    }
}
