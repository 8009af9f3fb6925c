//! One gemm emulated in pieces ([`Pieces`]): op(A) in row panels and op(B) in column
//! blocks that reach the device one after the other (the host pipeline, `host::staged_gemm`),
//! each part converted once, as soon as it is there, and every panel x block product made
//! from those residues.
//!
//! Each line's shift and residues depend only on that line's statistics and on the moduli
//! count, and each entry of C only on its row, its column and the count; the int8 products
//! are exact integers at any padding. So with the count of the untiled call, C is the
//! untiled call's bit for bit. The count is fixed when the pieces are made (forced, or the
//! one the route expects); the statistics of every line land in one buffer laid out as the
//! untiled call's, and once every part is converted they go to the host in one copy, for
//! the accuracy rule on the whole call ([`Pieces::plan`]).
//!
//! Conversions run on their own stream (`side`), so a part's residues are formed while the
//! products of earlier parts run, and the statistics are on the host shortly after the last
//! part arrived rather than after the products queued before it.

use super::{
    MODULI, Plan, STAT_SLOTS, SUMMARY_BYTES, effective_scaling, padding, plan_summarised,
    summarise, summary_views, tables,
};
use crate::device::Gpu;
use crate::error::{Context, GpuError};
use crate::lt_int8::{self, MAX_K, Shape};
use crate::timing::{Fence, Marks, Phase};
use cudarc::driver::sys;
use ozaki_core::scaling::SHIFT_CLASSES;

/// Where one part's operand lies on the device: address, leading dimension, whether a
/// line's k entries are contiguous.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operand {
    pub(crate) x: u64,
    pub(crate) ld: usize,
    pub(crate) contig: bool,
}

/// The padded place of one part (a panel's rows or a block's columns) among the planes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slice {
    /// First line of the part in op(A)'s rows or op(B)'s columns.
    first: usize,
    /// Real lines.
    lines: usize,
    /// Lines of its planes (padded).
    padded: usize,
    /// Byte offset of its r planes in the side's plane buffer.
    offset: u64,
}

/// Places the parts `(first, lines)` of one side: each padded to `align` on its own, their
/// r planes of `padded x kpad` bytes one after the other. Returns the places and the bytes.
fn slices(parts: &[(usize, usize)], align: usize, kpad: usize, r: usize) -> (Vec<Slice>, usize) {
    let mut offset = 0usize;
    let places = parts
        .iter()
        .map(|&(first, lines)| {
            let padded = lines.div_ceil(align) * align;
            let s = Slice {
                first,
                lines,
                padded,
                offset: offset as u64,
            };
            offset += r * padded * kpad;
            s
        })
        .collect();
    (places, offset)
}

/// An m x n x k gemm (C = alpha op(A) op(B) + beta C) emulated in parts with `r` moduli.
pub(crate) struct Pieces {
    m: usize,
    n: usize,
    k: usize,
    kpad: usize,
    r: usize,
    opts: super::Options,
    panels: Vec<Slice>,
    blocks: Vec<Slice>,
    /// Events after each part's conversion (on `side`), for the products to wait for.
    ready: (Vec<Option<sys::CUevent>>, Vec<Option<sys::CUevent>>),
    left: usize,
    stats: u64,
    /// The two side summaries the statistics reduce to (`super::summarise`), on the device.
    summaries: u64,
    shifts: u64,
    table_dev: u64,
    planes: (u64, u64),
    prod: u64,
    lines_copied: Option<Fence>,
    convert_marks: Marks,
    product_marks: Marks,
}

impl Pieces {
    /// The pieces of a call cut into `panels` row panels of op(A) and `blocks` column blocks
    /// of op(B) (`(first, lines)` each), with `r` moduli: allocates every buffer, zeroes the
    /// statistics and uploads the shift table on `side`.
    ///
    /// # Safety
    /// `gpu`'s context is current; `side` and `stream` are streams of it; no work of an
    /// earlier call still uses the GPU's emulation workspace or its `small` buffer beyond
    /// what [`Gpu::small_idle`] waits for.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn new(
        gpu: &mut Gpu,
        (side, stream): (sys::CUstream, sys::CUstream),
        (m, n, k): (usize, usize, usize),
        panels: &[(usize, usize)],
        blocks: &[(usize, usize)],
        r: usize,
        opts: super::Options,
    ) -> Result<Pieces, GpuError> {
        if k > MAX_K {
            return Err(GpuError::Unsupported(format!(
                "k = {k} > {MAX_K} would overflow the int32 sums"
            )));
        }
        if m > i32::MAX as usize || n > i32::MAX as usize || m == 0 || n == 0 || k == 0 {
            return Err(GpuError::Unsupported("dimension out of range".into()));
        }
        let r = r.clamp(2, MODULI.len());
        let pad = padding::padded(m, n, k, padding::alignment(opts.align, m, n, k));
        let kpad = pad.k;
        let (panels, bytes_a) = slices(panels, pad.align, kpad, r);
        let (blocks, bytes_b) = slices(blocks, pad.align, kpad, r);
        let nb_rows = m + n;
        let stats_bytes = 8 * STAT_SLOTS * nb_rows;
        let stats = gpu.workspace.get("scan", stats_bytes)?;
        let summaries = gpu.workspace.get("summaries", SUMMARY_BYTES)?;
        let table_bytes = 4 * SHIFT_CLASSES;
        let shifts = gpu.workspace.get("shifts", 4 * nb_rows + table_bytes)?;
        let table_dev = shifts + 4 * nb_rows as u64;
        let planes_a = gpu.workspace.get("planes_a", bytes_a)?;
        let planes_b = gpu.workspace.get("planes_b", bytes_b)?;
        let most = |s: &[Slice]| s.iter().map(|s| s.padded).max().unwrap_or(0);
        let prod = gpu
            .workspace
            .get("products", 4 * r * most(&panels) * most(&blocks))?;
        // the host's copy of the side summaries, then the shift table
        if gpu.small.len() < SUMMARY_BYTES + table_bytes {
            gpu.small_idle()?;
            gpu.small = crate::memory::PinnedBuffer::new(SUMMARY_BYTES + table_bytes)?;
        }
        gpu.small_idle()?;
        let host = gpu.small.as_mut_ptr();
        let scaling = effective_scaling(opts.scaling);
        // SAFETY: the table area follows the summaries in the pinned buffer, which no
        // pending upload reads (waited above).
        let table = unsafe {
            std::slice::from_raw_parts_mut(host.add(SUMMARY_BYTES) as *mut i32, SHIFT_CLASSES)
        };
        table.copy_from_slice(&super::shift_table(scaling, r, k));
        // SAFETY: device buffers of these sizes on this context; pinned source.
        unsafe {
            sys::cuMemsetD8Async(stats, 0, stats_bytes, side)
                .result()
                .ctx("cuMemsetD8Async")?;
            sys::cuMemcpyHtoDAsync_v2(table_dev, table.as_ptr() as *const _, table_bytes, side)
                .result()
                .ctx("cuMemcpyHtoD")?;
        }
        gpu.small_busy = Some(Fence::record(side)?);
        let (np, nb) = (panels.len(), blocks.len());
        Ok(Pieces {
            m,
            n,
            k,
            kpad,
            r,
            opts,
            panels,
            blocks,
            ready: (vec![None; np], vec![None; nb]),
            left: np + nb,
            stats,
            summaries,
            shifts,
            table_dev,
            planes: (planes_a, planes_b),
            prod,
            lines_copied: None,
            convert_marks: Marks::start(side)?,
            product_marks: Marks::start(stream)?,
        })
    }

    /// The moduli count the pieces use.
    pub(crate) fn moduli(&self) -> usize {
        self.r
    }

    /// Converts one part on `side` (statistics, shifts, residues), unless it already was;
    /// `b_side` says which operand (false: a row panel of op(A), true: a column block of
    /// op(B)). Once every part is converted, the statistics start on their way to the host.
    ///
    /// # Safety
    /// `x` covers the part's lines of k entries with its leading dimension on the device,
    /// its upload was ordered before this on `side`, and it stays valid until the products
    /// are done; `side` is the stream [`Pieces::new`] got.
    unsafe fn convert(
        &mut self,
        gpu: &mut Gpu,
        side: sys::CUstream,
        b_side: bool,
        part: usize,
        x: Operand,
    ) -> Result<sys::CUevent, GpuError> {
        let (ready, places) = if b_side {
            (&self.ready.1, &self.blocks)
        } else {
            (&self.ready.0, &self.panels)
        };
        if let Some(e) = ready[part] {
            return Ok(e);
        }
        let s = places[part];
        // spans end at conversions only, not at the waits for uploads before them
        self.convert_marks.mark(Phase::Start)?;
        let nb_rows = (self.m + self.n) as u64;
        let line0 = (s.first + if b_side { self.m } else { 0 }) as u64;
        let (maxbits, abssum, coarse_sq) = (
            self.stats + 8 * line0,
            self.stats + 8 * (nb_rows + line0),
            self.stats + 8 * (2 * nb_rows + line0),
        );
        let shifts = self.shifts + 4 * line0;
        let planes = if b_side { self.planes.1 } else { self.planes.0 } + s.offset;
        let rtab = &tables()[self.r].0;
        let kern = gpu.kernels()?;
        let operand = (x.x, x.ld as i64, x.contig, s.lines as i32, self.k as i32);
        // SAFETY: the statistics hold STAT_SLOTS slots of m + n lines, this part's from
        // line0; the shifts m + n entries; the planes r planes of padded x kpad bytes from
        // the part's offset (`slices`); the operand as the caller promised.
        unsafe {
            kern.scan_and_stats(
                side,
                operand,
                (maxbits, abssum),
                (coarse_sq, nb_rows as i64),
            )?;
            kern.line_shifts(
                side,
                (maxbits, coarse_sq),
                s.lines as i32,
                self.table_dev,
                shifts,
            )?;
            kern.residues(
                side,
                x.x,
                x.ld as i64,
                x.contig,
                (s.lines as i32, s.padded as i32),
                self.k as i32,
                self.kpad as i32,
                shifts,
                rtab,
                planes,
                (s.padded * self.kpad) as i64,
            )?;
        }
        self.convert_marks.mark(Phase::Convert)?;
        let e = cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .ctx("cuEventCreate")?;
        // SAFETY: a fresh event on a live stream.
        unsafe { cudarc::driver::result::event::record(e, side) }.ctx("cuEventRecord")?;
        let ready = if b_side {
            &mut self.ready.1
        } else {
            &mut self.ready.0
        };
        ready[part] = Some(e);
        self.left -= 1;
        if self.left == 0 {
            let scaling = effective_scaling(self.opts.scaling);
            // SAFETY: every part's statistics were enqueued on `side` before this; the
            // summaries slot holds SUMMARY_BYTES and is read only by the copy below.
            unsafe {
                summarise(
                    gpu,
                    side,
                    (self.stats, self.m + self.n, self.m),
                    (self.k, self.opts.accuracy, scaling),
                    self.summaries,
                )
            }?;
            // SAFETY: `small` holds at least the summaries (`new`) and is not read by the
            // host before the fence below.
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    gpu.small.as_mut_ptr() as *mut _,
                    self.summaries,
                    SUMMARY_BYTES,
                    side,
                )
            }
            .result()
            .ctx("cuMemcpyDtoH")?;
            self.lines_copied = Some(Fence::record(side)?);
        }
        Ok(e)
    }

    /// Enqueues the unit (panel `p`, block `j`): converts the parts not yet converted (on
    /// `side`), then on `stream` the r int8 products of their residues and the
    /// reconstruction into C's unit at `c` (leading dimension `ldc`).
    ///
    /// # Safety
    /// As [`Pieces::convert`] for both operands; `c` covers the unit's rows x columns with
    /// `ldc` on the device, touched by nobody else until `stream` has passed the work.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn unit(
        &mut self,
        gpu: &mut Gpu,
        (side, stream): (sys::CUstream, sys::CUstream),
        (p, a): (usize, Operand),
        (j, b): (usize, Operand),
        (alpha, beta): (f64, f64),
        (c, ldc): (u64, usize),
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        let ea = unsafe { self.convert(gpu, side, false, p, a) }?;
        // SAFETY: as above.
        let eb = unsafe { self.convert(gpu, side, true, j, b) }?;
        for e in [ea, eb] {
            // SAFETY: recorded above on `side`.
            unsafe { sys::cuStreamWaitEvent(stream, e, 0) }
                .result()
                .ctx("cuStreamWaitEvent")?;
        }
        self.product_marks.mark(Phase::Start)?;
        let (sa, sb) = (self.panels[p], self.blocks[j]);
        let plane_d = sa.padded * sb.padded;
        let shape = Shape {
            m: sa.padded as u64,
            n: sb.padded as u64,
            k: self.kpad as u64,
            batch: self.r as u32,
            strides: (
                (sa.padded * self.kpad) as i64,
                (sb.padded * self.kpad) as i64,
                plane_d as i64,
            ),
        };
        // SAFETY: the planes of both parts (converted before the waits above) and the
        // products buffer sized for the largest unit, all on this context.
        unsafe {
            lt_int8::batched(
                &mut gpu.lt,
                stream,
                shape,
                self.planes.0 + sa.offset,
                self.planes.1 + sb.offset,
                self.prod,
            )
        }?;
        self.product_marks.mark(Phase::Products)?;
        let ctab = &tables()[self.r].1;
        let kern = gpu.kernels()?;
        // SAFETY: prod holds r planes of the unit's padded rows x columns; the shifts of its
        // rows and columns were formed on `side` before the waits; C as the caller promised.
        unsafe {
            kern.reconstruct(
                stream,
                self.prod,
                (plane_d as i64, sa.padded as i32),
                sa.lines as i32,
                sb.lines as i32,
                self.shifts + 4 * sa.first as u64,
                self.shifts + 4 * (self.m + sb.first) as u64,
                ctab,
                alpha,
                beta,
                c,
                ldc as i64,
                0,
                (sa.first as i32, sb.first as i32),
            )?;
        }
        self.product_marks.mark(Phase::Reconstruct)?;
        Ok(())
    }

    /// The accuracy rule on every line of the call (forced to `forced` if given), once all
    /// parts were converted: waits only for their statistics, not for the products. The
    /// plan's count may differ from [`Pieces::moduli`]; the caller decides what that means.
    pub(crate) fn plan(&mut self, gpu: &mut Gpu, forced: Option<usize>) -> Result<Plan, GpuError> {
        let fence = self
            .lines_copied
            .take()
            .ok_or_else(|| GpuError::Cuda("a part of the call was never converted".into()))?;
        fence.wait()?;
        // SAFETY: the copy into `small` completed (fence); it holds the two summaries,
        // page-aligned.
        let words = unsafe {
            std::slice::from_raw_parts(gpu.small.as_mut_ptr() as *const u32, SUMMARY_BYTES / 4)
        };
        let (a, b) = summary_views(words, false);
        plan_summarised(
            a,
            b,
            self.k,
            (forced, self.opts.accuracy),
            effective_scaling(self.opts.scaling),
        )
    }

    /// The call's phase times, once both streams have passed its work.
    pub(crate) fn phases(&self) -> Result<ozaki_core::trace::Phases, GpuError> {
        let (c, p) = (self.convert_marks.phases()?, self.product_marks.phases()?);
        Ok(ozaki_core::trace::Phases {
            convert_ns: c.convert_ns,
            products_ns: p.products_ns,
            reconstruct_ns: p.reconstruct_ns,
            ..Default::default()
        })
    }
}

impl Drop for Pieces {
    fn drop(&mut self) {
        for e in self.ready.0.iter().chain(&self.ready.1).flatten() {
            // SAFETY: each event was created by this value; destroying a pending event is
            // allowed (the driver frees it once it completes).
            let _ = unsafe { sys::cuEventDestroy_v2(*e) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts are padded each on its own and their planes follow one another without
    /// overlap; the real lines of every part are covered.
    #[test]
    fn each_part_gets_its_own_padded_planes_back_to_back() {
        let parts = [(0, 100), (100, 100), (200, 37)];
        let (s, bytes) = slices(&parts, 16, 64, 3);
        assert_eq!(
            s.iter().map(|s| s.padded).collect::<Vec<_>>(),
            vec![112, 112, 48]
        );
        let mut end = 0u64;
        for (p, &(first, lines)) in s.iter().zip(&parts) {
            assert_eq!((p.first, p.lines), (first, lines));
            assert_eq!(p.offset, end, "planes overlap or leave a gap");
            end += (3 * p.padded * 64) as u64;
        }
        assert_eq!(bytes as u64, end);
    }
}
