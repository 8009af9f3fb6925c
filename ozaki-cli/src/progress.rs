//! A one-line progress indicator for long runs (reading and replaying large traces,
//! calibration): long runs show progress on a terminal.
//!
//! It draws only when stderr is a terminal, so pipes, CI logs and test output stay clean,
//! and redraws at most every 100 ms, so a tight loop calling [`Progress::set`] per record
//! costs one clock read per call. The line is erased when the run finishes or the value is
//! dropped, leaving the terminal as it was.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Minimum time between two redraws.
const REDRAW: Duration = Duration::from_millis(100);

/// Progress of one long run: `done` out of `total` units (records, bytes, ...).
pub struct Progress {
    label: String,
    unit: &'static str,
    total: u64,
    done: u64,
    started: Instant,
    last_draw: Option<Instant>,
    enabled: bool,
}

impl Progress {
    /// A progress line for `total` `unit`s (a total of 0 means unknown: no percentage).
    /// Draws nothing unless stderr is a terminal.
    pub fn new(label: impl Into<String>, total: u64, unit: &'static str) -> Progress {
        Progress::with_output(label, total, unit, std::io::stderr().is_terminal())
    }

    /// Like [`Progress::new`], with the terminal check made by the caller (tests).
    pub fn with_output(
        label: impl Into<String>,
        total: u64,
        unit: &'static str,
        enabled: bool,
    ) -> Progress {
        Progress {
            label: label.into(),
            unit,
            total,
            done: 0,
            started: Instant::now(),
            last_draw: None,
            enabled,
        }
    }

    /// Sets how much is done and redraws if the last redraw is old enough.
    pub fn set(&mut self, done: u64) {
        self.done = done;
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if self
            .last_draw
            .is_some_and(|t| now.duration_since(t) < REDRAW)
        {
            return;
        }
        self.last_draw = Some(now);
        let line = self.line(now.duration_since(self.started));
        let mut err = std::io::stderr().lock();
        // A failed write to the terminal is not worth failing the run for.
        let _ = write!(err, "\r{line}\x1b[K");
        let _ = err.flush();
    }

    /// Adds `n` to the amount done.
    pub fn add(&mut self, n: u64) {
        self.set(self.done.saturating_add(n));
    }

    /// The text of the progress line after `elapsed`.
    pub fn line(&self, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            self.done as f64 / secs
        } else {
            0.0
        };
        if self.total == 0 {
            return format!(
                "{}: {} {} ({:.0} {}/s)",
                self.label, self.done, self.unit, rate, self.unit
            );
        }
        let frac = (self.done as f64 / self.total as f64).min(1.0);
        const WIDTH: usize = 30;
        let filled = (frac * WIDTH as f64).round() as usize;
        let eta = if rate > 0.0 {
            format!(
                ", {:.0} s left",
                (self.total.saturating_sub(self.done)) as f64 / rate
            )
        } else {
            String::new()
        };
        format!(
            "{}: [{}{}] {:>3.0}% {}/{} {}{}",
            self.label,
            "#".repeat(filled),
            " ".repeat(WIDTH - filled),
            frac * 100.0,
            self.done,
            self.total,
            self.unit,
            eta
        )
    }

    /// Erases the line (also done on drop).
    pub fn finish(&mut self) {
        if self.enabled && self.last_draw.is_some() {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
        }
        self.enabled = false;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shows_bar_percentage_and_eta() {
        let mut p = Progress::with_output("replay", 200, "calls", false);
        p.set(50);
        let line = p.line(Duration::from_secs(1));
        assert!(line.starts_with("replay: [########"), "{line}");
        assert!(line.contains(" 25% 50/200 calls, 3 s left"), "{line}");
        p.add(1000);
        assert!(
            p.line(Duration::from_secs(2))
                .contains("100% 1050/200 calls"),
            "done past total clamps the bar"
        );
    }

    #[test]
    fn unknown_total_shows_count_and_rate() {
        let mut p = Progress::with_output("read", 0, "B", false);
        p.set(4096);
        assert_eq!(p.line(Duration::from_secs(2)), "read: 4096 B (2048 B/s)");
    }
}
