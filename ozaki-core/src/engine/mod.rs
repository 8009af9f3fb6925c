//! The per-record engine: for each call it predicts the time of every route on
//! this machine and takes the fastest one that meets the accuracy contract.
//!
//! The paper's engine (Ozaki 2.5 brief §5, Alg. 4) prices device-resident data with
//! datasheet constants. Ours is measured on the machine it runs on and also prices what an
//! LD_PRELOAD shim really pays (brief §9.7; related-papers take-aways 1, 2, 5–7): the host
//! link, the vendor CPU BLAS, fixed launch/sync latencies and the free device memory.
//!
//! | module | what it holds |
//! |---|---|
//! | [`work_model`] | a kernel's seconds as priced work terms, fitted to timings, with its local correction |
//! | [`alignment`] | cuBLAS DGEMM's slowdown at sizes that are not multiples of 16, per class of alignment |
//! | [`model`] | cost terms per route from a [`profile::Profile`]: work models, transfers, conversion, r INT8 products, reconstruction, latencies |
//! | [`profile`] | the versioned JSON machine profile: load/save, `OZAKI_PROFILE`, the per-GPU default in the cache dir, built-in fallbacks |
//! | [`adapt`] | a GPU as the driver describes it, and the factors that carry a profile to another GPU of its architecture (`Profile::scaled_to`) |
//! | [`platforms`] | the paper's platforms (GB300, B200, Rubin) and the H200 datasheet, for what-if projections |
//! | [`reduced`] | the paper's reduced model (Alg. 4 `rate_rec`, storage modes, ComputeRate) evaluated on a platform |
//! | [`choose`] | per-call choice under the accuracy contract, with a per-shape decision cache |
//! | [`load`] | what runs beside a call: the vendor's share of the CPU under concurrent callers, the GPU's queue |
//! | [`wake`] | what a vendor call leaves behind: its spinning pool's window and the slowdown of host copies made in it |
//! | [`spin`] | how long the vendor's idle threads spin: the `OPENBLAS_THREAD_TIMEOUT` the shim sets (`OZAKI_VENDOR_SPIN`) and the bound it puts on the wake |
//! | [`correct`] | lock-free per-class corrections of the predictions from measured calls |
//! | [`declines`] | lock-free memory of the accuracy rule declining a class of calls |
//! | [`replay`] | per-record rows and the composites of a trace replayed through either model |
//! | [`calibrate`] | the measurement plan, the raw-measurement format and the fits that turn it into a profile |
//! | [`split`] | a host-resident dgemm split over several GPUs, priced per device with the shared host link |

pub mod adapt;
pub mod alignment;
pub mod calibrate;
pub mod choose;
pub mod correct;
pub mod declines;
pub mod load;
pub mod model;
pub mod platforms;
pub mod priced_moduli;
pub mod profile;
pub mod reduced;
pub mod replay;
pub mod sides;
pub mod spin;
pub mod split;
pub mod wake;
pub mod work_model;

use crate::trace::{CallRecord, Routine};

/// Where the operands of a call live when the shim sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Residency {
    /// Host memory (every call LD_PRELOAD intercepts): GPU routes pay the host link.
    Host,
    /// Already on the GPU (the `ozaki_*_device` entry points): no transfers.
    Device,
}

impl Residency {
    /// Stable lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Residency::Host => "host",
            Residency::Device => "device",
        }
    }
}

/// What the engine needs to know about one call: the geometry and the flags that change
/// the work or the bytes moved. Built from a live call by the shim or from a trace record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallShape {
    /// dgemm or dsyrk.
    pub routine: Routine,
    /// Rows of C (dsyrk: equal to n).
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// op(A) is transposed (dsyrk: `trans == T`).
    pub transa: bool,
    /// op(B) is transposed.
    pub transb: bool,
    /// beta == 0: C is written but not read (no upload of C).
    pub beta_zero: bool,
    /// alpha == 0: no product at all (reference quick path).
    pub alpha_zero: bool,
    /// Where the operands are.
    pub residency: Residency,
    /// C is a block of a larger array (its leading dimension exceeds its rows). The GPU
    /// routes move only C's rows of each column to and from pinned staging, so the gaps cost
    /// them nothing beyond a contiguous C's copies; the shape keeps it so that decisions
    /// and `ozaki explain` tell such calls apart.
    pub c_gaps: bool,
}

/// The four kinds of work a GEMM-like call does, in elements (brief §4.9: W, n_uniq, mn).
/// A cost model prices each with its own coefficient (take-away 1: price per kernel/term,
/// not by nominal peak ratios).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkTerms {
    /// Multiply-adds: mnk (dsyrk: n(n+1)k/2, one triangle).
    pub mnk: f64,
    /// Elements of op(B): nk (dsyrk: 0, the Gram factor is counted once in `mk`).
    pub nk: f64,
    /// Elements of op(A): mk.
    pub mk: f64,
    /// Elements of C written: mn (dsyrk: n(n+1)/2).
    pub mn: f64,
}

impl CallShape {
    /// A plain host-resident dgemm C = A·B (no transposes, alpha = 1, beta = 0).
    pub fn gemm(m: u64, n: u64, k: u64) -> CallShape {
        CallShape {
            routine: Routine::Dgemm,
            m,
            n,
            k,
            transa: false,
            transb: false,
            beta_zero: true,
            alpha_zero: false,
            residency: Residency::Host,
            c_gaps: false,
        }
    }

    /// A host-resident dsyrk C = A·Aᵀ of order n and inner dimension k.
    pub fn syrk(n: u64, k: u64) -> CallShape {
        CallShape {
            routine: Routine::Dsyrk,
            m: n,
            ..CallShape::gemm(n, n, k)
        }
    }

    /// The same shape with other residency.
    pub fn with_residency(self, residency: Residency) -> CallShape {
        CallShape { residency, ..self }
    }

    /// The shape of a trace record. Residency is inferred from the symbol: the device entry
    /// points are named `ozaki_*_device`; everything else LD_PRELOAD sees is host memory.
    pub fn from_record(r: &CallRecord) -> CallShape {
        let residency = if r.sym.starts_with("ozaki_") && r.sym.contains("device") {
            Residency::Device
        } else {
            Residency::Host
        };
        let is_t = |t: &Option<String>| {
            t.as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("T") || s.eq_ignore_ascii_case("C"))
        };
        // C's extent along its leading dimension: rows in column-major order, columns in
        // row-major order.
        let c_rows = match (r.routine, r.layout) {
            (Routine::Dsyrk, _) | (_, crate::trace::Layout::Row) => r.n,
            (Routine::Dgemm, crate::trace::Layout::Col) => r.m,
        };
        CallShape {
            routine: r.routine,
            m: if r.routine == Routine::Dsyrk {
                r.n
            } else {
                r.m
            },
            n: r.n,
            k: r.k,
            transa: if r.routine == Routine::Dsyrk {
                is_t(&r.trans)
            } else {
                is_t(&r.transa)
            },
            transb: is_t(&r.transb),
            beta_zero: r.beta == 0.0,
            alpha_zero: r.alpha == 0.0,
            residency,
            c_gaps: r.ldc > c_rows,
        }
    }

    /// Multiply-adds of the product, m·n·k (dsyrk: n·n·k, both triangles counted), saturating.
    pub fn mnk(&self) -> u64 {
        self.m.saturating_mul(self.n).saturating_mul(self.k)
    }

    /// Useful floating-point operations (2mnk; dsyrk n(n+1)k).
    pub fn flops(&self) -> f64 {
        self.routine.flops(self.m, self.n, self.k)
    }

    /// n̄ = 2mn/(m+n), the paper's size statistic (Eq. 12); dsyrk: n (brief §5.2).
    pub fn nbar(&self) -> f64 {
        let (m, n) = (self.m as f64, self.n as f64);
        match self.routine {
            Routine::Dsyrk => n,
            Routine::Dgemm if m + n == 0.0 => 0.0,
            Routine::Dgemm => 2.0 * m * n / (m + n),
        }
    }

    /// True when there is no product to compute (empty C, k = 0 or alpha = 0): at most a
    /// scaling of C by beta, which never pays for a GPU round trip.
    pub fn no_product(&self) -> bool {
        self.m == 0 || self.n == 0 || self.k == 0 || self.alpha_zero
    }

    /// The work terms (see [`WorkTerms`]).
    pub fn work(&self) -> WorkTerms {
        let (m, n, k) = (self.m as f64, self.n as f64, self.k as f64);
        match self.routine {
            Routine::Dgemm => WorkTerms {
                mnk: m * n * k,
                nk: n * k,
                mk: m * k,
                mn: m * n,
            },
            Routine::Dsyrk => WorkTerms {
                mnk: n * (n + 1.0) * k / 2.0,
                nk: 0.0,
                mk: n * k,
                mn: n * (n + 1.0) / 2.0,
            },
        }
    }

    /// Elements of the distinct input operands (mk + kn; dsyrk: nk, the Gram factor once).
    pub fn input_elems(&self) -> f64 {
        let w = self.work();
        w.mk + w.nk
    }

    /// Elements of C the call writes (a whole m×n block is moved even for dsyrk, since the
    /// triangle is strided inside it).
    pub fn output_elems(&self) -> f64 {
        self.m as f64 * self.n as f64
    }
}
