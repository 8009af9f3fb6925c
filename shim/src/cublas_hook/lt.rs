//! `cublasLtMatmul` in the hook's terms: the matmul descriptor's and the four matrix layouts'
//! attributes, read through the real cuBLASLt getters, and the rule for which calls are a
//! plain fp64 product the hook may route.
//!
//! A call is fp64 when the compute type is `CUBLAS_COMPUTE_64F`, the scale type and A, B, C
//! and D are `CUDA_R_64F`; any other call goes to cuBLASLt at once, unrecorded. An fp64 call
//! is a plain product, D = alpha op(A) op(B) + beta C, when in addition: no epilogue (the
//! default one), no bias, no FP8 scale or amax pointers, no atomic synchronisation, C not
//! transposed, every layout column-major and not planar, the layouts' rows and columns fit
//! op(A) m x k, op(B) k x n, C and D m x n, every layout has the same batch count, and C is
//! either D (same address, leading dimension and batch stride) or, when beta != 0, a matrix
//! that does not overlap D: C is then copied into D on the caller's stream first
//! ([`copy_c_to_d`]) and the product computed in D (with beta = 0 C is not read at all).
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
    /// C's leading dimension and batch stride, when C must first be copied into D.
    pub copy_c: Option<(i64, i64)>,
}

/// The bytes a batch of column-major matrices spans from its first element.
fn extent(l: &LayoutAttrs, rows: u64) -> u64 {
    let cols = l.cols.max(1);
    let one = (l.ld.max(0) as u64)
        .saturating_mul(cols - 1)
        .saturating_add(rows);
    let batch = u64::try_from(l.batch.max(1) - 1).unwrap_or(0);
    (l.stride.unsigned_abs().saturating_mul(batch))
        .saturating_add(one)
        .saturating_mul(8)
}

/// Whether C's and D's memory overlap (C at `c`, D at `d`).
pub(crate) fn overlap(c: u64, cl: &LayoutAttrs, d: u64, dl: &LayoutAttrs) -> bool {
    let (ce, de) = (extent(cl, cl.rows), extent(dl, dl.rows));
    c < d.saturating_add(de) && d < c.saturating_add(ce)
}

/// The call as a product, and whether the hook can compute it (see the module doc).
/// `(c_addr, d_addr)`: where C and D are; `beta_zero`: beta is known (host pointer mode) to
/// be 0. The shape is taken from D and op(A), so a record describes even a refused call.
pub(crate) fn product(
    d: &DescAttrs,
    [a, b, c, dd]: &[LayoutAttrs; 4],
    (c_addr, d_addr): (u64, u64),
    beta_zero: bool,
) -> Product {
    let same_cd = c_addr == d_addr;
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
    } else if !beta_zero && !same_cd && overlap(c_addr, c, d_addr, dd) {
        Some("C and D overlap without being one matrix: cuBLASLt".into())
    } else if !beta_zero && same_cd && (c.ld != dd.ld || (dd.batch > 1 && c.stride != dd.stride)) {
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
        copy_c: (refused.is_none() && !beta_zero && !same_cd).then_some((c.ld, c.stride)),
        refused,
    }
}

/// `CUDA_MEMCPY2D`.
#[repr(C)]
struct Memcpy2D {
    src_x_in_bytes: usize,
    src_y: usize,
    src_memory_type: u32,
    src_host: *const c_void,
    src_device: u64,
    src_array: *mut c_void,
    src_pitch: usize,
    dst_x_in_bytes: usize,
    dst_y: usize,
    dst_memory_type: u32,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: *mut c_void,
    dst_pitch: usize,
    width_in_bytes: usize,
    height: usize,
}

/// `CU_MEMORYTYPE_DEVICE`.
const MEMORY_DEVICE: u32 = 2;

/// The copy of one `m x n` column-major matrix from `(src, src_ld)` to `(dst, dst_ld)`.
fn copy_2d(
    m: usize,
    n: usize,
    (src, src_ld): (u64, usize),
    (dst, dst_ld): (u64, usize),
) -> Memcpy2D {
    Memcpy2D {
        src_x_in_bytes: 0,
        src_y: 0,
        src_memory_type: MEMORY_DEVICE,
        src_host: core::ptr::null(),
        src_device: src,
        src_array: core::ptr::null_mut(),
        src_pitch: src_ld * 8,
        dst_x_in_bytes: 0,
        dst_y: 0,
        dst_memory_type: MEMORY_DEVICE,
        dst_host: core::ptr::null_mut(),
        dst_device: dst,
        dst_array: core::ptr::null_mut(),
        dst_pitch: dst_ld * 8,
        width_in_bytes: m * 8,
        height: n,
    }
}

type Memcpy2DAsync = unsafe extern "C" fn(*const Memcpy2D, *mut c_void) -> c_int;

/// Copies every member's C (at `c`, leading dimension and batch stride `c_layout`) into D
/// (`first`'s C, the batch's strides) on `stream`, before the product is computed in D.
///
/// # Safety
/// C and D are device memory of the current context covering their `m x n` members with
/// their leading dimensions and strides, valid until the stream has passed the copies, and
/// they do not overlap.
pub(crate) unsafe fn copy_c_to_d(
    first: &gpu_kernels::ozaki::DeviceCall,
    batch: Batch,
    (c, (c_ld, c_stride)): (u64, (i64, i64)),
    stream: *mut c_void,
) -> Result<(), gpu_kernels::GpuError> {
    static ADDR: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let addr = ADDR
        .get_or_init(|| super::real::lookup(super::real::DRIVER, c"cuMemcpy2DAsync_v2", 0))
        .ok_or_else(|| gpu_kernels::GpuError::Unavailable("no cuMemcpy2DAsync_v2".into()))?;
    // SAFETY: the driver's cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *, CUstream).
    let f = unsafe { core::mem::transmute::<usize, Memcpy2DAsync>(addr) };
    let c_ld = usize::try_from(c_ld).unwrap_or(0);
    for i in 0..batch.count {
        let d = batch.member(first, i);
        let src = c.wrapping_add((i.wrapping_mul(c_stride) as u64).wrapping_mul(8));
        let copy = copy_2d(d.m, d.n, (src, c_ld), (d.c, d.ldc));
        // SAFETY: the caller's contract; `copy` describes two device matrices it covers.
        let code = unsafe { f(&copy, stream) };
        if code != 0 {
            return Err(gpu_kernels::GpuError::Cuda(format!(
                "cuMemcpy2DAsync (C into D) failed ({code})"
            )));
        }
    }
    Ok(())
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
        let p = product(&d, &l, (0xC000, 0xC000), false);
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
    fn c_and_d_overlap_only_where_their_bytes_do() {
        let one = LayoutAttrs::col(16, 16, 16); // 256 elements, 2048 bytes
        assert!(overlap(0x1000, &one, 0x1000 + 2047, &one));
        assert!(!overlap(0x1000, &one, 0x1000 + 2048, &one));
        assert!(!overlap(0x1000 + 2048, &one, 0x1000, &one));
        let batch = LayoutAttrs {
            batch: 3,
            stride: 512,
            ..one
        };
        // the third member of C ends at 2 * 512 + 256 elements
        assert!(overlap(0x1000, &batch, 0x1000 + 8 * 1279, &one));
        assert!(!overlap(0x1000, &batch, 0x1000 + 8 * 1280, &one));
    }

    #[test]
    fn the_copy_of_c_into_d_is_one_pitched_rectangle_per_member() {
        let c = copy_2d(5, 7, (0x1000, 9), (0x9000, 6));
        assert_eq!((c.src_device, c.src_pitch), (0x1000, 72));
        assert_eq!((c.dst_device, c.dst_pitch), (0x9000, 48));
        assert_eq!((c.width_in_bytes, c.height), (40, 7));
        assert_eq!((c.src_memory_type, c.dst_memory_type), (2, 2));
        // the driver's struct: 16 words of 8 bytes
        assert_eq!(core::mem::size_of::<Memcpy2D>(), 128);
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
        let at = |same: bool| (0xC000, if same { 0xC000 } else { 0x10_0000 });
        let why = |d: &DescAttrs, l: &[LayoutAttrs; 4], same, zero| {
            product(d, l, at(same), zero).refused.unwrap_or_default()
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
        // one address, two layouts
        let mut ld = l;
        ld[2].ld = 32;
        assert!(why(&plain, &ld, true, false).contains("different layouts"));
        let same = product(&plain, &l, at(true), false);
        assert_eq!((same.refused, same.copy_c), (None, None));
        // C != D: C is not read with beta = 0, copied into D first otherwise
        let apart = product(&plain, &l, at(false), true);
        assert_eq!((apart.refused, apart.copy_c), (None, None));
        let copied = product(&plain, &ld, at(false), false);
        assert_eq!((copied.refused, copied.copy_c), (None, Some((32, 0))));
        // ... unless they overlap: D starting inside C's 16 x 16 (ld 16) columns
        let inside = product(&plain, &l, (0xC000, 0xC000 + 8 * 20), false);
        assert!(inside.refused.unwrap_or_default().contains("overlap"));
    }
}
