//! Whether a file path can be trusted by this user: the checks behind the trace file
//! (`OZAKI_TRACE`), the kernel cache and the machine profiles in the cache folder.
//!
//! A file another user can replace, or a directory in which another user can plant a
//! symbolic link, lets that user redirect what the shim writes (a trace holds the command
//! line) or what it loads (a kernel binary runs with the user's rights). So:
//!
//! - [`check_dir_chain`]: every directory from `/` down to the file's folder must be a real
//!   directory, not world-writable unless it has the sticky bit (`/tmp`) or belongs to this
//!   user. A symbolic link on the way is followed only when root or this user owns it (a link
//!   such as `/var/run -> /run`); its target is checked the same way, component by component;
//! - [`check_owned_file`]: an existing file must be a regular file of this user's, with one
//!   link (a hard link planted by another user keeps its owner's name elsewhere), and none
//!   of the mode bits the caller forbids.
//!
//! These checks read metadata only; the callers open with `O_NOFOLLOW` and check the opened
//! handle itself (`fstat`), so the file they use is the one checked.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};

/// Symbolic links followed in one chain before giving up (the kernel's own limit is 40).
const MAX_LINKS: usize = 40;

/// The effective user id of this process (from `/proc/self/status`; the crate has no FFI).
pub fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Checks the directory `dir` and every directory above it (see the module docs). A relative
/// `dir` is taken from the current directory.
///
/// # Errors
/// A message naming the first component that fails and why.
pub fn check_dir_chain(dir: &Path, euid: u32) -> Result<(), String> {
    let start = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot read the current directory: {e}"))?
            .join(dir)
    };
    // Components still to visit, last first, so a link's target can be pushed in front.
    let mut pending: Vec<PathBuf> = Vec::new();
    push_components(&mut pending, &start);
    let mut here = PathBuf::from("/");
    check_dir(&here, euid)?;
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part.as_os_str() == ".." {
            here.pop();
            continue;
        }
        let next = here.join(&part);
        let meta =
            std::fs::symlink_metadata(&next).map_err(|e| format!("{}: {e}", next.display()))?;
        if meta.file_type().is_symlink() {
            if meta.uid() != 0 && meta.uid() != euid {
                return Err(format!(
                    "{} is a symbolic link owned by another user (uid {})",
                    next.display(),
                    meta.uid()
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(format!("{}: too many symbolic links", next.display()));
            }
            let target =
                std::fs::read_link(&next).map_err(|e| format!("{}: {e}", next.display()))?;
            if target.is_absolute() {
                here = PathBuf::from("/");
            }
            push_components(&mut pending, &target);
            continue;
        }
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", next.display()));
        }
        check_dir(&next, euid)?;
        here = next;
    }
    Ok(())
}

/// Pushes the normal and `..` components of `path` so that its first one is popped first.
fn push_components(pending: &mut Vec<PathBuf>, path: &Path) {
    let parts: Vec<PathBuf> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(PathBuf::from(n)),
            Component::ParentDir => Some(PathBuf::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

/// A directory others may write into is safe only with the sticky bit, or when it is ours.
fn check_dir(dir: &Path, euid: u32) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let world_writable = meta.mode() & 0o002 != 0;
    let sticky = meta.mode() & 0o1000 != 0;
    if world_writable && !sticky && meta.uid() != euid {
        return Err(format!(
            "{} is writable by every user (mode {:o}, no sticky bit)",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Checks an opened file's metadata: a regular file owned by `euid`, one link, none of the
/// `forbidden` mode bits (`0o077` for a private file, `0o022` for one nobody else may write).
///
/// # Errors
/// Why the file is not trusted.
pub fn check_owned_file(meta: &Metadata, euid: u32, forbidden: u32) -> Result<(), String> {
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    if meta.uid() != euid {
        return Err(format!("owned by uid {}, not by this user", meta.uid()));
    }
    if meta.nlink() != 1 {
        return Err(format!("has {} hard links", meta.nlink()));
    }
    if meta.mode() & forbidden != 0 {
        return Err(format!(
            "mode {:o} lets other users in (want none of {forbidden:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ozaki-private-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn own_directories_and_sticky_tmp_pass() {
        let uid = effective_uid().unwrap();
        let d = scratch("ok");
        check_dir_chain(&d, uid).unwrap();
        check_dir_chain(Path::new("/tmp"), uid).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_world_writable_folder_without_sticky_bit_fails_unless_ours() {
        let uid = effective_uid().unwrap();
        let d = scratch("open");
        let open = d.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        check_dir_chain(&open.join("sub"), uid).unwrap_err();
        // Ours: fine. As someone else (any other uid): refused.
        check_dir_chain(&open, uid).unwrap();
        let err = check_dir_chain(&open, uid.wrapping_add(1)).unwrap_err();
        assert!(err.contains("writable by every user"), "{err}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        check_dir_chain(&open, uid.wrapping_add(1)).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn links_are_followed_only_when_root_or_we_own_them() {
        let uid = effective_uid().unwrap();
        let d = scratch("link");
        let real = d.join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.join("via");
        std::os::unix::fs::symlink("real", &link).unwrap();
        // Our own link (or root's): followed, and the target checked.
        check_dir_chain(&link, uid).unwrap();
        check_dir_chain(&link.join("..").join("via"), uid).unwrap();
        // Seen by a user who owns neither (when the tests run as root, the link is root's and
        // trusted; as another user it is someone else's).
        if uid != 0 {
            let err = check_dir_chain(&link, uid.wrapping_add(1)).unwrap_err();
            assert!(err.contains("symbolic link owned by another user"), "{err}");
        }
        let loop_a = d.join("a");
        std::os::unix::fs::symlink("a", &loop_a).unwrap();
        assert!(
            check_dir_chain(&loop_a, uid)
                .unwrap_err()
                .contains("too many")
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn owned_files_need_one_link_and_a_private_mode() {
        let uid = effective_uid().unwrap();
        let d = scratch("file");
        let f = d.join("f");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_owned_file(&std::fs::metadata(&f).unwrap(), uid, 0o077).unwrap();
        let err = check_owned_file(&std::fs::metadata(&f).unwrap(), uid + 1, 0o077).unwrap_err();
        assert!(err.contains("owned by uid"), "{err}");
        std::fs::hard_link(&f, d.join("g")).unwrap();
        let err = check_owned_file(&std::fs::metadata(&f).unwrap(), uid, 0o077).unwrap_err();
        assert!(err.contains("2 hard links"), "{err}");
        std::fs::remove_file(d.join("g")).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = check_owned_file(&std::fs::metadata(&f).unwrap(), uid, 0o077).unwrap_err();
        assert!(err.contains("mode 644"), "{err}");
        check_owned_file(&std::fs::metadata(&f).unwrap(), uid, 0o022).unwrap();
        assert!(check_owned_file(&std::fs::metadata(&d).unwrap(), uid, 0).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
