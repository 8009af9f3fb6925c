//! The accuracy rule once on a whole pipelined gpu-ozaki call ([`WholeRule`]).
//!
//! The host pipeline runs a call as panel x block units, each an emulated call of its own.
//! Left to itself each unit would run the accuracy rule on its own rows and columns and
//! could choose another moduli count than the call as a whole would, so C would depend on
//! how the call was cut. Instead every unit runs with one speculative count, the count the
//! route expects (`ozaki::expected_moduli`: the last automatic choice), and keeps the line
//! statistics its plan read; once every unit is enqueued the rule runs once on all of op(A)'s
//! rows and op(B)'s columns, as the untiled call's plan does. When it chooses the speculative
//! count, C is exactly the untiled emulation's (each entry depends only on its row, its
//! column, and the count); otherwise the call is not accepted and runs again with the
//! whole call's count ([`Verdict::Rerun`]), which the next call of this kind then expects.
//! A decline of the whole call is the call's error, before any of C was written.

use crate::error::GpuError;
use crate::ozaki::{self, LineTable, Options};

/// The whole call's rule, fed by the units as they are enqueued.
pub(super) struct WholeRule {
    /// The count every unit runs with.
    pub(super) guess: usize,
    opts: Options,
    k: usize,
    /// Statistics of each row panel of op(A), in panel order (from its first unit).
    rows: Vec<Option<LineTable>>,
    /// Statistics of each column block of op(B), in block order.
    cols: Vec<Option<LineTable>>,
}

/// What the whole call's rule decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The units' count is the whole call's: C is the untiled call's.
    Accept(usize),
    /// The whole call takes this other count: run it again with it.
    Rerun(usize),
}

impl WholeRule {
    /// The rule of an automatic-count call of inner dimension `k` cut into `panels` x
    /// `blocks` units; `None` when the count is forced (every unit already uses it) or the
    /// call is one unit (its own rule is the call's).
    pub(super) fn new(opts: Options, k: usize, panels: usize, blocks: usize) -> Option<Self> {
        if opts.moduli.is_some() || panels * blocks <= 1 {
            return None;
        }
        let scaling = ozaki::effective_scaling(opts.scaling);
        Some(WholeRule {
            guess: ozaki::expected_moduli(scaling, k).clamp(2, ozaki::MODULI.len()),
            opts,
            k,
            rows: vec![None; panels],
            cols: vec![None; blocks],
        })
    }

    /// The options each unit runs with: the speculative count, forced.
    pub(super) fn unit_options(&self) -> Options {
        Options {
            moduli: Some(self.guess),
            ..self.opts
        }
    }

    /// Keeps unit (`panel`, `block`)'s statistics: its rows of op(A) and columns of op(B)
    /// (the first unit of each panel and block brings them; later ones are the same lines).
    pub(super) fn keep(&mut self, panel: usize, block: usize, (a, b): (LineTable, LineTable)) {
        self.rows[panel].get_or_insert(a);
        self.cols[block].get_or_insert(b);
    }

    /// Runs the rule on every line of the call; an error when some panel or block never
    /// brought its lines, or when the rule declines the whole call.
    pub(super) fn verdict(self) -> Result<Verdict, GpuError> {
        let missing = || GpuError::Cuda("a unit of the pipeline kept no line statistics".into());
        let a = concat(&self.rows).ok_or_else(missing)?;
        let b = concat(&self.cols).ok_or_else(missing)?;
        let scaling = ozaki::effective_scaling(self.opts.scaling);
        let plan = ozaki::plan_into(
            a.view(),
            b.view(),
            self.k,
            (None, self.opts.accuracy),
            scaling,
            (&mut [], &mut []),
        )?;
        ozaki::remember_moduli(scaling, plan.moduli);
        Ok(if plan.moduli == self.guess {
            Verdict::Accept(plan.moduli)
        } else {
            Verdict::Rerun(plan.moduli)
        })
    }
}

/// The tables one after the other (`None` when one is missing).
fn concat(parts: &[Option<LineTable>]) -> Option<LineTable> {
    let mut all = LineTable::default();
    for p in parts {
        let p = p.as_ref()?;
        for (to, from) in [
            (&mut all.maxbits, &p.maxbits),
            (&mut all.coarse_sq, &p.coarse_sq),
            (&mut all.abs1, &p.abs1),
            (&mut all.abs2, &p.abs2),
            (&mut all.log_depth, &p.log_depth),
            (&mut all.log_depth_sq, &p.log_depth_sq),
            (&mut all.nonzeros, &p.nonzeros),
            (&mut all.range, &p.range),
        ] {
            to.extend_from_slice(from);
        }
    }
    Some(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::testutil::Rng;

    /// Lines of `count` random rows of length `k`, spread over 2^-spread..2^spread.
    fn lines(seed: u64, count: usize, k: usize, spread: i32) -> Vec<f64> {
        let mut r = Rng::new(seed);
        (0..count * k)
            .map(|_| {
                let e = if spread > 0 {
                    (r.uniform() * (2 * spread) as f64) as i32 - spread
                } else {
                    0
                };
                (r.uniform() - 0.5) * 2f64.powi(e)
            })
            .collect()
    }

    fn table(x: &[f64], count: usize, k: usize) -> LineTable {
        LineTable::of_packed(x, count, k)
    }

    /// The rule run on the units' lines, kept in any order, chooses what it chooses on the
    /// whole call's lines (the untiled plan); it accepts the units' count only when that is
    /// the whole call's, and asks for a rerun with the whole call's count otherwise.
    #[test]
    fn the_rule_on_the_units_lines_is_the_rule_on_the_whole_call() {
        let k = 256;
        let (m, n) = (96, 120);
        let (panels, blocks) = (3, 4);
        for spread in [0, 14] {
            let a = lines(1, m, k, 0);
            let b = lines(2, n, k, spread);
            let whole = ozaki::plan_into(
                table(&a, m, k).view(),
                table(&b, n, k).view(),
                k,
                (None, Default::default()),
                ozaki::effective_scaling(None),
                (&mut [], &mut []),
            )
            .expect("accepted")
            .moduli;
            for guess in [whole, whole + 1] {
                let mut rule =
                    WholeRule::new(Options::default(), k, panels, blocks).expect("automatic");
                rule.guess = guess;
                assert_eq!(rule.unit_options().moduli, Some(guess));
                let (h, w) = (m / panels, n / blocks);
                // units in the order a pipeline meets them: not row-major
                for j in (0..blocks).rev() {
                    for p in 0..panels {
                        let rows = table(&a[p * h * k..(p + 1) * h * k], h, k);
                        let cols = table(&b[j * w * k..(j + 1) * w * k], w, k);
                        rule.keep(p, j, (rows, cols));
                    }
                }
                let want = if guess == whole {
                    Verdict::Accept(whole)
                } else {
                    Verdict::Rerun(whole)
                };
                assert_eq!(rule.verdict().expect("accepted"), want, "spread {spread}");
            }
        }
    }

    /// A forced count and a one-unit call need no whole-call rule; a panel that never
    /// brought its lines is an error, not a verdict on part of the call.
    #[test]
    fn forced_counts_single_units_and_missing_lines() {
        let forced = Options {
            moduli: Some(14),
            ..Options::default()
        };
        assert!(WholeRule::new(forced, 64, 2, 2).is_none());
        assert!(WholeRule::new(Options::default(), 64, 1, 1).is_none());
        let mut rule = WholeRule::new(Options::default(), 64, 2, 1).expect("automatic");
        let x = lines(3, 4, 64, 0);
        rule.keep(0, 0, (table(&x, 4, 64), table(&x, 4, 64)));
        assert!(rule.verdict().is_err());
    }
}
