//! `ozaki bench` (not written yet).

use std::process::ExitCode;

pub fn main(_args: Vec<String>) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
