//! Command-line arguments of `warden ratelimit`.

use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct RatelimitArgs {}

pub fn run(_args: RatelimitArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("ratelimit: not implemented yet")
}
