//! The per-side summary the rule reads: each line reduced to a few small integer keys
//! ([`LineKey`]), and each side of the call to the maxima of those keys per (shift class,
//! span) cell plus the set of concentration values that occur ([`SideSummary`]). The
//! summary is a fixed-size array of u32 words (about 65 KiB, whatever the number of lines)
//! in the layout the GPU's `line_summary` kernel writes, so the GPU route downloads it instead
//! of the per-line table, and `cpu-ozaki` builds the same words from its own line statistics:
//! both routes hand the rule the same summary and choose the same count.
//!
//! # Why the summary loses nothing the rule uses
//! The rule ([`super::judge`]) reads each side through a few maxima over its lines: the
//! weights `Y` and `Y / M`, functions of the line's quarter-bit concentration `(g, g_up)`
//! only, and per (shift class, span) group the maxima of `1/t`, `1/(t M)` and the depth. Every
//! one of them is a monotone function of an integer key of the line, so the maximum over the
//! lines is the function's value at the largest key, and a maximum of integers does not depend
//! on the order in which the lines are met (GPU atomics):
//! - `1/t = 2^(qt/4)` with `qt = ceil(-4 log2 t)`: the cell keeps `max qt`;
//! - `1/(t M)` with the allowance `M(g) = max(F, N 2^(g/4))` (`F = T u / κ`, `N = u
//!   sqrt(k/6)`; normwise and guaranteed: `M = F`): where `N 2^(g/4) <= F`, that is `g <=
//!   g*` ([`KeyParams::g_star`]), it is `2^(qt/4) / F`, increasing in `qt`; elsewhere it is
//!   `2^((qt - g)/4) / N`, increasing in `qt - g`. The cell keeps `max qt` over its lines with
//!   `g <= g*` and `max (qt - g)` over the others, and the group's value is the larger of the
//!   two functions at those maxima: exactly the maximum over its lines of the per-line value.
//!   (A single `max qt` and `max (qt - g)` over all lines would only bound it from above.)
//! - `Y` and `Y / M` take one value per `(g, g_up)`: the summary keeps the set of values that
//!   occur (a bitmap), and the rule takes the maxima over that set;
//! - the depth: the cell keeps its maximum.
//!
//! `ozaki-core`'s tests compare the summary's [`super::Side`] with one computed line by line
//! and require it to be at least as large in every maximum (`summary_is_the_per_line_side`).
//!
//! # Layout (u32 words, little-endian halves for the u64 at the start)
//! - words 0-1: the largest `max |x|` bit pattern of the side (NaN/Inf: `>=
//!   NON_FINITE_BITS`), as one u64;
//! - [`CONC_AT`]..: the concentration bitmap, bit `2 (g + CONC_OFFSET) + (g_up - g)`;
//! - [`CLASS_AT`]..: the occupied shift classes, bit `class`;
//! - [`CELLS_AT`]..: per cell `class * SPANS + span`, four words: `max qt`, `max qt` of the
//!   lines with `g <= g*`, `max (qt - g)` of the others (each `value + KEY_BIAS`, 0 for
//!   none), and `max depth + 1` (0: no line).
//!
//! Zero lines and non-finite lines add only their maximum (words 0-1); a non-finite maximum
//! makes the rule decline before it reads anything else.

use super::{
    Accuracy, LOGNORMAL_CAP_BITS, Lines, NON_FINITE_BITS, Request, SideBounds, U, log2_fast,
    quarters,
};
use crate::scaling::{MAX_SHIFT, SHIFT_CLASSES, norm_class};

/// Spans kept apart: `0 ..= MAX_SHIFT + 6` (larger spans never scale exactly).
pub const SPANS: usize = (MAX_SHIFT + 7) as usize;

/// `g` runs from `-CONC_OFFSET` to 0: `n2 >= 0` and `n1 < log2(2k) + 2^-17`, so `g >
/// -4 log2(2k) - 1 >= -261` for any 64-bit k.
pub const CONC_OFFSET: i64 = 319;

/// Words of the concentration bitmap: `2 (CONC_OFFSET + 1)` bits.
pub const CONC_WORDS: usize = 2 * (CONC_OFFSET as usize + 1) / 32;

/// Words of the shift-class bitmap.
pub const CLASS_WORDS: usize = SHIFT_CLASSES.div_ceil(32) + 1;

/// First word of the concentration bitmap.
pub const CONC_AT: usize = 2;

/// First word of the class bitmap.
pub const CLASS_AT: usize = CONC_AT + CONC_WORDS;

/// First word of the cells.
pub const CELLS_AT: usize = CLASS_AT + CLASS_WORDS;

/// u32 words of one side's summary.
pub const SUMMARY_WORDS: usize = CELLS_AT + 4 * SHIFT_CLASSES * SPANS;

/// Added to the signed keys stored in the cells, so that 0 means "no line" and an unsigned
/// maximum is the signed one. Keys stay far inside `±KEY_BIAS` (`|qt| <= 4 * 2200`).
pub const KEY_BIAS: i64 = 1 << 30;

/// What the line keys need from the request (the GPU kernel gets the same values).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyParams {
    /// `log2 k` as the rule computes it (`log2_fast`).
    pub log2_k: f64,
    /// Normwise: the typical entry is the line's scale (`qt = 0`).
    pub normwise: bool,
    /// The largest `g` whose allowance is the floor `F` (`i64::MAX` where the allowance is
    /// always `F`).
    pub g_star: i64,
}

impl KeyParams {
    /// The parameters of a request.
    pub fn new(req: &Request) -> KeyParams {
        let floor = req.target_ulps * U / super::KAPPA;
        let native = U * (req.k as f64 / 6.0).sqrt();
        let g_star = if req.accuracy == Accuracy::Default {
            // native 2^(g/4) grows with g: the last g at which it stays at or below F
            (-CONC_OFFSET..=0)
                .rev()
                .find(|&g| native * super::pow2_quarters(g) <= floor)
                .unwrap_or(-CONC_OFFSET - 1)
        } else {
            i64::MAX
        };
        KeyParams {
            log2_k: log2_fast(req.k.max(1) as f64),
            normwise: req.accuracy == Accuracy::Normwise,
            g_star: if g_star == 0 { i64::MAX } else { g_star },
        }
    }
}

/// The keys of one nonzero finite line (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineKey {
    /// Shift class of the line's bound ([`norm_class`]).
    pub class: usize,
    /// `min(span, MAX_SHIFT + 6)`.
    pub span: usize,
    /// `max (e - E(x))`.
    pub depth: u32,
    /// `floor(4 min(n2 - n1, 0))`, `n1`, `n2` the log2 of the line's 1- and 2-norm over `2^e`.
    pub g: i64,
    /// Whether `4 min(n2 - n1, 0)` is not an integer (`g_up = g + 1`).
    pub g_up: bool,
    /// `ceil(-4 log2 t)`, `t` the typical entry (normwise: 0).
    pub qt: i64,
}

/// The statistics of one line the keys read (a row of [`Lines`]).
#[derive(Debug, Clone, Copy)]
pub struct KeyInput {
    /// Shift bound of the line (norm: `S`; fast: `4096 k`; accurate: the coarse product's).
    pub bound: u64,
    /// `abs1`.
    pub abs1: u64,
    /// `abs2`.
    pub abs2: u64,
    /// `log_depth`.
    pub log_depth: u64,
    /// `log_depth_sq`.
    pub log_depth_sq: u64,
    /// `nonzeros`.
    pub nonzeros: u64,
    /// `range`.
    pub range: u64,
}

impl LineKey {
    /// The keys of a nonzero finite line. The GPU's `line_summary` kernel computes the same
    /// with the same IEEE operations in the same order (and the same `log2_fast` table).
    pub fn of(x: &KeyInput, p: &KeyParams) -> LineKey {
        let fix = f64::from(super::FIX_BITS);
        // log2 of ||x||_1 2^-e and ||x||_2 2^-e
        let n1 = log2_fast(x.abs1.max(1) as f64) - fix;
        let n2 = 0.5 * (log2_fast(x.abs2.max(1) as f64) - fix);
        let d = (n2 - n1).min(0.0);
        let (g, g_up) = (quarters(d, false), quarters(d, true));
        let qt = if p.normwise {
            0
        } else {
            quarters(-log2_typical(x, n1, p.log2_k), true)
        };
        LineKey {
            class: norm_class(x.bound),
            span: ((x.range >> 32) as usize).min(SPANS - 1),
            depth: (x.range & 0xffff_ffff) as u32,
            g: g.max(-CONC_OFFSET),
            g_up: g_up > g,
            qt,
        }
    }
}

/// `log2 t` of a line: `t = min(2^-D exp((ln 2 s)^2 / 2), ||x||_1 / (k 2^e))` with `D`, `s`
/// the mean and standard deviation of the depths `e - E(x)` (the rule's module doc);
/// `n1 = log2(||x||_1 2^-e)`.
fn log2_typical(x: &KeyInput, n1: f64, log2_k: f64) -> f64 {
    let nz = x.nonzeros as f64;
    let mean = x.log_depth as f64 / nz;
    let var = (x.log_depth_sq as f64 / nz - mean * mean).max(0.0);
    // the log-normal mean above the geometric one, at most LOGNORMAL_CAP_BITS: lines whose
    // magnitudes spread over many binades in blocks are no log-normal sample
    let lognormal = -mean + (var * std::f64::consts::LN_2 / 2.0).min(LOGNORMAL_CAP_BITS);
    lognormal.min(n1 - log2_k)
}

/// One side's summary, owned (module doc).
#[derive(Clone, PartialEq, Eq)]
pub struct SideSummary {
    words: Box<[u32]>,
}

impl std::fmt::Debug for SideSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.view();
        f.debug_struct("SideSummary")
            .field("top", &format_args!("{:#x}", v.top()))
            .field("cells", &v.cells().count())
            .finish()
    }
}

impl Default for SideSummary {
    fn default() -> Self {
        SideSummary {
            words: vec![0; SUMMARY_WORDS].into_boxed_slice(),
        }
    }
}

impl SideSummary {
    /// The summary of lines with the given shift bounds.
    pub(super) fn of_lines(lines: &Lines, bounds: SideBounds, p: &KeyParams) -> SideSummary {
        let mut s = SideSummary::default();
        for i in 0..lines.len() {
            s.add_top(lines.maxbits[i]);
            if lines.maxbits[i] == 0
                || lines.maxbits[i] >= NON_FINITE_BITS
                || lines.nonzeros[i] == 0
            {
                continue;
            }
            let input = KeyInput {
                bound: bounds.of(i),
                abs1: lines.abs1[i],
                abs2: lines.abs2[i],
                log_depth: lines.log_depth[i],
                log_depth_sq: lines.log_depth_sq[i],
                nonzeros: lines.nonzeros[i],
                range: lines.range[i],
            };
            s.add(&LineKey::of(&input, p), p);
        }
        s
    }

    /// The summary of a side's lines under the request's own bounds (norm: each line's `S`,
    /// fast: `4096 k`); accurate scaling's given bounds apply to both sides together, through
    /// [`super::choose`].
    pub fn of(lines: &Lines, req: &Request) -> SideSummary {
        let bounds = match req.bounds {
            super::Bounds::Fast => SideBounds::All(4096 * req.k.max(1) as u64),
            _ => SideBounds::Each(lines.coarse_sq),
        };
        SideSummary::of_lines(lines, bounds, &KeyParams::new(req))
    }

    /// A summary from the words the GPU wrote (`None` unless there are [`SUMMARY_WORDS`]).
    pub fn from_words(words: &[u32]) -> Option<SideSummary> {
        (words.len() == SUMMARY_WORDS).then(|| SideSummary {
            words: words.into(),
        })
    }

    /// The words, in the layout of the module doc.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// The borrowed view the rule reads.
    pub fn view(&self) -> SummaryView<'_> {
        SummaryView { words: &self.words }
    }

    fn add_top(&mut self, maxbits: u64) {
        let top = self.view().top().max(maxbits);
        self.words[0] = top as u32;
        self.words[1] = (top >> 32) as u32;
    }

    /// Adds a line's keys (what the kernel does with atomics).
    pub fn add(&mut self, key: &LineKey, p: &KeyParams) {
        let w = &mut self.words;
        let bit = 2 * (key.g + CONC_OFFSET) as usize + usize::from(key.g_up);
        w[CONC_AT + bit / 32] |= 1 << (bit % 32);
        w[CLASS_AT + key.class / 32] |= 1 << (key.class % 32);
        let cell = CELLS_AT + 4 * (key.class * SPANS + key.span);
        let enc = |v: i64| (v.clamp(1 - KEY_BIAS, KEY_BIAS - 1) + KEY_BIAS) as u32;
        let up = |slot: &mut u32, v: u32| *slot = (*slot).max(v);
        up(&mut w[cell], enc(key.qt));
        if key.g <= p.g_star {
            up(&mut w[cell + 1], enc(key.qt));
        } else {
            up(&mut w[cell + 2], enc(key.qt - key.g));
        }
        up(&mut w[cell + 3], key.depth.saturating_add(1));
    }
}

/// A side's summary as the rule reads it: the words of [`SideSummary`] or of the GPU's
/// download.
#[derive(Debug, Clone, Copy)]
pub struct SummaryView<'a> {
    words: &'a [u32],
}

/// One occupied cell of a summary, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// Shift class.
    pub class: usize,
    /// Span.
    pub span: usize,
    /// `max qt`.
    pub qt: i64,
    /// `max qt` of the lines with `g <= g*`.
    pub qt_floor: Option<i64>,
    /// `max (qt - g)` of the lines with `g > g*`.
    pub qt_native: Option<i64>,
    /// `max depth`.
    pub depth: u32,
}

impl<'a> SummaryView<'a> {
    /// A view of words in the summary layout (`None` unless there are [`SUMMARY_WORDS`]).
    pub fn new(words: &'a [u32]) -> Option<SummaryView<'a>> {
        (words.len() == SUMMARY_WORDS).then_some(SummaryView { words })
    }

    /// The words, in the layout of the module doc.
    pub fn words(&self) -> &'a [u32] {
        self.words
    }

    /// The largest `max |x|` bit pattern of the side.
    pub fn top(&self) -> u64 {
        u64::from(self.words[0]) | u64::from(self.words[1]) << 32
    }

    /// The `(g, g_up)` values that occur.
    pub fn concentrations(&self) -> impl Iterator<Item = (i64, i64)> + 'a {
        bits(&self.words[CONC_AT..CLASS_AT]).map(|b| {
            let g = (b / 2) as i64 - CONC_OFFSET;
            (g, g + (b % 2) as i64)
        })
    }

    /// The shift classes of the side's nonzero lines.
    pub fn classes(&self) -> impl Iterator<Item = usize> + 'a {
        bits(&self.words[CLASS_AT..CELLS_AT])
    }

    /// The occupied cells.
    pub fn cells(&self) -> impl Iterator<Item = Cell> + 'a {
        let words = self.words;
        self.classes().flat_map(move |class| {
            (0..SPANS).filter_map(move |span| {
                let at = CELLS_AT + 4 * (class * SPANS + span);
                let c = &words[at..at + 4];
                let dec = |v: u32| (v != 0).then(|| i64::from(v) - KEY_BIAS);
                Some(Cell {
                    class,
                    span,
                    qt: dec(c[0])?,
                    qt_floor: dec(c[1]),
                    qt_native: dec(c[2]),
                    depth: c[3].saturating_sub(1),
                })
            })
        })
    }
}

/// The indices of the set bits of `words`, lowest first.
fn bits(words: &[u32]) -> impl Iterator<Item = usize> + '_ {
    words.iter().enumerate().flat_map(|(i, &w)| {
        let mut w = w;
        std::iter::from_fn(move || {
            (w != 0).then(|| {
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                32 * i + b
            })
        })
    })
}
