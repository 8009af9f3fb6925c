//! Weighted statistics of call sizes, shared by `ozaki summary`, `ozaki replay` and
//! `ozaki report`.
//!
//! The paper characterises a workload by the distribution of nbar = 2mn/(m+n) weighted by
//! FLOPs, not by call count: a million 8x8 calls matter less than one 4096^3 call. So every
//! quantile here is a *weighted* quantile, and the share of work below a size threshold is
//! the share of weight, not of calls ("FLOP-weighted median and quartiles").

use crate::trace::CallRecord;

/// The nbar threshold below which emulation rarely pays off; summaries report the share of
/// work at or below it.
pub const SMALL_NBAR: f64 = 256.0;

/// A set of `(value, weight)` samples sorted by value, ready for weighted quantile queries.
///
/// Samples with a weight that is zero, negative or not finite, and samples whose value is
/// not finite, carry no information about where the work is and are dropped on construction.
#[derive(Debug, Clone, Default)]
pub struct WeightedSamples {
    /// Sorted by value (ties keep input order).
    samples: Vec<(f64, f64)>,
    /// Sum of the kept weights.
    total: f64,
}

impl WeightedSamples {
    /// Collects and sorts the samples.
    pub fn new(samples: impl IntoIterator<Item = (f64, f64)>) -> Self {
        let mut samples: Vec<(f64, f64)> = samples
            .into_iter()
            .filter(|&(v, w)| v.is_finite() && w.is_finite() && w > 0.0)
            .collect();
        samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total = samples.iter().map(|s| s.1).sum();
        WeightedSamples { samples, total }
    }

    /// Sum of all weights (0 when there are no usable samples).
    pub fn total_weight(&self) -> f64 {
        self.total
    }

    /// Number of usable samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there are no usable samples.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The weighted `q`-quantile: the smallest sample value v such that the samples with
    /// value <= v carry at least a fraction `q` of the total weight. `q` is clamped to
    /// [0, 1]; q = 0 gives the smallest value, q = 1 the largest. `None` without samples.
    ///
    /// This is the "lower" weighted quantile: it is always one of the sample values (no
    /// interpolation), so a median nbar is a size that really occurs in the trace.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let (first, last) = (self.samples.first()?, self.samples.last()?);
        let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
        if q == 0.0 {
            return Some(first.0);
        }
        let target = q * self.total;
        let mut cumulative = 0.0;
        for &(value, weight) in &self.samples {
            cumulative += weight;
            // Relative slack so that rounding in the running sum never skips the exact
            // boundary (e.g. q = 0.5 of two equal weights must give the first value).
            if cumulative >= target * (1.0 - 1e-12) {
                return Some(value);
            }
        }
        Some(last.0)
    }

    /// Fraction of the total weight carried by samples with value <= `threshold`
    /// (0 without samples).
    pub fn share_at_most(&self, threshold: f64) -> f64 {
        if self.total <= 0.0 {
            return 0.0;
        }
        // fold from +0.0, not `sum()`: an empty f64 sum is -0.0, which printed as "-0.0%".
        let below = self
            .samples
            .iter()
            .take_while(|s| s.0 <= threshold)
            .fold(0.0, |acc, s| acc + s.1);
        below / self.total
    }
}

/// FLOP-weighted distribution of nbar over a set of calls: the call-size summary that
/// `ozaki summary` prints and `ozaki replay`/`report` compare.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NbarStats {
    /// First quartile of nbar, FLOP-weighted.
    pub q1: f64,
    /// Median of nbar, FLOP-weighted.
    pub median: f64,
    /// Third quartile of nbar, FLOP-weighted.
    pub q3: f64,
    /// Share of all FLOPs in calls with nbar <= [`SMALL_NBAR`].
    pub share_small: f64,
    /// Total FLOPs of the calls (calls with zero FLOPs carry no weight).
    pub flops: f64,
}

impl NbarStats {
    /// Computes the statistics; `None` when the calls do no floating-point work at all
    /// (no calls, or only empty ones such as k = 0 quick returns).
    pub fn of<'a>(calls: impl IntoIterator<Item = &'a CallRecord>) -> Option<NbarStats> {
        NbarStats::of_samples(calls.into_iter().map(|c| (c.nbar(), c.flops())))
    }

    /// The same from `(nbar, flops)` pairs, for readers that keep no call records.
    pub fn of_samples(samples: impl IntoIterator<Item = (f64, f64)>) -> Option<NbarStats> {
        let samples = WeightedSamples::new(samples);
        Some(NbarStats {
            q1: samples.quantile(0.25)?,
            median: samples.quantile(0.5)?,
            q3: samples.quantile(0.75)?,
            share_small: samples.share_at_most(SMALL_NBAR),
            flops: samples.total_weight(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dgemm record of the given shape (parsed from JSON, so that fields added to the
    /// schema later need no change here).
    fn call(m: u64, n: u64, k: u64) -> CallRecord {
        let line = format!(
            r#"{{"type":"call","seq":0,"t_ns":0,"dur_ns":0,"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"N","transb":"N","m":{m},"n":{n},"k":{k},"lda":{m},"ldb":{k},"ldc":{m},"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}}"#
        );
        match crate::trace::parse_line(&line, 1).unwrap() {
            crate::trace::Line::Call(c) => *c,
            other => panic!("not a call: {other:?}"),
        }
    }

    #[test]
    fn unweighted_quantiles_match_the_lower_order_statistic() {
        let s = WeightedSamples::new([4.0, 1.0, 3.0, 2.0].map(|v| (v, 1.0)));
        assert_eq!(s.quantile(0.0), Some(1.0));
        assert_eq!(s.quantile(0.25), Some(1.0));
        assert_eq!(s.quantile(0.5), Some(2.0));
        assert_eq!(s.quantile(0.51), Some(3.0));
        assert_eq!(s.quantile(0.75), Some(3.0));
        assert_eq!(s.quantile(1.0), Some(4.0));
        assert_eq!(s.quantile(7.0), Some(4.0), "q is clamped");
    }

    #[test]
    fn heavy_weight_pulls_the_median() {
        // One big call outweighs many small ones: the median is the big call's size.
        let mut v: Vec<(f64, f64)> = (0..100).map(|_| (8.0, 1.0)).collect();
        v.push((1024.0, 1000.0));
        let s = WeightedSamples::new(v);
        assert_eq!(s.quantile(0.5), Some(1024.0));
        assert_eq!(s.quantile(0.05), Some(8.0));
        assert!((s.share_at_most(256.0) - 100.0 / 1100.0).abs() < 1e-15);
    }

    #[test]
    fn unusable_samples_are_dropped_and_empty_gives_none() {
        let s = WeightedSamples::new([
            (1.0, 0.0),
            (f64::NAN, 1.0),
            (2.0, f64::INFINITY),
            (3.0, -1.0),
        ]);
        assert!(s.is_empty());
        assert_eq!(s.quantile(0.5), None);
        assert_eq!(s.share_at_most(10.0), 0.0);
        let s = WeightedSamples::new([(5.0, 2.0), (1.0, 0.0)]);
        assert_eq!(
            (s.len(), s.total_weight(), s.quantile(0.5)),
            (1, 2.0, Some(5.0))
        );
    }

    #[test]
    fn share_with_nothing_below_is_positive_zero() {
        let s = WeightedSamples::new([(8192.0, 1.0)]);
        let share = s.share_at_most(256.0);
        assert!(share == 0.0 && share.is_sign_positive(), "got {share:?}");
    }

    #[test]
    fn share_at_most_includes_the_threshold() {
        let s = WeightedSamples::new([(256.0, 1.0), (257.0, 3.0)]);
        assert_eq!(s.share_at_most(256.0), 0.25);
        assert_eq!(s.share_at_most(255.9), 0.0);
        assert_eq!(s.share_at_most(1e9), 1.0);
    }

    #[test]
    fn nbar_stats_weight_by_flops() {
        // 3 calls of 64^3 (nbar 64) and one of 512^3 (nbar 512): the big call has 512x the
        // FLOPs of each small one, so every quartile is 512 and the small share is 3/515.
        let calls = vec![
            call(64, 64, 64),
            call(64, 64, 64),
            call(64, 64, 64),
            call(512, 512, 512),
        ];
        let s = NbarStats::of(&calls).unwrap();
        assert_eq!((s.q1, s.median, s.q3), (512.0, 512.0, 512.0));
        assert!((s.share_small - 3.0 / 515.0).abs() < 1e-15);
        assert_eq!(s.flops, 3.0 * 2.0 * 64f64.powi(3) + 2.0 * 512f64.powi(3));
        // nbar of a tall-skinny call is the harmonic-style mean 2mn/(m+n).
        let s = NbarStats::of(&[call(1000, 10, 7)]).unwrap();
        assert!((s.median - 2.0 * 1000.0 * 10.0 / 1010.0).abs() < 1e-12);
    }

    #[test]
    fn calls_without_work_give_no_stats() {
        assert_eq!(NbarStats::of(&[call(0, 5, 5), call(5, 5, 0)]), None);
        assert_eq!(NbarStats::of(&[]), None);
    }
}
