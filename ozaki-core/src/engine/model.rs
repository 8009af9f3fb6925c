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
//! [`super::WorkTerms`]), fitted to measured timings by non-negative least squares on relative
//! error ([`WorkModel::fit`]), times a local multiplicative correction interpolated from the
//! fit's residuals at the calibration shapes ([`Correction`]); far from every calibrated shape
//! the correction fades to 1 and the physical terms extrapolate. The same correction, fitted
//! end to end per route, absorbs what the component sum misses (pipelining, cuBLAS kernel
//! family switches: take-away 6).

use super::profile::{GpuProfile, Profile};
pub use super::work_model::{Correction, CorrectionPoint, Sample, WorkModel};
use super::{CallShape, Residency, Routine};
use crate::host_pipeline::{Cut, DEFAULT_CUTS, Stages, pipelined_seconds, registers_operands};
use crate::route::Route;
use serde::Serialize;

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
    /// Seconds of host copies in this estimate: the staged uploads and downloads (what the
    /// vendor's wake stretches, `super::wake`).
    pub fn host_copy_s(&self) -> f64 {
        self.terms
            .iter()
            .filter(|t| matches!(t.name, "h2d" | "d2h"))
            .map(|t| t.seconds)
            .sum()
    }

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

/// Prices `estimates` of a call decided inside the wake: each GPU route's host copies
/// stretched by the slowdown (a `wake` term), as the shim prices a call decided within the
/// window (`ozaki replay` takes the same prices).
pub fn in_wake(estimates: &mut [RouteEstimate], wake: &super::wake::VendorWake) {
    for e in estimates
        .iter_mut()
        .filter(|e| e.route != Route::Vendor && e.excluded.is_none())
    {
        let extra = wake.extra_s(e.host_copy_s());
        if extra > 0.0 {
            e.seconds += extra;
            e.terms.push(Term {
                name: "wake",
                seconds: extra,
                how: format!(
                    "host copies {:.2}x slower beside the vendor's still-busy threads",
                    wake.copy_slowdown
                ),
            });
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
/// ([`super::load::vendor_share`]); the GPU routes are priced alone (the shim adds the
/// wait for the GPU's queue after the cached decision, [`super::load`]).
pub fn predict_loaded(
    profile: &Profile,
    shape: &CallShape,
    route: Route,
    moduli: Option<u32>,
    threads: u32,
    concurrent: u32,
) -> RouteEstimate {
    price(profile, shape, route, moduli, threads, concurrent, true)
}

/// [`predict_loaded`] with the terms' `how` texts only when `detail` (a decision needs the
/// seconds, not the words: formatting them cost more than the arithmetic).
fn price(
    profile: &Profile,
    shape: &CallShape,
    route: Route,
    moduli: Option<u32>,
    threads: u32,
    concurrent: u32,
    detail: bool,
) -> RouteEstimate {
    let mut est = match route {
        Route::Vendor => vendor(profile, shape, threads, concurrent, detail),
        Route::GpuNative | Route::GpuOzaki => match &profile.gpu {
            None => RouteEstimate::excluded(route, "no GPU in this profile".into()),
            Some(gpu) => gpu_route(gpu, shape, route, moduli, detail),
        },
        Route::Builtin | Route::CpuOzaki => {
            RouteEstimate::excluded(route, "not priced by the engine (forced only)".into())
        }
    };
    if est.excluded.is_none()
        && let Some((c, residency)) = end_to_end(profile, shape, route)
    {
        let f = c.factor(shape.m, shape.n, shape.k);
        let f = if uploads_c(shape, route) {
            f.max(1.0)
        } else {
            f
        };
        if (f - 1.0).abs() > 1e-9 {
            est.terms.push(Term {
                name: "end-to-end",
                seconds: est.seconds * (f - 1.0),
                how: how(detail, || {
                    format!(
                        "×{f:.3} from end-to-end {residency} {} timings near this shape",
                        route.name()
                    )
                }),
            });
            est.seconds *= f;
        }
    }
    est
}

/// Whether a host-resident GPU call uploads its C (beta != 0), which the calibration's
/// end-to-end timings never did, so that a correction making it faster than its terms does
/// not carry over to it: `ozaki calibrate` times plain products (beta = 0), whose uploads,
/// products and downloads overlap block by block, and near LU's trailing updates (2048 x
/// 2048 x 64) its gpu-native timings ran 0.68x of their terms. An update must have its C on
/// the GPU before its product: reference LAPACK `dgetrf`'s 3584-3968 x 64 updates, with
/// beta = 1, ran 10-16 ms forced to gpu-native on an H100 host (most of them 10-12 ms),
/// against 10.5-12.4 ms of terms and 7.4-8.7 ms priced with the correction (BENCHMARKS.md,
/// "Real programs under the shim"). Such a call keeps a correction that makes it slower,
/// never one that makes it faster.
fn uploads_c(shape: &CallShape, route: Route) -> bool {
    route != Route::Vendor && shape.residency == Residency::Host && !shape.beta_zero
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
    price_all(profile, shape, moduli, threads, concurrent, true)
}

/// [`predict_all_loaded`], with every term's `how` left empty unless `detail`: a decision
/// needs the seconds, not the words `ozaki explain` shows.
pub fn price_all(
    profile: &Profile,
    shape: &CallShape,
    moduli: Option<u32>,
    threads: u32,
    concurrent: u32,
    detail: bool,
) -> Vec<RouteEstimate> {
    PRICED_ROUTES
        .iter()
        .map(|&r| price(profile, shape, r, moduli, threads, concurrent, detail))
        .collect()
}

/// A term's `how`, made only when the caller wants the words.
fn how(detail: bool, text: impl FnOnce() -> String) -> String {
    if detail { text() } else { String::new() }
}

fn vendor(
    profile: &Profile,
    shape: &CallShape,
    threads: u32,
    concurrent: u32,
    detail: bool,
) -> RouteEstimate {
    let share = super::load::vendor_share(&profile.cpu, threads, concurrent);
    let Some((used, model)) = profile.cpu.model_for(share.model_threads) else {
        return RouteEstimate::excluded(Route::Vendor, "profile has no CPU BLAS timings".into());
    };
    let blas = if shape.no_product() {
        0.0
    } else {
        model.stretched_seconds(shape, share.slowdown)
    };
    let mut terms = vec![
        Term {
            name: "overhead",
            seconds: profile.cpu.call_overhead_s,
            how: how(detail, || {
                "interposer overhead per call (calibrated)".into()
            }),
        },
        Term {
            name: "cpu-blas",
            seconds: blas,
            how: how(detail, || {
                format!(
                    "vendor BLAS work model at {used} threads (sustained {:.0} GFLOP/s on the mnk term), ×{:.2} local correction",
                    model.peak_flops() / 1e9,
                    model.correction.factor(shape.m, shape.n, shape.k)
                )
            }),
        },
    ];
    if concurrent > 1 && detail {
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
    detail: bool,
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
        how: how(detail, || {
            format!(
                "{launches} launch(es) × {:.1} µs + sync {:.1} µs (calibrated)",
                gpu.launch_s * 1e6,
                gpu.sync_s * 1e6
            )
        }),
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
            how: how(detail, || {
                "host-side fixed cost per call, from the smallest end-to-end timings".into()
            }),
        });
    }
    let (mut xfer, mut t_h2d) = (0.0, 0.0);
    if shape.residency == Residency::Host {
        let (h2d, d2h) = transfer_bytes(shape);
        // op(A) and op(B) of a large gemm go straight from the caller's memory when the
        // profile measured page-locking them to pay; C (read when beta != 0) is staged
        let registered = registered_upload(gpu, shape);
        let ab = 8.0 * shape.input_elems();
        t_h2d = gpu.link.latency_s
            + match registered {
                Some(rate) => ab / rate + (h2d - ab) / gpu.link.h2d_staged,
                None => h2d / gpu.link.h2d_staged,
            };
        let t_d2h = gpu.link.latency_s + d2h / gpu.link.d2h_staged;
        terms.push(Term {
            name: "h2d",
            seconds: t_h2d,
            how: how(detail, || match registered {
                Some(rate) => {
                    let mut text = format!(
                        "{:.3} MB of A and B at {:.1} GB/s (page-locked for the call)",
                        ab / 1e6,
                        rate / 1e9
                    );
                    if h2d > ab {
                        text.push_str(&format!(
                            ", {:.3} MB of C at {:.1} GB/s (staged host link)",
                            (h2d - ab) / 1e6,
                            gpu.link.h2d_staged / 1e9
                        ));
                    }
                    text
                }
                None => format!(
                    "{:.3} MB at {:.1} GB/s (staged host link)",
                    h2d / 1e6,
                    gpu.link.h2d_staged / 1e9
                ),
            }),
        });
        terms.push(Term {
            name: "d2h",
            seconds: t_d2h,
            how: how(detail, || {
                format!(
                    "{:.3} MB at {:.1} GB/s (staged host link)",
                    d2h / 1e6,
                    gpu.link.d2h_staged / 1e9
                )
            }),
        });
        xfer = t_h2d + t_d2h;
    }
    let compute = match route {
        Route::GpuNative => {
            let slowdown = super::alignment::slowdown(&gpu.fp64_alignment, shape);
            let t = gpu.fp64.stretched_seconds(shape, slowdown);
            terms.push(Term {
                name: "fp64-gemm",
                seconds: t,
                how: how(detail, || {
                    let mut text = format!(
                        "cuBLAS fp64 work model (sustained {:.1} TFLOP/s on the mnk term)",
                        gpu.fp64.peak_flops() / 1e12
                    );
                    if slowdown != 1.0 {
                        text.push_str(&format!(
                            ", ×{slowdown:.2} where m, n and k are multiples of {} only (calibrated)",
                            super::alignment::class(shape)
                        ));
                    }
                    text
                }),
            });
            t
        }
        _ => {
            let rf = r as f64;
            let conv = inp * (gpu.convert.s_per_elem + rf * gpu.convert.s_per_elem_modulus);
            terms.push(Term {
                name: "convert",
                seconds: conv,
                how: how(detail, || format!(
                    "{:.3} M input elements × ({:.4} ns + {r} moduli × {:.4} ns) for scan, scaling and residues",
                    inp / 1e6,
                    gpu.convert.s_per_elem * 1e9,
                    gpu.convert.s_per_elem_modulus * 1e9
                )),
            });
            // r products share one batched launch: fixed cost once, work terms r times.
            let one = gpu.int8.base_seconds(&shape.work()) - gpu.int8.s_fixed;
            let prod = (rf * one + gpu.int8.s_fixed)
                * gpu.int8.correction.factor(shape.m, shape.n, shape.k);
            terms.push(Term {
                name: "products",
                seconds: prod,
                how: how(detail, || {
                    format!(
                        "{r} INT8 GEMMs, INT8 work model (sustained {:.0} TOPS on the mnk term)",
                        gpu.int8.peak_flops() / 1e12
                    )
                }),
            });
            let rec = out * (gpu.reconstruct.s_per_elem + rf * gpu.reconstruct.s_per_elem_modulus);
            terms.push(Term {
                name: "reconstruct",
                seconds: rec,
                how: how(detail, || {
                    format!(
                        "{:.3} M outputs × ({:.4} ns + {r} moduli × {:.4} ns), fp64 CRT on the GPU",
                        out / 1e6,
                        gpu.reconstruct.s_per_elem * 1e9,
                        gpu.reconstruct.s_per_elem_modulus * 1e9
                    )
                }),
            });
            conv + prod + rec
        }
    };
    let cut = host_cut(shape, route);
    if xfer > 0.0 && cut.blocks > 1 {
        // a pipelined gemm: fill, then the busier of the link and the device, then drain
        let a_share = 8.0 * (shape.m * shape.k) as f64 / transfer_bytes(shape).0.max(1.0);
        let stages = Stages {
            upload_a: t_h2d * a_share,
            upload_rest: t_h2d * (1.0 - a_share),
            download: xfer - t_h2d,
            compute,
        };
        let credit = xfer + compute - pipelined_seconds(&stages, cut);
        terms.push(Term {
            name: "overlap",
            seconds: -credit,
            how: format!(
                "pipelined in {} column blocks x {} row panels: the first panel and block's upload, then the busier of the link ({:.3} ms) and the device ({:.3} ms), then the last unit and block's download",
                cut.blocks,
                cut.panels,
                xfer * 1e3,
                compute * 1e3
            ),
        });
    } else if xfer > 0.0 && gpu.overlap > 0.0 {
        let credit = gpu.overlap * xfer.min(compute);
        terms.push(Term {
            name: "overlap",
            seconds: -credit,
            how: how(detail, || format!(
                "{:.0}% of min(transfers, compute) hidden by the pipelined streams (calibrated)",
                gpu.overlap * 100.0
            )),
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

/// The upload rate of op(A) and op(B) when the host path page-locks them for this call
/// (`crate::host_pipeline::registers_operands`: a large host-resident dgemm, on a profile
/// that measured registration faster than staging), else `None`.
fn registered_upload(gpu: &GpuProfile, shape: &CallShape) -> Option<f64> {
    let (m, n, k) = host_dims(shape);
    (shape.residency == Residency::Host
        && shape.routine == Routine::Dgemm
        && gpu.link.registers()
        && registers_operands(m, n, k))
    .then_some(gpu.link.h2d_registered)
}

/// A call's dimensions as the host path's cut arithmetic takes them (too large for `usize`:
/// large enough for any cut).
fn host_dims(shape: &CallShape) -> (usize, usize, usize) {
    let dim = |x: u64| usize::try_from(x).unwrap_or(usize::MAX / 64);
    (dim(shape.m), dim(shape.n), dim(shape.k))
}

/// How the GPU host path cuts a host-resident call of `route` under its default tuning
/// (`crate::host_pipeline`): dgemm only; a dsyrk, a device-resident call or another route is
/// one piece.
fn host_cut(shape: &CallShape, route: Route) -> Cut {
    let rule = match route {
        Route::GpuNative => DEFAULT_CUTS.0,
        Route::GpuOzaki => DEFAULT_CUTS.1,
        _ => {
            return Cut {
                blocks: 1,
                panels: 1,
            };
        }
    };
    if shape.residency != Residency::Host || shape.routine != Routine::Dgemm {
        return Cut {
            blocks: 1,
            panels: 1,
        };
    }
    let (m, n, k) = host_dims(shape);
    Cut::of(m, n, k, &rule)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Odd sizes go to the emulation where cuBLAS's measured slowdown there outweighs its
    /// margin: on an H100 cuBLAS ran 4095³ at 39.1 TF/s against 56.0 at 4096³, while the
    /// emulation, padding its int8 products, ran both in the same time (1.44x and 1.00x
    /// cuBLAS). Without the measurement the engine prices 4095³ as 4096³ and keeps cuBLAS.
    #[test]
    fn odd_device_calls_go_to_the_emulation_once_cublas_slowdown_there_is_measured() {
        let decide = |p: Profile, n: u64| {
            crate::engine::choose::Engine::new(p, 16)
                .decide_device(&CallShape::gemm(n, n, n), Some(14))
                .route
        };
        let mut p = Profile::built_in("h100").expect("ships");
        assert_eq!(
            decide(p.clone(), 4095),
            Route::GpuOzaki,
            "the shipped H100 profile"
        );
        p.gpu.as_mut().expect("a GPU").fp64_alignment.clear();
        assert_eq!(decide(p.clone(), 4095), Route::GpuNative);
        p.gpu.as_mut().expect("a GPU").fp64_alignment = vec![
            crate::engine::alignment::AlignmentSlowdown {
                align: 1,
                slowdown: 56.0 / 39.1,
            },
            crate::engine::alignment::AlignmentSlowdown {
                align: 4,
                slowdown: 56.0 / 51.9,
            },
        ];
        assert_eq!(decide(p.clone(), 4095), Route::GpuOzaki);
        assert_eq!(decide(p.clone(), 4096), Route::GpuNative);
        let explained = predict(
            &p,
            &CallShape::gemm(4095, 4095, 4095).with_residency(Residency::Device),
            Route::GpuNative,
            None,
            1,
        );
        let gemm = explained
            .terms
            .iter()
            .find(|t| t.name == "fp64-gemm")
            .unwrap();
        assert!(gemm.how.contains("multiples of 1 only"), "{}", gemm.how);
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

    /// A large host-resident gemm is priced as the host path pipelines it: the steps' sum
    /// less the overlap equals `host_pipeline::pipelined_seconds` of its cut (so a route with
    /// less compute wins by that compute when the device is the bottleneck, and by its fill
    /// and drain when the link is); a call too small to be pipelined keeps the calibrated
    /// overlap fraction.
    #[test]
    fn large_host_resident_gemms_are_priced_as_pipelined() {
        let p = Profile::built_in("h200").expect("ships");
        let gpu = p.gpu.as_ref().expect("a GPU");
        let term = |e: &RouteEstimate, name: &str| {
            e.terms
                .iter()
                .filter(|t| t.name == name)
                .map(|t| t.seconds)
                .sum::<f64>()
        };
        for (s, route) in [
            (16384u64, Route::GpuNative),
            (16384, Route::GpuOzaki),
            (8192, Route::GpuNative),
        ] {
            let shape = CallShape::gemm(s, s, s);
            let e = gpu_route(gpu, &shape, route, Some(14), true);
            let compute = ["fp64-gemm", "convert", "products", "reconstruct"]
                .iter()
                .map(|n| term(&e, n))
                .sum::<f64>();
            let (h2d, d2h) = (term(&e, "h2d"), term(&e, "d2h"));
            let cut = host_cut(&shape, route);
            assert!(cut.blocks > 1, "{s} {route:?} is pipelined");
            let want = pipelined_seconds(
                &Stages {
                    upload_a: h2d / 2.0,
                    upload_rest: h2d / 2.0,
                    download: d2h,
                    compute,
                },
                cut,
            );
            let got = h2d + d2h + compute + term(&e, "overlap");
            assert!(
                (got - want).abs() < 1e-9 * want,
                "{s} {route:?}: {got} vs {want}"
            );
            assert!(got >= (h2d + d2h).max(compute) && got < h2d + d2h + compute);
        }
        let small = CallShape::gemm(1024, 1024, 1024);
        let e = gpu_route(gpu, &small, Route::GpuNative, None, true);
        let (xfer, compute) = (term(&e, "h2d") + term(&e, "d2h"), term(&e, "fp64-gemm"));
        let credit = -term(&e, "overlap");
        assert!((credit - gpu.overlap * xfer.min(compute)).abs() < 1e-15);
        // the device-resident call pays no link and no overlap
        let dev = gpu_route(gpu, &shape_on_device(16384), Route::GpuNative, None, true);
        assert_eq!(term(&dev, "overlap"), 0.0);
    }

    /// A profile that measured page-locked uploads faster than staged ones prices op(A) and
    /// op(B) of a large host-resident dgemm at the page-locked rate (C, read when beta != 0,
    /// stays staged); small calls, dsyrk, device-resident calls and a profile whose
    /// page-locking was slower (or not measured) keep the staged link.
    #[test]
    fn page_locked_uploads_are_priced_for_large_host_resident_gemms_only() {
        let mut p = Profile::built_in("h200").expect("ships");
        let h2d = |p: &Profile, s: &CallShape| {
            let gpu = p.gpu.as_ref().unwrap();
            let e = gpu_route(gpu, s, Route::GpuNative, None, true);
            term_s(&e, "h2d")
        };
        let big = CallShape::gemm(16384, 16384, 16384);
        let small = CallShape::gemm(1024, 1024, 1024);
        let syrk = CallShape {
            routine: Routine::Dsyrk,
            ..big
        };
        let with_c = CallShape {
            beta_zero: false,
            ..big
        };
        let staged: Vec<Option<f64>> = [&big, &small, &syrk, &with_c]
            .iter()
            .map(|s| h2d(&p, s))
            .collect();
        let link = p.gpu.as_ref().unwrap().link.clone();
        assert!(!link.registers(), "the built-in profile does not page-lock");
        p.gpu.as_mut().unwrap().link.h2d_registered = 2.0 * link.h2d_staged;
        assert!(p.gpu.as_ref().unwrap().link.registers());
        let ab = 8.0 * big.input_elems();
        let c = 8.0 * big.output_elems();
        let want = link.latency_s + ab / (2.0 * link.h2d_staged);
        assert!((h2d(&p, &big).unwrap() - want).abs() < 1e-12 * want);
        let want_c = want + c / link.h2d_staged;
        assert!((h2d(&p, &with_c).unwrap() - want_c).abs() < 1e-12 * want_c);
        assert_eq!(h2d(&p, &small), staged[1]);
        assert_eq!(h2d(&p, &syrk), staged[2]);
        assert_eq!(h2d(&p, &shape_on_device(16384)), None);
        let how = &gpu_route(p.gpu.as_ref().unwrap(), &big, Route::GpuNative, None, true).terms;
        assert!(how.iter().any(|t| t.how.contains("page-locked")), "{how:?}");
        p.gpu.as_mut().unwrap().link.h2d_registered = 0.5 * link.h2d_staged;
        assert_eq!(h2d(&p, &big), staged[0]);
    }

    /// LU's trailing update, a 4032 x 4032 block of C with `ldc = 4096` updated with k = 64:
    /// the GPU routes copy C's rows straight between the caller's memory and pinned staging,
    /// so a C with gaps costs them what a contiguous C costs: one staged copy of C each way
    /// (up when beta != 0, down always), in the `h2d` and `d2h` terms, and nothing else.
    #[test]
    fn a_c_with_gaps_costs_the_gpu_routes_what_a_contiguous_c_costs() {
        let p = Profile::built_in("h200").expect("ships");
        let update = lu_update(4032);
        let contiguous = CallShape {
            c_gaps: false,
            ..update
        };
        let link = p.gpu.as_ref().unwrap().link.clone();
        let c = 8.0 * 4032.0 * 4032.0;
        let term = |e: &RouteEstimate, name: &str| term_s(e, name).expect("priced");
        for r in [Route::GpuNative, Route::GpuOzaki] {
            for beta_zero in [false, true] {
                let gaps = CallShape {
                    beta_zero,
                    ..update
                };
                let flat = CallShape {
                    beta_zero,
                    ..contiguous
                };
                let (with, without) = (
                    predict_loaded(&p, &gaps, r, Some(14), 16, 1),
                    predict_loaded(&p, &flat, r, Some(14), 16, 1),
                );
                assert_eq!(with.seconds, without.seconds, "{r} beta_zero {beta_zero}");
                let names = |e: &RouteEstimate| e.terms.iter().map(|t| t.name).collect::<Vec<_>>();
                assert_eq!(names(&with), names(&without));
                let up_c = term(&with, "h2d")
                    - term(
                        &predict_loaded(
                            &p,
                            &CallShape {
                                beta_zero: true,
                                ..gaps
                            },
                            r,
                            Some(14),
                            16,
                            1,
                        ),
                        "h2d",
                    );
                let want_up = if beta_zero { 0.0 } else { c / link.h2d_staged };
                assert!((up_c - want_up).abs() < 1e-12, "{r}: C up {up_c}");
                let down = term(&with, "d2h") - link.latency_s;
                assert!(
                    (down - c / link.d2h_staged).abs() < 1e-12,
                    "{r}: C down {down}"
                );
            }
        }
    }

    /// LU's trailing update uploads its C (beta = 1): the built-in profile's correction
    /// near its shape, fitted on plain products that upload none, would price it 0.7x of its
    /// terms, and it ran at its terms. It keeps a correction only where that makes it slower;
    /// the same product with beta = 0 still takes the correction, and the vendor's price is
    /// not touched.
    #[test]
    fn a_call_uploading_its_c_is_never_priced_faster_than_its_terms() {
        let p = Profile::built_in("h200").expect("ships");
        let update = lu_update(3584);
        let plain = CallShape {
            beta_zero: true,
            ..update
        };
        let correction = |e: &RouteEstimate| term_s(e, "end-to-end").unwrap_or(0.0);
        for r in [Route::GpuNative, Route::GpuOzaki] {
            let (u, q) = (
                predict_loaded(&p, &update, r, Some(14), 16, 1),
                predict_loaded(&p, &plain, r, Some(14), 16, 1),
            );
            assert!(
                correction(&q) < 0.0,
                "{r}: the plain product is corrected faster"
            );
            assert!(correction(&u) >= 0.0, "{r}: {:?}", u.terms);
            let terms: f64 = u.terms.iter().map(|t| t.seconds).sum();
            assert!(
                (u.seconds - terms).abs() < 1e-12,
                "{r}: {} against {terms}",
                u.seconds
            );
        }
        let v = |s: &CallShape| predict_loaded(&p, s, Route::Vendor, None, 16, 1);
        assert_eq!(correction(&v(&update)), correction(&v(&plain)));
    }

    /// Seconds of the term `name` of `e`, if it has one.
    fn term_s(e: &RouteEstimate, name: &str) -> Option<f64> {
        e.terms.iter().find(|t| t.name == name).map(|t| t.seconds)
    }

    /// Reference LAPACK LU's trailing update of order `n`: C -= A B with k = 64 (beta != 0)
    /// on a block of a larger array (`ldc` > m).
    fn lu_update(n: u64) -> CallShape {
        CallShape {
            beta_zero: false,
            c_gaps: true,
            ..CallShape::gemm(n, n, 64)
        }
    }

    fn shape_on_device(s: u64) -> CallShape {
        CallShape::gemm(s, s, s).with_residency(Residency::Device)
    }
}
