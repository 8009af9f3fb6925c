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
//! process-wide queue behind a mutex ([`record`]: no JSON, no formatting of reasons; the
//! engine's `engine` field is put into words from the decision it names,
//! `crate::route::choose_note`). The flush thread, started with the file, turns the queue
//! into lines and writes them with `write(2)`, whole lines only, in queue order: when a
//! caller has queued [`WAKE_RECORDS`] records (it wakes the thread), and every [`FLUSH_TICK`]
//! once the oldest record is [`FLUSH_AGE_NS`] old. A caller that finds [`MAX_QUEUED`]
//! records waiting writes the queue itself, so the queue stays bounded and no record is
//! dropped. The file is created by the first record's caller, so a trace file exists (with
//! its header) as soon as a call was made.
//!
//! ## What survives what
//! Concurrent threads never tear or lose a line, and:
//! - normal exit, `exit()` from any thread, the end of `main`: an `atexit` handler writes the
//!   queue; records made by other threads after that are written immediately;
//! - `fork()`: the child drops the parent's queued records (the parent writes them) and opens
//!   its own file at its first call: the template expanded with the child's pid, or, when the
//!   template has no `%p`, `FILE.<pid>`. Its header has `parent_pid`; its `seq` starts at 0 and
//!   its `t_ns` counts from the fork. Children write every record at once, since they often
//!   end with `_exit(2)`, which runs no `atexit` handler;
//! - a crash (SIGKILL, SIGSEGV, abort), SIGINT/SIGTERM or `_exit(2)` in the original process
//!   loses at most the records still queued or being formatted: normally under
//!   [`WAKE_RECORDS`] plus one batch, at most [`MAX_QUEUED`] when callers outrun the flush
//!   thread, and never a record older than [`FLUSH_AGE_NS`] plus one [`FLUSH_TICK`]. The
//!   thread takes the locks only when it wakes, and is not copied into `fork` children
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
        OPENED.store(true, Ordering::Release);
    }
    let mut queue = QUEUE.lock();
    if queue.write_through {
        drop(queue);
        let mut sink = SHARED.lock();
        sink.drain();
        sink.write_one(&q);
        return;
    }
    if queue.records.capacity() == 0 {
        queue.records.reserve_exact(4 * WAKE_RECORDS);
    }
    if queue.records.is_empty() {
        queue.oldest_ns = end;
    }
    queue.records.push(q);
    let queued = queue.records.len();
    let start_flusher = !queue.flusher;
    queue.flusher = true;
    drop(queue);
    if start_flusher {
        // Without the thread the queue is still written at MAX_QUEUED and at exit.
        if let Ok(handle) = crate::shim_thread::spawn("ozaki-trace-flush", flush_when_due) {
            let _ = FLUSHER.set(handle.thread().clone());
        }
    }
    if queued.is_multiple_of(WAKE_RECORDS)
        && let Some(t) = FLUSHER.get()
    {
        t.unpark();
    }
    if queued >= MAX_QUEUED {
        SHARED.lock().drain();
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
    /// The records being formatted, taken from the queue (kept to reuse its capacity).
    batch: Vec<Queued>,
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

/// The records callers have left and nobody has written yet.
struct Queue {
    records: Vec<Queued>,
    /// Clock reading of the oldest record in `records` (meaningless when it is empty).
    oldest_ns: u64,
    /// Whether the background flush thread has been started in this process.
    flusher: bool,
    /// The sink writes every record at once: callers do not queue.
    write_through: bool,
}

/// A value behind a plain pthread mutex (not `std::sync::Mutex`), so the `fork` handlers
/// can hold it across `fork()` and release it on both sides.
///
/// Aligned to two cache lines so that no other value shares one with it: the callers lock the
/// queue on every record while the flush thread writes the sink's buffer, and with the two
/// statics side by side each of those writes stole the line the next caller's lock needed
/// (measured: the queue's lock and unlock took 140 ns of a traced call, stalled on their
/// atomic instructions).
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
    batch: Vec::new(),
    write_error_reported: false,
    torn: false,
    write_through: false,
    announced: [false; COUNT],
    cuda_announced: false,
});

static QUEUE: PMutex<Queue> = PMutex::new(Queue {
    records: Vec::new(),
    oldest_ns: 0,
    flusher: false,
    write_through: false,
});

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

/// A locked value, until dropped. Lock order: the sink before the queue.
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

/// The background flush: woken by a caller at [`WAKE_RECORDS`] queued records, and every
/// [`FLUSH_TICK`], it writes the queue when it holds that many or its oldest record is
/// [`FLUSH_AGE_NS`] old, so a program killed by a signal after a pause loses nothing. Ends
/// once the exit handler has switched the sink to writing through.
fn flush_when_due() {
    loop {
        std::thread::park_timeout(FLUSH_TICK);
        let mut sink = SHARED.lock();
        if sink.write_through {
            return;
        }
        let (queued, oldest) = {
            let q = QUEUE.lock();
            (q.records.len(), q.oldest_ns)
        };
        if queued >= WAKE_RECORDS || (queued > 0 && now_ns().saturating_sub(oldest) >= FLUSH_AGE_NS)
        {
            sink.drain();
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

    /// Writes every queued record, in queue order, formatting them here.
    fn drain(&mut self) {
        {
            let mut q = QUEUE.lock();
            std::mem::swap(&mut q.records, &mut self.batch);
        }
        if self.batch.is_empty() {
            return;
        }
        let mut batch = std::mem::take(&mut self.batch);
        for r in &batch {
            self.format(r);
            if self.buf.len() >= FLUSH_BYTES {
                self.flush();
            }
        }
        self.flush();
        batch.clear();
        self.batch = batch;
    }

    /// Writes one record at once (write-through), after what was queued before it.
    fn write_one(&mut self, r: &Queued) {
        self.drain();
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
    }
}

// ---------------------------------------------------------------------------------------
// Process events

pub(crate) fn flush_at_exit() {
    let mut sink = SHARED.lock();
    sink.drain();
    sink.write_through = true;
    QUEUE.lock().write_through = true;
    // Records queued between the drain and the switch.
    sink.drain();
}

pub(crate) fn before_fork() {
    // Hold the sink and the queue across fork() so the child never inherits them locked by
    // another thread (sink first: the lock order).
    SHARED.lock_raw();
    QUEUE.lock_raw();
}

pub(crate) fn after_fork_parent() {
    // SAFETY: locked in before_fork by this thread.
    unsafe {
        QUEUE.unlock_raw();
        SHARED.unlock_raw();
    }
}

pub(crate) fn after_fork_child() {
    // SAFETY: both mutexes are held by this (the only) thread since before_fork.
    let (sink, queue) = unsafe { (SHARED.held(), QUEUE.held()) };
    if sink.state == State::Open {
        // SAFETY: our own descriptor; the parent keeps its copy.
        unsafe { libc::close(sink.fd) };
    }
    sink.fd = -1;
    sink.buf.clear();
    queue.records.clear(); // the parent's records: the parent writes them
    queue.flusher = false; // the parent's flush thread is not copied into the child
    queue.write_through = true;
    sink.state = State::Closed;
    sink.write_through = true;
    sink.announced = [false; COUNT];
    sink.cuda_announced = false;
    OPENED.store(false, Ordering::Relaxed);
    SEQ.store(0, Ordering::Relaxed);
    set_origin();
    let _ = TID.try_with(|t| t.set(0));
    // SAFETY: locked in before_fork; this thread is its owner's copy.
    unsafe {
        QUEUE.unlock_raw();
        SHARED.unlock_raw();
    }
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
}
