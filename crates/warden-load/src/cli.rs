//! Command-line arguments of `warden load` and `warden echo`.

use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Target URL: http://, h2c:// or tcp://
    pub target: String,
}

#[derive(clap::Args, Debug)]
pub struct EchoArgs {}

pub fn run_load(_args: LoadArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("load: not implemented yet")
}

pub fn run_echo(_args: EchoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("echo: not implemented yet")
}
