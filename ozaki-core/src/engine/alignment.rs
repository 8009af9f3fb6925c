//! cuBLAS DGEMM at sizes that are not multiples of 16: how much slower it runs than the work
//! model, which is fitted on aligned shapes, says.
//!
//! cuBLAS's fp64 kernels load operands in vectors and tiles whose widths are powers of two;
//! when m, n and k are not all multiples of them it takes slower paths. On an H100 the same
//! cuBLAS ran 4096³ at 56.0 TF/s, 4100³ (multiples of 4) at 51.9, 4104³ (of 8) at 50.7,
//! and the odd 4095³, 4097³ and 4095 x 4099 x 4097 at 38-41 TF/s (BENCHMARKS.md, "The
//! engine's device-resident choice with a profile calibrated on the machine (H100)"). The
//! work model's correction interpolates in log₂ of the dimensions, where 4095 and 4096 are
//! the same point, so it cannot see this; the emulation pads its int8 products and does not
//! slow down, and an engine that prices cuBLAS as if aligned sends odd sizes to cuBLAS where
//! the emulation runs 1.4x faster.
//!
//! `ozaki calibrate` times cuBLAS at a few sizes just below an aligned one, one per class of
//! alignment (1, 2, 4, 8: the largest power of two dividing m, n and k), and the profile
//! keeps each class's time over the work model's price ([`fit`]). The engine multiplies the
//! work part of a native GPU product's price by its class's factor ([`slowdown`]). A class
//! the calibration did not measure, and every shape aligned to 16 or more, takes 1.

use super::work_model::{Sample, WorkModel};
use super::{CallShape, Residency};
use serde::{Deserialize, Serialize};

/// Alignments at and above this are what the work model was fitted on.
pub const ALIGNED: u64 = 16;

/// The sizes `ozaki calibrate` times cuBLAS at, one per alignment class below [`ALIGNED`]:
/// just below 4096, large enough that the product's time is work, not latency, and small
/// enough to take milliseconds.
pub const CALIBRATION_SIZES: [u64; 4] = [4095, 4094, 4092, 4088];

/// How much slower cuBLAS DGEMM ran at shapes of one alignment class than the work model
/// prices them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AlignmentSlowdown {
    /// The largest power of two dividing m, n and k (1, 2, 4 or 8).
    pub align: u64,
    /// Measured seconds over the work model's seconds at the measured shape (1: as aligned).
    pub slowdown: f64,
}

/// The largest power of two dividing m, n and k, at most [`ALIGNED`] (a zero dimension
/// divides by anything).
pub fn class(shape: &CallShape) -> u64 {
    let tz = [shape.m, shape.n, shape.k]
        .iter()
        .map(|&d| if d == 0 { 64 } else { d.trailing_zeros() })
        .min()
        .unwrap_or(0);
    (1u64 << tz.min(ALIGNED.trailing_zeros())).min(ALIGNED)
}

/// The factor the work part of a native GPU product's price takes at `shape`: its class's
/// measured slowdown, 1 where the class is aligned or was not measured.
pub fn slowdown(table: &[AlignmentSlowdown], shape: &CallShape) -> f64 {
    let align = class(shape);
    if align >= ALIGNED {
        return 1.0;
    }
    table
        .iter()
        .find(|s| s.align == align)
        .map_or(1.0, |s| s.slowdown)
}

/// Fits the table from cuBLAS timings at unaligned square sizes and the work model fitted on
/// the aligned ones: per class, the median of measured over modelled work. A slowdown
/// below 1 is timing noise (an unaligned size is never faster than the model of aligned
/// ones), kept at 1; a class measured only at aligned sizes gets no entry.
pub fn fit(unaligned: &[Sample], model: &WorkModel) -> Vec<AlignmentSlowdown> {
    let mut by_class: Vec<(u64, Vec<f64>)> = Vec::new();
    for s in unaligned {
        let shape = CallShape::gemm(s.m, s.n, s.k).with_residency(Residency::Device);
        let align = class(&shape);
        if align >= ALIGNED {
            continue;
        }
        let Some(ratio) = model
            .stretch_of(&shape, s.seconds)
            .filter(|_| s.seconds > 0.0)
        else {
            continue;
        };
        match by_class.iter_mut().find(|(a, _)| *a == align) {
            Some((_, v)) => v.push(ratio),
            None => by_class.push((align, vec![ratio])),
        }
    }
    let mut table: Vec<AlignmentSlowdown> = by_class
        .into_iter()
        .map(|(align, mut v)| {
            v.sort_by(f64::total_cmp);
            AlignmentSlowdown {
                align,
                slowdown: v[v.len() / 2].max(1.0),
            }
        })
        .collect();
    table.sort_by_key(|s| s.align);
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Routine;

    fn device(m: u64, n: u64, k: u64) -> CallShape {
        CallShape::gemm(m, n, k).with_residency(Residency::Device)
    }

    fn cube(n: u64) -> CallShape {
        device(n, n, n)
    }

    #[test]
    fn the_class_is_the_largest_power_of_two_dividing_every_dimension() {
        assert_eq!(class(&cube(4095)), 1);
        assert_eq!(class(&cube(4094)), 2);
        assert_eq!(class(&cube(4100)), 4);
        assert_eq!(class(&cube(4104)), 8);
        assert_eq!(class(&cube(4112)), 16);
        assert_eq!(class(&cube(4096)), 16);
        assert_eq!(class(&device(4096, 4096, 4097)), 1);
        assert_eq!(class(&device(4096, 0, 4100)), 4);
    }

    #[test]
    fn aligned_and_unmeasured_classes_take_no_factor() {
        let table = [AlignmentSlowdown {
            align: 1,
            slowdown: 1.44,
        }];
        assert_eq!(slowdown(&table, &cube(4095)), 1.44);
        assert_eq!(slowdown(&table, &cube(4096)), 1.0);
        assert_eq!(slowdown(&table, &cube(4100)), 1.0);
        assert_eq!(slowdown(&[], &cube(4095)), 1.0);
    }

    #[test]
    fn the_fit_is_measured_over_modelled_work_per_class() {
        // An aligned model at 56 TF/s with 10 µs of latency, and the H100's odd-size rate
        // (38.8 TF/s) and multiple-of-4 rate (51.9 TF/s).
        let model = WorkModel::from_rate(56e12, 10e-6);
        let at = |n: u64, tf: f64| Sample {
            routine: Routine::Dgemm,
            m: n,
            n,
            k: n,
            seconds: 10e-6 + 2.0 * (n * n * n) as f64 / tf,
        };
        let table = fit(
            &[
                at(4095, 38.8e12),
                at(4097, 39.2e12),
                at(4092, 51.9e12),
                at(4096, 50e12),
            ],
            &model,
        );
        assert_eq!(table.len(), 2, "{table:?}");
        assert_eq!(table[0].align, 1);
        assert!((table[0].slowdown - 56.0 / 39.2).abs() < 0.02, "{table:?}");
        assert_eq!(table[1].align, 4);
        assert!((table[1].slowdown - 56.0 / 51.9).abs() < 0.02, "{table:?}");
        // Faster than the model is noise, not a class that runs faster.
        let noise = fit(&[at(4094, 58e12)], &model);
        assert_eq!(noise[0].slowdown, 1.0);
    }
}
