//! Reporting an illegal argument the way the reference BLAS does, when no vendor BLAS is there
//! to report it itself (with a vendor, the call goes to the vendor unchanged: its checks, its
//! handler).
//!
//! In two steps, because the handler is the program's code and may leave by `longjmp` (R) or
//! by throwing a C++ exception: [`handler_for`] finds the handler and prepares its arguments
//! (ordinary Rust, run inside `catch_unwind` by the caller), and [`Handler::call`] calls it
//! from a frame with nothing to clean up, through `extern "C-unwind"` function types, so a
//! foreign exception unwinds through to the program's `catch`.

use super::{DGEMM, DSYRK, Illegal, Report};
use crate::forward;
use crate::symbols::SymId;
use libc::{c_char, c_int, c_void};
use ozaki_core::trace::Routine;
use std::ffi::CStr;

/// A prepared call of an error handler.
#[derive(Debug, Clone)]
pub enum Handler {
    /// `xerbla_(srname, &arg, 6)`, with the CBLAS globals set as the reference has them
    /// (`Some(row_major)`) for a CBLAS call.
    Fortran {
        /// The handler.
        f: *mut c_void,
        /// Six-character routine name, NUL-terminated.
        srname: &'static [u8; 7],
        /// The info code passed.
        arg: i64,
        /// ILP64 info.
        ilp64: bool,
        /// `RowMajorStrg` during the report, for a CBLAS call.
        cblas: Option<bool>,
    },
    /// `cblas_xerbla(arg, rout, form, value)`.
    Cblas {
        /// The handler.
        f: *mut c_void,
        /// The number passed.
        arg: i64,
        /// `"cblas_dgemm"` / `"cblas_dsyrk"`.
        rout: &'static CStr,
        /// printf format.
        form: &'static CStr,
        /// The value `form` prints.
        value: c_int,
        /// ILP64 handler.
        ilp64: bool,
        /// `RowMajorStrg` during the report (`None`: left alone).
        row_major: Option<bool>,
    },
    /// No handler anywhere: this line goes to stderr instead (the reference would stop the
    /// program; we never kill the host).
    Message(String),
}

/// Finds the error handler the reference BLAS would call for `bad`, by global lookup so
/// that a program's own `XERBLA`/`cblas_xerbla` wins (the BLAS test suites rely on that).
///
/// Handler names are tried in order: Fortran reports go to `<prefix>xerbla_<64_>`, then
/// `xerbla_`; CBLAS enum reports to `<prefix>cblas_xerbla<64_>` (and LAPACK's ILP64
/// `cblas_xerbla_64`), then plain `cblas_xerbla`. When the preferred kind of handler is missing
/// the other kind gets the caller's parameter position.
pub fn handler_for(id: SymId, bad: &Illegal) -> Handler {
    let sym = id.symbol();
    let ilp64 = sym.ilp64();
    let sfx = sym.width.suffix();
    let prefixed = |base: &str| format!("{}{base}{sfx}", sym.prefix);
    let fortran_handler = || {
        let first = prefixed("xerbla_");
        forward::global_symbol(&first).or_else(|| {
            if first != "xerbla_" {
                forward::global_symbol("xerbla_")
            } else {
                None
            }
        })
    };
    let cblas_handler = || {
        let first = prefixed("cblas_xerbla");
        forward::global_symbol(&first).or_else(|| {
            let second = if ilp64 {
                "cblas_xerbla_64"
            } else {
                "cblas_xerbla"
            };
            if first != second {
                forward::global_symbol(second)
            } else {
                None
            }
        })
    };
    let cblas_rout: &'static CStr = if sym.routine == Routine::Dgemm {
        c"cblas_dgemm"
    } else {
        c"cblas_dsyrk"
    };
    let message = |info: i64, routine: &str| {
        Handler::Message(format!(
            "no xerbla_ found; reference message: Parameter {info} to routine {routine} was incorrect (call skipped, C untouched)"
        ))
    };
    match bad.report {
        Report::Fortran { srname, arg, cblas } => {
            if let Some(f) = fortran_handler() {
                Handler::Fortran {
                    f,
                    srname,
                    arg,
                    ilp64,
                    cblas,
                }
            } else if let (Some(_), Some(f)) = (cblas, cblas_handler()) {
                Handler::Cblas {
                    f,
                    arg: bad.info,
                    rout: cblas_rout,
                    form: c"",
                    value: 0,
                    ilp64,
                    row_major: None,
                }
            } else {
                let name = match cblas {
                    Some(_) => cblas_rout.to_str().unwrap_or("?"),
                    None => std::str::from_utf8(&srname[..6]).unwrap_or("?").trim_end(),
                };
                message(bad.info, name)
            }
        }
        Report::Cblas {
            rout,
            arg,
            row_major,
            form,
            value,
        } => {
            if let Some(f) = cblas_handler() {
                Handler::Cblas {
                    f,
                    arg,
                    rout,
                    form,
                    value,
                    ilp64,
                    row_major: Some(row_major),
                }
            } else if let Some(f) = fortran_handler() {
                let srname = if sym.routine == Routine::Dgemm {
                    DGEMM
                } else {
                    DSYRK
                };
                Handler::Fortran {
                    f,
                    srname,
                    arg: bad.info,
                    ilp64,
                    cblas: None,
                }
            } else {
                message(bad.info, rout.to_str().unwrap_or("?"))
            }
        }
    }
}

impl Handler {
    /// Calls the handler. It may return, `longjmp` out or throw through this frame: nothing
    /// here needs cleaning up (the CBLAS globals stay set on such an exit, as they do when
    /// the same handler leaves reference CBLAS that way).
    ///
    /// # Safety
    /// - the handler found by [`handler_for`] has the reference signature.
    pub unsafe fn call(&self) {
        match *self {
            Handler::Fortran {
                f,
                srname,
                arg,
                ilp64,
                cblas,
            } => {
                let globals = cblas.map(CblasGlobals::set);
                // SAFETY: reference `xerbla(srname, info)` with the hidden length; ILP64
                // handlers read an 8-byte info, LP64 ones 4 bytes.
                unsafe { call_fortran_xerbla(f, srname, arg, ilp64) };
                if let Some(g) = globals {
                    g.reset();
                }
            }
            Handler::Cblas {
                f,
                arg,
                rout,
                form,
                value,
                ilp64,
                row_major,
            } => {
                let globals = row_major.map(CblasGlobals::set);
                // SAFETY: reference `cblas_xerbla(info, rout, form, ...)` signature.
                unsafe { call_cblas_xerbla(f, arg, rout, form, value, ilp64) };
                if let Some(g) = globals {
                    g.reset();
                }
            }
            Handler::Message(ref line) => {
                let _ = std::panic::catch_unwind(|| crate::config::notice(line));
            }
        }
    }
}

/// The reference CBLAS globals `CBLAS_CallFromC` and `RowMajorStrg` (when the BLAS defines
/// them), set as reference `cblas_dgemm`/`cblas_dsyrk` have them while reporting, and reset to
/// 0 by [`CblasGlobals::reset`] as those functions do before returning.
struct CblasGlobals {
    call_from_c: Option<*mut c_int>,
    row_major: Option<*mut c_int>,
}

impl CblasGlobals {
    fn set(row_major: bool) -> CblasGlobals {
        let g = CblasGlobals {
            call_from_c: forward::global_symbol("CBLAS_CallFromC").map(|p| p.cast()),
            row_major: forward::global_symbol("RowMajorStrg").map(|p| p.cast()),
        };
        // SAFETY: both are the reference CBLAS globals of type `int` (cblas_globals.c).
        unsafe {
            if let Some(p) = g.call_from_c {
                p.write(1);
            }
            if let Some(p) = g.row_major {
                p.write(c_int::from(row_major));
            }
        }
        g
    }

    fn reset(self) {
        // SAFETY: as in `set`.
        unsafe {
            for p in [self.call_from_c, self.row_major].into_iter().flatten() {
                p.write(0);
            }
        }
    }
}

/// # Safety
/// - `f` is a Fortran `xerbla(character*(*), integer)` taking `int64` info when `ilp64`.
unsafe fn call_fortran_xerbla(f: *mut c_void, srname: &[u8; 7], info: i64, ilp64: bool) {
    type F = unsafe extern "C-unwind" fn(*const c_char, *const c_void, usize);
    // SAFETY: the contract above.
    let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(f) };
    let info32 = info as i32;
    let p: *const c_void = if ilp64 {
        (&raw const info).cast()
    } else {
        (&raw const info32).cast()
    };
    // SAFETY: srname is 6 bytes, passed with its length as gfortran does.
    unsafe { f(srname.as_ptr().cast(), p, 6) }
}

/// # Safety
/// - `f` is `cblas_xerbla(CBLAS_INT, const char*, const char*, ...)`, `CBLAS_INT` 64-bit when `ilp64`.
unsafe fn call_cblas_xerbla(
    f: *mut c_void,
    info: i64,
    rout: &CStr,
    form: &CStr,
    value: c_int,
    ilp64: bool,
) {
    if ilp64 {
        type F = unsafe extern "C-unwind" fn(i64, *const c_char, *const c_char, ...);
        // SAFETY: the contract above.
        let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(f) };
        // SAFETY: form consumes at most one int vararg.
        unsafe { f(info, rout.as_ptr(), form.as_ptr(), value) }
    } else {
        type F = unsafe extern "C-unwind" fn(c_int, *const c_char, *const c_char, ...);
        // SAFETY: the contract above.
        let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(f) };
        // SAFETY: form consumes at most one int vararg.
        unsafe { f(info as c_int, rout.as_ptr(), form.as_ptr(), value) }
    }
}
