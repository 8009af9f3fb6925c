//! The emulation kernels of `kernels/ozaki.cu`: compiled (or fetched from the private cache)
//! for this device's architecture, loaded once, launched with typed arguments.

use crate::error::{Context, GpuError};
use cudarc::driver::sys;
use ozaki_core::crt_tables::{CrtTable, ResidueTable};
use std::ffi::{CString, c_void};

/// CUDA source of the emulation kernels (compiled at run time).
pub const SOURCE: &str = include_str!("../kernels/ozaki.cu");

/// The `void*` argument array `cuLaunchKernel` takes: one pointer to each (local, mutable)
/// argument, in the kernel's parameter order.
macro_rules! kernel_args {
    ($($arg:ident),* $(,)?) => {
        [$(&mut $arg as *mut _ as *mut c_void),*]
    };
}

/// The per-line kernels ([`Kernels::per_line`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PerLine {
    /// `scan_rows_*`: max |x| and sum |x| per row.
    Scan,
    /// `line_stats_*`: the accuracy rule's line statistics (norm scaling's `S` first), from
    /// the scan's maxima.
    LineStats,
}

/// The kernels that scan a line and form its statistics in one read of the operand
/// (`scan_stats_*`): a block owns whole lines, reduces their maxima, then forms their
/// statistics from entries held in registers or read again from the L1 the first read
/// filled. Which lines each takes ([`ScanStats::fits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanStats {
    /// Contiguous lines, one per 256-thread block, 16 entries per thread in registers.
    Contig16,
    /// Contiguous lines, one per 256-thread block, 32 entries per thread in registers.
    Contig32,
    /// Contiguous lines, one per 256-thread block, entries read again.
    ContigReread,
    /// Adjacent lines, four per 1024-thread block (whole 32-byte sectors per inner index),
    /// entries read again.
    Strided4,
    /// Adjacent lines, four per 512-thread block, entries read again.
    Strided4Narrow,
    /// Adjacent lines, two per 512-thread block, entries read again.
    Strided2,
    /// As [`ScanStats::Contig16`], with the sums of S, abs1 and abs2 on the FP64 pipe.
    Contig16Fp,
    /// As [`ScanStats::Strided4Narrow`], with the sums of S, abs1 and abs2 on the FP64 pipe.
    Strided4NarrowFp,
}

impl ScanStats {
    /// Every variant (in the kernel table's order), for tests and measurements.
    pub const ALL: [ScanStats; 8] = [
        ScanStats::Contig16,
        ScanStats::Contig32,
        ScanStats::ContigReread,
        ScanStats::Strided4,
        ScanStats::Strided4Narrow,
        ScanStats::Strided2,
        ScanStats::Contig16Fp,
        ScanStats::Strided4NarrowFp,
    ];

    /// The kernel's entry point.
    fn name(self) -> &'static str {
        match self {
            ScanStats::Contig16 => "scan_stats_contig_16",
            ScanStats::Contig32 => "scan_stats_contig_32",
            ScanStats::ContigReread => "scan_stats_contig_reread",
            ScanStats::Strided4 => "scan_stats_strided_4",
            ScanStats::Strided4Narrow => "scan_stats_strided_4_narrow",
            ScanStats::Contig16Fp => "scan_stats_contig_16_fp",
            ScanStats::Strided4NarrowFp => "scan_stats_strided_4_narrow_fp",
            ScanStats::Strided2 => "scan_stats_strided_2",
        }
    }

    /// (threads per block, lines per block, most entries per thread): registers hold 16 or
    /// 32; the kernels that read again sum at most 32 per thread in 32-bit words.
    fn geometry(self) -> (u32, u32, usize) {
        match self {
            ScanStats::Contig16 => (256, 1, 16),
            ScanStats::Contig32 => (256, 1, 32),
            ScanStats::ContigReread => (256, 1, 32),
            ScanStats::Strided4 => (1024, 4, 32),
            ScanStats::Strided4Narrow | ScanStats::Strided4NarrowFp => (512, 4, 32),
            ScanStats::Contig16Fp => (256, 1, 16),
            ScanStats::Strided2 => (512, 2, 32),
        }
    }

    /// Whether the variant reads contiguous lines.
    pub fn contig(self) -> bool {
        matches!(
            self,
            ScanStats::Contig16
                | ScanStats::Contig32
                | ScanStats::ContigReread
                | ScanStats::Contig16Fp
        )
    }

    /// Whether lines of this layout and `kdim` entries fit the variant: at most its entries
    /// per thread, and more than [`ScanStats::SHORT`] entries.
    pub fn fits(self, contig: bool, kdim: usize) -> bool {
        let (threads, lines, per_thread) = self.geometry();
        let most = (threads / lines) as usize * per_thread;
        contig == self.contig() && kdim <= most && kdim > Self::SHORT
    }

    /// Lines of at most this many entries take the two passes: a block of 256 threads per
    /// line would leave most of them idle, where the scan's warp or thread per line suits.
    pub const SHORT: usize = 1024;

    /// The variant the route takes for lines of this layout and `kdim` entries (`None`: the
    /// scan, then the statistics pass): contiguous lines of up to 4096 entries in registers,
    /// longer ones read again (at 8192 on the H200 this took 0.07 ms less than 32 entries a
    /// thread in registers), adjacent ones read again in blocks of four.
    pub fn for_lines(contig: bool, kdim: usize) -> Option<ScanStats> {
        [
            ScanStats::Contig16,
            ScanStats::ContigReread,
            ScanStats::Strided4,
        ]
        .into_iter()
        .find(|v| v.fits(contig, kdim))
    }
}

/// Loaded module and its entry points.
pub struct Kernels {
    _module: sys::CUmodule,
    scan_contig: sys::CUfunction,
    scan_strided: sys::CUfunction,
    residues: sys::CUfunction,
    reconstruct: sys::CUfunction,
    reconstruct_w4: sys::CUfunction,
    reconstruct_quad: sys::CUfunction,
    reconstruct_quad_w4: sys::CUfunction,
    norms_contig: sys::CUfunction,
    norms_strided: sys::CUfunction,
    scan_stats: [sys::CUfunction; ScanStats::ALL.len()],
    line_shifts: sys::CUfunction,
    line_summary: sys::CUfunction,
}

/// Mirror of `struct SummaryParams` in ozaki.cu: what the line keys need from the request
/// (`ozaki_core::rule::KeyParams`, the `log2_fast` table, the fixed class of fast scaling).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct SummaryParams {
    table: [f64; 257],
    log2_k: f64,
    g_star: i64,
    normwise: i32,
    fixed_class: i32,
}

impl SummaryParams {
    /// The kernel's parameters for a request's keys; `fixed_class` is every line's shift
    /// class under fast scaling (`None`: each line's class from its `S`).
    pub(crate) fn new(p: &ozaki_core::rule::KeyParams, fixed_class: Option<usize>) -> Self {
        SummaryParams {
            table: *ozaki_core::rule::log2_table(),
            log2_k: p.log2_k,
            g_star: p.g_star,
            normwise: i32::from(p.normwise),
            fixed_class: fixed_class.map_or(-1, |c| c as i32),
        }
    }
}

fn function(module: sys::CUmodule, name: &str) -> Result<sys::CUfunction, GpuError> {
    let cname = CString::new(name).expect("kernel names have no NUL");
    let mut f = std::ptr::null_mut();
    // SAFETY: module is loaded; out-parameter.
    unsafe { sys::cuModuleGetFunction(&mut f, module, cname.as_ptr()) }
        .result()
        .ctx(name)?;
    Ok(f)
}

fn load_module(cubin: &[u8]) -> Result<sys::CUmodule, GpuError> {
    let mut module = std::ptr::null_mut();
    // SAFETY: cubin is a complete ELF image that outlives the call.
    unsafe { sys::cuModuleLoadData(&mut module, cubin.as_ptr() as *const c_void) }
        .result()
        .ctx("cuModuleLoadData")?;
    Ok(module)
}

impl Kernels {
    /// Compiles (or loads from the cache) and loads the kernels for compute capability `cc`.
    pub fn load(cc: (i32, i32), driver: i32) -> Result<Kernels, GpuError> {
        let arch = crate::nvrtc_cache::arch_for(cc.0, cc.1);
        let (cubin, from_cache) =
            crate::nvrtc_cache::cubin_cached(SOURCE, "ozaki.cu", &arch, driver)?;
        let module = match load_module(&cubin) {
            Ok(m) => m,
            // A cached image the driver refuses: compile afresh rather than fail.
            Err(_) if from_cache => load_module(&crate::nvrtc_cache::compile_cubin(
                SOURCE, "ozaki.cu", &arch,
            )?)?,
            Err(e) => return Err(e),
        };
        Ok(Kernels {
            scan_contig: function(module, "scan_rows_contig")?,
            scan_strided: function(module, "scan_rows_strided")?,
            residues: function(module, "residues")?,
            reconstruct: function(module, "reconstruct")?,
            reconstruct_w4: function(module, "reconstruct_w4")?,
            reconstruct_quad: function(module, "reconstruct_quad")?,
            reconstruct_quad_w4: function(module, "reconstruct_quad_w4")?,
            norms_contig: function(module, "line_stats_contig")?,
            norms_strided: function(module, "line_stats_strided")?,
            scan_stats: ScanStats::ALL
                .map(|v| function(module, v.name()))
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?
                .try_into()
                .expect("one function per variant"),
            line_shifts: function(module, "line_shifts")?,
            line_summary: function(module, "line_summary")?,
            _module: module,
        })
    }

    /// Launches a per-line kernel over the rows of an operand `(x, ld, contig, rows, kdim)`;
    /// `contig`: a row's elements are adjacent in memory (x[l + row*ld]), else rows are
    /// adjacent. The two outputs (zeroed first) are, per row:
    /// - [`PerLine::Scan`]: `p` the max |x| bit pattern (u64), `q` the sum of |x| (f64);
    /// - [`PerLine::LineStats`]: `p` the maxima the scan wrote (read), `q` the first of seven
    ///   u64 slots `stride` lines apart: `S_i = sum_l ā_il^2` and the accuracy rule's sums
    ///   (`ozaki_core::rule`, "Line statistics", in [`ozaki_core::rule::LineTable`]'s order
    ///   from `coarse_sq` on). Launch it after the scan on the same stream.
    ///
    /// Geometry: [`line_geometry`].
    pub(crate) unsafe fn per_line(
        &self,
        kernel: PerLine,
        stream: sys::CUstream,
        operand: (sys::CUdeviceptr, i64, bool, i32, i32),
        p: sys::CUdeviceptr,
        (q, stride): (sys::CUdeviceptr, i64),
    ) -> Result<(), GpuError> {
        let (mut x, mut ld, contig, mut rows, mut kdim) = operand;
        let (mut p, mut q, mut stride) = (p, q, stride);
        let (grid, block, mut lchunk) = line_geometry(contig, rows, kdim);
        match (kernel, contig) {
            (PerLine::Scan, true) => {
                let mut args = kernel_args![x, ld, rows, kdim, p, q];
                // SAFETY: argument types match the kernel signature; pointers are device
                // memory of the sizes the caller checked.
                unsafe { launch(self.scan_contig, grid, block, stream, &mut args) }
            }
            (PerLine::Scan, false) => {
                let mut args = kernel_args![x, ld, rows, kdim, lchunk, p, q];
                // SAFETY: as above.
                unsafe { launch(self.scan_strided, grid, block, stream, &mut args) }
            }
            (PerLine::LineStats, true) => {
                let mut args = kernel_args![x, ld, rows, kdim, p, q, stride];
                // SAFETY: as above; q has 7 slots of `stride` u64s.
                unsafe { launch(self.norms_contig, grid, block, stream, &mut args) }
            }
            (PerLine::LineStats, false) => {
                let mut args = kernel_args![x, ld, rows, kdim, lchunk, p, q, stride];
                // SAFETY: as above.
                unsafe { launch(self.norms_strided, grid, block, stream, &mut args) }
            }
        }
    }

    /// One read of an operand's lines (`operand` as [`Kernels::per_line`]) with the kernel
    /// `kind`, which must fit them ([`ScanStats::fits`]): the scan's two outputs `maxbits`
    /// and `abssum` and the statistics from `q` on (`stride` lines apart), as
    /// [`PerLine::Scan`] then [`PerLine::LineStats`] write them; the buffers were zeroed
    /// first (the statistics of zero and non-finite lines are not written). Without
    /// `with_stats` only the scan's outputs (to measure what the statistics add).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn scan_stats(
        &self,
        kind: ScanStats,
        stream: sys::CUstream,
        operand: (sys::CUdeviceptr, i64, bool, i32, i32),
        (maxbits, abssum): (sys::CUdeviceptr, sys::CUdeviceptr),
        (q, stride): (sys::CUdeviceptr, i64),
        with_stats: bool,
    ) -> Result<(), GpuError> {
        let (mut x, mut ld, contig, mut rows, mut kdim) = operand;
        debug_assert!(kind.fits(contig, kdim as usize));
        let (mut maxbits, mut abssum, mut q, mut stride) = (maxbits, abssum, q, stride);
        let mut with_stats = i32::from(with_stats);
        let (threads, lines, _) = kind.geometry();
        let grid = ((rows as u32).div_ceil(lines), 1, 1);
        let mut args = kernel_args![x, ld, rows, kdim, maxbits, abssum, q, stride, with_stats];
        let f = self.scan_stats[ScanStats::ALL
            .iter()
            .position(|&v| v == kind)
            .expect("every variant is in ALL")];
        // SAFETY: argument types match the kernel signature; pointers are device memory of
        // the sizes the caller checked.
        unsafe { launch(f, grid, (threads, 1, 1), stream, &mut args) }
    }

    /// The scan and the statistics of an operand's lines as the route forms them: one read
    /// ([`Kernels::scan_stats`], the variant [`ScanStats::for_lines`] names) where the lines
    /// fit in registers, else [`PerLine::Scan`] then [`PerLine::LineStats`]; outputs as
    /// [`Kernels::scan_stats`] (buffers zeroed first).
    pub(crate) unsafe fn scan_and_stats(
        &self,
        stream: sys::CUstream,
        operand: (sys::CUdeviceptr, i64, bool, i32, i32),
        (maxbits, abssum): (sys::CUdeviceptr, sys::CUdeviceptr),
        (q, stride): (sys::CUdeviceptr, i64),
    ) -> Result<(), GpuError> {
        let (_, _, contig, _, kdim) = operand;
        // SAFETY: the caller's contract, which each launch below shares.
        unsafe {
            match ScanStats::for_lines(contig, kdim as usize) {
                Some(kind) => {
                    self.scan_stats(kind, stream, operand, (maxbits, abssum), (q, stride), true)
                }
                None => {
                    self.per_line(PerLine::Scan, stream, operand, maxbits, (abssum, stride))?;
                    self.per_line(PerLine::LineStats, stream, operand, maxbits, (q, stride))
                }
            }
        }
    }

    /// Per-line shifts `shift[i] = table[class(S_i)] - e_i` from the scan's maxima and coarse
    /// square sums (`lines` of each) and a [`crate::ozaki::SHIFT_CLASSES`]-entry table.
    pub(crate) unsafe fn line_shifts(
        &self,
        stream: sys::CUstream,
        (maxbits, sq): (sys::CUdeviceptr, sys::CUdeviceptr),
        lines: i32,
        table: sys::CUdeviceptr,
        shift: sys::CUdeviceptr,
    ) -> Result<(), GpuError> {
        let (mut maxbits, mut sq, mut lines, mut table, mut shift) =
            (maxbits, sq, lines, table, shift);
        let grid = ((lines as u32).div_ceil(256), 1, 1);
        let mut args = kernel_args![maxbits, sq, lines, table, shift];
        // SAFETY: as above; the caller sized the buffers.
        unsafe { launch(self.line_shifts, grid, (256, 1, 1), stream, &mut args) }
    }

    /// The side summaries (`ozaki_core::rule::summary`) of `lines` lines of statistics
    /// (`crate::ozaki::STAT_SLOTS` slots `stride` apart, as the per-line passes wrote them):
    /// lines below `split` into the first block of `summaries`, the others into the second
    /// (each `ozaki_core::rule::summary::SUMMARY_WORDS` u32s, zeroed first). Launch it after
    /// the statistics pass on the same stream.
    pub(crate) unsafe fn line_summary(
        &self,
        stream: sys::CUstream,
        (stats, stride): (sys::CUdeviceptr, i64),
        (lines, split): (i32, i32),
        params: &SummaryParams,
        summaries: sys::CUdeviceptr,
    ) -> Result<(), GpuError> {
        let (mut stats, mut stride, mut lines, mut split, mut params, mut summaries) =
            (stats, stride, lines, split, *params, summaries);
        let grid = ((lines as u32).div_ceil(256), 1, 1);
        let mut args = kernel_args![stats, stride, lines, split, params, summaries];
        // SAFETY: argument types match the kernel signature (the struct is its mirror); the
        // caller sized the buffers.
        unsafe { launch(self.line_summary, grid, (256, 1, 1), stream, &mut args) }
    }

    /// r int8 residue planes of one operand, `(rows, rows_out)`: the operand's rows and the
    /// planes' (padded) rows, `rows_out >= rows`, the rows beyond `rows` zero; inner dimension
    /// padded to `kpad` (a multiple of 16) with zeros.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn residues(
        &self,
        stream: sys::CUstream,
        x: sys::CUdeviceptr,
        ld: i64,
        contig: bool,
        (rows, rows_out): (i32, i32),
        kdim: i32,
        kpad: i32,
        shift: sys::CUdeviceptr,
        table: &ResidueTable,
        out: sys::CUdeviceptr,
        plane_stride: i64,
    ) -> Result<(), GpuError> {
        let (
            mut x,
            mut ld,
            mut contig,
            mut rows,
            mut rows_out,
            mut kdim,
            mut kpad,
            mut shift,
            mut table,
            mut out,
            mut ps,
        ) = (
            x,
            ld,
            contig as i32,
            rows,
            rows_out,
            kdim,
            kpad,
            shift,
            *table,
            out,
            plane_stride,
        );
        let grid = (
            (kpad as u32).div_ceil(128),
            (rows_out as u32).div_ceil(32),
            1,
        );
        let mut args = kernel_args![
            x, ld, contig, rows, rows_out, kdim, kpad, shift, table, out, ps
        ];
        // SAFETY: as above; the table is passed by value (#[repr(C)] mirror of the CUDA struct).
        unsafe { launch(self.residues, grid, (32, 8, 1), stream, &mut args) }
    }

    /// CRT reconstruction of a column block into C with the alpha/beta epilogue: the
    /// `rows x cols` block of product planes with leading dimension `prod_ld >= rows` (the
    /// products' padded rows), `prod_stride` elements apart.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn reconstruct(
        &self,
        stream: sys::CUstream,
        prod: sys::CUdeviceptr,
        (prod_stride, prod_ld): (i64, i32),
        rows: i32,
        cols: i32,
        sigma: sys::CUdeviceptr,
        tau: sys::CUdeviceptr,
        table: &CrtTable,
        alpha: f64,
        beta: f64,
        c: sys::CUdeviceptr,
        ldc: i64,
        uplo: i32,
        offsets: (i32, i32),
    ) -> Result<(), GpuError> {
        let (
            mut prod,
            mut ps,
            mut pld,
            mut rows,
            mut cols,
            mut sigma,
            mut tau,
            mut table,
            mut alpha,
            mut beta,
            mut c,
            mut ldc,
            mut uplo,
        ) = (
            prod,
            prod_stride,
            prod_ld,
            rows,
            cols,
            sigma,
            tau,
            *table,
            alpha,
            beta,
            c,
            ldc,
            uplo,
        );
        let (mut row_off, mut col_off) = offsets;
        // prod_ld % 4 == 0 (and 16-byte aligned planes): four rows per thread with 16-byte
        // loads over the padded rows (`reconstruct_quad`)
        let quad = pld % 4 == 0 && ps % 4 == 0 && prod % 16 == 0;
        let total = if quad {
            pld as u64 * cols as u64 / 4
        } else {
            rows as u64 * cols as u64
        };
        let grid = (total.div_ceil(256) as u32, 1, 1);
        let mut args = kernel_args![
            prod, ps, pld, rows, cols, sigma, tau, table, alpha, beta, c, ldc, uplo, row_off,
            col_off
        ];
        // SAFETY: as above.
        // the 4-limb variants skip weight limbs that are zero for this table (same integer)
        let f = match (quad, table.kernel_limbs() == 4) {
            (true, true) => self.reconstruct_quad_w4,
            (true, false) => self.reconstruct_quad,
            (false, true) => self.reconstruct_w4,
            (false, false) => self.reconstruct,
        };
        // SAFETY: as above; both entry points take the same arguments.
        unsafe { launch(f, grid, (256, 1, 1), stream, &mut args) }
    }
}

/// Grid, block and inner-dimension chunk of the per-line kernels (scan, coarse norms): one
/// warp per row, 8 per block, when a row's elements are contiguous; else one thread per row,
/// 256 per block, and `blockIdx.y` takes 16 inner indices.
fn line_geometry(contig: bool, rows: i32, kdim: i32) -> ((u32, u32, u32), (u32, u32, u32), i32) {
    if contig {
        let warps_per_block = 8u32;
        let grid = (rows as u32).div_ceil(warps_per_block);
        ((grid, 1, 1), (32 * warps_per_block, 1, 1), 0)
    } else {
        // Chunks of l long enough that the per-chunk atomics stay few (two per thread and
        // chunk), short enough for about 2048 blocks: 8 x 256 threads on each of ~132 SMs.
        let row_blocks = (rows as u32).div_ceil(256);
        let chunks = 2048u32
            .div_ceil(row_blocks)
            .clamp(1, (kdim as u32).div_ceil(16));
        let lchunk = (kdim as u32).div_ceil(chunks).next_multiple_of(4) as i32;
        let grid = (row_blocks, (kdim as u32).div_ceil(lchunk as u32).max(1), 1);
        (grid, (256, 1, 1), lchunk)
    }
}

/// cuLaunchKernel with no dynamic shared memory.
unsafe fn launch(
    f: sys::CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> Result<(), GpuError> {
    // SAFETY: the caller guarantees the argument list matches the kernel.
    unsafe {
        sys::cuLaunchKernel(
            f,
            grid.0,
            grid.1,
            grid.2,
            block.0,
            block.1,
            block.2,
            0,
            stream,
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .ctx("cuLaunchKernel")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::rule::summary::{
        CELLS_AT, CLASS_AT, CONC_AT, CONC_OFFSET, KEY_BIAS, SPANS, SUMMARY_WORDS,
    };

    /// The value of `#define name value` in the kernel source.
    fn define(name: &str) -> String {
        let head = format!("#define {name} ");
        SOURCE
            .lines()
            .find_map(|l| l.strip_prefix(&head))
            .unwrap_or_else(|| panic!("no #define {name}"))
            .trim()
            .to_string()
    }

    /// Every one-read variant names an entry point of the source, launched with the block
    /// size its `__launch_bounds__` allows, and the route takes a variant exactly for lines
    /// of more than `SHORT` entries that one holds: contiguous lines in registers up to 4096
    /// entries and read again up to 8192, adjacent lines read again up to 8192.
    #[test]
    fn one_read_variants_are_the_sources_and_cover_their_lines() {
        for v in ScanStats::ALL {
            let (threads, lines, _) = v.geometry();
            let head = format!("__launch_bounds__({threads}) {}(", v.name());
            let bounded = format!("__launch_bounds__({threads}, 1) {}(", v.name());
            assert!(
                SOURCE.contains(&head) || SOURCE.contains(&bounded),
                "{v:?}: no entry point `{head}`"
            );
            assert_eq!(threads % 32, 0, "{v:?}: whole warps");
            assert!(32 % lines == 0, "{v:?}: a warp's lanes serve whole lines");
        }
        let pick = |contig, k| ScanStats::for_lines(contig, k);
        assert_eq!(pick(true, 1024), None);
        assert_eq!(pick(true, 1025), Some(ScanStats::Contig16));
        assert_eq!(pick(true, 4096), Some(ScanStats::Contig16));
        assert_eq!(pick(true, 4097), Some(ScanStats::ContigReread));
        assert_eq!(pick(true, 8192), Some(ScanStats::ContigReread));
        assert_eq!(pick(true, 8193), None);
        assert_eq!(pick(false, 1024), None);
        assert_eq!(pick(false, 4096), Some(ScanStats::Strided4));
        assert_eq!(pick(false, 8192), Some(ScanStats::Strided4));
        assert_eq!(pick(false, 8193), None);
        // a variant never takes lines of the other layout
        assert!(!ScanStats::Strided2.fits(true, 4096));
        assert!(!ScanStats::ContigReread.fits(false, 4096));
    }

    /// `line_summary` writes the layout `ozaki_core::rule::summary` reads, and its parameter
    /// struct has the size of the CUDA one (257 doubles, a double, a long long, two ints).
    #[test]
    fn summary_kernel_layout_is_ozaki_cores() {
        for (name, value) in [
            ("SUMMARY_SPANS", SPANS as i64),
            ("CONC_OFFSET", CONC_OFFSET),
            ("CONC_AT", CONC_AT as i64),
            ("CLASS_AT", CLASS_AT as i64),
            ("CELLS_AT", CELLS_AT as i64),
            ("SUMMARY_WORDS", SUMMARY_WORDS as i64),
        ] {
            assert_eq!(define(name), value.to_string(), "{name}");
        }
        assert_eq!(
            define("KEY_BIAS"),
            format!("(1ll << {})", KEY_BIAS.trailing_zeros())
        );
        assert_eq!(std::mem::size_of::<SummaryParams>(), 257 * 8 + 8 + 8 + 8);
        // the kernel's ln 2 literal is the host's constant, printed shortest
        let ln2 = format!("{:?}", std::f64::consts::LN_2);
        assert!(SOURCE.contains(&ln2), "the kernel's ln 2 is not {ln2}");
    }
}
