//! `ozaki env [--trace FILE] [--route ROUTE] [--format lines|mpirun|srun]`: the variables
//! that put the shim in front of a program, printed for an MPI launcher to pass on, for the
//! cases where `ozaki run -- mpirun ...` is not wanted (a batch script that calls `srun` or
//! `mpirun` itself):
//!
//! ```text
//! mpirun $(ozaki env --format mpirun --trace app.jsonl) -n 4 ./prog
//! srun $(ozaki env --format srun) ./prog
//! ```
//!
//! The variables: `LD_PRELOAD` (the shim's absolute path in front of the current value, as
//! `ozaki run` sets it), `LD_AUDIT` with `OZAKI_CUBLAS_AUDIT=1` (the audit library in front
//! of the current value), `OPENBLAS_THREAD_TIMEOUT` when `ozaki run` would set it (the
//! vendor's spin, `OZAKI_VENDOR_SPIN`), `OZAKI_TRACE` and `OZAKI_ROUTE` from the options, and every
//! other `OZAKI_*` of this environment. Nothing is set in the calling shell; the names printed are
//! the same as those `ozaki run` sets. A trace template without `%r` or `%p` gets `%r`
//! before its extension, so that the ranks write one file each.

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use ozaki_core::route::RouteRequest;
use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::process::ExitCode;

use crate::launcher;
use crate::preload::{audit, find_shim, prepend_preload, vendor_spin_timeout};
use ozaki_core::engine::spin::OPENBLAS_TIMEOUT_VAR;

/// Print the variables that preload the shim, for an MPI launcher (mpirun -x, srun --export).
#[derive(Debug, Parser)]
#[command(after_help = "Examples:\n  \
                  mpirun $(ozaki env --format mpirun --trace app.jsonl) -n 4 ./prog\n  \
                  srun $(ozaki env --format srun) ./prog\n  \
                  ozaki summary app-*.jsonl")]
struct Args {
    /// Trace template for the ranks (sets OZAKI_TRACE; `%r` is added when it has neither
    /// `%r` nor `%p`).
    #[arg(long, value_name = "FILE")]
    trace: Option<String>,
    /// Route for every call (sets OZAKI_ROUTE): auto, vendor, builtin, cpu-ozaki,
    /// gpu-native, gpu-ozaki.
    #[arg(long, value_name = "ROUTE")]
    route: Option<String>,
    /// `lines`: NAME=VALUE, one per line; `mpirun`: `-x NAME=VALUE ...` (Open MPI);
    /// `srun`: `--export=ALL,NAME=VALUE,...` (Slurm).
    #[arg(long, value_enum, default_value_t = Format::Lines)]
    format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Lines,
    Mpirun,
    Srun,
}

pub fn main(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let args = Args::parse_from(args);
    if let Some(route) = &args.route {
        route.parse::<RouteRequest>().with_context(|| "--route")?;
    }
    let shim = find_shim()?;
    let mut vars: Vec<(String, OsString)> = vec![(
        "LD_PRELOAD".into(),
        prepend_preload(&shim, ozaki_core::env::var_os("LD_PRELOAD").as_deref()),
    )];
    if let Some(a) = audit(&shim)? {
        vars.push(("LD_AUDIT".into(), a));
    }
    if let Some(n) = vendor_spin_timeout() {
        vars.push((OPENBLAS_TIMEOUT_VAR.into(), n.to_string().into()));
    }
    let mut ozaki: Vec<(String, OsString)> = ozaki_core::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
        .filter(|(k, _)| k.starts_with("OZAKI_"))
        .collect();
    if let Some(t) = &args.trace {
        set(&mut ozaki, "OZAKI_TRACE", t.into());
    }
    if let Some(r) = &args.route {
        set(&mut ozaki, "OZAKI_ROUTE", r.into());
    }
    if let Some((_, t)) = ozaki.iter_mut().find(|(k, _)| k == "OZAKI_TRACE")
        && let Some(p) = launcher::rank_pattern(&t.to_string_lossy())
    {
        *t = p.into();
    }
    ozaki.sort();
    vars.extend(ozaki);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", render(&vars, args.format))?;
    Ok(ExitCode::SUCCESS)
}

/// Sets `name` in `vars`, replacing an earlier value.
fn set(vars: &mut Vec<(String, OsString)>, name: &str, value: OsString) {
    vars.retain(|(k, _)| k != name);
    vars.push((name.into(), value));
}

/// The variables in `format`; values are single-quoted for the shell when they hold
/// anything but plain path characters.
fn render(vars: &[(String, OsString)], format: Format) -> String {
    let pairs: Vec<String> = vars
        .iter()
        .map(|(k, v)| format!("{k}={}", quoted(v)))
        .collect();
    match format {
        Format::Lines => pairs.join("\n"),
        Format::Mpirun => pairs
            .iter()
            .map(|p| format!("-x {p}"))
            .collect::<Vec<_>>()
            .join(" "),
        Format::Srun => format!("--export=ALL,{}", pairs.join(",")),
    }
}

fn quoted(v: &OsStr) -> String {
    let s = v.to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-:%+=@".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vec<(String, OsString)> {
        vec![
            ("LD_PRELOAD".into(), "/s/libozaki_shim.so:/y/a.so".into()),
            ("OZAKI_TRACE".into(), "t-%r.jsonl".into()),
        ]
    }

    #[test]
    fn each_format_names_every_variable() {
        assert_eq!(
            render(&vars(), Format::Lines),
            "LD_PRELOAD=/s/libozaki_shim.so:/y/a.so\nOZAKI_TRACE=t-%r.jsonl"
        );
        assert_eq!(
            render(&vars(), Format::Mpirun),
            "-x LD_PRELOAD=/s/libozaki_shim.so:/y/a.so -x OZAKI_TRACE=t-%r.jsonl"
        );
        assert_eq!(
            render(&vars(), Format::Srun),
            "--export=ALL,LD_PRELOAD=/s/libozaki_shim.so:/y/a.so,OZAKI_TRACE=t-%r.jsonl"
        );
    }

    #[test]
    fn values_with_shell_characters_are_quoted() {
        assert_eq!(quoted(OsStr::new("/a b/it's.so")), r"'/a b/it'\''s.so'");
        assert_eq!(quoted(OsStr::new("")), "''");
        assert_eq!(quoted(OsStr::new("/p/x.so")), "/p/x.so");
    }

    #[test]
    fn an_option_replaces_the_environment_value() {
        let mut v = vec![("OZAKI_ROUTE".to_string(), OsString::from("vendor"))];
        set(&mut v, "OZAKI_ROUTE", "gpu-ozaki".into());
        assert_eq!(
            v,
            [("OZAKI_ROUTE".to_string(), OsString::from("gpu-ozaki"))]
        );
    }
}
