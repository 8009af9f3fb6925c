//! `cublasLtMatmul` in the hook's terms: the matmul descriptor's and the four matrix layouts'
//! attributes, read through the real cuBLASLt getters, and the rule for which calls are a
//! plain fp64 product the hook may route.
//!
//! A call is fp64 when the compute type is `CUBLAS_COMPUTE_64F`, the scale type and A, B, C
//! and D are `CUDA_R_64F`; any other call goes to cuBLASLt at once, unrecorded. An fp64 call
//! is a plain product, D = alpha op(A) op(B) + beta C, when in addition: no epilogue (the
//! default one), no bias, no FP8 scale or amax pointers, no atomic synchronisation, C not
//! transposed, every layout column-major and not planar, the layouts' rows and columns fit
//! op(A) m x k, op(B) k x n, C and D m x n, every layout has the same batch count, and C is D
//! (same address, leading dimension and batch stride) unless beta = 0, when C is not read.
//! Any other fp64 call is forwarded and its record says why. The algorithm and workspace the
//! caller passed only choose how cuBLASLt computes the same product; the emulation needs
//! neither.

use super::Status;
use super::decode::{Batch, CUBLAS_COMPUTE_64F, CUDA_R_64F};
use super::real::{CUBLASLT, real};
use core::ffi::{c_int, c_void};

/// `cublasLtMatmulDesc_t`.
pub(crate) type Desc = *mut c_void;
/// `cublasLtMatrixLayout_t`.
pub(crate) type Layout = *mut c_void;

/// The descriptor attributes (`cublasLtMatmulDescAttributes_t`) the hook reads.
mod attr {
    pub const COMPUTE_TYPE: i32 = 0;
    pub const SCALE_TYPE: i32 = 1;
    pub const POINTER_MODE: i32 = 2;
    pub const TRANSA: i32 = 3;
    pub const TRANSB: i32 = 4;
    pub const TRANSC: i32 = 5;
    pub const EPILOGUE: i32 = 7;
    pub const BIAS_POINTER: i32 = 8;
    /// A, B, C, D scale and the amax of D (FP8 only).
    pub const SCALE_POINTERS: [i32; 5] = [17, 18, 19, 20, 21];
    /// Atomic synchronisation: chunks of D's rows and columns.
    pub const ATOMIC_CHUNKS: [i32; 2] = [27, 28];
    /// Atomic synchronisation: the input and output counters.
    pub const ATOMIC_COUNTERS: [i32; 2] = [29, 30];
}

/// The layout attributes (`cublasLtMatrixLayoutAttribute_t`).
mod layout_attr {
    pub const TYPE: i32 = 0;
    pub const ORDER: i32 = 1;
    pub const ROWS: i32 = 2;
    pub const COLS: i32 = 3;
    pub const LD: i32 = 4;
    pub const BATCH_COUNT: i32 = 5;
    pub const STRIDED_BATCH_OFFSET: i32 = 6;
    pub const PLANE_OFFSET: i32 = 7;
}

/// `CUBLASLT_EPILOGUE_DEFAULT`.
const EPILOGUE_DEFAULT: u32 = 1;
/// `CUBLASLT_ORDER_COL`.
const ORDER_COL: i32 = 0;
/// `CUBLASLT_POINTER_MODE_HOST`.
pub(crate) const POINTER_MODE_HOST: i32 = 0;

/// What the hook needs of a matmul descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DescAttrs {
    pub compute: i32,
    pub scale: i32,
    pub pointer_mode: i32,
    /// `cublasOperation_t` of A, B and C.
    pub trans: [i32; 3],
    pub epilogue: u32,
    pub bias: usize,
    /// Any FP8 scale or amax pointer set.
    pub scale_pointers: bool,
    /// Atomic synchronisation asked for (chunks or counters set).
    pub atomics: bool,
}

impl Default for DescAttrs {
    /// A descriptor as `cublasLtMatmulDescCreate(64F, 64F)` leaves it.
    fn default() -> DescAttrs {
        DescAttrs {
            compute: CUBLAS_COMPUTE_64F,
            scale: CUDA_R_64F,
            pointer_mode: POINTER_MODE_HOST,
            trans: [0; 3],
            epilogue: EPILOGUE_DEFAULT,
            bias: 0,
            scale_pointers: false,
            atomics: false,
        }
    }
}

/// One matrix layout's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LayoutAttrs {
    pub dtype: u32,
    pub order: i32,
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
    pub batch: i32,
    pub stride: i64,
    pub plane: i64,
}

impl LayoutAttrs {
    /// A column-major fp64 `rows x cols` layout with leading dimension `ld`, one matrix.
    #[cfg(test)]
    pub fn col(rows: u64, cols: u64, ld: i64) -> LayoutAttrs {
        LayoutAttrs {
            dtype: CUDA_R_64F as u32,
            order: ORDER_COL,
            rows,
            cols,
            ld,
            batch: 1,
            stride: 0,
            plane: 0,
        }
    }
}

type DescGet = unsafe extern "C" fn(Desc, i32, *mut c_void, usize, *mut usize) -> Status;
type LayoutGet = unsafe extern "C" fn(Layout, i32, *mut c_void, usize, *mut usize) -> Status;

/// One attribute of type `T` through `get`; `None` when the library refuses it.
///
/// # Safety
/// `get` is a cuBLASLt attribute getter and `obj` a descriptor or layout it accepts; `T` is
/// the attribute's documented type.
unsafe fn read<T: Default, O: Copy>(
    get: unsafe extern "C" fn(O, i32, *mut c_void, usize, *mut usize) -> Status,
    obj: O,
    attr: i32,
) -> Option<T> {
    let mut v = T::default();
    let mut written = 0usize;
    let size = core::mem::size_of::<T>();
    // SAFETY: the caller's contract; `v` is a valid buffer of `size` bytes.
    let status = unsafe { get(obj, attr, (&mut v as *mut T).cast(), size, &mut written) };
    (status == 0 && written == size).then_some(v)
}

/// The descriptor's attributes; `None` when cuBLASLt lacks the getter or refuses one of the
/// attributes every version has. The newer ones (FP8 scales, atomics) a library that does not
/// know them cannot have set: refused, they count as unset.
pub(crate) fn desc(d: Desc) -> Option<DescAttrs> {
    let get = real!(cublasLtMatmulDescGetAttribute: DescGet, unhooked in CUBLASLT)?;
    // SAFETY: the real getter on the caller's descriptor, each attribute with its type.
    unsafe {
        let pointer = |a| read::<usize, Desc>(get, d, a).unwrap_or(0) != 0;
        Some(DescAttrs {
            compute: read::<i32, Desc>(get, d, attr::COMPUTE_TYPE)?,
            scale: read::<i32, Desc>(get, d, attr::SCALE_TYPE)?,
            pointer_mode: read::<i32, Desc>(get, d, attr::POINTER_MODE)?,
            trans: [
                read::<i32, Desc>(get, d, attr::TRANSA)?,
                read::<i32, Desc>(get, d, attr::TRANSB)?,
                read::<i32, Desc>(get, d, attr::TRANSC)?,
            ],
            epilogue: read::<u32, Desc>(get, d, attr::EPILOGUE)?,
            bias: read::<usize, Desc>(get, d, attr::BIAS_POINTER)?,
            scale_pointers: attr::SCALE_POINTERS.into_iter().any(pointer),
            atomics: attr::ATOMIC_CHUNKS
                .into_iter()
                .any(|a| read::<i32, Desc>(get, d, a).unwrap_or(0) != 0)
                || attr::ATOMIC_COUNTERS.into_iter().any(pointer),
        })
    }
}

/// A layout's attributes; `None` when cuBLASLt lacks the getter or refuses one.
pub(crate) fn layout(l: Layout) -> Option<LayoutAttrs> {
    use layout_attr::*;
    let get = real!(cublasLtMatrixLayoutGetAttribute: LayoutGet, unhooked in CUBLASLT)?;
    // SAFETY: the real getter on the caller's layout, each attribute with its type.
    unsafe {
        Some(LayoutAttrs {
            dtype: read::<u32, Layout>(get, l, TYPE)?,
            order: read::<i32, Layout>(get, l, ORDER)?,
            rows: read::<u64, Layout>(get, l, ROWS)?,
            cols: read::<u64, Layout>(get, l, COLS)?,
            ld: read::<i64, Layout>(get, l, LD)?,
            batch: read::<i32, Layout>(get, l, BATCH_COUNT)?,
            stride: read::<i64, Layout>(get, l, STRIDED_BATCH_OFFSET)?,
            plane: read::<i64, Layout>(get, l, PLANE_OFFSET)?,
        })
    }
}

/// Whether the call is fp64 throughout (compute, scale and all four matrices).
pub(crate) fn fp64(d: &DescAttrs, layouts: &[LayoutAttrs; 4]) -> bool {
    d.compute == CUBLAS_COMPUTE_64F
        && d.scale == CUDA_R_64F
        && layouts.iter().all(|l| l.dtype == CUDA_R_64F as u32)
}

/// An fp64 call as a column-major gemm: what the BLAS decoder and the batch need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Product {
    /// `cublasOperation_t` of A and B.
    pub ops: [c_int; 2],
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub lda: i64,
    pub ldb: i64,
    /// D's leading dimension (C's is the same, or C is not read).
    pub ldd: i64,
    /// Members, with A's, B's and D's batch strides.
    pub batch: Batch,
    /// Why the hook cannot compute it (the call then goes to cuBLASLt), if it cannot.
    pub refused: Option<String>,
}

/// The call as a product, and whether the hook can compute it (see the module doc).
/// `same_cd`: C and D are the same address; `beta_zero`: beta is known (host pointer mode) to
/// be 0. The shape is taken from D and op(A), so a record describes even a refused call.
pub(crate) fn product(
    d: &DescAttrs,
    [a, b, c, dd]: &[LayoutAttrs; 4],
    same_cd: bool,
    beta_zero: bool,
) -> Product {
    let [ta, tb, tc] = d.trans;
    let dim = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    let (m, n) = (dim(dd.rows), dim(dd.cols));
    let (a_rows, a_cols) = (dim(a.rows), dim(a.cols));
    let (b_rows, b_cols) = (dim(b.rows), dim(b.cols));
    let (a_m, k) = if ta == 0 {
        (a_rows, a_cols)
    } else {
        (a_cols, a_rows)
    };
    let (b_k, b_n) = if tb == 0 {
        (b_rows, b_cols)
    } else {
        (b_cols, b_rows)
    };
    let all = [a, b, c, dd];
    let refused = if d.epilogue != EPILOGUE_DEFAULT {
        Some(format!("epilogue {}: cuBLASLt", d.epilogue))
    } else if d.bias != 0 {
        Some("bias vector: cuBLASLt".into())
    } else if d.scale_pointers {
        Some("scale or amax pointers: cuBLASLt".into())
    } else if d.atomics {
        Some("atomic synchronisation: cuBLASLt".into())
    } else if tc != 0 {
        Some("C transposed: cuBLASLt".into())
    } else if all.iter().any(|l| l.order != ORDER_COL || l.plane != 0) {
        Some("a layout not plain column-major: cuBLASLt".into())
    } else if a_m != m || b_k != k || b_n != n || (c.rows, c.cols) != (dd.rows, dd.cols) {
        Some("layouts' shapes do not fit a product: cuBLASLt".into())
    } else if all.iter().any(|l| l.batch != dd.batch) {
        Some("layouts' batch counts differ: cuBLASLt".into())
    } else if !beta_zero && !same_cd {
        Some("C and D differ with beta != 0: cuBLASLt".into())
    } else if !beta_zero && (c.ld != dd.ld || (dd.batch > 1 && c.stride != dd.stride)) {
        Some("C and D at one address with different layouts: cuBLASLt".into())
    } else {
        None
    };
    Product {
        ops: [ta, tb],
        m,
        n,
        k,
        lda: a.ld,
        ldb: b.ld,
        ldd: dd.ld,
        batch: Batch {
            count: dd.batch.into(),
            strides: [a.stride, b.stride, dd.stride],
        },
        refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layouts(m: u64, n: u64, k: u64) -> [LayoutAttrs; 4] {
        [
            LayoutAttrs::col(m, k, m as i64),
            LayoutAttrs::col(k, n, k as i64),
            LayoutAttrs::col(m, n, m as i64),
            LayoutAttrs::col(m, n, m as i64),
        ]
    }

    #[test]
    fn a_plain_fp64_product_is_taken_with_its_shape_and_batch() {
        let d = DescAttrs {
            trans: [1, 0, 0],
            ..DescAttrs::default()
        };
        let mut l = layouts(64, 48, 32);
        l[0] = LayoutAttrs::col(32, 64, 40); // A stored k x m, transposed
        for x in &mut l {
            x.batch = 3;
        }
        l[0].stride = 40 * 64;
        l[1].stride = 0; // B shared by every member
        l[2].stride = 64 * 48;
        l[3].stride = 64 * 48;
        assert!(fp64(&d, &l));
        let p = product(&d, &l, true, false);
        assert_eq!(p.refused, None);
        assert_eq!(
            (p.m, p.n, p.k, p.lda, p.ldb, p.ldd),
            (64, 48, 32, 40, 32, 64)
        );
        assert_eq!(p.ops, [1, 0]);
        assert_eq!(
            p.batch,
            Batch {
                count: 3,
                strides: [40 * 64, 0, 64 * 48]
            }
        );
    }

    #[test]
    fn other_types_are_not_fp64() {
        let d = DescAttrs::default();
        let mut l = layouts(8, 8, 8);
        l[2].dtype = 0; // C in fp32
        assert!(!fp64(&d, &l));
        let pedantic = DescAttrs {
            compute: CUBLAS_COMPUTE_64F + 1,
            ..d
        };
        assert!(!fp64(&pedantic, &layouts(8, 8, 8)));
        let fp32_scale = DescAttrs { scale: 0, ..d };
        assert!(!fp64(&fp32_scale, &layouts(8, 8, 8)));
    }

    #[test]
    fn what_the_emulation_cannot_honour_is_refused_with_a_reason() {
        let plain = DescAttrs::default();
        let l = layouts(16, 16, 16);
        let why = |d: &DescAttrs, l: &[LayoutAttrs; 4], same, zero| {
            product(d, l, same, zero).refused.unwrap_or_default()
        };
        let bias = DescAttrs {
            epilogue: 4, // CUBLASLT_EPILOGUE_BIAS
            bias: 0x1000,
            ..plain
        };
        assert!(why(&bias, &l, true, false).contains("epilogue"));
        let only_bias = DescAttrs {
            bias: 0x1000,
            ..plain
        };
        assert!(why(&only_bias, &l, true, false).contains("bias"));
        let scaled = DescAttrs {
            scale_pointers: true,
            ..plain
        };
        assert!(why(&scaled, &l, true, false).contains("scale"));
        let atomics = DescAttrs {
            atomics: true,
            ..plain
        };
        assert!(why(&atomics, &l, true, false).contains("atomic"));
        let tc = DescAttrs {
            trans: [0, 0, 1],
            ..plain
        };
        assert!(why(&tc, &l, true, false).contains("C transposed"));
        let mut row = l;
        row[1].order = 1; // CUBLASLT_ORDER_ROW
        assert!(why(&plain, &row, true, false).contains("column-major"));
        let mut misfit = l;
        misfit[1] = LayoutAttrs::col(15, 16, 16);
        assert!(why(&plain, &misfit, true, false).contains("shapes"));
        let mut batches = l;
        batches[0].batch = 2;
        assert!(why(&plain, &batches, true, false).contains("batch counts"));
        // C != D: fine when beta = 0 (C is not read), refused otherwise
        assert!(why(&plain, &l, false, false).contains("C and D differ"));
        assert_eq!(product(&plain, &l, false, true).refused, None);
        let mut ld = l;
        ld[2].ld = 32;
        assert!(why(&plain, &ld, true, false).contains("different layouts"));
        assert_eq!(product(&plain, &l, true, false).refused, None);
    }
}
