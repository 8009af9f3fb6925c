//! `ozaki summary TRACE...`: what a program asked of its BLAS.
//!
//! Reads one or more trace files (JSON Lines, schema in `ozaki_core::trace`) and prints
//! calls and GFLOP per routine, per exported symbol and per route, the time spent inside
//! BLAS, the FLOP-weighted quartiles of nbar = 2mn/(m+n) with the share of work at
//! nbar <= 256 (the paper's call-size statistic), and the shapes that carry most work.
//! Traces from MPI ranks get a per-rank table, and GPU calls a per-GPU table in which a call
//! split over several GPUs (trace field `devices`) counts once on each.
//! `ozaki run` prints the same summary after the program exits.
//!
//! Errors (an unreadable file, a file with no trace line at all, a schema newer than this
//! tool) name the file and 1-based line and exit 2. A line that does not parse is skipped
//! with a note on stderr naming file and line: a crash in the middle of a write leaves an
//! unterminated last line, and a disk that filled up and was freed again leaves a torn line
//! in the middle; neither should throw away the rest of a trace the user cannot regenerate.

mod json;
mod predictions;
mod vendors;

use crate::tracefile::{load, notes};
use clap::Parser;
use ozaki_core::stats::{NbarStats, SMALL_NBAR};
use ozaki_core::trace::{CallRecord, DuringStart, Header, Layout, Line, Routine, Trace};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Summarise ozaki traces: calls, GFLOP, time inside BLAS and call sizes.
#[derive(Debug, Parser)]
#[command(
    after_help = "A trace is written by the shim when OZAKI_TRACE=FILE is set (or by `ozaki run --trace FILE`).\n\
                  Several files (e.g. one per process or MPI rank) are summarised together.\n\n\
                  Example: ozaki summary app.jsonl"
)]
struct Args {
    /// Trace files (JSON Lines) to summarise together.
    #[arg(required = true, value_name = "TRACE")]
    traces: Vec<PathBuf>,
    /// How many of the shapes with the most work to list.
    #[arg(long, default_value_t = 10, value_name = "N")]
    top: usize,
    /// Print the totals as one JSON object instead (calls, GFLOP, time inside BLAS, busy
    /// time, calls in flight, per route, fallbacks).
    #[arg(long)]
    json: bool,
}

pub fn main(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let args = Args::parse_from(args);
    let stdout = std::io::stdout();
    if args.json {
        // The JSON totals include each file's occupancy, which needs its calls in hand.
        let loaded = args
            .traces
            .iter()
            .map(|p| load(p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        json::render(&mut stdout.lock(), &loaded)?;
    } else {
        let mut summary = Summary::default();
        for p in &args.traces {
            summary.add_path(p)?;
        }
        summary.write(&mut stdout.lock(), args.top)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Per-group totals.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    /// Calls.
    pub calls: u64,
    /// Floating-point operations.
    pub flops: f64,
    /// Time inside the shim, summed over calls.
    pub ns: u64,
}

impl Totals {
    /// Counts one call.
    pub fn add(&mut self, c: &CallRecord) {
        self.calls += 1;
        self.flops += c.flops();
        self.ns += c.dur_ns;
    }
}

/// A shape as reports group it: routine, storage order, operand flags and dimensions.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    routine: Routine,
    ops: String,
    m: u64,
    n: u64,
    k: u64,
}

impl Shape {
    fn of(c: &CallRecord) -> Shape {
        let flag = |f: &Option<String>| f.as_deref().unwrap_or("-").to_ascii_uppercase();
        let ops = match c.routine {
            Routine::Dgemm => format!("{}{}", flag(&c.transa), flag(&c.transb)),
            Routine::Dsyrk => format!("{}{}", flag(&c.uplo), flag(&c.trans)),
        };
        let ops = if c.layout == Layout::Row {
            format!("{ops} row")
        } else {
            ops
        };
        Shape {
            routine: c.routine,
            ops,
            m: c.m,
            n: c.n,
            k: c.k,
        }
    }
}

fn routine_name(r: Routine) -> &'static str {
    match r {
        Routine::Dgemm => "dgemm",
        Routine::Dsyrk => "dsyrk",
    }
}

/// GFLOP with enough digits to see small workloads (an 8x8x8 call is 1e-6 GFLOP).
fn gflop(flops: f64) -> String {
    let g = flops / 1e9;
    if g != 0.0 && g.abs() < 0.001 {
        format!("{g:.2e}")
    } else {
        format!("{g:.3}")
    }
}

fn seconds(ns: u64) -> String {
    format!("{:.4}", ns as f64 / 1e9)
}

fn rate(flops: f64, ns: u64) -> String {
    if ns == 0 {
        "-".into()
    } else {
        format!("{:.2}", flops / ns as f64)
    }
}

fn percent(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// A text table: the first column left-aligned, the rest right-aligned (they are numbers).
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|s| s.to_string()).collect()],
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn write(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let width: Vec<usize> = (0..cols)
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(String::len)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in &self.rows {
            let mut line = String::from("  ");
            for (i, cell) in row.iter().enumerate() {
                if i == 0 {
                    line += &format!("{cell:<w$}", w = width[0]);
                } else {
                    line += &format!("  {cell:>w$}", w = width[i]);
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// Calls that ran on one GPU (a split call counts on each of its devices, its work shared
/// equally among its tiles, which `split_c` balances).
#[derive(Debug, Default, Clone, Copy)]
struct Dev {
    calls: u64,
    split: u64,
    flops: f64,
    /// Time the calls waited for the GPU behind other callers' work (`phases.wait_ns`).
    waited_ns: u64,
    /// Time the calls spent page-locking memory that later calls reuse (`phases.pinned_ns`).
    pinned_ns: u64,
}

/// Calls decided while the GPU was starting, of one kind.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    calls: u64,
    ns: u64,
    waited_s: f64,
}

/// One trace file as the summary keeps it: its headers and its own totals.
#[derive(Debug)]
struct FileSeen {
    path: PathBuf,
    headers: Vec<Header>,
    notes: Vec<String>,
    totals: Totals,
    devices: BTreeMap<u32, Dev>,
}

/// Everything the summary prints, gathered one call at a time: no call record is kept, so
/// a trace of any size is summarised in the memory of its totals (plus 16 bytes a call for
/// the nbar quantiles).
#[derive(Debug, Default)]
pub struct Summary {
    files: Vec<FileSeen>,
    all: Totals,
    by_routine: BTreeMap<Routine, Totals>,
    by_sym: BTreeMap<(String, Routine), Totals>,
    by_route: BTreeMap<String, Totals>,
    by_shape: BTreeMap<Shape, Totals>,
    gpu_start: BTreeMap<&'static str, Seen>,
    /// Calls made from inside OpenMP teams (`engine.team`), per team size and route.
    teams: BTreeMap<(u32, String), Seen>,
    /// The CUDA library files the GPU calls ran on (`cuda_libs`), of every process.
    cuda_libs: std::collections::BTreeSet<String>,
    /// Vendor libraries per symbol, with the kernels each said it runs.
    vendors: vendors::Vendors,
    predictions: predictions::Predictions,
    /// (nbar, flops) of every call.
    nbar: Vec<(f64, f64)>,
}

impl Summary {
    /// Reads one trace file into the summary as a stream; errors carry `path:line:`.
    ///
    /// # Errors
    /// As [`load`].
    pub fn add_path(&mut self, path: &Path) -> anyhow::Result<()> {
        let reader = crate::tracefile::open(path)?;
        let file = self.add_file(path, Vec::new());
        let mut lines = 0usize;
        let skipped = Trace::scan_lenient(reader, |line| {
            lines += 1;
            match line {
                Line::Header(h) => {
                    self.vendors.add_header(&h);
                    self.files[file].headers.push(h)
                }
                Line::Call(c) => {
                    self.vendors.add_call(&c, self.files[file].headers.last());
                    self.add_call(file, &c)
                }
            }
        });
        let skipped = match skipped {
            Ok(s) => s,
            Err(e) => {
                self.files.pop();
                anyhow::bail!("{}:{}: {}", path.display(), e.line, e.message);
            }
        };
        self.files[file].notes = notes(path, &skipped, lines == 0);
        Ok(())
    }

    fn add_file(&mut self, path: &Path, notes: Vec<String>) -> usize {
        self.files.push(FileSeen {
            path: path.to_path_buf(),
            headers: Vec::new(),
            notes,
            totals: Totals::default(),
            devices: BTreeMap::new(),
        });
        self.files.len() - 1
    }

    fn add_call(&mut self, file: usize, c: &CallRecord) {
        self.all.add(c);
        self.cuda_libs.extend(c.cuda_libs.iter().flatten().cloned());
        self.by_routine.entry(c.routine).or_default().add(c);
        match self.by_sym.get_mut(&(c.sym.clone(), c.routine)) {
            Some(t) => t.add(c),
            None => {
                let mut t = Totals::default();
                t.add(c);
                self.by_sym.insert((c.sym.clone(), c.routine), t);
            }
        }
        match self.by_route.get_mut(c.route.as_str()) {
            Some(t) => t.add(c),
            None => {
                let mut t = Totals::default();
                t.add(c);
                self.by_route.insert(c.route.clone(), t);
            }
        }
        self.by_shape.entry(Shape::of(c)).or_default().add(c);
        self.nbar.push((c.nbar(), c.flops()));
        self.predictions.add(c);
        let f = &mut self.files[file];
        f.totals.add(c);
        let list = match (&c.devices, c.device) {
            (Some(list), _) if !list.is_empty() => list.clone(),
            (_, Some(d)) => vec![d],
            _ => Vec::new(),
        };
        for &d in &list {
            let e = f.devices.entry(d).or_default();
            e.calls += 1;
            e.split += u64::from(list.len() > 1);
            e.flops += c.flops() / list.len() as f64;
            e.waited_ns += c.phases.as_ref().map_or(0, |p| p.wait_ns);
            e.pinned_ns += c.phases.as_ref().map_or(0, |p| p.pinned_ns);
        }
        if let Some(team) = c.engine.as_ref().and_then(|e| e.team) {
            let e = self.teams.entry((team, c.route.clone())).or_default();
            e.calls += 1;
            e.ns += c.dur_ns;
        }
        if let Some(n) = c.engine.as_ref().and_then(|e| e.gpu_start.as_ref()) {
            let key = match n.during {
                DuringStart::Vendor => "ran on the vendor BLAS while the GPU started",
                DuringStart::Waited => "waited for the GPU start",
                DuringStart::Failed => "ran on the vendor BLAS, the GPU could not be started",
            };
            let e = self.gpu_start.entry(key).or_default();
            e.calls += 1;
            e.ns += c.dur_ns;
            e.waited_s += n.waited_s.unwrap_or(0.0);
        }
    }

    /// Writes the summary of everything added.
    pub fn write(&self, out: &mut dyn Write, top: usize) -> std::io::Result<()> {
        let processes: usize = self.files.iter().map(|f| f.headers.len()).sum();
        writeln!(
            out,
            "ozaki summary: {} trace file(s), {} process(es), {} call(s)",
            self.files.len(),
            processes,
            self.all.calls
        )?;
        for f in &self.files {
            for h in &f.headers {
                let argv = h
                    .argv
                    .as_ref()
                    .map(|a| format!(" [{}]", a.join(" ")))
                    .unwrap_or_default();
                let parent = h
                    .parent_pid
                    .map(|p| format!(", forked from {p}"))
                    .unwrap_or_default();
                let rank = h
                    .rank
                    .map(|r| format!(", MPI rank {r}"))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "  {}: pid {}{}{} {}{}",
                    f.path.display(),
                    h.pid,
                    rank,
                    parent,
                    h.exe,
                    argv
                )?;
            }
            for note in &f.notes {
                writeln!(out, "  note: {note}")?;
            }
        }
        let mut behind = std::collections::BTreeSet::new();
        for (sym, lib, seen) in self.vendors.iter() {
            match &seen.core {
                Some(core) => writeln!(out, "  vendor {sym} -> {lib} (kernels: {core})")?,
                None => writeln!(out, "  vendor {sym} -> {lib}")?,
            }
            if let Some((core, simd)) = seen.behind_the_cpu() {
                behind.insert((lib, core, simd));
            }
        }
        for (lib, core, simd) in behind {
            writeln!(
                out,
                "  note: {lib} runs OpenBLAS's {core} kernels (SSE) on a CPU with {simd}: the \
                 library is older than the CPU; OPENBLAS_CORETYPE=Haswell selects its AVX2 \
                 kernels"
            )?;
        }
        let spins: std::collections::BTreeSet<u32> = self
            .files
            .iter()
            .flat_map(|f| &f.headers)
            .filter_map(|h| h.vendor_spin_log2)
            .collect();
        for n in spins {
            writeln!(
                out,
                "  vendor spin: OPENBLAS_THREAD_TIMEOUT={n} (idle threads sleep after 2^{n} cycles)"
            )?;
        }
        for lib in &self.cuda_libs {
            writeln!(out, "  CUDA library {lib}")?;
        }
        if self.all.calls == 0 {
            writeln!(out, "\nNo dgemm/dsyrk calls were recorded.")?;
            return Ok(());
        }
        let all = self.all;
        writeln!(
            out,
            "\nTotal: {} calls, {} GFLOP, {} s inside BLAS ({} GFLOP/s)",
            all.calls,
            gflop(all.flops),
            seconds(all.ns),
            rate(all.flops, all.ns)
        )?;

        writeln!(out, "\nPer routine:")?;
        let mut t = Table::new(&["routine", "calls", "GFLOP", "time s", "GFLOP/s"]);
        for (r, s) in &self.by_routine {
            t.row(vec![
                routine_name(*r).into(),
                s.calls.to_string(),
                gflop(s.flops),
                seconds(s.ns),
                rate(s.flops, s.ns),
            ]);
        }
        t.write(out)?;

        writeln!(out, "\nPer symbol:")?;
        let mut t = Table::new(&["symbol", "routine", "calls", "GFLOP", "time s"]);
        for ((sym, r), s) in &self.by_sym {
            t.row(vec![
                sym.clone(),
                routine_name(*r).into(),
                s.calls.to_string(),
                gflop(s.flops),
                seconds(s.ns),
            ]);
        }
        t.write(out)?;

        writeln!(out, "\nPer route:")?;
        let mut t = Table::new(&["route", "calls", "GFLOP", "time s"]);
        for (route, s) in &self.by_route {
            t.row(vec![
                route.clone(),
                s.calls.to_string(),
                gflop(s.flops),
                seconds(s.ns),
            ]);
        }
        t.write(out)?;

        self.write_per_rank(out)?;
        self.write_per_device(out)?;
        self.write_gpu_start(out)?;
        self.write_teams(out)?;
        self.predictions.write(out)?;

        writeln!(out, "\nCall size nbar = 2mn/(m+n), weighted by FLOPs:")?;
        match NbarStats::of_samples(self.nbar.iter().copied()) {
            Some(s) => {
                writeln!(
                    out,
                    "  q1 {:.1}   median {:.1}   q3 {:.1}",
                    s.q1, s.median, s.q3
                )?;
                writeln!(
                    out,
                    "  work at nbar <= {SMALL_NBAR}: {}",
                    percent(s.share_small)
                )?;
            }
            None => writeln!(out, "  no floating-point work (all calls were empty)")?,
        }

        let mut shapes: Vec<(&Shape, &Totals)> = self.by_shape.iter().collect();
        // Most work first; ties (e.g. empty calls) by call count, then by shape for a stable order.
        shapes.sort_by(|a, b| {
            b.1.flops
                .total_cmp(&a.1.flops)
                .then(b.1.calls.cmp(&a.1.calls))
                .then(a.0.cmp(b.0))
        });
        writeln!(
            out,
            "\nTop shapes by work ({} of {} distinct):",
            top.min(shapes.len()),
            shapes.len()
        )?;
        let mut t = Table::new(&["routine", "op", "m", "n", "k", "calls", "GFLOP", "work"]);
        for (shape, s) in shapes.into_iter().take(top) {
            let share = if all.flops > 0.0 {
                percent(s.flops / all.flops)
            } else {
                "-".into()
            };
            t.row(vec![
                routine_name(shape.routine).into(),
                shape.ops.clone(),
                shape.m.to_string(),
                shape.n.to_string(),
                shape.k.to_string(),
                s.calls.to_string(),
                gflop(s.flops),
                share,
            ]);
        }
        t.write(out)
    }

    /// Per-rank totals when the files come from MPI ranks, so load imbalance and
    /// a rank that missed the shim show up. A file counts for the rank in its first header.
    fn write_per_rank(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut by_rank: BTreeMap<(Option<u32>, &str), Totals> = BTreeMap::new();
        for f in &self.files {
            let h = f.headers.first();
            let totals = by_rank
                .entry((
                    h.and_then(|h| h.rank),
                    h.and_then(|h| h.host.as_deref()).unwrap_or("-"),
                ))
                .or_default();
            totals.calls += f.totals.calls;
            totals.flops += f.totals.flops;
            totals.ns += f.totals.ns;
        }
        if !by_rank.keys().any(|(rank, _)| rank.is_some()) {
            return Ok(());
        }
        writeln!(out, "\nPer MPI rank:")?;
        let mut t = Table::new(&["rank", "host", "calls", "GFLOP", "time s"]);
        for ((rank, host), s) in &by_rank {
            let rank = rank.map_or("-".to_string(), |r| r.to_string());
            t.row(vec![
                rank,
                host.to_string(),
                s.calls.to_string(),
                gflop(s.flops),
                seconds(s.ns),
            ]);
        }
        t.write(out)
    }

    /// Per-GPU counts: every call a GPU route ran, by host and device ordinal; a
    /// split call counts on each of its devices (`split calls`); `waited s`, the time those
    /// calls waited for the GPU while other callers' work held it, and `page-locking s`, the
    /// time they spent page-locking memory that later calls reuse (both inside their times).
    /// Absent when no call ran on a GPU.
    fn write_per_device(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut by_dev: BTreeMap<(&str, u32), Dev> = BTreeMap::new();
        for f in &self.files {
            let host = f
                .headers
                .first()
                .and_then(|h| h.host.as_deref())
                .unwrap_or("-");
            for (&d, seen) in &f.devices {
                let e = by_dev.entry((host, d)).or_default();
                e.calls += seen.calls;
                e.split += seen.split;
                e.flops += seen.flops;
                e.waited_ns += seen.waited_ns;
                e.pinned_ns += seen.pinned_ns;
            }
        }
        if by_dev.is_empty() {
            return Ok(());
        }
        writeln!(out, "\nPer GPU:")?;
        let mut t = Table::new(&[
            "host",
            "gpu",
            "calls",
            "split calls",
            "GFLOP",
            "waited s",
            "page-locking s",
        ]);
        for ((host, d), e) in &by_dev {
            t.row(vec![
                host.to_string(),
                d.to_string(),
                e.calls.to_string(),
                e.split.to_string(),
                gflop(e.flops),
                seconds(e.waited_ns),
                seconds(e.pinned_ns),
            ]);
        }
        t.write(out)
    }

    /// Calls made from inside OpenMP teams (trace field `engine.team`, the shim's
    /// `OZAKI_VENDOR_THREADS=team`), per team size and route: the vendor ran those it kept at
    /// its thread count divided by the team. Absent when no call named a team.
    fn write_teams(&self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.teams.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "\nCalls from OpenMP teams (vendor threads divided by the team):"
        )?;
        let mut t = Table::new(&["team", "route", "calls", "time s"]);
        for ((team, route), e) in &self.teams {
            t.row(vec![
                team.to_string(),
                route.clone(),
                e.calls.to_string(),
                seconds(e.ns),
            ]);
        }
        t.write(out)
    }

    /// What the GPU start cost the program (trace field `engine.gpu_start`,
    /// `OZAKI_ROUTE=auto`): the calls that ran on the vendor BLAS while it was under way,
    /// those that waited for it and how long, and those that found it failed. Absent when no
    /// call saw a start.
    fn write_gpu_start(&self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.gpu_start.is_empty() {
            return Ok(());
        }
        writeln!(out, "\nGPU start (calls decided before the GPU was up):")?;
        let mut t = Table::new(&["calls that", "calls", "time s", "of it waiting s"]);
        for (what, e) in &self.gpu_start {
            t.row(vec![
                what.to_string(),
                e.calls.to_string(),
                seconds(e.ns),
                format!("{:.4}", e.waited_s),
            ]);
        }
        t.write(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"header","schema":1,"pid":42,"exe":"/bin/prog","argv":["prog","x"],"shim_version":"0.1.0","vendor":{"dgemm_":"/lib/libblas.so.3"},"start_unix_s":1.0}"#;

    fn call(seq: u64, sym: &str, routine: &str, m: u64, n: u64, k: u64, dur: u64) -> String {
        let ops = if routine == "dgemm" {
            r#""transa":"N","transb":"T""#
        } else {
            r#""uplo":"U","trans":"N""#
        };
        format!(
            r#"{{"type":"call","seq":{seq},"t_ns":{seq},"dur_ns":{dur},"tid":7,"sym":"{sym}","routine":"{routine}","layout":"col",{ops},"m":{m},"n":{n},"k":{k},"lda":{m},"ldb":{n},"ldc":{m},"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}}"#
        )
    }

    /// The first `n` rows (after the header line) of the table titled `title`, as words.
    fn table_rows<'a>(s: &'a str, title: &str, n: usize) -> Vec<Vec<&'a str>> {
        let table = &s[s
            .find(title)
            .unwrap_or_else(|| panic!("no {title} table in {s}"))..];
        table
            .lines()
            .skip(2)
            .take(n)
            .map(|l| l.split_whitespace().collect())
            .collect()
    }

    fn write_tmp(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ozaki-summary-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn summary_of(text: &str, name: &str) -> String {
        let mut summary = Summary::default();
        summary.add_path(&write_tmp(name, text)).unwrap();
        let mut out = Vec::new();
        summary.write(&mut out, 10).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_gpu_start_table_adds_up_what_the_start_cost() {
        let with = |line: String, note: &str| {
            line.replace(
                r#""route":"vendor"}"#,
                &format!(r#""route":"vendor","engine":{{"reason":"r","gpu_start":{note}}}}}"#),
            )
        };
        let text = [
            HEADER.to_string(),
            with(
                call(0, "dgemm_", "dgemm", 512, 512, 512, 100_000_000),
                r#"{"during":"vendor","elapsed_s":0.0}"#,
            ),
            with(
                call(1, "dgemm_", "dgemm", 512, 512, 512, 50_000_000),
                r#"{"during":"vendor","elapsed_s":0.1}"#,
            ),
            with(
                call(2, "dgemm_", "dgemm", 4096, 4096, 4096, 300_000_000),
                r#"{"during":"waited","elapsed_s":0.15,"waited_s":0.25}"#,
            ),
            call(3, "dgemm_", "dgemm", 4096, 4096, 4096, 20_000_000),
        ]
        .join("\n");
        let s = summary_of(&text, "start.jsonl");
        let line = |what: &str| -> Vec<String> {
            let l = s
                .lines()
                .find(|l| l.contains(what))
                .unwrap_or_else(|| panic!("no {what:?} row in {s}"));
            l[l.find(what).unwrap() + what.len()..]
                .split_whitespace()
                .map(String::from)
                .collect()
        };
        assert!(
            s.contains("GPU start (calls decided before the GPU was up):"),
            "{s}"
        );
        assert_eq!(
            line("while the GPU started"),
            ["2", "0.1500", "0.0000"],
            "{s}"
        );
        assert_eq!(
            line("waited for the GPU start"),
            ["1", "0.3000", "0.2500"],
            "{s}"
        );
        assert!(!s.contains("could not be started"), "{s}");
        // A trace without the field has no such table.
        let plain = summary_of(
            &[HEADER.to_string(), call(0, "dgemm_", "dgemm", 8, 8, 8, 1)].join("\n"),
            "plain.jsonl",
        );
        assert!(!plain.contains("GPU start"), "{plain}");
    }

    #[test]
    fn calls_from_openmp_teams_are_counted_per_team_and_route() {
        let in_team = |seq, (m, n, k), dur, route: &str, team: u32| {
            call(seq, "dgemm_", "dgemm", m, n, k, dur).replace(
                r#""route":"vendor"}"#,
                &format!(r#""route":"{route}","engine":{{"reason":"r","team":{team}}}}}"#),
            )
        };
        let text = [
            HEADER.to_string(),
            in_team(0, (64, 64, 64), 2_000_000, "vendor", 16),
            in_team(1, (64, 64, 64), 3_000_000, "vendor", 16),
            in_team(2, (2048, 128, 2048), 50_000_000, "gpu-native", 16),
            in_team(3, (64, 64, 64), 1_000_000, "vendor", 4),
            call(4, "dgemm_", "dgemm", 64, 64, 64, 7_000_000),
        ]
        .join("\n");
        let s = summary_of(&text, "teams.jsonl");
        let rows = table_rows(&s, "Calls from OpenMP teams", 3);
        assert_eq!(
            rows,
            [
                ["4", "vendor", "1", "0.0010"],
                ["16", "gpu-native", "1", "0.0500"],
                ["16", "vendor", "2", "0.0050"],
            ],
            "{s}"
        );
        // A trace without the field has no such table.
        let plain = summary_of(
            &[HEADER.to_string(), call(0, "dgemm_", "dgemm", 8, 8, 8, 1)].join("\n"),
            "plain-teams.jsonl",
        );
        assert!(!plain.contains("OpenMP teams"), "{plain}");
    }

    /// A vendor first named by a record is listed beside the header's, with the kernels
    /// each said it runs, and an OpenBLAS running SSE kernels on an AVX-512 CPU gets a note.
    #[test]
    fn vendors_are_listed_with_their_kernels_and_an_old_core_is_noted() {
        let header = HEADER.replace(
            r#""start_unix_s":1.0"#,
            r#""start_unix_s":1.0,"vendor_core":{"dgemm_":"Haswell"},"cpu_simd":"avx512f""#,
        );
        let later = call(1, "dgemm", "dgemm", 8, 8, 8, 1).replace(
            r#""route":"vendor""#,
            r#""route":"vendor","vendor":"/w/libopenblas-r0.3.3.so","vendor_core":"Prescott""#,
        );
        let text = [header, call(0, "dgemm_", "dgemm", 8, 8, 8, 1), later].join("\n");
        let s = summary_of(&text, "cores.jsonl");
        assert!(
            s.contains("vendor dgemm_ -> /lib/libblas.so.3 (kernels: Haswell)"),
            "{s}"
        );
        assert!(
            s.contains("vendor dgemm -> /w/libopenblas-r0.3.3.so (kernels: Prescott)"),
            "{s}"
        );
        let notes: Vec<&str> = s.lines().filter(|l| l.contains("note:")).collect();
        assert_eq!(notes.len(), 1, "{s}");
        assert!(
            notes[0].contains("/w/libopenblas-r0.3.3.so runs OpenBLAS's Prescott kernels")
                && notes[0].contains("avx512f"),
            "{s}"
        );
        // Without the CPU's width (an older trace) nothing is noted.
        let old = summary_of(
            &[
                HEADER.to_string(),
                call(1, "dgemm", "dgemm", 8, 8, 8, 1).replace(
                    r#""route":"vendor""#,
                    r#""route":"vendor","vendor":"/w/lib.so","vendor_core":"Prescott""#,
                ),
            ]
            .join("\n"),
            "cores-old.jsonl",
        );
        assert!(
            old.contains("(kernels: Prescott)") && !old.contains("note:"),
            "{old}"
        );
    }

    #[test]
    fn the_cuda_libraries_of_gpu_calls_are_listed() {
        let gpu = call(1, "dgemm_", "dgemm", 8, 8, 8, 1).replace(
            r#""route":"vendor""#,
            r#""route":"gpu-native","device":0,"cuda_libs":["/s/nvidia/cu13/lib/libcublas.so.13","/lib/libcuda.so.1"]"#,
        );
        let s = summary_of(
            &[
                HEADER.to_string(),
                call(0, "dgemm_", "dgemm", 8, 8, 8, 1),
                gpu,
            ]
            .join("\n"),
            "gpu.jsonl",
        );
        assert!(s.contains("  CUDA library /lib/libcuda.so.1\n  CUDA library /s/nvidia/cu13/lib/libcublas.so.13\n"), "{s}");
        let plain = summary_of(
            &[HEADER.to_string(), call(0, "dgemm_", "dgemm", 8, 8, 8, 1)].join("\n"),
            "plain.jsonl",
        );
        assert!(!plain.contains("CUDA library"), "{plain}");
    }

    #[test]
    fn totals_per_routine_symbol_and_shape() {
        let text = [
            HEADER.to_string(),
            call(0, "dgemm_", "dgemm", 100, 100, 100, 1000),
            call(1, "cblas_dgemm", "dgemm", 100, 100, 100, 1000),
            call(2, "dsyrk_", "dsyrk", 10, 10, 5, 500),
        ]
        .join("\n")
            + "\n";
        let s = summary_of(&text, "a.jsonl");
        assert!(
            s.contains("1 trace file(s), 1 process(es), 3 call(s)"),
            "{s}"
        );
        // 2 * 2e6 + 10*11*5 flops.
        assert!(
            s.contains("Total: 3 calls, 0.004 GFLOP, 0.0000 s inside BLAS"),
            "{s}"
        );
        assert!(s.contains("vendor dgemm_ -> /lib/libblas.so.3"), "{s}");
        assert!(!s.contains("vendor spin"), "no spin recorded: {s}");
        let spun = text.replacen(
            r#""start_unix_s":1.0"#,
            r#""start_unix_s":1.0,"vendor_spin_log2":22"#,
            1,
        );
        assert!(
            summary_of(&spun, "a.jsonl").contains("vendor spin: OPENBLAS_THREAD_TIMEOUT=22"),
            "{spun}"
        );
        let line = |prefix: &str| {
            s.lines()
                .find(|l| l.trim_start().starts_with(prefix))
                .unwrap_or("")
                .to_string()
        };
        assert!(
            line("dgemm ").split_whitespace().collect::<Vec<_>>()[..3] == ["dgemm", "2", "0.004"],
            "{s}"
        );
        assert!(
            line("cblas_dgemm").split_whitespace().collect::<Vec<_>>()[..3]
                == ["cblas_dgemm", "dgemm", "1"],
            "{s}"
        );
        // The 100^3 NT shape carries ~99.99 % of the work and is listed first.
        let shapes = &s[s.find("Top shapes").unwrap()..];
        let first = shapes.lines().nth(2).unwrap();
        assert_eq!(
            first.split_whitespace().collect::<Vec<_>>(),
            ["dgemm", "NT", "100", "100", "100", "2", "0.004", "100.0%"]
        );
        assert!(s.contains("median 100.0"), "{s}");
        assert!(s.contains("work at nbar <= 256: 100.0%"), "{s}");
    }

    #[test]
    fn rank_traces_are_merged_with_a_per_rank_table() {
        // See: #7. Two ranks on one host, rank 1 did twice the calls of rank 0.
        let ranked = |rank: u32, pid: u32| {
            HEADER.replace(
                r#""pid":42"#,
                &format!(r#""pid":{pid},"host":"n1","rank":{rank}"#),
            )
        };
        let r0 = format!(
            "{}\n{}\n",
            ranked(0, 100),
            call(0, "dgemm_", "dgemm", 10, 10, 10, 1000)
        );
        let r1 = format!(
            "{}\n{}\n{}\n",
            ranked(1, 101),
            call(0, "dgemm_", "dgemm", 10, 10, 10, 1000),
            call(1, "dgemm_", "dgemm", 10, 10, 10, 1000)
        );
        let mut summary = Summary::default();
        summary.add_path(&write_tmp("r-1.jsonl", &r1)).unwrap();
        summary.add_path(&write_tmp("r-0.jsonl", &r0)).unwrap();
        let mut out = Vec::new();
        summary.write(&mut out, 10).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.contains("2 trace file(s), 2 process(es), 3 call(s)"),
            "{s}"
        );
        assert!(s.contains("pid 101, MPI rank 1 /bin/prog"), "{s}");
        let rows = table_rows(&s, "Per MPI rank:", 2);
        assert_eq!(rows[0][..3], ["0", "n1", "1"], "{s}");
        assert_eq!(rows[1][..3], ["1", "n1", "2"], "{s}");
        // A single process without a launcher gets no rank table.
        assert!(
            !summary_of(&r0.replace(r#","rank":0"#, ""), "norank.jsonl").contains("Per MPI rank")
        );
    }

    #[test]
    fn gpu_calls_are_counted_per_device_and_split_calls_on_each() {
        // One call on GPU 1, one split over GPUs 0 and 1, one on the CPU.
        let gpu = |seq: u64, extra: &str| {
            call(seq, "dgemm_", "dgemm", 100, 100, 100, 10).replace(
                r#""route":"vendor""#,
                &format!(r#""route":"gpu-native",{extra}"#),
            )
        };
        let text = format!(
            "{HEADER}\n{}\n{}\n{}\n",
            gpu(
                0,
                r#""device":1,"phases":{"wait_ns":2500000,"pinned_ns":1500000}"#
            ),
            gpu(1, r#""device":0,"devices":[0,1]"#),
            call(2, "dgemm_", "dgemm", 10, 10, 10, 10)
        );
        let s = summary_of(&text, "gpus.jsonl");
        let rows = table_rows(&s, "Per GPU:", 2);
        assert_eq!(
            rows[0],
            ["-", "0", "1", "1", "0.001", "0.0000", "0.0000"],
            "{s}"
        );
        assert_eq!(
            rows[1],
            ["-", "1", "2", "1", "0.003", "0.0025", "0.0015"],
            "{s}"
        );
        // A CPU-only trace has no per-GPU table.
        assert!(
            !summary_of(
                &format!("{HEADER}\n{}\n", call(0, "dgemm_", "dgemm", 4, 4, 4, 1)),
                "cpu.jsonl"
            )
            .contains("Per GPU")
        );
    }

    #[test]
    fn a_torn_line_in_the_middle_is_skipped_with_a_note_naming_it() {
        let text = format!(
            "{HEADER}\n{}\n{{\"type\":\"call\",\"seq\":1}}\n{}\n",
            call(0, "dgemm_", "dgemm", 1, 1, 1, 1),
            call(2, "dgemm_", "dgemm", 2, 2, 2, 1)
        );
        let s = summary_of(&text, "torn-middle.jsonl");
        assert!(
            s.contains("torn-middle.jsonl:3: torn or invalid line skipped"),
            "{s}"
        );
        assert!(s.contains("2 call(s)"), "{s}");
    }

    #[test]
    fn a_file_with_no_trace_line_is_an_error_with_file_and_line() {
        let p = write_tmp("bad.jsonl", "hello\n{\"type\":\"call\",\"seq\":1}\n");
        let e = load(&p).err().unwrap().to_string();
        assert!(e.starts_with(&format!("{}:1: ", p.display())), "{e}");
    }

    #[test]
    fn missing_file_is_an_error_naming_the_file() {
        let e = load(Path::new("/nonexistent/ozaki.jsonl")).err().unwrap();
        assert!(
            format!("{e:#}").contains("/nonexistent/ozaki.jsonl: cannot read trace"),
            "{e:#}"
        );
    }

    #[test]
    fn torn_last_line_is_a_note_not_an_error() {
        let full = call(1, "dgemm_", "dgemm", 8, 8, 8, 1);
        let text = format!(
            "{HEADER}\n{}\n{}",
            call(0, "dgemm_", "dgemm", 8, 8, 8, 1),
            &full[..full.len() / 2]
        );
        let s = summary_of(&text, "torn.jsonl");
        assert!(
            s.contains("torn.jsonl:3: incomplete last line skipped"),
            "{s}"
        );
        assert!(s.contains("1 call(s)"), "{s}");
        // A complete but unterminated last line still counts.
        let s = summary_of(&format!("{HEADER}\n{full}"), "unterminated.jsonl");
        assert!(s.contains("1 call(s)") && !s.contains("note:"), "{s}");
    }

    #[test]
    fn empty_trace_and_empty_calls_do_not_panic() {
        let s = summary_of("", "empty.jsonl");
        assert!(
            s.contains("empty trace") && s.contains("No dgemm/dsyrk calls"),
            "{s}"
        );
        let s = summary_of(
            &format!("{HEADER}\n{}\n", call(0, "dgemm_", "dgemm", 0, 5, 5, 1)),
            "zero.jsonl",
        );
        assert!(s.contains("no floating-point work"), "{s}");
    }
}
