//! Calibration, the pure parts: the measurement plan, the raw-measurement format
//! `ozaki calibrate` writes, the fits that turn measurements into a [`Profile`], and the
//! held-out validation report (predicted vs measured per route, auto vs oracle).
//!
//! The timing itself (cuBLAS, INT8 GEMMs, kernels, host link, the loaded vendor BLAS) lives
//! in the `ozaki` binary; everything here is deterministic and tested on any machine.
//! Calibration shapes and validation shapes are disjoint by construction (tested), so the
//! validation measures interpolation, not recall.

use super::choose::Engine;
use super::model::predict;
use super::profile::{
    ChoiceRules, CpuProfile, CpuRate, DeviceId, DeviceProfile, GpuProfile, HostLink, HostShare,
    Machine, PROFILE_VERSION, PerElement, Profile, Reached,
};
use super::work_model::{Correction, CorrectionPoint, Sample, WorkModel};
use super::{CallShape, Residency};
use crate::route::Route;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// (m, n, k) of a timed GEMM.
pub type Mnk = (u64, u64, u64);

/// What to time. Squares and powers of two plus a few tall/skinny and k-heavy shapes; the
/// held-out set uses other sizes and aspect ratios.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Device-resident cuBLAS DGEMM and INT8 GEMM shapes.
    pub gpu_shapes: Vec<Mnk>,
    /// Vendor CPU BLAS shapes.
    pub cpu_shapes: Vec<Mnk>,
    /// CPU BLAS thread counts (0 = the library default).
    pub cpu_threads: Vec<u32>,
    /// Host-link transfer sizes, bytes.
    pub link_bytes: Vec<u64>,
    /// Transfer-bound host-resident calls timed through the host path, staged and with
    /// their operands page-locked ([`StagedSample`]): upload-bound (k-heavy, small C),
    /// download-bound (large C, small k) and mixed, so the two directions separate.
    #[serde(default)]
    pub staged_shapes: Vec<Mnk>,
    /// Elements for the conversion/reconstruction kernels.
    pub stream_elems: Vec<u64>,
    /// Moduli counts for the conversion/reconstruction kernels.
    pub stream_moduli: Vec<u32>,
    /// Host-resident end-to-end route timings (fit the overlap and corrections).
    pub route_shapes: Vec<Mnk>,
    /// Held-out validation shapes (never used to fit).
    pub validation_shapes: Vec<Mnk>,
    /// Device-resident end-to-end route timings (fit [`Profile::device_corrections`]):
    /// squares, where emulation wins, beside tall-skinny and k-heavy calls, where it loses.
    #[serde(default)]
    pub device_route_shapes: Vec<Mnk>,
}

impl Plan {
    /// The standard plan. `quick` shrinks it for a smoke test.
    pub fn standard(quick: bool) -> Plan {
        let mut gpu_shapes: Vec<Mnk> = [64u64, 128, 256, 512, 1024, 2048, 4096, 8192]
            .iter()
            .map(|&s| (s, s, s))
            .collect();
        gpu_shapes.extend([
            (65536, 64, 64),
            (65536, 128, 128),
            (65536, 256, 256),
            (16384, 32, 16384),
            (8192, 128, 8192),
            (256, 256, 16384),
            (2048, 2048, 64),
            (8192, 8192, 256),
            (1024, 1024, 8192),
            (32, 32, 32),
            (16, 16, 4096),
            (64, 64, 65536),
            (128, 128, 32768),
        ]);
        let mut cpu_shapes: Vec<Mnk> = [16u64, 32, 64, 128, 256, 512, 1024, 2048]
            .iter()
            .map(|&s| (s, s, s))
            .collect();
        // k-heavy shapes with small C: BLAS libraries parallelise over C's blocks, so these
        // run far below the square-shape rate (the nk/mk terms must see them).
        cpu_shapes.extend([
            (16384, 64, 64),
            (8192, 128, 128),
            (128, 128, 8192),
            (1024, 64, 1024),
            (4096, 4096, 64),
            (4, 4, 4),
            (8, 8, 512),
            (32, 32, 65536),
            (128, 128, 32768),
            (16, 16, 16384),
        ]);
        let route_shapes: Vec<Mnk> = [
            (64, 64, 64),
            (256, 256, 256),
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (4096, 4096, 4096),
            (8192, 8192, 8192),
            (16384, 16384, 16384),
            (65536, 64, 64),
            (65536, 128, 128),
            (8192, 128, 8192),
            (1024, 1024, 8192),
            (2048, 2048, 64),
            (16, 16, 16),
            (128, 128, 32768),
            (32, 32, 65536),
        ]
        .to_vec();
        let mut plan = Plan {
            gpu_shapes,
            cpu_shapes,
            cpu_threads: vec![0, 1],
            link_bytes: vec![1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 27],
            staged_shapes: staged_shapes(),
            stream_elems: vec![1 << 16, 1 << 20, 1 << 24],
            stream_moduli: vec![8, 14, 18],
            route_shapes,
            validation_shapes: validation_shapes(),
            device_route_shapes: device_route_shapes(),
        };
        if quick {
            plan.gpu_shapes.retain(|&(m, n, k)| m * n * k <= 1 << 30);
            plan.cpu_shapes.retain(|&(m, n, k)| m * n * k <= 1 << 27);
            plan.route_shapes.retain(|&(m, n, k)| m * n * k <= 1 << 30);
            plan.validation_shapes
                .retain(|&(m, n, k)| m * n * k <= 1 << 28);
            plan.link_bytes.retain(|&b| b <= 1 << 24);
            plan.staged_shapes
                .retain(|&(m, n, k)| 8 * (m * k + k * n + m * n) <= 1 << 28);
            plan.device_route_shapes
                .retain(|&(m, n, k)| m * n * k <= 1 << 30);
        }
        plan
    }
}

/// The transfer-bound host-resident calls (m, n, k) that measure the host path's link each
/// way: op(A) and op(B) of 1 GiB with a tiny C (upload), a C of 512 MiB and 2 GiB with
/// k = 64 (download), and two mixes; each is timed less its device work.
pub fn staged_shapes() -> Vec<Mnk> {
    vec![
        (256, 256, 262144),
        (8192, 8192, 64),
        (16384, 16384, 64),
        (4096, 4096, 256),
        (1024, 1024, 1024),
    ]
}

/// The device-resident route shapes (m, n, k): squares from 4096 (where emulation runs at
/// 1.1-1.6x cuBLAS), a k-heavy C (1024 x 1024, k = 65536: 0.7x), tall-skinny (110592 x 64,
/// k = 64: 0.03x) and a tiny C with a long k (64 x 64, k = 110592: 0.05x), plus shapes
/// between them, so the correction interpolates rather than extrapolates.
pub fn device_route_shapes() -> Vec<Mnk> {
    vec![
        (1024, 1024, 1024),
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        (16384, 16384, 16384),
        (3000, 5000, 7000),
        (4096, 4096, 16384),
        (1024, 1024, 65536),
        (110592, 64, 64),
        (16384, 256, 256),
        (64, 64, 110592),
        (256, 256, 16384),
    ]
}

/// The held-out validation set: ≥ 40 shapes, tiny to large, square, tall/skinny, wide,
/// k-heavy and rank-k updates, none of them a calibration shape.
pub fn validation_shapes() -> Vec<Mnk> {
    let mut v: Vec<Mnk> = [
        3u64, 12, 24, 48, 96, 160, 200, 300, 384, 500, 700, 1000, 1500, 2500, 3000, 5000, 6000,
    ]
    .iter()
    .map(|&s| (s, s, s))
    .collect();
    v.extend([
        (110592, 64, 64),
        (110592, 128, 128),
        (50000, 32, 32),
        (20000, 96, 96),
        (4096, 64, 4096),
        (3000, 100, 3000),
        (64, 64, 110592),
        (128, 128, 50000),
        (1024, 1024, 16384),
        (500, 500, 20000),
        (6000, 6000, 64),
        (4000, 4000, 128),
        (3000, 3000, 32),
        (2000, 300, 2000),
        (300, 2000, 700),
        (7000, 1000, 500),
        (100, 100, 1000),
        (40, 1000, 40),
        (1000, 40, 1000),
        (441, 441, 4324),
        (1953, 21, 4325),
        (5000, 5000, 2000),
        (12000, 12000, 1000),
        (256, 6000, 6000),
        (10, 10, 100000),
    ]);
    v
}

/// One host-link measurement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkSample {
    /// `h2d` or `d2h`.
    pub direction: Direction,
    /// Host memory kind.
    pub memory: HostMemory,
    /// Bytes moved.
    pub bytes: u64,
    /// Seconds (median).
    pub seconds: f64,
}

/// Transfer direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Host to device.
    H2d,
    /// Device to host.
    D2h,
}

/// Host memory kind of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostMemory {
    /// Page-locked.
    Pinned,
    /// Ordinary malloc'd memory, copied directly.
    Pageable,
    /// Ordinary memory through the routes' pinned staging buffers (what the shim pays).
    Staged,
    /// Ordinary memory page-locked for the transfer (`cuMemHostRegister`) and unlocked
    /// after, the DMA reading it directly; the page-locking included.
    Registered,
}

/// One host-resident call timed for its transfers alone (its device work is a small part of
/// it): how many bytes went up and down, and whether op(A) and op(B) were page-locked for
/// the call instead of staged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StagedSample {
    /// (m, n, k) of the call.
    pub mnk: Mnk,
    /// Bytes uploaded (op(A), op(B), and C when read).
    pub up_bytes: u64,
    /// Bytes downloaded (C).
    pub down_bytes: u64,
    /// op(A) and op(B) page-locked for the call (`OZAKI_HOST_REGISTER=1`).
    #[serde(default)]
    pub registered: bool,
    /// Seconds (median) of the call less its device work.
    pub seconds: f64,
}

/// One streaming-kernel measurement (conversion or reconstruction).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StreamSample {
    /// Elements processed (input elements for conversion, outputs for reconstruction).
    pub elems: u64,
    /// Moduli count.
    pub moduli: u32,
    /// Seconds (median, device time).
    pub seconds: f64,
}

/// One end-to-end route timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteSample {
    /// Route name (`vendor`, `gpu-native`, `gpu-ozaki`).
    pub route: String,
    /// Rows of C.
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// Where the operands were.
    pub residency: Residency,
    /// Moduli count used (gpu-ozaki).
    #[serde(default)]
    pub moduli: Option<u32>,
    /// Seconds (median of the repeats, wall clock around the call).
    pub seconds: f64,
}

/// CPU BLAS timings at one thread count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuSamples {
    /// Threads used.
    pub threads: u32,
    /// Timings.
    pub samples: Vec<Sample>,
}

/// GPU measurements.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuMeasurements {
    /// Device name.
    pub name: String,
    /// Total memory, bytes.
    pub memory_bytes: u64,
    /// Free memory after context and handle creation, bytes.
    pub free_bytes: u64,
    /// Largest single allocation obtained, bytes (free − this = reservation overhead).
    pub largest_alloc_bytes: u64,
    /// cuBLAS DGEMM, device-resident.
    pub fp64: Vec<Sample>,
    /// cuBLAS DGEMM, device-resident, at sizes not aligned to 16
    /// ([`super::alignment::CALIBRATION_SIZES`]; fit [`GpuProfile::fp64_alignment`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fp64_unaligned: Vec<Sample>,
    /// One INT8 GEMM, device-resident.
    pub int8: Vec<Sample>,
    /// Conversion kernel timings.
    pub convert: Vec<StreamSample>,
    /// Reconstruction kernel timings.
    pub reconstruct: Vec<StreamSample>,
    /// Seconds per empty-kernel launch.
    pub launch_s: f64,
    /// Seconds per stream synchronisation.
    pub sync_s: f64,
    /// Kernel launches per GPU Ozaki call.
    pub ozaki_launches: u32,
    /// Host-link timings.
    pub link: Vec<LinkSample>,
    /// Transfer-bound host-resident calls through the host path, staged and page-locked
    /// (fit `h2d_staged`, `d2h_staged` and `h2d_registered`; without them the staged link
    /// comes from the `staged` entries of `link`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub staged: Vec<StagedSample>,
    /// Reached evidence per route.
    pub reached: BTreeMap<String, Reached>,
    /// Seconds the process's first use of the GPU took (driver, context, handles, kernels):
    /// the profile's `start_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_s: Option<f64>,
}

/// Everything `ozaki calibrate` measured, before fitting (kept next to the profile so a fit
/// can be redone or audited).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    /// Format version ([`PROFILE_VERSION`]).
    pub version: u32,
    /// The machine.
    pub machine: Machine,
    /// Vendor BLAS library measured.
    pub vendor_blas: String,
    /// Interposer overhead per call, seconds.
    pub call_overhead_s: f64,
    /// CPU BLAS timings per thread count.
    pub cpu: Vec<CpuSamples>,
    /// The vendor BLAS under 1, 2, 4, ... concurrent callers (empty: not measured).
    #[serde(default)]
    pub concurrency: Vec<crate::engine::profile::ConcurrentRate>,
    /// Host copies timed at several delays after a vendor call, over the same copy on a quiet
    /// host (empty: not measured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wake: Vec<crate::engine::wake::WakePoint>,
    /// Bytes per second of the wake's host copy on a quiet host (0: not measured).
    #[serde(default)]
    pub copy_bytes_per_s: f64,
    /// GPU timings.
    #[serde(default)]
    pub gpu: Option<GpuMeasurements>,
    /// End-to-end route timings at the calibration route shapes.
    #[serde(default)]
    pub routes: Vec<RouteSample>,
    /// The per-device survey, `devices[0]` being the device `gpu` was measured on
    /// (absent in measurements written before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceMeasurements>,
    /// All surveyed devices copying at once, and measured splits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<ShareMeasurements>,
}

/// One GPU of the host, surveyed (calibration runs per device). Short on purpose:
/// the full model is measured once, on `devices[0]`; every device gets the rates that scale
/// it (one large DGEMM and one INT8 GEMM, device-resident) and its staged host link alone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceMeasurements {
    /// Which device (flattened into this object in JSON).
    #[serde(flatten)]
    pub id: DeviceId,
    /// cuBLAS DGEMM, device-resident.
    pub fp64: Vec<Sample>,
    /// One INT8 GEMM, device-resident.
    pub int8: Vec<Sample>,
    /// Staged host-link timings of this device alone (wall clock of a transfer-bound
    /// host-resident call, as `ShareMeasurements::link` times all devices together).
    pub link: Vec<LinkSample>,
}

/// What the host does when all surveyed devices work at once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShareMeasurements {
    /// The ordinals that ran together.
    pub devices: Vec<u32>,
    /// Staged host-link timings with every device copying at once: `bytes` is the total
    /// over all devices, `seconds` the wall time until the last finished.
    pub link: Vec<LinkSample>,
    /// Host-resident calls split over `devices` by the real executor, end to end.
    #[serde(default)]
    pub splits: Vec<SplitSample>,
}

/// One measured split call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitSample {
    /// Route of every tile.
    pub route: String,
    /// Rows of C.
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// Moduli count (gpu-ozaki).
    #[serde(default)]
    pub moduli: Option<u32>,
    /// Slots the call was split over.
    pub devices: Vec<u32>,
    /// Seconds (median, wall clock around the whole call).
    pub seconds: f64,
}

/// Least squares of Σ (x·u + y·v − 1)² over `rows` of (u, v) (a timing's terms divided by
/// its seconds: relative error), with x ≥ 0 and y ≥ 0, each held at 0 unless `use_x`
/// (`use_y`): (x, y, residual), or `None` when the system is singular or a term negative.
fn relative_fit2(rows: &[(f64, f64)], use_x: bool, use_y: bool) -> Option<(f64, f64, f64)> {
    let (mut a11, mut a12, mut a22, mut b1, mut b2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(u, v) in rows {
        a11 += u * u;
        a12 += u * v;
        a22 += v * v;
        b1 += u;
        b2 += v;
    }
    let (x, y) = match (use_x, use_y) {
        (true, true) => {
            let det = a11 * a22 - a12 * a12;
            // Rows all of one mix (a device survey times one transfer size) make the system
            // singular; relative to its terms, since rounding leaves det far above 1e-300.
            if det.abs() <= 1e-9 * a11 * a22 {
                return None;
            }
            ((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det)
        }
        (true, false) if a11 > 0.0 => (b1 / a11, 0.0),
        (false, true) if a22 > 0.0 => (0.0, b2 / a22),
        _ => return None,
    };
    if x < 0.0 || y < 0.0 {
        return None;
    }
    let res: f64 = rows
        .iter()
        .map(|&(u, v)| (x * u + y * v - 1.0).powi(2))
        .sum();
    Some((x, y, res))
}

/// Fits t = latency + bytes/bandwidth; returns (bandwidth B/s, latency s).
fn fit_link(samples: &[LinkSample], dir: Direction, mem: HostMemory) -> Option<(f64, f64)> {
    let rows: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.direction == dir && s.memory == mem && s.seconds > 0.0)
        .map(|s| (s.bytes as f64 / s.seconds, 1.0 / s.seconds))
        .collect();
    if rows.is_empty() {
        return None;
    }
    // both terms, or bandwidth alone
    let best = [
        relative_fit2(&rows, true, true),
        relative_fit2(&rows, true, false),
    ]
    .into_iter()
    .flatten()
    .min_by(|a, b| a.2.total_cmp(&b.2))?;
    if best.0 <= 0.0 {
        return None;
    }
    Some((1.0 / best.0, best.1))
}

/// Fits t = up/h2d + down/d2h to the host-resident calls of `samples` that staged their
/// operands: the host path's staged rates each way (B/s), when the calls' mixes of upload
/// and download tell them apart.
fn fit_staged(samples: &[StagedSample]) -> Option<(f64, f64)> {
    let rows: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| !s.registered && s.seconds > 0.0)
        .map(|s| {
            (
                s.up_bytes as f64 / s.seconds,
                s.down_bytes as f64 / s.seconds,
            )
        })
        .collect();
    let (x, y, _) = relative_fit2(&rows, true, true)?;
    (x > 0.0 && y > 0.0).then(|| (1.0 / x, 1.0 / y))
}

/// Whether the page-locked uploads of `samples` beat their staged ones, as a profile
/// fitted from them will say ([`super::profile::HostLink::registers`]): `ozaki calibrate`
/// times its end-to-end route calls that way.
pub fn registration_pays(samples: &[StagedSample]) -> bool {
    fit_staged(samples)
        .and_then(|(h2d, d2h)| fit_registered(samples, d2h).map(|r| r > h2d))
        .unwrap_or(false)
}

/// The upload rate (B/s) of the calls of `samples` that page-locked their operands for the
/// call, registration included, their downloads priced at `d2h` (staged either way).
fn fit_registered(samples: &[StagedSample], d2h: f64) -> Option<f64> {
    let rows: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.registered && s.seconds > 0.0 && s.up_bytes > 0)
        .map(|s| {
            let left = s.seconds - s.down_bytes as f64 / d2h;
            (s.up_bytes as f64 / s.seconds, left / s.seconds)
        })
        .collect();
    // Σ (x u − (1 − d/(d2h t)))²: the download's share moved to the right-hand side
    let (num, den) = rows
        .iter()
        .fold((0.0, 0.0), |(n, d), &(u, left)| (n + u * left, d + u * u));
    (den > 0.0 && num > 0.0).then(|| den / num)
}

/// Fits t = elems·(a + b·moduli) by NNLS on relative error.
fn fit_stream(samples: &[StreamSample]) -> PerElement {
    let rows: Vec<(f64, f64, f64)> = samples
        .iter()
        .filter(|s| s.seconds > 0.0 && s.elems > 0)
        .map(|s| (s.elems as f64, s.moduli as f64, s.seconds))
        .collect();
    if rows.is_empty() {
        return PerElement::default();
    }
    let (mut a11, mut a12, mut a22, mut b1, mut b2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(e, r, t) in &rows {
        let (u, v) = (e / t, e * r / t);
        a11 += u * u;
        a12 += u * v;
        a22 += v * v;
        b1 += u;
        b2 += v;
    }
    let det = a11 * a22 - a12 * a12;
    let both = if det.abs() > 1e-300 {
        Some(((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det))
    } else {
        None
    };
    match both {
        Some((a, b)) if a >= 0.0 && b >= 0.0 => PerElement {
            s_per_elem: a,
            s_per_elem_modulus: b,
        },
        _ => {
            // One coefficient only: whichever fits better.
            let only_a = b1 / a11;
            let only_b = b2 / a22;
            let res = |a: f64, b: f64| {
                rows.iter()
                    .map(|&(e, r, t)| (e * (a + b * r) / t - 1.0).powi(2))
                    .sum::<f64>()
            };
            if res(only_a, 0.0) <= res(0.0, only_b) {
                PerElement {
                    s_per_elem: only_a.max(0.0),
                    s_per_elem_modulus: 0.0,
                }
            } else {
                PerElement {
                    s_per_elem: 0.0,
                    s_per_elem_modulus: only_b.max(0.0),
                }
            }
        }
    }
}

/// Turns measurements into a profile: work-model fits per kernel, link and stream fits, the
/// overlap fraction that best explains the end-to-end route timings, and the end-to-end
/// corrections from what remains.
///
/// # Errors
/// No CPU BLAS timings, or too few timings for a GPU work model.
pub fn fit_profile(meas: &Measurements, name: &str, source: &str) -> Result<Profile, String> {
    let mut blas = Vec::new();
    for c in &meas.cpu {
        blas.push(CpuRate {
            threads: c.threads,
            model: WorkModel::fit(&c.samples)
                .map_err(|e| format!("cpu BLAS at {} threads: {e}", c.threads))?,
        });
    }
    if blas.is_empty() {
        return Err("no CPU BLAS timings".into());
    }
    let gpu = match &meas.gpu {
        None => None,
        Some(g) => {
            let link_or = |d, m, fallback: f64| fit_link(&g.link, d, m).map_or(fallback, |x| x.0);
            let h2d_pinned = link_or(Direction::H2d, HostMemory::Pinned, 0.0);
            let d2h_pinned = link_or(Direction::D2h, HostMemory::Pinned, 0.0);
            let h2d_pageable = link_or(Direction::H2d, HostMemory::Pageable, h2d_pinned);
            let d2h_pageable = link_or(Direction::D2h, HostMemory::Pageable, d2h_pinned);
            // Per-transfer latency from the pinned DMA; the routes' own fixed host costs
            // (staging setup, locks, events) are fitted from their end-to-end timings
            // (`route_overhead_s`), not from the few staged-link sizes.
            let latency =
                fit_link(&g.link, Direction::H2d, HostMemory::Pinned).map_or(0.0, |x| x.1);
            // the host path's own transfer-bound calls, each way apart, where measured
            let (h2d_staged, d2h_staged) = fit_staged(&g.staged).unwrap_or_else(|| {
                (
                    link_or(Direction::H2d, HostMemory::Staged, h2d_pageable),
                    link_or(Direction::D2h, HostMemory::Staged, d2h_pageable),
                )
            });
            let h2d_registered = fit_registered(&g.staged, d2h_staged).unwrap_or(0.0);
            let fp64 = WorkModel::fit(&g.fp64).map_err(|e| format!("gpu fp64: {e}"))?;
            Some(GpuProfile {
                name: g.name.clone(),
                memory_bytes: g.memory_bytes,
                free_bytes: g.free_bytes,
                reserve_bytes: g.free_bytes.saturating_sub(g.largest_alloc_bytes),
                fp64_alignment: super::alignment::fit(&g.fp64_unaligned, &fp64),
                fp64,
                int8: WorkModel::fit(&g.int8).map_err(|e| format!("gpu int8: {e}"))?,
                convert: fit_stream(&g.convert),
                reconstruct: fit_stream(&g.reconstruct),
                launch_s: g.launch_s,
                sync_s: g.sync_s,
                ozaki_launches: g.ozaki_launches.max(1),
                link: HostLink {
                    h2d_pinned,
                    d2h_pinned,
                    h2d_pageable,
                    d2h_pageable,
                    h2d_staged,
                    d2h_staged,
                    latency_s: latency,
                    h2d_registered,
                },
                overlap: 0.0,
                reached: g.reached.clone(),
                route_overhead_s: BTreeMap::new(),
                start_s: g.start_s,
            })
        }
    };
    let mut profile = Profile {
        version: PROFILE_VERSION,
        name: name.to_string(),
        source: source.to_string(),
        machine: meas.machine.clone(),
        cpu: CpuProfile {
            vendor_blas: meas.vendor_blas.clone(),
            call_overhead_s: meas.call_overhead_s,
            blas,
            concurrency: meas.concurrency.clone(),
            wake: super::wake::fit(&meas.wake),
            copy_bytes_per_s: meas.copy_bytes_per_s,
        },
        gpu,
        choice: ChoiceRules::default(),
        corrections: BTreeMap::new(),
        device_corrections: BTreeMap::new(),
        devices: Vec::new(),
        host_share: None,
    };
    fit_overlap_and_corrections(&mut profile, &meas.routes);
    merge_devices(&mut profile, &meas.devices, meas.share.as_ref());
    Ok(profile)
}

/// The largest-volume sample's rate (2mnk / s), or 0.
fn survey_rate(samples: &[Sample]) -> f64 {
    samples
        .iter()
        .filter(|s| s.seconds > 0.0)
        .max_by_key(|s| s.m * s.n * s.k)
        .map_or(0.0, |s| 2.0 * (s.m * s.n * s.k) as f64 / s.seconds)
}

/// The profile entries of a device survey.
pub fn fit_devices(devices: &[DeviceMeasurements]) -> Vec<DeviceProfile> {
    devices
        .iter()
        .map(|d| DeviceProfile {
            id: d.id.clone(),
            fp64_flops: survey_rate(&d.fp64),
            int8_ops: survey_rate(&d.int8),
            h2d_staged: fit_link(&d.link, Direction::H2d, HostMemory::Staged).map_or(0.0, |x| x.0),
            d2h_staged: fit_link(&d.link, Direction::D2h, HostMemory::Staged).map_or(0.0, |x| x.0),
        })
        .collect()
}

/// Puts a device survey and the shared-link measurement into `profile` (replacing what it
/// had; a refit or a later survey of the same machine), then fits the split's host terms:
/// the executor's fixed cost and per-byte assembly cost are what the measured splits took
/// beyond the engine's price of their tiles (median per-byte residual; the fixed part is
/// left at 0 unless the residual of the smallest split exceeds the per-byte share).
pub fn merge_devices(
    profile: &mut Profile,
    devices: &[DeviceMeasurements],
    share: Option<&ShareMeasurements>,
) {
    if devices.is_empty() {
        return;
    }
    profile.devices = fit_devices(devices);
    profile.host_share = share.and_then(|sh| {
        let (h2d, _) = fit_link(&sh.link, Direction::H2d, HostMemory::Staged)?;
        let d2h = fit_link(&sh.link, Direction::D2h, HostMemory::Staged).map_or(h2d, |x| x.0);
        Some(HostShare {
            devices: sh.devices.clone(),
            h2d_staged_all: h2d,
            d2h_staged_all: d2h,
            split_overhead_s: 0.0,
            assemble_s_per_byte: 0.0,
            fitted_share: None,
        })
    });
    let Some(sh) = share else { return };
    let params = crate::devices::SplitParams::default();
    fit_share_to_splits(profile, sh, &params);
    let mut per_byte: Vec<(f64, f64)> = priced_splits(profile, sh, &params)
        .map(|(s, priced)| (8.0 * (s.m * s.n) as f64, s.seconds - priced))
        .collect();
    let mut ratios: Vec<f64> = per_byte.iter().map(|(b, r)| r / b).collect();
    if let (Some(m), Some(h)) = (median(&mut ratios), profile.host_share.as_mut()) {
        h.assemble_s_per_byte = m.max(0.0);
        per_byte.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(&(bytes, residual)) = per_byte.first() {
            h.split_overhead_s = (residual - bytes * h.assemble_s_per_byte).max(0.0);
        }
    }
}

/// Each measured split with the engine's price of it under `profile` (splits the engine
/// cannot price are left out).
fn priced_splits<'a>(
    profile: &'a Profile,
    sh: &'a ShareMeasurements,
    params: &'a crate::devices::SplitParams,
) -> impl Iterator<Item = (&'a SplitSample, f64)> + 'a {
    sh.splits.iter().filter_map(move |s| {
        let route: Route = s.route.parse().ok()?;
        let shape = CallShape::gemm(s.m, s.n, s.k);
        let e = super::split::price(profile, &shape, route, s.moduli, &s.devices, params)?;
        Some((s, e.seconds))
    })
}

/// Fits [`HostShare::fitted_share`] when the measured splits ran *faster* than the two-link
/// measurement prices them: the link share (between that measurement's and 1) whose split
/// prices best match the measured splits (least squares in log time). Splits slower than
/// priced are left to the host terms fitted after this. The two-link measurement alone
/// misjudged this on 2x H200 (BENCHMARKS.md, "Several GPUs and MPI"): it put the share at 0.45 and priced a 32768^3
/// split at 0.67x one GPU, where the executor measured 1.73x.
fn fit_share_to_splits(
    profile: &mut Profile,
    sh: &ShareMeasurements,
    params: &crate::devices::SplitParams,
) {
    let active = sh.devices.len().max(2);
    let Some(h) = profile.host_share.as_mut() else {
        return;
    };
    h.fitted_share = None;
    let lo = super::split::link_share(profile, active);
    let mut ratios: Vec<f64> = priced_splits(profile, sh, params)
        .filter(|(s, _)| s.seconds > 0.0)
        .map(|(s, priced)| priced / s.seconds)
        .collect();
    if median(&mut ratios).is_none_or(|r| r <= 1.0) {
        return;
    }
    let steps = 64;
    let mut best: Option<(f64, f64)> = None;
    for i in 0..=steps {
        let f = lo + (1.0 - lo) * f64::from(i) / f64::from(steps);
        if let Some(h) = profile.host_share.as_mut() {
            h.fitted_share = Some(f);
        }
        let err: f64 = priced_splits(profile, sh, params)
            .filter(|(s, _)| s.seconds > 0.0)
            .map(|(s, priced)| (priced / s.seconds).ln().powi(2))
            .sum();
        if best.is_none_or(|(_, b)| err < b) {
            best = Some((f, err));
        }
    }
    if let (Some((f, _)), Some(h)) = (best, profile.host_share.as_mut()) {
        h.fitted_share = Some(f);
    }
}

fn sample_shape(s: &RouteSample) -> CallShape {
    CallShape::gemm(s.m, s.n, s.k).with_residency(s.residency)
}

/// Median |ln(predicted/measured)| of the GPU route samples under the current profile.
fn gpu_log_error(profile: &Profile, routes: &[RouteSample]) -> f64 {
    let mut errs: Vec<f64> = routes
        .iter()
        .filter(|s| s.route != Route::Vendor.name() && s.seconds > 0.0)
        .filter_map(|s| {
            let route: Route = s.route.parse().ok()?;
            let p = predict(profile, &sample_shape(s), route, s.moduli, 0).seconds;
            p.is_finite().then(|| (p / s.seconds).ln().abs())
        })
        .collect();
    median(&mut errs).unwrap_or(0.0)
}

/// Fixed per-call host overhead of each GPU route: the median residual (measured −
/// predicted) of its three fastest end-to-end timings, when positive.
fn fit_route_overheads(profile: &mut Profile, routes: &[RouteSample]) {
    for route in [Route::GpuNative, Route::GpuOzaki] {
        let mut res: Vec<(f64, f64)> = routes
            .iter()
            .filter(|s| s.route == route.name() && s.seconds > 0.0)
            .filter_map(|s| {
                let p = predict(profile, &sample_shape(s), route, s.moduli, 0).seconds;
                p.is_finite().then_some((p, s.seconds - p))
            })
            .collect();
        res.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut small: Vec<f64> = res.iter().take(3).map(|x| x.1).collect();
        if let (Some(m), Some(g)) = (median(&mut small), profile.gpu.as_mut())
            && m > 0.0
        {
            g.route_overhead_s.insert(route.name().to_string(), m);
        }
    }
}

fn fit_overlap_and_corrections(profile: &mut Profile, routes: &[RouteSample]) {
    if routes.is_empty() {
        return;
    }
    // The overlap credit and the host-side overheads are properties of host-resident calls:
    // device-resident timings only feed their own corrections.
    let host: Vec<RouteSample> = routes
        .iter()
        .filter(|s| s.residency == Residency::Host)
        .cloned()
        .collect();
    if profile.gpu.is_some() && !host.is_empty() {
        // Overlap and per-route overheads are fitted together: for each overlap fraction the
        // overheads are refitted, and the pair with the smallest median log error is kept.
        let set = |p: &mut Profile, ov: f64| {
            if let Some(g) = p.gpu.as_mut() {
                g.overlap = ov;
                g.route_overhead_s.clear();
            }
        };
        let mut best = (0.0, f64::INFINITY);
        for i in 0..=20 {
            let ov = i as f64 / 20.0;
            set(profile, ov);
            fit_route_overheads(profile, &host);
            let e = gpu_log_error(profile, &host);
            if e < best.1 - 1e-12 {
                best = (ov, e);
            }
        }
        set(profile, best.0);
        fit_route_overheads(profile, &host);
    }
    let (mut corr, mut device) = (BTreeMap::new(), BTreeMap::new());
    for s in routes {
        let Ok(route) = s.route.parse::<Route>() else {
            continue;
        };
        // End-to-end vendor timings run at the library's default thread count.
        let p = predict(profile, &sample_shape(s), route, s.moduli, 0).seconds;
        if !(p.is_finite() && p > 0.0 && s.seconds > 0.0) {
            continue;
        }
        let map: &mut BTreeMap<String, Correction> = match s.residency {
            Residency::Host => &mut corr,
            Residency::Device => &mut device,
        };
        map.entry(s.route.clone())
            .or_default()
            .points
            .push(CorrectionPoint {
                m: s.m,
                n: s.n,
                k: s.k,
                ln_ratio: (s.seconds / p).ln(),
            });
    }
    profile.corrections = corr;
    profile.device_corrections = device;
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    })
}

/// One validation row: a held-out shape, measured and predicted per route.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationRow {
    /// The shape.
    pub mnk: Mnk,
    /// (route, measured s, predicted s).
    pub routes: Vec<(String, f64, f64)>,
    /// Route auto picks.
    pub auto: String,
    /// Route with the smallest measured time.
    pub oracle: String,
}

/// The held-out validation summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationReport {
    /// Per shape.
    pub rows: Vec<ValidationRow>,
    /// Per route: median |predicted/measured − 1| over the shapes.
    pub median_abs_err: Vec<(String, f64)>,
    /// Median over all (shape, route) pairs.
    pub overall_median_abs_err: f64,
    /// Σ measured time of auto's choices.
    pub auto_total_s: f64,
    /// Σ measured time of the fastest route per shape.
    pub oracle_total_s: f64,
    /// The measured samples the report scores (so a refitted profile can be rescored).
    pub samples: Vec<RouteSample>,
}

/// Scores a profile on held-out end-to-end timings: per-route median absolute relative error
/// and auto's total measured time against the oracle's (targets: ≤ 15% and ≤ 5%).
/// `moduli` gives the moduli count per shape, as the shim would choose it.
pub fn validate(
    profile: &Profile,
    threads: u32,
    samples: &[RouteSample],
    moduli: &dyn Fn(&CallShape) -> Option<u32>,
) -> ValidationReport {
    let engine = Engine::new(profile.clone(), threads);
    let mut shapes: Vec<(Mnk, Residency)> = Vec::new();
    for s in samples {
        if !shapes.contains(&((s.m, s.n, s.k), s.residency)) {
            shapes.push(((s.m, s.n, s.k), s.residency));
        }
    }
    let mut rows = Vec::new();
    let mut per_route: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let (mut auto_total, mut oracle_total) = (0.0, 0.0);
    for (mnk, res) in shapes {
        let shape = CallShape::gemm(mnk.0, mnk.1, mnk.2).with_residency(res);
        let r = moduli(&shape);
        let mut routes = Vec::new();
        for s in samples
            .iter()
            .filter(|s| (s.m, s.n, s.k) == mnk && s.residency == res)
        {
            let Ok(route) = s.route.parse::<Route>() else {
                continue;
            };
            let p = predict(profile, &shape, route, s.moduli.or(r), threads).seconds;
            routes.push((s.route.clone(), s.seconds, p));
            if p.is_finite() && s.seconds > 0.0 {
                per_route
                    .entry(s.route.clone())
                    .or_default()
                    .push((p / s.seconds - 1.0).abs());
            }
        }
        if routes.is_empty() {
            continue;
        }
        let d = engine.decide(&shape, r);
        let oracle = routes
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|x| (x.0.clone(), x.1))
            .unwrap_or_default();
        // A route auto picks but that was not measured counts at the vendor time.
        let auto_t = routes
            .iter()
            .find(|x| x.0 == d.route.name())
            .or_else(|| routes.iter().find(|x| x.0 == Route::Vendor.name()))
            .map_or(oracle.1, |x| x.1);
        auto_total += auto_t;
        oracle_total += oracle.1;
        rows.push(ValidationRow {
            mnk,
            routes,
            auto: d.route.name().to_string(),
            oracle: oracle.0,
        });
    }
    let mut all: Vec<f64> = per_route.values().flatten().copied().collect();
    ValidationReport {
        rows,
        median_abs_err: per_route
            .into_iter()
            .map(|(k, mut v)| (k, median(&mut v).unwrap_or(f64::NAN)))
            .collect(),
        overall_median_abs_err: median(&mut all).unwrap_or(f64::NAN),
        auto_total_s: auto_total,
        oracle_total_s: oracle_total,
        samples: samples.to_vec(),
    }
}
