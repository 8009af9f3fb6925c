//! `ozaki report` end to end: the page is generated from a small fixture trace,
//! its PNGs are real images of the advertised size, and a headless Chromium loads the page
//! and finds every embedded image decoded (naturalWidth > 0) and the screenshot not blank.
//!
//! The browser part skips itself visibly when no Chromium is installed (Debian:
//! `apt-get install -y chromium`; `scripts/setup-debian` installs it, and under
//! `OZAKI_TEST_REQUIRE_ALL=1` a missing browser fails the test instead).

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ab-small.jsonl");
const PLOTS: [&str; 4] = ["nbar.png", "routes.png", "speedup.png", "ab-errors.png"];

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ozaki-report-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_report(out: &Path) -> PathBuf {
    let o = Command::new(env!("CARGO_BIN_EXE_ozaki"))
        .args(["report", FIXTURE, "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "ozaki report failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.join("index.html")
}

/// (width, height, distinct colours) of a PNG file.
fn png_info(bytes: &[u8]) -> (u32, u32, usize) {
    let mut r = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    let bpp = info.line_size / info.width as usize;
    let colours: std::collections::HashSet<&[u8]> = buf[..info.buffer_size()].chunks(bpp).collect();
    (info.width, info.height, colours.len())
}

#[test]
fn report_writes_a_self_contained_page_with_its_plots() {
    let out = temp_dir("page");
    let page = write_report(&out);
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(
        html.matches("src=\"data:image/png;base64,").count(),
        PLOTS.len(),
        "every plot embedded"
    );
    for p in PLOTS {
        let (w, h, colours) = png_info(&std::fs::read(out.join(p)).unwrap());
        assert_eq!((w, h), (960, 440), "{p}");
        assert!(colours > 10, "{p} looks blank ({colours} colours)");
    }
    // The fixture's numbers appear in the tables: 25 calls, two routes pass, two skipped.
    assert!(
        html.contains("<td class=\"l\">ab-small</td>"),
        "workload row"
    );
    assert!(html.contains("gpu-ozaki: PASS"), "A/B verdict");
    assert!(html.contains("calls skipped"), "skipped calls are reported");
    assert!(
        html.contains("x measured (22 A/B calls)"),
        "measured speedup from the fixture's A/B fields"
    );
    assert!(
        html.contains("predicted vs vendor"),
        "the engine's replay priced the workload"
    );
    // No external resources: the page stands alone.
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "page must not fetch anything"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Runs headless Chromium with the flags that keep it offline and self-contained; returns stdout.
fn chromium(bin: &Path, profile: &Path, extra: &[String], url: &str) -> String {
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--virtual-time-budget=5000",
            "--window-size=1000,2600",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    // Drain stdout while the browser runs: the dumped DOM (with the base64 images) is far
    // larger than a pipe buffer, and a full pipe would stall Chromium.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).map(|_| s)
    });
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("chromium did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap().unwrap()
}

#[test]
fn chromium_renders_every_plot() {
    let bin = find_chromium();
    if !common::require(
        bin.is_some(),
        "headless Chromium",
        "apt-get install chromium",
    ) {
        return;
    }
    let bin = bin.unwrap();
    let out = temp_dir("chromium");
    let page = write_report(&out);
    // A copy of the page with a probe that records, after load, how many images decoded.
    let probe = out.join("probe.html");
    let html = std::fs::read_to_string(&page).unwrap().replace(
        "</body>",
        "<script>window.addEventListener('load',()=>{const i=[...document.images];\
         document.body.setAttribute('data-images',i.length+'/'+i.filter(x=>x.complete&&x.naturalWidth>0).length)});</script></body>",
    );
    std::fs::write(&probe, html).unwrap();
    let dom = chromium(
        &bin,
        &out.join("profile-dom"),
        &["--dump-dom".into()],
        &format!("file://{}", probe.display()),
    );
    assert!(
        dom.contains("data-images=\"4/4\""),
        "not every image decoded in Chromium: {}",
        &dom[..dom.len().min(300)]
    );

    let shot = out.join("shot.png");
    chromium(
        &bin,
        &out.join("profile-shot"),
        &[format!("--screenshot={}", shot.display())],
        &format!("file://{}", page.display()),
    );
    let (w, _, colours) = png_info(&std::fs::read(&shot).expect("screenshot written"));
    assert_eq!(w, 1000);
    assert!(colours > 50, "screenshot looks blank ({colours} colours)");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn report_priced_without_a_gpu_says_which_flags_give_predictions() {
    let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
    for (profile, note) in [("cpu-only.json", true), ("h200.json", false)] {
        let out = temp_dir(&format!("note-{profile}"));
        let o = Command::new(env!("CARGO_BIN_EXE_ozaki"))
            .args(["report", FIXTURE, "--out"])
            .arg(&out)
            .arg("--profile")
            .arg(profiles.join(profile))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{profile}: {err}");
        let html = std::fs::read_to_string(out.join("index.html")).unwrap();
        for (what, text) in [("stderr", err.as_ref()), ("page", html.as_str())] {
            assert_eq!(
                text.contains("prices no GPU route") && text.contains("--platform"),
                note,
                "{profile}, {what}: {text}"
            );
        }
        let _ = std::fs::remove_dir_all(&out);
    }
}
