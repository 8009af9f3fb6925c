//! The host path's knobs ([`Tuning`]): copy kinds, thread counts and sizes measured best on
//! the H200 host, replaceable per process by `ozaki bench --tuning`. Separate so that every
//! stage reads one source of its settings and the benchmarks can swap it.

use crate::host_copy::CopyKind;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Knobs of the host-resident path. The defaults are what `ozaki bench --pipeline` and
/// `--split` measured best on the H200 host (BENCHMARKS.md, "Host-resident path and
/// split"); `--tuning` runs those benchmarks under other values side by side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// How the upload ring's copies from the caller's memory write pinned staging
    /// (`crate::host_copy`). `memcpy`: its lines stay in the host's cache (the H200 host has
    /// 300 MiB of L3, the ring 96 MiB) for the DMA to read; streaming them to memory made the
    /// uploads slower (BENCHMARKS.md, "Host-resident path and split").
    pub upload: CopyKind,
    /// How C is written from pinned staging into the caller's memory. Streaming: nothing reads
    /// it soon, and skipping the read for ownership made the write-back 1.1-1.45x faster.
    pub write_back: CopyKind,
    /// Copy threads of the upload ring (0: one per core, at most 16).
    pub copy_threads: usize,
    /// Threads writing C from staging into the caller's memory, per call; a split divides
    /// them among its tiles (0: one per core, at most 32: 61 GB/s with 32 threads against
    /// 39 GB/s with 16 on the H200 host, BENCHMARKS.md).
    pub write_threads: usize,
    /// Bytes per slot of the upload ring.
    pub ring_chunk: usize,
    /// Target bytes of op(B) per column block of the pipeline, for `gpu-native` and for
    /// `gpu-ozaki`.
    pub block_bytes: (usize, usize),
    /// Most column blocks for `gpu-native` and for `gpu-ozaki`. A whole gpu-ozaki call
    /// converts each block of op(B) and panel of op(A) once (`crate::ozaki::pieces`); a tile
    /// of a split runs each unit as an emulated call of its own, converting its operands
    /// again.
    pub max_blocks: (usize, usize),
    /// Row panels of op(A) for `gpu-native` and for `gpu-ozaki`, see [`pipeline_panels`].
    ///
    /// [`pipeline_panels`]: super::pipeline_panels
    pub panels: (usize, usize),
    /// Fewest rows of a panel for `gpu-native` and for `gpu-ozaki`.
    pub panel_rows: (usize, usize),
    /// Slots of C's download ring and the bytes of each (`super::c_ring`): with beta = 0,
    /// C comes home through this ring instead of a pinned buffer the size of C. Each slot is
    /// written into the caller's C by one writer thread, so about as many slots as writer
    /// threads keep them all busy (BENCHMARKS.md, "C without full-size pinned
    /// staging").
    pub c_ring: (usize, usize),
    /// Whether large gemms page-lock the caller's op(A) and op(B) for the call instead of
    /// staging them (`super::register`); `None`: the process's setting ([`set_register`],
    /// from `OZAKI_HOST_REGISTER`).
    pub register: Option<bool>,
    /// When a gpu-ozaki call with beta = 0 starts writing C into the caller's memory
    /// (`super::early_write`).
    pub ozaki_write: WriteStart,
    /// The order in which a pipelined call uploads its row panels of op(A) and column
    /// blocks of op(B) (`super::grid::upload_order`).
    pub order: UploadOrder,
}

/// The order of a pipelined call's uploads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadOrder {
    /// Panel 0, block 0, panel 1, block 1, ..., then the blocks left.
    Alternate,
    /// The next panel whenever A's uploaded share (panels sent / panels) is at most B's
    /// (blocks sent / blocks), else the next block (the default): with 4 panels of 512 MiB
    /// and 8 blocks of 256 MiB (16384², gpu-ozaki) the shares stay equal and panel 3 comes
    /// after block 5 instead of block 2, so the device's units start more evenly but C's
    /// first block is complete later. On an H100 host it was as fast or faster than
    /// `Alternate` in every pair measured, both routes, 8192 and 16384 (BENCHMARKS.md,
    /// "The upload order of panels and blocks").
    Balanced,
}

impl std::str::FromStr for UploadOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<UploadOrder, String> {
        match s {
            "alternate" => Ok(UploadOrder::Alternate),
            "balanced" => Ok(UploadOrder::Balanced),
            _ => Err(format!("{s:?} is not alternate or balanced")),
        }
    }
}

/// When a gpu-ozaki call with beta = 0 starts writing the blocks of C it downloaded into the
/// caller's memory (gpu-native always writes them as they arrive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStart {
    /// Each block as soon as it is downloaded, while later parts still upload: the writes
    /// then share the host's memory with the uploads' staging copies, and on an H100 host
    /// the uploads ended 4-36 ms later (BENCHMARKS.md, "Host-resident calls at the link
    /// bound").
    Downloaded,
    /// Once the whole call's accuracy rule accepted its operands, after the last upload's
    /// copy (the default): C stays untouched by every failure the data can cause, and the
    /// blocks written after the uploads are done overlap the remaining products.
    Accepted,
}

impl std::str::FromStr for WriteStart {
    type Err = String;
    fn from_str(s: &str) -> Result<WriteStart, String> {
        match s {
            "downloaded" => Ok(WriteStart::Downloaded),
            "accepted" => Ok(WriteStart::Accepted),
            _ => Err(format!("{s:?} is not downloaded or accepted")),
        }
    }
}

impl Default for Tuning {
    fn default() -> Tuning {
        // the cut the engine prices host-resident calls with
        let (native, ozaki) = ozaki_core::host_pipeline::DEFAULT_CUTS;
        Tuning {
            upload: CopyKind::Memcpy,
            write_back: CopyKind::Stream,
            copy_threads: 0,
            write_threads: 0,
            ring_chunk: 32 << 20,
            block_bytes: (native.block_bytes, ozaki.block_bytes),
            max_blocks: (native.max_blocks, ozaki.max_blocks),
            panels: (native.panels, ozaki.panels),
            panel_rows: (native.panel_rows, ozaki.panel_rows),
            c_ring: (24, 4 << 20),
            register: None,
            ozaki_write: WriteStart::Accepted,
            order: UploadOrder::Balanced,
        }
    }
}

impl std::str::FromStr for Tuning {
    type Err = String;
    /// `key=value` pairs, comma separated, over the defaults: `up=memcpy|stream` (upload
    /// copies), `back=memcpy|stream` (write-back), `copy=...` (both), `threads=N`, `write=N`,
    /// `ring=MiB`, `block=MiB` (both routes), `ozaki_block=MiB`, `native=N`, `ozaki=N` (most
    /// blocks), `panel_rows=N`, `ozaki_panel_rows=N` (fewest rows per panel), `panels=N`,
    /// `ozaki_panels=N`, `cslots=N`, `cslot=MiB` (C's download ring), `register=0|1`
    /// (page-lock op(A) and op(B) for the call), `ozaki_write=downloaded|accepted` (when
    /// gpu-ozaki starts writing C with beta = 0), `order=alternate|balanced` (the upload
    /// order of panels and blocks) (`default` alone: the defaults).
    fn from_str(spec: &str) -> Result<Tuning, String> {
        let mut t = Tuning::default();
        for kv in spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "default")
        {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("tuning {kv:?} is not key=value"))?;
            let num = || {
                v.parse::<usize>()
                    .map_err(|e| format!("tuning {kv:?}: {e}"))
            };
            match k {
                "up" => t.upload = v.parse()?,
                "back" => t.write_back = v.parse()?,
                "copy" => (t.upload, t.write_back) = (v.parse()?, v.parse()?),
                "threads" => t.copy_threads = num()?,
                "write" => t.write_threads = num()?,
                "ring" => t.ring_chunk = num()?.max(1) << 20,
                "block" => t.block_bytes = (num()?.max(1) << 20, num()?.max(1) << 20),
                "ozaki_block" => t.block_bytes.1 = num()?.max(1) << 20,
                "panel_rows" => t.panel_rows.0 = num()?.max(1),
                "ozaki_panel_rows" => t.panel_rows.1 = num()?.max(1),
                "native" => t.max_blocks.0 = num()?.max(1),
                "ozaki" => t.max_blocks.1 = num()?.max(1),
                "panels" => t.panels.0 = num()?.max(1),
                "ozaki_panels" => t.panels.1 = num()?.max(1),
                "cslots" => t.c_ring.0 = num()?.max(1),
                "cslot" => t.c_ring.1 = num()?.max(1) << 20,
                "ozaki_write" => t.ozaki_write = v.parse()?,
                "order" => t.order = v.parse()?,
                "register" => {
                    t.register = Some(match v {
                        "0" => false,
                        "1" => true,
                        _ => return Err(format!("tuning {kv:?}: register is 0 or 1")),
                    })
                }
                _ => return Err(format!("unknown tuning key {k:?}")),
            }
        }
        Ok(t)
    }
}

static TUNING: std::sync::RwLock<Option<Tuning>> = std::sync::RwLock::new(None);

/// Replaces the process's host-path tuning (benchmarks; `None`: the defaults).
pub fn set_tuning(t: Option<Tuning>) {
    *TUNING.write().unwrap_or_else(|p| p.into_inner()) = t;
}

/// The host-path tuning in force.
pub fn tuning() -> Tuning {
    TUNING
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or_default()
}

static REGISTER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets whether this process's large host-resident gemms page-lock the caller's op(A) and
/// op(B) for the call (the shim's `OZAKI_HOST_REGISTER`, resolved against its profile); a
/// tuning's `register` overrides it. Off until set.
pub fn set_register(on: bool) {
    REGISTER.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether large gemms page-lock their operands now: the tuning's `register`, else the
/// process's setting.
pub(crate) fn register_on() -> bool {
    tuning()
        .register
        .unwrap_or_else(|| REGISTER.load(std::sync::atomic::Ordering::Relaxed))
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The count of BLAS calls running in the process ([`set_cpu_sharers`]), as the address of
/// a `fn() -> u32`; 0 when none was registered.
static SHARERS: AtomicUsize = AtomicUsize::new(0);

/// Registers `calls`, the number of BLAS calls in flight in the process (the asking one
/// included). With the default thread counts (0), a call's copy and write-back threads are
/// then its share of the cores, the count divided by `calls()` when the pool is sized: a GPU
/// call made while 15 other threads run vendor calls (PySCF calls from every OpenMP thread)
/// must not put 16 copy threads and 16 writers beside them, which would preempt every one.
/// A single caller keeps every core. Explicit counts ([`Tuning`]) are taken as they are.
pub fn set_cpu_sharers(calls: fn() -> u32) {
    let f = calls as usize;
    // Written once: later registrations of the same function leave the line unwritten.
    if SHARERS.load(Ordering::Relaxed) != f {
        SHARERS.store(f, Ordering::Relaxed);
    }
}

/// The BLAS calls in flight in the process ([`set_cpu_sharers`]), at least 1; 1 when none
/// was registered.
pub(crate) fn sharers() -> u32 {
    let f = SHARERS.load(Ordering::Relaxed);
    if f == 0 {
        return 1;
    }
    // SAFETY: only `set_cpu_sharers` stores a non-zero value, the address of a `fn() -> u32`.
    let calls: fn() -> u32 = unsafe { std::mem::transmute::<usize, fn() -> u32>(f) };
    calls().max(1)
}

/// `n` threads divided among the calls in flight ([`set_cpu_sharers`]), at least one.
fn share(n: usize) -> usize {
    (n / sharers() as usize).max(1)
}

/// Threads that write a result from pinned staging into the caller's C: one per core (at
/// most 32) divided among the calls in flight ([`set_cpu_sharers`]).
pub(crate) fn write_threads() -> usize {
    match tuning().write_threads {
        0 => share(cores().clamp(1, 32)),
        t => t,
    }
}

/// Copy threads of the upload ring and of [`upload`]: one per core (at most 16) divided
/// among the calls in flight ([`set_cpu_sharers`]).
///
/// [`upload`]: super::upload::upload
pub(crate) fn copy_threads() -> usize {
    match tuning().copy_threads {
        0 => share(cores().clamp(1, 16)),
        t => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the calls in flight registered, the default pools are the caller's share of the
    /// cores (at least one thread); explicit counts stay as they are.
    #[test]
    fn default_pools_are_the_share_of_the_calls_in_flight() {
        static CALLS: AtomicUsize = AtomicUsize::new(1);
        fn calls() -> u32 {
            CALLS.load(Ordering::Relaxed) as u32
        }
        let (copy, write) = (cores().clamp(1, 16), cores().clamp(1, 32));
        set_cpu_sharers(calls);
        assert_eq!(
            (copy_threads(), write_threads()),
            (copy, write),
            "one call: every core"
        );
        CALLS.store(4, Ordering::Relaxed);
        assert_eq!(
            (copy_threads(), write_threads()),
            ((copy / 4).max(1), (write / 4).max(1))
        );
        CALLS.store(1000, Ordering::Relaxed);
        assert_eq!(
            (copy_threads(), write_threads()),
            (1, 1),
            "at least one thread"
        );
        assert_eq!(share(24), 1);
        CALLS.store(1, Ordering::Relaxed);
    }

    /// Tunings parse as key=value pairs over the defaults; bad keys and values are refused.
    #[test]
    fn tunings_parse_over_the_defaults() {
        assert_eq!("default".parse(), Ok(Tuning::default()));
        let t: Tuning =
            "up=stream,back=memcpy,threads=24,write=8,ring=16,block=64,native=16,ozaki=2"
                .parse()
                .unwrap();
        assert_eq!(
            (t.upload, t.write_back),
            (CopyKind::Stream, CopyKind::Memcpy)
        );
        let both: Tuning = "copy=memcpy".parse().unwrap();
        assert_eq!(
            (both.upload, both.write_back),
            (CopyKind::Memcpy, CopyKind::Memcpy)
        );
        assert_eq!((t.copy_threads, t.write_threads), (24, 8));
        assert_eq!(
            (t.ring_chunk, t.block_bytes),
            (16 << 20, (64 << 20, 64 << 20))
        );
        let oz: Tuning = "ozaki_block=256,ozaki_panel_rows=2048".parse().unwrap();
        assert_eq!(
            (oz.block_bytes, oz.panel_rows),
            (
                (Tuning::default().block_bytes.0, 256 << 20),
                (Tuning::default().panel_rows.0, 2048)
            )
        );
        assert_eq!(t.max_blocks, (16, 2));
        let ring: Tuning = "cslots=2,cslot=1".parse().unwrap();
        assert_eq!(ring.c_ring, (2, 1 << 20));
        assert_eq!(Tuning::default().register, None);
        assert_eq!("register=1".parse::<Tuning>().unwrap().register, Some(true));
        assert_eq!(
            "register=0".parse::<Tuning>().unwrap().register,
            Some(false)
        );
        assert!("register=yes".parse::<Tuning>().is_err());
        assert_eq!(Tuning::default().ozaki_write, WriteStart::Accepted);
        assert_eq!(
            "ozaki_write=downloaded"
                .parse::<Tuning>()
                .unwrap()
                .ozaki_write,
            WriteStart::Downloaded
        );
        assert!("ozaki_write=never".parse::<Tuning>().is_err());
        assert_eq!(Tuning::default().order, UploadOrder::Balanced);
        assert_eq!(
            "order=alternate".parse::<Tuning>().unwrap().order,
            UploadOrder::Alternate
        );
        assert!("order=random".parse::<Tuning>().is_err());
        assert!("copy=fast".parse::<Tuning>().is_err());
        assert!("threads".parse::<Tuning>().is_err());
        assert!("color=red".parse::<Tuning>().is_err());
    }
}
