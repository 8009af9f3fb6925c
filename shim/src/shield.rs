//! The wrapper around every function of the library that the loader, libc or the C runtime
//! calls (constructors, `fork`/`exit` handlers, TLS destructors, loader callbacks): a panic
//! unwinding out of one of them would abort the host program, so each runs its whole body
//! inside [`shielded`], which a test checks over the sources.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `f`, swallowing a panic: the body of every function the loader, libc or the C
/// runtime calls (constructors, `fork`/`exit` handlers, TLS destructors, loader callbacks),
/// where an unwinding panic would abort the host program.
pub(crate) fn shielded(f: impl FnOnce()) {
    shielded_or((), f);
}

/// As [`shielded`], for a callback that returns a value: `fallback` after a panic.
pub(crate) fn shielded_or<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_panic_in_a_shielded_callback_returns_its_fallback() {
        assert_eq!(shielded_or(7, || -> i32 { panic!("in a callback") }), 7);
        let mut ran = false;
        shielded(|| {
            ran = true;
            panic!("in a handler");
        });
        assert!(ran);
    }

    fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "bin") {
                    sources(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push((
                    p.display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                ));
            }
        }
    }

    /// Every function of the library that the loader, libc or the C runtime calls (an
    /// `extern "C" fn` that is not an exported BLAS or device entry point: constructors,
    /// `fork`/`exit` handlers, loader callbacks) runs its whole body inside [`shielded`]: a
    /// panic unwinding into them would abort the host program.
    #[test]
    fn every_callback_from_c_runs_inside_catch_unwind() {
        let mut files = Vec::new();
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut checked = Vec::new();
        for (path, text) in &files {
            let mut rest = text.as_str();
            while let Some(at) = rest.find("extern \"C\" fn ") {
                let line_start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
                let head = &rest[line_start..at];
                let after = &rest[at..];
                rest = &after[1..];
                // Function-pointer types and the exported entry points (which decide
                // themselves what may unwind) are not callbacks.
                if head.contains("type ")
                    || head.contains(':')
                    || head.contains("pub")
                    || head.trim_start().starts_with("//")
                {
                    continue;
                }
                let name: String = after["extern \"C\" fn ".len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let body = &after[after.find('{').unwrap() + 1..];
                let first = body
                    .lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty() && !l.starts_with("//"))
                    .unwrap_or("");
                assert!(
                    first.starts_with("shielded(")
                        || first.starts_with("shielded_or(")
                        || first.starts_with("crate::shield::shielded"),
                    "{path}: `{name}` is called from C but its body starts with `{first}`, \
                     outside `shielded`"
                );
                checked.push(name);
            }
        }
        for needed in [
            "_ozaki_shim_on_load",
            "before_fork",
            "flush_at_exit",
            "visit",
        ] {
            assert!(
                checked.iter().any(|n| n == needed),
                "{needed} was not found among {checked:?}"
            );
        }
    }
}
