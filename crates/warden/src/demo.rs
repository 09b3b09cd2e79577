//! `warden demo`: starts an echo upstream and a gateway from an embedded config on free loopback
//! ports, sends traffic through it and prints what happened.

use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {}

pub fn run(_args: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("demo: not implemented yet")
}
