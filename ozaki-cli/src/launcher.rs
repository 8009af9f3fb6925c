//! `ozaki run` in front of an MPI launcher: `ozaki run -- mpirun -n 4 ./prog`.
//!
//! On its own host `mpirun` starts the ranks with its own environment, so the shim's
//! `LD_PRELOAD` and `OZAKI_*` variables reach them. Ranks on *other* hosts are started by
//! a daemon whose environment is the login one: Open MPI forwards a variable there only when
//! asked, with `-x NAME` or the `mca_base_env_list` parameter. Open MPI refuses to start
//! when both are used ("does not support mixing these two methods", checked with 4.1.4), so
//! a blind `-x` or a blind `OMPI_MCA_mca_base_env_list` would break some user's command.
//! [`forward_env`] therefore extends whichever method the command already uses, and adds
//! `-x NAME` only when it uses neither.
//!
//! MPICH/Intel MPI (Hydra) and Slurm's `srun` forward the whole environment by default and
//! are left alone. The other order, `mpirun -n 4 ozaki run -- ./prog`, needs no forwarding:
//! every rank starts its own `ozaki run`, which sets the environment itself and summarises
//! only its own trace ([`with_own_rank`]).

use ozaki_core::devices::LauncherEnv;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable through which Open MPI reads `mca_base_env_list`.
const ENV_LIST_VAR: &str = "OMPI_MCA_mca_base_env_list";

/// The command that runs `argv`; for an Open MPI launcher, one that also forwards `set_here`
/// (the variables `ozaki run` sets for the program, e.g. `LD_PRELOAD`, `OZAKI_TRACE`) and
/// every `OZAKI_*` variable of this environment to all ranks.
pub fn command(argv: &[OsString], set_here: &[&str]) -> Command {
    if !is_open_mpi(&argv[0]) {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        return cmd;
    }
    let mut names: Vec<String> = set_here.iter().map(|s| s.to_string()).collect();
    names.extend(
        ozaki_core::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| k.starts_with("OZAKI_")),
    );
    names.sort();
    names.dedup();
    let f = forward_env(
        argv,
        &names,
        ozaki_core::env::var_os(ENV_LIST_VAR).as_deref(),
    );
    tracing::debug!(command = ?f.command, env_list = ?f.env_list, "Open MPI launcher: forwarding the shim's environment");
    let mut cmd = Command::new(&f.command[0]);
    cmd.args(&f.command[1..]);
    if let Some(list) = f.env_list {
        cmd.env(ENV_LIST_VAR, list);
    }
    cmd
}

/// The trace template with `%r` replaced by this process's MPI rank, when it is one (the
/// shim in the program below will substitute the same number); unchanged otherwise.
/// `%%` stays as it is, so `%%r` is not a rank.
pub fn with_own_rank(pattern: &str) -> String {
    let Some(rank) = LauncherEnv::from_process_env().world_rank else {
        return pattern.to_string();
    };
    replace_rank(pattern, rank)
}

fn replace_rank(pattern: &str, rank: u32) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('%', Some('r')) => {
                chars.next();
                out += &rank.to_string();
            }
            ('%', Some('%')) => {
                chars.next();
                out += "%%";
            }
            _ => out.push(c),
        }
    }
    out
}

/// A trace template for one file per rank, when `ozaki run` starts an MPI launcher
/// (`program`) or runs inside an MPI rank, and `pattern` has neither `%r` nor `%p`: otherwise
/// every rank would truncate and write the same file. `%r` goes before the extension
/// (`app.jsonl` -> `app-%r.jsonl`). `None` when the template needs no change.
pub fn per_rank_pattern(pattern: &str, program: &OsStr) -> Option<String> {
    let ranks = is_launcher_name(program) || LauncherEnv::from_process_env().world_rank.is_some();
    if !ranks {
        return None;
    }
    rank_pattern(pattern)
}

/// `pattern` with `%r` inserted when it has neither `%r` nor `%p`, for a trace written by
/// several MPI ranks; `None` when it already names one file per process.
pub fn rank_pattern(pattern: &str) -> Option<String> {
    let has = |t: &str| pattern.replace("%%", "").contains(t);
    if has("%r") || has("%p") {
        return None;
    }
    Some(insert_rank(pattern))
}

/// `dir/app.jsonl` -> `dir/app-%r.jsonl`; `app` -> `app-%r`.
fn insert_rank(pattern: &str) -> String {
    let name_start = pattern.rfind('/').map_or(0, |i| i + 1);
    match pattern[name_start..].rfind('.').filter(|&i| i > 0) {
        Some(dot) => format!(
            "{}-%r{}",
            &pattern[..name_start + dot],
            &pattern[name_start + dot..]
        ),
        None => format!("{pattern}-%r"),
    }
}

/// Whether `program` is named like an MPI launcher (any MPI, and Slurm's `srun`).
fn is_launcher_name(program: &OsStr) -> bool {
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name == "srun"
        || ["mpirun", "mpiexec", "orterun", "prterun", "oshrun"]
            .iter()
            .any(|l| name.starts_with(l))
}

/// How the environment reaches an Open MPI job's ranks after [`forward_env`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarded {
    /// The command to run (possibly with `-x NAME` or an extended `mca_base_env_list` value).
    pub command: Vec<OsString>,
    /// A new value for `OMPI_MCA_mca_base_env_list`, when that is the method in use.
    pub env_list: Option<OsString>,
}

/// Makes an Open MPI launcher forward `names` to every rank, whichever host it runs on.
///
/// `command` is the launcher and its arguments, `env_list` the caller's current
/// `OMPI_MCA_mca_base_env_list`. Names the launcher already forwards are not repeated.
/// Open MPI's list delimiter is `;` (the default of `mca_base_env_list_delimiter`).
pub fn forward_env(command: &[OsString], names: &[String], env_list: Option<&OsStr>) -> Forwarded {
    // `--mca mca_base_env_list VALUE` (also `-mca`, `--gmca`, `-gmca`) on the command line.
    let arg_list = command.windows(3).position(|w| {
        matches!(w[0].to_str(), Some("--mca" | "-mca" | "--gmca" | "-gmca"))
            && w[1] == "mca_base_env_list"
    });
    if let Some(i) = arg_list {
        let mut command = command.to_vec();
        command[i + 2] = extend_list(&command[i + 2], names);
        return Forwarded {
            command,
            env_list: None,
        };
    }
    if let Some(list) = env_list.filter(|l| !l.is_empty()) {
        return Forwarded {
            command: command.to_vec(),
            env_list: Some(extend_list(list, names)),
        };
    }
    let already: Vec<&OsStr> = command
        .windows(2)
        .filter(|w| w[0] == "-x")
        .map(|w| w[1].as_os_str())
        .collect();
    let mut out = vec![command[0].clone()];
    for name in names {
        // `-x NAME=VALUE` by the user also counts as forwarding NAME (their value wins).
        if !already.iter().any(|a| {
            a.to_str()
                .is_some_and(|a| a == name || a.starts_with(&format!("{name}=")))
        }) {
            out.push("-x".into());
            out.push(name.into());
        }
    }
    out.extend(command[1..].iter().cloned());
    Forwarded {
        command: out,
        env_list: None,
    }
}

/// `list;NAME...` for the names `list` does not hold yet.
fn extend_list(list: &OsStr, names: &[String]) -> OsString {
    let text = list.to_string_lossy();
    let present: Vec<&str> = text
        .split(';')
        .map(|e| e.split('=').next().unwrap_or(""))
        .collect();
    let mut out = list.to_os_string();
    for name in names.iter().filter(|n| !present.contains(&n.as_str())) {
        if !out.is_empty() {
            out.push(";");
        }
        out.push(name);
    }
    out
}

/// Whether `program` is Open MPI's launcher (`mpirun`, `mpiexec`, `orterun`, `prterun`, `oshrun`,
/// also with a suffix such as Debian's `mpirun.openmpi`).
///
/// Debian's `mpirun` is a chain of links ending in `orterun`; other installations are
/// recognised by asking the launcher for its `--version`, which Open MPI answers with
/// "(Open MPI)" or "(Open RTE)".
pub fn is_open_mpi(program: &OsStr) -> bool {
    let Some(path) = resolve(program) else {
        return false;
    };
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    if !is_launcher_name(path.as_os_str()) || name(&path) == "srun" {
        return false;
    }
    let real = path.canonicalize().unwrap_or(path.clone());
    if matches!(name(&real).as_str(), "orterun" | "prterun") {
        return true;
    }
    std::process::Command::new(&path)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| {
            let out = String::from_utf8_lossy(&o.stdout);
            out.contains("Open MPI") || out.contains("Open RTE") || out.contains("OpenRTE")
        })
}

/// `program` as a path: itself when it has a `/`, else the first match on `PATH`.
fn resolve(program: &OsStr) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::split_paths(&ozaki_core::env::var_os("PATH")?)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn names() -> Vec<String> {
        vec!["LD_PRELOAD".into(), "OZAKI_TRACE".into()]
    }

    #[test]
    fn plain_mpirun_gets_x_flags_right_after_the_launcher() {
        let f = forward_env(&os(&["mpirun", "-n", "4", "./prog", "-x"]), &names(), None);
        assert_eq!(
            f.command,
            os(&[
                "mpirun",
                "-x",
                "LD_PRELOAD",
                "-x",
                "OZAKI_TRACE",
                "-n",
                "4",
                "./prog",
                "-x"
            ])
        );
        assert_eq!(f.env_list, None);
    }

    #[test]
    fn user_x_flags_are_kept_and_not_repeated() {
        let f = forward_env(
            &os(&["mpirun", "-x", "OZAKI_TRACE=t.jsonl", "-x", "FOO", "./prog"]),
            &names(),
            None,
        );
        assert_eq!(
            f.command,
            os(&[
                "mpirun",
                "-x",
                "LD_PRELOAD",
                "-x",
                "OZAKI_TRACE=t.jsonl",
                "-x",
                "FOO",
                "./prog"
            ])
        );
    }

    #[test]
    fn an_env_list_in_the_environment_is_extended_instead_of_mixing_in_x() {
        let cmd = os(&["mpirun", "-n", "2", "./prog"]);
        let f = forward_env(&cmd, &names(), Some(OsStr::new("FOO;OZAKI_TRACE=x")));
        assert_eq!(f.command, cmd);
        assert_eq!(
            f.env_list,
            Some(OsString::from("FOO;OZAKI_TRACE=x;LD_PRELOAD"))
        );
        // An empty value counts as unset.
        assert_eq!(
            forward_env(&cmd, &names(), Some(OsStr::new(""))).command[1],
            "-x"
        );
    }

    #[test]
    fn an_env_list_on_the_command_line_is_extended_in_place() {
        let f = forward_env(
            &os(&["mpirun", "--mca", "mca_base_env_list", "FOO", "./prog"]),
            &names(),
            None,
        );
        assert_eq!(
            f.command,
            os(&[
                "mpirun",
                "--mca",
                "mca_base_env_list",
                "FOO;LD_PRELOAD;OZAKI_TRACE",
                "./prog"
            ])
        );
        assert_eq!(f.env_list, None);
    }

    #[test]
    fn own_rank_replaces_r_but_not_escaped_percent() {
        assert_eq!(replace_rank("t-%r-%p.jsonl", 3), "t-3-%p.jsonl");
        assert_eq!(replace_rank("100%%rate-%r", 12), "100%%rate-12");
        assert_eq!(replace_rank("plain.jsonl", 0), "plain.jsonl");
    }

    #[test]
    fn rank_goes_before_the_extension() {
        assert_eq!(insert_rank("/t/app.jsonl"), "/t/app-%r.jsonl");
        assert_eq!(insert_rank("run.d/app"), "run.d/app-%r");
        assert_eq!(insert_rank(".hidden"), ".hidden-%r");
        let launcher = OsStr::new("/usr/bin/mpirun");
        // Only tested outside a launcher's environment (cargo test is not an MPI rank).
        if LauncherEnv::from_process_env().world_rank.is_none() {
            assert_eq!(
                per_rank_pattern("app.jsonl", launcher).as_deref(),
                Some("app-%r.jsonl")
            );
            assert_eq!(per_rank_pattern("app.jsonl", OsStr::new("./prog")), None);
        }
        assert_eq!(per_rank_pattern("app-%r.jsonl", launcher), None);
        assert_eq!(per_rank_pattern("app-%p.jsonl", launcher), None);
        assert_eq!(
            per_rank_pattern("100%%p.jsonl", launcher).as_deref(),
            Some("100%%p-%r.jsonl")
        );
        assert!(
            is_launcher_name(OsStr::new("srun")) && is_launcher_name(OsStr::new("mpiexec.hydra"))
        );
    }

    #[test]
    fn programs_that_are_not_launchers_are_not_open_mpi() {
        assert!(!is_open_mpi(OsStr::new("true")));
        assert!(!is_open_mpi(OsStr::new("/nonexistent/mpirun")));
    }
}
