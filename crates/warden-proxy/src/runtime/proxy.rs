//! Starting and stopping a proxy in-process: [`Proxy::start`] returns a [`RunningProxy`].
//!
//! The proxy owns its threads (N workers with one single-threaded runtime each, plus one admin
//! thread that also watches config files), so it works the same from `main`, from a
//! `#[tokio::test]` of any flavor, or from a plain `#[test]`. Its methods are synchronous;
//! `shutdown` blocks until the drain finishes, so call it through `spawn_blocking` when the
//! calling runtime must keep serving clients meanwhile.

use crate::core::access_log::AccessLog;
use crate::core::error::ProxyError;
use crate::core::metrics::MetricsView;
use crate::listeners::conn_limits::{self, ConnLimits, DownstreamLimits};
use crate::listeners::listen;
use crate::listeners::worker::{self, WorkerListener};
use crate::pipeline::Shared;
use crate::runtime::admin;
use crate::runtime::config_settle;
use crate::runtime::config_source;
use crate::runtime::options::{ConfigSource, ProxyOptions};
use crate::runtime::startup_pages;
use crate::runtime::state::{Control, ListenerControl, ListenerInfo, RunningListener};
use crate::runtime::status_port;
use crate::snapshot::Snapshot;
use notify::Watcher;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};
use warden_config::ConfigErrors;

/// Entry point of the in-process API.
pub struct Proxy;

/// The gateway topology (`control::gateway_topology`), logged with where it came from.
fn topology_of(
    snapshot: &Snapshot,
    opts: &ProxyOptions,
) -> Result<crate::runtime::gateway_topology::Topology, ProxyError> {
    let topology = crate::runtime::gateway_topology::resolve(
        snapshot,
        &opts.mesh_defaults,
        opts.num_trusted_proxies,
        opts.pod_proxy_config.as_ref(),
    )
    .map_err(|p| ProxyError::Config(ConfigErrors::new(vec![p])))?;
    if snapshot.sidecar.is_none() {
        tracing::info!(
            "numTrustedProxies {} from {}; forwardClientCertDetails {} from {}",
            topology.num_trusted_proxies,
            topology.trusted_from,
            topology.client_cert.gateway.name(),
            topology.gateway_xfcc_from
        );
    } else {
        tracing::info!(
            "inbound x-forwarded-client-cert {} from {}",
            topology.client_cert.inbound.name(),
            topology.inbound_xfcc_from
        );
    }
    Ok(topology)
}

impl Proxy {
    /// Load and compile the config, bind every listener and the admin endpoint, and start the
    /// worker threads. Errors (bad config, port in use) are reported before anything runs.
    pub fn start(opts: ProxyOptions) -> Result<RunningProxy, ProxyError> {
        let loaded = config_source::load_with(&opts.config, &opts.load)?;
        let identity = opts.identity();
        let snapshot = Snapshot::build_with(loaded, &identity, None, &opts.http_filters)?;
        for w in &snapshot.warnings {
            tracing::warn!("{w}");
        }
        for (gateway, why) in &snapshot.skipped_gateways {
            tracing::info!(%gateway, "Gateway not served by this proxy: {why}");
        }
        if opts.require_listener && snapshot.listeners.is_empty() {
            return Err(ProxyError::NoListener {
                skipped: snapshot.skipped_gateways.len(),
            });
        }
        let topology = topology_of(&snapshot, &opts)?;
        if opts.xff_trusted_cidrs.is_some() && topology.num_trusted_proxies > 0 {
            return Err(ProxyError::TrustedProxiesTwice {
                hops: topology.num_trusted_proxies,
                from: topology.trusted_from,
            });
        }
        let workers = opts.concurrency.max(1);
        let mut per_worker: Vec<Vec<WorkerListener>> = (0..workers).map(|_| Vec::new()).collect();
        let (add_txs, add_rxs): (Vec<_>, Vec<_>) =
            (0..workers).map(|_| mpsc::unbounded_channel()).unzip();
        let mut running = Vec::new();
        for spec in &snapshot.listeners {
            let addr = SocketAddr::new(opts.listen_host, spec.port);
            let bound =
                listen::bind_listener(addr, spec, workers).map_err(|source| ProxyError::Bind {
                    what: format!("listener {}", spec.name),
                    addr,
                    source,
                })?;
            running.push(RunningListener::hand_out(
                bound.info,
                spec,
                bound.sockets,
                |i, l| {
                    if let Some(w) = per_worker.get_mut(i) {
                        w.push(l);
                    }
                },
            ));
        }
        let admin_listener = match opts.admin {
            Some(addr) => {
                Some(
                    listen::bind_one(addr, false).map_err(|source| ProxyError::Bind {
                        what: "admin endpoint".into(),
                        addr,
                        source,
                    })?,
                )
            }
            None => None,
        };
        let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
        let mut status_listeners = Vec::new();
        for &addr in opts.status.iter().flat_map(|s| &s.addrs) {
            status_listeners.push(listen::bind_one(addr, false).map_err(|source| {
                ProxyError::Bind {
                    what: "status port".into(),
                    addr,
                    source,
                }
            })?);
        }
        let status_addrs = status_listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        let access_log = opts
            .access_log
            .as_ref()
            .map(|t| AccessLog::open_with(t, opts.access_log_format.clone()))
            .transpose()?;
        let serving = Shared::new(
            snapshot,
            access_log,
            topology.num_trusted_proxies,
            topology.client_cert,
            identity,
            opts.http_filters.clone(),
        )
        .with_trusted_cidrs(opts.xff_trusted_cidrs.clone());
        // The exporter runs when the mesh config has an OpenTelemetry provider (Telemetry
        // resources may name it on a reload; a collector not in the registry is a warning).
        let has_otel = opts
            .extension_providers
            .iter()
            .any(|p| p.opentelemetry.is_some());
        let tracer = match has_otel {
            true => Some(
                crate::core::trace_export::Tracer::start(serving.metrics.tracing.clone()).map_err(
                    |source| ProxyError::Thread {
                        what: "trace exporter thread",
                        source,
                    },
                )?,
            ),
            false => None,
        };
        let serving = Arc::new(serving.with_tracer(tracer));
        let downstream = Arc::new(DownstreamLimits {
            connections: ConnLimits::new(
                opts.max_connections.unwrap_or_else(|| {
                    conn_limits::default_max_connections(conn_limits::nofile_soft())
                }),
                opts.max_connections_per_listener,
                opts.max_connections_per_ip,
            ),
            timeouts: opts.timeouts,
        });
        let shared = Arc::new(Control::new(
            serving,
            opts.config.clone(),
            opts.load.clone(),
            opts.allow_empty_config,
            ListenerControl {
                host: opts.listen_host,
                workers: add_txs,
                running,
            },
            downstream.clone(),
        ));

        if let Some(extra) = &opts.extra_metrics {
            let _ = shared.metrics.extra.set(extra.clone());
        }
        if let Some(splicer) = &opts.splicer {
            let _ = shared.splicer.set(splicer.clone());
        }
        let (stop_tx, stop_rx) = watch::channel(None);
        let mut running = RunningProxy {
            shared: shared.clone(),
            workers: Vec::new(),
            stop_tx,
            admin_thread: None,
            admin_stop: None,
            admin_addr,
            status_addrs,
            _watcher: None,
        };
        for (id, (listeners, added)) in per_worker.into_iter().zip(add_rxs).enumerate() {
            let handle = worker::spawn(
                id,
                listeners,
                added,
                shared.shared.clone(),
                downstream.clone(),
                stop_rx.clone(),
                opts.connect_timeout,
            )
            .map_err(|source| ProxyError::Thread {
                what: "worker thread",
                source,
            })?;
            running.workers.push(handle);
        }

        let (changes_tx, changes_rx) = mpsc::unbounded_channel::<()>();
        if let (true, ConfigSource::Paths(paths)) = (opts.watch_config, &opts.config) {
            running._watcher = Some(watch_files(paths, changes_tx)?);
        }
        let (admin_stop_tx, admin_stop_rx) = oneshot::channel::<()>();
        let watch_certs = opts.watch_config;
        let jwks_refresh = opts.jwks_refresh;
        let admin_shared = shared.clone();
        let status = opts
            .status
            .map(|s| (status_listeners, Arc::new(s), stop_rx.clone()));
        let handle = std::thread::Builder::new()
            .name("warden-admin".into())
            .spawn(move || {
                admin_thread(
                    admin_listener,
                    admin_shared,
                    changes_rx,
                    admin_stop_rx,
                    watch_certs,
                    jwks_refresh,
                    status,
                )
            })
            .map_err(|source| ProxyError::Thread {
                what: "admin thread",
                source,
            })?;
        running.admin_thread = Some(handle);
        running.admin_stop = Some(admin_stop_tx);
        Ok(running)
    }
}

/// The status ports' listeners, settings and the drain signal, served on the admin thread.
type StatusPorts = (
    Vec<std::net::TcpListener>,
    Arc<crate::runtime::status_port::StatusSettings>,
    watch::Receiver<Option<Instant>>,
);

fn admin_thread(
    listener: Option<std::net::TcpListener>,
    shared: Arc<Control>,
    mut changes: mpsc::UnboundedReceiver<()>,
    stop: oneshot::Receiver<()>,
    watch_certs: bool,
    jwks_refresh: std::time::Duration,
    status: Option<StatusPorts>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot build admin runtime");
            return;
        }
    };
    runtime.block_on(async move {
        let reload_shared = shared.clone();
        let reloads = async move {
            while changes.recv().await.is_some() {
                // Writers change files in several steps: reload once they have settled.
                if let ConfigSource::Paths(paths) = &reload_shared.source {
                    config_settle::settle(&mut changes, paths).await;
                }
                let _ = reload_shared.reload();
            }
            std::future::pending::<()>().await;
        };
        let cert_shared = shared.clone();
        let certs = async move {
            if watch_certs {
                watch_certificates(&cert_shared).await;
            }
            std::future::pending::<()>().await;
        };
        // Once the workers have served their first moments, start-up's code pages go.
        let settled = async {
            tokio::time::sleep(STARTUP_SETTLE).await;
            startup_pages::release_logged("start");
            std::future::pending::<()>().await;
        };
        let jwks = super::jwks_refresh::run(shared.shared.clone(), jwks_refresh);
        let reloads = async move {
            tokio::join!(reloads, certs, settled, jwks);
        };
        let stop = async {
            let _ = stop.await;
        };
        let status_shared = shared.clone();
        let status = async move {
            if let Some((listeners, settings, draining)) = status {
                status_port::serve(listeners, status_shared, settings, draining).await;
            }
            std::future::pending::<()>().await;
        };
        match listener {
            Some(l) => {
                tokio::select! {
                    _ = admin::serve(l, shared, stop) => {}
                    _ = reloads => {}
                    _ = status => {}
                }
            }
            None => {
                tokio::select! {
                    _ = stop => {}
                    _ = reloads => {}
                    _ = status => {}
                }
            }
        }
    });
}

/// How long after start the start-up code pages are released.
const STARTUP_SETTLE: Duration = Duration::from_secs(1);

/// How often the certificate files of the running config are looked at.
const CERT_POLL: Duration = Duration::from_secs(1);

/// Reload when a certificate file the running config read changes (polled: the set of files
/// changes with every reload, and Kubernetes swaps mounted Secrets through symlinks). A
/// change is acted on once it has held for a moment (a writer replaces the certificate and the
/// key one after the other); a reload that fails (a key that does not match yet) keeps the
/// running certificates and is retried at the next change.
async fn watch_certificates(shared: &Control) {
    use warden_tls::file_stamps::FileStamps;
    let mut last_tried: Option<FileStamps> = None;
    let mut every = tokio::time::interval(CERT_POLL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let running = shared.snapshot.load_full();
        if running.tls_files.is_empty() {
            continue;
        }
        let now = FileStamps::of(running.tls_files.paths());
        if now == running.tls_files || last_tried.as_ref() == Some(&now) {
            continue;
        }
        tokio::time::sleep(CERT_POLL / 4).await;
        if FileStamps::of(running.tls_files.paths()) != now {
            continue;
        }
        last_tried = Some(now);
        tracing::info!("certificate files changed: reloading");
        let _ = shared.reload();
    }
}

/// Watch config files (through their directories, so editors that replace files are seen)
/// and directories; send a tick on every change.
fn watch_files(
    paths: &[PathBuf],
    tx: mpsc::UnboundedSender<()>,
) -> Result<notify::RecommendedWatcher, ProxyError> {
    use notify::event::{AccessKind, AccessMode, EventKind};
    // Events name absolute paths: a relative `-c cfg` folder would never match them.
    // (`absolute`, not `canonicalize`: a ConfigMap key's symlink must stay a symlink.)
    let paths: Vec<PathBuf> = paths
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let files: Vec<PathBuf> = paths.iter().filter(|p| !p.is_dir()).cloned().collect();
    let dirs: Vec<PathBuf> = paths.iter().filter(|p| p.is_dir()).cloned().collect();
    let watched_dirs = dirs.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        // Our own reads show up as access events; only completed writes count.
        if let EventKind::Access(kind) = event.kind {
            if kind != AccessKind::Close(AccessMode::Write) {
                return;
            }
        }
        let relevant = event.paths.iter().any(|p| {
            files
                .iter()
                .any(|f| p.file_name() == f.file_name() && p.parent().is_some())
                || watched_dirs.iter().any(|d| p.starts_with(d))
                // A ConfigMap volume's key is a symlink through `..data`, which the kubelet
                // swaps to update every key at once; the key's own name sees no event.
                || (p.file_name() == Some(std::ffi::OsStr::new("..data"))
                    && files.iter().any(|f| f.parent() == p.parent()))
        });
        if relevant {
            let _ = tx.send(());
        }
    })?;
    for p in &paths {
        if p.is_dir() {
            watcher.watch(p, notify::RecursiveMode::Recursive)?;
        } else {
            let parent = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            };
            watcher.watch(&parent, notify::RecursiveMode::NonRecursive)?;
        }
    }
    let _ = dirs;
    Ok(watcher)
}

/// A started proxy. Dropping it stops it immediately (no drain); use [`RunningProxy::shutdown`]
/// for a graceful stop.
pub struct RunningProxy {
    shared: Arc<Control>,
    workers: Vec<JoinHandle<()>>,
    stop_tx: watch::Sender<Option<Instant>>,
    admin_thread: Option<JoinHandle<()>>,
    admin_stop: Option<oneshot::Sender<()>>,
    admin_addr: Option<SocketAddr>,
    status_addrs: Vec<SocketAddr>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl RunningProxy {
    /// The bound listeners (actual addresses, also for port 0 in config), as of the last
    /// successful reload.
    pub fn listeners(&self) -> Vec<ListenerInfo> {
        self.shared.listeners.get().to_vec()
    }

    /// The bound address of the listener whose config port is `port`.
    pub fn listener_addr(&self, port_in_config: u16) -> Option<SocketAddr> {
        self.shared
            .listeners
            .get()
            .iter()
            .find(|l| l.port_in_config == port_in_config)
            .map(|l| l.addr)
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The bound status ports (`ProxyOptions::status`), in the order given.
    pub fn status_addrs(&self) -> &[SocketAddr] {
        &self.status_addrs
    }

    /// Re-read the config source, swap the snapshot and make the listeners follow the Gateway
    /// ports; on error (including a port that cannot be bound) the running config and
    /// listeners stay.
    pub fn reload(&self) -> Result<(), ConfigErrors> {
        self.shared.reload()
    }

    pub fn metrics(&self) -> MetricsView {
        self.shared.metrics.view()
    }

    /// The Prometheus text exposition, as `/stats/prometheus` serves it.
    pub fn metrics_text(&self) -> String {
        self.shared
            .metrics
            .encode_with(|r| self.shared.snapshot.load().filters.register_metrics(r))
    }

    /// Access log records dropped because its writer fell behind (0 without an access log).
    pub fn access_log_dropped(&self) -> u64 {
        self.shared.access_log.as_ref().map_or(0, |l| l.dropped())
    }

    /// Stop accepting, let in-flight requests and connections finish until `deadline` has
    /// passed, then close what is left. Blocks until all threads have exited.
    pub fn shutdown(mut self, deadline: Duration) {
        self.stop(Instant::now() + deadline);
    }

    fn stop(&mut self, deadline: Instant) {
        let _ = self.stop_tx.send(Some(deadline));
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(tx) = self.admin_stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.admin_thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        self.stop(Instant::now());
    }
}
