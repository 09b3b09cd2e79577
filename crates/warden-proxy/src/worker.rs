//! A worker thread: one single-threaded tokio runtime serving its own SO_REUSEPORT listeners
//! with its own upstream pools (no cross-thread hand-off on the request path).

use crate::framing_guard::FramingGuard;
use crate::pipeline;
use crate::snapshot::{ListenerProtocol, ListenerSpec};
use crate::state::{ConnCtx, Shared, WorkerCtx};
use crate::tcp_proxy;
use crate::upstream::{UpstreamClients, IDLE_SWEEP_INTERVAL};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Envoy's default `max_request_headers_kb` is 60; larger heads get 431.
const MAX_HEADER_BYTES: usize = 60 * 1024;

/// `None` while running; `Some(deadline)` asks the worker to stop accepting and drain.
pub type StopSignal = watch::Receiver<Option<Instant>>;

pub struct WorkerListener {
    pub socket: std::net::TcpListener,
    pub spec: ListenerSpec,
}

pub fn spawn(
    id: usize,
    listeners: Vec<WorkerListener>,
    shared: Arc<Shared>,
    stop: StopSignal,
    connect_timeout: Duration,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("warden-worker-{id}"))
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot build worker runtime");
                    return;
                }
            };
            runtime.block_on(run(listeners, shared, stop, connect_timeout));
        })
}

async fn run(
    listeners: Vec<WorkerListener>,
    shared: Arc<Shared>,
    stop: StopSignal,
    connect_timeout: Duration,
) {
    let worker = Arc::new(WorkerCtx {
        shared,
        upstream: UpstreamClients::new(connect_timeout),
    });
    // Ends with the runtime, after the accept loops have drained.
    let sweeping = worker.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(IDLE_SWEEP_INTERVAL);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            sweeping.upstream.sweep_idle();
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No header read timeout (Envoy's `request_headers_timeout` is off by default too): hyper
    // would re-arm a timer for every request head, which costs ~10% of a direct response.
    builder
        .http1()
        .max_buf_size(MAX_HEADER_BYTES)
        .header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_BYTES as u32);
    let builder = Arc::new(builder);
    let mut tasks = tokio::task::JoinSet::new();
    for l in listeners {
        tasks.spawn(accept_loop(
            l,
            worker.clone(),
            builder.clone(),
            stop.clone(),
            connect_timeout,
        ));
    }
    while tasks.join_next().await.is_some() {}
}

/// Decrements the active-connection gauge when a connection ends, however it ends.
struct ActiveConn {
    shared: Arc<Shared>,
    tcp: Option<Arc<AtomicUsize>>,
}

impl ActiveConn {
    fn new(shared: Arc<Shared>, tcp: Option<Arc<AtomicUsize>>) -> Self {
        shared.metrics.active_connections.inc();
        if let Some(t) = &tcp {
            t.fetch_add(1, Ordering::Relaxed);
        }
        ActiveConn { shared, tcp }
    }
}

impl Drop for ActiveConn {
    fn drop(&mut self) {
        self.shared.metrics.active_connections.dec();
        if let Some(t) = &self.tcp {
            t.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

async fn accept_loop(
    l: WorkerListener,
    worker: Arc<WorkerCtx>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut stop: StopSignal,
    connect_timeout: Duration,
) {
    let listener = match tokio::net::TcpListener::from_std(l.socket) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, listener = %l.spec.name, "cannot register listener");
            return;
        }
    };
    let port = l.spec.port;
    let graceful = GracefulShutdown::new();
    let tcp_active = Arc::new(AtomicUsize::new(0));
    loop {
        if stop.borrow().is_some() {
            break;
        }
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Typically EMFILE: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                match l.spec.protocol {
                    ListenerProtocol::Tcp => {
                        let guard = ActiveConn::new(worker.shared.clone(), Some(tcp_active.clone()));
                        let w = worker.clone();
                        tokio::spawn(async move {
                            tcp_proxy::proxy(stream, port, &w, connect_timeout).await;
                            drop(guard);
                        });
                    }
                    ListenerProtocol::Http => {
                        let local = stream.local_addr().unwrap_or(peer);
                        let violation = Arc::new(AtomicBool::new(false));
                        let conn = Arc::new(ConnCtx::new(peer, local, port, violation.clone()));
                        let io = TokioIo::new(FramingGuard::new(stream, violation));
                        let w = worker.clone();
                        let service = hyper::service::service_fn(move |req| {
                            let w = w.clone();
                            let conn = conn.clone();
                            async move { Ok::<_, Infallible>(pipeline::handle(req, &conn, &w).await) }
                        });
                        let served = graceful.watch(builder.serve_connection(io, service).into_owned());
                        let guard = ActiveConn::new(worker.shared.clone(), None);
                        tokio::spawn(async move {
                            if let Err(e) = served.await {
                                tracing::debug!(error = %e, "downstream connection error");
                            }
                            drop(guard);
                        });
                    }
                }
            }
            changed = stop.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    drop(listener);
    let deadline = *stop.borrow();
    let drain = async {
        graceful.shutdown().await;
        while tcp_active.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    match deadline {
        Some(d) => {
            let _ = tokio::time::timeout_at(d.into(), drain).await;
        }
        None => drain.await,
    }
}
