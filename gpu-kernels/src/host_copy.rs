//! Large copies between the caller's pageable memory and pinned staging.
//!
//! Host-resident calls are bound by host memory bandwidth, not by the link (BENCHMARKS.md,
//! "Pipelined host-resident path"): every staged byte is read from one buffer and written to
//! another while the copy engines read or write the staging beside it. A plain store to a
//! line not in cache first reads that line (read for ownership), so a `memcpy` that does not
//! switch to streaming stores moves three bytes per byte copied; non-temporal (streaming)
//! stores write whole lines without reading them, two bytes per byte. glibc's `memcpy`
//! streams only above a per-thread size threshold that depends on the cache sizes it
//! detects, which the column-by-column write-back of C and the per-thread slices of a ring
//! chunk may stay under. [`CopyKind::Stream`] streams regardless; `ozaki bench --host-link`
//! measures both side by side, and `crate::host::Tuning` picks one.

/// How a large host copy writes its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyKind {
    /// `memcpy` (`ptr::copy_nonoverlapping`): the C library decides.
    Memcpy,
    /// Non-temporal stores of the widest vector used here (AVX2, else SSE2; 64-byte AVX-512
    /// stores measured no faster on the H200 host and need a newer Rust than our 1.88),
    /// unaligned head and tail by `memcpy`, then `sfence`.
    Stream,
}

impl std::str::FromStr for CopyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<CopyKind, String> {
        match s {
            "memcpy" => Ok(CopyKind::Memcpy),
            "stream" => Ok(CopyKind::Stream),
            _ => Err(format!("copy kind {s:?} is neither memcpy nor stream")),
        }
    }
}

/// Below this many bytes a copy is a plain `memcpy` whatever the kind: streaming pays for
/// data that will not be read again soon, a short copy may well be.
const STREAM_MIN: usize = 4096;

/// Copies `len` bytes from `src` to `dst` with `kind`; after a [`CopyKind::Stream`] copy the
/// stores are fenced, so a DMA or another thread that synchronises with this one afterwards
/// sees them.
///
/// # Safety
/// `src..src + len` must be readable, `dst..dst + len` writable, and the two must not overlap.
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize, kind: CopyKind) {
    // Miri cannot run the vector stores: under it every copy is a `memcpy`, so the pointer
    // arithmetic of the callers (the strided copies of C) is still checked.
    if kind == CopyKind::Memcpy || len < STREAM_MIN || cfg!(miri) {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { stream(dst, src, len, Width::best()) }
}

/// Vector width of a streaming copy (the host-link microbenchmark times each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// 16-byte `movntdq` (every x86-64 CPU).
    Sse2,
    /// 32-byte `vmovntdq`.
    Avx2,
}

impl Width {
    /// The widest width this CPU runs, detected once.
    pub fn best() -> Width {
        static BEST: std::sync::OnceLock<Width> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            Width::all()
                .into_iter()
                .rev()
                .find(|w| w.available())
                .unwrap_or(Width::Sse2)
        })
    }

    /// Every width, narrowest first.
    pub fn all() -> [Width; 2] {
        [Width::Sse2, Width::Avx2]
    }

    /// Whether this CPU runs it.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Width::Sse2 => true,
                Width::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Name in benchmark rows.
    pub fn name(self) -> &'static str {
        match self {
            Width::Sse2 => "sse2",
            Width::Avx2 => "avx2",
        }
    }
}

/// Streaming copy with a given width (falls back to `memcpy` where the CPU lacks it).
///
/// # Safety
/// As [`copy`].
pub unsafe fn stream(dst: *mut u8, src: *const u8, len: usize, width: Width) {
    #[cfg(target_arch = "x86_64")]
    if width.available() {
        // SAFETY: the caller's contract; the width's feature was detected above.
        unsafe {
            match width {
                Width::Sse2 => x86::stream_sse2(dst, src, len),
                Width::Avx2 => x86::stream_avx2(dst, src, len),
            }
        }
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// One streaming loop per width: unaligned head by `memcpy` up to the destination's
    /// alignment, four vectors of `$w` bytes per iteration, then single vectors, the tail by
    /// `memcpy`, and an `sfence`.
    macro_rules! stream_fn {
        ($name:ident, $feat:literal, $ty:ty, $w:expr, $load:ident, $store:ident) => {
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn $name(dst: *mut u8, src: *const u8, len: usize) {
                // SAFETY: every access of the body stays inside [0, len) of the caller's
                // non-overlapping ranges; stores are to $w-aligned destinations.
                unsafe {
                    let head = dst.align_offset($w).min(len);
                    std::ptr::copy_nonoverlapping(src, dst, head);
                    let (mut d, mut s, mut n) = (dst.add(head), src.add(head), len - head);
                    while n >= 4 * $w {
                        let x0 = $load(s as *const $ty);
                        let x1 = $load(s.add($w) as *const $ty);
                        let x2 = $load(s.add(2 * $w) as *const $ty);
                        let x3 = $load(s.add(3 * $w) as *const $ty);
                        $store(d as *mut $ty, x0);
                        $store(d.add($w) as *mut $ty, x1);
                        $store(d.add(2 * $w) as *mut $ty, x2);
                        $store(d.add(3 * $w) as *mut $ty, x3);
                        d = d.add(4 * $w);
                        s = s.add(4 * $w);
                        n -= 4 * $w;
                    }
                    while n >= $w {
                        $store(d as *mut $ty, $load(s as *const $ty));
                        d = d.add($w);
                        s = s.add($w);
                        n -= $w;
                    }
                    std::ptr::copy_nonoverlapping(s, d, n);
                    _mm_sfence();
                }
            }
        };
    }

    stream_fn!(
        stream_sse2,
        "sse2",
        __m128i,
        16,
        _mm_loadu_si128,
        _mm_stream_si128
    );
    stream_fn!(
        stream_avx2,
        "avx2",
        __m256i,
        32,
        _mm256_loadu_si256,
        _mm256_stream_si256
    );
}

/// Raw pointer that may cross into scoped threads (each thread touches a disjoint range).
#[derive(Clone, Copy)]
struct Ptr(*mut u8);
// SAFETY: only used for disjoint byte ranges of live buffers inside thread scopes.
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

/// Copies `len` bytes on `threads` threads, each a contiguous slice of at least 64 KiB.
///
/// # Safety
/// As [`copy`].
pub unsafe fn par_copy(dst: *mut u8, src: *const u8, len: usize, threads: usize, kind: CopyKind) {
    // SAFETY: the caller's contract.
    unsafe { par_apply(dst, src, len, threads, &|d, s, n| copy(d, s, n, kind)) }
}

/// [`par_copy`] streaming with a given width (the host-link microbenchmark times each).
///
/// # Safety
/// As [`copy`].
pub unsafe fn par_stream(dst: *mut u8, src: *const u8, len: usize, threads: usize, width: Width) {
    // SAFETY: the caller's contract.
    unsafe { par_apply(dst, src, len, threads, &|d, s, n| stream(d, s, n, width)) }
}

/// Runs `f` on `threads` disjoint contiguous slices of the two ranges, the first on this
/// thread.
///
/// # Safety
/// `f` must be safe to call on any sub-range of the caller's ranges, which satisfy [`copy`].
unsafe fn par_apply(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    threads: usize,
    f: &(dyn Fn(*mut u8, *const u8, usize) + Sync),
) {
    let t = threads.clamp(1, len.div_ceil(64 << 10).max(1));
    let per = len.div_ceil(t);
    let (d, s) = (Ptr(dst), Ptr(src as *mut u8));
    std::thread::scope(|sc| {
        // Started under the spawn hook (the shim's blocks the program's signals in them).
        ozaki_core::spawn::spawning(|| {
            for i in 1..t {
                let (lo, hi) = ((i * per).min(len), ((i + 1) * per).min(len));
                sc.spawn(move || {
                    let (d, s) = (d, s);
                    // SAFETY: [lo, hi) lies inside both live, disjoint ranges.
                    f(unsafe { d.0.add(lo) }, unsafe { s.0.add(lo) }, hi - lo)
                });
            }
        });
        f(d.0, s.0, per.min(len))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind and width copies exactly, for unaligned starts, lengths around the
    /// vector and loop sizes, and on several threads; nothing outside the range is touched.
    #[test]
    fn every_kind_and_width_copies_exactly() {
        let src: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in [
            0usize, 1, 15, 63, 64, 255, 4095, 4096, 4097, 70_001, 250_000,
        ] {
            for off in [0usize, 1, 8, 33] {
                for width in Width::all() {
                    let mut dst = vec![0xAAu8; 300_100];
                    // SAFETY: both ranges lie inside their vectors and do not overlap.
                    unsafe {
                        stream(
                            dst.as_mut_ptr().add(off + 3),
                            src.as_ptr().add(off),
                            len,
                            width,
                        )
                    };
                    assert_eq!(
                        &dst[off + 3..off + 3 + len],
                        &src[off..off + len],
                        "{width:?} {len} {off}"
                    );
                    assert!(dst[..off + 3].iter().all(|&b| b == 0xAA));
                    assert!(dst[off + 3 + len..].iter().all(|&b| b == 0xAA));
                }
                for kind in [CopyKind::Memcpy, CopyKind::Stream] {
                    for threads in [1, 3] {
                        let mut dst = vec![0x55u8; 300_100];
                        // SAFETY: as above.
                        unsafe {
                            par_copy(
                                dst.as_mut_ptr().add(off),
                                src.as_ptr().add(off),
                                len,
                                threads,
                                kind,
                            )
                        };
                        assert_eq!(
                            &dst[off..off + len],
                            &src[off..off + len],
                            "{kind:?} {threads}"
                        );
                        assert!(dst[off + len..].iter().all(|&b| b == 0x55));
                    }
                }
            }
        }
    }

    #[test]
    fn kinds_parse_by_name() {
        assert_eq!("stream".parse(), Ok(CopyKind::Stream));
        assert_eq!("memcpy".parse(), Ok(CopyKind::Memcpy));
        assert!("fast".parse::<CopyKind>().is_err());
    }
}
