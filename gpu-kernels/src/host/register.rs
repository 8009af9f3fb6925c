//! Page-locking the caller's operands for one call (`OZAKI_HOST_REGISTER`): the uploads then
//! read op(A) and op(B) where the caller keeps them (`upload`'s direct pieces), without the
//! staging copy through the pinned ring, and the pages are unlocked when the call is done.
//!
//! Registration may fail (memory the driver cannot lock, a range another registration
//! overlaps, a driver without read-only registration): that operand is then staged as
//! usual. A range the program registered itself is used directly and left registered.

use cudarc::driver::sys;
use std::ffi::c_void;

/// The host page size registrations are rounded to.
const PAGE: usize = 4096;

/// Which pages of `x` a registration covers: [start, end) rounded out to whole pages (the
/// pages holding any byte of `x` are mapped whole, so the rounding touches nothing
/// unmapped).
fn pages(x: &[f64]) -> (usize, usize) {
    let start = x.as_ptr() as usize;
    let end = start + std::mem::size_of_val(x);
    (start / PAGE * PAGE, end.div_ceil(PAGE) * PAGE)
}

/// The page ranges to register for `spans`, overlapping or touching ranges merged into one
/// (a second registration of a page already registered fails), each with the indices of
/// the spans it covers. Empty spans are left out.
fn merged(spans: &[&[f64]]) -> Vec<((usize, usize), Vec<usize>)> {
    let mut ranges: Vec<((usize, usize), Vec<usize>)> = spans
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
        .map(|(i, s)| (pages(s), vec![i]))
        .collect();
    ranges.sort_by_key(|r| r.0);
    let mut out: Vec<((usize, usize), Vec<usize>)> = Vec::new();
    for (r, who) in ranges {
        match out.last_mut() {
            Some((last, lw)) if r.0 <= last.1 => {
                last.1 = last.1.max(r.1);
                lw.extend(who);
            }
            _ => out.push((r, who)),
        }
    }
    out
}

/// The ranges one call page-locked, unlocked on drop. Must be dropped only after every
/// transfer reading them has completed (the call's streams synchronised).
pub(crate) struct Registration {
    /// Bases of the ranges this call registered (and so unregisters).
    ours: Vec<usize>,
    /// Per span given to [`Registration::lock`]: page-locked for the call.
    locked: Vec<bool>,
}

impl Registration {
    /// Nothing page-locked: every operand is staged.
    pub(crate) fn none(spans: usize) -> Registration {
        Registration {
            ours: Vec::new(),
            locked: vec![false; spans],
        }
    }

    /// Every one of `spans` counted as page-locked: they lie in pinned memory already
    /// (`super::handoff::Operands`), and nothing is registered or unregistered.
    pub(crate) fn pinned(spans: usize) -> Registration {
        Registration {
            ours: Vec::new(),
            locked: vec![true; spans],
        }
    }

    /// Page-locks the pages of each of `spans` (host memory the call only reads) that it
    /// can, read-only where the driver supports it. Runs with the GPU's context current.
    pub(crate) fn lock(spans: &[&[f64]]) -> Registration {
        let mut reg = Registration::none(spans.len());
        for ((start, end), who) in merged(spans) {
            match register(start, end - start) {
                Locked::Ours => reg.ours.push(start),
                Locked::Before => {}
                Locked::No(why) => {
                    tracing::debug!(bytes = end - start, %why, "host operand staged: not page-locked");
                    continue;
                }
            }
            for i in who {
                reg.locked[i] = true;
            }
        }
        reg
    }

    /// Whether span `i` of [`Registration::lock`] is page-locked for the call.
    pub(crate) fn locked(&self, i: usize) -> bool {
        self.locked.get(i).copied().unwrap_or(false)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        for &base in &self.ours {
            // SAFETY: a range this call registered, once; its transfers completed (the
            // type's contract).
            let r = unsafe { sys::cuMemHostUnregister(base as *mut c_void) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!(?r, "cuMemHostUnregister failed");
            }
        }
    }
}

/// What [`register`] did with a range.
enum Locked {
    /// This call registered it.
    Ours,
    /// It was registered already (by the program): usable, not ours to unregister.
    Before,
    /// Not page-locked; the reason.
    No(String),
}

/// Registers `bytes` bytes from `base`, read-only first (the caller's operands may live in
/// read-only mappings), then plain.
fn register(base: usize, bytes: usize) -> Locked {
    let mut last = sys::CUresult::CUDA_SUCCESS;
    for flags in [sys::CU_MEMHOSTREGISTER_READ_ONLY, 0] {
        // SAFETY: [base, base + bytes) are whole pages of live host memory that the call
        // borrows until its Registration drops.
        last = unsafe { sys::cuMemHostRegister_v2(base as *mut c_void, bytes, flags) };
        match last {
            sys::CUresult::CUDA_SUCCESS => return Locked::Ours,
            sys::CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED => return Locked::Before,
            _ => {}
        }
    }
    Locked::No(format!("cuMemHostRegister: {last:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spans are rounded out to whole pages, spans sharing or touching a page are registered
    /// as one range covering both, apart ones separately, and empty spans not at all.
    #[test]
    fn ranges_cover_whole_pages_and_merge_when_they_share_one() {
        let buf = vec![0.0f64; 4 * PAGE];
        let base = buf.as_ptr() as usize;
        // a span starting on the first page boundary inside the buffer
        let first = (base.div_ceil(PAGE) * PAGE - base) / 8;
        let per_page = PAGE / 8;
        let a = &buf[first..first + 10];
        let b = &buf[first + 20..first + per_page + 3];
        let far = &buf[first + 3 * per_page + 8..first + 3 * per_page + 16];
        let r = merged(&[a, b, far, &buf[..0]]);
        assert_eq!(r.len(), 2, "{r:?}");
        let p0 = base + first * 8;
        assert_eq!(r[0], ((p0, p0 + 2 * PAGE), vec![0, 1]));
        assert_eq!(r[1], ((p0 + 3 * PAGE, p0 + 4 * PAGE), vec![2]));
        let (lo, hi) = pages(b);
        assert!(lo % PAGE == 0 && hi % PAGE == 0);
        assert!(lo <= b.as_ptr() as usize && hi >= b.as_ptr() as usize + b.len() * 8);
        // touching (end of one page range = start of the next) also merges
        let c = &buf[first + per_page..first + per_page + 1];
        let d = &buf[first + per_page - 1..first + per_page];
        assert_eq!(merged(&[c, d]).len(), 1);
        assert!(!Registration::none(2).locked(1));
    }
}
