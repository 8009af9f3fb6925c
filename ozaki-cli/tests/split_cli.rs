//! `ozaki explain --devices` as a user runs it: with several GPU slots the engine
//! shows each GPU route priced split over them, per device, and takes the split only when
//! the profile's survey says it beats one GPU. Runs without a GPU (the profile says what the
//! machine is).

#[path = "../../shim/tests/common/mod.rs"]
mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn ozaki() -> Command {
    let mut cmd = plain(ozaki_bin());
    cmd.env_remove("RUST_BACKTRACE");
    cmd
}

fn explain(args: &[&str], profile: &Path) -> (bool, String) {
    let out = ozaki()
        .arg("explain")
        .args(args)
        .arg("--profile")
        .arg(profile)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The shipped H200 profile without its survey (as on a machine where no survey ran), and
/// the same with a survey of two GPUs whose host links do not slow each other, both
/// written to `dir`.
fn profiles(dir: &Path) -> (PathBuf, PathBuf) {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/h200.json");
    let mut p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&shipped).unwrap()).unwrap();
    let obj = p.as_object_mut().unwrap();
    obj.remove("devices");
    obj.remove("host_share");
    let unsurveyed = dir.join("unsurveyed.json");
    std::fs::write(&unsurveyed, serde_json::to_string_pretty(&p).unwrap()).unwrap();
    let link = p["gpu"]["link"]["h2d_staged"].as_f64().unwrap();
    let device = |o: u32| {
        serde_json::json!({"ordinal": o, "name": "NVIDIA H200", "fp64_flops": 60e12,
            "int8_ops": 1.5e15, "h2d_staged": link, "d2h_staged": link})
    };
    p["version"] = 2.into();
    p["devices"] = serde_json::json!([device(0), device(1)]);
    p["host_share"] = serde_json::json!({"devices": [0, 1], "h2d_staged_all": 2.0 * link,
        "d2h_staged_all": 2.0 * link});
    let surveyed = dir.join("surveyed.json");
    std::fs::write(&surveyed, serde_json::to_string_pretty(&p).unwrap()).unwrap();
    (unsurveyed, surveyed)
}

#[test]
fn explain_prices_the_split_and_takes_it_only_when_the_survey_says_it_pays() {
    let dir = work_dir("split-cli");
    let (unsurveyed, surveyed) = profiles(&dir);
    let big = ["32768", "32768", "32768", "--devices", "0,1"];
    // No survey: both GPU routes priced split, per device, shared link, not taken.
    let (ok, out) = explain(&big, &unsurveyed);
    assert!(ok, "{out}");
    assert_eq!(out.matches("split over GPUs [0, 1]").count(), 2, "{out}");
    assert!(
        out.contains("GPU 0: tile(s) 32768x16384") && out.contains("GPU 1: tile(s) 32768x16384"),
        "{out}"
    );
    assert!(
        out.contains("shared by the GPUs") && out.contains("not taken"),
        "{out}"
    );
    assert!(out.contains("not split:"), "{out}");
    // Surveyed, links independent: the split is taken and the choice says so.
    let (ok, out) = explain(&big, &surveyed);
    assert!(ok, "{out}");
    assert!(out.contains("one per GPU (calibrated)"), "{out}");
    let choice = out
        .lines()
        .find(|l| l.starts_with("choice:"))
        .unwrap_or_default();
    assert!(choice.contains("split over GPUs [0, 1]"), "{out}");
    // JSON carries the same, for scripts.
    let (ok, out) = explain(&[&big[..], &["--json"]].concat(), &surveyed);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["slots"], serde_json::json!([0, 1]));
    let splits = v["splits"].as_array().unwrap();
    assert_eq!(splits.len(), 2);
    assert!(splits.iter().any(|s| s["taken"] == true), "{out}");
    // One slot, or a call too small for two tiles: nothing to split.
    let (_, out) = explain(&["32768", "32768", "32768", "--devices", "0"], &surveyed);
    assert!(!out.contains("split over GPUs"), "{out}");
    let (_, out) = explain(&["1024", "1024", "1024", "--devices", "0,1"], &surveyed);
    assert!(out.contains("no split priced"), "{out}");
    // A bad device list is an error naming OZAKI_DEVICES' format.
    let (ok, out) = explain(&["64", "64", "64", "--devices", "0,x"], &surveyed);
    assert!(!ok && out.contains("OZAKI_DEVICES"), "{out}");
}
