//! The whole service in-process: gRPC (RLS v3 + grpc.health.v1), HTTP (`/json`,
//! `/healthcheck`), debug (`/rlconfig`, `/metrics`), config reload and health probing.

mod bans;
mod counted_stream;
mod grpc;
mod grpc_conn;
mod grpc_threads;
mod grpc_tls;
mod health;
mod http;
mod reload;

pub use grpc_tls::GrpcTlsSettings;
pub use reload::load_into;

use crate::clock::{Clock, SystemClock};
use crate::limiter::RateLimiter;
use crate::settings::{Backend, Settings};
use crate::stats::Stats;
use crate::store::{MemoryStore, RedisStore, Store, StoreError};
use grpc_threads::{GrpcListener, GrpcThreads};
use grpc_tls::GrpcTls;
use health::Health;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr} ({what})")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot listen on the unix socket {path} (GRPC_UDS)")]
    BindUnix {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("gRPC TLS: {0}")]
    GrpcTls(String),
    #[error("redis settings")]
    Redis(#[from] StoreError),
    #[error("cannot start the gRPC serving threads: {0}")]
    Threads(std::io::Error),
}

/// Starts the service; see [`RunningServer`].
#[derive(Debug)]
pub struct Server;

impl Server {
    /// Binds every listener, loads the config (an invalid first config leaves the service
    /// answering `no rate limit configuration loaded`, like the reference) and starts serving.
    pub async fn start(settings: Settings) -> Result<RunningServer, ServerError> {
        Server::start_with_clock(settings, Arc::new(SystemClock)).await
    }

    /// As [`Server::start`] with a custom clock (tests move time by hand).
    pub async fn start_with_clock(
        settings: Settings,
        clock: Arc<dyn Clock>,
    ) -> Result<RunningServer, ServerError> {
        let stats = Arc::new(Stats::new());
        let store = match settings.backend {
            Backend::Memory => {
                Store::Memory(Arc::new(MemoryStore::new(settings.limiter.memory_max_keys)))
            }
            Backend::Redis => Store::Redis(Arc::new(RedisStore::new(
                &settings.redis,
                settings.redis_per_second.as_ref(),
                settings.grpc_threads,
                settings.ban_state_cache_ms,
                format!(
                    "{}{}",
                    settings.limiter.cache_key_prefix,
                    crate::ban::BAN_KEY_PREFIX
                ),
            )?)),
        };
        let limiter = Arc::new(RateLimiter::new(
            store.clone(),
            settings.limiter.clone(),
            clock,
            stats.clone(),
        ));
        let source = settings.config_source.clone();
        let merge = settings.merge_domain_config;
        let initial_error = {
            let (l, s) = (limiter.clone(), source.clone());
            tokio::task::spawn_blocking(move || reload::load_into(&l, &s, merge).err())
                .await
                .unwrap_or_else(|e| Some(e.to_string()))
        };

        let bind = |what: &'static str, addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Bind { what, addr, source })
        };
        let grpc_listener = match &settings.grpc_uds {
            Some(path) => GrpcListener::Unix(bind_unix(path)?),
            None => GrpcListener::Tcp(bind("gRPC", settings.grpc_addr).await?),
        };
        let grpc_tls = match &settings.grpc_tls {
            Some(t) => Some(Arc::new(
                GrpcTls::new(t.clone()).map_err(ServerError::GrpcTls)?,
            )),
            None => None,
        };
        let http_listener = bind("HTTP", settings.http_addr).await?;
        let debug_listener = bind("debug", settings.debug_addr).await?;
        let prometheus_listener = match &settings.prometheus {
            Some((addr, _)) => Some(bind("Prometheus", *addr).await?),
            None => None,
        };
        let local = |l: &TcpListener, fallback: SocketAddr| l.local_addr().unwrap_or(fallback);
        let grpc_addr = match &grpc_listener {
            GrpcListener::Tcp(l) => local(l, settings.grpc_addr),
            GrpcListener::Unix(_) => settings.grpc_addr,
        };
        let http_addr = local(&http_listener, settings.http_addr);
        let debug_addr = local(&debug_listener, settings.debug_addr);
        let prometheus_addr = prometheus_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok());

        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let health = Arc::new(Health {
            store,
            shutting_down: Default::default(),
            config: settings
                .healthy_with_at_least_one_config_loaded
                .then(|| limiter.clone()),
        });
        let reporter = tonic_health::server::HealthReporter::new();
        // Before the first call can ask: the probe only publishes changes it sees.
        health::publish(&reporter, health.healthy()).await;
        let mut tasks = Vec::new();

        tasks.push(tokio::spawn(health::run_probe(
            health.clone(),
            reporter.clone(),
            settings.health_probe_interval,
            stats.clone(),
            shutdown_rx.clone(),
        )));
        tasks.push(tokio::spawn(reload::watch_config(
            limiter.clone(),
            source,
            merge,
            settings.config_poll_interval,
            shutdown_rx.clone(),
        )));

        let routes = grpc_conn::GrpcRoutes {
            rls: grpc::RlsService {
                limiter: limiter.clone(),
            },
            health: tonic_health::pb::health_server::HealthServer::new(
                tonic_health::server::HealthService::from_health_reporter(reporter),
            ),
        };
        let limits = grpc_conn::ConnLimits {
            max_age: settings.grpc_max_connection_age,
            max_age_grace: settings.grpc_max_connection_age_grace,
        };
        let grpc = GrpcThreads::start(
            settings.grpc_threads,
            grpc_listener,
            grpc_tls,
            routes,
            limits,
            shutdown_rx.clone(),
        )
        .map_err(ServerError::Threads)?;

        let ctx = |listener| http::HttpCtx {
            limiter: limiter.clone(),
            health: health.clone(),
            listener,
            metrics_path: settings
                .prometheus
                .as_ref()
                .map(|(_, p)| p.clone())
                .unwrap_or_else(|| "/metrics".into()),
        };
        tasks.push(tokio::spawn(http::serve(
            http_listener,
            ctx(http::Listener::Service),
            shutdown_rx.clone(),
        )));
        tasks.push(tokio::spawn(http::serve(
            debug_listener,
            ctx(http::Listener::Debug),
            shutdown_rx.clone(),
        )));
        if let Some(l) = prometheus_listener {
            tasks.push(tokio::spawn(http::serve(
                l,
                ctx(http::Listener::Prometheus),
                shutdown_rx.clone(),
            )));
        }

        Ok(RunningServer {
            grpc_addr,
            grpc_uds: settings.grpc_uds.clone(),
            http_addr,
            debug_addr,
            prometheus_addr,
            limiter,
            health,
            initial_config_error: initial_error,
            shutdown: shutdown_tx,
            tasks,
            grpc,
        })
    }
}

/// The `GRPC_UDS` listener. A socket file left by an earlier run is replaced (binding over
/// it would fail); any other file there is an error.
fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, ServerError> {
    use std::os::unix::fs::FileTypeExt;
    let error = |source| ServerError::BindUnix {
        path: path.to_path_buf(),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path).map_err(error)?;
        }
    }
    tokio::net::UnixListener::bind(path).map_err(error)
}

/// A started service. Dropping it without [`RunningServer::shutdown`] stops it too, without
/// waiting: the listeners stop accepting and open connections are drained.
#[derive(Debug)]
pub struct RunningServer {
    grpc_addr: SocketAddr,
    grpc_uds: Option<PathBuf>,
    http_addr: SocketAddr,
    debug_addr: SocketAddr,
    prometheus_addr: Option<SocketAddr>,
    limiter: Arc<RateLimiter>,
    health: Arc<Health>,
    initial_config_error: Option<String>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    grpc: GrpcThreads,
}

impl RunningServer {
    /// Bound gRPC address (RLS v3 and grpc.health.v1).
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }
    /// The unix socket gRPC is served on (`GRPC_UDS`); `grpc_addr` is not bound then.
    pub fn grpc_uds(&self) -> Option<&Path> {
        self.grpc_uds.as_deref()
    }
    /// Bound HTTP address (`/json`, `/healthcheck`).
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }
    /// Bound debug address (`/`, `/rlconfig`, `/metrics`, `/stats`).
    pub fn debug_addr(&self) -> SocketAddr {
        self.debug_addr
    }
    /// Bound Prometheus address when `USE_PROMETHEUS` is set.
    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        self.prometheus_addr
    }
    /// The limiter the listeners share (call `decide` on it in-process).
    pub fn limiter(&self) -> &Arc<RateLimiter> {
        &self.limiter
    }
    /// The error of the first config load, if it failed.
    pub fn initial_config_error(&self) -> Option<&str> {
        self.initial_config_error.as_deref()
    }
    /// Whether `/healthcheck` currently answers 200.
    pub fn healthy(&self) -> bool {
        self.health.healthy()
    }

    /// Marks the service unhealthy, stops accepting, and waits for the tasks and the gRPC
    /// serving threads to end.
    pub async fn shutdown(self) {
        self.health.shutting_down.store(true, Ordering::Relaxed);
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        self.grpc.join().await;
        if let Some(path) = &self.grpc_uds {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Resolves when the process receives SIGTERM or Ctrl-C (for the CLI).
    pub async fn wait_for_signal() {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            if let Ok(mut term) = signal(SignalKind::terminate()) {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
                return;
            }
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
