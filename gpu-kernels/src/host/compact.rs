//! Operands that are small blocks of larger arrays, packed on the host before they travel.
//!
//! The pipeline moves each operand's whole span, `(cols - 1) ld + rows` elements, so that the
//! device copy keeps the caller's leading dimension. For a block of a much larger array
//! (PySCF's CCSD multiplies 81 x 231 blocks of C with `ldc = 8649`) that span is mostly the
//! other columns' rows: 16 MB moved each way for 150 KB of C. Where an operand's span is at
//! least [`WASTE`] times its elements, it is packed here into a contiguous copy (leading
//! dimension = its rows) and the call runs on the packed operands; C's packed result is
//! written into the caller's C only after the device work succeeded (the host path's
//! contract: a failure leaves C as it was, for the vendor fallback).

use super::write_back::write_back_rows;
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
    for j in 0..cols {
        out.extend_from_slice(&src[j * ld..j * ld + rows]);
    }
    Some(out)
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

/// A packed copy of C for the call, when C is worth packing: its values when `read`, else
/// zeros (the caller writes the result back into C once the call succeeded).
fn c_operand(c: &[f64], m: usize, n: usize, ldc: usize, read: bool) -> Option<Vec<f64>> {
    if !wasteful(m, n, ldc) {
        return None;
    }
    if read {
        return pack(c, m, n, ldc);
    }
    let mut out = Vec::new();
    out.try_reserve_exact(m * n).ok()?;
    out.resize(m * n, 0.0);
    Some(out)
}

/// Runs `run` on `args` with each wasteful operand packed ([`WASTE`]), and writes a packed
/// C's result into `c` once `run` succeeded; `None` when no operand is worth packing (the
/// caller runs the call as it is).
pub(super) fn gemm<R>(
    args: &GemmArgs,
    c: &mut [f64],
    run: impl FnOnce(&GemmArgs, &mut [f64]) -> Result<R, GpuError>,
) -> Option<Result<R, GpuError>> {
    let (m, n) = (args.m, args.n);
    let ((ra, ca), (rb, cb)) = (args.a_dims(), args.b_dims());
    if !(wasteful(ra, ca, args.lda) || wasteful(rb, cb, args.ldb) || wasteful(m, n, args.ldc)) {
        return None;
    }
    let (mut pa, mut pb) = (None, None);
    let (a, lda) = operand(args.a, ra, ca, args.lda, &mut pa);
    let (b, ldb) = operand(args.b, rb, cb, args.ldb, &mut pb);
    let mut pc = c_operand(c, m, n, args.ldc, args.beta != 0.0);
    let packed = GemmArgs {
        a,
        lda,
        b,
        ldb,
        ldc: if pc.is_some() { m } else { args.ldc },
        ..*args
    };
    Some(match &mut pc {
        None => run(&packed, c),
        Some(p) => run(&packed, p).inspect(|_| write_back_rows(c, args.ldc, p, m, n, None)),
    })
}

/// [`gemm`] for a syrk: A and C packed where wasteful; only the `uplo` triangle of a packed
/// C is written back (the other one is the caller's, untouched).
pub(super) fn syrk<R>(
    args: &SyrkArgs,
    c: &mut [f64],
    run: impl FnOnce(&SyrkArgs, &mut [f64]) -> Result<R, GpuError>,
) -> Option<Result<R, GpuError>> {
    let n = args.n;
    let (ra, ca) = args.a_dims();
    if !(wasteful(ra, ca, args.lda) || wasteful(n, n, args.ldc)) {
        return None;
    }
    let mut pa = None;
    let (a, lda) = operand(args.a, ra, ca, args.lda, &mut pa);
    let mut pc = c_operand(c, n, n, args.ldc, args.beta != 0.0);
    let packed = SyrkArgs {
        a,
        lda,
        ldc: if pc.is_some() { n } else { args.ldc },
        ..*args
    };
    Some(match &mut pc {
        None => run(&packed, c),
        Some(p) => {
            run(&packed, p).inspect(|_| write_back_rows(c, args.ldc, p, n, n, Some(args.uplo)))
        }
    })
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

    /// A block of a large array (C 5 x 7 with ldc 40, B with ldb 30): the packed call gives
    /// the reference's result bit for bit, only the block's entries of C change (the other
    /// rows between its columns keep their values), and the packed call saw contiguous
    /// operands.
    #[test]
    fn a_block_of_a_larger_array_is_computed_packed_and_written_into_its_block_only() {
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
            let seen = gemm(&args, &mut got, |p, pc| {
                assert_eq!((p.ldc, pc.len()), (m, m * n), "C packed");
                assert_eq!(p.ldb, if transb == Trans::No { k } else { n }, "B packed");
                assert_eq!(p.lda, lda, "A (ld barely above its rows) left as it is");
                reference_gemm(p, pc);
                Ok(7)
            });
            assert_eq!(seen.map(|r| r.ok()), Some(Some(7)));
            assert_eq!(got, want, "{transa:?} {transb:?} beta {beta}");
        }
    }

    /// A failed run leaves the caller's C exactly as it was.
    #[test]
    fn a_failed_packed_call_leaves_c_untouched() {
        let (a, b) = (values(100, 1), values(100, 2));
        let c0 = values(400, 3);
        let args = GemmArgs {
            ldc: 40,
            ..GemmArgs::product(4, 4, 4, &a, &b)
        };
        let mut c = c0.clone();
        let r = gemm(&args, &mut c, |_, pc| {
            pc.fill(f64::NAN);
            Err::<(), _>(GpuError::Cuda("device fault".into()))
        });
        assert!(matches!(r, Some(Err(_))));
        assert_eq!(c, c0);
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
    /// trailing updates), run as they are.
    #[test]
    fn dense_operands_are_not_packed() {
        let (a, b) = (values(64 * 64, 1), values(64 * 64, 2));
        let mut c = values(64 * 64, 3);
        let args = GemmArgs::product(60, 60, 60, &a, &b);
        let args = GemmArgs {
            lda: 64,
            ldb: 64,
            ldc: 64,
            ..args
        };
        assert!(gemm(&args, &mut c, |_, _| Ok(())).is_none());
    }

    /// A packed syrk writes back its triangle only; the caller's other triangle, and the
    /// rows between C's columns, keep their values (beta = 0 included, where the packed C
    /// starts as zeros).
    #[test]
    fn a_packed_syrk_writes_its_triangle_only() {
        for (uplo, beta) in [(Uplo::Lower, 0.0), (Uplo::Upper, 2.0)] {
            let (n, k, lda, ldc) = (4, 3, 20, 25);
            let a = values(lda * k, 5);
            let c0 = values(ldc * n, 6);
            let args = SyrkArgs {
                uplo,
                trans: Trans::No,
                n,
                k,
                alpha: 1.0,
                a: &a,
                lda,
                beta,
                ldc,
            };
            let mut c = c0.clone();
            let r = syrk(&args, &mut c, |p, pc| {
                assert_eq!((p.lda, p.ldc), (n, n));
                pc.fill(9.0);
                Ok(())
            });
            assert!(matches!(r, Some(Ok(()))));
            for j in 0..n {
                for i in 0..ldc.min(c.len() - j * ldc) {
                    let inside = i < n
                        && match uplo {
                            Uplo::Lower => i >= j,
                            Uplo::Upper => i <= j,
                        };
                    let want = if inside { 9.0 } else { c0[i + j * ldc] };
                    assert_eq!(c[i + j * ldc], want, "{uplo:?} ({i}, {j})");
                }
            }
        }
    }
}
