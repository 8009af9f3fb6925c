//! The trace writer: `OZAKI_TRACE=FILE`, JSON Lines in the schema of `ozaki_core::trace`.
//!
//! ## File name
//! `%p` becomes the pid, `%h` the host name, `%r` the MPI rank (`OMPI_COMM_WORLD_RANK`,
//! `PMI_RANK`, `PMIX_RANK`, `SLURM_PROCID` or `MV2_COMM_WORLD_RANK`; `0` without a launcher), `%%` a `%`. The file is created
//! when the first call is recorded, mode 0600 (the header can hold the command line), with
//! `O_CREAT|O_EXCL|O_NOFOLLOW`. Another user must not be able to read it or redirect it, so
//! (one stderr line and no trace otherwise, the program's results unaffected):
//! - every folder above it passes `ozaki_core::private_path::check_dir_chain` (no symbolic
//!   link owned by another user, no world-writable folder without the sticky bit unless it is
//!   ours);
//! - a symbolic link at the path itself is refused, never followed;
//! - an existing file is reused (truncated) only when it is a regular file of ours with one
//!   link and mode 0600, such as the trace of an earlier run; a file or hard link planted by
//!   someone else is refused. A character device (`/dev/null`, which only root can create)
//!   is accepted.
//!
//! The first failed write (a full disk, `/dev/full`) is reported once on stderr; records are
//! lost from then on until writes succeed again. A line cut short by a failed write is ended
//! before the next record, so readers skip one torn line and keep the rest.
//!
//! ## Records
//! The first line is a `"type":"header"` object (pid, exe, argv unless `OZAKI_TRACE_ARGV=0`,
//! shim version, the vendor library of every symbol resolved so far, start time, host, MPI
//! rank). Then one `"type":"call"` object per intercepted call (nested calls excluded, see
//! `guard`). A symbol resolved after the header was written names its library once, in a
//! `vendor` field of its first record. Call records are formatted by hand (no serde on the
//! calling thread) and round-trip through `ozaki_core::trace::parse_line`; `tests` check that.
//!
//! ## Who formats what
//! A call's thread only reads the clock and leaves its record, as numbers, in one
//! process-wide queue ([`record`]: no JSON, no formatting of reasons; the engine's `engine`
//! field is put into words from the decision it names, `crate::route::choose_note`). The
//! queue is a ring of [`MAX_QUEUED`] preallocated slots: a caller claims the next slot with
//! one compare-and-swap, writes its record there with no lock held and publishes it with a
//! release store of the slot's flag; it never waits for a reader. An atomic instruction
//! right after the record's stores (a lock's release, the call's in-flight count) waits until
//! they have drained, which takes tens of nanoseconds when their lines were last read by the
//! reader's core: so no lock is released after them, and each call asks, as it starts, for
//! the lines of the slot it will likely take, so that its stores find them ready. One thread
//! at a time, holding the sink's lock, takes records out in the order their slots were
//! claimed and turns them into lines; a slot claimed but not yet published is waited for
//! briefly (spinning, then yielding: 1 ms, 1 s at exit), after which that reader stops there
//! and a later one goes on from it.
//!
//! The flush thread, started with the file, writes the queue with `write(2)`, whole lines
//! only, in queue order: when woken by the caller of every [`WAKE_RECORDS`]-th record, and
//! every [`FLUSH_TICK`] once [`WAKE_RECORDS`] records wait or the oldest is
//! [`FLUSH_AGE_NS`] old. A caller that finds the ring full ([`MAX_QUEUED`] records waiting)
//! writes the queue itself and then its own record, so the queue stays bounded and no record
//! is dropped. A record written at once (ring full, or writing through) follows every record
//! queued before it, unless the caller of one of those is stalled between its claim and its
//! publication (preempted, or interrupted by a signal): that one is written when it arrives.
//! The file is created by the first record's caller, so a trace file exists (with its
//! header) as soon as a call was made.
//!
//! ## What survives what
//! Concurrent threads never tear or lose a line, and:
//! - normal exit, `exit()` from any thread, the end of `main`: an `atexit` handler closes the
//!   queue and writes what it holds; records made by other threads after that are written
//!   immediately;
//! - `fork()`: the child drops the parent's queued records (the parent writes them; a slot a
//!   thread of the parent was still filling is skipped, never read) and opens
//!   its own file at its first call: the template expanded with the child's pid, or, when the
//!   template has no `%p`, `FILE.<pid>`. Its header has `parent_pid`; its `seq` starts at 0 and
//!   its `t_ns` counts from the fork. Children write every record at once, since they often
//!   end with `_exit(2)`, which runs no `atexit` handler;
//! - a crash (SIGKILL, SIGSEGV, abort), SIGINT/SIGTERM or `_exit(2)` in the original process
//!   loses at most the records still queued or being formatted: normally under
//!   [`WAKE_RECORDS`] plus one batch, at most [`MAX_QUEUED`] when callers outrun the flush
//!   thread, and never a record older than [`FLUSH_AGE_NS`] plus one [`FLUSH_TICK`]. The
//!   thread takes the sink's lock only when it wakes, and is not copied into `fork` children
//!   (which write through).
//!
//! A program that `exec`s other programs passes `OZAKI_TRACE` on; give such programs a `%p` in
//! the name, or each will truncate the file the previous one wrote.

use crate::abi::Shape;
use crate::forward;
use crate::route::RouteOutcome;
use crate::route::choose_note::EngineNote;
use crate::symbols::{COUNT, SymId};
use libc::c_int;
use ozaki_core::trace::{AbResult, Header, Layout, Routine, SCHEMA_VERSION};
use std::cell::{Cell, UnsafeCell};
use std::ffi::CString;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Formatted bytes written with one `write(2)` at most.
pub const FLUSH_BYTES: usize = 16 * 1024;

/// Queued records at which the calling thread wakes the flush thread.
pub const WAKE_RECORDS: usize = 64;

/// Queued records at which the calling thread writes the queue itself (the flush thread is
/// far behind, or gone: the queue stays bounded and no record is dropped). Until then a
/// caller wakes the flush thread at every further [`WAKE_RECORDS`], and never waits for it.
pub const MAX_QUEUED: usize = 2048;

/// Age of the oldest buffered record at which the background thread writes the buffer.
pub const FLUSH_AGE_NS: u64 = 500_000_000;

/// How often the background thread looks at the buffer.
pub const FLUSH_TICK: std::time::Duration = std::time::Duration::from_millis(200);

/// Monotonic clock in ns.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Clock reading that `t_ns` counts from (the shim's load, or the fork in a child).
static ORIGIN_NS: AtomicU64 = AtomicU64::new(0);
/// Wall-clock time of [`ORIGIN_NS`], f64 seconds since the epoch, as bits.
static ORIGIN_UNIX_S: AtomicU64 = AtomicU64::new(0);
/// Pid of the process the shim was loaded into (`fork` children differ).
static LOAD_PID: AtomicU32 = AtomicU32::new(0);
/// Next call sequence number.
static SEQ: AtomicU64 = AtomicU64::new(0);

fn set_origin() {
    ORIGIN_NS.store(now_ns(), Ordering::Relaxed);
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    ORIGIN_UNIX_S.store(unix.to_bits(), Ordering::Relaxed);
}

/// Load-time set-up of the trace clock: takes the clock origin and this process's pid
/// ([`crate::process`] runs it once, from the constructor or from a call made before it).
pub(crate) fn on_load() {
    set_origin();
    // SAFETY: getpid has no preconditions.
    LOAD_PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
}

/// Start of one recorded call.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    seq: u64,
    t: u64,
}

/// Takes the sequence number and start time of a call (only when tracing).
pub fn start() -> Start {
    RING.prefetch_next();
    Start {
        seq: SEQ.fetch_add(1, Ordering::Relaxed),
        t: now_ns(),
    }
}

/// The exported name a call came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sym {
    /// A host BLAS name of the [`crate::symbols`] table.
    Blas(SymId),
    /// A cuBLAS entry point of the hook (`crate::cublas_hook`): operands in device memory,
    /// `batch` members of the recorded shape (1 for a single product).
    Cublas {
        /// The cuBLAS name, such as `cublasGemmEx`.
        name: &'static str,
        /// Members of a strided-batched call.
        batch: u64,
    },
}

impl From<SymId> for Sym {
    fn from(id: SymId) -> Sym {
        Sym::Blas(id)
    }
}

impl Sym {
    /// The name the record's `sym` shows.
    pub fn name(self) -> &'static str {
        match self {
            Sym::Blas(id) => id.name(),
            Sym::Cublas { name, .. } => name,
        }
    }
}

/// What one call record says besides its sequence number and times.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// Exported name that was hit.
    pub sym: Sym,
    /// The call in the caller's terms.
    pub shape: &'a Shape,
    /// Route that produced C, or `quick` / `xerbla`.
    pub route: &'static str,
    /// Why the requested route was not the one that produced C.
    pub fallback: Option<&'a str>,
    /// The route's report.
    pub outcome: Option<&'a RouteOutcome>,
    /// The engine's decision (auto mode), put into words when the record is written.
    pub engine: Option<&'a EngineNote>,
    /// Reference error code of an illegal call.
    pub info: Option<i64>,
    /// A/B comparison against the vendor (`OZAKI_AB`, [`crate::ab`]).
    pub ab: Option<&'a AbResult>,
}

thread_local! {
    static TID: Cell<u64> = const { Cell::new(0) };
}

/// Kernel thread id, cached per thread (reset in a `fork` child; asked of the kernel again
/// once the thread's locals are torn down).
fn tid() -> u64 {
    let ask = || {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as u64 }
    };
    TID.try_with(|t| {
        if t.get() == 0 {
            t.set(ask());
        }
        t.get()
    })
    .unwrap_or_else(|_| ask())
}

/// One call record as the calling thread leaves it: its numbers and the values it names,
/// put into JSON by whoever writes the queue (the flush thread, mostly).
struct Queued {
    seq: u64,
    t_ns: u64,
    dur_ns: u64,
    tid: u64,
    sym: Sym,
    shape: Shape,
    route: &'static str,
    fallback: Option<Box<str>>,
    /// `None` also for an outcome with nothing to say (a vendor call's), which formats the
    /// same.
    outcome: Option<Box<RouteOutcome>>,
    /// Kept in the record, not behind its own allocation: the flush thread frees what the
    /// caller allocated, and a free of another thread's allocation takes the allocator's
    /// shared lock, which a caller's next allocation would then wait for.
    engine: Option<EngineNote>,
    info: Option<i64>,
    ab: Option<Box<AbResult>>,
}

impl Queued {
    fn entry(&self) -> Entry<'_> {
        Entry {
            sym: self.sym,
            shape: &self.shape,
            route: self.route,
            fallback: self.fallback.as_deref(),
            outcome: self.outcome.as_deref(),
            engine: self.engine.as_ref(),
            info: self.info,
            ab: self.ab.as_deref(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The queue

/// Set in [`Ring::tail`] once the ring is closed: callers write through.
const CLOSED: u64 = 1 << 63;

/// Times a reader checks a claimed record before it starts yielding to its caller.
const SPINS: u32 = 64;

/// How long a drain waits for the caller of a claimed record to finish leaving it before it
/// stops there (the flush thread comes back to it; a caller writing through writes its own
/// record after the records before it). A caller takes a few dozen nanoseconds unless it is
/// preempted in between.
const PUBLISH_PATIENCE: std::time::Duration = std::time::Duration::from_millis(1);

/// [`PUBLISH_PATIENCE`] of the exit flush, the last chance to write the queue.
const EXIT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// A value alone on its cache lines (two, for the adjacent-line prefetcher).
#[repr(align(128))]
struct Padded<T>(T);

/// One place in the [`Ring`].
#[repr(align(64))]
struct Slot {
    /// `index + 1` once the record claimed at `index` is in `record`: stored (Release) by
    /// the caller that claimed it, after writing it; loaded (Acquire) by the reader.
    ready: AtomicU64,
    record: UnsafeCell<std::mem::MaybeUninit<Queued>>,
}

/// The queue: a bounded ring that any thread adds records to and one reader at a time takes
/// them out of, in the order they were claimed.
///
/// A caller claims an index (one compare-and-swap on `tail`), writes its record into that
/// index's slot and publishes it through the slot's `ready`, a plain store: no lock is
/// released after the record's stores, whose atomic instruction would wait for them to drain
/// (module docs).
struct Ring {
    /// Records it holds at most.
    cap: usize,
    /// `cap` slots, allocated at the first record with the sink held ([`Ring::allocate`]).
    slots: OnceLock<Box<[Slot]>>,
    /// Next index to claim, with [`CLOSED`].
    tail: Padded<AtomicU64>,
    /// A value `head` had, read by a caller: callers check for room against it and read
    /// `head` itself only when it says the ring is full, so they do not miss on the line the
    /// reader writes at every record.
    seen_head: AtomicU64,
    /// Next index to take out: every record below it has been taken out of its slot.
    head: Padded<AtomicU64>,
    /// Held by the reader ([`Ring::drain`], [`Ring::close_and_discard`],
    /// [`Ring::with_oldest`]).
    reading: Padded<AtomicBool>,
}

// SAFETY: a slot's `record` is written only by the caller that claimed its index (indices
// are unique: each is claimed by one successful compare-and-swap of `tail`), between its
// claim and its Release store of `ready`; it is read or moved out only by the one reader
// (`reading`), after an Acquire load of `ready` equal to `index + 1`, and before that reader
// moves `head` past the index with a Release store. A caller claims the slot's next index
// (`index + cap`) only after an Acquire load of `head` (or of `seen_head`, stored with
// Release after one) past `index`, so every access to a slot happens-before the next. The
// records are `Send` (checked below), so they may be written and dropped on any thread.
unsafe impl Sync for Ring {}

const _: () = {
    const fn send<T: Send>() {}
    send::<Queued>();
};

/// Prefetches the cache lines of `value` for writing (`prefetchw` on x86-64, a hint that
/// neither faults nor changes memory; nothing elsewhere, and nothing under Miri).
fn prefetch_for_write<T>(value: &T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let start = (value as *const T).cast::<u8>();
        for offset in (0..std::mem::size_of::<T>()).step_by(64) {
            // SAFETY: `prefetchw` only asks the cache for a line; it reads and writes no
            // memory, cannot fault, and x86-64 processors without it run it as a no-op. The
            // address is inside `value` anyway.
            unsafe {
                std::arch::asm!(
                    "prefetchw [{}]",
                    in(reg) start.wrapping_add(offset),
                    options(nostack, preserves_flags, readonly)
                )
            };
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = value;
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The records still in it (the process-wide ring is never dropped; tests' rings are).
        self.close_and_discard();
    }
}

/// Clears `reading` when a reader is done (also if what it calls panics).
struct Reading<'a>(&'a AtomicBool);

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Ring {
    const fn new(cap: usize) -> Ring {
        Ring {
            cap,
            slots: OnceLock::new(),
            tail: Padded(AtomicU64::new(0)),
            seen_head: AtomicU64::new(0),
            head: Padded(AtomicU64::new(0)),
            reading: Padded(AtomicBool::new(false)),
        }
    }

    /// Allocates the slots, once. Called with the sink held ([`record_taking`]), which
    /// `fork` also takes first ([`before_fork`]), so no child inherits the allocation half
    /// done; until it has run, [`Ring::push`] hands every record back.
    fn allocate(&self) {
        self.slots.get_or_init(|| {
            (0..self.cap.max(1))
                .map(|_| Slot {
                    ready: AtomicU64::new(0),
                    record: UnsafeCell::new(std::mem::MaybeUninit::uninit()),
                })
                .collect()
        });
    }

    fn slot(slots: &[Slot], index: u64) -> &Slot {
        &slots[(index % slots.len() as u64) as usize]
    }

    /// Adds a record; returns its index, or the record when the ring is closed, full or not
    /// allocated yet ([`Ring::allocate`]).
    // The record comes back only when it is written at once; boxing it would allocate on
    // every call to spare that path a copy.
    #[allow(clippy::result_large_err)]
    fn push(&self, q: Queued) -> Result<u64, Queued> {
        self.push_stalling(q, || {})
    }

    /// [`Ring::push`], calling `between` once the index is claimed and before the record is
    /// written (tests stall a caller there).
    #[inline(always)]
    #[allow(clippy::result_large_err)]
    fn push_stalling(&self, q: Queued, between: impl FnOnce()) -> Result<u64, Queued> {
        // Never allocated here: a `fork` between another thread's start of that allocation and
        // its end would leave the child's first record waiting for it forever.
        let Some(slots) = self.slots.get() else {
            return Err(q);
        };
        let cap = slots.len() as u64;
        let mut tail = self.tail.0.load(Ordering::Relaxed);
        let index = loop {
            if tail & CLOSED != 0 {
                return Err(q);
            }
            // (`tail` may be stale, even below `head`: then the exchange below fails.)
            if tail.saturating_sub(self.seen_head.load(Ordering::Acquire)) >= cap {
                let head = self.head.0.load(Ordering::Acquire);
                self.seen_head.fetch_max(head, Ordering::AcqRel);
                if tail.saturating_sub(head) >= cap {
                    return Err(q);
                }
            }
            match self.tail.0.compare_exchange_weak(
                tail,
                tail + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break tail,
                Err(now) => tail = now,
            }
        };
        between();
        let slot = Self::slot(slots, index);
        // SAFETY: `index` is ours alone (the compare-and-swap above) and the reader has moved
        // `head` past `index - cap`, the slot's previous index, as the Acquire load above of
        // `head` or `seen_head` showed: nobody else touches the slot until `ready` says it
        // holds `index` (the `Sync` contract of `Ring`).
        unsafe { (*slot.record.get()).write(q) };
        slot.ready.store(index + 1, Ordering::Release);
        Ok(index)
    }

    /// Asks for the lines of the slot the next record will likely take (the next index to
    /// claim, this thread's when no other thread records first) in a state that lets this
    /// core write them, while the call runs: the reader on another core last read them, and
    /// a caller writing them unprepared leaves the stores waiting for that core to give the
    /// lines up, which the caller's next atomic instruction then waits for.
    fn prefetch_next(&self) {
        if let Some(slots) = self.slots.get() {
            let next = self.tail.0.load(Ordering::Relaxed) & !CLOSED;
            prefetch_for_write(Self::slot(slots, next));
        }
    }

    /// Records claimed and not yet taken out.
    fn len(&self) -> usize {
        let head = self.head.0.load(Ordering::Acquire);
        let tail = self.tail.0.load(Ordering::Acquire) & !CLOSED;
        tail.saturating_sub(head) as usize
    }

    /// Claims the reader's role, unless another thread holds it.
    fn reader(&self) -> Option<(&[Slot], Reading<'_>)> {
        let slots = self.slots.get()?;
        if self.reading.0.swap(true, Ordering::Acquire) {
            return None;
        }
        Some((slots, Reading(&self.reading.0)))
    }

    /// Whether the record claimed at `index` has been published into `slot`, waiting for it
    /// (spinning, then yielding) at most `patience`.
    fn published(slot: &Slot, index: u64, patience: std::time::Duration) -> bool {
        let ready = || slot.ready.load(Ordering::Acquire) == index + 1;
        for _ in 0..SPINS {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        let since = std::time::Instant::now();
        while !ready() {
            if since.elapsed() >= patience {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// Takes out the records claimed before it started, in index order, and hands each to
    /// `write`; stops early at a record its caller has not published within `patience` (the
    /// next drain starts there), and does nothing while another thread is draining. Returns
    /// whether it took out all of them.
    fn drain(&self, patience: std::time::Duration, mut write: impl FnMut(Queued)) -> bool {
        let Some((slots, _reading)) = self.reader() else {
            return self.slots.get().is_none();
        };
        let end = self.tail.0.load(Ordering::Acquire) & !CLOSED;
        let mut head = self.head.0.load(Ordering::Relaxed);
        while head < end {
            let slot = Self::slot(slots, head);
            if !Self::published(slot, head, patience) {
                return false;
            }
            // SAFETY: this thread is the reader (`_reading`) and `ready` says (Acquire) that
            // the slot holds the record claimed at `head`, published and not taken out
            // (`head` has not passed it); moving `head` past it below hands the slot back.
            let r = unsafe { (*slot.record.get()).assume_init_read() };
            head += 1;
            self.head.0.store(head, Ordering::Release);
            write(r);
        }
        true
    }

    /// Calls `f` with the oldest record not yet taken out, when it has been published and no
    /// other thread is reading.
    fn with_oldest<R>(&self, f: impl FnOnce(&Queued) -> R) -> Option<R> {
        let (slots, _reading) = self.reader()?;
        let head = self.head.0.load(Ordering::Relaxed);
        let tail = self.tail.0.load(Ordering::Acquire) & !CLOSED;
        let slot = Self::slot(slots, head);
        if head >= tail || slot.ready.load(Ordering::Acquire) != head + 1 {
            return None;
        }
        // SAFETY: as in `drain`: this thread is the reader and the slot holds the published
        // record claimed at `head`, which only this reader can take out.
        Some(f(unsafe { (*slot.record.get()).assume_init_ref() }))
    }

    /// Closes the ring: every later [`Ring::push`] returns its record.
    fn close(&self) {
        self.tail.0.fetch_or(CLOSED, Ordering::AcqRel);
    }

    /// Closes the ring and drops the records in it unwritten, skipping any still being left
    /// (in a `fork` child, by threads of the parent, which the child has not). A skipped
    /// slot is never read again: the ring claims no index after it is closed.
    fn close_and_discard(&self) {
        self.close();
        let Some((slots, _reading)) = self.reader() else {
            return;
        };
        let end = self.tail.0.load(Ordering::Acquire) & !CLOSED;
        let mut head = self.head.0.load(Ordering::Relaxed);
        while head < end {
            let slot = Self::slot(slots, head);
            if slot.ready.load(Ordering::Acquire) == head + 1 {
                // SAFETY: as in `drain`: the reader takes out a published record.
                drop(unsafe { (*slot.record.get()).assume_init_read() });
            }
            head += 1;
            self.head.0.store(head, Ordering::Release);
        }
    }
}

/// Records one finished call: the record joins the queue the flush thread writes (see the
/// module docs); the caller formats nothing unless the queue is full or the sink writes
/// every record at once.
pub fn record(start: &Start, entry: &Entry<'_>) {
    record_taking(start, entry, entry.engine.map(|e| Box::new(e.clone())));
}

/// [`record`] for a caller that owns the call's engine note: it moves into the record
/// (`entry.engine` is not read).
pub fn record_taking(start: &Start, entry: &Entry<'_>, engine: Option<Box<EngineNote>>) {
    let end = now_ns();
    let q = Queued {
        seq: start.seq,
        t_ns: start.t.saturating_sub(ORIGIN_NS.load(Ordering::Relaxed)),
        dur_ns: end.saturating_sub(start.t),
        tid: tid(),
        sym: entry.sym,
        shape: *entry.shape,
        route: entry.route,
        fallback: entry.fallback.map(Box::from),
        outcome: entry
            .outcome
            .filter(|o| **o != RouteOutcome::default())
            .map(|o| Box::new(o.clone())),
        engine: engine.map(|e| *e),
        info: entry.info,
        ab: entry.ab.map(|a| Box::new(a.clone())),
    };
    if q.outcome.as_ref().is_some_and(|o| o.device.is_some()) {
        // Listing the loaded objects takes the loader's lock: done here, before the sink
        // or the queue is locked, once per process (the writer reads the cached list).
        let _ = cuda_libraries();
    }
    if !OPENED.load(Ordering::Acquire) {
        // The file is created at the first record, by its caller (module docs).
        let mut sink = SHARED.lock();
        if sink.state == State::Closed {
            sink.open();
        }
        RING.allocate();
        OPENED.store(true, Ordering::Release);
    }
    let index = match RING.push(q) {
        Ok(index) => index,
        // Writing through (after the exit flush, in a `fork` child), or MAX_QUEUED records
        // wait: the record is written now, after the queue.
        Err(q) => {
            SHARED.lock().write_one(&q);
            return;
        }
    };
    if !FLUSHER_STARTED.load(Ordering::Relaxed) && !FLUSHER_STARTED.swap(true, Ordering::Relaxed) {
        // Without the thread the queue is still written at MAX_QUEUED and at exit.
        if let Ok(handle) = crate::shim_thread::spawn("ozaki-trace-flush", flush_when_due) {
            let _ = FLUSHER.set(handle.thread().clone());
        }
    }
    if (index + 1).is_multiple_of(WAKE_RECORDS as u64)
        && let Some(t) = FLUSHER.get()
    {
        t.unpark();
    }
}

// ---------------------------------------------------------------------------------------
// Formatting

fn push_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0..=0x1f => {
                let _ = write!(out, "\\u{:04x}", b);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// A number, or the strings `"NaN"`, `"Infinity"`, `"-Infinity"` (JSON has no non-finite
/// numbers; `ozaki_core::trace` reads these back).
fn push_f64(out: &mut Vec<u8>, v: f64) {
    if v == 0.0 && v.is_sign_positive() {
        out.extend_from_slice(b"0.0");
    } else if v == 1.0 {
        out.extend_from_slice(b"1.0");
    } else if v.is_finite() {
        let _ = write!(out, "{v:?}");
    } else if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v > 0.0 {
        out.extend_from_slice(b"\"Infinity\"");
    } else {
        out.extend_from_slice(b"\"-Infinity\"");
    }
}

fn field(out: &mut Vec<u8>, name: &str) {
    out.push(b',');
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

fn flag(out: &mut Vec<u8>, name: &str, letter: u8) {
    field(out, name);
    out.extend_from_slice(&[b'"', letter, b'"']);
}

/// A dimension; negative values (only in illegal calls, whose `info` says which) show as 0.
fn dim(out: &mut Vec<u8>, name: &str, v: i64) {
    field(out, name);
    push_u64(out, u64::try_from(v).unwrap_or(0));
}

/// Writes a call record without its closing `}` (the sink may add `vendor`).
fn format_body(out: &mut Vec<u8>, seq: u64, t_ns: u64, dur_ns: u64, tid: u64, e: &Entry<'_>) {
    let s = e.shape;
    out.extend_from_slice(b"{\"type\":\"call\",\"seq\":");
    push_u64(out, seq);
    field(out, "t_ns");
    push_u64(out, t_ns);
    field(out, "dur_ns");
    push_u64(out, dur_ns);
    field(out, "tid");
    push_u64(out, tid);
    field(out, "sym");
    push_str(out, e.sym.name());
    field(out, "routine");
    out.extend_from_slice(match s.routine {
        Routine::Dgemm => b"\"dgemm\"",
        Routine::Dsyrk => b"\"dsyrk\"",
    });
    field(out, "layout");
    out.extend_from_slice(match s.layout {
        Layout::Col => b"\"col\"",
        Layout::Row => b"\"row\"",
    });
    let (f1, f2) = match s.routine {
        Routine::Dgemm => ("transa", "transb"),
        Routine::Dsyrk => ("uplo", "trans"),
    };
    flag(out, f1, s.flag1);
    flag(out, f2, s.flag2);
    dim(out, "m", s.m);
    dim(out, "n", s.n);
    dim(out, "k", s.k);
    dim(out, "lda", s.lda);
    dim(out, "ldb", s.ldb);
    dim(out, "ldc", s.ldc);
    field(out, "alpha");
    push_f64(out, s.alpha);
    field(out, "beta");
    push_f64(out, s.beta);
    field(out, "ilp64");
    out.extend_from_slice(if s.ilp64 { b"true" } else { b"false" });
    if let Sym::Cublas { batch, .. } = e.sym {
        field(out, "device_resident");
        out.extend_from_slice(b"true");
        if batch != 1 {
            field(out, "batch");
            push_u64(out, batch);
        }
    }
    field(out, "route");
    push_str(out, e.route);
    if let Some(f) = e.fallback {
        field(out, "fallback");
        push_str(out, f);
    }
    if let Some(o) = e.outcome {
        if let Some(m) = o.moduli {
            field(out, "moduli");
            push_u64(out, m.into());
        }
        if let Some(s) = o.scaling {
            field(out, "scaling");
            push_str(out, s);
        }
        if let Some(d) = o.device {
            field(out, "device");
            push_u64(out, d.into());
        }
        if let Some(list) = &o.devices {
            field(out, "devices");
            let _ = serde_json::to_writer(&mut *out, list);
        }
        if let Some(p) = &o.phases {
            field(out, "phases");
            let _ = serde_json::to_writer(&mut *out, p);
        }
    }
    if let Some(engine) = e.engine {
        field(out, "engine");
        engine.write_json(out);
    }
    if let Some(info) = e.info {
        field(out, "info");
        let _ = write!(out, "{info}");
    }
    if let Some(ab) = e.ab {
        field(out, "ab");
        let _ = serde_json::to_writer(&mut *out, ab);
    }
}

// ---------------------------------------------------------------------------------------
// The sink

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing written yet in this process.
    Closed,
    /// `fd` is the trace file.
    Open,
    /// The file could not be created; records are dropped (said once on stderr).
    Failed,
}

struct Sink {
    state: State,
    fd: c_int,
    /// The expanded file name (for the write-error message).
    path: String,
    /// Formatted lines waiting for one `write(2)`.
    buf: Vec<u8>,
    /// Whether a write error has been reported (once per file).
    write_error_reported: bool,
    /// A failed write may have left a line cut short: the next write starts a new line.
    torn: bool,
    /// Write each record at once (after the exit flush, and in `fork` children).
    write_through: bool,
    /// Whether each symbol's vendor library has been named in this file.
    announced: [bool; COUNT],
    /// Whether this file's first GPU record has named the CUDA libraries (`cuda_libs`).
    cuda_announced: bool,
}

/// A value behind a plain pthread mutex (not `std::sync::Mutex`), so the `fork` handlers
/// can hold it across `fork()` and release it on both sides.
///
/// Aligned to two cache lines so that no other value shares one with it (callers read the
/// ring's indices on every record while the flush thread writes the sink's buffer).
#[repr(align(128))]
struct PMutex<T> {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    value: UnsafeCell<T>,
}

// SAFETY: `value` is only reached through `lock`, which holds `mutex`.
unsafe impl<T: Send> Sync for PMutex<T> {}

impl<T> PMutex<T> {
    const fn new(value: T) -> PMutex<T> {
        PMutex {
            mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
            value: UnsafeCell::new(value),
        }
    }

    fn lock(&self) -> Locked<'_, T> {
        // SAFETY: a statically initialised mutex.
        unsafe { libc::pthread_mutex_lock(self.mutex.get()) };
        Locked(self)
    }

    /// Locks without a guard (the `fork` prepare handler).
    fn lock_raw(&self) {
        // SAFETY: a statically initialised mutex.
        unsafe { libc::pthread_mutex_lock(self.mutex.get()) };
    }

    /// Unlocks what [`PMutex::lock_raw`] locked.
    ///
    /// # Safety
    /// - the calling thread (or, in a `fork` child, its copy) holds the mutex.
    unsafe fn unlock_raw(&self) {
        // SAFETY: the caller's contract.
        unsafe { libc::pthread_mutex_unlock(self.mutex.get()) };
    }

    /// The value, for a thread that holds the mutex by [`PMutex::lock_raw`].
    ///
    /// # Safety
    /// - the calling thread holds the mutex, and no `Locked` guard of it is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn held(&self) -> &mut T {
        // SAFETY: the caller's contract.
        unsafe { &mut *self.value.get() }
    }
}

static SHARED: PMutex<Sink> = PMutex::new(Sink {
    state: State::Closed,
    fd: -1,
    path: String::new(),
    buf: Vec::new(),
    write_error_reported: false,
    torn: false,
    write_through: false,
    announced: [false; COUNT],
    cuda_announced: false,
});

/// The records callers have left and nobody has written yet.
static RING: Ring = Ring::new(MAX_QUEUED);

/// Whether the background flush thread has been started in this process.
static FLUSHER_STARTED: AtomicBool = AtomicBool::new(false);

/// Whether this process has opened (or failed to open) its trace file: callers check it
/// without a lock.
static OPENED: AtomicBool = AtomicBool::new(false);

/// The CUDA library files this process has loaded, listed once, at its first GPU call (the
/// GPU routes load all of them when the GPU starts).
fn cuda_libraries() -> &'static [String] {
    static LIST: OnceLock<Vec<String>> = OnceLock::new();
    LIST.get_or_init(|| {
        gpu_kernels::loaded_objects::cuda_libraries(&gpu_kernels::loaded_objects::paths())
            .into_iter()
            .map(|p| p.display().to_string())
            .collect()
    })
}

/// Adds `cuda_libs` to the record in `out` when it is the first with `gpu_libraries` (a call
/// that ran on a GPU) since `announced` was last cleared, and the list is not empty.
fn push_cuda_libs(out: &mut Vec<u8>, announced: &mut bool, gpu_libraries: Option<&[String]>) {
    if let Some(libs) = gpu_libraries
        && !*announced
        && !libs.is_empty()
    {
        *announced = true;
        field(out, "cuda_libs");
        let _ = serde_json::to_writer(&mut *out, libs);
    }
}

/// The flush thread, for waking it.
static FLUSHER: OnceLock<std::thread::Thread> = OnceLock::new();

/// A locked value, until dropped.
struct Locked<'a, T>(&'a PMutex<T>);

impl<T> Drop for Locked<'_, T> {
    fn drop(&mut self) {
        // SAFETY: locked by `lock` in this thread.
        unsafe { libc::pthread_mutex_unlock(self.0.mutex.get()) };
    }
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the mutex is held.
        unsafe { &*self.0.value.get() }
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the mutex is held, and `Locked` is the only way in.
        unsafe { &mut *self.0.value.get() }
    }
}

/// The background flush: woken by the caller of every [`WAKE_RECORDS`]-th record, it writes
/// the queue; every [`FLUSH_TICK`] it writes it when it holds that many records or its
/// oldest record is [`FLUSH_AGE_NS`] old, so a program killed by a signal after a pause loses
/// nothing. Ends once the exit handler has switched the sink to writing through.
fn flush_when_due() {
    loop {
        let parked = std::time::Instant::now();
        std::thread::park_timeout(FLUSH_TICK);
        // Woken by a caller (at every WAKE_RECORDS-th record), not by the tick.
        let woken = parked.elapsed() < FLUSH_TICK;
        let mut sink = SHARED.lock();
        if sink.write_through {
            return;
        }
        let queued = RING.len();
        let aged = || {
            RING.with_oldest(|r| ORIGIN_NS.load(Ordering::Relaxed) + r.t_ns + r.dur_ns)
                .is_some_and(|end| now_ns().saturating_sub(end) >= FLUSH_AGE_NS)
        };
        if queued > 0 && (woken || queued >= WAKE_RECORDS || aged()) {
            sink.drain(PUBLISH_PATIENCE);
        }
    }
}

impl Sink {
    fn open(&mut self) {
        let Some(template) = crate::config::get().trace.clone() else {
            self.state = State::Failed;
            return;
        };
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        let child = pid != LOAD_PID.load(Ordering::Relaxed);
        let path = expand(
            &template,
            pid,
            &hostname(),
            &rank().unwrap_or(0).to_string(),
            child,
        );
        match create(&path) {
            Ok(fd) => {
                self.fd = fd;
                self.state = State::Open;
                self.write_error_reported = false;
                self.torn = false;
                // SAFETY: getppid has no preconditions.
                let parent = child.then(|| unsafe { libc::getppid() } as u32);
                let header = header(pid, parent, crate::config::get().trace_argv);
                for id in SymId::all() {
                    self.announced[id.index()] = header.vendor.contains_key(id.name());
                }
                self.cuda_announced = false;
                self.path = path;
                if let Ok(mut line) = serde_json::to_vec(&header) {
                    line.push(b'\n');
                    self.write(&line);
                }
            }
            Err(e) => {
                self.state = State::Failed;
                crate::config::notice(&format!(
                    "OZAKI_TRACE: cannot create {path}: {e}; not tracing"
                ));
            }
        }
    }

    /// Writes the records queued when it starts, in queue order, formatting them here; stops
    /// early at a record whose caller has not finished leaving it within `patience`
    /// ([`Ring::drain`]).
    fn drain(&mut self, patience: std::time::Duration) {
        RING.drain(patience, |r| {
            self.format(&r);
            if self.buf.len() >= FLUSH_BYTES {
                self.flush();
            }
        });
        self.flush();
    }

    /// Writes one record at once (write-through), after what was queued before it.
    fn write_one(&mut self, r: &Queued) {
        self.drain(PUBLISH_PATIENCE);
        self.format(r);
        self.flush();
    }

    /// Appends one record's line to the buffer.
    fn format(&mut self, r: &Queued) {
        if self.state != State::Open {
            return;
        }
        format_body(&mut self.buf, r.seq, r.t_ns, r.dur_ns, r.tid, &r.entry());
        // A host symbol's first record names its vendor library (a cuBLAS call's library is
        // the one the program loaded).
        if let Sym::Blas(sym) = r.sym
            && !self.announced[sym.index()]
            && let Some(lib) = forward::resolved_library(sym)
        {
            self.announced[sym.index()] = true;
            field(&mut self.buf, "vendor");
            push_str(&mut self.buf, lib);
            if let Some(core) = forward::resolved_core(sym) {
                field(&mut self.buf, "vendor_core");
                push_str(&mut self.buf, core);
            }
        }
        // The list was made by the record's caller (`record_taking`), outside every lock.
        let gpu_libraries = r
            .outcome
            .as_ref()
            .and_then(|o| o.device)
            .map(|_| cuda_libraries());
        push_cuda_libs(&mut self.buf, &mut self.cuda_announced, gpu_libraries);
        self.buf.extend_from_slice(b"}\n");
    }

    fn flush(&mut self) {
        if self.state == State::Open && !self.buf.is_empty() {
            let buf = std::mem::take(&mut self.buf);
            self.write(&buf);
            self.buf = buf;
        }
        self.buf.clear();
    }

    /// Writes whole lines to the file; the first failure is reported once on stderr.
    fn write(&mut self, lines: &[u8]) {
        if self.torn && write_all(self.fd, b"\n").is_ok() {
            self.torn = false;
        }
        if self.torn {
            return;
        }
        if let Err((e, partial)) = write_all(self.fd, lines) {
            self.torn = partial;
            if !self.write_error_reported {
                self.write_error_reported = true;
                crate::config::notice(&format!(
                    "OZAKI_TRACE: cannot write {}: {e}; trace records are being lost",
                    self.path
                ));
            }
        }
    }
}

/// Writes all of `bytes`, retrying short writes and EINTR. On failure, says whether part of
/// `bytes` was written (so the file may end inside a line).
fn write_all(fd: c_int, mut bytes: &[u8]) -> Result<(), (std::io::Error, bool)> {
    let mut partial = false;
    while !bytes.is_empty() {
        // SAFETY: valid buffer of the given length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err((e, partial));
        }
        if n == 0 {
            return Err((std::io::Error::from(std::io::ErrorKind::WriteZero), partial));
        }
        partial = true;
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Creates the trace file (see the module docs for what is refused and why).
fn create(path: &str) -> std::io::Result<c_int> {
    let c =
        CString::new(path).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let folder = std::path::Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    ozaki_core::private_path::check_dir_chain(folder, euid).map_err(std::io::Error::other)?;
    let symlink_refused = |e: std::io::Error| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            std::io::Error::other("the path is a symbolic link (refused)")
        } else {
            e
        }
    };
    // Twice: an existing file removed between the two opens is created on the second pass.
    for _ in 0..2 {
        let new =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), new, 0o600 as libc::c_uint) };
        if fd >= 0 {
            return Ok(fd);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(symlink_refused(e));
        }
        // O_NONBLOCK: a FIFO planted at the path must not block the program (it is refused
        // below).
        let existing = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: valid NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), existing) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOENT) {
                continue;
            }
            return Err(symlink_refused(e));
        }
        return match reuse(fd, euid) {
            Ok(()) => Ok(fd),
            Err(e) => {
                // SAFETY: our descriptor, not used afterwards.
                unsafe { libc::close(fd) };
                Err(e)
            }
        };
    }
    Err(std::io::Error::other("the path keeps changing (refused)"))
}

/// Checks the opened existing file `fd` itself (so the file checked is the file written):
/// a character device, or a private regular file of ours, which is then truncated.
fn reuse(fd: c_int, euid: u32) -> std::io::Result<()> {
    use std::os::fd::{FromRawFd as _, IntoRawFd as _};
    use std::os::unix::fs::FileTypeExt as _;
    // SAFETY: `fd` is an open descriptor of ours; `into_raw_fd` hands it back unclosed.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let meta = file.metadata();
    let _ = file.into_raw_fd();
    let meta = meta?;
    if !meta.file_type().is_char_device() {
        ozaki_core::private_path::check_owned_file(&meta, euid, 0o077)
            .map_err(|why| std::io::Error::other(format!("existing file refused: {why}")))?;
        // SAFETY: `fd` is ours.
        if unsafe { libc::ftruncate(fd, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // Back to blocking writes (O_NONBLOCK only mattered for the open).
    // SAFETY: `fd` is ours.
    unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) & !libc::O_NONBLOCK,
        )
    };
    Ok(())
}

/// Expands `%p`, `%h`, `%r`, `%%` in a trace file template; a `fork` child without `%p` gets
/// `.<pid>` appended.
pub fn expand(template: &str, pid: u32, host: &str, rank: &str, child: bool) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut has_pid = false;
    let mut chars = template.chars();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        match chars.next() {
            Some('p') => {
                has_pid = true;
                out.push_str(&pid.to_string());
            }
            Some('h') => out.push_str(host),
            Some('r') => out.push_str(rank),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    if child && !has_pid {
        out.push_str(&format!(".{pid}"));
    }
    out
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: valid buffer and length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// MPI rank from the launcher's environment (Open MPI, MPICH/PMI, PMIx, Slurm, MVAPICH2;
/// the list is `ozaki_core::devices::WORLD_RANK_VARS`, shared with the GPU mapping).
pub fn rank() -> Option<u32> {
    ozaki_core::devices::LauncherEnv::from_process_env().world_rank
}

fn header(pid: u32, parent_pid: Option<u32>, with_argv: bool) -> Header {
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let argv = with_argv.then(|| {
        std::fs::read("/proc/self/cmdline")
            .map(|raw| {
                raw.split(|&b| b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        std::ffi::OsStr::from_bytes(s)
                            .to_string_lossy()
                            .into_owned()
                    })
                    .collect()
            })
            .unwrap_or_default()
    });
    Header {
        kind: "header".into(),
        schema: SCHEMA_VERSION,
        pid,
        exe,
        argv,
        shim_version: env!("CARGO_PKG_VERSION").into(),
        vendor: forward::resolved()
            .into_iter()
            .map(|(id, lib)| (id.name().to_string(), lib.to_string()))
            .collect(),
        start_unix_s: f64::from_bits(ORIGIN_UNIX_S.load(Ordering::Relaxed)),
        host: Some(hostname()),
        rank: rank(),
        parent_pid,
        cpus: Some(crate::route::choose::machine_threads().0),
        blas_threads: Some(crate::route::choose::machine_threads().1),
        vendor_spin_log2: crate::vendor_spin::timeout_log2(),
        vendor_threads_shared: Some(crate::config::get().shares_vendor_threads()),
        vendor_core: forward::resolved()
            .into_iter()
            .filter_map(|(id, _)| {
                Some((
                    id.name().to_string(),
                    forward::resolved_core(id)?.to_string(),
                ))
            })
            .collect(),
        cpu_simd: Some(ozaki_core::vendor_core::cpu_simd().to_string()),
    }
}

// ---------------------------------------------------------------------------------------
// Process events

pub(crate) fn flush_at_exit() {
    let mut sink = SHARED.lock();
    // Callers write through from here on; every record claimed before is written now.
    RING.close();
    sink.drain(EXIT_PATIENCE);
    sink.write_through = true;
}

pub(crate) fn before_fork() {
    // Hold the sink across fork() so the child never inherits it locked by another thread;
    // holding it also keeps every reader of the ring out of it.
    SHARED.lock_raw();
}

pub(crate) fn after_fork_parent() {
    // SAFETY: locked in before_fork by this thread.
    unsafe { SHARED.unlock_raw() };
}

pub(crate) fn after_fork_child() {
    // SAFETY: the mutex is held by this (the only) thread since before_fork.
    let sink = unsafe { SHARED.held() };
    if sink.state == State::Open {
        // SAFETY: our own descriptor; the parent keeps its copy.
        unsafe { libc::close(sink.fd) };
    }
    sink.fd = -1;
    sink.buf.clear();
    // The parent's records (the parent writes them); the child writes through.
    RING.close_and_discard();
    // The parent's flush thread is not copied into the child.
    FLUSHER_STARTED.store(false, Ordering::Relaxed);
    sink.state = State::Closed;
    sink.write_through = true;
    sink.announced = [false; COUNT];
    sink.cuda_announced = false;
    OPENED.store(false, Ordering::Relaxed);
    SEQ.store(0, Ordering::Relaxed);
    set_origin();
    let _ = TID.try_with(|t| t.set(0));
    // SAFETY: locked in before_fork; this thread is its owner's copy.
    unsafe { SHARED.unlock_raw() };
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::trace::{Line, parse_line};

    fn shape(routine: Routine) -> Shape {
        Shape {
            routine,
            layout: Layout::Row,
            flag1: b'N',
            flag2: b'T',
            m: 3,
            n: 4,
            k: 5,
            lda: 5,
            ldb: 5,
            ldc: 4,
            alpha: 0.1,
            beta: -2.5e-300,
            ilp64: true,
        }
    }

    fn line(e: &Entry<'_>) -> String {
        let mut out = Vec::new();
        format_body(&mut out, 7, 123, 456, 789, e);
        out.extend_from_slice(b"}");
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn records_round_trip_through_the_schema_parser() {
        let s = shape(Routine::Dgemm);
        let outcome = RouteOutcome {
            moduli: Some(14),
            scaling: Some("norm"),
            device: Some(0),
            devices: Some(vec![0, 1]),
            phases: Some(Default::default()),
        };
        let e = Entry {
            sym: SymId::SCIPY_CBLAS_DGEMM64.into(),
            shape: &s,
            route: "vendor",
            fallback: Some("gpu-ozaki: route \"x\" not available\n"),
            outcome: Some(&outcome),
            engine: None,
            info: None,
            ab: None,
        };
        let text = line(&e);
        let Line::Call(c) = parse_line(&text, 1).unwrap_or_else(|err| panic!("{err}: {text}"))
        else {
            panic!()
        };
        assert_eq!((c.seq, c.t_ns, c.dur_ns, c.tid), (7, 123, 456, 789));
        assert_eq!(c.sym, "scipy_cblas_dgemm64_");
        assert_eq!((c.routine, c.layout), (Routine::Dgemm, Layout::Row));
        assert_eq!(
            (c.transa.as_deref(), c.transb.as_deref(), c.uplo.as_deref()),
            (Some("N"), Some("T"), None)
        );
        assert_eq!((c.m, c.n, c.k, c.lda, c.ldb, c.ldc), (3, 4, 5, 5, 5, 4));
        assert_eq!(
            (c.alpha, c.beta),
            (0.1, -2.5e-300),
            "floats must round-trip exactly"
        );
        assert!(c.ilp64);
        assert_eq!(c.route, "vendor");
        assert_eq!(
            c.fallback.as_deref(),
            Some("gpu-ozaki: route \"x\" not available\n")
        );
        assert_eq!((c.moduli, c.device), (Some(14), Some(0)));
        assert_eq!(c.devices, Some(vec![0, 1]));
        assert_eq!(c.scaling.as_deref(), Some("norm"));
        // The same record through serde gives the same object.
        let reparsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        let via_serde = serde_json::to_value(&*c).unwrap();
        assert_eq!(
            reparsed, via_serde,
            "hand-formatted record differs from the schema's serialisation"
        );
    }

    #[test]
    fn syrk_and_illegal_records_round_trip() {
        let mut s = shape(Routine::Dsyrk);
        s.layout = Layout::Col;
        s.flag1 = b'U';
        s.flag2 = b'?';
        s.ldb = 0;
        s.m = -1;
        s.alpha = f64::NAN;
        s.beta = f64::NEG_INFINITY;
        let e = Entry {
            sym: SymId::DSYRK.into(),
            shape: &s,
            route: "xerbla",
            fallback: None,
            outcome: None,
            engine: None,
            info: Some(2),
            ab: None,
        };
        let text = line(&e);
        let Line::Call(c) = parse_line(&text, 1).unwrap_or_else(|err| panic!("{err}: {text}"))
        else {
            panic!()
        };
        assert_eq!(
            (c.uplo.as_deref(), c.trans.as_deref(), c.transa.as_deref()),
            (Some("U"), Some("?"), None)
        );
        assert_eq!((c.m, c.route.as_str(), c.info), (0, "xerbla", Some(2)));
        assert!(c.alpha.is_nan() && c.beta == f64::NEG_INFINITY);
    }

    #[test]
    fn cublas_records_name_the_entry_point_and_say_device_resident() {
        let s = shape(Routine::Dgemm);
        let record = |batch| {
            let e = Entry {
                sym: Sym::Cublas {
                    name: "cublasGemmStridedBatchedEx",
                    batch,
                },
                shape: &s,
                route: "gpu-native",
                fallback: Some("stream capturing into a graph: cuBLAS records the call"),
                outcome: None,
                engine: None,
                info: None,
                ab: None,
            };
            let text = line(&e);
            match parse_line(&text, 1).unwrap_or_else(|err| panic!("{err}: {text}")) {
                Line::Call(c) => *c,
                other => panic!("{other:?}"),
            }
        };
        let c = record(8);
        assert_eq!(c.sym, "cublasGemmStridedBatchedEx");
        assert!(c.device_resident);
        assert_eq!(c.batch, Some(8));
        assert_eq!(record(1).batch, None, "a single product has no batch field");
        // a host record stays as it was: no device_resident, no batch
        let host = Entry {
            sym: SymId::DSYRK.into(),
            shape: &s,
            route: "vendor",
            fallback: None,
            outcome: None,
            engine: None,
            info: None,
            ab: None,
        };
        let text = line(&host);
        assert!(
            !text.contains("device_resident") && !text.contains("batch"),
            "{text}"
        );
    }

    #[test]
    fn templates_expand_and_children_get_their_own_name() {
        assert_eq!(
            expand("/t/run-%p-%h-r%r.jsonl", 42, "node1", "3", false),
            "/t/run-42-node1-r3.jsonl"
        );
        assert_eq!(expand("a%%p%", 1, "h", "0", false), "a%p%");
        assert_eq!(expand("trace.jsonl", 77, "h", "0", true), "trace.jsonl.77");
        assert_eq!(
            expand("trace-%p.jsonl", 77, "h", "0", true),
            "trace-77.jsonl"
        );
    }

    // (Not under Miri: it creates files, links and FIFOs, which Miri's isolated machine
    // cannot, and opens them with O_NONBLOCK, which it does not model.)
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_planted_symlink_is_refused_and_not_followed() {
        let dir = std::env::temp_dir().join(format!("ozaki-sink-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("victim");
        std::fs::write(&target, b"precious").unwrap();
        let link = dir.join("trace.jsonl");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = create(link.to_str().unwrap()).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");

        let fifo = dir.join("fifo.jsonl");
        let cfifo = CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mkfifo(cfifo.as_ptr(), 0o600) }, 0);
        assert!(
            create(fifo.to_str().unwrap()).is_err(),
            "a FIFO must be refused, not block"
        );

        use std::os::unix::fs::PermissionsExt;
        let plain = dir.join("plain.jsonl");
        std::fs::write(&plain, b"old contents").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o600)).unwrap();
        let fd = create(plain.to_str().unwrap()).unwrap();
        write_all(fd, b"{}\n").unwrap();
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
        assert_eq!(
            std::fs::read(&plain).unwrap(),
            b"{}\n",
            "an existing private file of ours is truncated"
        );
        let fresh = dir.join("fresh.jsonl");
        // SAFETY: our descriptor.
        unsafe { libc::close(create(fresh.to_str().unwrap()).unwrap()) };
        assert_eq!(
            std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o077,
            0,
            "not readable by others"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // (Not under Miri: it creates files, links and FIFOs, which Miri's isolated machine
    // cannot, and opens them with O_NONBLOCK, which it does not model.)
    #[test]
    #[cfg_attr(miri, ignore)]
    fn files_others_can_read_or_redirect_are_refused_and_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ozaki-sink-refuse-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let refused = |p: &std::path::Path| create(p.to_str().unwrap()).unwrap_err().to_string();

        let readable = dir.join("readable.jsonl");
        std::fs::write(&readable, b"keep").unwrap();
        std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(refused(&readable).contains("mode 644"));

        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let hard = dir.join("hard.jsonl");
        std::fs::hard_link(&victim, &hard).unwrap();
        assert!(refused(&hard).contains("2 hard links"));

        let open = dir.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // As root the test can play the other user: nobody's files and folders.
            let nobody = 65534;
            let planted = dir.join("planted.jsonl");
            std::fs::write(&planted, b"keep").unwrap();
            std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&planted, Some(nobody), Some(nobody)).unwrap();
            assert!(refused(&planted).contains("owned by uid 65534"));
            assert_eq!(std::fs::read(&planted).unwrap(), b"keep");
            std::os::unix::fs::chown(&open, Some(nobody), Some(nobody)).unwrap();
            assert!(refused(&open.join("t.jsonl")).contains("writable by every user"));
            let link = dir.join("linked");
            std::os::unix::fs::symlink(&open, &link).unwrap();
            std::os::unix::fs::lchown(&link, Some(nobody), Some(nobody)).unwrap();
            assert!(refused(&link.join("t.jsonl")).contains("symbolic link owned by another user"));
        }
        for p in [&readable, &victim] {
            assert_eq!(std::fs::read(p).unwrap(), b"keep", "{}", p.display());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // (Not under Miri: the header reads the executable's path from /proc, which Miri's
    // isolated machine cannot.)
    #[test]
    #[cfg_attr(miri, ignore)]
    fn header_serialises_with_schema_and_optional_argv() {
        let h = header(1, None, false);
        let text = serde_json::to_string(&h).unwrap();
        assert!(!text.contains("argv"), "{text}");
        let Line::Header(back) = parse_line(&text, 1).unwrap() else {
            panic!()
        };
        assert_eq!(back.schema, SCHEMA_VERSION);
        assert!(header(1, Some(0), true).argv.is_some_and(|a| !a.is_empty()));
    }

    #[test]
    fn the_first_gpu_record_names_the_cuda_libraries() {
        let s = shape(Routine::Dgemm);
        let e = Entry {
            sym: SymId::DGEMM.into(),
            shape: &s,
            route: "gpu-native",
            fallback: None,
            outcome: None,
            engine: None,
            info: None,
            ab: None,
        };
        let libs = [
            "/v/site-packages/nvidia/cu13/lib/libcublas.so.13".to_string(),
            "/lib/x86_64-linux-gnu/libcuda.so.1".to_string(),
        ];
        let mut announced = false;
        let mut record = |gpu: Option<&[String]>| {
            let mut out = Vec::new();
            format_body(&mut out, 0, 0, 0, 0, &e);
            push_cuda_libs(&mut out, &mut announced, gpu);
            out.extend_from_slice(b"}");
            let text = String::from_utf8(out).unwrap();
            match parse_line(&text, 1).unwrap_or_else(|err| panic!("{err}: {text}")) {
                Line::Call(c) => c.cuda_libs,
                _ => panic!("{text}"),
            }
        };
        // A host call first, then an empty list (nothing loaded), names nothing and does not
        // use up the announcement.
        assert_eq!(record(None), None);
        assert_eq!(record(Some(&[])), None);
        assert_eq!(record(Some(&libs)).as_deref(), Some(&libs[..]));
        assert_eq!(record(Some(&libs)), None);
    }

    /// A record of `seq` made by thread `tid`, with no allocation of its own.
    fn queued(seq: u64, tid: u64) -> Queued {
        Queued {
            seq,
            t_ns: seq,
            dur_ns: 1,
            tid,
            sym: SymId::DGEMM.into(),
            shape: shape(Routine::Dgemm),
            route: "vendor",
            fallback: None,
            outcome: None,
            engine: None,
            info: None,
            ab: None,
        }
    }

    /// Takes out what `ring` holds now (patience `patience`): the records' `seq`s, and whether
    /// it took out all of them.
    fn drained(ring: &Ring, patience: std::time::Duration) -> (Vec<u64>, bool) {
        let mut got = Vec::new();
        let all = ring.drain(patience, |r| got.push(r.seq));
        (got, all)
    }

    #[test]
    fn concurrent_writers_and_a_reader_keep_every_record_once_whole_and_in_order() {
        // A small ring, so the writers wrap it many times and often find it full.
        let (writers, each, cap) = if cfg!(miri) {
            (3, 12, 4)
        } else {
            (6, 5000, 32)
        };
        let ring = Ring::new(cap);
        ring.allocate();
        let got = std::thread::scope(|s| {
            for w in 0..writers {
                let ring = &ring;
                s.spawn(move || {
                    for i in 0..each {
                        // A record carrying a heap value: Miri checks it is dropped once.
                        let mut q = queued(i, w);
                        q.fallback = Some(format!("writer {w} record {i}").into());
                        // A full ring hands the record back (the sink then writes it at
                        // once); here the writer offers it again.
                        while let Err(back) = ring.push(q) {
                            q = back;
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let mut lines = Vec::new();
            while lines.len() < (writers * each) as usize {
                ring.drain(std::time::Duration::from_millis(1), |r| {
                    let mut out = Vec::new();
                    format_body(&mut out, r.seq, r.t_ns, r.dur_ns, r.tid, &r.entry());
                    out.push(b'}');
                    lines.push(String::from_utf8(out).unwrap());
                });
                assert!(ring.len() <= cap, "the ring holds more than its capacity");
                std::thread::yield_now();
            }
            lines
        });
        let mut next = vec![0; writers as usize];
        for text in &got {
            let Line::Call(c) = parse_line(text, 1).unwrap_or_else(|e| panic!("{e}: {text}"))
            else {
                panic!("{text}")
            };
            // Whole: the record is the one its writer made, every field from the same call.
            let w = c.tid as usize;
            assert_eq!(
                c.fallback.as_deref(),
                Some(format!("writer {w} record {}", c.seq).as_str())
            );
            assert_eq!((c.t_ns, c.dur_ns), (c.seq, 1));
            // Once each, and each writer's records in the order it made them.
            assert_eq!(c.seq, next[w], "writer {w}: lost, repeated or reordered");
            next[w] += 1;
        }
        assert!(next.iter().all(|&n| n == each), "{next:?}");
        assert_eq!(ring.len(), 0);
    }

    /// A caller on a thread of `s` that has claimed the record of seq 1 in `ring` and stalls
    /// before writing it, once it has claimed it: its handle (whether its push succeeded),
    /// and the sender that lets it go on (dropping it does too, so a failing test reports
    /// instead of hanging).
    fn stalled_caller<'scope>(
        s: &'scope std::thread::Scope<'scope, '_>,
        ring: &'scope Ring,
    ) -> (
        std::thread::ScopedJoinHandle<'scope, bool>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (claimed, stalled) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let caller = s.spawn(move || {
            ring.push_stalling(queued(1, 2), || {
                claimed.send(()).unwrap();
                let _ = wait.recv();
            })
            .is_ok()
        });
        stalled.recv().unwrap();
        (caller, go)
    }

    #[test]
    fn a_reader_stops_at_a_claimed_record_until_its_caller_publishes_it() {
        let ring = Ring::new(8);
        ring.allocate();
        ring.push(queued(0, 1)).ok().unwrap();
        std::thread::scope(|s| {
            let ring = &ring;
            let (stalled_caller, go) = stalled_caller(s, ring);
            // A later caller does not wait for the stalled one.
            assert_eq!(ring.push(queued(2, 1)).ok(), Some(2));
            assert_eq!(ring.len(), 2 + 1);
            // An impatient reader takes out what comes before the claimed record, stops there,
            // and leaves the rest queued.
            assert_eq!(drained(ring, std::time::Duration::ZERO), (vec![0], false));
            assert_eq!(ring.len(), 2);
            assert_eq!(ring.with_oldest(|r| r.seq), None, "not published yet");
            // A patient reader waits for it, then goes on in claim order.
            let reader = s.spawn(|| drained(ring, std::time::Duration::from_secs(60)));
            go.send(()).unwrap();
            assert_eq!(reader.join().unwrap(), (vec![1, 2], true));
            assert!(stalled_caller.join().unwrap());
        });
        assert_eq!(ring.len(), 0);
    }

    /// A caller never allocates the slots (a `fork` during that allocation would leave the
    /// child's first record waiting for it forever): before [`Ring::allocate`], which runs
    /// with the sink held, every record comes back to be written at once.
    #[test]
    fn a_ring_not_yet_allocated_hands_the_record_back() {
        let ring = Ring::new(4);
        assert_eq!(ring.push(queued(0, 0)).err().map(|q| q.seq), Some(0));
        assert_eq!(ring.len(), 0);
        ring.allocate();
        assert_eq!(ring.push(queued(1, 0)).ok(), Some(0));
    }

    #[test]
    fn a_full_or_closed_ring_hands_the_record_back_and_keeps_what_it_holds() {
        let ring = Ring::new(4);
        ring.allocate();
        for i in 0..4 {
            assert_eq!(ring.push(queued(i, 0)).ok(), Some(i));
        }
        // MAX_QUEUED records wait: the caller gets its record back, to write it at once.
        let back = ring.push(queued(4, 0)).err().unwrap();
        assert_eq!(back.seq, 4);
        assert_eq!(ring.with_oldest(|r| r.seq), Some(0));
        assert_eq!(
            drained(&ring, std::time::Duration::ZERO),
            (vec![0, 1, 2, 3], true)
        );
        // Room again, in the slots the reader gave back.
        assert_eq!(ring.push(back).ok(), Some(4));
        assert_eq!(ring.push(queued(5, 0)).ok(), Some(5));
        ring.close();
        assert_eq!(ring.push(queued(6, 0)).err().map(|q| q.seq), Some(6));
        // Closing keeps what was queued before, for the exit flush to write.
        assert_eq!(
            drained(&ring, std::time::Duration::ZERO),
            (vec![4, 5], true)
        );
        assert_eq!(drained(&ring, std::time::Duration::ZERO), (vec![], true));
    }

    #[test]
    fn a_fork_child_discards_the_queue_and_skips_a_slot_being_filled() {
        let ring = Ring::new(4);
        ring.allocate();
        let mut kept = queued(0, 1);
        kept.fallback = Some("dropped unwritten, once".into());
        ring.push(kept).ok().unwrap();
        std::thread::scope(|s| {
            let ring = &ring;
            let (filling, go) = stalled_caller(s, ring);
            ring.push(queued(2, 1)).ok().unwrap();
            // What `after_fork_child` does: nothing is waited for, nothing is left to read.
            ring.close_and_discard();
            assert_eq!(ring.len(), 0);
            assert!(
                ring.push(queued(3, 1)).is_err(),
                "closed: the child writes through"
            );
            // The slot's caller (in the child, a thread of the parent) finishing later changes
            // nothing the ring reads.
            go.send(()).unwrap();
            assert!(filling.join().unwrap());
        });
        assert_eq!(drained(&ring, std::time::Duration::ZERO), (vec![], true));
    }
}
