//! `OZAKI_AB` on hooked calls: cuBLAS fp64 computes each emulated member beside the
//! emulation, on the caller's stream, and the call's trace record gets the comparison
//! ([`crate::ab`]'s fields and sampling, `vendor_ns` the cuBLAS time).
//!
//! For one member: C's columns (the span its leading dimension covers) are copied into a
//! private device buffer, cuBLAS computes the member into that buffer (timed, the stream
//! synchronised around it), the emulation computes it into the caller's C (timed), and both
//! results, A, B and the original C are read back to the host to compare. With
//! `OZAKI_AB_KEEP=vendor` the buffer is copied back into C. `OZAKI_AB_MAX_MB` bounds the
//! device buffer and the host copies together; a call over it, or whose buffer cannot be
//! allocated, runs as usual and its record says `ab.skipped`. A batch's record holds the
//! largest differences over its members and the summed times. The emulation is forwarded
//! (never compared) while the stream is being captured, so a comparison never lands in a graph.

use super::real::{DRIVER, lookup};
use crate::ab::{AbConfig, Reservation, differences, frobenius};
use crate::device_api::{Emulation, run_emulation};
use core::ffi::c_void;
use gpu_kernels::GpuError;
use gpu_kernels::device::Stream;
use gpu_kernels::memory::DeviceBuffer;
use gpu_kernels::ozaki::{DeviceCall, Op};
use ozaki_core::blas::{Trans, span};
use ozaki_core::trace::AbResult;
use std::time::Instant;

/// The entries of a column-major `rows x cols` matrix held in `buf` with leading dimension
/// `ld`.
pub(crate) fn entries(
    buf: &[f64],
    rows: usize,
    cols: usize,
    ld: usize,
) -> impl Iterator<Item = f64> + '_ {
    (0..cols).flat_map(move |j| buf[j * ld..j * ld + rows].iter().copied())
}

/// Rows and columns of a matrix as stored.
type Dims = (usize, usize);

/// Rows and columns of A as stored, and B's address, leading dimension and stored rows and
/// columns (`None` for syrk).
fn stored(call: &DeviceCall) -> (Dims, Option<(u64, usize, Dims)>) {
    let dims = |t: Trans, r: usize, c: usize| if t == Trans::No { (r, c) } else { (c, r) };
    match call.op {
        Op::Gemm {
            transa,
            transb,
            b,
            ldb,
        } => (
            dims(transa, call.m, call.k),
            Some((b, ldb, dims(transb, call.k, call.n))),
        ),
        Op::Syrk { trans, .. } => (dims(trans, call.n, call.k), None),
    }
}

/// The differences of one call so far, over its compared members.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Tally {
    pub max_rel_comp: f64,
    pub rel_norm: f64,
    pub rel_scaled: f64,
    pub vendor_ns: u64,
    pub route_ns: u64,
    pub members: u64,
}

impl Tally {
    /// Adds one member's comparison.
    pub fn add(&mut self, comp: f64, norm: f64, scaled: f64, vendor_ns: u64, route_ns: u64) {
        self.max_rel_comp = self.max_rel_comp.max(comp);
        self.rel_norm = self.rel_norm.max(norm);
        self.rel_scaled = self.rel_scaled.max(scaled);
        self.vendor_ns += vendor_ns;
        self.route_ns += route_ns;
        self.members += 1;
    }
}

/// One hooked call's comparison, when `OZAKI_AB` chose it.
pub(crate) struct Compare {
    ab: &'static AbConfig,
    tally: Tally,
    skipped: Option<String>,
}

type DtoDAsync = unsafe extern "C" fn(u64, u64, usize, *mut c_void) -> i32;
type DtoH = unsafe extern "C" fn(*mut c_void, u64, usize) -> i32;

/// The driver's copies, as the program loaded it.
fn copies() -> Option<(DtoDAsync, DtoH)> {
    static ADDRS: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();
    let (d2d, d2h) = (*ADDRS.get_or_init(|| {
        Some((
            lookup(DRIVER, c"cuMemcpyDtoDAsync_v2", 0)?,
            lookup(DRIVER, c"cuMemcpyDtoH_v2", 0)?,
        ))
    }))?;
    // SAFETY: the driver's cuMemcpyDtoDAsync_v2(dst, src, bytes, stream) and
    // cuMemcpyDtoH_v2(host, src, bytes).
    unsafe {
        Some((
            core::mem::transmute::<usize, DtoDAsync>(d2d),
            core::mem::transmute::<usize, DtoH>(d2h),
        ))
    }
}

fn driver(what: &str, code: i32) -> Result<(), GpuError> {
    if code == 0 {
        Ok(())
    } else {
        Err(GpuError::Cuda(format!("{what} failed ({code})")))
    }
}

/// Reads `len` elements at device address `src` back to the host.
fn download(d2h: DtoH, src: u64, len: usize) -> Result<Vec<f64>, GpuError> {
    let mut v = vec![0.0f64; len];
    if len > 0 {
        // SAFETY: `v` holds `len` elements; `src` covers them (the caller's matrices).
        driver("cuMemcpyDtoH", unsafe {
            d2h(v.as_mut_ptr().cast(), src, len * 8)
        })?;
    }
    Ok(v)
}

impl Compare {
    /// The comparison of the next hooked call the emulation takes, when `OZAKI_AB` samples it.
    pub(crate) fn chosen() -> Option<Compare> {
        let ab = crate::ab::config()?;
        crate::ab::next_chosen(ab).then(|| Compare {
            ab,
            tally: Tally::default(),
            skipped: None,
        })
    }

    /// Runs one member through the emulation (`run_emulation`), with cuBLAS beside it as the
    /// module doc says; a comparison that cannot be made is noted and the member runs alone.
    ///
    /// # Safety
    /// As [`run_emulation`] (the member's matrices are device memory of `g`'s context valid
    /// for the call, on `stream`).
    pub(crate) unsafe fn member(
        &mut self,
        g: &mut gpu_kernels::Gpu,
        stream: Stream,
        member: &DeviceCall,
    ) -> Result<Emulation, GpuError> {
        let c_len = span(member.m, member.n, member.ldc);
        let ((ar, ac), b) = stored(member);
        let a_len = span(ar, ac, member.lda);
        let b_len = b.map_or(0, |(_, ldb, (br, bc))| span(br, bc, ldb));
        let bytes = ((3 * c_len + a_len + b_len) as u64).saturating_mul(8);
        let Some(_claim) = Reservation::take(bytes, self.ab.max_bytes) else {
            self.skip(format!(
                "copies of C, A and B ({} MiB) over OZAKI_AB_MAX_MB={}",
                bytes.div_ceil(1 << 20),
                self.ab.max_bytes >> 20
            ));
            // SAFETY: the caller's contract.
            return unsafe { run_emulation(g, stream, member) };
        };
        let prepared = copies().ok_or_else(|| GpuError::Unavailable("no driver copies".into()));
        let scratch = prepared.and_then(|c| Ok((c, DeviceBuffer::new(c_len.max(1) * 8)?)));
        let ((d2d, d2h), scratch) = match scratch {
            Ok(s) => s,
            Err(e) => {
                self.skip(format!("no device buffer for the comparison: {e}"));
                // SAFETY: the caller's contract.
                return unsafe { run_emulation(g, stream, member) };
            }
        };
        // cuBLAS into the private copy of C: nothing of the caller's C is written yet, so a
        // failure here only ends the comparison.
        let native = DeviceCall {
            c: scratch.ptr(),
            ..*member
        };
        let vendor = (|| {
            // SAFETY: the scratch buffer holds c_len elements; C covers them on `stream`.
            driver("cuMemcpyDtoDAsync", unsafe {
                d2d(scratch.ptr(), member.c, c_len * 8, stream.cast())
            })?;
            let old_c = {
                gpu_kernels::device::sync(stream)?;
                download(d2h, member.c, c_len)?
            };
            let t = Instant::now();
            // SAFETY: the caller's contract, C replaced by the private copy.
            unsafe { gpu_kernels::native::device_call(g, stream, &native) }?;
            gpu_kernels::device::sync(stream)?;
            Ok::<_, GpuError>((old_c, t.elapsed().as_nanos() as u64))
        })();
        let (old_c, vendor_ns) = match vendor {
            Ok(v) => v,
            Err(e) => {
                self.skip(format!("cuBLAS beside the emulation failed: {e}"));
                // SAFETY: the caller's contract.
                return unsafe { run_emulation(g, stream, member) };
            }
        };
        let t = Instant::now();
        // SAFETY: the caller's contract.
        let ran = unsafe { run_emulation(g, stream, member) }?;
        let route_ns = t.elapsed().as_nanos() as u64;
        if let Emulation::Done(_) = ran {
            let compared = (|| {
                let route = download(d2h, member.c, c_len)?;
                let vendor = download(d2h, scratch.ptr(), c_len)?;
                let a = download(d2h, member.a, a_len)?;
                let b = match b {
                    Some((addr, _, _)) => download(d2h, addr, b_len)?,
                    None => Vec::new(),
                };
                if self.ab.keep_vendor {
                    // SAFETY: as the first copy, the other way.
                    driver("cuMemcpyDtoDAsync", unsafe {
                        d2d(member.c, scratch.ptr(), c_len * 8, stream.cast())
                    })?;
                    gpu_kernels::device::sync(stream)?;
                }
                Ok::<_, GpuError>((route, vendor, a, b))
            })();
            match compared {
                Ok((route, vendor, a, b)) => {
                    let (m, n, ldc) = (member.m, member.n, member.ldc);
                    let pairs = || entries(&route, m, n, ldc).zip(entries(&vendor, m, n, ldc));
                    let (comp, norm) = differences(pairs());
                    let diff = frobenius(pairs().map(|(r, v)| r - v));
                    let fa = frobenius(entries(&a, ar, ac, member.lda));
                    let fb = match stored(member).1 {
                        Some((_, ldb, (br, bc))) => frobenius(entries(&b, br, bc, ldb)),
                        None => fa,
                    };
                    let fc = if member.beta == 0.0 {
                        0.0
                    } else {
                        member.beta.abs() * frobenius(entries(&old_c, m, n, ldc))
                    };
                    let scaled = match diff / (member.alpha.abs() * fa * fb + fc) {
                        x if x.is_nan() && diff == 0.0 => 0.0,
                        x if x.is_finite() => x,
                        _ => f64::MAX,
                    };
                    self.tally.add(comp, norm, scaled, vendor_ns, route_ns);
                }
                Err(e) => self.skip(format!("reading the results back failed: {e}")),
            }
        }
        Ok(ran)
    }

    fn skip(&mut self, why: String) {
        self.skipped.get_or_insert(why);
    }

    /// The record's comparison: the tally, or why nothing was compared.
    pub(crate) fn finish(self) -> AbResult {
        let kept = if self.ab.keep_vendor {
            "vendor"
        } else {
            "route"
        };
        if self.tally.members == 0 {
            return AbResult {
                kept: "route".into(),
                skipped: Some(self.skipped.unwrap_or_else(|| "nothing emulated".into())),
                ..AbResult::default()
            };
        }
        let t = self.tally;
        AbResult {
            max_rel_comp: t.max_rel_comp,
            rel_norm: t.rel_norm,
            vendor_ns: t.vendor_ns,
            route_ns: t.route_ns,
            kept: kept.into(),
            skipped: None,
            rel_scaled: Some(t.rel_scaled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_spans_its_columns_and_its_entries_skip_the_gaps() {
        assert_eq!(span(3, 2, 5), 8);
        assert_eq!(span(0, 4, 5), 0);
        assert_eq!(span(3, 1, 3), 3);
        // 3 x 2 with ld 5: entries 0..3 and 5..8
        let buf: Vec<f64> = (0..8).map(f64::from).collect();
        let got: Vec<f64> = entries(&buf, 3, 2, 5).collect();
        assert_eq!(got, [0.0, 1.0, 2.0, 5.0, 6.0, 7.0]);
    }

    #[test]
    fn operands_are_measured_as_stored() {
        let mut call = DeviceCall::product((4, 3, 2), 1.0, (0x10, 0x20), 0.0, 0x30);
        assert_eq!(stored(&call), ((4, 2), Some((0x20, 2, (2, 3)))));
        call.op = Op::Gemm {
            transa: Trans::Yes,
            transb: Trans::Yes,
            b: 0x20,
            ldb: 3,
        };
        assert_eq!(stored(&call), ((2, 4), Some((0x20, 3, (3, 2)))));
        call.op = Op::Syrk {
            uplo: ozaki_core::blas::Uplo::Lower,
            trans: Trans::Yes,
        };
        call.n = 4;
        assert_eq!(stored(&call).0, (2, 4));
        assert_eq!(stored(&call).1, None);
    }

    #[test]
    fn a_batch_keeps_its_worst_member_and_the_summed_times() {
        let mut t = Tally::default();
        t.add(1e-15, 2e-16, 3e-17, 100, 50);
        t.add(4e-15, 1e-16, 5e-17, 200, 60);
        assert_eq!(
            t,
            Tally {
                max_rel_comp: 4e-15,
                rel_norm: 2e-16,
                rel_scaled: 5e-17,
                vendor_ns: 300,
                route_ns: 110,
                members: 2
            }
        );
    }
}
