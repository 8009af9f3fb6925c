//! Reading trace files given on the command line: plain JSON Lines, or gzip-compressed
//! (`.gz`, as the committed application traces in `traces/` are), detected from the magic
//! bytes rather than the name so a renamed file still loads. The file is read as a stream
//! (one line at a time, never its whole text). Large files show a progress line while they
//! load (bytes of the file read). Decompression stops with an error past
//! [`MAX_GZIP_RATIO`] times the compressed size: traces compress 10-20x, so a file that
//! expands further is not a trace and would only exhaust memory. Parsing, with its
//! tolerance for torn lines, is [`load`], which reads through [`open`].

use crate::progress::Progress;
use anyhow::Context;
use ozaki_core::trace::{SkippedLine, Trace};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Files smaller than this load too fast to be worth a progress line.
const PROGRESS_MIN_BYTES: u64 = 8 << 20;

/// Largest accepted ratio of decompressed to compressed size (real traces: 10-20).
pub const MAX_GZIP_RATIO: u64 = 200;

/// Decompressed bytes always accepted, however small the compressed file.
const MIN_GZIP_CAP: u64 = 64 << 20;

/// A reader of a trace file's text, decompressed if it is gzip.
///
/// # Errors
/// - the file cannot be opened or read. A corrupt or oversized gzip stream is an I/O error
///   of the returned reader, with a message that says which.
pub fn open(path: &Path) -> anyhow::Result<Box<dyn BufRead>> {
    let file =
        File::open(path).with_context(|| format!("{}: cannot read trace", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let label = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let progress = if size >= PROGRESS_MIN_BYTES {
        Some(Progress::new(format!("reading {label}"), size, "B"))
    } else {
        None
    };
    let mut counted = CountingReader {
        inner: file,
        progress,
    };
    let mut magic = [0u8; 2];
    let n = read_prefix(&mut counted, &mut magic)
        .with_context(|| format!("{}: cannot read trace", path.display()))?;
    let raw = std::io::Cursor::new(magic[..n].to_vec()).chain(counted);
    Ok(if magic[..n] == [0x1f, 0x8b] {
        let cap = size.saturating_mul(MAX_GZIP_RATIO).max(MIN_GZIP_CAP);
        Box::new(BufReader::new(Capped {
            inner: flate2::read::MultiGzDecoder::new(raw),
            left: cap,
            cap,
        }))
    } else {
        Box::new(BufReader::new(raw))
    })
}

/// Stops a decompressing reader with an error once it has produced `cap` bytes.
struct Capped<R> {
    inner: R,
    left: u64,
    cap: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            // One more byte means the stream is over the cap.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(std::io::Error::other(format!(
                    "gzip stream expands past {} MiB, over {MAX_GZIP_RATIO} times its compressed size; \
                     not a trace (traces compress 10-20x)",
                    self.cap >> 20
                ))),
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// One trace file, read and checked.
pub struct Loaded {
    /// Its contents.
    pub trace: Trace,
    /// Things the reader tolerated (a torn last line, an empty file).
    pub notes: Vec<String>,
}

/// Notes listed per file before the rest are only counted.
const MAX_SKIP_NOTES: usize = 5;

/// Reads one trace file; errors carry `path:line:`. Lines that do not parse are skipped with
/// a note (`ozaki_core::trace::Trace::read_lenient`).
pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    let reader = open(path)?;
    let (trace, skipped) = Trace::read_lenient(reader)
        .map_err(|e| anyhow::anyhow!("{}:{}: {}", path.display(), e.line, e.message))?;
    let empty = trace.headers.is_empty() && trace.calls.is_empty();
    Ok(Loaded {
        trace,
        notes: notes(path, &skipped, empty),
    })
}

/// What the reader tolerated in one file, as notes for the user.
pub(crate) fn notes(path: &Path, skipped: &[SkippedLine], empty: bool) -> Vec<String> {
    let shown = path.display();
    let mut notes: Vec<String> = skipped
        .iter()
        .take(MAX_SKIP_NOTES)
        .map(|s| {
            if s.terminated {
                format!(
                    "{shown}:{}: torn or invalid line skipped ({})",
                    s.line, s.message
                )
            } else {
                format!(
                    "{shown}:{}: incomplete last line skipped (the program was probably killed)",
                    s.line
                )
            }
        })
        .collect();
    if skipped.len() > MAX_SKIP_NOTES {
        notes.push(format!(
            "{shown}: {} more invalid lines skipped",
            skipped.len() - MAX_SKIP_NOTES
        ));
    }
    if empty {
        notes.push(format!("{shown}: empty trace"));
    }
    notes
}

/// Reads one trace file (see [`load`]); what the reader tolerated (a torn
/// last line) goes to stderr.
///
/// # Errors
/// - as [`read_text`], and malformed lines, with the file and line number.
pub fn read(path: &Path) -> anyhow::Result<ozaki_core::trace::Trace> {
    let loaded = load(path)?;
    for note in &loaded.notes {
        eprintln!("ozaki: {note}");
    }
    Ok(loaded.trace)
}

/// Reads up to `buf.len()` bytes, fewer only at end of file.
fn read_prefix(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Passes bytes through and reports how many went by.
struct CountingReader<R> {
    inner: R,
    progress: Option<Progress>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(p) = &mut self.progress {
            p.add(n as u64);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const LINES: &str = concat!(
        r#"{"type":"header","schema":1,"pid":7,"exe":"/bin/x","shim_version":"0.1.0","start_unix_s":1.0}"#,
        "\n",
        r#"{"type":"call","seq":0,"t_ns":5,"dur_ns":7,"tid":11,"sym":"dgemm_","routine":"dgemm","layout":"col","m":3,"n":4,"k":5,"lda":3,"ldb":5,"ldc":3,"alpha":1.0,"beta":0.0,"ilp64":false,"route":"vendor"}"#,
        "\n"
    );

    #[test]
    fn a_gzip_bomb_is_stopped_with_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("ozaki-gzbomb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gz = dir.join("bomb.jsonl.gz");
        let mut enc =
            flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::best());
        enc.write_all(LINES.as_bytes()).unwrap();
        let zeros = vec![b' '; 1 << 20];
        for _ in 0..(MIN_GZIP_CAP >> 20) + 8 {
            enc.write_all(&zeros).unwrap();
        }
        enc.finish().unwrap();
        let mut sink = Vec::new();
        let err = open(&gz).unwrap().read_to_end(&mut sink).unwrap_err();
        assert!(err.to_string().contains("not a trace"), "{err}");
        assert!(
            sink.len() as u64 <= MIN_GZIP_CAP,
            "read {} bytes",
            sink.len()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plain_and_gzip_traces_read_the_same() {
        let dir = std::env::temp_dir().join(format!("ozaki-tracefile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("t.jsonl");
        std::fs::write(&plain, LINES).unwrap();
        // Deliberately without a .gz name: detection is by content.
        let gz = dir.join("t-compressed.jsonl");
        let mut enc = flate2::write::GzEncoder::new(
            File::create(&gz).unwrap(),
            flate2::Compression::default(),
        );
        enc.write_all(LINES.as_bytes()).unwrap();
        enc.finish().unwrap();
        let (a, b) = (read(&plain).unwrap(), read(&gz).unwrap());
        assert_eq!((a.headers.len(), a.calls.len()), (1, 1));
        assert_eq!(a.calls, b.calls);
        let err = format!("{:#}", read(&dir.join("missing.jsonl")).unwrap_err());
        assert!(err.contains("missing.jsonl"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
