//! A and B that are small blocks of larger arrays, packed on the host before they travel.
//!
//! The pipeline moves A's and B's whole spans, `(cols - 1) ld + rows` elements, so that the
//! device copy keeps the caller's leading dimension. For a block of a much larger array
//! (PySCF's CCSD multiplies blocks of arrays with leading dimension 8649) that span is mostly
//! the other columns' rows. Where an operand's span is at least [`WASTE`] times its elements,
//! it is packed here into a contiguous copy (leading dimension = its rows) and the call runs
//! on the packed operands. C needs no packing: the host path moves only its call's rows of
//! each column in either direction (`super::caller_c`).

use crate::error::GpuError;
use ozaki_core::blas::{GemmArgs, SyrkArgs, span};

/// Pack an operand whose span holds at least this many times its elements.
pub(super) const WASTE: usize = 2;

/// The largest operand packed, in elements (128 MiB): a packed copy is host memory beside
/// the caller's, which the pipeline's fixed pinned ring does not need, so a larger block
/// travels with its span as before.
pub(super) const MAX_PACKED: usize = 16 << 20;

/// Whether a `rows x cols` operand stored `ld` apart is worth packing.
fn wasteful(rows: usize, cols: usize, ld: usize) -> bool {
    cols > 1 && rows > 0 && rows * cols <= MAX_PACKED && span(rows, cols, ld) >= WASTE * rows * cols
}

/// The `rows x cols` block of `src` (stored `ld` apart) as a contiguous column-major copy;
/// `None` when the memory for it cannot be had (the call then runs unpacked).
fn pack(src: &[f64], rows: usize, cols: usize, ld: usize) -> Option<Vec<f64>> {
    let mut out = Vec::new();
    out.try_reserve_exact(rows * cols).ok()?;
    for col in columns(src, (rows, cols), ld) {
        out.extend_from_slice(col);
    }
    Some(out)
}

/// The columns of the `rows x cols` block of `src` stored `ld` apart, each `rows` long: what
/// a packed copy of the block holds one after the other.
pub(super) fn columns(
    src: &[f64],
    (rows, cols): (usize, usize),
    ld: usize,
) -> impl Iterator<Item = &[f64]> {
    (0..cols).map(move |j| &src[j * ld..j * ld + rows])
}

/// An operand as the call uses it: the caller's, or its packed copy.
fn operand<'a>(
    src: &'a [f64],
    rows: usize,
    cols: usize,
    ld: usize,
    packed: &'a mut Option<Vec<f64>>,
) -> (&'a [f64], usize) {
    if wasteful(rows, cols, ld) {
        *packed = pack(src, rows, cols, ld);
    }
    match packed {
        Some(p) => (p.as_slice(), rows),
        None => (src, ld),
    }
}

/// Runs `run` on `args` with A and B packed where wasteful ([`WASTE`]); `None` when neither
/// is worth packing (the caller runs the call as it is).
pub(super) fn gemm<R>(
    args: &GemmArgs,
    run: impl FnOnce(&GemmArgs) -> Result<R, GpuError>,
) -> Option<Result<R, GpuError>> {
    let ((ra, ca), (rb, cb)) = (args.a_dims(), args.b_dims());
    if !(wasteful(ra, ca, args.lda) || wasteful(rb, cb, args.ldb)) {
        return None;
    }
    let (mut pa, mut pb) = (None, None);
    let (a, lda) = operand(args.a, ra, ca, args.lda, &mut pa);
    let (b, ldb) = operand(args.b, rb, cb, args.ldb, &mut pb);
    Some(run(&GemmArgs {
        a,
        lda,
        b,
        ldb,
        ..*args
    }))
}

/// [`gemm`] for a syrk: A packed where wasteful.
pub(super) fn syrk<R>(
    args: &SyrkArgs,
    run: impl FnOnce(&SyrkArgs) -> Result<R, GpuError>,
) -> Option<Result<R, GpuError>> {
    let (ra, ca) = args.a_dims();
    if !wasteful(ra, ca, args.lda) {
        return None;
    }
    let mut pa = None;
    let (a, lda) = operand(args.a, ra, ca, args.lda, &mut pa);
    Some(run(&SyrkArgs { a, lda, ..*args }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::blas::{Trans, Uplo};
    use ozaki_core::testutil::reference_gemm;

    fn values(len: usize, seed: u64) -> Vec<f64> {
        (0..len)
            .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f64 / 250.0 - 2.0)
            .collect()
    }

    /// A block of a large array (B with ldb 30) is packed, A with lda barely above its rows
    /// is not, and C keeps the caller's leading dimension (the host path moves its rows
    /// itself): the packed call gives the reference's result bit for bit.
    #[test]
    fn a_block_of_a_larger_array_is_computed_packed() {
        for (transa, transb, beta) in [
            (Trans::No, Trans::No, 0.5),
            (Trans::Yes, Trans::No, 0.0),
            (Trans::No, Trans::Yes, 1.0),
            (Trans::Yes, Trans::Yes, -2.0),
        ] {
            let (m, n, k) = (5, 7, 9);
            let (lda, ldb, ldc) = (if transa == Trans::No { 6 } else { 10 }, 30, 40);
            let a = values(lda * 9, 1);
            let b = values(ldb * 9, 2);
            let c0 = values(ldc * 7, 3);
            let args = GemmArgs {
                transa,
                transb,
                m,
                n,
                k,
                alpha: 1.5,
                a: &a,
                lda,
                b: &b,
                ldb,
                beta,
                ldc,
            };
            let mut want = c0.clone();
            reference_gemm(&args, &mut want);
            let mut got = c0.clone();
            let seen = gemm(&args, |p| {
                assert_eq!(p.ldc, ldc, "C as the caller laid it out");
                assert_eq!(p.ldb, if transb == Trans::No { k } else { n }, "B packed");
                assert_eq!(p.lda, lda, "A (ld barely above its rows) left as it is");
                reference_gemm(p, &mut got);
                Ok(7)
            });
            assert_eq!(seen.map(|r| r.ok()), Some(Some(7)));
            assert_eq!(got, want, "{transa:?} {transb:?} beta {beta}");
        }
    }

    /// What is packed: a block whose span is at least twice its elements, up to
    /// [`MAX_PACKED`] elements; not a vector (one column), not a dense operand.
    #[test]
    fn blocks_of_larger_arrays_up_to_the_cap_are_packed() {
        assert!(wasteful(81, 231, 8649));
        assert!(wasteful(1000, 1000, 2100));
        assert!(!wasteful(1000, 1000, 1999), "span under twice the elements");
        assert!(!wasteful(4032, 64, 4096), "a trailing update of LAPACK");
        assert!(!wasteful(81, 1, 8649), "one column is contiguous");
        assert!(!wasteful(20000, 20000, 40000), "3.2 GB: over the cap");
        assert!(wasteful(4096, 4096, 8200), "128 MiB: at the cap");
    }

    /// Operands whose leading dimension is their row count, or close to it (LAPACK's
    /// trailing updates), run as they are, whatever C's leading dimension.
    #[test]
    fn dense_operands_are_not_packed() {
        let (a, b) = (values(64 * 64, 1), values(64 * 64, 2));
        let args = GemmArgs::product(60, 60, 60, &a, &b);
        let args = GemmArgs {
            lda: 64,
            ldb: 64,
            ldc: 6000,
            ..args
        };
        assert!(gemm(&args, |_| Ok(())).is_none());
    }

    /// A syrk's A that is a block of a larger array is packed; C keeps its leading
    /// dimension.
    #[test]
    fn a_syrk_packs_its_a_only() {
        let (n, k, lda, ldc) = (4, 3, 20, 25);
        let a = values(lda * k, 5);
        let args = SyrkArgs {
            uplo: Uplo::Lower,
            trans: Trans::No,
            n,
            k,
            alpha: 1.0,
            a: &a,
            lda,
            beta: 2.0,
            ldc,
        };
        let r = syrk(&args, |p| {
            assert_eq!((p.lda, p.ldc), (n, ldc));
            for l in 0..k {
                assert_eq!(&p.a[l * n..(l + 1) * n], &a[l * lda..l * lda + n]);
            }
            Ok(())
        });
        assert!(matches!(r, Some(Ok(()))));
        assert!(syrk(&SyrkArgs { lda: n, ..args }, |_| Ok(())).is_none());
    }
}
