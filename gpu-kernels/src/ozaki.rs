//! The `gpu-ozaki` route on device-resident operands: Ozaki scheme II with byte moduli on the
//! INT8 tensor cores (issue #4; paper brief §1 and §9.3-9.5).
//!
//! Stages, all on the caller's stream:
//! 1. exponent scan of op(A) rows and op(B) columns (one pass each, NaN/Inf detected);
//! 2. the host reads the m + n row/column maxima (one small copy and one synchronisation)
//!    and makes the [`Plan`]: moduli count and power-of-two shifts;
//! 3. one pass over each fp64 operand forms the residues of all moduli (convert once);
//! 4. one cuBLASLt strided-batched int8 GEMM per column block of C covers all moduli;
//! 5. CRT reconstruction, single rounding, unscaling and the alpha/beta epilogue write C.
//!
//! C is written only in stage 5, after every earlier stage succeeded; a failure before it
//! leaves C untouched, so the caller can still run the native route on the same memory.
//!
//! # Same numerics as `ozaki-core` (issue #3), and where they differ
//! Moduli ([`MODULI`] = `ozaki_core::moduli::INT8_MODULI`), shifts (ozaki-core's *fast*
//! scaling, [`bits_for`]), quantiser (round to nearest even, `rint`) and reconstruction (exact
//! CRT, one correctly rounded conversion, then `alpha c + beta C` with separately rounded
//! operations) are those of `ozaki_core::emulate`; for the same moduli count its output with
//! `ScalingMode::Fast` and `Reconstruction::Exact` equals ours bit for bit
//! (`tests/device.rs`, `equals_the_cpu_reference_route_bit_for_bit`). Three differences
//! remain, on purpose:
//! - **moduli count**: the CPU route's default chooses r from a statistical error estimate
//!   that needs the exact quantisation errors and an exponent product over all (i, j)
//!   (`ozaki_core::select`); on the GPU that is another full product, so the GPU chooses r
//!   from the in-row spread measured by the scan ([`needed_bits`], calibrated on the H200).
//!   With `OZAKI_MODULI=r` both routes use r.
//! - **scaling mode**: the CPU default is the accurate mode (one extra coarse product, about
//!   one modulus fewer on spread data); the GPU uses the fast mode.
//! - **subnormal results**: the GPU rounds C' 2^-(sigma+tau) to 53 bits and then scales, which
//!   rounds a second time when the result is subnormal (below 2^-1022); normal results are
//!   correctly rounded.

use crate::crt::{CrtTable, MAX_MODULI, ResidueTable};
use crate::device::{Gpu, sync};
use crate::error::{Context, GpuError};
use crate::lt_int8::{self, MAX_K, Shape};
use crate::timing::{Marks, Phase};
use cudarc::driver::sys;
use ozaki_core::blas::{Trans, Uplo};
use ozaki_core::trace::Phases;

/// The INT8 modulus set of `ozaki-core` (issue #3), in the order moduli are taken: a call
/// with r moduli uses the first r, so GPU and CPU routes share residues and CRT.
pub const MODULI: [u32; MAX_MODULI] = ozaki_core::moduli::INT8_MODULI;

/// Base of the default accuracy rule (see [`needed_bits`]), calibrated on the H200 against
/// native DGEMM's error on the same inputs (BENCHMARKS.md, GPU section).
pub const BASE_BITS: f64 = 48.4;

/// Weight of the spread term of [`needed_bits`] (calibrated with [`BASE_BITS`]: normal
/// inputs take 15 moduli up to k = 16384, exponent-spread inputs (phi = 2) 17).
pub const SPREAD_WEIGHT: f64 = 0.6;

/// From this many rows and columns of C on, the products and reconstruction run in column
/// blocks of [`LARGE_BLOCK`]: the int8 products run under the board's power cap (SM clock
/// down to 1.4 GHz at 16384^3), and the memory-bound reconstruction of one block between the
/// products of the next lets them run faster: 105.1 ms instead of 112-113 ms at 16384^3,
/// r = 15 (1.50x native instead of 1.38-1.40x; BENCHMARKS.md, session 2 kernel tuning).
pub const LARGE: usize = 16384;

/// Column block of C for calls with m, n >= [`LARGE`].
pub const LARGE_BLOCK: usize = 4096;

/// What the device pipeline computes.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// C = alpha op(A) op(B) + beta C.
    Gemm {
        /// op(A).
        transa: Trans,
        /// op(B).
        transb: Trans,
        /// Device address of B.
        b: u64,
        /// Leading dimension of B.
        ldb: usize,
    },
    /// C = alpha op(A) op(A)^T + beta C, one triangle (op(A) = A for `No`, A^T for `Yes`).
    Syrk {
        /// Triangle of C.
        uplo: Uplo,
        /// Whether A is transposed.
        trans: Trans,
    },
}

/// One call on device memory (column-major; BLAS argument checks already passed).
#[derive(Debug, Clone, Copy)]
pub struct DeviceCall {
    /// The operation.
    pub op: Op,
    /// Rows of C (syrk: n).
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// alpha (callers handle alpha == 0 and k == 0 themselves).
    pub alpha: f64,
    /// Device address of A.
    pub a: u64,
    /// Leading dimension of A.
    pub lda: usize,
    /// beta (0: C is not read).
    pub beta: f64,
    /// Device address of C.
    pub c: u64,
    /// Leading dimension of C.
    pub ldc: usize,
}

/// Moduli count and shifts of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Number of moduli (the first `moduli` of [`MODULI`]).
    pub moduli: usize,
    /// Bits the scaled row / column maxima keep.
    pub bits: i32,
    /// Row shifts of op(A): a'_il = rint(a_il 2^sigma_i).
    pub sigma: Vec<i32>,
    /// Column shifts of op(B).
    pub tau: Vec<i32>,
}

/// floor(log2 |x|) from an |x| bit pattern; None for zero.
pub fn exponent_of_bits(bits: u64) -> Option<i32> {
    if bits == 0 {
        return None;
    }
    let biased = (bits >> 52) as i32;
    Some(if biased == 0 {
        (63 - bits.leading_zeros() as i32) - 1074
    } else {
        biased - 1023
    })
}

/// Bits the scaled row maxima keep with r moduli at inner dimension k: ozaki-core's fast
/// scaling (`ozaki_core::scaling`, steps 2-3 with the a-priori bound G <= 4096 k), whose shift
/// is sigma_i = p + 5 - e_i with p = min(56, floor((L_r - clog2(4096 k)) / 2)); the row maximum
/// then keeps p + 6 bits. Sharing this definition is what makes GPU and CPU results equal
/// bit for bit for the same moduli count.
pub fn bits_for(moduli: usize, k: usize) -> i32 {
    let budget = ozaki_core::moduli::CrtPlan::get(moduli.clamp(2, MAX_MODULI)).budget_bits;
    ozaki_core::scaling::shift_for_bound(budget, 4096 * k.max(1) as u64) + 6
}

/// Per-row statistics of one operand from the exponent scan.
#[derive(Debug, Clone, Copy)]
pub struct RowStats<'a> {
    /// max |x| per row, as IEEE bit patterns.
    pub maxbits: &'a [u64],
    /// sum |x| per row.
    pub abssum: &'a [f64],
}

impl RowStats<'_> {
    /// Largest in-row spread max|x| / mean|x| over the nonzero rows (1 for constant rows).
    pub fn spread(&self, k: usize) -> f64 {
        self.maxbits
            .iter()
            .zip(self.abssum)
            .filter(|(b, s)| **b != 0 && **s > 0.0)
            .map(|(b, s)| f64::from_bits(*b) * k as f64 / s)
            .fold(1.0, f64::max)
    }
}

/// Bits each scaled operand must keep so the emulated error stays at or below native
/// DGEMM's: quantising a row to t bits of its maximum costs about 2^-t max|a_i| per entry,
/// which relative to the typical entry is 2^-t times the row's spread; `BASE_BITS` is
/// calibrated with [`SPREAD_WEIGHT`] so that t = BASE_BITS + w log2 sqrt(spread_a spread_b)
/// matches native error on the H200 measurements (BENCHMARKS.md). A calibrated rule, not a
/// bound: ozaki-core's `select` has the estimate-based choice.
///
/// Short inner dimensions need more: native DGEMM's normalised error stays about constant in
/// k while the quantisation error's shrinks like 1/sqrt(k) (random signs), so below
/// k = 4096 half a bit is added per halving of k (measured: k = 64 with 14 moduli erred 4x
/// above native).
pub fn needed_bits(a: &RowStats, b: &RowStats, k: usize) -> f64 {
    let short_k = 0.5 * (4096.0 / k.max(1) as f64).log2().max(0.0);
    BASE_BITS + SPREAD_WEIGHT * 0.5 * (a.spread(k) * b.spread(k)).log2() + short_k
}

/// The smallest moduli count whose bits reach `needed` at inner dimension k (all 20 when
/// none does).
pub fn choose_moduli(needed: f64, k: usize) -> usize {
    (2..=MAX_MODULI)
        .find(|&r| bits_for(r, k) as f64 >= needed)
        .unwrap_or(MAX_MODULI)
}

/// Makes the plan from the scan statistics of op(A) rows and op(B) columns. Errors with
/// [`GpuError::NonFinite`] when any maximum is NaN or Inf.
pub fn plan(a: RowStats, b: RowStats, k: usize, forced: Option<usize>) -> Result<Plan, GpuError> {
    const INF_BITS: u64 = 0x7ff0_0000_0000_0000;
    if a.maxbits.iter().chain(b.maxbits).any(|&x| x >= INF_BITS) {
        return Err(GpuError::NonFinite);
    }
    // the product must stay inside fp64's range (ozaki-core's ExponentRange rule)
    let top = |s: &RowStats| s.maxbits.iter().filter_map(|&x| exponent_of_bits(x)).max();
    if let (Some(ea), Some(eb)) = (top(&a), top(&b))
        && ea + eb + ozaki_core::scaling::clog2(k.max(1) as u64) + 8 > 1023
    {
        return Err(GpuError::Unsupported(
            "exponents could overflow fp64".into(),
        ));
    }
    let moduli = forced
        .unwrap_or_else(|| choose_moduli(needed_bits(&a, &b, k), k))
        .clamp(2, MAX_MODULI);
    let bits = bits_for(moduli, k);
    if bits < 1 {
        return Err(GpuError::Unsupported(format!(
            "{moduli} moduli leave no bits at k = {k}"
        )));
    }
    // |x| < 2^(e+1), so |x 2^(bits-1-e)| < 2^bits and |rint(.)| <= 2^bits.
    let shift = |x: &u64| exponent_of_bits(*x).map_or(0, |e| bits - 1 - e);
    Ok(Plan {
        moduli,
        bits,
        sigma: a.maxbits.iter().map(shift).collect(),
        tau: b.maxbits.iter().map(shift).collect(),
    })
}

/// What one emulated call did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Moduli used (trace field `moduli`).
    pub moduli: u32,
    /// Measured phases (trace field `phases`).
    pub phases: Phases,
    /// Bits the default rule asked for ([`needed_bits`]), for calibration.
    pub needed_bits: f64,
}

/// Options of one emulated call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Force this many moduli (`OZAKI_MODULI`).
    pub moduli: Option<usize>,
    /// Largest column block (for tests of the blocked path; 0 = as memory allows).
    pub max_block: usize,
}

/// Residue and CRT tables for r = 0..=20 moduli (index r), built once per process.
fn tables() -> &'static [(ResidueTable, CrtTable)] {
    static T: std::sync::OnceLock<Vec<(ResidueTable, CrtTable)>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        (0..=MAX_MODULI)
            .map(|r| {
                let r = r.max(1);
                (ResidueTable::new(&MODULI[..r]), CrtTable::new(&MODULI[..r]))
            })
            .collect()
    })
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Runs the emulated call on `stream` and waits for it. On error C is untouched unless the
/// error came from the reconstruction launches themselves (reported as `Cuda`).
pub fn gemm(
    gpu: &mut Gpu,
    stream: sys::CUstream,
    call: &DeviceCall,
    opts: Options,
) -> Result<Outcome, GpuError> {
    let (m, n, k) = (call.m, call.n, call.k);
    if m == 0 || n == 0 || k == 0 || call.alpha == 0.0 {
        return Err(GpuError::Unsupported(
            "empty product (handled by the caller)".into(),
        ));
    }
    if k > MAX_K {
        return Err(GpuError::Unsupported(format!(
            "k = {k} > {MAX_K} would overflow the int32 sums"
        )));
    }
    if m > i32::MAX as usize || n > i32::MAX as usize {
        return Err(GpuError::Unsupported("dimension beyond int32".into()));
    }
    let kpad = round_up(k, 16);
    let syrk = matches!(call.op, Op::Syrk { .. });
    // Element (i, l) of op(A) is contiguous along l when A is transposed.
    let (a_contig, b_operand) = match call.op {
        Op::Gemm {
            transa,
            transb,
            b,
            ldb,
        } => (transa == Trans::Yes, Some((b, ldb, transb == Trans::No))),
        Op::Syrk { trans, .. } => (trans == Trans::Yes, None),
    };
    let uplo = match call.op {
        Op::Syrk {
            uplo: Uplo::Upper, ..
        } => 1,
        Op::Syrk {
            uplo: Uplo::Lower, ..
        } => 2,
        Op::Gemm { .. } => 0,
    };
    let nb_rows = if syrk { m } else { m + n };

    let mut marks = Marks::start(stream)?;
    // 1. exponent scan
    let stats = gpu.workspace.get("scan", 16 * nb_rows)?;
    let (maxbits, abssum) = (stats, stats + 8 * nb_rows as u64);
    // SAFETY: stats holds nb_rows u64 maxima then nb_rows f64 sums on this device.
    unsafe { sys::cuMemsetD8Async(stats, 0, 16 * nb_rows, stream) }
        .result()
        .ctx("cuMemsetD8Async")?;
    {
        let kern = gpu.kernels()?;
        // SAFETY: A covers the BLAS-checked extent for lda; the stats have m (+ n) slots.
        unsafe {
            kern.scan(
                stream,
                call.a,
                call.lda as i64,
                a_contig,
                m as i32,
                k as i32,
                maxbits,
                abssum,
            )?;
            if let Some((b, ldb, contig)) = b_operand {
                kern.scan(
                    stream,
                    b,
                    ldb as i64,
                    contig,
                    n as i32,
                    k as i32,
                    maxbits + 8 * m as u64,
                    abssum + 8 * m as u64,
                )?;
            }
        }
    }
    // 2. plan on the host
    if gpu.small.len() < 20 * nb_rows {
        gpu.small = crate::memory::PinnedBuffer::new(20 * nb_rows)?;
    }
    let host = gpu.small.as_mut_ptr();
    // SAFETY: host is pinned memory of >= 20 nb_rows bytes; copy completes at the sync.
    unsafe { sys::cuMemcpyDtoHAsync_v2(host as *mut _, stats, 16 * nb_rows, stream) }
        .result()
        .ctx("cuMemcpyDtoH")?;
    sync(stream)?;
    // SAFETY: the copy has completed; the buffer is page-aligned.
    let (bits, sums) = unsafe {
        (
            std::slice::from_raw_parts(host as *const u64, nb_rows),
            std::slice::from_raw_parts(host.add(8 * nb_rows) as *const f64, nb_rows),
        )
    };
    let a_stats = RowStats {
        maxbits: &bits[..m],
        abssum: &sums[..m],
    };
    let b_stats = if syrk {
        a_stats
    } else {
        RowStats {
            maxbits: &bits[m..],
            abssum: &sums[m..],
        }
    };
    let needed = needed_bits(&a_stats, &b_stats, k);
    let plan = plan(a_stats, b_stats, k, opts.moduli)?;
    let r = plan.moduli;
    // shifts go to the pinned buffer after the statistics (already consumed above)
    // SAFETY: 4 nb_rows bytes remain in the buffer after the 16 nb_rows of statistics.
    let shifts_host = unsafe { host.add(16 * nb_rows) } as *mut i32;
    // SAFETY: as above; no copy is reading this region.
    let shifts = unsafe { std::slice::from_raw_parts_mut(shifts_host, nb_rows) };
    shifts[..m].copy_from_slice(&plan.sigma);
    if !syrk {
        shifts[m..].copy_from_slice(&plan.tau);
    }
    let shifts_dev = gpu.workspace.get("shifts", 4 * nb_rows)?;
    // SAFETY: pinned source, device destination of equal size; ordered before its users.
    unsafe { sys::cuMemcpyHtoDAsync_v2(shifts_dev, shifts_host as *const _, 4 * nb_rows, stream) }
        .result()
        .ctx("cuMemcpyHtoD")?;
    let sigma_dev = shifts_dev;
    let tau_dev = if syrk {
        shifts_dev
    } else {
        shifts_dev + 4 * m as u64
    };

    // 3. residues
    let rtab = &tables()[r].0;
    let plane_a = m * kpad;
    let plane_b = n * kpad;
    let planes_a = gpu.workspace.get("planes_a", r * plane_a)?;
    let planes_b = if syrk {
        planes_a
    } else {
        gpu.workspace.get("planes_b", r * plane_b)?
    };
    {
        let kern = gpu.kernels()?;
        // SAFETY: plane buffers hold r planes of rows x kpad bytes.
        unsafe {
            kern.residues(
                stream,
                call.a,
                call.lda as i64,
                a_contig,
                m as i32,
                k as i32,
                kpad as i32,
                sigma_dev,
                rtab,
                planes_a,
                plane_a as i64,
            )?;
            if let Some((b, ldb, contig)) = b_operand {
                kern.residues(
                    stream,
                    b,
                    ldb as i64,
                    contig,
                    n as i32,
                    k as i32,
                    kpad as i32,
                    tau_dev,
                    rtab,
                    planes_b,
                    plane_b as i64,
                )?;
            }
        }
    }
    marks.mark(Phase::Convert)?;

    // 4 + 5. products and reconstruction per column block, as large as free memory allows
    let per_col = r * m * 4;
    let mut nb = n;
    if syrk && n >= 2048 {
        nb = nb.div_ceil(4); // triangle blocks skip the other triangle's products
    }
    if !syrk && m >= LARGE && n >= LARGE {
        nb = nb.min(LARGE_BLOCK);
    }
    if opts.max_block > 0 {
        nb = nb.min(opts.max_block);
    }
    let prod = match gpu.workspace.get("products", per_col * nb) {
        Ok(p) => p,
        Err(GpuError::OutOfMemory { .. }) => {
            // measure what is really free now (the slot was released) and tile to fit
            let (free, _) = crate::memory::mem_info()?;
            let budget = free.saturating_sub(crate::memory::DEVICE_RESERVE + (64 << 20));
            nb = nb.min(budget / per_col.max(1));
            if nb > 256 {
                nb = nb / 256 * 256;
            }
            if nb == 0 {
                return Err(GpuError::OutOfMemory {
                    needed: per_col + crate::memory::DEVICE_RESERVE,
                    free,
                });
            }
            gpu.workspace.get("products", per_col * nb)?
        }
        Err(e) => return Err(e),
    };
    let ctab = &tables()[r].1;
    let mut j0 = 0;
    while j0 < n {
        let cols = nb.min(n - j0);
        // rows of C this block needs: all, or for a triangle only those at or above/below it
        let (row0, rows) = match uplo {
            1 => (0, (j0 + cols).min(m)),
            2 => (j0, m - j0),
            _ => (0, m),
        };
        let shape = Shape {
            m: rows as u64,
            n: cols as u64,
            k: kpad as u64,
            batch: r as u32,
            strides: (plane_a as i64, plane_b as i64, (rows * cols) as i64),
        };
        lt_int8::batched(
            gpu,
            stream,
            shape,
            planes_a + (row0 * kpad) as u64,
            planes_b + (j0 * kpad) as u64,
            prod,
        )?;
        marks.mark(Phase::Products)?;
        let kern = gpu.kernels()?;
        // SAFETY: prod holds r planes of rows x cols int32; C covers ldc x n doubles.
        unsafe {
            kern.reconstruct(
                stream,
                prod,
                (rows * cols) as i64,
                rows as i32,
                cols as i32,
                sigma_dev + 4 * row0 as u64,
                tau_dev + 4 * j0 as u64,
                ctab,
                call.alpha,
                call.beta,
                call.c + 8 * (row0 + j0 * call.ldc) as u64,
                call.ldc as i64,
                uplo,
                (row0 as i32, j0 as i32),
            )?;
        }
        marks.mark(Phase::Reconstruct)?;
        j0 += cols;
    }
    sync(stream)?;
    Ok(Outcome {
        moduli: r as u32,
        phases: marks.phases()?,
        needed_bits: needed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponent_of_bits_matches_log2() {
        for x in [
            1.0f64,
            1.5,
            2.0,
            0.75,
            3.0e-300,
            1.0e300,
            f64::MIN_POSITIVE,
            5e-324,
            1e-310,
        ] {
            let e = exponent_of_bits(x.to_bits()).unwrap();
            assert!(2f64.powi(e) <= x || e < -1022, "{x}: {e}");
            assert_eq!(e, x.log2().floor() as i32, "{x}");
        }
        assert_eq!(exponent_of_bits(0), None);
    }

    #[test]
    fn plan_keeps_products_inside_half_the_modulus_range() {
        for r in 2..=MAX_MODULI {
            for k in [1usize, 2, 1000, 4096, 16384, 131072] {
                let t = bits_for(r, k);
                if t < 1 {
                    continue;
                }
                // |a'|, |b'| <= 2^t, so |c'| <= k 2^(2t) must stay below M/2
                let big_m = crate::crt::product(&MODULI[..r]);
                let bound = num_bigint::BigUint::from(k.next_power_of_two()) << (2 * t as usize);
                assert!(bound * 2u32 < big_m, "r = {r}, k = {k}, t = {t}");
                assert!(t <= 62, "scaled entries fit i64 (ozaki-core caps p at 56)");
            }
        }
    }

    #[test]
    fn shifts_are_ozaki_cores_fast_scaling() {
        use ozaki_core::scaling::{CoarseBounds, Exponents, Scaling};
        let (k, r) = (3000usize, 15usize);
        let rows = [1.5f64, 3.0e-7, 0.0, 7.0e12];
        let cols = [2.0f64, 1e-300];
        let rb: Vec<u64> = rows.iter().map(|x| x.to_bits()).collect();
        let cb: Vec<u64> = cols.iter().map(|x| x.to_bits()).collect();
        let (rs, cs) = (vec![1.0; rows.len()], vec![1.0; cols.len()]);
        let ours = plan(
            RowStats {
                maxbits: &rb,
                abssum: &rs,
            },
            RowStats {
                maxbits: &cb,
                abssum: &cs,
            },
            k,
            Some(r),
        )
        .unwrap();
        let exps = Exponents {
            rows: rows
                .iter()
                .map(|&x| exponent_of_bits(x.to_bits()))
                .collect(),
            cols: cols
                .iter()
                .map(|&x| exponent_of_bits(x.to_bits()))
                .collect(),
        };
        let core = Scaling::new(
            ozaki_core::moduli::CrtPlan::get(r).budget_bits,
            &exps,
            &CoarseBounds::fast(rows.len(), cols.len(), k),
        );
        assert_eq!(ours.sigma, core.sigma);
        assert_eq!(ours.tau, core.tau);
    }

    #[test]
    fn plan_rejects_nan_and_inf_and_shifts_rows_to_the_bit_budget() {
        fn st<'a>(maxbits: &'a [u64], abssum: &'a [f64]) -> RowStats<'a> {
            RowStats { maxbits, abssum }
        }
        let (nan, inf, one) = (
            [f64::NAN.to_bits()],
            [f64::INFINITY.to_bits()],
            [1f64.to_bits()],
        );
        assert_eq!(
            plan(st(&nan, &[1.0]), st(&[0], &[0.0]), 4, None),
            Err(GpuError::NonFinite)
        );
        assert_eq!(
            plan(st(&one, &[1.0]), st(&inf, &[1.0]), 4, None),
            Err(GpuError::NonFinite)
        );
        let (a, b) = ([3.0f64.to_bits(), 0], [0.1f64.to_bits()]);
        let p = plan(st(&a, &[100.0, 0.0]), st(&b, &[3.0]), 64, Some(16)).unwrap();
        assert_eq!(p.moduli, 16);
        // 3 * 2^sigma < 2^bits <= 2 * 3 * 2^sigma
        let scaled = 3.0 * 2f64.powi(p.sigma[0]);
        assert!(scaled < 2f64.powi(p.bits) && 2.0 * scaled >= 2f64.powi(p.bits));
        assert_eq!(p.sigma[1], 0, "zero row keeps shift 0");
    }

    #[test]
    fn moduli_grow_with_k_and_with_spread() {
        let flat_max = [1f64.to_bits(); 4];
        let flat_sum = [64.0; 4]; // every |x| = 1: spread 1
        let flat = RowStats {
            maxbits: &flat_max,
            abssum: &flat_sum,
        };
        let spiky_sum = [1.5; 4]; // one entry 1, the rest tiny: spread ~ 43
        let spiky = RowStats {
            maxbits: &flat_max,
            abssum: &spiky_sum,
        };
        assert_eq!(flat.spread(64), 1.0);
        assert!(spiky.spread(64) > 40.0);
        let r_flat = choose_moduli(needed_bits(&flat, &flat, 64), 64);
        let r_spiky = choose_moduli(needed_bits(&spiky, &spiky, 64), 64);
        assert!(r_flat < r_spiky, "{r_flat} vs {r_spiky}");
        assert!(choose_moduli(50.0, 64) <= choose_moduli(50.0, 16384));
        assert!(bits_for(choose_moduli(50.0, 16384), 16384) >= 50);
        assert_eq!(
            choose_moduli(500.0, 64),
            MAX_MODULI,
            "unreachable accuracy takes every modulus"
        );
    }
}
