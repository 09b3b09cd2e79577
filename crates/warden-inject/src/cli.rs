//! `warden inject`: read workloads from a file or stdin, write them back with the sidecar.

use crate::{inject, SidecarSettings};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct InjectArgs {
    /// Input YAML (`-` for stdin), as `istioctl kube-inject -f`.
    #[arg(short = 'f', long = "filename", default_value = "-")]
    pub filename: PathBuf,
    /// Write here instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// The warden image for the sidecar and its init container.
    #[arg(long, default_value_t = SidecarSettings::default().image)]
    pub image: String,
    /// The ConfigMap holding the mesh's Istio YAML (and registry), the sidecar's config.
    #[arg(long, default_value = "warden-mesh-config")]
    pub config_map: String,
    /// The Secret with each workload's mesh certificate (tls.crt, tls.key, ca.crt); `{sa}` is
    /// the pod's service account.
    #[arg(long, default_value = "warden-mesh-{sa}")]
    pub credentials_secret: String,
    /// No mesh certificate: the sidecar speaks plain text to its peers.
    #[arg(long)]
    pub no_mesh_credentials: bool,
    /// The sidecar's uid (its own traffic is not captured).
    #[arg(long, default_value_t = 1337)]
    pub proxy_uid: u32,
}

pub fn run(args: InjectArgs) -> anyhow::Result<ExitCode> {
    let mut text = String::new();
    if args.filename.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(&args.filename)
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.filename.display()))?;
    }
    let settings = SidecarSettings {
        image: args.image,
        config_map: args.config_map,
        credentials_secret: (!args.no_mesh_credentials).then_some(args.credentials_secret),
        proxy_uid: args.proxy_uid,
    };
    let out = inject(&text, &settings)?;
    for (object, why) in &out.left {
        eprintln!("{object}: left as it is ({why})");
    }
    for (object, note) in &out.notes {
        eprintln!("{object}: {note}");
    }
    match &args.output {
        Some(path) => std::fs::write(path, &out.text)?,
        None => std::io::stdout().write_all(out.text.as_bytes())?,
    }
    Ok(ExitCode::SUCCESS)
}
