//! `libozaki_shim.so`: a BLAS interposer that traces every dgemm/dsyrk call of an unmodified
//! program and routes it to the vendor BLAS, a built-in kernel, or (later issues) Ozaki-II
//! emulation on the CPU or GPU.
//!
//! Put it in front of any program with `LD_PRELOAD=libozaki_shim.so` (or `ozaki run -- CMD`).
//! It exports the names real clients call (`dgemm_`, `cblas_dgemm`, pip wheels'
//! `scipy_cblas_dgemm64_`, ...; the list is [`symbols::SYMBOLS`]). With the default route the
//! program gets exactly the results it got before, bit for bit: the original arguments go to
//! the real BLAS, found lazily behind us ([`forward`]). With `OZAKI_TRACE=FILE` every call is
//! written to a JSON Lines trace ([`trace_sink`], schema in `ozaki_core::trace`).
//!
//! ```text
//! $ cargo build --release -p ozaki-shim
//! $ OZAKI_TRACE=trace-%p.jsonl LD_PRELOAD=$PWD/target/release/libozaki_shim.so \
//!       python3 -c 'import numpy as np; a = np.ones((300, 200)); a @ a.T'
//! $ cat trace-*.jsonl
//! {"type":"header","schema":1,"pid":6535,"exe":"/usr/bin/python3.11",...,"vendor":{"cblas_dsyrk":"/lib/x86_64-linux-gnu/libblas.so.3"},...}
//! {"type":"call","seq":0,...,"sym":"cblas_dsyrk","routine":"dsyrk","layout":"row","uplo":"U","trans":"N","m":300,"n":300,"k":200,...,"route":"vendor"}
//! ```
//!
//! ## How a call flows
//! ```text
//! exports.rs stub ─► entry::call ─► abi: decode + reference checks ─► route::choose ─► route::execute ─► trace_sink::record
//!   (one line,         (FFI boundary:     (illegal, quick ->            (OZAKI_ROUTE;     (vendor | builtin |
//!    hand-written)      guard, catch_unwind) the vendor unchanged;       auto)             cpu-ozaki | gpu-*;
//!                                            row-major -> column-major)                   Err/panic -> vendor)
//! ```
//!
//! | module | what it does |
//! |---|---|
//! | [`symbols`] | the table of exported names (prefix, base, ABI, integer width, doc) and [`symbols::SymId`] |
//! | `exports` | one hand-written `#[no_mangle]` stub per name (cbindgen reads them for `include/ozaki_shim.h`) |
//! | [`entry`] | the FFI boundary rule: nested calls straight through, everything else inside `catch_unwind` |
//! | [`abi`] | the only reader of raw caller pointers: reference-BLAS argument checks, xerbla, row-major conversion |
//! | [`forward`] | finding the real BLAS per symbol: `OZAKI_VENDOR_BLAS`, `RTLD_NEXT`, loaded objects |
//! | [`kept_open`] | a loaded library opened again by its path, to look names up in it alone |
//! | [`guard`] | per-thread re-entrancy guard (reference `cblas_dgemm` calls `dgemm_`), robust to handlers that `longjmp` or throw |
//! | [`shim_thread`] | the shim's own threads, with every signal blocked (a program's handler never runs on them) |
//! | [`lazy`] | fork-safe lazy initialisation of every process-wide state |
//! | [`process`] | the load-time constructor and the `fork`/`exit` handlers |
//! | `shield` | the `catch_unwind` wrapper of every function the loader, libc or the C runtime calls |
//! | [`route`] | route dispatch and fallback; `vendor`, `builtin`, `cpu_ozaki` and `gpu` |
//! | `cublas_hook` | the exported fp64 cuBLAS entry points: a GPU-resident program's calls through the device-resident decision |
//! | [`config`] | `OZAKI_*` environment variables, read once |
//! | [`trace_sink`] | the trace file: header, per-call records, fork/exit/crash behaviour |
//! | [`vendor_spin`] | `OZAKI_VENDOR_SPIN`: the vendor's spin timeout, set at load before the program loads its BLAS |
//! | [`vendor_core`] | the kernels an OpenBLAS vendor says it runs (`openblas_get_corename`), for the trace |
//! | [`ab`] | `OZAKI_AB`: the vendor beside the chosen route on a private copy of C, differences and times in the trace |
//!
//! ## Guarantees
//! - No panic crosses into C (every profile keeps `panic = "unwind"`); any failure of a
//!   non-vendor route falls back to the vendor BLAS with the original arguments, and a route
//!   writes C only when its whole result is ready.
//! - A call the reference BLAS's checks reject, or quick-return, goes to the vendor BLAS
//!   unchanged: its checks, its error handler, its quick returns, exactly as without the shim
//!   (vendors differ at these edges). With no vendor, illegal arguments reach `xerbla_` (or
//!   `cblas_xerbla`) exactly as with the reference BLAS, and C is untouched.
//! - Error handlers may leave a call by `longjmp` or a C++ exception: the exported names are
//!   `extern "C-unwind"` and no `catch_unwind` lies between them and a foreign call.
//! - With no vendor BLAS anywhere, the built-in cache-blocked kernel computes C (one stderr
//!   line says so). C is never left unwritten.
//!
//! ## Where to plug in
//! - A new route: a function of the [`route`] module contract (`&GemmArgs`/`&SyrkArgs`, the
//!   caller's C as `&mut [f64]`, [`config::Config`]; returns [`route::RouteOutcome`] or a
//!   [`route::RouteError`], which becomes the trace's `fallback` and sends the call to the
//!   vendor). `route/cpu_ozaki.rs` and `route/gpu.rs` are those slots; `route/choose.rs` is
//!   `OZAKI_ROUTE=auto`.
//! - A new exported name: a row in [`symbols::SYMBOLS`] and a stub in `exports.rs`, then
//!   `scripts/gen-header` (`tests/exports.rs` and `tests/header.rs` fail until all agree).
//! - Device-resident C entry points (`ozaki_*`) live in their own module with their own stubs;
//!   cbindgen puts them into the same header.
//!
//! Nothing is resolved in a constructor; the only load-time work is setting the vendor's
//! spin timeout for the BLAS the program loads later ([`vendor_spin`]), taking the trace
//! clock origin and registering the `fork`/`exit` handlers ([`process`]).

pub mod ab;
pub mod abi;
pub mod config;
/// The cuBLAS hook: the program's own fp64 cuBLAS calls, traced and routed.
pub mod cublas_hook;
pub mod entry;
#[rustfmt::skip]
mod exports;
/// Device-resident C entry points (`ozaki_dgemm_device`, `ozaki_dsyrk_device`).
mod device_api;
pub mod forward;
pub mod guard;
pub mod kept_open;
pub mod lazy;
pub mod process;
pub mod route;
mod shield;
pub mod shim_thread;
pub mod symbols;
pub mod trace_sink;
pub mod vendor_core;
pub mod vendor_spin;
