//! Trace replay (`ozaki replay`): one row per call record (route chosen, predicted
//! time per route, storage mode, reconstruction host, rate) and the composites of the paper's
//! §6.1 conventions (brief §5.5): work-weighted harmonic speedups — Σ t_baseline / Σ t_auto,
//! which is the FLOP-weighted harmonic composition of rates — against running every record
//! on one route, FLOP-weighted quantiles of n̄, and each route's share of the work.
//!
//! Two models can price a trace: a measured [`Profile`](super::profile::Profile) (what the
//! shim would do on that machine, host link and CPU BLAS included) or a [`Platform`] through
//! the paper's reduced model (device-resident projections).

use super::choose::Engine;
use super::platforms::Platform;
use super::reduced::{self, RateOptions};
use super::wake::{VendorWake, threaded};
use super::{CallShape, Residency};
use crate::route::Route;
use crate::stats::{SMALL_NBAR, WeightedSamples};
use crate::trace::{CallRecord, Routine};
use std::io::Write;

/// What prices the records.
pub enum ReplayModel<'a> {
    /// A measured profile through the shim's engine; `moduli` gives the count the numerics
    /// would choose for a shape (`None`: the contract cannot be met).
    Measured {
        /// The engine (profile, threads, cache).
        engine: &'a Engine,
        /// Moduli count per shape.
        moduli: &'a dyn Fn(&CallShape) -> Option<u32>,
    },
    /// A platform through the paper's reduced model.
    Reduced {
        /// The platform.
        platform: &'a Platform,
        /// ComputeRate options (co-design roof, Garner).
        options: RateOptions,
    },
}

/// One replayed record.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The record's sequence number.
    pub seq: u64,
    /// dgemm or dsyrk.
    pub routine: Routine,
    /// Rows of C.
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// n̄ = 2mn/(m+n).
    pub nbar: f64,
    /// Useful FLOP.
    pub flops: f64,
    /// The route the model chooses.
    pub route: String,
    /// Predicted seconds per route, in the model's route order (infinite when excluded).
    pub predicted_s: Vec<(String, f64)>,
    /// Storage mode of the chosen route.
    pub storage: String,
    /// Where the chosen route reconstructs (`-` for none).
    pub recon_host: String,
    /// Moduli count of the chosen route, when emulated.
    pub moduli: Option<u32>,
    /// Predicted rate of the chosen route, FLOP/s.
    pub rate: f64,
    /// Why.
    pub reason: String,
    /// Predicted wait behind the GPU's queue of the replayed calls before it, for a record
    /// the model sends to the GPU beside other calls (0 otherwise).
    pub queue_s: f64,
}

impl Row {
    /// Predicted seconds of the chosen route, its wait behind the GPU's queue included.
    pub fn chosen_seconds(&self) -> f64 {
        self.predicted_s
            .iter()
            .find(|(r, _)| *r == self.route)
            .map_or(f64::INFINITY, |(_, s)| *s)
            + self.queue_s
    }
}

/// The composites of a replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Composites {
    /// Records replayed.
    pub records: usize,
    /// Total useful FLOP.
    pub flops: f64,
    /// Σ predicted seconds of the auto choice, the waits behind the GPU's queue included.
    pub auto_seconds: f64,
    /// Per route: Σ predicted seconds if every record ran on it, each priced alone (no
    /// GPU queue; records the route cannot take count at the vendor time for a measured
    /// profile, the shim's fallback), and the number of records it could not take.
    pub all_route_seconds: Vec<(String, f64, usize)>,
    /// Per route: Σ_all-route seconds / Σ auto seconds (≥ 1 means auto is faster).
    pub speedup_vs: Vec<(String, f64)>,
    /// FLOP-weighted n̄ quantiles (q25, median, q75).
    pub nbar_quartiles: (f64, f64, f64),
    /// FLOP fraction of records with n̄ ≤ [`SMALL_NBAR`] (256).
    pub work_nbar_le_256: f64,
    /// Per route: FLOP share of the records auto sent there.
    pub work_share: Vec<(String, f64)>,
}

/// Replays the records through a model, each priced alone.
pub fn replay(calls: &[CallRecord], model: &ReplayModel<'_>) -> (Vec<Row>, Composites) {
    replay_loaded(calls, &[], model)
}

/// [`replay`] with the calls in flight when each record was decided (`in_flight[i]` for
/// `calls[i]`, [`in_flight`]; missing entries count as alone): a measured profile prices
/// the vendor at the share of the CPU each call had ([`super::load`]).
///
/// With a measured profile that holds the vendor's wake ([`super::wake`]), the records are
/// replayed in the order they started, and a record that starts within the wake's window
/// after a replayed vendor call of [`super::wake::THREADED_MNK`] or more ended (each starting when its
/// record did and lasting its predicted vendor time) has its GPU routes' host copies
/// stretched, as the shim prices it; and, as in the shim, the records replayed alone keep a
/// side ledger ([`super::sides`]) of their quiet GPU and vendor prices, and while it says the
/// GPU side, a record the vendor would take is charged with the wake its vendor run leaves.
///
/// The one GPU serves the replayed calls one after another ([`GpuQueue`]): a record made
/// beside other calls that the model sends to the GPU waits for the GPU work of the records
/// sent there before it, and goes to the vendor when that wait costs the GPU its margin
/// (`load::keeps_gpu`, as in the shim). Its wait counts in its predicted time.
pub fn replay_loaded(
    calls: &[CallRecord],
    in_flight: &[u32],
    model: &ReplayModel<'_>,
) -> (Vec<Row>, Composites) {
    let wake = match model {
        ReplayModel::Measured { engine, .. } => engine.profile().cpu.wake,
        ReplayModel::Reduced { .. } => None,
    };
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by_key(|&i| (calls[i].t_ns, calls[i].seq));
    let mut rows: Vec<Option<Row>> = vec![None; calls.len()];
    let mut vendor_ends = std::collections::BinaryHeap::new();
    let mut last_end: Option<u64> = None;
    let sides = super::sides::Sides::default();
    let queue = GpuQueue::default();
    for i in order {
        let c = &calls[i];
        while let Some(&std::cmp::Reverse(end)) = vendor_ends.peek() {
            if end > c.t_ns {
                break;
            }
            vendor_ends.pop();
            last_end = Some(last_end.map_or(end, |l: u64| l.max(end)));
        }
        let since_s = last_end.map(|e| c.t_ns.saturating_sub(e) as f64 * 1e-9);
        let in_wake = wake.filter(|w| since_s.is_some_and(|s| w.covers(s)));
        let calls_in_flight = in_flight.get(i).copied().unwrap_or(1);
        let beside = Beside {
            in_flight: calls_in_flight,
            in_wake,
            wake,
            sides: &sides,
            queue: &queue,
            t_ns: c.t_ns,
        };
        let row = replay_one(c, beside, model);
        if wake.is_some() && row.route == Route::Vendor.name() {
            let shape = CallShape::from_record(c);
            if threaded(shape.mnk()) {
                let end = c.t_ns.saturating_add((row.chosen_seconds() * 1e9) as u64);
                vendor_ends.push(std::cmp::Reverse(end));
            }
        }
        rows[i] = Some(row);
    }
    let rows: Vec<Row> = rows.into_iter().flatten().collect();
    let comp = composites(&rows, model);
    (rows, comp)
}

/// The calls in flight in the process when each record of one trace file was decided,
/// itself included: the record's `engine.concurrent` when it has one (schema 3), otherwise
/// reconstructed from the recorded call intervals [t_ns, t_ns + dur_ns) of all threads (the
/// calls that started before it and had not ended yet, plus itself).
pub fn in_flight(calls: &[CallRecord]) -> Vec<u32> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by_key(|&i| (calls[i].t_ns, calls[i].seq));
    let mut ends = BinaryHeap::new();
    let mut out = vec![1u32; calls.len()];
    for i in order {
        let c = &calls[i];
        while ends.peek().is_some_and(|&Reverse(e)| e <= c.t_ns) {
            ends.pop();
        }
        out[i] = match c.engine.as_ref().and_then(|e| e.concurrent) {
            Some(n) => n.max(1),
            None => ends.len() as u32 + 1,
        };
        ends.push(Reverse(c.t_ns.saturating_add(c.dur_ns)));
    }
    out
}

/// What one record is replayed beside: the calls in flight, the vendor's wake (the measured
/// one, and whether the record starts inside it), the side ledger of the records before, and
/// the GPU's queue when the record starts (at `t_ns`).
struct Beside<'a> {
    in_flight: u32,
    in_wake: Option<VendorWake>,
    wake: Option<VendorWake>,
    sides: &'a super::sides::Sides,
    queue: &'a GpuQueue,
    t_ns: u64,
}

/// The one GPU of a replay, serving the records sent to it in the order they started.
#[derive(Debug, Default)]
struct GpuQueue {
    /// When the GPU work of the records sent to it so far is done (trace clock, ns).
    free_ns: std::cell::Cell<u64>,
}

impl GpuQueue {
    /// The wait of a record starting at `t_ns` beside `in_flight - 1` other calls: none for
    /// a record made alone, whose program made the records before it one after another
    /// (their replayed times are not the recorded ones, so their queue would be an artifact).
    fn wait_s(&self, t_ns: u64, in_flight: u32) -> f64 {
        if in_flight > 1 {
            self.free_ns.get().saturating_sub(t_ns) as f64 * 1e-9
        } else {
            0.0
        }
    }

    /// Puts a record starting at `t_ns` that holds the GPU for `held_s` on the queue.
    fn push(&self, t_ns: u64, in_flight: u32, held_s: f64) {
        let start = if in_flight > 1 {
            self.free_ns.get().max(t_ns)
        } else {
            t_ns
        };
        self.free_ns
            .set(start.saturating_add((held_s.max(0.0) * 1e9) as u64));
    }
}

/// The route `d` takes once the side ledger has seen it (the shim's `route::adjust`): a record
/// decided alone with a vendor and a GPU price a correction could swap notes its quiet prices
/// (`quiet_gpu_s`: the GPU route's price without the wake), and on the GPU side a vendor
/// choice whose vendor run leaves a wake is charged with it, as the GPU route is with the wake
/// it finds. Returns the GPU route when that charge changes the choice.
fn side_choice(
    d: &super::choose::Decision,
    quiet_gpu_s: f64,
    shape: &CallShape,
    margin: f64,
    beside: &Beside<'_>,
) -> Option<Route> {
    let (g, gs) = d.gpu?;
    if beside.in_flight > 1 || !super::correct::correctable(d.vendor_s, gs) {
        return None;
    }
    beside.sides.note(quiet_gpu_s, d.vendor_s);
    let switch_s = beside.wake?.left_by(shape.mnk(), d.gpu_host_s);
    let wake_s = (gs - quiet_gpu_s).max(0.0);
    (d.route == Route::Vendor
        && beside
            .sides
            .switches_to_gpu(d.vendor_s, switch_s, gs, wake_s, margin))
    .then_some(g)
}

fn replay_one(c: &CallRecord, beside: Beside<'_>, model: &ReplayModel<'_>) -> Row {
    let (in_flight, in_wake) = (beside.in_flight, beside.in_wake);
    let shape = CallShape::from_record(c);
    let base = Row {
        seq: c.seq,
        routine: c.routine,
        m: shape.m,
        n: shape.n,
        k: shape.k,
        nbar: shape.nbar(),
        flops: shape.flops(),
        route: String::new(),
        predicted_s: Vec::new(),
        storage: "-".into(),
        recon_host: "-".into(),
        moduli: None,
        rate: 0.0,
        reason: String::new(),
        queue_s: 0.0,
    };
    match model {
        ReplayModel::Measured { engine, moduli } => {
            let r = if shape.no_product() {
                None
            } else {
                moduli(&shape)
            };
            let class = super::load::concurrency_class(in_flight);
            let mut est = engine.estimates_loaded(&shape, r, class);
            let quiet = engine.decide_priced_loaded(&shape, r, &est, class);
            let d = match in_wake {
                None => std::sync::Arc::clone(&quiet),
                Some(w) => {
                    // priced apart from the cache, which holds quiet-host decisions
                    super::model::in_wake(&mut est, &w);
                    let mut d = engine.decide_from_estimates(&shape, r, &est);
                    d.prediction.reason.push_str(" (beside the vendor's wake)");
                    std::sync::Arc::new(d)
                }
            };
            let margin = engine.profile().choice.min_gain;
            let quiet_gpu_s = quiet.gpu.map_or(f64::INFINITY, |(_, g)| g);
            let (route, reason) = match side_choice(&d, quiet_gpu_s, &shape, margin, &beside) {
                Some(g) => (
                    g,
                    format!(
                        "{g}: on the GPU side ({:.2}x), the vendor charged with the wake it \
                         leaves; {}",
                        beside.sides.ratio(),
                        d.prediction.reason
                    ),
                ),
                None => (d.route, d.prediction.reason.clone()),
            };
            // the GPU's queue: the wait behind the records sent there before this one
            let wait_s = beside.queue.wait_s(beside.t_ns, in_flight);
            let gpu_s = est
                .iter()
                .find(|e| e.route == route && route != Route::Vendor)
                .map(|e| e.seconds);
            let (route, reason, queue_s) = match gpu_s {
                Some(g) if !super::load::keeps_gpu(d.vendor_s, g, wait_s, margin) => (
                    Route::Vendor,
                    format!(
                        "vendor: {route} would wait {wait_s:.4} s behind the GPU's queue; {reason}"
                    ),
                    0.0,
                ),
                Some(g) => {
                    beside
                        .queue
                        .push(beside.t_ns, in_flight, d.gpu_held_s(g, in_flight));
                    (route, reason, wait_s)
                }
                None => (route, reason, 0.0),
            };
            let chosen = est.iter().find(|e| e.route == route);
            let predicted_s: Vec<(String, f64)> = est
                .iter()
                .map(|e| (e.route.name().to_string(), e.seconds))
                .collect();
            let secs = chosen.map_or(f64::INFINITY, |e| e.seconds);
            Row {
                route: route.name().to_string(),
                predicted_s,
                storage: chosen.map_or("-", |e| e.storage).to_string(),
                recon_host: chosen.map_or("-", |e| e.recon_host).to_string(),
                moduli: d.moduli,
                rate: if secs > 0.0 { base.flops / secs } else { 0.0 },
                reason,
                queue_s,
                ..base
            }
        }
        ReplayModel::Reduced { platform, options } => {
            // The paper's work convention: W = 2mnk, dsyrk mnk (brief §5.2).
            let w = match shape.routine {
                Routine::Dgemm => 2.0 * shape.m as f64 * shape.n as f64 * shape.k as f64,
                Routine::Dsyrk => shape.m as f64 * shape.n as f64 * shape.k as f64,
            };
            if shape.no_product() {
                let mut predicted_s: Vec<(String, f64)> = platform
                    .routes
                    .iter()
                    .map(|r| (r.name.to_string(), 0.0))
                    .collect();
                predicted_s.push(("native".into(), 0.0));
                return Row {
                    route: "native".into(),
                    predicted_s,
                    reason: "no product to compute".into(),
                    flops: 0.0,
                    ..base
                };
            }
            let rates =
                reduced::rate_record(platform, &shape.with_residency(Residency::Device), *options);
            let mut predicted_s: Vec<(String, f64)> = rates
                .routes
                .iter()
                .map(|(n, s)| (n.to_string(), w / s.rate))
                .collect();
            predicted_s.push(("native".into(), w / platform.native_fp64));
            let (bn, bs) = &rates.routes[rates.best];
            // The paper's switched dispatch: the best emulated route; native and the shipping
            // baseline are the references the composites compare against (brief §5.5).
            let (route, rate, storage, recon, reason) = (
                bn.to_string(),
                bs.rate,
                bs.tag.to_string(),
                "simt-garner",
                format!(
                    "{bn} via {} at {:.1} TF (native {:.1} TF)",
                    bs.tag,
                    bs.rate / 1e12,
                    platform.native_fp64 / 1e12
                ),
            );
            let native_wins = false;
            Row {
                route,
                predicted_s,
                storage,
                recon_host: recon.into(),
                moduli: platform.route(bn).filter(|_| !native_wins).map(|r| r.r),
                rate,
                reason,
                flops: w,
                ..base
            }
        }
    }
}

fn composites(rows: &[Row], model: &ReplayModel<'_>) -> Composites {
    let flops: f64 = rows.iter().map(|r| r.flops).sum();
    let auto_seconds: f64 = rows.iter().map(Row::chosen_seconds).sum();
    let names: Vec<String> = rows
        .first()
        .map(|r| r.predicted_s.iter().map(|(n, _)| n.clone()).collect())
        .unwrap_or_default();
    let measured = matches!(model, ReplayModel::Measured { .. });
    let mut all_route_seconds = Vec::new();
    for name in &names {
        let (mut total, mut missing) = (0.0, 0usize);
        for r in rows {
            let t = r
                .predicted_s
                .iter()
                .find(|(n, _)| n == name)
                .map_or(f64::INFINITY, |x| x.1);
            if t.is_finite() {
                total += t;
            } else {
                missing += 1;
                // The shim falls back to the vendor BLAS when a forced route cannot run.
                let fb = if measured {
                    r.predicted_s
                        .iter()
                        .find(|(n, _)| n == Route::Vendor.name())
                        .map_or(f64::INFINITY, |x| x.1)
                } else {
                    f64::INFINITY
                };
                total += fb;
            }
        }
        all_route_seconds.push((name.clone(), total, missing));
    }
    let speedup_vs = all_route_seconds
        .iter()
        .map(|(n, t, _)| (n.clone(), t / auto_seconds))
        .collect();
    let nw = WeightedSamples::new(rows.iter().map(|r| (r.nbar, r.flops)));
    let q = |x| nw.quantile(x).unwrap_or(f64::NAN);
    let quart = (q(0.25), q(0.5), q(0.75));
    let mut work_share: Vec<(String, f64)> = Vec::new();
    for r in rows {
        match work_share.iter_mut().find(|(n, _)| *n == r.route) {
            Some(x) => x.1 += r.flops,
            None => work_share.push((r.route.clone(), r.flops)),
        }
    }
    for x in &mut work_share {
        x.1 = if flops > 0.0 { x.1 / flops } else { 0.0 };
    }
    work_share.sort_by(|a, b| b.1.total_cmp(&a.1));
    Composites {
        records: rows.len(),
        flops,
        auto_seconds,
        all_route_seconds,
        speedup_vs,
        nbar_quartiles: quart,
        work_nbar_le_256: nw.share_at_most(SMALL_NBAR),
        work_share,
    }
}

/// Writes the per-record CSV: identity, geometry, the choice and its audit fields, then one
/// `t_<route>_s` column per route.
///
/// # Errors
/// I/O errors of `out`.
pub fn write_csv(rows: &[Row], out: &mut dyn Write) -> std::io::Result<()> {
    let names: Vec<&str> = rows
        .first()
        .map(|r| r.predicted_s.iter().map(|(n, _)| n.as_str()).collect())
        .unwrap_or_default();
    write!(
        out,
        "seq,routine,m,n,k,nbar,flops,route,storage,recon_host,moduli,rate_gflops"
    )?;
    for n in &names {
        write!(out, ",t_{n}_s")?;
    }
    writeln!(out, ",reason")?;
    for r in rows {
        let routine = match r.routine {
            Routine::Dgemm => "dgemm",
            Routine::Dsyrk => "dsyrk",
        };
        write!(
            out,
            "{},{routine},{},{},{},{:.1},{:.6e},{},{},{},{},{:.3}",
            r.seq,
            r.m,
            r.n,
            r.k,
            r.nbar,
            r.flops,
            r.route,
            r.storage,
            r.recon_host,
            r.moduli.map_or(String::new(), |m| m.to_string()),
            r.rate / 1e9
        )?;
        for (_, s) in &r.predicted_s {
            if s.is_finite() {
                write!(out, ",{s:.6e}")?
            } else {
                write!(out, ",")?
            }
        }
        writeln!(out, ",\"{}\"", r.reason.replace('"', "'"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(seq: u64, t_ns: u64, dur_ns: u64) -> CallRecord {
        let line = format!(
            r#"{{"type":"call","seq":{seq},"t_ns":{t_ns},"dur_ns":{dur_ns},"tid":{seq},"sym":"dgemm_","routine":"dgemm","layout":"col","m":8,"n":8,"k":8,"lda":8,"ldb":8,"ldc":8,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}}"#
        );
        match crate::trace::parse_line(&line, 1).unwrap() {
            crate::trace::Line::Call(c) => *c,
            _ => unreachable!(),
        }
    }

    /// Sixteen threads each making a 1024 x 1024 x 256 product at the same instant (priced
    /// about 7x faster on the GPU alone than on a sixteenth of the vendor's cores): replayed
    /// beside each other, the one GPU serves them one after another, so the later ones wait
    /// behind the earlier ones, and once the wait costs the GPU its margin they go to the
    /// vendor; the same records made one after another (alone) wait for nothing.
    #[test]
    fn calls_made_at_once_queue_for_the_one_gpu() {
        let record = |seq: u64, t_ns: u64| {
            let line = format!(
                r#"{{"type":"call","seq":{seq},"t_ns":{t_ns},"dur_ns":20000000,"tid":{seq},"sym":"dgemm_","routine":"dgemm","layout":"col","m":1024,"n":1024,"k":256,"lda":1024,"ldb":256,"ldc":1024,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}}"#
            );
            match crate::trace::parse_line(&line, 1).unwrap() {
                crate::trace::Line::Call(c) => *c,
                _ => unreachable!(),
            }
        };
        let engine = Engine::new(
            crate::engine::profile::Profile::built_in("h200").unwrap(),
            16,
        );
        let moduli = |_: &CallShape| Some(14);
        let model = ReplayModel::Measured {
            engine: &engine,
            moduli: &moduli,
        };
        let team: Vec<CallRecord> = (0..16).map(|i| record(i, 0)).collect();
        let (rows, comp) = replay_loaded(&team, &[16; 16], &model);
        assert_ne!(rows[0].route, "vendor", "{:?}", rows[0]);
        assert_eq!(rows[0].queue_s, 0.0);
        let gpu: Vec<&Row> = rows.iter().filter(|r| r.route != "vendor").collect();
        for w in gpu.windows(2) {
            assert!(
                w[1].queue_s > w[0].queue_s,
                "later calls wait longer: {w:?}"
            );
        }
        let to_vendor: Vec<&Row> = rows.iter().filter(|r| r.route == "vendor").collect();
        assert!(!to_vendor.is_empty(), "the queue sends some to the vendor");
        assert!(
            to_vendor
                .iter()
                .all(|r| r.reason.contains("behind the GPU's queue")),
            "{to_vendor:?}"
        );
        let summed: f64 = rows.iter().map(Row::chosen_seconds).sum();
        assert!(
            (comp.auto_seconds - summed).abs() < 1e-9,
            "waits count in auto's time"
        );
        // one after another, each alone (where the whole vendor wins): no queue
        let alone: Vec<CallRecord> = (0..16).map(|i| record(i, i * 1_000_000)).collect();
        let (rows, _) = replay_loaded(&alone, &[1; 16], &model);
        assert!(rows.iter().all(|r| r.queue_s == 0.0), "{rows:?}");
    }

    /// With a profile that measured the vendor's wake, LOBPCG's 64 x 64 x 110592 product
    /// (mostly staging, on the GPU when the host is quiet) replays on the vendor when it
    /// starts right after a threaded vendor product ended, and on the GPU a second later;
    /// without the wake, or with the vendor's spin shorter than the gap, both go to the GPU.
    #[test]
    fn records_in_the_vendors_wake_replay_with_their_copies_stretched() {
        let record = |seq: u64, t_ns: u64, m: u64, n: u64, k: u64, transa: &str| {
            let line = format!(
                r#"{{"type":"call","seq":{seq},"t_ns":{t_ns},"dur_ns":1000,"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"{transa}","transb":"N","m":{m},"n":{n},"k":{k},"lda":{k},"ldb":{k},"ldc":{m},"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}}"#
            );
            match crate::trace::parse_line(&line, 1).unwrap() {
                crate::trace::Line::Call(c) => *c,
                _ => unreachable!(),
            }
        };
        let calls = vec![
            record(0, 0, 64, 64, 64, "N"),
            record(1, 1_000_000, 64, 64, 110592, "T"),
            record(2, 1_000_000_000, 64, 64, 110592, "T"),
        ];
        let routes = |profile: crate::engine::profile::Profile| {
            let engine = Engine::new(profile, 16);
            let moduli = |_: &CallShape| Some(14);
            let model = ReplayModel::Measured {
                engine: &engine,
                moduli: &moduli,
            };
            let (rows, _) = replay(&calls, &model);
            rows.iter().map(|r| r.route.clone()).collect::<Vec<_>>()
        };
        let mut p = crate::engine::profile::Profile::built_in("h200").unwrap();
        p.cpu.wake = Some(VendorWake {
            window_s: 0.15,
            copy_slowdown: 3.0,
        });
        let with = routes(p.clone());
        assert_eq!(with[0], "vendor");
        assert_eq!(with[1], "vendor", "in the wake: {with:?}");
        assert_ne!(with[2], "vendor", "a second later: {with:?}");
        // a process whose pools spin 2^18 cycles (at most 0.26 ms) has no wake 1 ms later
        let measured = p.cpu.wake;
        p.cpu.wake = crate::engine::spin::bounded(measured, Some(18));
        let short = routes(p.clone());
        assert_ne!(short[1], "vendor", "a short spin: {short:?}");
        p.cpu.wake = None;
        let without = routes(p);
        assert_ne!(without[1], "vendor", "no wake measured: {without:?}");
    }

    /// A program whose calls all run faster on the GPU, each starting inside the wake of the
    /// vendor call before it: priced call by call every one stays on the vendor; with the side
    /// ledger the replay, as the shim, moves them to the GPU once the ledger has seen enough
    /// of them, and the same records replayed as if made beside other calls stay put.
    #[test]
    fn a_gpu_bound_program_in_the_vendors_wake_moves_to_the_gpu_side() {
        use crate::engine::sides::MIN_CALLS;
        let record = |seq: u64, (m, n, k): (u64, u64, u64)| {
            let line = format!(
                r#"{{"type":"call","seq":{seq},"t_ns":{},"dur_ns":1000,"tid":1,"sym":"dgemm_","routine":"dgemm","layout":"col","transa":"T","transb":"N","m":{m},"n":{n},"k":{k},"lda":{k},"ldb":{k},"ldc":{m},"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}}"#,
                seq * 1_000_000
            );
            match crate::trace::parse_line(&line, 1).unwrap() {
                crate::trace::Line::Call(c) => *c,
                _ => unreachable!(),
            }
        };
        // a threaded product the vendor takes, then GPU-bound ones 1 ms apart
        let calls: Vec<_> = (0..3 * MIN_CALLS as u64)
            .map(|i| {
                record(
                    i,
                    if i == 0 {
                        (256, 256, 64)
                    } else {
                        (64, 64, 110592)
                    },
                )
            })
            .collect();
        let mut p = crate::engine::profile::Profile::built_in("h200").unwrap();
        p.cpu.wake = Some(VendorWake {
            window_s: 0.15,
            copy_slowdown: 3.0,
        });
        let engine = Engine::new(p, 16);
        let moduli = |_: &CallShape| Some(14);
        let model = ReplayModel::Measured {
            engine: &engine,
            moduli: &moduli,
        };
        let alone = vec![1; calls.len()];
        let (rows, _) = replay_loaded(&calls, &alone, &model);
        let routes: Vec<&str> = rows.iter().map(|r| r.route.as_str()).collect();
        assert_eq!(routes[0], "vendor", "{routes:?}");
        let first_gpu_side = routes[1..]
            .iter()
            .position(|r| *r != "vendor")
            .map(|i| i + 1)
            .expect("moves to the GPU side");
        assert!(first_gpu_side >= MIN_CALLS as usize, "{routes:?}");
        assert!(
            routes[first_gpu_side..].iter().all(|r| *r != "vendor"),
            "{routes:?}"
        );
        assert!(rows[first_gpu_side].reason.contains("wake it leaves"));
        // a vendor choice made beside other calls is left as it is, on the GPU side too
        let sides = crate::engine::sides::Sides::default();
        for _ in 0..MIN_CALLS {
            sides.note(0.01, 0.05);
        }
        let shape = CallShape::from_record(&calls[1]);
        let mut d = (*engine.decide(&shape, Some(14))).clone();
        d.route = Route::Vendor;
        let (_, g) = d.gpu.unwrap();
        d.vendor_s = 0.99 * g;
        let wake = engine.profile().cpu.wake;
        let queue = GpuQueue::default();
        let beside = |in_flight| Beside {
            in_flight,
            in_wake: wake,
            wake,
            sides: &sides,
            queue: &queue,
            t_ns: 0,
        };
        assert!(side_choice(&d, g, &shape, 1.1, &beside(1)).is_some());
        assert_eq!(side_choice(&d, g, &shape, 1.1, &beside(4)), None);
    }

    /// A record's C has gaps when its leading dimension exceeds C's extent along it: rows
    /// in column-major order, columns in row-major order.
    #[test]
    fn replayed_shapes_know_when_c_has_gaps() {
        let mut c = call(0, 0, 1);
        (c.m, c.n, c.ldc) = (8, 4, 8);
        assert!(!CallShape::from_record(&c).c_gaps);
        c.ldc = 9;
        assert!(CallShape::from_record(&c).c_gaps);
        c.layout = crate::trace::Layout::Row;
        (c.m, c.n, c.ldc) = (4, 8, 8);
        assert!(!CallShape::from_record(&c).c_gaps);
        c.ldc = 16;
        assert!(CallShape::from_record(&c).c_gaps);
    }

    #[test]
    fn calls_in_flight_come_from_overlapping_intervals_or_the_record() {
        // [0,10) [2,5) [3,12) [5,6) [12,13): at their starts 1, 2, 3, 3, 1 in flight.
        let mut calls = vec![
            call(0, 0, 10),
            call(1, 2, 3),
            call(2, 3, 9),
            call(3, 5, 1),
            call(4, 12, 1),
        ];
        assert_eq!(in_flight(&calls), vec![1, 2, 3, 3, 1]);
        calls[4].engine = Some(crate::trace::Prediction {
            concurrent: Some(7),
            ..Default::default()
        });
        assert_eq!(in_flight(&calls)[4], 7);
    }
}
