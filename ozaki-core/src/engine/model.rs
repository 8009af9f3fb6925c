//! Cost terms per route, derived from a measured [`Profile`] ("say how each term is
//! derived from the profile").
//!
//! Every route is a list of kernels/steps, each priced by its own measured coefficient and
//! summed (related-papers take-aways 1–2: per-kernel pricing, never nominal peak ratios):
//!
//! | route | terms |
//! |---|---|
//! | `vendor` | call overhead + CPU BLAS work model at the thread count in use |
//! | `gpu-native` | launch + sync + H2D(A, B, C if β≠0) + cuBLAS fp64 work model + D2H(C) − overlap credit |
//! | `gpu-ozaki` | launches + sync + transfers + exponent scan/scaling/residues (per input element and modulus) + r INT8 products (INT8 work model) + reconstruction (per output element and modulus) − overlap credit |
//!
//! A *work model* is `t = s_mnk·mnk + s_nk·nk + s_mk·mk + s_mn·mn + s_fixed` (see
//! [`WorkTerms`]), fitted to measured timings by non-negative least squares on relative
//! error ([`WorkModel::fit`]), times a local multiplicative correction interpolated from the
//! fit's residuals at the calibration shapes ([`Correction`]); far from every calibrated shape
//! the correction fades to 1 and the physical terms extrapolate. The same correction, fitted
//! end to end per route, absorbs what the component sum misses (pipelining, cuBLAS kernel
//! family switches: take-away 6).

use super::profile::{GpuProfile, Profile};
use super::{CallShape, Residency, WorkTerms};
use crate::route::Route;
use crate::trace::Routine;
use serde::{Deserialize, Serialize};

/// One timed run used to fit a [`WorkModel`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Routine of the timed call.
    #[serde(default = "dgemm")]
    pub routine: Routine,
    /// Rows of C.
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// Measured seconds (median of the repeats).
    pub seconds: f64,
}

fn dgemm() -> Routine {
    Routine::Dgemm
}

impl Sample {
    fn shape(&self) -> CallShape {
        match self.routine {
            Routine::Dgemm => CallShape::gemm(self.m, self.n, self.k),
            Routine::Dsyrk => CallShape::syrk(self.n, self.k),
        }
    }
}

/// A multiplicative correction `exp(Σ wᵢ·ln ratioᵢ / (Σ wᵢ + w₀))` with Gaussian weights in
/// (log₂ m, log₂ n, log₂ k): equal to the measured/modelled ratio at a calibrated shape, 1
/// far from all of them. It makes the model a measured lookup near measured shapes
/// (take-away 5: latency-bound shapes are better looked up than extrapolated).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Correction {
    /// Measured shapes and ln(measured / modelled) there.
    #[serde(default)]
    pub points: Vec<CorrectionPoint>,
}

/// One point of a [`Correction`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CorrectionPoint {
    /// Rows of C.
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// ln(measured seconds / modelled seconds).
    pub ln_ratio: f64,
}

/// Width of a correction point's influence, in log₂ units per dimension (a factor 2).
const CORRECTION_WIDTH_LOG2: f64 = 1.0;
/// Weight of "no correction" in the interpolation, so that a lone distant point fades out.
const CORRECTION_PRIOR_WEIGHT: f64 = 0.05;

impl Correction {
    /// The multiplicative factor at (m, n, k).
    pub fn factor(&self, m: u64, n: u64, k: u64) -> f64 {
        if self.points.is_empty() {
            return 1.0;
        }
        let l = |x: u64| (x.max(1) as f64).log2();
        let (lm, ln, lk) = (l(m), l(n), l(k));
        let (mut num, mut den) = (0.0, CORRECTION_PRIOR_WEIGHT);
        for p in &self.points {
            let d2 = (lm - l(p.m)).powi(2) + (ln - l(p.n)).powi(2) + (lk - l(p.k)).powi(2);
            let w = (-d2 / (2.0 * CORRECTION_WIDTH_LOG2 * CORRECTION_WIDTH_LOG2)).exp();
            num += w * p.ln_ratio;
            den += w;
        }
        (num / den).exp()
    }
}

/// Seconds of one kernel/call as a sum of priced work terms (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkModel {
    /// Seconds per multiply-add (1 / (half the sustained FLOP rate)).
    pub s_per_mnk: f64,
    /// Seconds per element of op(B) (operand traffic, packing).
    pub s_per_nk: f64,
    /// Seconds per element of op(A).
    pub s_per_mk: f64,
    /// Seconds per element of C.
    pub s_per_mn: f64,
    /// Fixed seconds per call (latency).
    pub s_fixed: f64,
    /// Local correction from the fit's residuals.
    #[serde(default)]
    pub correction: Correction,
}

impl WorkModel {
    /// A model of a pure rate `flops_per_s` (FLOP/s, 2 per multiply-add) plus a latency.
    pub fn from_rate(flops_per_s: f64, latency_s: f64) -> WorkModel {
        WorkModel {
            s_per_mnk: 2.0 / flops_per_s,
            s_fixed: latency_s,
            ..WorkModel::default()
        }
    }

    /// Uncorrected seconds for the given work terms.
    pub fn base_seconds(&self, w: &WorkTerms) -> f64 {
        self.s_per_mnk * w.mnk
            + self.s_per_nk * w.nk
            + self.s_per_mk * w.mk
            + self.s_per_mn * w.mn
            + self.s_fixed
    }

    /// Predicted seconds of one call of this shape.
    pub fn seconds(&self, shape: &CallShape) -> f64 {
        self.base_seconds(&shape.work()) * self.correction.factor(shape.m, shape.n, shape.k)
    }

    /// The sustained rate the `mnk` term alone implies (FLOP/s), for reports.
    pub fn peak_flops(&self) -> f64 {
        if self.s_per_mnk > 0.0 {
            2.0 / self.s_per_mnk
        } else {
            f64::INFINITY
        }
    }

    /// Fits the five coefficients to `samples` by non-negative least squares on relative
    /// error (each row divided by its measured time, so a 10 µs call counts as much as a
    /// 10 s call), then stores the residuals as the [`Correction`].
    ///
    /// NNLS over five unknowns is solved exactly by trying every subset of active
    /// coefficients (32 small normal-equation solves) and keeping the best feasible one.
    ///
    /// # Errors
    /// Fewer than two usable samples (positive time and non-empty shape).
    pub fn fit(samples: &[Sample]) -> Result<WorkModel, String> {
        let rows: Vec<([f64; 5], f64)> = samples
            .iter()
            .filter(|s| s.seconds > 0.0 && s.seconds.is_finite() && s.m > 0 && s.n > 0 && s.k > 0)
            .map(|s| {
                let w = s.shape().work();
                (
                    [
                        w.mnk / s.seconds,
                        w.nk / s.seconds,
                        w.mk / s.seconds,
                        w.mn / s.seconds,
                        1.0 / s.seconds,
                    ],
                    1.0,
                )
            })
            .collect();
        if rows.len() < 2 {
            return Err(format!(
                "need at least 2 timed shapes to fit a work model, got {}",
                rows.len()
            ));
        }
        let x = nnls_subsets(&rows);
        let mut model = WorkModel {
            s_per_mnk: x[0],
            s_per_nk: x[1],
            s_per_mk: x[2],
            s_per_mn: x[3],
            s_fixed: x[4],
            correction: Correction::default(),
        };
        model.correction.points = samples
            .iter()
            .filter(|s| s.seconds > 0.0 && s.seconds.is_finite() && s.m > 0 && s.n > 0 && s.k > 0)
            .map(|s| {
                let base = model.base_seconds(&s.shape().work());
                CorrectionPoint {
                    m: s.m,
                    n: s.n,
                    k: s.k,
                    ln_ratio: (s.seconds / base).ln(),
                }
            })
            .collect();
        Ok(model)
    }
}

/// Exact non-negative least squares for ≤ 5 unknowns: minimise Σ (a·x − b)² over x ≥ 0 by
/// solving the unconstrained problem on every subset of free variables.
fn nnls_subsets(rows: &[([f64; 5], f64)]) -> [f64; 5] {
    // Scale columns to unit norm so the tiny per-mnk and large per-element coefficients are
    // solved with comparable conditioning.
    let mut scale = [0.0f64; 5];
    for (a, _) in rows {
        for j in 0..5 {
            scale[j] += a[j] * a[j];
        }
    }
    for s in &mut scale {
        *s = if *s > 0.0 { s.sqrt() } else { 1.0 };
    }
    let mut best: ([f64; 5], f64) = ([0.0; 5], f64::INFINITY);
    for mask in 1u32..32 {
        let idx: Vec<usize> = (0..5).filter(|j| mask & (1 << j) != 0).collect();
        let p = idx.len();
        let mut ata = vec![vec![0.0f64; p]; p];
        let mut atb = vec![0.0f64; p];
        for (a, b) in rows {
            for (i, &ji) in idx.iter().enumerate() {
                let ai = a[ji] / scale[ji];
                atb[i] += ai * b;
                for (l, &jl) in idx.iter().enumerate() {
                    ata[i][l] += ai * a[jl] / scale[jl];
                }
            }
        }
        let Some(sol) = solve(ata, atb) else { continue };
        if sol.iter().any(|&v| v < 0.0 || !v.is_finite()) {
            continue;
        }
        let mut x = [0.0f64; 5];
        for (i, &j) in idx.iter().enumerate() {
            x[j] = sol[i] / scale[j];
        }
        let res: f64 = rows
            .iter()
            .map(|(a, b)| (a.iter().zip(&x).map(|(u, v)| u * v).sum::<f64>() - b).powi(2))
            .sum();
        if res < best.1 * (1.0 - 1e-12) {
            best = (x, res);
        }
    }
    best.0
}

/// Gaussian elimination with partial pivoting; `None` when singular.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for c in 0..n {
        let piv = (c..n).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[piv][c].abs() < 1e-12 {
            return None;
        }
        a.swap(c, piv);
        b.swap(c, piv);
        let (top, rest) = a.split_at_mut(c + 1);
        let pivot_row = &top[c];
        for (i, row) in rest.iter_mut().enumerate() {
            let f = row[c] / pivot_row[c];
            for (x, p) in row[c..].iter_mut().zip(&pivot_row[c..]) {
                *x -= f * p;
            }
            b[c + 1 + i] -= f * b[c];
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}

/// One priced step of a route, for `ozaki explain` and the trace reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Term {
    /// Short name (`h2d`, `products`, ...).
    pub name: &'static str,
    /// Seconds this step adds (negative for the overlap credit).
    pub seconds: f64,
    /// How the number was derived from the profile.
    pub how: String,
}

/// The predicted time of one route for one call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteEstimate {
    /// The route.
    #[serde(serialize_with = "route_name")]
    pub route: Route,
    /// Predicted seconds (infinite when excluded).
    pub seconds: f64,
    /// The priced steps; they sum to `seconds` before the end-to-end correction.
    pub terms: Vec<Term>,
    /// Why the route cannot take this call (no GPU, accuracy contract, memory, ...).
    pub excluded: Option<String>,
    /// Storage mode of the route's data (`host`, `host-staged`, `device`, `planes-hbm`).
    pub storage: &'static str,
    /// Where reconstruction runs (`-` for routes without one).
    pub recon_host: &'static str,
    /// Moduli count priced (GPU Ozaki only).
    pub moduli: Option<u32>,
}

fn route_name<S: serde::Serializer>(r: &Route, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(r.name())
}

impl RouteEstimate {
    fn excluded(route: Route, why: String) -> RouteEstimate {
        RouteEstimate {
            route,
            seconds: f64::INFINITY,
            terms: Vec::new(),
            excluded: Some(why),
            storage: "-",
            recon_host: "-",
            moduli: None,
        }
    }
}

/// The routes the engine prices for `auto`: vendor CPU, GPU native, GPU Ozaki.
pub const PRICED_ROUTES: [Route; 3] = [Route::Vendor, Route::GpuNative, Route::GpuOzaki];

/// Predicts `route` for `shape` on the machine described by `profile`.
///
/// `moduli` is the count the numerics would choose for this call (`None`: no count meets
/// the accuracy contract, so GPU Ozaki is excluded). `threads` is the CPU BLAS thread count
/// in use.
pub fn predict(
    profile: &Profile,
    shape: &CallShape,
    route: Route,
    moduli: Option<u32>,
    threads: u32,
) -> RouteEstimate {
    predict_loaded(profile, shape, route, moduli, threads, 1)
}

/// [`predict`] for a call decided while `concurrent` calls (itself included) are in flight
/// in the process: the vendor BLAS is priced at the share of the CPU each caller gets
/// ([`super::load::vendor_slowdown`]); the GPU routes are priced alone (the shim adds the
/// wait for the GPU's queue after the cached decision, [`super::load`]).
pub fn predict_loaded(
    profile: &Profile,
    shape: &CallShape,
    route: Route,
    moduli: Option<u32>,
    threads: u32,
    concurrent: u32,
) -> RouteEstimate {
    let mut est = match route {
        Route::Vendor => vendor(profile, shape, threads, concurrent),
        Route::GpuNative | Route::GpuOzaki => match &profile.gpu {
            None => RouteEstimate::excluded(route, "no GPU in this profile".into()),
            Some(gpu) => gpu_route(gpu, shape, route, moduli),
        },
        Route::Builtin | Route::CpuOzaki => {
            RouteEstimate::excluded(route, "not priced by the engine (forced only)".into())
        }
    };
    if est.excluded.is_none()
        && let Some((c, residency)) = end_to_end(profile, shape, route)
    {
        let f = c.factor(shape.m, shape.n, shape.k);
        if (f - 1.0).abs() > 1e-9 {
            est.terms.push(Term {
                name: "end-to-end",
                seconds: est.seconds * (f - 1.0),
                how: format!(
                    "×{f:.3} from end-to-end {residency} {} timings near this shape",
                    route.name()
                ),
            });
            est.seconds *= f;
        }
    }
    est
}

/// The end-to-end correction of `route` for `shape` and the residency of the timings it was
/// fitted from: a device-resident call takes the device-resident one where the profile has
/// it (skinny and k-heavy calls run at rates the host-resident timings do not show), every
/// other call the host-resident one.
fn end_to_end<'p>(
    profile: &'p Profile,
    shape: &CallShape,
    route: Route,
) -> Option<(&'p Correction, &'static str)> {
    let device = match shape.residency {
        Residency::Device => profile.device_corrections.get(route.name()),
        Residency::Host => None,
    };
    device.map(|c| (c, "device-resident")).or_else(|| {
        profile
            .corrections
            .get(route.name())
            .map(|c| (c, "host-resident"))
    })
}

/// [`predict`] for every route in [`PRICED_ROUTES`].
pub fn predict_all(
    profile: &Profile,
    shape: &CallShape,
    moduli: Option<u32>,
    threads: u32,
) -> Vec<RouteEstimate> {
    predict_all_loaded(profile, shape, moduli, threads, 1)
}

/// [`predict_loaded`] for every route in [`PRICED_ROUTES`].
pub fn predict_all_loaded(
    profile: &Profile,
    shape: &CallShape,
    moduli: Option<u32>,
    threads: u32,
    concurrent: u32,
) -> Vec<RouteEstimate> {
    PRICED_ROUTES
        .iter()
        .map(|&r| predict_loaded(profile, shape, r, moduli, threads, concurrent))
        .collect()
}

fn vendor(profile: &Profile, shape: &CallShape, threads: u32, concurrent: u32) -> RouteEstimate {
    let share = super::load::vendor_share(&profile.cpu, threads, concurrent);
    let Some((used, model)) = profile.cpu.model_for(share.model_threads) else {
        return RouteEstimate::excluded(Route::Vendor, "profile has no CPU BLAS timings".into());
    };
    let blas = if shape.no_product() {
        0.0
    } else {
        let work = model.seconds(shape);
        // The slowdown stretches the work terms, not the fixed latency.
        let fixed = model.s_fixed.min(work);
        fixed + (work - fixed) * share.slowdown
    };
    let mut terms = vec![
        Term {
            name: "overhead",
            seconds: profile.cpu.call_overhead_s,
            how: "interposer overhead per call (calibrated)".into(),
        },
        Term {
            name: "cpu-blas",
            seconds: blas,
            how: format!(
                "vendor BLAS work model at {used} threads (sustained {:.0} GFLOP/s on the mnk term), ×{:.2} local correction",
                model.peak_flops() / 1e9,
                model.correction.factor(shape.m, shape.n, shape.k)
            ),
        },
    ];
    if concurrent > 1 {
        terms[1].how.push_str(&format!(
            "; {concurrent} calls in flight: ×{:.2} ({})",
            share.slowdown, share.how
        ));
    }
    let seconds = terms.iter().map(|t| t.seconds).sum();
    RouteEstimate {
        route: Route::Vendor,
        seconds,
        terms,
        excluded: None,
        storage: "host",
        recon_host: "-",
        moduli: None,
    }
}

/// Bytes the route moves host→device and device→host for a host-resident call.
fn transfer_bytes(shape: &CallShape) -> (f64, f64) {
    let h2d = 8.0 * shape.input_elems()
        + if shape.beta_zero {
            0.0
        } else {
            8.0 * shape.output_elems()
        };
    (h2d, 8.0 * shape.output_elems())
}

fn gpu_route(
    gpu: &GpuProfile,
    shape: &CallShape,
    route: Route,
    moduli: Option<u32>,
) -> RouteEstimate {
    if shape.no_product() {
        return RouteEstimate::excluded(
            route,
            "no product to compute (empty, k = 0 or alpha = 0)".into(),
        );
    }
    let r = match (route, moduli) {
        (Route::GpuOzaki, None) => {
            return RouteEstimate::excluded(
                route,
                "no moduli count meets the accuracy contract for this call".into(),
            );
        }
        (Route::GpuOzaki, Some(r)) => r,
        _ => 0,
    };
    if let Some(reached) = gpu.reached.get(route.name())
        && !reached.ok
    {
        return RouteEstimate::excluded(
            route,
            format!(
                "calibration found it did not reach its hardware: {}",
                reached.evidence
            ),
        );
    }
    let (inp, out) = (shape.input_elems(), shape.output_elems());
    let need = match route {
        Route::GpuOzaki => 8.0 * (inp + out) + r as f64 * inp + 4.0 * r as f64 * out,
        _ => 8.0 * (inp + out),
    };
    let usable = gpu.free_bytes.saturating_sub(gpu.reserve_bytes) as f64;
    if usable > 0.0 && need > usable {
        return RouteEstimate::excluded(
            route,
            format!(
                "needs {:.2} GiB of device memory, {:.2} GiB usable",
                need / 1073741824.0,
                usable / 1073741824.0
            ),
        );
    }
    let mut terms = Vec::new();
    let launches = if route == Route::GpuOzaki {
        gpu.ozaki_launches.max(1)
    } else {
        1
    };
    terms.push(Term {
        name: "latency",
        seconds: launches as f64 * gpu.launch_s + gpu.sync_s,
        how: format!(
            "{launches} launch(es) × {:.1} µs + sync {:.1} µs (calibrated)",
            gpu.launch_s * 1e6,
            gpu.sync_s * 1e6
        ),
    });
    // The host-side fixed cost (staging buffers, the host pipeline's set-up) is fitted from
    // host-resident timings; a device-resident call does not pay it.
    if let Some(&o) = gpu.route_overhead_s.get(route.name())
        && o > 0.0
        && shape.residency == Residency::Host
    {
        terms.push(Term {
            name: "overhead",
            seconds: o,
            how: "host-side fixed cost per call, from the smallest end-to-end timings".into(),
        });
    }
    let mut xfer = 0.0;
    if shape.residency == Residency::Host {
        let (h2d, d2h) = transfer_bytes(shape);
        let t_h2d = gpu.link.latency_s + h2d / gpu.link.h2d_staged;
        let t_d2h = gpu.link.latency_s + d2h / gpu.link.d2h_staged;
        terms.push(Term {
            name: "h2d",
            seconds: t_h2d,
            how: format!(
                "{:.3} MB at {:.1} GB/s (staged host link)",
                h2d / 1e6,
                gpu.link.h2d_staged / 1e9
            ),
        });
        terms.push(Term {
            name: "d2h",
            seconds: t_d2h,
            how: format!(
                "{:.3} MB at {:.1} GB/s (staged host link)",
                d2h / 1e6,
                gpu.link.d2h_staged / 1e9
            ),
        });
        xfer = t_h2d + t_d2h;
    }
    let compute = match route {
        Route::GpuNative => {
            let t = gpu.fp64.seconds(shape);
            terms.push(Term {
                name: "fp64-gemm",
                seconds: t,
                how: format!(
                    "cuBLAS fp64 work model (sustained {:.1} TFLOP/s on the mnk term)",
                    gpu.fp64.peak_flops() / 1e12
                ),
            });
            t
        }
        _ => {
            let rf = r as f64;
            let conv = inp * (gpu.convert.s_per_elem + rf * gpu.convert.s_per_elem_modulus);
            terms.push(Term {
                name: "convert",
                seconds: conv,
                how: format!(
                    "{:.3} M input elements × ({:.4} ns + {r} moduli × {:.4} ns) for scan, scaling and residues",
                    inp / 1e6,
                    gpu.convert.s_per_elem * 1e9,
                    gpu.convert.s_per_elem_modulus * 1e9
                ),
            });
            // r products share one batched launch: fixed cost once, work terms r times.
            let one = gpu.int8.base_seconds(&shape.work()) - gpu.int8.s_fixed;
            let prod = (rf * one + gpu.int8.s_fixed)
                * gpu.int8.correction.factor(shape.m, shape.n, shape.k);
            terms.push(Term {
                name: "products",
                seconds: prod,
                how: format!(
                    "{r} INT8 GEMMs, INT8 work model (sustained {:.0} TOPS on the mnk term)",
                    gpu.int8.peak_flops() / 1e12
                ),
            });
            let rec = out * (gpu.reconstruct.s_per_elem + rf * gpu.reconstruct.s_per_elem_modulus);
            terms.push(Term {
                name: "reconstruct",
                seconds: rec,
                how: format!(
                    "{:.3} M outputs × ({:.4} ns + {r} moduli × {:.4} ns), fp64 CRT on the GPU",
                    out / 1e6,
                    gpu.reconstruct.s_per_elem * 1e9,
                    gpu.reconstruct.s_per_elem_modulus * 1e9
                ),
            });
            conv + prod + rec
        }
    };
    if xfer > 0.0 && gpu.overlap > 0.0 {
        let credit = gpu.overlap * xfer.min(compute);
        terms.push(Term {
            name: "overlap",
            seconds: -credit,
            how: format!(
                "{:.0}% of min(transfers, compute) hidden by the pipelined streams (calibrated)",
                gpu.overlap * 100.0
            ),
        });
    }
    let seconds = terms.iter().map(|t| t.seconds).sum();
    let storage = match (shape.residency, route) {
        (Residency::Device, Route::GpuNative) => "device",
        (Residency::Host, Route::GpuNative) => "host-staged",
        (Residency::Device, _) => "device+planes",
        (Residency::Host, _) => "host-staged+planes",
    };
    RouteEstimate {
        route,
        seconds,
        terms,
        excluded: None,
        storage,
        recon_host: if route == Route::GpuOzaki {
            "gpu-fp64-crt"
        } else {
            "-"
        },
        moduli: if route == Route::GpuOzaki {
            Some(r)
        } else {
            None
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_known_model_exactly() {
        let truth = WorkModel {
            s_per_mnk: 2.0 / 50e12,
            s_per_mk: 1e-11,
            s_per_mn: 3e-11,
            s_fixed: 8e-6,
            ..WorkModel::default()
        };
        let shapes = [
            (64, 64, 64),
            (1024, 1024, 1024),
            (4096, 64, 4096),
            (110592, 64, 64),
            (2048, 2048, 256),
            (512, 8192, 512),
            (8192, 8192, 8192),
        ];
        let samples: Vec<Sample> = shapes
            .iter()
            .map(|&(m, n, k)| Sample {
                routine: Routine::Dgemm,
                m,
                n,
                k,
                seconds: truth.seconds(&CallShape::gemm(m, n, k)),
            })
            .collect();
        let fit = WorkModel::fit(&samples).unwrap();
        for &(m, n, k) in &[(300, 300, 300), (20000, 128, 128), (16384, 16384, 16384)] {
            let s = CallShape::gemm(m, n, k);
            let (a, b) = (fit.seconds(&s), truth.seconds(&s));
            assert!((a / b - 1.0).abs() < 1e-6, "{m}x{n}x{k}: fit {a} truth {b}");
        }
    }

    /// The device-resident decisions of the built-in H200 profile follow the measured
    /// ratios: cuBLAS for tall-skinny, tiny-C-long-k and k-heavy calls (emulation at 0.03x,
    /// 0.05x and 0.7x of cuBLAS), emulation for large squares (1.5x at 8192^3).
    #[test]
    fn built_in_h200_sends_skinny_and_k_heavy_device_calls_to_cublas_and_squares_to_emulation() {
        let engine =
            crate::engine::choose::Engine::new(Profile::built_in("h200").expect("ships"), 16);
        let device = |m, n, k| {
            engine
                .decide_device(&CallShape::gemm(m, n, k), Some(14))
                .route
        };
        for (m, n, k) in [(110592, 64, 64), (64, 64, 110592), (1024, 1024, 65536)] {
            assert_eq!(device(m, n, k), Route::GpuNative, "{m}x{n}x{k}");
        }
        for s in [8192, 16384] {
            assert_eq!(device(s, s, s), Route::GpuOzaki, "{s}^3");
        }
        assert_eq!(
            device(4096, 4096, 16384),
            Route::GpuOzaki,
            "4096x4096x16384"
        );
    }

    /// A device-resident call takes the device-resident correction where the profile has
    /// one for the route, and the host-resident one otherwise; a host-resident call never
    /// takes the device-resident one. The host-side overhead is a host-resident term.
    #[test]
    fn device_resident_calls_take_their_own_corrections_and_no_host_overhead() {
        let mut p = Profile::built_in("h200").expect("ships");
        let point = |ln_ratio: f64| Correction {
            points: vec![CorrectionPoint {
                m: 2048,
                n: 2048,
                k: 2048,
                ln_ratio,
            }],
        };
        p.corrections.insert("gpu-ozaki".into(), point(0.5));
        p.device_corrections.clear();
        let shape = CallShape::gemm(2048, 2048, 2048);
        let dev = shape.with_residency(Residency::Device);
        let seconds = |p: &Profile, s: &CallShape| predict(p, s, Route::GpuOzaki, Some(14), 1);
        let fallback = seconds(&p, &dev);
        assert!(fallback.terms.iter().all(|t| t.name != "overhead"));
        p.device_corrections.insert("gpu-ozaki".into(), point(-0.5));
        let own = seconds(&p, &dev);
        // e^0.5 against e^-0.5 at the point, less the prior's pull towards 1
        assert!(
            fallback.seconds / own.seconds > 2.5,
            "{} vs {}",
            fallback.seconds,
            own.seconds
        );
        let host = seconds(&p, &shape);
        let end_to_end = host.terms.iter().find(|t| t.name == "end-to-end").unwrap();
        assert!(
            end_to_end.how.contains("host-resident"),
            "{}",
            end_to_end.how
        );
        assert!(end_to_end.seconds > 0.0);
    }

    #[test]
    fn correction_is_exact_at_points_and_fades_far_away() {
        let c = Correction {
            points: vec![CorrectionPoint {
                m: 1024,
                n: 1024,
                k: 1024,
                ln_ratio: 0.5f64.ln(),
            }],
        };
        let at = c.factor(1024, 1024, 1024);
        assert!((at - 0.5).abs() < 0.03, "{at}");
        assert!((c.factor(1 << 20, 1 << 20, 1 << 20) - 1.0).abs() < 1e-9);
    }
}
