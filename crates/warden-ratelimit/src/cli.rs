//! Command-line arguments of `warden ratelimit`. The reference's environment variables are the
//! defaults (see [`crate::settings`]); flags given here override them.

use crate::config::{Algorithm, ConfigSource};
use crate::server::{RunningServer, Server};
use crate::settings::{Backend, Settings};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug, Default)]
pub struct RatelimitArgs {
    /// Config file or directory (repeatable); overrides RUNTIME_ROOT/RUNTIME_SUBDIRECTORY.
    #[arg(long, value_name = "PATH")]
    pub config: Vec<PathBuf>,
    /// gRPC listen address (default GRPC_HOST:GRPC_PORT, 0.0.0.0:8081).
    #[arg(long, value_name = "ADDR")]
    pub grpc: Option<SocketAddr>,
    /// HTTP listen address for /json and /healthcheck (default HOST:PORT, 0.0.0.0:8080).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Debug listen address for /rlconfig and /metrics (default DEBUG_HOST:DEBUG_PORT, 0.0.0.0:6070).
    #[arg(long, value_name = "ADDR")]
    pub debug: Option<SocketAddr>,
    /// gRPC serving threads (default GRPC_THREADS, else one per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub grpc_threads: Option<u16>,
    /// Redis address (host:port, redis://..., or a unix socket path); implies --backend redis.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Counter store (default: redis when REDIS_URL is set, else memory).
    #[arg(long, value_parser = ["memory", "redis"])]
    pub backend: Option<String>,
    /// Default windowing for limits that do not name one (warden extension).
    #[arg(long, value_parser = ["fixed_window", "sliding_window"])]
    pub algorithm: Option<String>,
    /// Load and validate the config, print `/rlconfig` lines, and exit (1 on errors).
    #[arg(long)]
    pub check: bool,
}

impl RatelimitArgs {
    /// Environment settings with the flags applied on top.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let mut settings = Settings::from_env()?;
        if !self.config.is_empty() {
            settings.config_source = ConfigSource::Paths(self.config.clone());
        }
        if let Some(a) = self.grpc {
            settings.grpc_addr = a;
        }
        if let Some(n) = self.grpc_threads {
            settings.grpc_threads = usize::from(n);
        }
        if let Some(a) = self.http {
            settings.http_addr = a;
        }
        if let Some(a) = self.debug {
            settings.debug_addr = a;
        }
        if let Some(url) = &self.redis_url {
            settings.redis.url = url.clone();
            settings.redis.socket_type = if url.starts_with('/') { "unix" } else { "tcp" }.into();
            settings.backend = Backend::Redis;
        }
        match self.backend.as_deref() {
            Some("memory") => settings.backend = Backend::Memory,
            Some("redis") => settings.backend = Backend::Redis,
            _ => {}
        }
        if let Some(a) = self.algorithm.as_deref().and_then(Algorithm::parse) {
            settings.limiter.default_algorithm = a;
        }
        Ok(settings)
    }
}

pub fn run(args: RatelimitArgs) -> anyhow::Result<ExitCode> {
    let settings = args.settings()?;
    if args.check {
        let set =
            crate::config::load_config_set(&settings.config_source, settings.merge_domain_config)?;
        // Files with warden extensions load here but not in envoyproxy/ratelimit.
        let mut domains: Vec<_> = set.domains.values().collect();
        domains.sort_by(|a, b| a.domain.cmp(&b.domain));
        for config in domains {
            for note in crate::config::warden_extensions(config) {
                eprintln!(
                    "note: domain '{}' uses a warden extension: {note}",
                    config.domain
                );
            }
        }
        let limiter = crate::limiter::RateLimiter::in_memory(set);
        print!(
            "{}",
            limiter.snapshot().map(|s| s.dump()).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // The control runtime: accepting, HTTP/debug listeners, config reload, health probe. gRPC
    // calls are served on their own threads (see `server::grpc_threads`).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let server = Server::start(settings.clone()).await?;
        // Through the log, so LOG_FORMAT=json output stays one JSON object per line.
        if let Some(e) = server.initial_config_error() {
            tracing::warn!("no configuration loaded yet: {e}");
        }
        tracing::warn!(
            "serving gRPC on {} HTTP on {} debug on {}, backend {:?}",
            server.grpc_addr(),
            server.http_addr(),
            server.debug_addr(),
            settings.backend
        );
        RunningServer::wait_for_signal().await;
        server.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}
