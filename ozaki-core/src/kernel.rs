//! The exact small-integer products of the CPU route: per-modulus residue products with
//! k-blocking, and the coarse magnitude product `G` of accurate scaling.
//!
//! Operands are *packed*: op(A) row-major (`a[i * k + l]`), op(B) column-major
//! (`b[j * k + l]`), so every output is a dot product of two contiguous `i16` slices. The
//! dot product is written as a plain widening multiply-add reduction, which LLVM turns into
//! `pmaddwd` (SSE2/AVX2) without any `unsafe` or target features. Outputs are distributed
//! over `threads` scoped threads by column blocks; no allocation inside the loops.

use crate::blas::Uplo;
use crate::residues::{K_BLOCK, reduce_i32};

/// Columns per work item (keeps a B panel of `COL_BLOCK * k` in cache while rows stream).
const COL_BLOCK: usize = 16;
/// Rows per tile.
const ROW_BLOCK: usize = 64;

/// Exact `sum_l a_l b_l` of two `i16` slices whose products sum within `i32`.
#[inline]
pub fn dot_i16(a: &[i16], b: &[i16]) -> i32 {
    // Four independent accumulators over 8-wide chunks let the vectoriser keep several
    // `pmaddwd` chains in flight.
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0i32; 16];
    let chunks = n / 16;
    for c in 0..chunks {
        let (x, y) = (&a[c * 16..c * 16 + 16], &b[c * 16..c * 16 + 16]);
        for t in 0..16 {
            acc[t] += i32::from(x[t]) * i32::from(y[t]);
        }
    }
    let mut s: i32 = acc.iter().sum();
    for l in chunks * 16..n {
        s += i32::from(a[l]) * i32::from(b[l]);
    }
    s
}

/// Whether output `(i, j)` is computed: everything, or one triangle (dsyrk).
#[inline]
fn wanted(tri: Option<Uplo>, i: usize, j: usize) -> bool {
    match tri {
        None => true,
        Some(Uplo::Upper) => i <= j,
        Some(Uplo::Lower) => i >= j,
    }
}

/// Runs `body(j0, j1, out_cols)` over column blocks on `threads` threads, where `out` is a
/// column-major output with `m` elements per column, split by columns.
fn par_columns<T: Send>(
    out: &mut [T],
    m: usize,
    n: usize,
    threads: usize,
    body: impl Fn(usize, usize, &mut [T]) + Sync,
) {
    if m == 0 || n == 0 {
        return;
    }
    let threads = threads.max(1).min(n.div_ceil(COL_BLOCK));
    if threads <= 1 {
        for (blk, chunk) in out.chunks_mut(COL_BLOCK * m).enumerate() {
            let j0 = blk * COL_BLOCK;
            body(j0, (j0 + COL_BLOCK).min(n), chunk);
        }
        return;
    }
    // Interleave blocks across threads (triangles make work per block uneven).
    let mut per_thread: Vec<Vec<(usize, &mut [T])>> = (0..threads).map(|_| Vec::new()).collect();
    for (blk, chunk) in out.chunks_mut(COL_BLOCK * m).enumerate() {
        per_thread[blk % threads].push((blk, chunk));
    }
    // Started under the host library's spawn hook (`crate::spawn`: the shim's blocks the
    // program's signals in them from their first instruction).
    std::thread::scope(|s| {
        crate::spawn::spawning(|| {
            for work in per_thread {
                let body = &body;
                s.spawn(move || {
                    for (blk, chunk) in work {
                        let j0 = blk * COL_BLOCK;
                        body(j0, (j0 + COL_BLOCK).min(n), chunk);
                    }
                });
            }
        })
    });
}

/// The blocked loop the packed products share: over column blocks (in parallel, see
/// [`par_columns`], `col_len` output elements per column), row blocks of `ROW_BLOCK`, then the
/// entries `(i, j)` that `tri` wants, calling `entry(cols, e, a_i, b_j)` with `e = (j - j0) m + i`
/// the entry's index within the column block `cols`.
#[allow(clippy::too_many_arguments)]
fn for_each_entry<T: Send, E: Sync>(
    out: &mut [T],
    col_len: usize,
    a: &[E],
    b: &[E],
    m: usize,
    n: usize,
    k: usize,
    tri: Option<Uplo>,
    threads: usize,
    entry: impl Fn(&mut [T], usize, &[E], &[E]) + Sync,
) {
    par_columns(out, col_len, n, threads, |j0, j1, cols| {
        for i0 in (0..m).step_by(ROW_BLOCK) {
            let i1 = (i0 + ROW_BLOCK).min(m);
            for j in j0..j1 {
                let bj = &b[j * k..(j + 1) * k];
                for i in i0..i1 {
                    if !wanted(tri, i, j) {
                        continue;
                    }
                    entry(cols, (j - j0) * m + i, &a[i * k..(i + 1) * k], bj);
                }
            }
        }
    });
}

/// Centred residues modulo `m_t` of `A^(t) B^(t)` for packed residue planes (`a`: m x k
/// row-major, `b`: n x k column-major), written to `out[(i + j m) * stride + offset]`
/// (entry-major, so the `r` residues of one entry are adjacent for the reconstruction).
/// With `tri`, only that triangle is computed (the rest is left as is).
#[allow(clippy::too_many_arguments)]
pub fn residue_product(
    a: &[i16],
    b: &[i16],
    m: usize,
    n: usize,
    k: usize,
    modulus: u32,
    tri: Option<Uplo>,
    out: &mut [i8],
    stride: usize,
    offset: usize,
    threads: usize,
) {
    assert!(a.len() >= m * k && b.len() >= n * k && out.len() >= m * n * stride && offset < stride);
    for_each_entry(
        &mut out[..m * n * stride],
        m * stride,
        a,
        b,
        m,
        n,
        k,
        tri,
        threads,
        |cols, e, ai, bj| {
            let v = if k <= K_BLOCK {
                reduce_i32(dot_i16(ai, bj), modulus)
            } else {
                let mut s = 0i32;
                for l0 in (0..k).step_by(K_BLOCK) {
                    let l1 = (l0 + K_BLOCK).min(k);
                    s += reduce_i32(dot_i16(&ai[l0..l1], &bj[l0..l1]), modulus);
                }
                reduce_i32(s, modulus)
            };
            cols[e * stride + offset] = v as i8;
        },
    );
}

/// Block length for the coarse product: `|ā b̄| <= 4096`, so `2^18` products stay below 2^31.
const COARSE_BLOCK: usize = 1 << 18;

/// The exact coarse product `G = Ā B̄` (column-major m x n, `u64`) of packed coarse
/// magnitudes in `[0, 64]`. With `tri`, only that triangle is computed (the rest is 0).
pub fn coarse_product(
    a: &[i16],
    b: &[i16],
    m: usize,
    n: usize,
    k: usize,
    tri: Option<Uplo>,
    threads: usize,
) -> Vec<u64> {
    let mut g = vec![0u64; m * n];
    for_each_entry(&mut g, m, a, b, m, n, k, tri, threads, |cols, e, ai, bj| {
        let mut s = 0u64;
        for l0 in (0..k).step_by(COARSE_BLOCK) {
            let l1 = (l0 + COARSE_BLOCK).min(k);
            s += dot_i16(&ai[l0..l1], &bj[l0..l1]) as u64;
        }
        cols[e] = s;
    });
    g
}

/// `(sum_l a_l b_l, sum_l (a_l b_l)^2)` of two `f64` slices (vectorisable; estimates).
#[inline]
pub fn dot2_f64(a: &[f64], b: &[f64]) -> (f64, f64) {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let (mut s1, mut s2) = ([0.0f64; 8], [0.0f64; 8]);
    let chunks = n / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for t in 0..8 {
            let p = x[t] * y[t];
            s1[t] += p;
            s2[t] += p * p;
        }
    }
    let (mut r1, mut r2): (f64, f64) = (s1.iter().sum(), s2.iter().sum());
    for l in chunks * 8..n {
        let p = a[l] * b[l];
        r1 += p;
        r2 += p * p;
    }
    (r1, r2)
}

/// The fp64 products `H = P Q` and `H2 = (P∘P)(Q∘Q)` (column-major m x n each) of packed
/// operands (`p`: m x k rows, `q`: n x k columns), in one pass; with `tri`, only that
/// triangle (the rest is 0).
pub fn f64_product2(
    p: &[f64],
    q: &[f64],
    m: usize,
    n: usize,
    k: usize,
    tri: Option<Uplo>,
    threads: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut h = vec![(0.0f64, 0.0f64); m * n];
    for_each_entry(&mut h, m, p, q, m, n, k, tri, threads, |cols, e, pi, qj| {
        cols[e] = dot2_f64(pi, qj);
    });
    h.into_iter().unzip()
}

/// Calls `f(j, rows, col)` for every column `j` with the wanted row range `rows` and the
/// column's slice of the column-major `m x n` destination (the reconstruction epilogue).
pub fn for_each_column<T: Send>(
    out: &mut [T],
    m: usize,
    n: usize,
    tri: Option<Uplo>,
    threads: usize,
    f: impl Fn(usize, std::ops::Range<usize>, &mut [T]) + Sync,
) {
    par_columns(&mut out[..m * n], m, n, threads, |j0, j1, cols| {
        for j in j0..j1 {
            let rows = crate::blas::column_rows(j, m, tri);
            f(j, rows, &mut cols[(j - j0) * m..(j - j0 + 1) * m]);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moduli::centred;
    use crate::testutil::Rng;

    #[test]
    fn residue_product_matches_direct_sums_with_and_without_blocking() {
        let mut rng = Rng::new(5);
        for &(m, n, k) in &[(1, 1, 1), (3, 17, 5), (65, 33, 40), (2, 2, K_BLOCK + 3)] {
            for &modulus in &[256u32, 173] {
                let half = modulus as i64 / 2;
                let a: Vec<i16> = (0..m * k)
                    .map(|_| rng.int_in(-half, half - 1 + (modulus as i64 % 2)) as i16)
                    .collect();
                let b: Vec<i16> = (0..n * k)
                    .map(|_| {
                        if rng.uniform() < 0.5 {
                            -(half as i16)
                        } else {
                            rng.int_in(-half, half - 1) as i16
                        }
                    })
                    .collect();
                for threads in [1, 3] {
                    let mut out = vec![0i8; 2 * m * n];
                    residue_product(&a, &b, m, n, k, modulus, None, &mut out, 2, 1, threads);
                    for j in 0..n {
                        for i in 0..m {
                            let s: i64 = (0..k)
                                .map(|l| i64::from(a[i * k + l]) * i64::from(b[j * k + l]))
                                .sum();
                            assert_eq!(i32::from(out[2 * (i + j * m) + 1]), centred(s, modulus));
                            assert_eq!(out[2 * (i + j * m)], 0);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn triangles_only_touch_their_half() {
        let (n, k) = (20, 7);
        let a: Vec<i16> = (0..n * k).map(|x| (x % 11) as i16 - 5).collect();
        let mut out = vec![99i8; n * n];
        residue_product(&a, &a, n, n, k, 251, Some(Uplo::Lower), &mut out, 1, 0, 2);
        for j in 0..n {
            for i in 0..j {
                assert_eq!(out[i + j * n], 99);
            }
        }
        let g = coarse_product(&a, &a, n, n, k, Some(Uplo::Upper), 2);
        assert_eq!(g[1], 0); // (1, 0) is below the diagonal
    }
}
