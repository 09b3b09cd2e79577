//! Command-line arguments of `warden proxy`, `warden check` and `warden ratelimit-config`.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// Config file or directory (repeatable).
    #[arg(short = 'c', long = "config", required = true)]
    pub config: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Config file or directory (repeatable).
    #[arg(short = 'c', long = "config", required = true)]
    pub config: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct RatelimitConfigArgs {
    /// Config file or directory (repeatable).
    #[arg(short = 'c', long = "config", required = true)]
    pub config: Vec<PathBuf>,
}

pub fn run_proxy(_args: ProxyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("proxy: not implemented yet")
}

pub fn run_check(_args: CheckArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("check: not implemented yet")
}

pub fn run_ratelimit_config(_args: RatelimitConfigArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("ratelimit-config: not implemented yet")
}
