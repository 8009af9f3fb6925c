//! One host-resident dgemm split across several device slots.
//!
//! `ozaki_core::devices::split_c` decides the tiles of C; this module runs them: one thread
//! per tile, each on its own slot's [`Gpu`](crate::device::Gpu) ([`gpu_slot`]: own streams, workspace and
//! staging, so slots on different GPUs, or twice on one GPU with `OZAKI_DEVICES=0,0`, run
//! concurrently), each calling the single-device host-resident route ([`host::gemm_on`],
//! native or emulated) on its sub-problem
//!
//! `C[r0.., c0..] = alpha op(A)[r0..r0+rows, :] op(B)[:, c0..c0+cols] + beta C[r0.., c0..]`
//!
//! whose operands are plain sub-slices of the caller's A and B with the same leading
//! dimensions ([`tile_args`]) and a block of the caller's C ([`host::HostC`]; nothing is
//! copied on the host beyond the pinned staging of each slot's own pipeline,
//! `host::staged_gemm`). With beta != 0 each
//! tile leaves its result in its slot's pinned staging; the threads then meet at a barrier,
//! and only when **every** tile succeeded does each write its own tile of the caller's C,
//! straight from its staging (tiles are disjoint), so a failure anywhere leaves C untouched
//! and the shim can still run the vendor BLAS (the route contract). With
//! beta == 0 each tile instead writes its blocks as they arrive through its slot's download
//! ring, once every tile may (`early_write`: C is no input then, and a failure leaves a C
//! the vendor fallback writes whole).
//!
//! Results: every entry of a tile depends only on its row of op(A) and its column of op(B)
//! (the emulated route scales per row of op(A) and per column of op(B), and its INT8
//! products are exact), so with the same moduli count a split C equals the unsplit one bit
//! for bit. The automatic moduli choice looks at the exponent spread of the operands it
//! sees, i.e. of its own tile's panels, so an automatic split may use a different count per
//! tile (each still meets the accuracy rule for its entries); the outcome reports the
//! largest. cuBLAS may pick a different kernel for a tile's shape than for the whole C, so
//! `gpu-native` is not guaranteed bit-identical (the device test reports what it sees).

use crate::device::gpu_slot;
use crate::error::GpuError;
use crate::host::{self, Engine, Handle, HostC, HostOutcome};
use cudarc::driver::sys;
use ozaki_core::blas::{GemmArgs, Trans};
use ozaki_core::devices::{SplitPlan, Tile};

/// What a split call did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MultiOutcome {
    /// Ordinal of each tile's slot, in tile order (trace field `devices`).
    pub devices: Vec<u32>,
    /// Largest moduli count of any tile (emulated route).
    pub moduli: Option<u32>,
    /// Phases of the slowest tile (by total time), plus the host copy into C as transfer.
    pub phases: ozaki_core::trace::Phases,
    /// Per-tile outcomes, in tile order (each with its pipeline's timeline).
    pub tiles: Vec<HostOutcome>,
    /// Longest tile's write of C from staging into the caller's memory, ms.
    pub commit_ms: f32,
}

/// The sub-problem of `tile`: its operands are sub-slices of `args`' A and B (same leading
/// dimensions), its C starts at element [`tile_c_offset`] of the caller's C (same `ldc`).
///
/// op(A) rows `r0..` start at element `r0` of A (`transa = N`, A is m x k) or at column `r0`
/// (`T`, A is k x m); op(B) columns `c0..` start at column `c0` of B (`N`) or at element
/// `c0` (`T`, B is n x k).
pub fn tile_args<'a>(args: &GemmArgs<'a>, tile: &Tile) -> GemmArgs<'a> {
    let (r0, c0) = (tile.row0 as usize, tile.col0 as usize);
    let a_off = if args.transa == Trans::No {
        r0
    } else {
        r0 * args.lda
    };
    let b_off = if args.transb == Trans::No {
        c0 * args.ldb
    } else {
        c0
    };
    GemmArgs {
        m: tile.rows as usize,
        n: tile.cols as usize,
        a: args.a.get(a_off..).unwrap_or(&[]),
        b: args.b.get(b_off..).unwrap_or(&[]),
        ..*args
    }
}

/// Index of `tile`'s first element in the caller's C (leading dimension `ldc`).
pub fn tile_c_offset(ldc: usize, tile: &Tile) -> usize {
    tile.col0 as usize * ldc + tile.row0 as usize
}

/// Whether the tiles of `plan` share all of A across distinct devices: one grid row (every
/// tile needs all rows of op(A)) and no device twice (two slots of one device share its
/// context and would gain nothing).
fn shares_a(plan: &SplitPlan) -> bool {
    let devs: Vec<u32> = plan.tiles.iter().map(|t| t.device).collect();
    plan.grid_rows == 1
        && devs.len() >= 2
        && devs.iter().enumerate().all(|(i, d)| !devs[..i].contains(d))
}

/// Lets `ctx` (current on this thread) reach the other contexts' memory directly, so peer
/// copies go over NVLink instead of through host memory. Refusals (already enabled, or no
/// peer path) are harmless: `cuMemcpyPeerAsync` still works, staged by the driver.
/// Side effect: peer access stays enabled in the devices' primary contexts, which a CUDA
/// program under the shim shares; its own `cudaDeviceEnablePeerAccess` then returns
/// `cudaErrorPeerAccessAlreadyEnabled` (harmless, but visible).
fn enable_peers(ctx: sys::CUcontext, others: &[(u64, Handle<sys::CUcontext>)]) {
    for &(_, peer) in others {
        if peer.0 != ctx {
            // SAFETY: both contexts are retained primary contexts.
            let r = unsafe { sys::cuCtxEnablePeerAccess(peer.0, 0) };
            tracing::debug!(?r, "cuCtxEnablePeerAccess");
        }
    }
}

/// A tile thread's panic, as the error the caller sees (a panic never crosses the C boundary).
fn panicked<T>(_: Box<dyn std::any::Any + Send>) -> Result<T, GpuError> {
    Err(GpuError::Cuda("a split tile's thread panicked".into()))
}

/// C = alpha op(A) op(B) + beta C with C's tiles computed concurrently on the slots of
/// `plan` (from `split_c` over this process's device slots). C is written only after every
/// tile succeeded.
///
/// When the tiles are column blocks of C on distinct devices (`shares_a`), each needs all
/// of A: instead of every slot staging all of A through host memory (the host's memory
/// bandwidth, not the link, bounds staging: BENCHMARKS.md, host-link table), A is cut into
/// row panels (`host::shared_panels`), slot i stages panels i, i + T, ... as part of its own
/// pipeline and copies each on to the other devices over NVLink, so A crosses host memory
/// once; each slot's products start as soon as a panel and its first block of B are on its
/// device, whoever uploaded the panel (`host::PanelBoard`). The slots meet at a barrier only
/// once their buffers for A exist (peer copies need the addresses).
///
/// # Errors
/// - the first tile's error (in tile order) when any tile fails; C is then untouched (with
///   beta = 0 it may hold early blocks, see `early_write`).
pub fn gemm(
    args: &GemmArgs,
    c: &mut [f64],
    engine: Engine,
    plan: &SplitPlan,
) -> Result<MultiOutcome, GpuError> {
    gemm_c(
        args,
        HostC::of_slice(c, args.m, args.n, args.ldc)?,
        engine,
        plan,
    )
}

/// [`gemm`] on the caller's strided C (`m x n` stored `ldc` apart). Each tile reads (beta !=
/// 0, before the barrier) and writes (after it, or early) only its own rows of its own
/// columns.
///
/// # Errors
/// - as [`gemm`].
pub fn gemm_c(
    args: &GemmArgs,
    c: HostC,
    engine: Engine,
    plan: &SplitPlan,
) -> Result<MultiOutcome, GpuError> {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::atomic::{AtomicBool, Ordering};
    let _flags = fp_flags::KeepFpFlags::new();
    let tiles = &plan.tiles;
    // Replica index of each tile's slot on its device (0,0 -> replicas 0 and 1 of device 0).
    let replicas: Vec<u32> = tiles
        .iter()
        .enumerate()
        .map(|(i, t)| tiles[..i].iter().filter(|u| u.device == t.device).count() as u32)
        .collect();
    if (c.rows(), c.cols(), c.ld()) != (args.m, args.n, args.ldc) {
        return Err(GpuError::Unsupported("C does not match the call".into()));
    }
    let share_a = shares_a(plan);
    let a_span = {
        let (ra, ca) = args.a_dims();
        ozaki_core::blas::span(ra, ca, args.lda)
    };
    // Row panels of a shared A (every tile has all rows of op(A)) and who uploads each.
    let panels = match (share_a, tiles.first()) {
        (true, Some(t)) => host::shared_panels(&tile_args(args, t), engine, tiles.len()),
        _ => 0,
    };
    let owner: Vec<usize> = (0..panels).map(|p| p % tiles.len()).collect();
    let board = host::PanelBoard::new(panels);
    // (device address of A, context) of each slot, for the peer copies of the shared A
    type Addr = Option<(u64, Handle<sys::CUcontext>)>;
    let a_addrs: std::sync::Mutex<Vec<Addr>> = std::sync::Mutex::new(vec![None; tiles.len()]);
    let failed = AtomicBool::new(false);
    let barrier = std::sync::Barrier::new(tiles.len());
    // beta == 0: each tile writes its blocks of C as they arrive, once every tile may
    // (early_write's module doc); otherwise every tile commits after the barrier
    let gate = crate::host::early_write::Gate::new(tiles.len());
    let early_ok = args.beta == 0.0;
    let commit_threads = (host::write_threads() / tiles.len().max(1)).max(1);
    /// A tile's outcome and its commit time, ns.
    type TileResult = Result<Option<(HostOutcome, u64)>, GpuError>;
    let results: Vec<TileResult> = std::thread::scope(|s| {
        // Started under the spawn hook (the shim's blocks the program's signals in them).
        let handles: Vec<_> = ozaki_core::spawn::spawning(|| {
            tiles
                .iter()
                .zip(&replicas)
                .enumerate()
                .map(|(i, (t, &rep))| {
                    let (failed, barrier, a_addrs, board, owner, gate) =
                        (&failed, &barrier, &a_addrs, &board, &owner, &gate);
                    s.spawn(move || -> TileResult {
                        let fail = |e: &GpuError| {
                            tracing::debug!(tile = i, error = %e, "split tile failed");
                            failed.store(true, Ordering::SeqCst);
                            board.fail();
                            gate.fail();
                        };
                        // Every phase runs only while nothing failed; every thread reaches
                        // every barrier whatever happened.
                        let mut guard = None;
                        let state: Result<Option<u64>, GpuError> =
                            catch_unwind(AssertUnwindSafe(|| {
                                let g = guard.insert(gpu_slot(t.device, rep)?);
                                if share_a {
                                    Ok(Some(g.workspace.get("host_a", a_span * 8)?))
                                } else {
                                    Ok(None)
                                }
                            }))
                            .unwrap_or_else(panicked);
                        if let Err(e) = &state {
                            fail(e);
                        }
                        if share_a {
                            // every slot's buffer for A exists before any peer copy into it
                            if let (Ok(Some(da)), Some(g)) = (&state, &guard) {
                                a_addrs.lock().unwrap_or_else(|p| p.into_inner())[i] =
                                    Some((*da, Handle(g.ctx)));
                            }
                            barrier.wait();
                        }
                        // This tile's pipeline into its slot's staging (reads C when beta != 0;
                        // uploads and shares its panels of A).
                        let staged = if failed.load(Ordering::SeqCst) {
                            state.map(|_| None)
                        } else {
                            let r = catch_unwind(AssertUnwindSafe(|| {
                                let g = guard.as_mut().expect("locked above");
                                let sub = tile_args(args, t);
                                let tile_c = c
                                    .part(t.row0 as usize, t.col0 as usize, sub.m, sub.n)
                                    .ok_or_else(|| {
                                        GpuError::Unsupported("a tile outside C".into())
                                    })?;
                                // With beta == 0 C is not read and tiles write only their own
                                // elements; with beta != 0 no thread writes C before the
                                // barrier below.
                                let early = early_ok.then_some(crate::host::early_write::EarlyC {
                                    c: tile_c,
                                    threads: commit_threads,
                                    gate: Some(gate),
                                });
                                let mut grid = host::Grid::of(&sub, engine);
                                let share = match state.as_ref().ok().copied().flatten() {
                                    Some(a_dev) => {
                                        let addrs =
                                            a_addrs.lock().unwrap_or_else(|p| p.into_inner());
                                        let peers: Vec<(u64, Handle<sys::CUcontext>)> = addrs
                                            .iter()
                                            .enumerate()
                                            .filter(|&(u, _)| u != i)
                                            .map(|(_, a)| {
                                                a.ok_or_else(|| {
                                                    GpuError::Cuda(
                                                        "a slot has no buffer for A".into(),
                                                    )
                                                })
                                            })
                                            .collect::<Result<_, _>>()?;
                                        drop(addrs);
                                        enable_peers(g.ctx, &peers);
                                        grid.panels = panels;
                                        Some(host::Share {
                                            slot: i,
                                            owner,
                                            a_dev,
                                            peers,
                                            board,
                                        })
                                    }
                                    None => None,
                                };
                                let (o, st) = host::staged_gemm(
                                    g,
                                    &sub,
                                    tile_c,
                                    engine,
                                    grid,
                                    host::Tile::Split(share.as_ref()),
                                    early,
                                )?;
                                Ok(Some((o, st, tile_c)))
                            }))
                            .unwrap_or_else(panicked);
                            if let Err(e) = &r {
                                fail(e);
                            }
                            r
                        };
                        barrier.wait();
                        // No slot waits on the board any more: release this slot's panel events.
                        board.release(|p| owner[p] == i);
                        // Every tile succeeded -> write this tile of C from staging.
                        let Some((o, st, tile_c)) = staged? else {
                            return Ok(None);
                        };
                        if failed.load(Ordering::SeqCst) {
                            return Ok(None);
                        }
                        let t0 = std::time::Instant::now();
                        match st {
                            host::StagedC::Written => {}
                            host::StagedC::Staged(ptr) => {
                                // SAFETY: the staging (held by `guard`) holds the tile's
                                // rows x cols values, contiguous.
                                let staged = unsafe {
                                    std::slice::from_raw_parts(ptr, tile_c.rows() * tile_c.cols())
                                };
                                // tiles are disjoint and all reads of C happened before the
                                // barrier
                                host::write_c(&tile_c, staged, None, commit_threads);
                            }
                            // only when another tile failed, which `failed` said above
                            host::StagedC::Withheld | host::StagedC::Rerun(_) => {
                                return Err(GpuError::Cuda("early writes withheld".into()));
                            }
                        }
                        drop(guard);
                        Ok(Some((o, t0.elapsed().as_nanos() as u64)))
                    })
                })
                .collect()
        });
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(panicked))
            .collect()
    });
    let mut out = MultiOutcome::default();
    let mut commit_ns = 0;
    let mut done = Vec::with_capacity(results.len());
    for r in results {
        done.push(r?);
    }
    for r in done {
        let Some((o, ns)) = r else {
            return Err(GpuError::Cuda("a split tile was skipped".into()));
        };
        out.tiles.push(o);
        commit_ns = commit_ns.max(ns);
    }
    out.devices = tiles.iter().map(|t| t.device).collect();
    out.moduli = out.tiles.iter().filter_map(|o| o.moduli).max();
    let total = |p: &ozaki_core::trace::Phases| {
        p.transfer_ns + p.convert_ns + p.products_ns + p.reconstruct_ns
    };
    out.phases = out
        .tiles
        .iter()
        .map(|o| o.phases.clone())
        .max_by_key(total)
        .unwrap_or_default();
    out.phases.transfer_ns += commit_ns;
    out.commit_ms = commit_ns as f32 / 1e6;
    Ok(out)
}

/// This process's device slots (`ozaki_core::devices::DeviceAssignment::resolve` over
/// `OZAKI_DEVICES` or all visible devices, by MPI local rank), resolved once; a single slot
/// when `OZAKI_GPU` pins one device or anything fails.
pub fn slots() -> &'static [u32] {
    use ozaki_core::devices::{DEVICES_VAR, DeviceAssignment, LauncherEnv};
    static SLOTS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| {
        if ozaki_core::env::var_os(ozaki_core::env::GPU).is_some() {
            return Vec::new();
        }
        let Ok(count) = crate::device::device_count() else {
            return Vec::new();
        };
        let pool = ozaki_core::env::var(DEVICES_VAR);
        DeviceAssignment::resolve(pool.as_deref(), count, &LauncherEnv::from_process_env())
            .map(|a| a.slots)
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::blas;
    use ozaki_core::devices::{SplitParams, split_c};

    fn fill(len: usize, seed: u64) -> Vec<f64> {
        let mut r = ozaki_core::testutil::Rng::new(seed);
        (0..len).map(|_| r.uniform() - 0.5).collect()
    }

    /// A is shared across devices only for column splits over distinct devices.
    #[test]
    fn a_is_shared_only_by_column_tiles_on_distinct_devices() {
        let p = SplitParams {
            min_rows: 4,
            min_cols: 4,
            align: 4,
        };
        let plan = split_c(64, 64, &[0, 1], &p);
        assert_eq!(plan.grid_rows, 1, "{plan:?}");
        assert!(shares_a(&plan));
        assert!(!shares_a(&split_c(64, 64, &[0, 0], &p)));
        let grid = split_c(64, 64, &[0, 1, 2, 3], &p);
        assert!(grid.grid_rows > 1, "{grid:?}");
        assert!(!shares_a(&grid));
        assert!(!shares_a(&split_c(64, 64, &[0], &p)));
    }

    /// Each tile's sub-GEMM (operands from `tile_args`, C at `tile_c_offset`) computes
    /// exactly that tile of the full product, and the tiles together rebuild the full C bit
    /// for bit without touching the ldc padding, for all four transpose cases, ragged tiles,
    /// padded leading dimensions and beta != 0.
    #[test]
    fn tiles_reassemble_the_full_product() {
        let (m, n, k) = (37usize, 29usize, 11usize);
        for (transa, transb) in [
            (Trans::No, Trans::No),
            (Trans::Yes, Trans::No),
            (Trans::No, Trans::Yes),
            (Trans::Yes, Trans::Yes),
        ] {
            let (ra, ca) = if transa == Trans::No { (m, k) } else { (k, m) };
            let (rb, cb) = if transb == Trans::No { (k, n) } else { (n, k) };
            let (lda, ldb, ldc) = (ra + 3, rb + 2, m + 5);
            let a = fill(lda * ca, 1);
            let b = fill(ldb * cb, 2);
            let c0 = fill(ldc * n, 3);
            let args = GemmArgs {
                transa,
                transb,
                m,
                n,
                k,
                alpha: 1.5,
                a: &a,
                lda,
                b: &b,
                ldb,
                beta: -0.75,
                ldc,
            };
            let mut full = c0.clone();
            blas::gemm(&args, &mut full);
            for slots in [vec![0u32, 1], vec![0, 0, 1], vec![0, 1, 2, 3]] {
                let plan = split_c(
                    m as u64,
                    n as u64,
                    &slots,
                    &SplitParams {
                        min_rows: 4,
                        min_cols: 4,
                        align: 4,
                    },
                );
                assert!(plan.is_split(), "{slots:?}");
                let mut c = c0.clone();
                for t in &plan.tiles {
                    let sub = tile_args(&args, t);
                    blas::gemm(&sub, &mut c[tile_c_offset(ldc, t)..]);
                }
                assert_eq!(c, full, "{transa:?} {transb:?} {slots:?}");
            }
        }
    }
}
