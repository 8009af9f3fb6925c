//! The accuracy rule on `cpu-ozaki` (`ozaki_core::rule`): the contract on benign and
//! adversarial inputs, declines made before any residue work, entries that depend on their
//! own row and column, and the guaranteed mode's bound, all against the exact product.

use ozaki_core::accuracy::families::{self, Case, Op};
use ozaki_core::accuracy::{Reference, gamma};
use ozaki_core::blas::Trans;
use ozaki_core::emulate::{self, EmulationConfig, Fallback};
use ozaki_core::rule::{Accuracy, LineTable, Request};
use ozaki_core::scaling::ScalingMode;
use ozaki_core::testutil::{Family, Rng, matrix};

const U: f64 = f64::EPSILON / 2.0;

/// Multiplies every entry by `factor` with probability `rate` (sparse outliers).
fn outliers(x: &mut [f64], rate: f64, factor: f64, rng: &mut Rng) {
    for v in x.iter_mut() {
        if rng.uniform() < rate {
            *v *= factor;
        }
    }
}

fn pair(fam: Family, (m, n, k): (usize, usize, usize), seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    (matrix(fam, m, k, &mut rng), matrix(fam, k, n, &mut rng))
}

/// Emulated max error, native max error, moduli; or the fallback.
fn run(
    a: &[f64],
    b: &[f64],
    (m, n, k): (usize, usize, usize),
    cfg: &EmulationConfig,
) -> Result<(f64, f64, usize), Fallback> {
    let (c, info) = emulate::matmul(a, b, m, n, k, cfg)?;
    let r = Reference::new(a, b, m, n, k);
    Ok((
        r.errors(&c, k, |_, _| true).max,
        r.native_errors(k, |_, _| true).max,
        info.moduli,
    ))
}

#[test]
fn benign_inputs_emulate_within_the_contract_and_normal_data_takes_14_moduli() {
    let cfg = EmulationConfig::default();
    for (fam, dims) in [
        (Family::Normal, (40, 40, 4096)),
        (Family::Normal, (24, 24, 16384)),
        (Family::Uniform, (40, 40, 1024)),
        (Family::Integer(100), (40, 40, 1024)),
        (Family::Spread(0.5), (40, 40, 1024)),
        (Family::Spread(1.0), (40, 40, 1024)),
        (Family::Spread(2.0), (40, 40, 1024)),
        (Family::Rank1Noise, (40, 40, 1024)),
    ] {
        let (a, b) = pair(fam, dims, 3);
        let (e, nat, r) =
            run(&a, &b, dims, &cfg).unwrap_or_else(|f| panic!("{fam:?} {dims:?} declined: {f}"));
        assert!(
            e <= (2.0 * nat).max(4.0 * U),
            "{fam:?} {dims:?}: {r} moduli err {e:.2e}, native {nat:.2e}"
        );
        if fam == Family::Normal {
            assert_eq!(r, 14, "{dims:?}");
        }
    }
}

#[test]
fn rows_and_columns_scaled_by_powers_of_two_take_the_unscaled_count() {
    let dims = (32, 32, 2048);
    let (mut a, mut b) = pair(Family::Normal, dims, 5);
    let plain = run(&a, &b, dims, &EmulationConfig::default()).unwrap();
    let mut rng = Rng::new(9);
    for i in 0..dims.0 {
        let s = 2f64.powi((rng.uniform() * 80.0 - 40.0) as i32);
        (0..dims.2).for_each(|l| a[i + l * dims.0] *= s);
    }
    for j in 0..dims.1 {
        let s = 2f64.powi((rng.uniform() * 80.0 - 40.0) as i32);
        b[j * dims.2..(j + 1) * dims.2]
            .iter_mut()
            .for_each(|x| *x *= s);
    }
    let scaled = run(&a, &b, dims, &EmulationConfig::default()).unwrap();
    assert_eq!(scaled.2, plain.2);
    assert!(scaled.0 <= (2.0 * scaled.1).max(4.0 * U), "{scaled:?}");
}

/// 0.1% of the entries 10^8 or 10^12 larger: the small entries of such lines cannot keep
/// fp64's bits within 62-bit scaled integers; the rule declines, and does so right after the
/// scan (no product of any kind), where 17 forced moduli err 10^3-10^8 times more than native.
#[test]
fn sparse_outliers_are_declined_before_any_product_is_formed() {
    let dims = (32, 32, 2048);
    for factor in [1e8, 1e12] {
        let (mut a, mut b) = pair(Family::Normal, dims, 11);
        let mut rng = Rng::new(12);
        outliers(&mut a, 1e-3, factor, &mut rng);
        outliers(&mut b, 1e-3, factor, &mut rng);
        let before = emulate::product_passes_on_this_thread();
        let got = run(&a, &b, dims, &EmulationConfig::default());
        assert!(
            matches!(got, Err(Fallback::AccuracyUnreachable { .. })),
            "x{factor:e}: {got:?}"
        );
        assert_eq!(
            emulate::product_passes_on_this_thread(),
            before,
            "x{factor:e}: a declined call ran a product"
        );
        // what the emulation would have given: far outside the contract
        let forced = EmulationConfig {
            moduli: emulate::Moduli::Fixed(17),
            ..EmulationConfig::default()
        };
        let (e, nat, _) = run(&a, &b, dims, &forced).unwrap();
        assert!(
            e > 100.0 * nat,
            "x{factor:e}: forced 17 moduli err {e:.2e} vs {nat:.2e}"
        );
        assert_eq!(emulate::product_passes_on_this_thread(), before + 17);
    }
}

#[test]
fn exponent_spread_four_is_declined_and_normwise_accepts_it() {
    let dims = (32, 32, 1024);
    let (a, b) = pair(Family::Spread(4.0), dims, 13);
    assert!(matches!(
        run(&a, &b, dims, &EmulationConfig::default()),
        Err(Fallback::AccuracyUnreachable { .. })
    ));
    let normwise = EmulationConfig {
        accuracy: Accuracy::Normwise,
        ..EmulationConfig::default()
    };
    let (c, info) = emulate::matmul(&a, &b, dims.0, dims.1, dims.2, &normwise).unwrap();
    // normwise: relative to k max|a_i| max|b_j|, within a few u
    for j in 0..dims.1 {
        for i in 0..dims.0 {
            let ra = (0..dims.2)
                .map(|l| a[i + l * dims.0].abs())
                .fold(0.0, f64::max);
            let cb = b[j * dims.2..(j + 1) * dims.2]
                .iter()
                .fold(0.0f64, |m, x| m.max(x.abs()));
            let exact: f64 = {
                let mut acc = ozaki_core::exact::ExactAcc::new();
                (0..dims.2).for_each(|l| acc.add_product(a[i + l * dims.0], b[l + j * dims.2]));
                acc.abs_diff(c[i + j * dims.0])
            };
            assert!(
                exact <= 4.0 * U * ra * cb * dims.2 as f64,
                "({i}, {j}) with {} moduli",
                info.moduli
            );
        }
    }
}

/// LAPACK-style recomputation: rows 0..20 of A B computed alone give the same bits.
#[test]
fn an_entry_depends_on_its_own_row_and_column_only() {
    for (fam, (m, n, k)) in [
        (Family::Normal, (160, 24, 1024)),
        (Family::Uniform, (160, 24, 512)),
        (Family::Spread(1.0), (160, 24, 512)),
    ] {
        let (a, b) = pair(fam, (m, n, k), 17);
        let cfg = EmulationConfig::default();
        let (full, fi) = emulate::matmul(&a, &b, m, n, k, &cfg).unwrap();
        let rows = 20;
        let a20: Vec<f64> = (0..k)
            .flat_map(|l| a[l * m..l * m + rows].to_vec())
            .collect();
        let (part, pi) = emulate::matmul(&a20, &b, rows, n, k, &cfg).unwrap();
        assert_eq!(fi.moduli, pi.moduli, "{fam:?}");
        for j in 0..n {
            for i in 0..rows {
                assert_eq!(
                    full[i + j * m].to_bits(),
                    part[i + j * rows].to_bits(),
                    "{fam:?} ({i}, {j})"
                );
            }
        }
        // and columns 0..8 of B
        let cols = 8;
        let (pc, _) = emulate::matmul(&a, &b[..k * cols], m, cols, k, &cfg).unwrap();
        assert!(
            pc.iter()
                .zip(&full[..m * cols])
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{fam:?}: a column slice differs"
        );
    }
}

/// The guaranteed bound holds entry by entry on every input it accepts, adversarial ones
/// included, and it declines where the bound cannot meet `γ_k`. The adversarial operands are
/// the accuracy suite's own generators (`ozaki accuracy`): sparse outliers (x1e8, x1e12),
/// 32 x 32 blocks with their own scale, graded lines and integral-like lines, each at two
/// values of k; their lines reach 27 or more binades below their maxima, so the bound
/// declines them here. The same block and outlier structures on integer entries scale to
/// integers exactly (error bound u): those must emulate, and meet `γ_k`.
#[test]
fn guaranteed_mode_meets_gamma_k_wherever_it_emulates() {
    let cfg = EmulationConfig {
        accuracy: Accuracy::Guaranteed,
        ..EmulationConfig::default()
    };
    let (mut emulated, mut declined) = (Vec::new(), Vec::new());
    // whether the call emulated: it then met gamma_k entry by entry, else it declined for
    // the bound
    let check =
        |what: &str, a: &[f64], b: &[f64], dims: (usize, usize, usize)| match run(a, b, dims, &cfg)
        {
            Ok((e, _, r)) => {
                assert!(
                    e <= gamma(dims.2),
                    "{what}: {r} moduli err {e:.2e} > gamma_k {:.2e}",
                    gamma(dims.2)
                );
                true
            }
            Err(f) => {
                assert!(
                    matches!(f, Fallback::BoundUnreachable { .. }),
                    "{what}: {f}"
                );
                false
            }
        };
    let mut record = |what: String, emulates: bool| {
        if emulates {
            emulated.push(what)
        } else {
            declined.push(what)
        }
    };
    for (fam, dims) in [
        (Family::Normal, (24, 24, 256)),
        (Family::Uniform, (24, 24, 1024)),
        (Family::Integer(1000), (24, 24, 4096)),
        (Family::Spread(0.5), (24, 24, 1024)),
        (Family::Spread(2.0), (24, 24, 256)),
        (Family::Rank1Noise, (24, 24, 256)),
    ] {
        let (a, b) = pair(fam, dims, 21);
        let what = format!("{fam:?} {dims:?}");
        record(what.clone(), check(&what, &a, &b, dims));
    }
    let suite =
        families::select("outliers-1e8,outliers-1e12,block-scaled,graded,integrals").unwrap();
    for fam in &suite {
        for (m, n, k) in [(64, 40, 64), (64, 40, 512)] {
            let case = Case {
                op: Op::Gemm(Trans::No, Trans::No),
                m,
                n,
                k,
            };
            let (a, b) = fam.generate(&case);
            let what = format!("{} {m}x{n}x{k}", fam.name);
            record(what.clone(), check(&what, &a, &b, (m, n, k)));
        }
    }
    // The same structures on integer entries: every line scales to integers exactly, so the
    // bound is u whatever the range and the calls must emulate, within gamma_k.
    let mut exact_lines = Vec::new();
    for (what, dims) in [
        ("integer block-scaled", (64, 40, 512)),
        ("integer outliers", (64, 40, 512)),
    ] {
        let (m, n, k) = dims;
        let mut rng = Rng::new(27);
        let mut a = matrix(Family::Integer(1000), m, k, &mut rng);
        let mut b = matrix(Family::Integer(1000), k, n, &mut rng);
        if what == "integer block-scaled" {
            // 32 x 32 blocks scaled by 2^[-20, 20]
            for (x, rows, cols) in [(&mut a, m, k), (&mut b, k, n)] {
                let br = rows.div_ceil(32);
                let s: Vec<f64> = (0..br * cols.div_ceil(32))
                    .map(|_| (rng.int_in(-20, 20) as f64).exp2())
                    .collect();
                for (t, v) in x.iter_mut().enumerate() {
                    *v *= s[(t % rows) / 32 + (t / rows / 32) * br];
                }
            }
        } else {
            outliers(&mut a, 1e-3, 2f64.powi(27), &mut rng);
            outliers(&mut b, 1e-3, 2f64.powi(27), &mut rng);
            a[5] *= 2f64.powi(27);
        }
        assert!(
            check(what, &a, &b, dims),
            "{what}: lines that scale exactly declined"
        );
        exact_lines.push(what);
    }
    eprintln!("guaranteed: emulated {emulated:?} and {exact_lines:?}; declined {declined:?}");
    assert!(emulated.len() >= 3, "only {emulated:?} emulated");
    let (a, b) = pair(Family::Spread(4.0), (16, 16, 512), 23);
    assert!(matches!(
        run(&a, &b, (16, 16, 512), &cfg),
        Err(Fallback::BoundUnreachable { .. })
    ));
}

/// The engine's price for normal lines is the count the rule takes on them.
#[test]
fn typical_moduli_is_the_count_normal_lines_take() {
    for k in [1024usize, 4096, 16384] {
        let (a, b) = pair(Family::Normal, (8, 8, k), 29);
        let ta = LineTable::of_packed(
            &(0..8)
                .flat_map(|i| (0..k).map(move |l| (i, l)))
                .map(|(i, l)| a[i + l * 8])
                .collect::<Vec<_>>(),
            8,
            k,
        );
        let tb = LineTable::of_packed(&b, 8, k);
        let r = ozaki_core::rule::choose(ta.view(), tb.view(), &Request::new(k, ScalingMode::Norm))
            .unwrap()
            .moduli;
        assert_eq!(
            ozaki_core::rule::typical_moduli(ScalingMode::Norm, k),
            r,
            "k = {k}"
        );
    }
}

/// Guaranteed mode on normal data: where it emulates it takes 16-18 moduli, 2-4 above the
/// default's count; whether it emulates is decided by the call's deepest entry, not by k.
/// The bound at 20 moduli (shift cap 56) meets `γ_k` only while every line's smallest
/// nonzero lies within about `8 + log2 k` binades of the line's maximum, a few binades below
/// where a normal line's smallest entry usually falls: small operands emulate at any k
/// (8 x 8 up to k = 16384), operands of 128 lines decline already at k = 64, and one entry
/// `2^-20` of its row's maximum makes an accepted k = 1024 call decline.
#[test]
fn guaranteed_mode_on_normal_data_is_decided_by_the_deepest_entry_not_by_k() {
    let guaranteed = EmulationConfig {
        accuracy: Accuracy::Guaranteed,
        ..EmulationConfig::default()
    };
    let moduli = |a: &[f64], b: &[f64], (m, n, k), cfg: &EmulationConfig| {
        emulate::matmul(a, b, m, n, k, cfg).map(|(_, info)| info.moduli)
    };
    for k in [1024usize, 16384] {
        for seed in 1..=8u64 {
            let dims = (8, 8, k);
            let (a, b) = pair(Family::Normal, dims, seed);
            let g = moduli(&a, &b, dims, &guaranteed)
                .unwrap_or_else(|f| panic!("8x8x{k} seed {seed} declined: {f}"));
            let d = moduli(&a, &b, dims, &EmulationConfig::default()).unwrap();
            assert!(
                (16..=18).contains(&g) && (2..=4).contains(&(g - d)),
                "8x8x{k} seed {seed}: guaranteed {g}, default {d}"
            );
        }
    }
    for seed in 1..=8u64 {
        let dims = (128, 128, 64);
        let (a, b) = pair(Family::Normal, dims, seed);
        assert!(
            matches!(
                moduli(&a, &b, dims, &guaranteed),
                Err(Fallback::BoundUnreachable { .. })
            ),
            "128x128x64 seed {seed} emulated"
        );
    }
    let dims = (8, 8, 1024);
    let (mut a, b) = pair(Family::Normal, dims, 1);
    assert!(moduli(&a, &b, dims, &guaranteed).is_ok());
    // row 0's first entry becomes 2^-20 of the row's scale 2^e: depth 20 > 8 + log2 1023
    let e = (0..dims.2)
        .map(|l| a[l * dims.0].abs())
        .fold(0.0f64, f64::max)
        .log2()
        .floor();
    a[0] = (e - 20.0).exp2();
    assert!(matches!(
        moduli(&a, &b, dims, &guaranteed),
        Err(Fallback::BoundUnreachable { .. })
    ));
}
