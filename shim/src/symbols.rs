//! The table of exported BLAS names: plain `const` data, no dependencies.
//!
//! One row per exported name. A name is `prefix + base + suffix`, where the suffix is `64_`
//! for ILP64 rows and empty for LP64 rows, so the table gives exactly the names real clients
//! call (`ecosystem-facts.md` §0):
//!
//! | client | names |
//! |---|---|
//! | C / Fortran programs, Debian numpy/scipy, PySCF's C libraries | `dgemm_`, `dsyrk_`, `cblas_dgemm`, `cblas_dsyrk` |
//! | pip SciPy wheels (`libscipy_openblas`, LP64) | `scipy_dgemm_`, `scipy_dsyrk_`, `scipy_cblas_dgemm`, `scipy_cblas_dsyrk` |
//! | pip NumPy >= 2 wheels (`libscipy_openblas64_`, ILP64) | `scipy_cblas_dgemm64_`, `scipy_cblas_dsyrk64_`, `scipy_dgemm_64_`, `scipy_dsyrk_64_` |
//! | other ILP64 stacks (OpenBLAS `SYMBOLSUFFIX=64_`) | `dgemm_64_`, `dsyrk_64_`, `cblas_dgemm64_`, `cblas_dsyrk64_` |
//!
//! Each exported name forwards to the same name in the real BLAS, so the integer width is fixed
//! by the row (no suffix detection as in libblastrampoline). ILP64 CBLAS rows take 64-bit
//! dimensions but keep the 32-bit `int` enums (layout, transpose, uplo), as OpenBLAS does.
//!
//! [`SymId`] (an index into [`SYMBOLS`]) is what the entry points carry; `exports.rs` holds one
//! hand-written stub per row, and `tests/exports.rs` checks that the table, the built
//! library's dynamic symbols and `include/ozaki_shim.h` name exactly the same set.

use crate::lazy::Lazy;
use ozaki_core::trace::Routine;
use std::ffi::{CStr, CString};

/// Calling convention of an exported name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    /// Fortran: every argument by pointer, plus hidden trailing `size_t` lengths of the
    /// character arguments (gfortran >= 8 convention).
    Fortran,
    /// CBLAS: scalars by value, an explicit layout argument, `int` enums.
    Cblas,
}

/// Integer width of the dimension arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// 32-bit integers.
    Lp64,
    /// 64-bit integers; the name gets the suffix `64_`.
    Ilp64,
}

impl Width {
    /// Name suffix of this width.
    pub const fn suffix(self) -> &'static str {
        match self {
            Width::Lp64 => "",
            Width::Ilp64 => "64_",
        }
    }
}

/// One exported name.
#[derive(Debug, Clone, Copy)]
pub struct Symbol {
    /// Name in the reference BLAS (`dgemm_`, `cblas_dgemm`, ...).
    pub base: &'static str,
    /// Routine it computes.
    pub routine: Routine,
    /// Calling convention.
    pub abi: Abi,
    /// Vendor prefix: `""` or `"scipy_"` (the pip wheels' scipy-openblas).
    pub prefix: &'static str,
    /// Integer width.
    pub width: Width,
    /// One-line doc (also the doc line of the stub in `exports.rs` and the header).
    pub doc: &'static str,
}

impl Symbol {
    /// The exported name: prefix + base + suffix.
    pub fn expand(&self) -> String {
        format!("{}{}{}", self.prefix, self.base, self.width.suffix())
    }

    /// Whether the dimension arguments are 64-bit.
    pub fn ilp64(&self) -> bool {
        self.width == Width::Ilp64
    }
}

const fn row(
    base: &'static str,
    routine: Routine,
    abi: Abi,
    prefix: &'static str,
    width: Width,
    doc: &'static str,
) -> Symbol {
    Symbol {
        base,
        routine,
        abi,
        prefix,
        width,
        doc,
    }
}

use Abi::{Cblas, Fortran};
use Routine::{Dgemm, Dsyrk};
use Width::{Ilp64, Lp64};

/// Every exported name, in [`SymId`] order.
pub const SYMBOLS: [Symbol; 16] = [
    row(
        "dgemm_",
        Dgemm,
        Fortran,
        "",
        Lp64,
        "Fortran dgemm (LP64): C, Fortran and reference LAPACK callers.",
    ),
    row(
        "dsyrk_",
        Dsyrk,
        Fortran,
        "",
        Lp64,
        "Fortran dsyrk (LP64): C, Fortran and reference LAPACK callers.",
    ),
    row(
        "cblas_dgemm",
        Dgemm,
        Cblas,
        "",
        Lp64,
        "CBLAS dgemm (LP64): Debian numpy `a @ b`.",
    ),
    row(
        "cblas_dsyrk",
        Dsyrk,
        Cblas,
        "",
        Lp64,
        "CBLAS dsyrk (LP64): Debian numpy `a @ a.T`.",
    ),
    row(
        "dgemm_",
        Dgemm,
        Fortran,
        "scipy_",
        Lp64,
        "scipy-openblas Fortran dgemm (LP64): pip SciPy `scipy.linalg.blas.dgemm`.",
    ),
    row(
        "dsyrk_",
        Dsyrk,
        Fortran,
        "scipy_",
        Lp64,
        "scipy-openblas Fortran dsyrk (LP64): pip SciPy `scipy.linalg.blas.dsyrk`.",
    ),
    row(
        "cblas_dgemm",
        Dgemm,
        Cblas,
        "scipy_",
        Lp64,
        "scipy-openblas CBLAS dgemm (LP64).",
    ),
    row(
        "cblas_dsyrk",
        Dsyrk,
        Cblas,
        "scipy_",
        Lp64,
        "scipy-openblas CBLAS dsyrk (LP64).",
    ),
    row(
        "cblas_dgemm",
        Dgemm,
        Cblas,
        "scipy_",
        Ilp64,
        "scipy-openblas64 CBLAS dgemm (ILP64 dims, int enums): pip NumPy >= 2 `a @ b`.",
    ),
    row(
        "cblas_dsyrk",
        Dsyrk,
        Cblas,
        "scipy_",
        Ilp64,
        "scipy-openblas64 CBLAS dsyrk (ILP64 dims, int enums): pip NumPy >= 2 `a @ a.T`.",
    ),
    row(
        "dgemm_",
        Dgemm,
        Fortran,
        "scipy_",
        Ilp64,
        "scipy-openblas64 Fortran dgemm (ILP64).",
    ),
    row(
        "dsyrk_",
        Dsyrk,
        Fortran,
        "scipy_",
        Ilp64,
        "scipy-openblas64 Fortran dsyrk (ILP64).",
    ),
    row(
        "dgemm_",
        Dgemm,
        Fortran,
        "",
        Ilp64,
        "Fortran dgemm (ILP64, OpenBLAS `64_` suffix).",
    ),
    row(
        "dsyrk_",
        Dsyrk,
        Fortran,
        "",
        Ilp64,
        "Fortran dsyrk (ILP64, OpenBLAS `64_` suffix).",
    ),
    row(
        "cblas_dgemm",
        Dgemm,
        Cblas,
        "",
        Ilp64,
        "CBLAS dgemm (ILP64 dims, int enums, OpenBLAS `64_` suffix).",
    ),
    row(
        "cblas_dsyrk",
        Dsyrk,
        Cblas,
        "",
        Ilp64,
        "CBLAS dsyrk (ILP64 dims, int enums, OpenBLAS `64_` suffix).",
    ),
];

/// Index of an exported name in [`SYMBOLS`]; what entry points, forwarding slots and trace
/// records carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SymId(pub u8);

#[allow(missing_docs)]
impl SymId {
    pub const DGEMM: SymId = SymId(0);
    pub const DSYRK: SymId = SymId(1);
    pub const CBLAS_DGEMM: SymId = SymId(2);
    pub const CBLAS_DSYRK: SymId = SymId(3);
    pub const SCIPY_DGEMM: SymId = SymId(4);
    pub const SCIPY_DSYRK: SymId = SymId(5);
    pub const SCIPY_CBLAS_DGEMM: SymId = SymId(6);
    pub const SCIPY_CBLAS_DSYRK: SymId = SymId(7);
    pub const SCIPY_CBLAS_DGEMM64: SymId = SymId(8);
    pub const SCIPY_CBLAS_DSYRK64: SymId = SymId(9);
    pub const SCIPY_DGEMM64: SymId = SymId(10);
    pub const SCIPY_DSYRK64: SymId = SymId(11);
    pub const DGEMM64: SymId = SymId(12);
    pub const DSYRK64: SymId = SymId(13);
    pub const CBLAS_DGEMM64: SymId = SymId(14);
    pub const CBLAS_DSYRK64: SymId = SymId(15);
}

/// Number of exported names.
pub const COUNT: usize = SYMBOLS.len();

static NAMES: Lazy<Vec<CString>> = Lazy::new();

fn names() -> &'static [CString] {
    NAMES.get_or_init(|| {
        SYMBOLS
            .iter()
            .map(|s| CString::new(s.expand()).expect("names hold no NUL"))
            .collect()
    })
}

impl SymId {
    /// Every id, in table order.
    pub fn all() -> impl Iterator<Item = SymId> {
        (0..COUNT as u8).map(SymId)
    }

    /// The table row.
    pub fn symbol(self) -> &'static Symbol {
        &SYMBOLS[self.0 as usize]
    }

    /// The exported name as a C string (for `dlsym`).
    pub fn c_name(self) -> &'static CStr {
        &names()[self.0 as usize]
    }

    /// The exported name.
    pub fn name(self) -> &'static str {
        self.c_name().to_str().expect("names are ASCII")
    }

    /// Position in per-symbol arrays.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn table_expands_to_exactly_the_names_clients_call() {
        let got: BTreeSet<&str> = SymId::all().map(SymId::name).collect();
        let want: BTreeSet<&str> = [
            "dgemm_",
            "dsyrk_",
            "cblas_dgemm",
            "cblas_dsyrk",
            "scipy_dgemm_",
            "scipy_dsyrk_",
            "scipy_cblas_dgemm",
            "scipy_cblas_dsyrk",
            "scipy_cblas_dgemm64_",
            "scipy_cblas_dsyrk64_",
            "scipy_dgemm_64_",
            "scipy_dsyrk_64_",
            "dgemm_64_",
            "dsyrk_64_",
            "cblas_dgemm64_",
            "cblas_dsyrk64_",
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want);
        assert_eq!(got.len(), COUNT, "no name may appear twice");
    }

    #[test]
    fn named_ids_point_at_their_rows() {
        assert_eq!(SymId::DGEMM.name(), "dgemm_");
        assert_eq!(SymId::SCIPY_CBLAS_DGEMM64.name(), "scipy_cblas_dgemm64_");
        assert_eq!(SymId::SCIPY_DSYRK64.name(), "scipy_dsyrk_64_");
        assert_eq!(SymId::CBLAS_DSYRK64.name(), "cblas_dsyrk64_");
        assert_eq!(SymId::DSYRK64.name(), "dsyrk_64_");
        for id in SymId::all() {
            let s = id.symbol();
            assert_eq!(s.ilp64(), id.name().ends_with("64_"), "{}", id.name());
            assert_eq!(
                s.abi == Abi::Cblas,
                id.name().contains("cblas_"),
                "{}",
                id.name()
            );
            let routine = if id.name().contains("gemm") {
                Routine::Dgemm
            } else {
                Routine::Dsyrk
            };
            assert_eq!(s.routine, routine, "{}", id.name());
        }
    }
}
