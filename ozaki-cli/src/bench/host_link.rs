//! `ozaki bench --host-link 0,1`: host-memory and host-link microbenchmarks
//! (`gpu_kernels::host_link`): parallel memcpy between pageable and pinned memory, first-touch
//! page faults, pinned / pageable / registered transfers per GPU, duplex, both GPUs at once,
//! and the cost of `cuMemHostRegister`. These numbers decide how host-resident calls move
//! their operands; BENCHMARKS.md records them.

use anyhow::{Result, anyhow};
use ozaki_core::devices::parse_devices;

/// Measures on the given devices with `mib` MiB buffers; one JSON object per row.
pub fn run(
    devices: &str,
    mib: usize,
    emit: &mut dyn FnMut(serde_json::Value) -> Result<()>,
) -> Result<()> {
    let devs = parse_devices(devices).map_err(|e| anyhow!("--host-link: {e}"))?;
    for &d in &devs {
        let g = gpu_kernels::device::gpu_slot(d, 0).map_err(|e| anyhow!("device {d}: {e}"))?;
        println!("# {}", g.describe());
    }
    println!("# host link, {mib} MiB per transfer, median of 3");
    println!("| what | value | unit |");
    println!("|---|---:|---|");
    let mut failed = None;
    gpu_kernels::host_link::measure(&devs, mib << 20, &mut |r| {
        println!("| {} | {:.1} | {} |", r.what, r.value, r.unit);
        let _ = std::io::Write::flush(&mut std::io::stdout());
        let v = serde_json::json!({"kind": "host_link", "what": r.what, "value": r.value, "unit": r.unit});
        if let Err(e) = emit(v) {
            failed.get_or_insert(e);
        }
    })
    .map_err(|e| anyhow!("{e}"))?;
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(())
}
