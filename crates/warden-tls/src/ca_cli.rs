//! `warden ca init` and `warden ca issue`: the local mesh CA from the command line.

use crate::local_ca;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

#[derive(clap::Args, Debug)]
pub struct CaArgs {
    #[command(subcommand)]
    pub command: CaCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum CaCommand {
    /// Make a self-signed mesh CA (ECDSA P-256) in a folder: ca.crt, ca.key, trust-domain.
    Init {
        /// The CA's folder (created).
        #[arg(long)]
        dir: PathBuf,
        /// The SPIFFE trust domain of the identities it signs.
        #[arg(long, default_value = "cluster.local")]
        trust_domain: String,
        /// How long the CA is valid.
        #[arg(long, default_value = "10years", value_parser = humantime::parse_duration)]
        validity: Duration,
        /// Replace a CA already in the folder.
        #[arg(long)]
        force: bool,
    },
    /// Sign a workload certificate for spiffe://<trust-domain>/ns/<ns>/sa/<sa> into a
    /// credentials folder (tls.crt, tls.key, ca.crt) that `warden proxy --mesh-credentials`
    /// reads and reloads on change.
    Issue {
        /// The CA's folder (`warden ca init --dir`).
        #[arg(long)]
        dir: PathBuf,
        /// The workload's namespace (the `ns/<ns>` of its SPIFFE identity).
        #[arg(long)]
        namespace: String,
        /// The workload's service account (the `sa/<sa>` of its SPIFFE identity).
        #[arg(long)]
        service_account: String,
        /// Where the credentials go (created).
        #[arg(long)]
        out: PathBuf,
        /// Certificate lifetime (Istio's workload default is 24h).
        #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// Keep running and re-issue when two thirds of the lifetime have passed, so the
        /// proxy always holds a certificate well before its expiry.
        #[arg(long)]
        keep_renewed: bool,
    },
}

pub fn run(args: CaArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        CaCommand::Init {
            dir,
            trust_domain,
            validity,
            force,
        } => {
            local_ca::init(&dir, &trust_domain, validity, SystemTime::now(), force)?;
            println!(
                "mesh CA for trust domain {trust_domain} written to {}",
                dir.display()
            );
        }
        CaCommand::Issue {
            dir,
            namespace,
            service_account,
            out,
            ttl,
            keep_renewed,
        } => loop {
            let issued =
                local_ca::issue(&dir, &namespace, &service_account, ttl, SystemTime::now())?;
            local_ca::write_credentials(&out, &issued)?;
            println!(
                "{} valid for {} written to {}",
                issued.spiffe_id,
                humantime::format_duration(ttl),
                out.display()
            );
            if !keep_renewed {
                break;
            }
            std::thread::sleep(ttl * 2 / 3);
        },
    }
    Ok(ExitCode::SUCCESS)
}
