//! The `cpu-ozaki` route: Ozaki scheme II emulation on the CPU, a thin adapter
//! over [`ozaki_core::emulate`], which holds the numerics and their documentation.
//!
//! - `OZAKI_MODULI=N` forces the moduli count (`2..=20`; other values fall back with the
//!   reason "invalid moduli count"); otherwise it is chosen per call by the accuracy rule
//!   ([`ozaki_core::rule`], `OZAKI_ACCURACY`), right after the scan.
//! - `OZAKI_SCALING=fast|norm|accurate` picks the scaling bound (`ozaki_core::scaling`;
//!   default norm, whose shifts depend on each line alone).
//! - `OZAKI_THREADS=N` sets the worker threads; without it the vendor BLAS's own limit is
//!   used ([`super::threads`]), so one-thread MPI ranks do not oversubscribe the node.
//! - Every [`Fallback`] (NaN/Inf, exponent range, accuracy target unreachable, guaranteed
//!   bound unreachable, spread not coverable) becomes a [`RouteError`], so the vendor BLAS computes the call from the
//!   untouched C and the trace's `fallback` field carries the reason;
//!   [`ozaki_core::emulate`] writes C only once every entry is computed.
//! - The caller's floating-point exception flags survive the emulation's internal work
//!   (`fp_flags`); only the final `C = alpha ĉ + beta C` can raise flags, as the vendor's
//!   arithmetic on the result would.
//! - The trace record's `moduli` is the count used; `phases` splits the CPU time into
//!   conversion (scan, coarse product, choice, quantisation), residue products and
//!   reconstruction (incl. the alpha/beta write-back).

use super::{RouteError, RouteOutcome};
use crate::config::Config;
use ozaki_core::blas::{GemmArgs, SyrkArgs};
use ozaki_core::emulate::{self, EmulationConfig, EmulationInfo, Fallback, Moduli, ScalingMode};
use ozaki_core::trace::Phases;

fn emulation_config(config: &Config) -> EmulationConfig {
    let moduli = match config.moduli {
        Some(n) => Moduli::Fixed(n as usize),
        None => Moduli::Auto,
    };
    let threads = super::threads::count(config.threads);
    tracing::debug!(threads, "cpu-ozaki worker threads");
    EmulationConfig {
        moduli,
        scaling: config.scaling.unwrap_or(ScalingMode::Norm),
        accuracy: config.accuracy,
        threads,
        ..EmulationConfig::default()
    }
}

fn outcome(info: &EmulationInfo, cfg: &EmulationConfig) -> RouteOutcome {
    let ns = |names: &[&str]| -> u64 {
        let s: f64 = info
            .phases
            .iter()
            .filter(|(p, _)| names.contains(p))
            .map(|(_, s)| s)
            .sum();
        (s * 1e9) as u64
    };
    RouteOutcome {
        moduli: (info.moduli > 0).then_some(info.moduli as u32),
        scaling: (info.moduli > 0).then_some(cfg.scaling.name()),
        device: None,
        devices: None,
        phases: (!info.phases.is_empty()).then(|| Phases {
            convert_ns: ns(&["scan", "coarse", "select", "quantize"]),
            products_ns: ns(&["products"]),
            reconstruct_ns: ns(&["reconstruct", "write"]),
            ..Phases::default()
        }),
    }
}

fn route_error(f: Fallback) -> RouteError {
    tracing::debug!(reason = %f, "cpu-ozaki falls back");
    match f {
        Fallback::NonFinite | Fallback::ExponentRange => RouteError::NonFinite,
        other => RouteError::Failed(other.to_string()),
    }
}

/// Runs an emulation's internal work with the caller's floating-point flags kept as they
/// were (the scaling's under- and overflows are not the caller's; see `fp_flags`), then
/// the write-back, whose arithmetic is the reference BLAS's and raises what it raises.
fn emulated(
    product: impl FnOnce(&EmulationConfig) -> Result<emulate::Product, Fallback>,
    c: &mut [f64],
    ldc: usize,
    config: &Config,
) -> Result<RouteOutcome, RouteError> {
    let cfg = emulation_config(config);
    let product = {
        let _flags = fp_flags::KeepFpFlags::new();
        product(&cfg)
    };
    let info = product.map_err(route_error)?.write(c, ldc);
    Ok(outcome(&info, &cfg))
}

/// C = alpha op(A) op(B) + beta C by Ozaki-II on the CPU.
///
/// # Errors
/// [`RouteError::NonFinite`] for NaN/Inf (in A, B, alpha or beta) or an exponent range that
/// could overflow; [`RouteError::Failed`] when the moduli cannot reach the accuracy target
/// or the forced count is invalid or cannot cover the inputs. C is untouched on every
/// error, and the floating-point flags are the caller's.
pub fn gemm(
    args: &GemmArgs<'_>,
    c: &mut [f64],
    config: &Config,
) -> Result<RouteOutcome, RouteError> {
    emulated(|cfg| emulate::gemm_product(args, cfg), c, args.ldc, config)
}

/// C = alpha A A^T + beta C (one triangle) by Ozaki-II on the CPU.
///
/// # Errors
/// As [`gemm`].
pub fn syrk(
    args: &SyrkArgs<'_>,
    c: &mut [f64],
    config: &Config,
) -> Result<RouteOutcome, RouteError> {
    emulated(|cfg| emulate::syrk_product(args, cfg), c, args.ldc, config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;
    use ozaki_core::blas::Trans;
    use ozaki_core::route::Route;

    fn config(moduli: Option<&str>) -> Config {
        let raw = RawConfig {
            route: Some("cpu-ozaki".into()),
            moduli: moduli.map(Into::into),
            ..RawConfig::default()
        };
        Config::from_raw(&raw).0
    }

    fn args<'a>(a: &'a [f64], b: &'a [f64]) -> GemmArgs<'a> {
        GemmArgs {
            transa: Trans::No,
            transb: Trans::No,
            m: 2,
            n: 2,
            k: 2,
            alpha: 1.0,
            a,
            lda: 2,
            b,
            ldb: 2,
            beta: 0.0,
            ldc: 2,
        }
    }

    #[test]
    fn computes_reports_moduli_and_honours_ozaki_moduli() {
        let (a, b) = ([1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 2.0, 0.25]);
        let mut c = [0.0; 4];
        let auto = gemm(&args(&a, &b), &mut c, &config(None)).unwrap();
        assert_eq!(c, [-2.5, -3.0, 2.75, 5.0]);
        assert!(auto.moduli.is_some_and(|r| (2..=20).contains(&r)));
        assert!(auto.phases.is_some() && auto.device.is_none());
        let forced = gemm(&args(&a, &b), &mut c, &config(Some("17"))).unwrap();
        assert_eq!(forced.moduli, Some(17));
        assert_eq!(c, [-2.5, -3.0, 2.75, 5.0]);
        // the trace's `scaling`: norm by default, OZAKI_SCALING otherwise
        assert_eq!(auto.scaling, Some("norm"));
        let raw = RawConfig {
            route: Some("cpu-ozaki".into()),
            scaling: Some("accurate".into()),
            ..RawConfig::default()
        };
        let accurate = gemm(&args(&a, &b), &mut c, &Config::from_raw(&raw).0).unwrap();
        assert_eq!(
            (accurate.scaling, c),
            (Some("accurate"), [-2.5, -3.0, 2.75, 5.0])
        );
    }

    #[test]
    fn fallbacks_carry_a_reason_and_leave_c_alone() {
        let (a, b) = ([1.0, f64::NAN, 3.0, 4.0], [0.5, -1.0, 2.0, 0.25]);
        let mut c = [9.0; 4];
        let err = gemm(&args(&a, &b), &mut c, &config(None)).unwrap_err();
        assert_eq!(err, RouteError::NonFinite);
        assert_eq!(c, [9.0; 4]);
        let a = [1.0, 2.0, 3.0, 4.0];
        // OZAKI_MODULI itself rejects 40; a count that gets past it still falls back.
        let mut forced = config(None);
        forced.moduli = Some(40);
        let err = gemm(&args(&a, &b), &mut c, &forced).unwrap_err();
        assert!(
            err.reason(Route::CpuOzaki).contains("invalid moduli count"),
            "{}",
            err.reason(Route::CpuOzaki)
        );
        assert_eq!(c, [9.0; 4]);
    }

    #[test]
    fn the_callers_fp_flags_survive_the_internal_scaling_but_not_a_real_overflow() {
        // Every line of A spans 2^-1003 .. 2^6 (scaled by its maximum and squared for its
        // norm, the small entries underflow); B in [1, 2): no product under- or overflows.
        let (m, n, k) = (4, 3, 8);
        let a: Vec<f64> = (0..m * k)
            .map(|t| {
                let (i, l) = (t % m, t / m);
                let x = 1.0 + (i + 2 * l) as f64 / 32.0;
                if l % 2 == 0 {
                    x * (-1003.0f64).exp2()
                } else {
                    -x * 64.0
                }
            })
            .collect();
        let b: Vec<f64> = (0..k * n).map(|t| 1.0 + t as f64 / 64.0).collect();
        let mut args = GemmArgs {
            m,
            n,
            k,
            lda: m,
            ldb: k,
            ldc: m,
            ..args(&a, &b)
        };
        let mut c = vec![0.0; m * n];
        // The accuracy rule declines such lines (their small entries cannot keep fp64
        // accuracy); a forced count runs the scaling whose flags are under test.
        let forced = config(Some("20"));
        fp_flags::clear();
        gemm(&args, &mut c, &forced).unwrap();
        assert_eq!(
            fp_flags::raised() & !fp_flags::INEXACT,
            0,
            "flags of the scaling leaked"
        );
        // alpha = 2^1020 makes the result overflow, as it would in the vendor's loop.
        args.alpha = 1020.0f64.exp2();
        fp_flags::clear();
        gemm(&args, &mut c, &forced).unwrap();
        assert!(c.iter().all(|x| x.is_infinite()));
        assert_ne!(fp_flags::raised() & fp_flags::OVERFLOW, 0);
    }

    #[test]
    fn infinite_alpha_goes_to_the_vendor() {
        let (a, b) = ([1.0, 0.0, 3.0, 4.0], [0.5, 0.0, 2.0, 0.25]);
        for alpha in [f64::INFINITY, f64::NEG_INFINITY] {
            let mut c = [9.0; 4];
            let err = gemm(
                &GemmArgs {
                    alpha,
                    ..args(&a, &b)
                },
                &mut c,
                &config(None),
            )
            .unwrap_err();
            assert_eq!(err, RouteError::NonFinite);
            assert_eq!(c, [9.0; 4]);
        }
    }
}
