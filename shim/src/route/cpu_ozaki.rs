//! The `cpu-ozaki` route: Ozaki scheme II emulation on the CPU (issue #3), a thin adapter
//! over [`ozaki_core::emulate`], which holds the numerics and their documentation.
//!
//! - `OZAKI_MODULI=N` forces the moduli count (`2..=20`; other values fall back with the
//!   reason "invalid moduli count"); otherwise it is chosen per call
//!   ([`ozaki_core::select`]: no worse than native fp64).
//! - `OZAKI_SCALING=fast|norm|accurate` picks the scaling bound (`ozaki_core::scaling`;
//!   default accurate).
//! - `OZAKI_THREADS=N` sets the worker threads; without it the vendor BLAS's own limit is
//!   used ([`super::threads`]), so one-thread MPI ranks do not oversubscribe the node.
//! - Every [`Fallback`] (NaN/Inf, exponent range, accuracy target unreachable, spread not
//!   coverable) becomes a [`RouteError`], so the vendor BLAS computes the call from the
//!   untouched C and the trace's `fallback` field carries the reason;
//!   [`ozaki_core::emulate`] writes C only once every entry is computed.
//! - The trace record's `moduli` is the count used; `phases` splits the CPU time into
//!   conversion (scan, coarse product, choice, quantisation), residue products and
//!   reconstruction (incl. the alpha/beta write-back).

use super::{RouteError, RouteOutcome};
use crate::config::Config;
use ozaki_core::blas::{GemmArgs, SyrkArgs};
use ozaki_core::emulate::{self, EmulationConfig, EmulationInfo, Fallback, Moduli};
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
        scaling: config.scaling.unwrap_or_default(),
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
            transfer_ns: 0,
            convert_ns: ns(&["scan", "coarse", "select", "quantize"]),
            products_ns: ns(&["products"]),
            reconstruct_ns: ns(&["reconstruct", "write"]),
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

/// C = alpha op(A) op(B) + beta C by Ozaki-II on the CPU.
///
/// # Errors
/// [`RouteError::NonFinite`] for NaN/Inf or an exponent range that could overflow;
/// [`RouteError::Failed`] when the moduli cannot reach the accuracy target or the forced
/// count is invalid or cannot cover the inputs. C is untouched on every error.
pub fn gemm(
    args: &GemmArgs<'_>,
    c: &mut [f64],
    config: &Config,
) -> Result<RouteOutcome, RouteError> {
    let cfg = emulation_config(config);
    emulate::gemm(args, c, &cfg)
        .map(|i| outcome(&i, &cfg))
        .map_err(route_error)
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
    let cfg = emulation_config(config);
    emulate::syrk(args, c, &cfg)
        .map(|i| outcome(&i, &cfg))
        .map_err(route_error)
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
        // the trace's `scaling`: accurate by default, OZAKI_SCALING otherwise
        assert_eq!(auto.scaling, Some("accurate"));
        let raw = RawConfig {
            route: Some("cpu-ozaki".into()),
            scaling: Some("norm".into()),
            ..RawConfig::default()
        };
        let norm = gemm(&args(&a, &b), &mut c, &Config::from_raw(&raw).0).unwrap();
        assert_eq!((norm.scaling, c), (Some("norm"), [-2.5, -3.0, 2.75, 5.0]));
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
}
