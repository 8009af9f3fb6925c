//! How the report shows the paths a trace header recorded (the program and its arguments).
//!
//! A report is made to be passed around, and the capturing machine's layout is nobody
//! else's business: a path under the user's home folder is shown from `~`, one under the
//! temporary folder from `$TMPDIR`, and one under the folder the report was made from
//! relative to it. System paths (`/usr/bin/python3`) say which program ran and stay whole.

use std::path::Path;

/// Where the report is being made: the folders whose prefixes are shortened.
pub struct Places<'a> {
    /// The user's home folder (`$HOME`).
    pub home: Option<&'a Path>,
    /// The temporary folder (`std::env::temp_dir`).
    pub tmp: &'a Path,
    /// The current folder.
    pub cwd: Option<&'a Path>,
}

/// `word` (one argument of the recorded command line) as the report shows it.
pub fn shown(word: &str, at: &Places<'_>) -> String {
    let path = Path::new(word);
    if !path.is_absolute() {
        return word.to_string();
    }
    // The most specific folder first: the current folder may lie under home or tmp.
    let under = |dir: Option<&Path>| {
        dir.filter(|d| d.is_absolute() && d.parent().is_some())
            .and_then(|d| path.strip_prefix(d).ok())
    };
    if let Some(rest) = under(at.cwd) {
        return rest.display().to_string();
    }
    if let Some(rest) = under(Some(at.tmp)) {
        return format!("$TMPDIR/{}", rest.display());
    }
    if let Some(rest) = under(at.home) {
        return format!("~/{}", rest.display());
    }
    word.to_string()
}

/// A recorded command line as the report shows it, with [`shown`] applied to every word,
/// for the places of this process.
pub fn command_line(words: &[String]) -> String {
    let home = ozaki_core::env::var_os("HOME").map(std::path::PathBuf::from);
    let tmp = std::env::temp_dir();
    let cwd = std::env::current_dir().ok();
    let at = Places {
        home: home.as_deref(),
        tmp: &tmp,
        cwd: cwd.as_deref(),
    };
    words
        .iter()
        .map(|w| shown(w, &at))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_folders_are_shortened_and_system_paths_kept() {
        let at = Places {
            home: Some(Path::new("/home/ana")),
            tmp: Path::new("/tmp"),
            cwd: Some(Path::new("/home/ana/src/app")),
        };
        let s = |w| shown(w, &at);
        assert_eq!(s("/home/ana/src/app/run.py"), "run.py");
        assert_eq!(s("/home/ana/.venv/bin/python"), "~/.venv/bin/python");
        assert_eq!(s("/tmp/ozaki-run-1/in.dat"), "$TMPDIR/ozaki-run-1/in.dat");
        assert_eq!(s("/usr/bin/python3"), "/usr/bin/python3");
        assert_eq!(s("--size=64"), "--size=64");
        assert_eq!(
            s("/home/anabel/x"),
            "/home/anabel/x",
            "whole folder names only"
        );
        // A root folder (home = "/") shortens nothing.
        let root = Places {
            home: Some(Path::new("/")),
            tmp: Path::new("/tmp"),
            cwd: None,
        };
        assert_eq!(shown("/etc/x", &root), "/etc/x");
    }
}
