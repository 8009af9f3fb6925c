//! The int8 x int8 -> int32 products of the emulated route: one cuBLASLt strided-batched
//! matmul for all moduli of a call, with the heuristic's algorithm cached per
//! shape so steady-state calls skip the search.
//!
//! Layout ("TN", what Hopper's IMMA/IGMMA kernels take): A planes hold op(A) row by row
//! (k contiguous, ld = kpad), B planes hold op(B) column by column (ld = kpad), D planes are
//! column-major int32 m x n (ld = m). With |residue| <= 128 every product term is <= 2^14,
//! so the int32 sums are exact for kpad <= 2^17 (checked by the caller).

use crate::error::{Context, GpuError};
use crate::memory::DeviceBuffer;
use cudarc::cublaslt::{result, sys};
use std::collections::HashMap;
use std::ffi::c_void;

/// Size of the cuBLASLt workspace (the value cuBLASLt recommends on Hopper).
pub const LT_WORKSPACE: usize = 32 << 20;

/// One GPU's cuBLASLt state: its handle (null when cuBLASLt is unavailable), the workspace
/// promised to the heuristic, and the algorithm chosen per product shape.
pub struct Lt {
    pub(crate) handle: sys::cublasLtHandle_t,
    pub(crate) workspace: DeviceBuffer,
    pub(crate) cache: AlgoCache,
}

impl Lt {
    /// The state around `handle` (null: no cuBLASLt) and its workspace, with an empty cache.
    pub(crate) fn new(handle: sys::cublasLtHandle_t, workspace: DeviceBuffer) -> Lt {
        Lt {
            handle,
            workspace,
            cache: AlgoCache::default(),
        }
    }
}

/// Largest inner dimension whose int32 sums of 128 x 128 terms cannot overflow.
pub const MAX_K: usize = 1 << 17;

/// One batched product shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Rows of D.
    pub m: u64,
    /// Columns of D.
    pub n: u64,
    /// Inner dimension (padded).
    pub k: u64,
    /// Number of moduli (batch count).
    pub batch: u32,
    /// Plane strides in elements (A, B, D).
    pub strides: (i64, i64, i64),
}

/// Descriptors and the heuristic's algorithm per shape: a steady-state call builds neither
/// (per-call host time counts against the 4096^3 target, where a call takes about
/// 2 ms).
pub type AlgoCache = HashMap<Shape, Cached>;

/// Most shapes [`AlgoCache`] keeps; when full it starts afresh (a program that cycles through
/// more shapes pays the descriptor setup again, as before the cache).
const CACHE_SHAPES: usize = 256;

/// One cached shape: its descriptors and algorithm.
pub struct Cached {
    prob: Problem,
    algo: sys::cublasLtMatmulAlgo_t,
}

struct Layout(sys::cublasLtMatrixLayout_t);

impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: created by create_matrix_layout, destroyed once.
        let _ = unsafe { result::destroy_matrix_layout(self.0) };
    }
}

struct Desc(sys::cublasLtMatmulDesc_t);

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by create_matmul_desc, destroyed once.
        let _ = unsafe { result::destroy_matmul_desc(self.0) };
    }
}

fn layout(
    ty: sys::cudaDataType,
    rows: u64,
    cols: u64,
    ld: i64,
    batch: u32,
    stride: i64,
) -> Result<Layout, GpuError> {
    let l =
        Layout(result::create_matrix_layout(ty, rows, cols, ld).ctx("cublasLtMatrixLayoutCreate")?);
    let b = batch as i32;
    // SAFETY: l.0 is live; attribute values have the documented types (int32, int64).
    unsafe {
        result::set_matrix_layout_attribute(
            l.0,
            sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
            &b as *const i32 as *const c_void,
            4,
        )
        .ctx("layout batch count")?;
        result::set_matrix_layout_attribute(
            l.0,
            sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
            &stride as *const i64 as *const c_void,
            8,
        )
        .ctx("layout batch stride")?;
    }
    Ok(l)
}

/// Descriptors of one batched product shape (one plane per call).
struct Problem {
    desc: Desc,
    la: Layout,
    lb: Layout,
    ld: Layout,
    strides: (i64, i64, i64),
}

impl Problem {
    fn new(shape: Shape) -> Result<Problem, GpuError> {
        let desc = Desc(
            result::create_matmul_desc(
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32I,
                sys::cudaDataType::CUDA_R_32I,
            )
            .ctx("cublasLtMatmulDescCreate")?,
        );
        let trans: i32 = 1; // CUBLAS_OP_T
        // SAFETY: desc is live; TRANSA takes an int32 cublasOperation_t.
        unsafe {
            result::set_matmul_desc_attribute(
                desc.0,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &trans as *const i32 as *const c_void,
                4,
            )
            .ctx("TRANSA")?;
        }
        let i8 = sys::cudaDataType::CUDA_R_8I;
        Ok(Problem {
            desc,
            la: layout(i8, shape.k, shape.m, shape.k as i64, 1, 0)?,
            lb: layout(i8, shape.k, shape.n, shape.k as i64, 1, 0)?,
            ld: layout(
                sys::cudaDataType::CUDA_R_32I,
                shape.m,
                shape.n,
                shape.m as i64,
                1,
                0,
            )?,
            strides: shape.strides,
        })
    }

    /// Product p of the batch with `algo`.
    ///
    /// # Safety
    /// - as [`batched`], for plane `p`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run(
        &self,
        lt: &Lt,
        stream: cudarc::driver::sys::CUstream,
        algo: &sys::cublasLtMatmulAlgo_t,
        (a, b, d): (u64, u64, u64),
        p: usize,
    ) -> Result<(), GpuError> {
        let (sa, sb, sd) = self.strides;
        let (alpha, beta) = (1i32, 0i32);
        let dp = d + 4 * (p as i64 * sd) as u64;
        // SAFETY: all descriptors are live; the caller's contract: the addresses are device
        // buffers of the sizes in the shape; the workspace is LT_WORKSPACE bytes as promised
        // to the heuristic.
        unsafe {
            result::matmul(
                lt.handle,
                self.desc.0,
                &alpha as *const i32 as *const c_void,
                &beta as *const i32 as *const c_void,
                (a + (p as i64 * sa) as u64) as *const c_void,
                self.la.0,
                (b + (p as i64 * sb) as u64) as *const c_void,
                self.lb.0,
                dp as *const c_void,
                self.ld.0,
                dp as *mut c_void,
                self.ld.0,
                algo,
                lt.workspace.ptr() as *mut c_void,
                LT_WORKSPACE,
                stream as sys::cudaStream_t,
            )
            .ctx("cublasLtMatmul (int8)")
        }
    }
}

/// D_p = A_p^T B_p for p < batch, on `stream`. Pointers are device addresses of int8 planes
/// (A, B) and int32 planes (D) with the strides in `shape`.
///
/// # Safety
/// - `gpu`'s context is current on this thread and `stream` belongs to it;
/// - `a` and `b` are device memory of that context holding `batch` int8 planes of
///   `k x m` and `k x n` bytes (column-major, leading dimension k) at their strides, `d`
///   `batch` int32 planes of `m x n`, valid (and `d` written by nobody else) until the stream
///   has passed the work.
///
/// Measured on the H200 (BENCHMARKS.md): one cuBLASLt call per modulus reaches 1277-1456
/// TOPS where a single strided-batched call reaches 1149-1241, so the moduli are issued as
/// back-to-back single products sharing one descriptor set and one cached algorithm: the
/// heuristic's first choice. Timing the top candidates on first use (one product each, as
/// before) picked algorithms that ran the 15 back-to-back products up to 11 % slower than
/// the first choice, which was within noise of the fastest at 4096, 8192 and 16384 x 4096 x
/// 16384 (`ozaki bench --int8-sweep`, BENCHMARKS.md, "Kernel tuning"): the int8
/// products run under the board's power cap, so one cold product does not rank them.
pub unsafe fn batched(
    lt: &mut Lt,
    stream: cudarc::driver::sys::CUstream,
    shape: Shape,
    a: u64,
    b: u64,
    d: u64,
) -> Result<(), GpuError> {
    if lt.handle.is_null() {
        return Err(GpuError::Unavailable("no cuBLASLt handle".into()));
    }
    if !lt.cache.contains_key(&shape) {
        let prob = Problem::new(shape)?;
        let algo = candidates(lt.handle, &prob, 1)?[0].algo;
        if lt.cache.len() >= CACHE_SHAPES {
            lt.cache.clear();
        }
        lt.cache.insert(shape, Cached { prob, algo });
    }
    let c = &lt.cache[&shape];
    for p in 0..shape.batch as usize {
        // SAFETY: the caller's contract.
        unsafe { c.prob.run(lt, stream, &c.algo, (a, b, d), p) }?;
    }
    Ok(())
}

/// One algorithm of [`sweep`]: its configuration and the rate of `batch` back-to-back
/// products with it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AlgoRate {
    /// Rank in the heuristic's list (0 = its first choice).
    pub rank: usize,
    /// CUBLASLT_ALGO_CONFIG_ID.
    pub algo_id: u32,
    /// Tile, stages, split-k, CTA swizzling, custom option, cluster shape ids.
    pub config: [u32; 6],
    /// int8 TOPS (2 m n k batch / s), median of the timed repetitions.
    pub tops: f64,
}

fn config_u32(
    algo: &sys::cublasLtMatmulAlgo_t,
    attr: sys::cublasLtMatmulAlgoConfigAttributes_t,
) -> u32 {
    let mut v = [0u8; 8];
    let mut size = 0usize;
    // SAFETY: algo is an initialised algorithm; a zero size asks for the attribute's size
    // (the call accepts only the exact size), which must fit the 8-byte buffer.
    let st = unsafe {
        sys::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attr,
            v.as_mut_ptr() as *mut c_void,
            0,
            &mut size,
        )
    };
    if st != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS || size == 0 || size > 8 {
        return u32::MAX;
    }
    let mut written = 0usize;
    // SAFETY: as above, with the exact size.
    let st = unsafe {
        sys::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attr,
            v.as_mut_ptr() as *mut c_void,
            size,
            &mut written,
        )
    };
    if st != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return u32::MAX;
    }
    match written {
        1 => v[0] as u32,
        2 => u16::from_le_bytes([v[0], v[1]]) as u32,
        _ => u32::from_le_bytes([v[0], v[1], v[2], v[3]]),
    }
}

/// Times up to `max_algos` of the heuristic's algorithms for one product shape (rank 0 is the
/// one [`batched`] uses), `batch` back-to-back products per repetition as the route issues
/// them, on random int8 planes; for `ozaki bench --int8-sweep` (why the int8 rate
/// drops at n = 16384).
///
/// # Safety
/// - `a`, `b`, `d` as in [`batched`], for `stream` (the timing synchronises it, so they need
///   to stay valid only until this returns).
pub unsafe fn sweep(
    lt: &Lt,
    stream: cudarc::driver::sys::CUstream,
    shape: Shape,
    max_algos: usize,
    reps: usize,
    (a, b, d): (u64, u64, u64),
) -> Result<Vec<AlgoRate>, GpuError> {
    use sys::cublasLtMatmulAlgoConfigAttributes_t as C;
    let prob = Problem::new(shape)?;
    let found = candidates(lt.handle, &prob, max_algos)?;
    let ops = 2.0 * (shape.m * shape.n * shape.k) as f64 * shape.batch as f64;
    let mut out = Vec::new();
    for (rank, cand) in found.iter().enumerate() {
        let algo = cand.algo;
        let t = crate::timing::time_median(stream, reps, || {
            (0..shape.batch as usize).try_for_each(|p| {
                // SAFETY: the caller's contract.
                unsafe { prob.run(lt, stream, &algo, (a, b, d), p) }
            })
        });
        let Ok(t) = t else { continue };
        out.push(AlgoRate {
            rank,
            algo_id: config_u32(&algo, C::CUBLASLT_ALGO_CONFIG_ID),
            config: [
                config_u32(&algo, C::CUBLASLT_ALGO_CONFIG_TILE_ID),
                config_u32(&algo, C::CUBLASLT_ALGO_CONFIG_STAGES_ID),
                config_u32(&algo, C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                config_u32(&algo, C::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                config_u32(&algo, C::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                config_u32(&algo, C::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
            ],
            tops: ops / t / 1e12,
        });
    }
    Ok(out)
}

/// Up to `count` algorithms the heuristic proposes for this problem, best first.
fn candidates(
    handle: sys::cublasLtHandle_t,
    prob: &Problem,
    count: usize,
) -> Result<Vec<sys::cublasLtMatmulHeuristicResult_t>, GpuError> {
    let pref = result::create_matmul_pref().ctx("cublasLtMatmulPreferenceCreate")?;
    let ws = LT_WORKSPACE as u64;
    // SAFETY: zeroed plain-data structs are valid out-parameter storage.
    let mut out: Vec<sys::cublasLtMatmulHeuristicResult_t> =
        vec![unsafe { std::mem::zeroed() }; count];
    let mut returned = 0i32;
    // SAFETY: pref and descriptors are live; out has room for `count` results.
    let status = unsafe {
        result::set_matmul_pref_attribute(
            pref,
            sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &ws as *const u64 as *const c_void,
            8,
        )
        .ctx("pref workspace")
        .and_then(|_| {
            sys::cublasLtMatmulAlgoGetHeuristic(
                handle,
                prob.desc.0,
                prob.la.0,
                prob.lb.0,
                prob.ld.0,
                prob.ld.0,
                pref,
                count as i32,
                out.as_mut_ptr(),
                &mut returned,
            )
            .result()
            .ctx("cublasLtMatmulAlgoGetHeuristic (int8)")
        })
    };
    // SAFETY: pref is live and not used afterwards.
    let _ = unsafe { result::destroy_matmul_pref(pref) };
    status?;
    out.truncate(returned.max(0) as usize);
    out.retain(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
    if out.is_empty() {
        return Err(GpuError::Unsupported(
            "cuBLASLt has no int8 algorithm for this shape".into(),
        ));
    }
    Ok(out)
}
