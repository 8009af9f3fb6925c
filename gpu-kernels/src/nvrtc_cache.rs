//! Run-time compilation of `kernels/*.cu` to CUBIN for the device's own architecture, with a
//! disk cache.
//!
//! The cache lives in `$XDG_CACHE_HOME/ozaki` or `~/.cache/ozaki`, created 0700. A cached
//! binary runs on the GPU with the user's rights, so one is loaded only when both it and its
//! folder belong to the user and nobody else can write them, and no other user can redirect
//! a folder above it (`ozaki_core::private_path`); it is read through the handle that was
//! checked. Anything else is ignored (and the kernels are compiled in memory). Entries are keyed by a hash of the source, the
//! compile options, the architecture, the driver version and the NVRTC version, so an
//! upgrade of any of them compiles afresh.

use crate::error::{Context, GpuError};
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// NVRTC options shared by every kernel file (the architecture is added per device).
pub const OPTIONS: &[&str] = &["-std=c++17", "--extra-device-vectorization"];

/// The `--gpu-architecture` value for compute capability `major.minor`: the `a` variant
/// (arch-specific instructions, e.g. sm_90a) where one exists, plain `sm_XY` otherwise.
pub fn arch_for(major: i32, minor: i32) -> String {
    if major >= 9 && minor == 0 {
        format!("sm_{major}{minor}a")
    } else {
        format!("sm_{major}{minor}")
    }
}

/// Stable 64-bit FNV-1a over the parts, with separators (std's hasher is not stable across
/// Rust versions, and the key must be).
pub fn cache_key(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain((part.len() as u64).to_le_bytes().iter()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The cache folder this process would use (not created).
pub fn cache_dir() -> Option<PathBuf> {
    let base = ozaki_core::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            ozaki_core::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("ozaki"))
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `meta` belongs to us and is writable by nobody else.
fn private(meta: &fs::Metadata) -> bool {
    meta.uid() == euid() && meta.mode() & 0o022 == 0
}

/// Creates the cache folder (0700) if needed; returns it only if it is trustworthy: ours,
/// writable by nobody else, not a symbolic link, and every folder above it passing
/// `ozaki_core::private_path::check_dir_chain` (another user who could rename a folder on
/// the way could swap the cache for their own).
pub fn ensure_private_dir(dir: &Path) -> Option<&Path> {
    if let Some(parent) = dir.parent() {
        let _ = fs::create_dir_all(parent);
    }
    let _ = fs::DirBuilder::new().mode(0o700).create(dir);
    let meta = fs::symlink_metadata(dir).ok()?;
    let chain = dir.parent().map_or(Ok(()), |p| {
        ozaki_core::private_path::check_dir_chain(p, euid())
    });
    match chain {
        Ok(()) if meta.is_dir() && private(&meta) => Some(dir),
        Ok(()) => {
            tracing::warn!(dir = %dir.display(), "kernel cache folder is not private to this user; not using it");
            None
        }
        Err(why) => {
            tracing::warn!(dir = %dir.display(), %why, "kernel cache folder cannot be trusted; not using it");
            None
        }
    }
}

/// Reads a cached CUBIN if the file is a regular file (no symlink) owned by us, with one
/// link, not writable by group or others, in a folder chain that passes
/// `check_dir_chain`, and looks like an ELF image. The checks are made on the opened handle
/// (`fstat`) and the bytes are read from that same handle, so the file checked is the file
/// loaded.
pub fn read_trusted(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    if let Some(dir) = path.parent()
        && let Err(why) = ozaki_core::private_path::check_dir_chain(dir, euid())
    {
        tracing::warn!(path = %path.display(), %why, "cached kernel binary's folder cannot be trusted; ignored");
        return None;
    }
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if let Err(why) = ozaki_core::private_path::check_owned_file(&meta, euid(), 0o022) {
        tracing::warn!(path = %path.display(), %why, "cached kernel binary not private to this user; ignored");
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes).ok()?;
    (bytes.len() > 4 && &bytes[..4] == b"\x7fELF").then_some(bytes)
}

/// Writes `bytes` to `path` atomically (0600 temporary file, then rename).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600))?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// NVRTC's version as (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32), GpuError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .ctx("nvrtcVersion")?;
    Ok((major, minor))
}

/// Compiles `src` to a CUBIN for `arch` (e.g. `sm_90a`); the error carries NVRTC's log.
pub fn compile_cubin(src: &str, name: &str, arch: &str) -> Result<Vec<u8>, GpuError> {
    compile_with(src, name, arch, &[]).map(|(cubin, _)| cubin)
}

/// ptxas's resource report (registers, stack frame, spills per kernel) for `src` on `arch`,
/// so tests can assert that no kernel spills to local memory.
pub fn resource_report(src: &str, name: &str, arch: &str) -> Result<String, GpuError> {
    compile_with(src, name, arch, &["--ptxas-options=--verbose"]).map(|(_, log)| log)
}

fn compile_with(
    src: &str,
    name: &str,
    arch: &str,
    extra: &[&str],
) -> Result<(Vec<u8>, String), GpuError> {
    use cudarc::nvrtc::{result, sys};
    let csrc =
        CString::new(src).map_err(|_| GpuError::Unsupported("NUL in kernel source".into()))?;
    let cname =
        CString::new(name).map_err(|_| GpuError::Unsupported("NUL in kernel name".into()))?;
    let prog = result::create_program(&csrc, Some(&cname)).ctx("nvrtcCreateProgram")?;
    let mut opts: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(format!("--gpu-architecture={arch}"));
    opts.extend(extra.iter().map(|s| s.to_string()));
    let read_log = |prog| {
        // SAFETY: prog is live; the log is read before destroying it.
        unsafe { result::get_program_log(prog) }
            .map(|l| {
                l.iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8 as char)
                    .collect::<String>()
            })
            .unwrap_or_default()
    };
    // SAFETY: prog is a live program; options are valid C strings (compile_program converts).
    let compiled = unsafe { result::compile_program(prog, &opts) };
    let out = match compiled {
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: prog compiled successfully; the buffer has the size NVRTC reported.
            unsafe {
                sys::nvrtcGetCUBINSize(prog, &mut size)
                    .result()
                    .ctx("nvrtcGetCUBINSize")?;
                let mut cubin = vec![0u8; size];
                sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut _)
                    .result()
                    .ctx("nvrtcGetCUBIN")?;
                Ok((cubin, read_log(prog)))
            }
        }
        Err(e) => Err(GpuError::Cuda(format!(
            "NVRTC compile of {name} for {arch} failed ({e:?}): {}",
            read_log(prog)
        ))),
    };
    // SAFETY: prog is live and not used afterwards.
    let _ = unsafe { result::destroy_program(prog) };
    match &out {
        Ok((c, _)) if c.is_empty() => Err(GpuError::Cuda(format!(
            "NVRTC produced no CUBIN for {arch}"
        ))),
        _ => out,
    }
}

/// Where the CUBIN of (`src`, `arch`, `driver`) is cached, if a private cache folder exists.
pub fn cache_path(src: &str, arch: &str, driver: i32) -> Option<PathBuf> {
    let (maj, min) = nvrtc_version().ok()?;
    let key = cache_key(&[
        src.as_bytes(),
        OPTIONS.join(" ").as_bytes(),
        arch.as_bytes(),
        &driver.to_le_bytes(),
        &maj.to_le_bytes(),
        &min.to_le_bytes(),
    ]);
    let dir = cache_dir()?;
    let dir = ensure_private_dir(&dir)?;
    Some(dir.join(format!("ozaki-{key:016x}-{arch}.cubin")))
}

/// The CUBIN for `src`: from the private cache when a trusted entry exists, else compiled
/// (and stored, best effort). Returns the bytes and whether they came from the cache.
pub fn cubin_cached(
    src: &str,
    name: &str,
    arch: &str,
    driver: i32,
) -> Result<(Vec<u8>, bool), GpuError> {
    let path = cache_path(src, arch, driver);
    if let Some(bytes) = path.as_deref().and_then(read_trusted) {
        return Ok((bytes, true));
    }
    let cubin = compile_cubin(src, name, arch)?;
    if let Some(p) = &path
        && let Err(e) = write_private(p, &cubin)
    {
        tracing::debug!(path = %p.display(), error = %e, "could not cache kernel binary");
    }
    Ok((cubin, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("ozaki-cache-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn cache_folder_is_created_private_and_a_shared_one_is_refused() {
        let d = scratch("dir");
        let dir = ensure_private_dir(&d).expect("fresh folder is usable");
        assert_eq!(fs::metadata(dir).unwrap().mode() & 0o777, 0o700);
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            ensure_private_dir(&d).is_none(),
            "world-writable cache folder must not be trusted"
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn only_private_regular_elf_files_are_loaded() {
        let d = scratch("files");
        ensure_private_dir(&d).unwrap();
        let good = d.join("good.cubin");
        write_private(&good, b"\x7fELF-payload").unwrap();
        assert_eq!(
            read_trusted(&good).as_deref(),
            Some(&b"\x7fELF-payload"[..])
        );
        assert_eq!(fs::metadata(&good).unwrap().mode() & 0o777, 0o600);
        // writable by the group: a planted binary could have been swapped in
        let shared = d.join("shared.cubin");
        write_private(&shared, b"\x7fELF-payload").unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o664)).unwrap();
        assert!(read_trusted(&shared).is_none());
        // a symlink to a good file is not followed
        let link = d.join("link.cubin");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(read_trusted(&link).is_none());
        // not an ELF image
        let junk = d.join("junk.cubin");
        write_private(&junk, b"#!/bin/sh").unwrap();
        assert!(read_trusted(&junk).is_none());
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_hard_link_or_an_untrusted_folder_above_is_refused() {
        let d = scratch("chain");
        ensure_private_dir(&d).unwrap();
        let good = d.join("good.cubin");
        write_private(&good, b"\x7fELF-payload").unwrap();
        let hard = d.join("hard.cubin");
        fs::hard_link(&good, &hard).unwrap();
        assert!(
            read_trusted(&hard).is_none(),
            "a second name could be anyone's"
        );
        fs::remove_file(&hard).unwrap();
        assert!(read_trusted(&good).is_some());
        if euid() == 0 {
            // As root the test plays another user: nobody's open folder, and nobody's link.
            let nobody = 65534;
            let open = d.join("open");
            fs::create_dir(&open).unwrap();
            fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
            std::os::unix::fs::chown(&open, Some(nobody), Some(nobody)).unwrap();
            let inner = open.join("ozaki");
            assert!(
                ensure_private_dir(&inner).is_none(),
                "below nobody's open folder"
            );
            let planted = inner.join("k.cubin");
            write_private(&planted, b"\x7fELF-payload").unwrap();
            assert!(read_trusted(&planted).is_none());
            let link = d.join("via");
            std::os::unix::fs::symlink(&d, &link).unwrap();
            std::os::unix::fs::lchown(&link, Some(nobody), Some(nobody)).unwrap();
            assert!(read_trusted(&link.join("good.cubin")).is_none());
            assert!(ensure_private_dir(&link.join("sub")).is_none());
        }
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn cache_key_changes_with_every_part() {
        let base = cache_key(&[b"src", b"sm_90a", b"13000"]);
        assert_ne!(base, cache_key(&[b"src ", b"sm_90a", b"13000"]));
        assert_ne!(base, cache_key(&[b"src", b"sm_90", b"13000"]));
        assert_ne!(base, cache_key(&[b"src", b"sm_90a", b"13010"]));
        assert_ne!(
            cache_key(&[b"ab", b"c"]),
            cache_key(&[b"a", b"bc"]),
            "separators matter"
        );
        assert_eq!(arch_for(9, 0), "sm_90a");
        assert_eq!(arch_for(8, 6), "sm_86");
    }
}
