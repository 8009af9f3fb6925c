//! Trace records: the JSON Lines schema shared by the shim (writer), `ozaki summary`,
//! `ozaki replay`, `ozaki report` and `ozaki ab-report` (readers).
//!
//! A trace file is one [`Header`] line followed by one [`CallRecord`] line per intercepted
//! call, each a JSON object tagged by `"type"`. The field names are a user-facing contract
//!: fields are only ever added, never renamed, and every addition that changes
//! meaning bumps [`SCHEMA_VERSION`]. Readers accept any version up to their own and ignore
//! unknown fields, so a newer shim's trace still loads in an older report tool.
//!
//! Optional fields are omitted when absent (never written as `null`), which keeps the
//! common vendor-route record short.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the trace schema written in [`Header::schema`].
///
/// History: 1 = the original fields (+ optional route/engine/GPU/A-B extensions, and `scaling`
/// of the emulated routes); 2 = optional `devices` on a call split over several
/// GPUs. A version-1 reader refuses version-2 files, since it would count a split
/// call's work on one GPU only. Version 2 later gained the optional `engine.gpu_start`
/// ([`StartNote`]), which older readers ignore without miscounting anything. 3 = the engine
/// prices each call under the load it was decided in: `engine.concurrent` (calls in flight
/// in the process when it was decided, the call itself included), `engine.correction` (the
/// factor measured calls of its class applied to the chosen route's prediction),
/// `engine.queue_s` (predicted wait behind the calls in flight on the GPU), `engine.explore`
/// (the call ran the runner-up to measure it); the header gains `cpus` and `blas_threads`
/// (the machine the trace was recorded on, which `ozaki replay` prices with). A version-2
/// reader would replay such a trace as if every call had the machine to itself. 4 = calls a
/// program made through cuBLAS on device-resident operands: `device_resident` (true on
/// them; the `sym` is the cuBLAS entry point, such as `cublasGemmEx`) and `batch` (the member
/// count of a strided-batched call, whose record describes one member's shape). A version-3
/// reader would count such a call as one host-resident product. Version 4 later gained the
/// optional `cuda_libs` (the CUDA library files behind the first GPU call), which older
/// readers ignore without miscounting anything, and the optional `phases.wait_ns` (the time a
/// GPU call waited behind other callers' GPU work, inside `dur_ns`), and the optional
/// `phases.pinned_ns` (the time a call spent growing pinned memory that later calls reuse,
/// inside `dur_ns`), and the optional
/// `engine.wake_s` (what the vendor's still-busy threads added to the GPU route's price), and
/// the header's optional `vendor_spin_log2` (the spin timeout of the process's OpenBLAS
/// pools, which bounds the vendor's wake the engine priced) and `vendor_threads_shared`
/// (vendor calls from OpenMP teams or beside others ran at their share of the vendor's
/// threads), and the optional `engine.team` (the OpenMP team a call was made from); an older
/// reader prices such a trace's vendor calls at a shared pool's rate, as the shim then did.
/// Version 4 also gained the optional `vendor_core` of the header and of the records (the
/// kernels an OpenBLAS vendor picked for the CPU, [`Header::vendor_core`]) and the header's
/// optional `cpu_simd`, which older readers ignore.
pub const SCHEMA_VERSION: u32 = 4;

/// Which BLAS routine a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Routine {
    /// C = alpha op(A) op(B) + beta C.
    Dgemm,
    /// C = alpha A A^T + beta C (or A^T A), one triangle of C.
    Dsyrk,
}

impl Routine {
    /// Floating-point operations of one call, counted the usual way (2mnk for dgemm,
    /// n(n+1)k for dsyrk, which touches one triangle).
    pub fn flops(self, m: u64, n: u64, k: u64) -> f64 {
        match self {
            Routine::Dgemm => 2.0 * m as f64 * n as f64 * k as f64,
            Routine::Dsyrk => n as f64 * (n as f64 + 1.0) * k as f64,
        }
    }
}

/// Storage order of the caller's matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Column-major (Fortran, and CBLAS with CblasColMajor).
    Col,
    /// Row-major (CBLAS with CblasRowMajor).
    Row,
}

/// First line of every trace file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always `"header"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Trace schema version, see [`SCHEMA_VERSION`].
    #[serde(default = "default_schema")]
    pub schema: u32,
    /// Process id of the traced program.
    pub pid: u32,
    /// Executable path (`/proc/self/exe`).
    pub exe: String,
    /// Command line; absent when `OZAKI_TRACE_ARGV=0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// Version of the shim that wrote the trace.
    pub shim_version: String,
    /// Resolved vendor library per exported symbol name (filled as symbols resolve; the
    /// header is written at the first call, so it holds what was resolved by then; later
    /// resolutions appear as `vendor` fields of the records).
    #[serde(default)]
    pub vendor: BTreeMap<String, String>,
    /// Wall-clock start time, seconds since the Unix epoch.
    pub start_unix_s: f64,
    /// Host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// MPI rank from the launcher's environment, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Parent pid when this trace was opened in a `fork()`ed child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_pid: Option<u32>,
    /// CPUs the process could run on (schema 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// The vendor BLAS thread count the engine priced (schema 3): the first of
    /// `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS`, `BLIS_NUM_THREADS`, `OMP_NUM_THREADS`, else
    /// `cpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blas_threads: Option<u32>,
    /// The spin timeout, log2 of TSC cycles, of every OpenBLAS pool of the process, when the
    /// shim knows it (`OPENBLAS_THREAD_TIMEOUT` from the start, or set by the shim before any
    /// OpenBLAS was loaded; `ozaki_core::engine::spin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_spin_log2: Option<u32>,
    /// True when `auto` ran some vendor calls at a share of the vendor's threads, which the
    /// engine prices so: calls made beside other BLAS calls (the shim's
    /// `OZAKI_VENDOR_THREADS=share`) or from inside an OpenMP team (`team`, where such a
    /// call's `engine.concurrent` counts at least its team); absent in traces of shims
    /// without these rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_threads_shared: Option<bool>,
    /// The kernels each vendor library of [`Header::vendor`] runs, where it says
    /// (`openblas_get_corename` of an OpenBLAS: `Haswell`, `SkylakeX`, or for a build older
    /// than the CPU an old core such as `Prescott`), per exported symbol name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vendor_core: BTreeMap<String, String>,
    /// The widest vector instructions of the CPU the trace was recorded on: `avx512f`,
    /// `avx2`, `avx` or `sse2` ([`cpu_simd`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_simd: Option<String>,
}

fn default_schema() -> u32 {
    1
}

/// Measured GPU phase times of one call, in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// Host-device transfers that were not hidden behind compute.
    #[serde(default)]
    pub transfer_ns: u64,
    /// Exponent scan, scaling and residue formation.
    #[serde(default)]
    pub convert_ns: u64,
    /// The integer (or fp64) products.
    #[serde(default)]
    pub products_ns: u64,
    /// CRT reconstruction and the alpha/beta epilogue.
    #[serde(default)]
    pub reconstruct_ns: u64,
    /// Time the call waited for the GPU while other callers' work held it (the process's
    /// queue, not this call's work); omitted when it did not wait.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wait_ns: u64,
    /// Time the call spent allocating pinned host memory that later calls reuse, inside
    /// `transfer_ns`: a one-off growth, not the route's rate; omitted when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pinned_ns: u64,
}

impl Phases {
    /// The part of the call's time that is not its route's own work on its shape: waiting
    /// for the GPU behind other callers ([`Phases::wait_ns`]) and growing pinned memory
    /// for later calls too ([`Phases::pinned_ns`]). What the engine learns a class's rate
    /// from is the call's time less this.
    pub fn not_own_work_ns(&self) -> u64 {
        self.wait_ns.saturating_add(self.pinned_ns)
    }
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// The words a decision's `reason` carries when the call was priced at its size class's
/// bound (m, n, k rounded up to powers of two) rather than at its own shape: the prediction
/// is then the bound's, not the call's (`ozaki summary` counts such calls apart).
pub const CLASS_BOUND_NOTE: &str = "priced at its size class's bound";

/// The engine's prediction for one call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Predicted seconds per route name (`vendor`, `gpu-native`, `gpu-ozaki`, ...).
    #[serde(default)]
    pub predicted_s: BTreeMap<String, f64>,
    /// Why the chosen route won (or why others were excluded).
    #[serde(default)]
    pub reason: String,
    /// The GPU start as this call found it, for calls decided before the GPU was up
    /// (`OZAKI_ROUTE=auto`): what `ozaki summary` adds up as the start's cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_start: Option<StartNote>,
    /// Calls in flight in the process when this one was decided, itself included (schema
    /// 3); the vendor price is for that load, at its power-of-two class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent: Option<u32>,
    /// The OpenMP team the call was made from, when the shim's `OZAKI_VENDOR_THREADS=team`
    /// asked and it had more than one thread (optional, schema 4): `concurrent` counts at
    /// least the team, and a vendor call ran the vendor at its count divided by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<u32>,
    /// Factor the chosen route's prediction got from measured calls of its class (schema 3;
    /// absent: no correction applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<f64>,
    /// Predicted seconds this call waits behind GPU calls in flight (schema 3; absent: none
    /// queued or not a GPU route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_s: Option<f64>,
    /// The call ran the runner-up route to measure it (bounded exploration, schema 3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub explore: bool,
    /// Seconds the GPU route's price gained because the call was decided while a vendor
    /// call's threads still held the host (`ozaki_core::engine::wake`): its staged copies
    /// priced at the profile's measured slowdown (absent: a quiet host, or no GPU route
    /// priced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_s: Option<f64>,
}

/// What a call did about a GPU start that was under way or had failed (trace field
/// `engine.gpu_start`; optional, so the schema version is unchanged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartNote {
    /// What the call did.
    pub during: DuringStart,
    /// Seconds the start had been running when the call came (0 when it had failed).
    #[serde(default)]
    pub elapsed_s: f64,
    /// Seconds the call waited for the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_s: Option<f64>,
}

/// What a call did while the GPU was not up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DuringStart {
    /// Ran on the vendor BLAS while the GPU started in the background (after waiting
    /// `waited_s` in vain for the start to end, when that is set).
    Vendor,
    /// Waited `waited_s` for the start, then ran where the engine chose.
    Waited,
    /// Ran on the vendor BLAS because the GPU could not be started (after waiting
    /// `waited_s` for the failed start, when that is set).
    Failed,
}

/// A/B comparison of the chosen route against the vendor BLAS.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AbResult {
    /// max_ij |C_route - C_vendor| / |C_vendor| (componentwise, 0/0 counted as 0; a
    /// difference from 0 or a non-finite one is `"Infinity"`, as for `alpha`).
    #[serde(with = "special_f64")]
    pub max_rel_comp: f64,
    /// ||C_route - C_vendor||_F / ||C_vendor||_F (non-finite as for `max_rel_comp`).
    #[serde(with = "special_f64")]
    pub rel_norm: f64,
    /// Vendor time in ns.
    pub vendor_ns: u64,
    /// Chosen route time in ns.
    pub route_ns: u64,
    /// Which result the program received (`route` or `vendor`).
    pub kept: String,
    /// Set when this call was chosen for A/B but not compared, with the reason (e.g. its
    /// private copy of C would exceed `OZAKI_AB_MAX_MB`); the numeric fields are then 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// ||C_route - C_vendor||_F / (|alpha| ||op(A)||_F ||op(B)||_F + |beta| ||C_old||_F): the
    /// difference on the scale of the data, which any two correct fp64 results keep below
    /// 2 gamma_{k+2} = 2(k+2)u / (1 - (k+2)u) whatever C's cancellation (`ozaki ab-report`'s
    /// verdict). Non-finite values are written as 1.8e308.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rel_scaled: Option<f64>,
}

/// The largest [`AbResult::rel_scaled`] two correct fp64 computations of a call with inner
/// dimension `k` can differ by: twice the classic dot-product bound gamma_{k+2} (k products
/// and sums, one rounding of alpha, one of the beta update), with u = 2^-53.
pub fn ab_scaled_bound(k: u64) -> f64 {
    2.0 * crate::accuracy::gamma(usize::try_from(k).unwrap_or(usize::MAX).saturating_add(2))
}

/// One intercepted BLAS call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Always `"call"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Per-process sequence number, from 0, in call-start order.
    pub seq: u64,
    /// Start time in ns since the process start (the shim's first clock reading).
    pub t_ns: u64,
    /// Wall time inside the shim for this call, in ns.
    pub dur_ns: u64,
    /// Kernel thread id of the calling thread.
    pub tid: u64,
    /// Exported symbol that was hit (`dgemm_`, `scipy_cblas_dgemm64_`, ...).
    pub sym: String,
    /// Routine.
    pub routine: Routine,
    /// Storage order.
    pub layout: Layout,
    /// dgemm: transpose of A (`N`, `T`, `C`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transa: Option<String>,
    /// dgemm: transpose of B.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transb: Option<String>,
    /// dsyrk: triangle of C (`U`, `L`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplo: Option<String>,
    /// dsyrk: `N` (C = A A^T) or `T` (C = A^T A).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trans: Option<String>,
    /// Rows of C (dsyrk: equal to n).
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// Leading dimension of A.
    pub lda: u64,
    /// Leading dimension of B (dsyrk: 0).
    #[serde(default)]
    pub ldb: u64,
    /// Leading dimension of C.
    pub ldc: u64,
    /// alpha (non-finite values are written as the strings `"NaN"`, `"Infinity"`, `"-Infinity"`).
    #[serde(with = "special_f64")]
    pub alpha: f64,
    /// beta (non-finite values as for `alpha`).
    #[serde(with = "special_f64")]
    pub beta: f64,
    /// Whether the symbol takes 64-bit integers.
    pub ilp64: bool,
    /// Route that produced C (`vendor`, `builtin`, `cpu-ozaki`, `gpu-native`, `gpu-ozaki`),
    /// or what the reference checks say of the call: `xerbla` for an illegal argument,
    /// `quick` for a reference quick return. The shim computes neither: they go to the
    /// vendor BLAS unchanged (its checks and handlers decide), or, with no vendor, get the
    /// reference's report or quick return.
    pub route: String,
    /// Why the call fell back from the requested route, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Number of moduli used by an emulated route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moduli: Option<u32>,
    /// Scaling bound of an emulated route: `fast`, `norm` or `accurate`
    /// (`ozaki_core::scaling::ScalingMode`, `OZAKI_SCALING`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<String>,
    /// GPU ordinal used by a GPU route (a split call: its first tile's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// GPU ordinal of each tile when the call was split over several GPUs (schema 2,
    ///); absent for a call that ran on one device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<u32>>,
    /// Measured GPU phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
    /// The engine's prediction and reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Prediction>,
    /// A/B comparison against the vendor BLAS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ab: Option<AbResult>,
    /// Reference BLAS error code (parameter position) of an illegal call (`route` = `xerbla`),
    /// whatever the vendor made of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<i64>,
    /// Vendor library of `sym`, on the first record of a symbol resolved after the header
    /// was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// The kernels that library runs, beside `vendor`, where it says
    /// ([`Header::vendor_core`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_core: Option<String>,
    /// The operands lived in device memory: a cuBLAS call of the program (schema 4).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub device_resident: bool,
    /// Members of a strided-batched call, each of the shape the record describes (schema 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// The CUDA library files the process had loaded (driver, cuBLAS, cuBLASLt, NVRTC and
    /// its builtins), on the first record of a call that ran on a GPU in this trace file:
    /// where the GPU routes found CUDA, e.g. pip's `site-packages/nvidia/cu13/lib` or a
    /// system toolkit (optional; older readers ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_libs: Option<Vec<String>>,
}

/// JSON has no NaN or infinities: finite values are numbers, the others the strings `"NaN"`,
/// `"Infinity"`, `"-Infinity"` (what the shim writes for a caller's non-finite alpha/beta).
mod special_f64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if *v > 0.0 {
            s.serialize_str("Infinity")
        } else {
            s.serialize_str("-Infinity")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Number(v) => Ok(v),
            Repr::Text(t) => match t.as_str() {
                "NaN" => Ok(f64::NAN),
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                other => Err(serde::de::Error::custom(format!(
                    "expected a number, \"NaN\" or \"Infinity\", got {other:?}"
                ))),
            },
        }
    }
}

impl CallRecord {
    /// nbar = 2mn/(m+n), the paper's call-size statistic (0 for an empty C).
    pub fn nbar(&self) -> f64 {
        let (m, n) = (self.m as f64, self.n as f64);
        if m + n == 0.0 {
            0.0
        } else {
            2.0 * m * n / (m + n)
        }
    }

    /// Floating-point operations of this call.
    pub fn flops(&self) -> f64 {
        self.routine.flops(self.m, self.n, self.k)
    }
}

/// Whether a trace line holds nothing but JSON's whitespace (space, tab, line feed, carriage
/// return): skipped without a note. Any other character, a vertical tab or a no-break space
/// included, makes a damaged line.
fn is_blank(text: &str) -> bool {
    text.bytes()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// One parsed trace line.
// A trace holds one header per process and a call record per call, so the records are boxed
// and the header, the larger variant, is left inline: a `Line` only lives while it is read.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// The header object.
    Header(Header),
    /// A call object.
    Call(Box<CallRecord>),
}

/// Why a trace line could not be read; `line` is 1-based.
#[derive(Debug)]
pub struct TraceError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub message: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TraceError {}

/// Parses one trace line (`line_no` is 1-based, for the error message).
///
/// # Errors
/// - the line is not a JSON object, has no known `"type"`, or misses a required field;
/// - the header's schema is newer than [`SCHEMA_VERSION`].
pub fn parse_line(text: &str, line_no: usize) -> Result<Line, TraceError> {
    let err = |message: String| TraceError {
        line: line_no,
        message,
    };
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| err(format!("not JSON: {e}")))?;
    match value.get("type").and_then(|t| t.as_str()) {
        Some("header") => {
            let h: Header =
                serde_json::from_value(value).map_err(|e| err(format!("bad header: {e}")))?;
            if h.schema > SCHEMA_VERSION {
                return Err(err(format!(
                    "trace schema {} is newer than this tool's {}",
                    h.schema, SCHEMA_VERSION
                )));
            }
            Ok(Line::Header(h))
        }
        Some("call") => {
            let c: CallRecord =
                serde_json::from_value(value).map_err(|e| err(format!("bad call record: {e}")))?;
            check_ab(c.ab.as_ref()).map_err(|m| err(format!("bad call record: {m}")))?;
            Ok(Line::Call(Box::new(c)))
        }
        Some(other) => Err(err(format!("unknown record type {other:?}"))),
        None => Err(err("record has no \"type\" field".into())),
    }
}

/// The A/B differences are magnitudes: a negative (or NaN) one is a corrupt record, which
/// readers must not count (the histograms index by decade).
fn check_ab(ab: Option<&AbResult>) -> Result<(), String> {
    let Some(ab) = ab else { return Ok(()) };
    let fields = [
        ("max_rel_comp", Some(ab.max_rel_comp)),
        ("rel_norm", Some(ab.rel_norm)),
        ("rel_scaled", ab.rel_scaled),
    ];
    for (name, v) in fields {
        if let Some(v) = v
            && (v.is_nan() || v < 0.0)
        {
            return Err(format!("ab.{name} = {v} is not a magnitude (>= 0)"));
        }
    }
    Ok(())
}

/// A whole trace file read into memory.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Header lines (one per file; several after concatenation or a merge of rank traces).
    pub headers: Vec<Header>,
    /// Call records in file order.
    pub calls: Vec<CallRecord>,
}

impl Trace {
    /// Reads a trace from any reader; blank lines are skipped.
    ///
    /// # Errors
    /// - I/O errors and malformed lines, with the 1-based line number.
    pub fn read(reader: impl std::io::BufRead) -> Result<Trace, TraceError> {
        let mut trace = Trace::default();
        for (i, line) in reader.lines().enumerate() {
            let line = line.map_err(|e| TraceError {
                line: i + 1,
                message: e.to_string(),
            })?;
            if is_blank(&line) {
                continue;
            }
            match parse_line(&line, i + 1)? {
                Line::Header(h) => trace.headers.push(h),
                Line::Call(c) => trace.calls.push(*c),
            }
        }
        Ok(trace)
    }

    /// Reads a trace the way the command-line tools do: a line that does not parse (torn by
    /// a full disk or a killed writer, or cut short at the end) is skipped and returned in
    /// the list, so one bad line never costs the rest of a trace that cannot be re-recorded.
    /// Lines are read one at a time (no copy of the whole text is held).
    ///
    /// # Errors
    /// - I/O errors;
    /// - a header whose schema is newer than this reader's (a newer tool is needed, and
    ///   skipping would misread the calls after it);
    /// - lines were skipped and not one parsed: not a trace.
    pub fn read_lenient(
        reader: impl std::io::BufRead,
    ) -> Result<(Trace, Vec<SkippedLine>), TraceError> {
        let mut trace = Trace::default();
        let skipped = Trace::scan_lenient(reader, |line| match line {
            Line::Header(h) => trace.headers.push(h),
            Line::Call(c) => trace.calls.push(*c),
        })?;
        Ok((trace, skipped))
    }

    /// [`Trace::read_lenient`] without keeping the records: each line that parses is handed
    /// to `on_line` as it is read, so a reader that only adds things up needs memory for its
    /// totals, not for the trace.
    ///
    /// # Errors
    /// As [`Trace::read_lenient`].
    pub fn scan_lenient(
        mut reader: impl std::io::BufRead,
        mut on_line: impl FnMut(Line),
    ) -> Result<Vec<SkippedLine>, TraceError> {
        let mut skipped = Vec::new();
        let mut parsed = 0usize;
        let mut raw = Vec::new();
        let mut line_no = 0;
        loop {
            raw.clear();
            let n = reader.read_until(b'\n', &mut raw).map_err(|e| TraceError {
                line: line_no + 1,
                message: e.to_string(),
            })?;
            if n == 0 {
                break;
            }
            line_no += 1;
            let terminated = raw.last() == Some(&b'\n');
            let Ok(text) = std::str::from_utf8(&raw) else {
                skipped.push(SkippedLine {
                    line: line_no,
                    message: "not UTF-8 text".into(),
                    terminated,
                });
                continue;
            };
            if is_blank(text) {
                continue;
            }
            match parse_line(text.trim_end(), line_no) {
                Ok(line) => {
                    parsed += 1;
                    on_line(line);
                }
                Err(e) if e.message.contains("is newer than this tool") => return Err(e),
                Err(e) => skipped.push(SkippedLine {
                    line: line_no,
                    message: e.message,
                    terminated,
                }),
            }
        }
        if parsed == 0
            && let Some(first) = skipped.first()
        {
            return Err(TraceError {
                line: first.line,
                message: format!("{} (no line of this file is a trace record)", first.message),
            });
        }
        Ok(skipped)
    }
}

/// A line [`Trace::read_lenient`] skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedLine {
    /// 1-based line number.
    pub line: usize,
    /// Why it did not parse.
    pub message: String,
    /// Whether it ended with a newline (an unterminated last line is a cut-short write).
    pub terminated: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"header","schema":1,"pid":7,"exe":"/bin/x","shim_version":"0.1.0","start_unix_s":1.0}"#;
    const CALL: &str = r#"{"type":"call","seq":0,"t_ns":5,"dur_ns":7,"tid":11,"sym":"dgemm_","routine":"dgemm","layout":"col","m":3,"n":4,"k":5,"lda":3,"ldb":5,"ldc":3,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}"#;

    #[test]
    fn lenient_reading_skips_torn_lines_anywhere_and_keeps_the_rest() {
        // A write cut short in the middle (space freed later), binary junk, and a last line
        // cut short.
        let mut bytes = format!("{HEADER}\n{CALL}\n{}\n{CALL}\n", &CALL[..40]).into_bytes();
        bytes.extend_from_slice(b"\xff\xfe\n");
        bytes.extend_from_slice(format!("{CALL}\n{}", &CALL[..70]).as_bytes());
        let (trace, skipped) = Trace::read_lenient(&bytes[..]).unwrap();
        assert_eq!((trace.headers.len(), trace.calls.len()), (1, 3));
        let lines: Vec<(usize, bool)> = skipped.iter().map(|s| (s.line, s.terminated)).collect();
        assert_eq!(lines, [(3, true), (5, true), (7, false)], "{skipped:?}");
        // The strict reader still rejects the same text.
        assert_eq!(Trace::read(&bytes[..]).unwrap_err().line, 3);
    }

    /// Lines of JSON's whitespace are skipped silently; a line of other whitespace (a
    /// vertical tab, a form feed, a no-break space) is damage, skipped with a note.
    #[test]
    fn only_json_whitespace_makes_a_blank_line() {
        let text = format!("{HEADER}\n \t\r\n\n{CALL}\n\x0b\n\x0c\n\u{a0}\n{CALL}\n");
        let (trace, skipped) = Trace::read_lenient(text.as_bytes()).unwrap();
        assert_eq!(trace.calls.len(), 2);
        let lines: Vec<usize> = skipped.iter().map(|s| s.line).collect();
        assert_eq!(lines, [5, 6, 7], "{skipped:?}");
    }

    #[test]
    fn negative_ab_differences_are_rejected() {
        let ab = |v: &str| {
            CALL.replace(
                "\"route\":\"vendor\"}",
                &format!("\"route\":\"builtin\",\"ab\":{{\"max_rel_comp\":{v},\"rel_norm\":0.0,\"vendor_ns\":1,\"route_ns\":1,\"kept\":\"route\"}}}}"),
            )
        };
        assert!(parse_line(&ab("1e-16"), 1).is_ok());
        assert!(parse_line(&ab("\"Infinity\""), 1).is_ok());
        let e = parse_line(&ab("-1e-16"), 4).unwrap_err();
        assert!(e.line == 4 && e.message.contains("ab.max_rel_comp"), "{e}");
        assert!(parse_line(&ab("\"NaN\""), 1).is_err());
    }

    /// A seeded fuzz of the reader, bounded in time: traces damaged at random (lines cut,
    /// bytes flipped, junk and binary inserted, lines glued together) never make it panic,
    /// and every line left intact is read back.
    #[test]
    fn lenient_reading_survives_random_damage() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n.max(1) as u64) as usize
        };
        for _ in 0..2000 {
            let mut lines: Vec<Vec<u8>> = vec![HEADER.as_bytes().to_vec()];
            lines.extend((0..1 + next(8)).map(|_| CALL.as_bytes().to_vec()));
            let mut intact = vec![true; lines.len()];
            for _ in 0..next(4) {
                let i = next(lines.len());
                let line = &mut lines[i];
                let at = next(line.len() + 1);
                match next(4) {
                    0 => line.truncate(at),
                    1 if at < line.len() => line[at] ^= 1 << next(8),
                    2 => line.splice(at..at, [0xff, b'{', b'"']).for_each(drop),
                    _ => line.extend_from_slice(b"{\"type\":\"call\""),
                }
                intact[i] = false;
            }
            let text = lines.join(&b'\n');
            // A flipped byte can leave a line that still parses; only count what must survive.
            let must = intact.iter().filter(|&&ok| ok).count();
            match Trace::read_lenient(&text[..]) {
                Ok((trace, _)) => assert!(trace.headers.len() + trace.calls.len() >= must),
                // A flipped digit can make the header's schema newer than this reader's.
                Err(e) if e.message.contains("newer") => {}
                Err(e) => assert_eq!(must, 0, "rejected a trace with {must} intact lines: {e}"),
            }
        }
    }

    #[test]
    fn lenient_reading_still_rejects_what_is_not_a_trace_or_too_new() {
        let e = Trace::read_lenient("hello\nworld\n".as_bytes()).unwrap_err();
        assert!(e.message.contains("no line of this file"), "{e}");
        let newer = HEADER.replace("\"schema\":1", "\"schema\":99");
        let e = Trace::read_lenient(format!("{newer}\n{CALL}\n").as_bytes()).unwrap_err();
        assert!(e.message.contains("newer"), "{e}");
        let (t, s) = Trace::read_lenient("".as_bytes()).unwrap();
        assert!(t.calls.is_empty() && s.is_empty());
    }

    #[test]
    fn call_record_round_trips_and_omits_absent_fields() {
        let line = r#"{"type":"call","seq":0,"t_ns":5,"dur_ns":7,"tid":11,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"N","transb":"T","m":3,"n":4,"k":5,"lda":3,"ldb":4,"ldc":3,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}"#;
        let Line::Call(c) = parse_line(line, 1).unwrap() else {
            panic!("not a call")
        };
        assert_eq!(c.flops(), 120.0);
        let back = serde_json::to_string(&*c).unwrap();
        assert!(
            !back.contains("null"),
            "absent fields must be omitted: {back}"
        );
        assert_eq!(parse_line(&back, 1).unwrap(), Line::Call(c));
    }

    #[test]
    fn malformed_lines_name_their_line_number() {
        let e = Trace::read("{\"type\":\"call\"}\n".as_bytes()).unwrap_err();
        assert_eq!(e.line, 1);
        let e = Trace::read("\nnot json\n".as_bytes()).unwrap_err();
        assert_eq!(e.line, 2);
    }
}
