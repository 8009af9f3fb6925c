//! Settings from the environment, read once at the first intercepted call.
//!
//! [`RawConfig`] holds the variables as strings; [`Config::from_raw`] validates them (a bad
//! value becomes one stderr line and a safe default, never a failure of the host program).
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `OZAKI_TRACE=FILE` | write a JSON Lines trace; `%p` pid, `%h` host name, `%r` MPI rank, `%%` a `%` | no trace |
//! | `OZAKI_TRACE_ARGV=0` | leave the command line out of the trace header (it can hold secrets); `0`, `false`, `no`, `off` leave it out, `1`, `true`, `yes`, `on` keep it, anything else is reported and leaves it out | argv recorded |
//! | `OZAKI_ROUTE=ROUTE` | `auto` or a route name (`vendor`, `builtin`, `cpu-ozaki`, `gpu-native`, `gpu-ozaki`); a bad name means `vendor` | `auto` |
//! | `OZAKI_MODULI=N` | forced number of moduli for the emulated routes, 2 to 20 (other values are reported and ignored) | the route's choice |
//! | `OZAKI_THREADS=N` | worker threads of the CPU emulation (`cpu-ozaki`) | the vendor BLAS's own thread count (`route::threads`: OpenBLAS/MKL/OpenMP limits, threadpoolctl's included), else `OPENBLAS_NUM_THREADS`/`MKL_NUM_THREADS`/`OMP_NUM_THREADS`, else every core |
//! | `OZAKI_SCALING=fast\|norm\|accurate` | scaling bound of the emulated routes (`ozaki_core::scaling`; gpu-ozaki runs `accurate` as `norm`) | `norm` |
//! | `OZAKI_ACCURACY=default\|normwise\|guaranteed` | the accuracy rule of the emulated routes (`ozaki_core::rule`): the componentwise estimate against native fp64, Ozaki-II's normwise bound, or the deterministic componentwise bound within fp64's `γ_k` | `default` |
//! | `OZAKI_VENDOR_BLAS=/path/lib.so` | the BLAS to forward to, before any other lookup | found automatically |
//! | `OZAKI_LOG=FILTER` | `tracing` filter for diagnostics on stderr (e.g. `info`, `ozaki_shim=debug`) | silent |
//! | `OZAKI_SPLIT=0\|1` | split a host dgemm's C over this process's GPU slots: `0` never, `1` always when C holds two minimum tiles | the engine decides |
//! | `OZAKI_GPU_START=background\|blocking` | with `auto`, how the first call that may use the GPU starts it: on a background thread while calls run on the vendor BLAS, or inside that call, which waits for it (`route::start`) | `background` |
//! | `OZAKI_EXPLORE=0\|1` | with `auto`, run the runner-up route on a small fraction of the calls whose predictions are close, so measurement can correct a wrong profile (`route::adjust`); `0` never | `1` |
//! | `OZAKI_HOST_REGISTER=auto\|0\|1` | whether large host-resident gemms page-lock the caller's A and B for the call (`cuMemHostRegister`) so they upload without the staging copy: `auto` when the profile measured it faster than staging (`HostLink::registers`), `0` never, `1` always | `auto` |
//! | `OZAKI_CUBLAS=0\|1` | the cuBLAS hook (`cublas_hook`): `1` traces and routes the program's own fp64 cuBLAS calls, `0` hands every one to cuBLAS untouched and unrecorded | `1` |

use crate::lazy::Lazy;
use ozaki_core::route::{Route, RouteRequest};
use std::ffi::OsString;
use std::path::PathBuf;

/// The environment variables as found.
#[derive(Debug, Default, Clone)]
pub struct RawConfig {
    /// `OZAKI_TRACE`.
    pub trace: Option<OsString>,
    /// `OZAKI_TRACE_ARGV`.
    pub trace_argv: Option<OsString>,
    /// `OZAKI_ROUTE`.
    pub route: Option<OsString>,
    /// `OZAKI_MODULI`.
    pub moduli: Option<OsString>,
    /// `OZAKI_SCALING`.
    pub scaling: Option<OsString>,
    /// `OZAKI_ACCURACY`.
    pub accuracy: Option<OsString>,
    /// `OZAKI_VENDOR_BLAS`.
    pub vendor_blas: Option<OsString>,
    /// `OZAKI_LOG`.
    pub log: Option<OsString>,
    /// `OZAKI_SPLIT`.
    pub split: Option<OsString>,
    /// `OZAKI_GPU_START`.
    pub gpu_start: Option<OsString>,
    /// `OZAKI_EXPLORE`.
    pub explore: Option<OsString>,
    /// `OZAKI_THREADS`.
    pub threads: Option<OsString>,
    /// `OZAKI_CUBLAS`.
    pub cublas: Option<OsString>,
    /// `OZAKI_HOST_REGISTER`.
    pub host_register: Option<OsString>,
    /// `OZAKI_VENDOR_THREADS`.
    pub vendor_threads: Option<OsString>,
}

impl RawConfig {
    /// Reads the process environment.
    pub fn from_env() -> RawConfig {
        let var = |name: &str| ozaki_core::env::var_os(name).filter(|v| !v.is_empty());
        RawConfig {
            trace: var("OZAKI_TRACE"),
            trace_argv: var("OZAKI_TRACE_ARGV"),
            route: var("OZAKI_ROUTE"),
            moduli: var("OZAKI_MODULI"),
            scaling: var("OZAKI_SCALING"),
            accuracy: var("OZAKI_ACCURACY"),
            vendor_blas: var("OZAKI_VENDOR_BLAS"),
            log: var("OZAKI_LOG"),
            split: var("OZAKI_SPLIT"),
            gpu_start: var("OZAKI_GPU_START"),
            explore: var("OZAKI_EXPLORE"),
            threads: var("OZAKI_THREADS"),
            cublas: var("OZAKI_CUBLAS"),
            host_register: var("OZAKI_HOST_REGISTER"),
            vendor_threads: var("OZAKI_VENDOR_THREADS"),
        }
    }
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Trace file template (`OZAKI_TRACE`), before `%p`/`%h`/`%r` expansion.
    pub trace: Option<String>,
    /// Whether the trace header records argv.
    pub trace_argv: bool,
    /// Requested route. `Auto` is resolved per call by `route::choose`.
    pub route: RouteRequest,
    /// Forced moduli count for the emulated routes (`OZAKI_MODULI`).
    pub moduli: Option<u32>,
    /// Scaling bound of the emulated routes (`OZAKI_SCALING`; `None`: each route's default).
    pub scaling: Option<ozaki_core::scaling::ScalingMode>,
    /// The accuracy rule's mode (`OZAKI_ACCURACY`).
    pub accuracy: ozaki_core::rule::Accuracy,
    /// Vendor library to forward to (`OZAKI_VENDOR_BLAS`).
    pub vendor_blas: Option<PathBuf>,
    /// Diagnostics filter (`OZAKI_LOG`).
    pub log: Option<String>,
    /// Whether GPU calls are split over several GPU slots (`OZAKI_SPLIT`).
    pub split: SplitMode,
    /// How `auto` starts the GPU (`OZAKI_GPU_START`).
    pub gpu_start: GpuStart,
    /// Whether `auto` explores the runner-up route (`OZAKI_EXPLORE`, default on).
    pub explore: bool,
    /// Worker threads of the CPU emulation (`OZAKI_THREADS`; `None`: `route::threads` asks the
    /// vendor and the usual variables).
    pub threads: Option<usize>,
    /// Whether the cuBLAS hook traces and routes the program's fp64 cuBLAS calls
    /// (`OZAKI_CUBLAS`, default on).
    pub cublas: bool,
    /// Whether large host-resident gemms page-lock the caller's operands
    /// (`OZAKI_HOST_REGISTER`).
    pub host_register: HostRegister,
    /// How `auto` sets the vendor's thread count for the calls it keeps there
    /// (`OZAKI_VENDOR_THREADS`, `route::vendor_threads`).
    pub vendor_threads: VendorThreads,
}

/// `OZAKI_VENDOR_THREADS`: the thread count `auto` runs the vendor at for a call it keeps
/// there (`route::vendor_threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VendorThreads {
    /// `keep`: the vendor's own count.
    Keep,
    /// `share`: a call made while others are in flight gets the count divided by the calls
    /// in flight.
    Share,
    /// `team` (the default): a call made from inside an OpenMP parallel region gets the
    /// count divided by the region's team. With `share` or `team`, a call made while the GPU
    /// starts in the background gets one thread fewer than the count.
    Team,
}

/// `OZAKI_HOST_REGISTER`: whether the GPU routes page-lock the caller's op(A) and op(B) of a
/// large host-resident gemm for the call instead of staging them
/// (`gpu_kernels::host::set_register`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostRegister {
    /// `auto` (default): when the engine's profile measured it faster than staging.
    Auto,
    /// `0`: never.
    Off,
    /// `1`: always (the engine still prices what the profile measured).
    On,
}

impl HostRegister {
    /// Whether to page-lock, for a profile whose host link `registers` (measured faster).
    pub fn on(self, registers: bool) -> bool {
        match self {
            HostRegister::Auto => registers,
            HostRegister::Off => false,
            HostRegister::On => true,
        }
    }
}

/// `OZAKI_GPU_START`: how `auto` starts the GPU (`route::start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuStart {
    /// `background` (default): the first call that may use the GPU starts it on a background
    /// thread, and calls run on the vendor BLAS until it is up unless waiting pays.
    Background,
    /// `blocking`: that call waits for the start. For programs whose
    /// first calls are many and mid-sized on a machine whose CUDA libraries are not in the
    /// page cache, where the vendor calls made during the start ran 1.2-6x slower than priced
    /// (BENCHMARKS.md, "GPU start-up off the first call").
    Blocking,
}

/// `OZAKI_SPLIT`: who decides whether a host-resident dgemm is split over the process's GPU
/// slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitMode {
    /// Unset: the engine splits when the priced split beats one GPU
    /// (`ozaki_core::engine::split`).
    Engine,
    /// `OZAKI_SPLIT=0`: never split.
    Off,
    /// `OZAKI_SPLIT=1`: always split when the process owns two or more slots and C holds
    /// two tiles of the minimum size, whatever the price.
    On,
}

impl Config {
    /// Validates raw settings; returns the config and one message per rejected value.
    pub fn from_raw(raw: &RawConfig) -> (Config, Vec<String>) {
        let mut problems = Vec::new();
        let text = |v: &Option<OsString>| v.as_ref().map(|s| s.to_string_lossy().into_owned());
        let route = match text(&raw.route) {
            // The per-record engine chooses unless a route is forced.
            None => RouteRequest::Auto,
            Some(s) => s.parse().unwrap_or_else(|e| {
                problems.push(format!("OZAKI_ROUTE: {e}; using the vendor BLAS"));
                RouteRequest::Forced(Route::Vendor)
            }),
        };
        let moduli_range = ozaki_core::moduli::MIN_MODULI..=ozaki_core::moduli::MAX_MODULI;
        let moduli = text(&raw.moduli).and_then(|s| match s.trim().parse::<u32>() {
            Ok(n) if moduli_range.contains(&(n as usize)) => Some(n),
            _ => {
                problems.push(format!(
                    "OZAKI_MODULI={s:?} is not a whole number from {} to {}; ignored (each route picks its own)",
                    moduli_range.start(),
                    moduli_range.end()
                ));
                None
            }
        });
        let threads = text(&raw.threads).and_then(|s| match s.trim().parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                problems.push(format!(
                    "OZAKI_THREADS={s:?} is not a positive whole number; ignored"
                ));
                None
            }
        });
        let scaling = text(&raw.scaling).and_then(|s| {
            s.parse()
                .map_err(|e| problems.push(format!("OZAKI_SCALING: {e}; ignored")))
                .ok()
        });
        let accuracy = text(&raw.accuracy)
            .and_then(|s| {
                s.parse()
                    .map_err(|e| problems.push(format!("OZAKI_ACCURACY: {e}; using default")))
                    .ok()
            })
            .unwrap_or_default();
        let trace_argv = match text(&raw.trace_argv).map(|s| s.trim().to_ascii_lowercase()) {
            None => true,
            Some(v) => match v.as_str() {
                "0" | "false" | "no" | "off" => false,
                "1" | "true" | "yes" | "on" => true,
                _ => {
                    // Whoever set it meant to say something: err on the side of the secret.
                    problems.push(format!(
                        "OZAKI_TRACE_ARGV={v:?} is not 0/false/no/off or 1/true/yes/on; leaving the command line out of the trace"
                    ));
                    false
                }
            },
        };
        let split = match text(&raw.split).as_deref().map(str::trim) {
            None => SplitMode::Engine,
            Some("0") => SplitMode::Off,
            Some("1") => SplitMode::On,
            Some(other) => {
                problems.push(format!(
                    "OZAKI_SPLIT={other:?} is neither 0 nor 1; the engine decides"
                ));
                SplitMode::Engine
            }
        };
        let gpu_start = match text(&raw.gpu_start).as_deref().map(str::trim) {
            None | Some("background") => GpuStart::Background,
            Some("blocking") => GpuStart::Blocking,
            Some(other) => {
                problems.push(format!(
                    "OZAKI_GPU_START={other:?} is neither background nor blocking; using background"
                ));
                GpuStart::Background
            }
        };
        let host_register = match text(&raw.host_register).as_deref().map(str::trim) {
            None | Some("auto") => HostRegister::Auto,
            Some("0") => HostRegister::Off,
            Some("1") => HostRegister::On,
            Some(other) => {
                problems.push(format!(
                    "OZAKI_HOST_REGISTER={other:?} is not auto, 0 or 1; using auto"
                ));
                HostRegister::Auto
            }
        };
        let vendor_threads = match text(&raw.vendor_threads).as_deref().map(str::trim) {
            Some("share") => VendorThreads::Share,
            None | Some("team") => VendorThreads::Team,
            Some("keep") => VendorThreads::Keep,
            Some(other) => {
                problems.push(format!(
                    "OZAKI_VENDOR_THREADS={other:?} is not team, share or keep; using team"
                ));
                VendorThreads::Team
            }
        };
        let explore = on_unless_0(&raw.explore, "OZAKI_EXPLORE", "exploring", &mut problems);
        let cublas = on_unless_0(
            &raw.cublas,
            "OZAKI_CUBLAS",
            "the cuBLAS hook stays on",
            &mut problems,
        );
        let config = Config {
            trace: text(&raw.trace),
            trace_argv,
            route,
            moduli,
            scaling,
            accuracy,
            vendor_blas: raw.vendor_blas.as_ref().map(PathBuf::from),
            log: text(&raw.log),
            split,
            gpu_start,
            explore,
            threads,
            cublas,
            host_register,
            vendor_threads,
        };
        (config, problems)
    }

    /// Whether calls are recorded.
    pub fn tracing(&self) -> bool {
        self.trace.is_some()
    }

    /// The rule `auto` sets the vendor's threads by (`OZAKI_VENDOR_THREADS`); `Keep` for
    /// every forced route (`route::vendor_threads`).
    pub fn vendor_threads_rule(&self) -> VendorThreads {
        if self.route == ozaki_core::route::RouteRequest::Auto {
            self.vendor_threads
        } else {
            VendorThreads::Keep
        }
    }

    /// Whether `auto` runs some vendor calls at a share of the vendor's threads
    /// (`OZAKI_VENDOR_THREADS=share` or `team` with `OZAKI_ROUTE=auto`), each priced at that
    /// share alone.
    pub fn shares_vendor_threads(&self) -> bool {
        self.vendor_threads_rule() != VendorThreads::Keep
    }
}

/// A switch that is on unless set to `0`: `1` or unset is on, anything else is reported
/// (`then` says what happens) and leaves it on.
fn on_unless_0(
    value: &Option<OsString>,
    var: &str,
    then: &str,
    problems: &mut Vec<String>,
) -> bool {
    let text = value.as_ref().map(|s| s.to_string_lossy().into_owned());
    match text.as_deref().map(str::trim) {
        None | Some("1") => true,
        Some("0") => false,
        Some(other) => {
            problems.push(format!("{var}={other:?} is neither 0 nor 1; {then}"));
            true
        }
    }
}

static CONFIG: Lazy<Config> = Lazy::new();

/// The settings, read from the environment at the first call.
pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| {
        let (config, problems) = Config::from_raw(&RawConfig::from_env());
        if let Some(filter) = &config.log {
            init_logging(filter);
        }
        for p in problems {
            notice(&p);
        }
        tracing::debug!(?config, "configuration");
        config
    })
}

/// The settings, if an earlier call read them already ([`get`] otherwise).
pub fn get_if_read() -> Option<&'static Config> {
    CONFIG.get()
}

/// Installs a stderr `tracing` subscriber with `filter` (silent when `OZAKI_LOG` is unset).
/// A host program that installed its own global subscriber keeps it.
fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|e| {
        notice(&format!("OZAKI_LOG: {e}; using \"info\""));
        tracing_subscriber::EnvFilter::new("info")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .try_init();
}

/// One user-facing line on stderr (`ozaki-shim: ...`), for conditions a user must know about
/// even with `OZAKI_LOG` unset: a bad setting, no vendor BLAS, an unwritable trace. Callers
/// make sure each condition is reported once.
pub fn notice(message: &str) {
    tracing::warn!("{message}");
    eprintln!("ozaki-shim: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(route: Option<&str>, moduli: Option<&str>, argv: Option<&str>) -> RawConfig {
        RawConfig {
            route: route.map(Into::into),
            moduli: moduli.map(Into::into),
            trace_argv: argv.map(Into::into),
            ..RawConfig::default()
        }
    }

    #[test]
    fn defaults_are_auto_untraced_with_argv() {
        let (c, p) = Config::from_raw(&RawConfig::default());
        assert!(p.is_empty());
        assert_eq!(c.route, RouteRequest::Auto);
        assert!(!c.tracing() && c.trace_argv && c.moduli.is_none());
    }

    #[test]
    fn bad_values_fall_back_with_one_message_each() {
        let (c, p) = Config::from_raw(&raw(Some("gpu"), Some("many"), None));
        assert_eq!(c.route, RouteRequest::Forced(Route::Vendor));
        assert_eq!(c.moduli, None);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].contains("OZAKI_ROUTE") && p[0].contains("gpu-ozaki"),
            "{}",
            p[0]
        );
    }

    #[test]
    fn ozaki_host_register_follows_the_profile_unless_forced() {
        let with = |v: Option<&str>| {
            Config::from_raw(&RawConfig {
                host_register: v.map(Into::into),
                ..RawConfig::default()
            })
        };
        for (v, want) in [
            (None, HostRegister::Auto),
            (Some("auto"), HostRegister::Auto),
            (Some("0"), HostRegister::Off),
            (Some(" 1 "), HostRegister::On),
        ] {
            let (c, p) = with(v);
            assert_eq!(c.host_register, want, "{v:?}");
            assert!(p.is_empty(), "{p:?}");
        }
        let (c, p) = with(Some("yes"));
        assert_eq!(c.host_register, HostRegister::Auto);
        assert!(
            p.len() == 1 && p[0].contains("OZAKI_HOST_REGISTER"),
            "{p:?}"
        );
        // auto follows the profile's measurement; 0 and 1 do not
        assert!(HostRegister::Auto.on(true) && !HostRegister::Auto.on(false));
        assert!(!HostRegister::Off.on(true) && HostRegister::On.on(false));
    }

    #[test]
    fn ozaki_split_forces_off_or_on_and_defaults_to_the_engine() {
        let with = |v: Option<&str>| {
            Config::from_raw(&RawConfig {
                split: v.map(Into::into),
                ..RawConfig::default()
            })
        };
        assert_eq!(with(None).0.split, SplitMode::Engine);
        assert_eq!(with(Some("0")).0.split, SplitMode::Off);
        assert_eq!(with(Some(" 1 ")).0.split, SplitMode::On);
        let (c, p) = with(Some("yes"));
        assert_eq!(c.split, SplitMode::Engine);
        assert!(p.len() == 1 && p[0].contains("OZAKI_SPLIT"), "{p:?}");
    }

    #[test]
    fn ozaki_cublas_is_on_unless_0() {
        let with = |v: Option<&str>| {
            Config::from_raw(&RawConfig {
                cublas: v.map(Into::into),
                ..RawConfig::default()
            })
        };
        assert!(with(None).0.cublas && with(Some("1")).0.cublas);
        assert!(!with(Some(" 0")).0.cublas);
        let (c, p) = with(Some("off"));
        assert!(c.cublas);
        assert!(p.len() == 1 && p[0].contains("OZAKI_CUBLAS"), "{p:?}");
    }

    #[test]
    fn ozaki_gpu_start_is_background_unless_blocking_is_asked() {
        let with = |v: Option<&str>| {
            Config::from_raw(&RawConfig {
                gpu_start: v.map(Into::into),
                ..RawConfig::default()
            })
        };
        assert_eq!(with(None).0.gpu_start, GpuStart::Background);
        assert_eq!(with(Some("background")).0.gpu_start, GpuStart::Background);
        assert_eq!(with(Some(" blocking ")).0.gpu_start, GpuStart::Blocking);
        let (c, p) = with(Some("eager"));
        assert_eq!(c.gpu_start, GpuStart::Background);
        assert!(p.len() == 1 && p[0].contains("OZAKI_GPU_START"), "{p:?}");
    }

    #[test]
    fn trace_argv_takes_the_usual_spellings_and_hides_argv_on_garbage() {
        for (v, keep) in [
            ("0", false),
            ("false", false),
            (" No ", false),
            ("OFF", false),
            ("1", true),
            ("true", true),
            ("yes", true),
            ("on", true),
        ] {
            let (c, p) = Config::from_raw(&raw(None, None, Some(v)));
            assert_eq!((c.trace_argv, p.len()), (keep, 0), "OZAKI_TRACE_ARGV={v:?}");
        }
        let (c, p) = Config::from_raw(&raw(None, None, Some("nope")));
        assert!(!c.trace_argv);
        assert!(p.len() == 1 && p[0].contains("OZAKI_TRACE_ARGV"), "{p:?}");
    }

    #[test]
    fn moduli_outside_the_sets_range_are_rejected() {
        for bad in ["0", "1", "21", "-3", "1e3"] {
            let (c, p) = Config::from_raw(&raw(None, Some(bad), None));
            assert_eq!(c.moduli, None, "OZAKI_MODULI={bad}");
            assert!(p.len() == 1 && p[0].contains("2 to 20"), "{p:?}");
        }
        for good in [2u32, 14, 20] {
            let (c, p) = Config::from_raw(&raw(None, Some(&good.to_string()), None));
            assert_eq!((c.moduli, p.len()), (Some(good), 0));
        }
    }

    #[test]
    fn ozaki_threads_takes_a_positive_count() {
        let with = |v: &str| {
            Config::from_raw(&RawConfig {
                threads: Some(v.into()),
                ..RawConfig::default()
            })
        };
        assert_eq!(with(" 3 ").0.threads, Some(3));
        let (c, p) = with("0");
        assert!(c.threads.is_none() && p.len() == 1 && p[0].contains("OZAKI_THREADS"));
        assert!(with("all").0.threads.is_none());
        assert!(Config::from_raw(&RawConfig::default()).0.threads.is_none());
    }

    #[test]
    fn good_values_are_taken() {
        let (c, p) = Config::from_raw(&raw(Some("cpu-ozaki"), Some("14"), Some("0")));
        assert!(p.is_empty());
        assert_eq!(c.route, RouteRequest::Forced(Route::CpuOzaki));
        assert_eq!(c.moduli, Some(14));
        assert!(!c.trace_argv);
        assert_eq!(
            Config::from_raw(&raw(Some("auto"), None, Some("1")))
                .0
                .route,
            RouteRequest::Auto
        );
    }

    #[test]
    fn scaling_is_parsed_and_a_bad_value_is_reported_and_ignored() {
        use ozaki_core::scaling::ScalingMode;
        let with = |v: &str| {
            Config::from_raw(&RawConfig {
                scaling: Some(v.into()),
                ..RawConfig::default()
            })
        };
        assert_eq!(with("fast").0.scaling, Some(ScalingMode::Fast));
        assert_eq!(with(" norm ").0.scaling, Some(ScalingMode::Norm));
        assert_eq!(with("accurate").0.scaling, Some(ScalingMode::Accurate));
        let (c, p) = with("exact");
        assert_eq!(c.scaling, None);
        assert!(p.len() == 1 && p[0].contains("OZAKI_SCALING"), "{p:?}");
        assert_eq!(Config::from_raw(&RawConfig::default()).0.scaling, None);
    }

    #[test]
    fn accuracy_is_parsed_and_a_bad_value_is_reported_and_defaults() {
        use ozaki_core::rule::Accuracy;
        let with = |v: &str| {
            Config::from_raw(&RawConfig {
                accuracy: Some(v.into()),
                ..RawConfig::default()
            })
        };
        assert_eq!(with("normwise").0.accuracy, Accuracy::Normwise);
        assert_eq!(with(" guaranteed").0.accuracy, Accuracy::Guaranteed);
        let (c, p) = with("loose");
        assert_eq!(c.accuracy, Accuracy::Default);
        assert!(p.len() == 1 && p[0].contains("OZAKI_ACCURACY"), "{p:?}");
        assert_eq!(
            Config::from_raw(&RawConfig::default()).0.accuracy,
            Accuracy::Default
        );
    }
}
