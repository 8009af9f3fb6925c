//! The paper's reduced model (Ozaki 2.5, Alg. 4 `rate_rec` with ComputeRate; brief §5.3),
//! evaluated on a [`Platform`]. It prices device-resident data with datasheet constants, so
//! it is for what-if projections and for checking that our transcription reproduces the
//! paper's tables (tests in `ozaki-core/tests/engine_paper.rs`); the shim's own choice uses
//! the measured model in [`super::model`].

use super::CallShape;
use super::platforms::{PaperRoute, Platform};
use crate::trace::Routine;

/// Options of ComputeRate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateOptions {
    /// Leave out the Garner term N_γ/(2k) (the P_dec-only columns of Tables 3 and 10).
    pub no_garner: bool,
    /// Return the roof (the co-design column of Table 11).
    pub codesign: bool,
}

/// ComputeRate(ν, λ) of Alg. 4 (Eqs. 14/16 plus the SIMT-Garner term): useful FLOP/s.
pub fn compute_rate(
    pl: &Platform,
    rt: &PaperRoute,
    m: f64,
    n: f64,
    k: f64,
    lambda: f64,
    opt: RateOptions,
) -> f64 {
    let roof = pl.p_low / rt.alpha();
    if opt.codesign {
        return roof;
    }
    let nbar = 2.0 * m * n / (m + n);
    let r = rt.r as f64;
    let sigma = lambda * rt.c_res * r / nbar
        + if opt.no_garner {
            0.0
        } else {
            rt.n_gamma() / (2.0 * k)
        };
    let delta = lambda * rt.a_int8 / nbar;
    let simt = if sigma > 0.0 {
        pl.i_simt / sigma
    } else {
        f64::INFINITY
    };
    let int8 = if delta > 0.0 {
        (pl.p_i8tc / 2.0) / delta
    } else {
        f64::INFINITY
    };
    roof.min(simt).min(int8)
}

/// P_dec at a square n̄ with k → ∞ and λ = 1 (Tables 3 and 10).
pub fn p_dec(pl: &Platform, rt: &PaperRoute, nbar: f64) -> f64 {
    compute_rate(
        pl,
        rt,
        nbar,
        nbar,
        f64::INFINITY,
        1.0,
        RateOptions {
            no_garner: true,
            codesign: false,
        },
    )
}

/// The knee n* of Eq. 16: where the conversion stops binding.
pub fn knee(pl: &Platform, rt: &PaperRoute) -> f64 {
    let roof = pl.p_low / rt.alpha();
    let simt = rt.c_res * rt.r as f64 * roof / pl.i_simt;
    let int8 = rt.a_int8 * roof / (pl.p_i8tc / 2.0);
    simt.max(int8)
}

/// λ_eff = (m·⌈n/R⌉ + n·⌈m/R⌉)/(m+n) (params.py `_lam_eff`).
pub fn lambda_eff(m: f64, n: f64, reach: f64) -> f64 {
    let (la, lb) = ((n / reach).ceil(), (m / reach).ceil());
    (m * la + n * lb) / (m + n)
}

/// The storage schedule Alg. 4 picked for one record and route, with its audit fields
/// (brief §5.4).
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Useful FLOP/s.
    pub rate: f64,
    /// Storage-mode tag: grid-fused-nosplit, splitk, on-the-fly, hybrid-L2, mat-L2, mat-HBM.
    pub tag: &'static str,
    /// Native reference bytes 8{k(m+n) + mn}.
    pub q0: f64,
    /// Plane bytes of the chosen mode (0 unless materialised in HBM).
    pub q_plane: f64,
    /// Split-k residue partial bytes.
    pub q_red: f64,
}

/// Alg. 4 Select-Schedule(π, ν, m, n, k): the best storage schedule of route `rt` (the
/// first added wins a tie, as in "return max P with its tag").
pub fn select_schedule(
    pl: &Platform,
    rt: &PaperRoute,
    shape: &CallShape,
    opt: RateOptions,
) -> Schedule {
    let all = schedules(pl, rt, shape, opt);
    let mut best = all[0].clone();
    for s in &all[1..] {
        if s.rate > best.rate {
            best = s.clone();
        }
    }
    best
}

/// Every eligible storage schedule Alg. 4 adds for this record, in its order (the audit view:
/// e.g. the mat-HBM cap of a record that does not take mat-HBM).
pub fn schedules(
    pl: &Platform,
    rt: &PaperRoute,
    shape: &CallShape,
    opt: RateOptions,
) -> Vec<Schedule> {
    let (m, n, k) = (shape.m as f64, shape.n as f64, shape.k as f64);
    let r = rt.r as f64;
    let p = rt.p_store;
    // syrk: W ← mnk, one operand, mn terms halved (Alg. 4 line 2).
    let (w, n_uniq, mn) = match shape.routine {
        Routine::Dgemm => (2.0 * m * n * k, k * (m + n), m * n),
        Routine::Dsyrk => (m * n * k, k * n, m * n / 2.0),
    };
    let q0 = 8.0 * (n_uniq + mn);
    let s_k = (k / pl.k_slab).ceil().max(1.0);
    let q_red = 8.0 * r * mn * (s_k - 1.0);
    let (t_m, t_n) = ((m / pl.tile).ceil(), (n / pl.tile).ceil());
    let b = pl.b_mem;
    let lam = |z: f64, phi: f64| z / w + phi.max(z / w);
    let mut all = Vec::with_capacity(3);
    let mut add = |rate: f64, tag: &'static str, q_plane: f64| {
        all.push(Schedule {
            rate,
            tag,
            q0,
            q_plane,
            q_red,
        })
    };
    if t_m * t_n <= pl.cluster_ctas {
        let rho = compute_rate(pl, rt, m, n, k, 1.0, opt);
        if s_k == 1.0 {
            add(rho.min(b * w / q0), "grid-fused-nosplit", 0.0);
        } else if 4.0 * r * mn > pl.c_l2 {
            add(rho.min(b * w / (q0 + q_red)), "splitk", 0.0);
        } else {
            add(rho.min(b * w / q0).min(pl.b_l2 * w / q_red), "splitk", 0.0);
        }
    } else {
        let (la, lb) = ((n / pl.reach).ceil(), (m / pl.reach).ceil());
        let lam_eff = (m * la + n * lb) / (m + n);
        let rho_l = compute_rate(pl, rt, m, n, k, lam_eff, opt);
        let rho_1 = compute_rate(pl, rt, m, n, k, 1.0, opt);
        let q_re = 8.0 * (m * k * (la - 1.0) + k * n * (lb - 1.0));
        add(rho_l.min(b * w / (q0 + q_red + q_re)), "on-the-fly", 0.0);
        let small = p * k * m.min(n);
        if small <= pl.c_l2 {
            add(
                rho_l
                    .min(b * w / (q0 + q_red))
                    .min(pl.b_l2 / lam(small, p / (2.0 * pl.tile))),
                "hybrid-L2",
                0.0,
            );
        }
        if p * n_uniq <= pl.c_l2 {
            add(
                rho_1
                    .min(b * w / (q0 + q_red))
                    .min(pl.b_l2 / lam(p * n_uniq, p / pl.tile)),
                "mat-L2",
                0.0,
            );
        } else {
            let q_plane = q_red + 2.0 * p * n_uniq;
            add(
                rho_1.min(b * w / (q0 + q_plane)).min(b * pl.tile / p),
                "mat-HBM",
                q_plane,
            );
        }
    }
    all
}

/// One record priced on a platform: the schedule of every route and the switched choice.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordRates {
    /// (route name, schedule) in menu order.
    pub routes: Vec<(&'static str, Schedule)>,
    /// Index of the fastest non-baseline route (the switched envelope, `env_rec`).
    pub best: usize,
}

/// `s0_rec`: the shipping baseline, a convert-once multi-kernel pipeline (λ = 1, no plane
/// feed cap), capped by the record's memory roof B·W/(Q0 + Q_red) and carrying the same
/// Garner tax (brief §5.5 item 2, "like-for-like").
pub fn baseline_schedule(
    pl: &Platform,
    rt: &PaperRoute,
    shape: &CallShape,
    opt: RateOptions,
) -> Schedule {
    let (m, n, k) = (shape.m as f64, shape.n as f64, shape.k as f64);
    let (w, n_uniq, mn) = match shape.routine {
        Routine::Dgemm => (2.0 * m * n * k, k * (m + n), m * n),
        Routine::Dsyrk => (m * n * k, k * n, m * n / 2.0),
    };
    let q0 = 8.0 * (n_uniq + mn);
    let q_red = 8.0 * rt.r as f64 * mn * ((k / pl.k_slab).ceil().max(1.0) - 1.0);
    let rate = compute_rate(pl, rt, m, n, k, 1.0, opt).min(pl.b_mem * w / (q0 + q_red));
    Schedule {
        rate,
        tag: "convert-once",
        q0,
        q_plane: 0.0,
        q_red,
    }
}

/// Prices `shape` on every route of the platform's menu: the baseline by
/// [`baseline_schedule`], the others by Alg. 4; `best` is the switched dispatch (`env_rec`),
/// the fastest route other than the baseline.
pub fn rate_record(pl: &Platform, shape: &CallShape, opt: RateOptions) -> RecordRates {
    let routes: Vec<(&'static str, Schedule)> = pl
        .routes
        .iter()
        .map(|rt| {
            (
                rt.name,
                if rt.name == pl.baseline {
                    baseline_schedule(pl, rt, shape, opt)
                } else {
                    select_schedule(pl, rt, shape, opt)
                },
            )
        })
        .collect();
    let mut best: Option<usize> = None;
    for (i, (name, s)) in routes.iter().enumerate() {
        if *name != pl.baseline && best.is_none_or(|b| s.rate > routes[b].1.rate) {
            best = Some(i);
        }
    }
    RecordRates {
        best: best.unwrap_or(0),
        routes,
    }
}

/// Reconstruction tax of Eq. 11, T_γ/T_mma = (N_γ/2)·P_emu/(k·P_host).
pub fn garner_tax(rt: &PaperRoute, p_emu: f64, k: f64, p_host: f64) -> f64 {
    rt.n_gamma() / 2.0 * p_emu / (k * p_host)
}
