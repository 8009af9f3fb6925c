//! The machine profile: everything the cost model knows about one machine, as versioned JSON.
//!
//! Where the shim gets its profile, first match wins:
//! 1. `OZAKI_PROFILE=FILE`;
//! 2. the per-GPU default `<cache>/ozaki/profile-<gpu-slug>.json`, where `<cache>` is
//!    `$XDG_CACHE_HOME` or `~/.cache` (written by `ozaki calibrate`);
//! 3. a built-in profile for the detected GPU (`profiles/*.json`, made by a real calibration
//!    run), with a warning that it was measured on another machine of that model;
//! 4. a built-in profile of a GPU of the same architecture, scaled to the detected one's
//!    resources ([`super::adapt`]), with a warning;
//! 5. the built-in CPU-only profile (no GPU routes), with a warning.
//!
//! A profile is keyed by realisation, not just device (take-away from paper 003): it records
//! the GPU name, driver, CUDA and the vendor BLAS it was measured with.
//!
//! Version history (additive only; every older version still loads):
//! - 1: one GPU (`gpu`), the CPU BLAS, choice rules, end-to-end corrections;
//! - 2: `devices`, one entry per GPU of the host as calibration surveyed it, and
//!   `host_share`, the host side of a split over them. Both are optional: a
//!   version-1 profile is a machine with one priced GPU and no split pricing;
//! - 3: `device_corrections`, end-to-end corrections of the routes on device-resident
//!   operands (the `ozaki_*_device` entry points), fitted from device-resident timings of
//!   square, skinny and k-heavy shapes. Optional: without them a device-resident call takes
//!   the host-resident corrections. Also in version 3, optional (readers without it ignore
//!   it): `gpu.fp64_alignment`, cuBLAS's slowdown at unaligned sizes.

use super::adapt::{self, GpuTraits, Scale};
use super::work_model::{Correction, WorkModel};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Version of the profile format; a newer file is refused, older ones load.
pub const PROFILE_VERSION: u32 = 3;

/// A machine profile (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Format version, [`PROFILE_VERSION`].
    pub version: u32,
    /// Short name (`h200`, `cpu-only`, ...).
    pub name: String,
    /// Where the numbers come from (`ozaki calibrate` run, date, command).
    pub source: String,
    /// The realisation the numbers belong to.
    #[serde(default)]
    pub machine: Machine,
    /// The vendor CPU BLAS.
    pub cpu: CpuProfile,
    /// The GPU; absent on a CPU-only machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuProfile>,
    /// Choice rules.
    #[serde(default)]
    pub choice: ChoiceRules,
    /// End-to-end corrections per route name, fitted from whole-route timings.
    #[serde(default)]
    pub corrections: BTreeMap<String, Correction>,
    /// End-to-end corrections per route name for device-resident calls (version 3), fitted
    /// from device-resident whole-route timings; a route absent here takes its
    /// [`Profile::corrections`] entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub device_corrections: BTreeMap<String, Correction>,
    /// Every GPU calibration surveyed (version 2); `devices[0]` is the device the
    /// full `gpu` model was measured on. Empty in version-1 profiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceProfile>,
    /// What the host pays when several GPUs copy at once (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_share: Option<HostShare>,
}

/// One GPU of the host, as `ozaki calibrate` surveyed it ("the machine profile
/// records each GPU; calibration runs per device"). The rates are what the engine scales
/// the full `gpu` model by when it prices a tile of a split on this device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// Which device (flattened into this object in JSON).
    #[serde(flatten)]
    pub id: DeviceId,
    /// Sustained cuBLAS DGEMM rate at the survey shape, FLOP/s.
    pub fp64_flops: f64,
    /// Sustained INT8 GEMM rate at the survey shape, OP/s.
    pub int8_ops: f64,
    /// Host → device through the routes' staging, this device alone, bytes/s.
    pub h2d_staged: f64,
    /// Device → host, likewise.
    pub d2h_staged: f64,
}

/// Which GPU a survey entry describes (shared by the profile entry and the raw survey).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceId {
    /// CUDA ordinal.
    pub ordinal: u32,
    /// Name as the driver reports it.
    pub name: String,
    /// Total device memory, bytes.
    #[serde(default)]
    pub memory_bytes: u64,
    /// Free device memory when surveyed, bytes.
    #[serde(default)]
    pub free_bytes: u64,
}

/// The host side of a split. Whether splitting one call over GPUs pays is
/// decided here rather than by the GPUs: every tile's operands and result cross the same
/// host memory, so a split is priced with the bandwidth all devices reach *together*, plus
/// the executor's own host work.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostShare {
    /// Ordinals that copied at once in the measurement.
    pub devices: Vec<u32>,
    /// Aggregate staged host → device bandwidth with all of them copying, bytes/s.
    pub h2d_staged_all: f64,
    /// Aggregate staged device → host bandwidth, likewise.
    pub d2h_staged_all: f64,
    /// Fixed host seconds per split call (tile threads, per-slot set-up), fitted from a
    /// measured split; 0 when not measured.
    #[serde(default)]
    pub split_overhead_s: f64,
    /// Host seconds per byte of C the executor assembles from the tiles after they finish
    /// (copies not overlapped with device work), fitted from a measured split; 0 when not
    /// measured.
    #[serde(default)]
    pub assemble_s_per_byte: f64,
    /// Fraction of its own staged bandwidth each device gets while all copy, fitted so that
    /// the engine's prices of the measured splits match their measured times (what the
    /// executor really reaches, overlap included); takes precedence over the ratio of the
    /// two link measurements above. Absent when no split was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted_share: Option<f64>,
}

impl HostShare {
    /// Whether the devices share one host link: together they reach less than 1.5 times
    /// what the fastest one reaches alone.
    pub fn shared(&self, single_h2d: f64) -> bool {
        self.h2d_staged_all < 1.5 * single_h2d
    }
}

impl Profile {
    /// The surveyed entry of one ordinal.
    pub fn device(&self, ordinal: u32) -> Option<&DeviceProfile> {
        self.devices.iter().find(|d| d.id.ordinal == ordinal)
    }
}

/// Identity of the measured machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// GPU name as the driver reports it.
    #[serde(default)]
    pub gpu: Option<String>,
    /// Driver version.
    #[serde(default)]
    pub driver: Option<String>,
    /// CUDA / cuBLAS versions.
    #[serde(default)]
    pub cuda: Option<String>,
    /// CPU model name.
    #[serde(default)]
    pub cpu: Option<String>,
    /// Host name.
    #[serde(default)]
    pub host: Option<String>,
    /// Date of the measurement (UTC, ISO 8601).
    #[serde(default)]
    pub date: Option<String>,
}

/// The vendor CPU BLAS.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuProfile {
    /// Library measured (path or soname).
    #[serde(default)]
    pub vendor_blas: String,
    /// Extra seconds per call through the interposer (argument checks, trace, decision).
    #[serde(default)]
    pub call_overhead_s: f64,
    /// Work model per thread count.
    pub blas: Vec<CpuRate>,
    /// How one call slows down when several threads of the process call the vendor BLAS at
    /// once (`ozaki calibrate` measures 1, 2, 4, ... callers); empty: the default model of
    /// [`super::load::vendor_share`] (each caller gets an equal share of the cores).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub concurrency: Vec<ConcurrentRate>,
    /// How long the vendor's threads keep the host busy after a call returns, and how much
    /// slower host copies run meanwhile (`ozaki calibrate`; absent: not measured, nothing
    /// priced). See [`super::wake`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<super::wake::VendorWake>,
    /// Bytes per second of a multi-threaded host copy on a quiet host (`ozaki calibrate`,
    /// with the wake): what packing a C with gaps and writing it back cost the GPU routes;
    /// 0: not measured (the staged host link's rate stands in).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub copy_bytes_per_s: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The vendor BLAS under concurrent callers: one call's time with `callers` calls in
/// flight, over its time alone, at `threads` BLAS threads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConcurrentRate {
    /// BLAS threads setting during the measurement.
    pub threads: u32,
    /// Calls in flight, the measured one included.
    pub callers: u32,
    /// Per-call time with `callers` in flight / per-call time alone (>= 1 on a saturated CPU).
    pub slowdown: f64,
}

/// The vendor BLAS work model at one thread count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuRate {
    /// Threads the BLAS used.
    pub threads: u32,
    /// Fitted model.
    pub model: WorkModel,
}

impl CpuProfile {
    /// The model measured at the thread count closest to `threads` (in ratio), with the
    /// count it was measured at; `threads == 0` means the library default, the first entry.
    pub fn model_for(&self, threads: u32) -> Option<(u32, &WorkModel)> {
        if threads == 0 {
            return self.blas.first().map(|c| (c.threads, &c.model));
        }
        let t = threads as f64;
        self.blas
            .iter()
            .min_by(|a, b| {
                (a.threads.max(1) as f64 / t)
                    .ln()
                    .abs()
                    .total_cmp(&(b.threads.max(1) as f64 / t).ln().abs())
            })
            .map(|c| (c.threads, &c.model))
    }
}

/// Seconds per element plus seconds per element and modulus of a streaming kernel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerElement {
    /// Seconds per element independent of the moduli count (scan, scaling, fp64 load/store).
    pub s_per_elem: f64,
    /// Seconds per element and modulus (residue formation, CRT term).
    pub s_per_elem_modulus: f64,
}

/// The host link, bytes per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostLink {
    /// Pinned host → device.
    pub h2d_pinned: f64,
    /// Pinned device → host.
    pub d2h_pinned: f64,
    /// Pageable host → device.
    pub h2d_pageable: f64,
    /// Pageable device → host.
    pub d2h_pageable: f64,
    /// What the GPU routes reach from the caller's (pageable) memory through their pinned
    /// staging buffers, host → device.
    pub h2d_staged: f64,
    /// Same, device → host.
    pub d2h_staged: f64,
    /// Fixed seconds per transfer.
    #[serde(default)]
    pub latency_s: f64,
    /// Host → device from the caller's memory page-locked for the call (`cuMemHostRegister`
    /// before the uploads, unregistered after, both included), with no staging copy; 0: not
    /// measured. Under `OZAKI_HOST_REGISTER=auto` the host path registers op(A) and op(B)
    /// of the gemms it pipelines when this beats `h2d_staged` ([`HostLink::registers`]).
    #[serde(default)]
    pub h2d_registered: f64,
}

impl HostLink {
    /// Whether page-locking the caller's operands for the call was measured to upload them
    /// faster than staging them (what `OZAKI_HOST_REGISTER=auto` follows).
    pub fn registers(&self) -> bool {
        self.h2d_registered > self.h2d_staged
    }
}

/// Whether a route's kernels reached the hardware they were written for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reached {
    /// True when the evidence shows the intended units ran.
    pub ok: bool,
    /// The evidence (kernel names, SASS opcodes, measured rate).
    pub evidence: String,
}

/// The GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuProfile {
    /// Name as the driver reports it (`NVIDIA H200`).
    pub name: String,
    /// Total device memory, bytes.
    #[serde(default)]
    pub memory_bytes: u64,
    /// Free device memory at calibration, bytes.
    pub free_bytes: u64,
    /// Bytes lost to contexts, handles and allocator granularity (measured as free memory
    /// minus the largest allocation obtained; paper 003's R_d).
    #[serde(default)]
    pub reserve_bytes: u64,
    /// cuBLAS fp64 GEMM, device-resident.
    pub fp64: WorkModel,
    /// cuBLAS fp64 GEMM at shapes whose m, n and k are not all multiples of 16: per class of
    /// alignment, its time over what `fp64` prices (see [`super::alignment`]); empty: not
    /// measured, every shape priced as aligned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fp64_alignment: Vec<super::alignment::AlignmentSlowdown>,
    /// One INT8 GEMM (int8 × int8 → int32), device-resident.
    pub int8: WorkModel,
    /// Exponent scan, scaling and residue formation.
    pub convert: PerElement,
    /// CRT reconstruction with the alpha/beta epilogue.
    pub reconstruct: PerElement,
    /// Seconds per kernel launch.
    pub launch_s: f64,
    /// Seconds per stream synchronisation.
    pub sync_s: f64,
    /// Kernel launches of one GPU Ozaki call (scan, convert, batched products, reconstruct).
    #[serde(default = "default_launches")]
    pub ozaki_launches: u32,
    /// The host link.
    pub link: HostLink,
    /// Fraction of min(transfer, compute) the routes' pipelining hides (0 = serial).
    #[serde(default)]
    pub overlap: f64,
    /// Per route name: did it reach its intended hardware.
    #[serde(default)]
    pub reached: BTreeMap<String, Reached>,
    /// Per route name: fixed host-side seconds per call the component terms miss (locks,
    /// events, staging setup), fitted from the smallest end-to-end timings.
    #[serde(default)]
    pub route_overhead_s: BTreeMap<String, f64>,
    /// Seconds a process spends starting this GPU once (driver, context, cuBLAS handles,
    /// kernels), when measured: the shim's `auto` route decides from it whether a call waits
    /// for a background start (`route::start`); without it the shim uses its own constant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_s: Option<f64>,
}

fn default_launches() -> u32 {
    4
}

/// Rules of the choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceRules {
    /// Leave the default (vendor) route, or prefer GPU Ozaki over GPU native, only when the
    /// predicted gain is at least this factor (take-away 2: switch only when the gap clears
    /// the model's own error).
    pub min_gain: f64,
}

impl Default for ChoiceRules {
    fn default() -> Self {
        ChoiceRules { min_gain: 1.10 }
    }
}

/// Largest correction factor a profile may carry either way (`ln_ratio`): a measured model
/// off by more than this is not a calibration.
const MAX_LN_RATIO: f64 = 6.907_755_278_982_137; // ln 1000

/// Every number in a profile is a rate, a time, a size, a count or a share, none of which
/// can be negative or infinite (a negated rate would make the engine prefer a route whose
/// predicted time is negative); the one exception is a correction's `ln_ratio`, a logarithm,
/// which must stay within [`MAX_LN_RATIO`]. `path` is where `value` sits, for the message.
fn check_numbers(value: &serde_json::Value, path: &mut String) -> Result<(), String> {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                check_numbers(v, path)?;
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                check_numbers(v, path)?;
                path.truncate(len);
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            let ok = if path.ends_with("ln_ratio") {
                x.abs() <= MAX_LN_RATIO
            } else {
                x.is_finite() && x >= 0.0
            };
            if !ok {
                return Err(if path.ends_with("ln_ratio") {
                    format!("{path} = {x}: a correction beyond 1000x either way")
                } else {
                    format!("{path} = {x}: rates, times, sizes and shares cannot be negative")
                });
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
    Ok(())
}

/// Where a loaded profile came from.
#[derive(Debug, Clone, PartialEq)]
pub enum ProfileSource {
    /// `OZAKI_PROFILE`.
    Env(PathBuf),
    /// The per-GPU default in the cache directory.
    Cache(PathBuf),
    /// A built-in profile (name), for the detected GPU model.
    BuiltIn(&'static str),
    /// A built-in profile (name) of another GPU of the detected one's architecture, scaled
    /// to it ([`super::adapt`]).
    Scaled(&'static str),
}

/// The built-in profiles shipped with the crate: (file name, GPU name fragment, JSON). The
/// H100's fragment is the SXM board's full name: the PCIe and NVL boards, of the same
/// architecture but other clocks and memory, get the H200's profile scaled to them.
pub const BUILT_IN: &[(&str, &str, &str)] = &[
    ("h200", "H200", include_str!("../../../profiles/h200.json")),
    (
        "h100",
        "H100 80GB HBM3",
        include_str!("../../../profiles/h100.json"),
    ),
    (
        "cpu-only",
        "",
        include_str!("../../../profiles/cpu-only.json"),
    ),
];

impl Profile {
    /// Parses a profile from JSON text.
    ///
    /// # Errors
    /// Malformed JSON, a missing field, a negative or infinite number (a correction's
    /// `ln_ratio` beyond 1000x either way), or a version newer than [`PROFILE_VERSION`].
    pub fn from_json(text: &str) -> Result<Profile, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("bad profile: {e}"))?;
        check_numbers(&value, &mut String::new()).map_err(|e| format!("bad profile: {e}"))?;
        let p: Profile = serde_json::from_value(value).map_err(|e| format!("bad profile: {e}"))?;
        if p.version > PROFILE_VERSION {
            return Err(format!(
                "profile version {} is newer than this build's {PROFILE_VERSION}",
                p.version
            ));
        }
        Ok(p)
    }

    /// Reads a profile file.
    ///
    /// # Errors
    /// I/O errors and everything [`Profile::from_json`] rejects, with the path.
    pub fn load(path: &Path) -> Result<Profile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Profile::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Writes the profile as pretty JSON, creating the parent directory.
    ///
    /// # Errors
    /// I/O errors.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let mut text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        text.push('\n');
        std::fs::write(path, text)
    }

    /// A built-in profile by name (`h200`, `cpu-only`).
    pub fn built_in(name: &str) -> Option<Profile> {
        BUILT_IN
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, _, json)| Profile::from_json(json).expect("built-in profiles are tested"))
    }

    /// The built-in profile for a GPU name (`NVIDIA H200` → `h200`), if one ships.
    pub fn built_in_for_gpu(gpu_name: &str) -> Option<(&'static str, Profile)> {
        BUILT_IN
            .iter()
            .find(|(_, frag, _)| !frag.is_empty() && gpu_name.to_ascii_uppercase().contains(frag))
            .map(|(n, _, json)| {
                (
                    *n,
                    Profile::from_json(json).expect("built-in profiles are tested"),
                )
            })
    }
}

/// A profile measured on one GPU carried over to `to`, of the same architecture, by the
/// factors `s` between them ([`super::adapt`]).
impl Profile {
    /// The same profile, its GPU renamed, rescaled by `s` and given `to`'s memory; the
    /// per-device survey dropped.
    pub fn scaled_to(&self, s: Scale, to: &GpuTraits) -> Profile {
        let mut p = self.clone();
        p.name = format!("{} scaled to {}", self.name, to.name);
        p.machine.gpu = Some(to.name.clone());
        p.devices.clear();
        p.host_share = None;
        if let Some(g) = p.gpu.as_mut() {
            adapt_gpu(g, s, to);
        }
        p
    }
}

fn adapt_gpu(g: &mut GpuProfile, s: Scale, to: &GpuTraits) {
    g.name = to.name.clone();
    let reserve = g.reserve_bytes.min(to.memory_bytes);
    let used_at_calibration = g.memory_bytes.saturating_sub(g.free_bytes);
    g.memory_bytes = to.memory_bytes;
    g.free_bytes = to
        .memory_bytes
        .saturating_sub(used_at_calibration)
        .max(to.memory_bytes / 2);
    g.reserve_bytes = reserve;
    scale_products(&mut g.fp64, s);
    scale_products(&mut g.int8, s);
    scale_streaming(&mut g.convert, s.memory);
    scale_streaming(&mut g.reconstruct, s.memory);
}

/// A product's multiply-adds run at the compute rate, its operand and result traffic at the
/// memory rate; its fixed latency is the launch's.
fn scale_products(m: &mut WorkModel, s: Scale) {
    m.s_per_mnk /= s.compute;
    m.s_per_nk /= s.memory;
    m.s_per_mk /= s.memory;
    m.s_per_mn /= s.memory;
}

fn scale_streaming(e: &mut PerElement, memory: f64) {
    e.s_per_elem /= memory;
    e.s_per_elem_modulus /= memory;
}

/// The current time, UTC, as `YYYY-MM-DDTHH:MM:SSZ` (a profile's `date`; the first ten
/// characters date generated tables). Civil date from days since 1970-01-01 (Howard
/// Hinnant's algorithm).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86400, secs % 86400);
    let z = days as i64 + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `$XDG_CACHE_HOME/ozaki` or `$HOME/.cache/ozaki` (the same folder the GPU kernel cache uses).
pub fn cache_dir() -> Option<PathBuf> {
    let base = match crate::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => PathBuf::from(crate::env::var_os("HOME")?).join(".cache"),
    };
    Some(base.join("ozaki"))
}

/// File-name slug of a GPU name: lower case, runs of other characters become `-`
/// (`NVIDIA H200` → `nvidia-h200`).
pub fn gpu_slug(gpu_name: &str) -> String {
    let mut s = String::new();
    for c in gpu_name.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    s.trim_matches('-').to_string()
}

/// The per-GPU default profile path (`None` without a cache directory).
pub fn default_path(gpu_name: Option<&str>) -> Option<PathBuf> {
    Some(default_path_in(&cache_dir()?, gpu_name))
}

/// The per-GPU default profile path under a given cache directory.
pub fn default_path_in(cache: &Path, gpu_name: Option<&str>) -> PathBuf {
    let slug = gpu_name
        .map(gpu_slug)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cpu".into());
    cache.join(format!("profile-{slug}.json"))
}

/// What [`resolve`] says about a profile that was not measured on this machine: one short
/// line, meant to be shown once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The line itself, without a program prefix.
    pub text: String,
    /// The expected case of a machine nobody calibrated yet: the built-in profile made for
    /// this GPU model by a real calibration. It prices every route, so a program under the
    /// shim need not hear of it (the shim logs it at `info`, shown with `OZAKI_LOG=info`);
    /// every other notice means the engine chooses with less than it could and is printed.
    pub routine: bool,
}

impl Notice {
    fn loud(text: String) -> Notice {
        Notice {
            text,
            routine: false,
        }
    }
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Resolves the profile to use (see the module docs for the order). Returns the profile,
/// where it came from, and a notice when it is not one measured here.
///
/// # Errors
/// `OZAKI_PROFILE` names a file that cannot be read or parsed (an explicit request that
/// fails is an error, not a silent fallback).
pub fn resolve(
    env_profile: Option<&str>,
    gpu: Option<&GpuTraits>,
) -> Result<(Profile, ProfileSource, Option<Notice>), String> {
    resolve_in(env_profile, gpu, cache_dir().as_deref())
}

/// [`resolve`] with an explicit cache directory (`None`: no cache lookup).
///
/// # Errors
/// As [`resolve`].
pub fn resolve_in(
    env_profile: Option<&str>,
    gpu: Option<&GpuTraits>,
    cache: Option<&Path>,
) -> Result<(Profile, ProfileSource, Option<Notice>), String> {
    let gpu_name = gpu.map(|g| g.name.as_str());
    if let Some(p) = env_profile.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(p);
        return Profile::load(&path)
            .map(|prof| (prof, ProfileSource::Env(path), None))
            .map_err(|e| format!("OZAKI_PROFILE: {e}"));
    }
    if let Some(path) = cache.map(|c| default_path_in(c, gpu_name))
        && path.is_file()
    {
        match load_cached(&path) {
            Ok(prof) => return Ok((prof, ProfileSource::Cache(path), None)),
            Err(e) => {
                // A broken cached profile falls through to the built-in one, loudly.
                let (prof, src, w) = built_in_fallback(gpu);
                let w = format!(
                    "ignoring unusable profile {e}; {}",
                    w.map(|w| w.text).unwrap_or_default()
                );
                return Ok((prof, src, Some(Notice::loud(w))));
            }
        }
    }
    let (prof, src, w) = built_in_fallback(gpu);
    Ok((prof, src, w))
}

/// The profile [`resolve`] would pick for a GPU known only by its name `gpu_name` (what the
/// driver lists before any CUDA call): `OZAKI_PROFILE`, else the cached profile of that GPU,
/// else its built-in one. `Ok(None)`: none of those; only a profile scaled from the GPU's
/// measured resources would describe it, or the name is unknown. A cached profile that cannot
/// be used is passed over here (the engine's own [`resolve`] says why).
///
/// # Errors
/// As [`resolve`].
pub fn resolve_by_name(
    env_profile: Option<&str>,
    gpu_name: Option<&str>,
) -> Result<Option<(Profile, ProfileSource)>, String> {
    resolve_by_name_in(env_profile, gpu_name, cache_dir().as_deref())
}

/// [`resolve_by_name`] with an explicit cache directory (`None`: no cache lookup).
///
/// # Errors
/// As [`resolve`].
pub fn resolve_by_name_in(
    env_profile: Option<&str>,
    gpu_name: Option<&str>,
    cache: Option<&Path>,
) -> Result<Option<(Profile, ProfileSource)>, String> {
    if env_profile.is_some_and(|p| !p.is_empty()) {
        return resolve_in(env_profile, None, None).map(|(p, src, _)| Some((p, src)));
    }
    let Some(name) = gpu_name.filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    if let Some(path) = cache.map(|c| default_path_in(c, Some(name)))
        && path.is_file()
        && let Ok(prof) = load_cached(&path)
    {
        return Ok(Some((prof, ProfileSource::Cache(path))));
    }
    Ok(Profile::built_in_for_gpu(name).map(|(n, p)| (p, ProfileSource::BuiltIn(n))))
}

/// A profile found in the cache folder steers every call of every program, so it is used
/// only when it and the folders above it are this user's alone (`private_path`); one named
/// in `OZAKI_PROFILE` is the user's own explicit choice and is not checked.
fn load_cached(path: &Path) -> Result<Profile, String> {
    load_cached_with(path, || {})
}

/// [`load_cached`], with `opened` run between the checks and the read (the tests replace
/// the file there). The file is opened once, without following a symbolic link and without
/// blocking (a FIFO planted at the path is refused, not waited on); the checks are made on
/// that handle (`fstat`) and the text is read from it, so the file checked is the file
/// loaded even if the path is renamed over meanwhile.
fn load_cached_with(path: &Path, opened: impl FnOnce()) -> Result<Profile, String> {
    use crate::private_path::{check_dir_chain, check_owned_file, effective_uid};
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let shown = path.display();
    let euid = effective_uid().ok_or_else(|| format!("{shown}: cannot tell this user's id"))?;
    if let Some(dir) = path.parent() {
        check_dir_chain(dir, euid).map_err(|e| format!("{shown}: {e}"))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
    check_owned_file(&meta, euid, 0o022).map_err(|e| format!("{shown}: {e}"))?;
    opened();
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| format!("{shown}: {e}"))?;
    Profile::from_json(&text).map_err(|e| format!("{shown}: {e}"))
}

fn built_in_fallback(gpu: Option<&GpuTraits>) -> (Profile, ProfileSource, Option<Notice>) {
    if let Some(g) = gpu
        && let Some((name, prof)) = Profile::built_in_for_gpu(&g.name)
    {
        let w = Notice {
            text: format!(
                "using the built-in {name} profile for {} (`ozaki calibrate` measures this machine)",
                g.name
            ),
            routine: true,
        };
        return (prof, ProfileSource::BuiltIn(name), Some(w));
    }
    if let Some(g) = gpu
        && let Some((name, prof, s)) = same_architecture(g)
    {
        let w = format!(
            "no profile for {}: pricing it with the built-in {name} profile scaled to it (same \
             architecture; products x{:.2}, memory bandwidth x{:.2}) and corrected by the calls \
             it measures; `ozaki calibrate` measures this machine",
            g.name, s.compute, s.memory
        );
        return (
            prof.scaled_to(s, g),
            ProfileSource::Scaled(name),
            Some(Notice::loud(w)),
        );
    }
    let prof = Profile::built_in("cpu-only").expect("cpu-only profile ships");
    let w = match gpu {
        Some(g) => format!(
            "no profile for {}: GPU routes are never chosen until `ozaki calibrate` measures this machine",
            g.name
        ),
        None => "no GPU and no calibrated profile; using the CPU-only built-in profile".to_string(),
    };
    (
        prof,
        ProfileSource::BuiltIn("cpu-only"),
        Some(Notice::loud(w)),
    )
}

/// The GPU a built-in profile was measured on, as the driver reports it: compute
/// capability, multiprocessors, peak SM clock (kHz) and memory bandwidth (the datasheet's
/// peak, bytes per second); its name and memory are the profile's.
fn measured_on(name: &str) -> Option<((i32, i32), u32, u32, f64)> {
    match name {
        "h200" => Some(((9, 0), 132, 1_980_000, 4.8e12)),
        "h100" => Some(((9, 0), 132, 1_980_000, 3.35e12)),
        _ => None,
    }
}

/// The first built-in profile measured on a GPU of `g`'s architecture, with the scaling to
/// `g` (only such a profile is parsed).
fn same_architecture(g: &GpuTraits) -> Option<(&'static str, Profile, Scale)> {
    BUILT_IN.iter().find_map(|(name, _, _)| {
        let (cc, sms, clock_khz, memory_bytes_per_s) = measured_on(name).filter(|m| m.0 == g.cc)?;
        let prof = Profile::built_in(name)?;
        let gpu = prof.gpu.as_ref()?;
        let from = GpuTraits {
            name: gpu.name.clone(),
            cc,
            sms,
            clock_khz,
            memory_bytes_per_s,
            memory_bytes: gpu.memory_bytes,
        };
        let s = adapt::scale(&from, g)?;
        Some((*name, prof, s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::predict;
    use crate::engine::{CallShape, Residency};
    use crate::route::Route;
    use crate::testutil::gpus::{h100, h200};

    #[test]
    fn negative_rates_and_wild_corrections_are_rejected_with_their_field() {
        let good = BUILT_IN[0].2;
        Profile::from_json(good).unwrap();
        let negated = good.replacen("\"fp64_flops\": ", "\"fp64_flops\": -", 1);
        let e = Profile::from_json(&negated).unwrap_err();
        assert!(
            e.contains("fp64_flops = -") && e.contains("cannot be negative"),
            "{e}"
        );
        fn set_first(v: &mut serde_json::Value, key: &str, to: f64) -> bool {
            match v {
                serde_json::Value::Object(map) => {
                    if let Some(x) = map.get_mut(key) {
                        *x = to.into();
                        return true;
                    }
                    map.values_mut().any(|x| set_first(x, key, to))
                }
                serde_json::Value::Array(items) => items.iter_mut().any(|x| set_first(x, key, to)),
                _ => false,
            }
        }
        let mut value: serde_json::Value = serde_json::from_str(good).unwrap();
        assert!(set_first(&mut value, "ln_ratio", -9.0));
        let text = value.to_string();
        let e = Profile::from_json(&text).unwrap_err();
        assert!(e.contains("ln_ratio") && e.contains("1000x"), "{e}");
    }

    #[test]
    fn a_cached_profile_others_can_write_is_not_used() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("ozaki-profile-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = default_path_in(&dir, None);
        Profile::built_in("cpu-only").unwrap().save(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (_, src, _) = resolve_in(None, None, Some(&dir)).unwrap();
        assert_eq!(src, ProfileSource::Cache(path.clone()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (_, src, warning) = resolve_in(None, None, Some(&dir)).unwrap();
        assert_eq!(src, ProfileSource::BuiltIn("cpu-only"));
        assert!(warning.is_some_and(|w| w.text.contains("lets other users in") && !w.routine));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Known only by its name, a GPU gets the profile the engine will resolve once the GPU is
    /// up: its own cached one, else its model's built-in one; an unknown model gets none.
    #[test]
    fn a_gpu_known_by_name_gets_its_cached_or_built_in_profile() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("ozaki-profile-name-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let h100 = "NVIDIA H100 80GB HBM3";
        let by_name = |name| resolve_by_name_in(None, name, Some(&dir)).unwrap();
        let (p, src) = by_name(Some(h100)).unwrap();
        assert_eq!(src, ProfileSource::BuiltIn("h100"));
        assert_eq!(p, Profile::built_in("h100").unwrap());
        assert_eq!(
            by_name(Some("NVIDIA H200")).unwrap().1,
            ProfileSource::BuiltIn("h200")
        );
        assert_eq!(by_name(Some("NVIDIA A100-SXM4-80GB")), None);
        assert_eq!(by_name(None), None);
        // This machine's calibrated profile wins over the built-in one, as in `resolve`.
        let path = default_path_in(&dir, Some(h100));
        let mut mine = Profile::built_in("h100").unwrap();
        mine.name = "calibrated here".into();
        mine.save(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (p, src) = by_name(Some(h100)).unwrap();
        assert_eq!(
            (p.name.as_str(), src),
            ("calibrated here", ProfileSource::Cache(path.clone()))
        );
        // one others can write is passed over
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(
            by_name(Some(h100)).unwrap().1,
            ProfileSource::BuiltIn("h100")
        );
        // OZAKI_PROFILE wins over both; a file it names that cannot be read is an error
        let env = dir.join("env.json");
        Profile::built_in("cpu-only").unwrap().save(&env).unwrap();
        let env_s = env.to_str().unwrap();
        assert_eq!(
            resolve_by_name_in(Some(env_s), Some(h100), Some(&dir))
                .unwrap()
                .unwrap()
                .1,
            ProfileSource::Env(env.clone())
        );
        assert!(resolve_by_name_in(Some("/nonexistent/p.json"), Some(h100), Some(&dir)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A cached profile renamed over after the checks passed: what is loaded is the file that
    /// was checked, not whatever the path names by the time it is read. Also a symbolic link
    /// and a FIFO at the path are refused (the FIFO without waiting for a writer).
    #[test]
    fn the_cached_profile_checked_is_the_one_loaded() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("ozaki-profile-swap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = default_path_in(&dir, None);
        let checked = Profile::built_in("cpu-only").unwrap();
        let swapped_in = Profile::built_in("h200").unwrap();
        assert_ne!(checked, swapped_in);
        checked.save(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let other = dir.join("other.json");
        swapped_in.save(&other).unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o666)).unwrap();
        let loaded = load_cached_with(&path, || std::fs::rename(&other, &path).unwrap()).unwrap();
        assert_eq!(loaded, checked, "the profile read is the one checked");
        // The path now names the file others can write: refused.
        let e = load_cached(&path).unwrap_err();
        assert!(e.contains("lets other users in"), "{e}");

        std::fs::remove_file(&path).unwrap();
        let target = dir.join("target.json");
        checked.save(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(
            load_cached(&path).is_err(),
            "a symbolic link is not followed"
        );
        std::fs::remove_file(&path).unwrap();

        let made = std::process::Command::new("mkfifo")
            .args(["-m", "600"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo");
        let e = load_cached(&path).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Same multiprocessors and clock, 0.70 of the bandwidth: a large product's compute term
    /// is unchanged while the emulation's conversion and reconstruction, which stream, take
    /// 1/0.70 as long; the host link and the device memory follow the machine.
    #[test]
    fn products_follow_compute_and_streaming_follows_bandwidth() {
        let base = Profile::built_in("h200").unwrap();
        let s = adapt::scale(&h200(), &h100()).unwrap();
        let p = base.scaled_to(s, &h100());
        let (g0, g1) = (base.gpu.as_ref().unwrap(), p.gpu.as_ref().unwrap());
        assert_eq!(g1.name, "NVIDIA H100 80GB HBM3");
        assert_eq!(g1.memory_bytes, 80 << 30);
        assert!(g1.free_bytes <= g1.memory_bytes && g1.free_bytes >= g1.memory_bytes / 2);
        assert_eq!(g1.fp64.s_per_mnk, g0.fp64.s_per_mnk);
        assert_eq!(g1.int8.s_per_mnk, g0.int8.s_per_mnk);
        let ratio = g1.convert.s_per_elem_modulus / g0.convert.s_per_elem_modulus;
        assert!((ratio - 4.8 / 3.35).abs() < 1e-9, "{ratio}");
        assert_eq!(g1.link, g0.link);
        assert_eq!(p.corrections, base.corrections);
        assert!(p.devices.is_empty() && p.host_share.is_none());
        // Every GPU route is still priced, and a large device-resident product costs at
        // least what it did on the faster-memory GPU.
        let shape = CallShape::gemm(8192, 8192, 8192).with_residency(Residency::Device);
        for route in [Route::GpuNative, Route::GpuOzaki] {
            let (t0, t1) = (
                predict(&base, &shape, route, Some(14), 16).seconds,
                predict(&p, &shape, route, Some(14), 16).seconds,
            );
            assert!(
                t1.is_finite() && t1 >= t0 * 0.999,
                "{route:?}: {t0} -> {t1}"
            );
        }
    }
}
