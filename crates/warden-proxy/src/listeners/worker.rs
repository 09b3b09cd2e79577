//! A worker thread: one single-threaded tokio runtime serving its own SO_REUSEPORT listeners
//! with its own upstream pools (no cross-thread hand-off on the request path).
//!
//! Each listener socket has its own accept loop. A reload that changes Gateway ports starts
//! new accept loops (through the worker's channel) and pauses, switches or retires existing
//! ones (through each loop's [`ListenerCommand`] channel); unchanged loops see nothing.

use crate::core::conn::ConnCtx;
use crate::listeners::conn_limits::{AcceptBackoff, DownstreamLimits};
use crate::listeners::fast_h1;
use crate::listeners::tcp;
use crate::pipeline::{Shared, WorkerCtx};
use crate::routing::ports::{ListenerProtocol, ListenerSpec};
use crate::upstream::{UpstreamClients, IDLE_SWEEP_INTERVAL};
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// Envoy's default `max_request_headers_kb` is 60; larger heads get 431.
const MAX_HEADER_BYTES: usize = 60 * 1024;

/// `None` while running; `Some(deadline)` asks the worker to stop accepting and drain.
pub type StopSignal = watch::Receiver<Option<Instant>>;

/// Dropped by the accept loop once it has done what the command asked; the reload waits for
/// every one of them to be gone (dropped unprocessed counts too, so a gone loop never blocks).
pub type Done = std::sync::mpsc::Sender<()>;

/// One socket of a listener, handed to the worker that serves it.
pub struct WorkerListener {
    pub socket: std::net::TcpListener,
    pub spec: ListenerSpec,
    pub control: mpsc::UnboundedReceiver<ListenerCommand>,
}

/// What a reload asks of one accept loop.
pub enum ListenerCommand {
    /// Stop accepting (new connections wait in the socket's backlog) and drain the connections
    /// accepted so far: the protocol is about to change.
    Pause(Done),
    /// Accept again, serving `spec` (the new protocol) from now on.
    Resume(ListenerSpec),
    /// Close the socket (the port is no longer configured) and drain its connections.
    Retire(Done),
}

/// The channel a worker receives listeners added by reloads on.
pub type AddListener = mpsc::UnboundedReceiver<WorkerListener>;

pub fn spawn(
    id: usize,
    listeners: Vec<WorkerListener>,
    added: AddListener,
    shared: Arc<Shared>,
    downstream: Arc<DownstreamLimits>,
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
            runtime.block_on(run(
                listeners,
                added,
                shared,
                downstream,
                stop,
                connect_timeout,
            ));
        })
}

async fn run(
    listeners: Vec<WorkerListener>,
    mut added: AddListener,
    shared: Arc<Shared>,
    downstream: Arc<DownstreamLimits>,
    stop: StopSignal,
    connect_timeout: Duration,
) {
    // A sidecar's inbound passthrough connects from 127.0.0.6.
    let source = shared
        .identity
        .sidecar
        .is_some()
        .then_some(crate::routing::sidecar_tables::INBOUND_SOURCE);
    let worker = Arc::new(WorkerCtx {
        shared,
        upstream: UpstreamClients::new(connect_timeout, source),
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
    // hyper's connections (bodies, upgrades, oddities) get hyper's head timeout; the fast path
    // keeps a cheaper one of its own (`timeouts`).
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .max_buf_size(MAX_HEADER_BYTES)
        .header_read_timeout(downstream.timeouts.request_headers);
    crate::listeners::h2_abuse::configure(&mut builder, MAX_HEADER_BYTES as u32);
    let builder = Arc::new(builder);
    let mut tasks = JoinSet::new();
    let start = |tasks: &mut JoinSet<()>, l: WorkerListener| {
        tasks.spawn(accept_loop(
            l,
            worker.clone(),
            downstream.clone(),
            builder.clone(),
            stop.clone(),
            connect_timeout,
        ));
    };
    for l in listeners {
        start(&mut tasks, l);
    }
    let mut stopping = stop.clone();
    let mut adds_open = true;
    loop {
        tokio::select! {
            l = added.recv(), if adds_open => match l {
                Some(l) => start(&mut tasks, l),
                None => adds_open = false,
            },
            // Reap the accept loops of retired listeners once they have drained.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = stopping.wait_for(Option::is_some) => break,
        }
    }
    // Listeners added after the stop are dropped (closed) with the channel.
    drop(added);
    while tasks.join_next().await.is_some() {}
}

/// Decrements the active-connection gauge when a connection ends, however it ends; a TCP
/// connection also holds its listener's drain watch.
struct ActiveConn {
    shared: Arc<Shared>,
    _tcp: Option<watch::Receiver<()>>,
}

impl ActiveConn {
    fn new(shared: Arc<Shared>, tcp: Option<watch::Receiver<()>>) -> Self {
        shared.metrics.active_connections.inc();
        ActiveConn { shared, _tcp: tcp }
    }
}

impl Drop for ActiveConn {
    fn drop(&mut self) {
        self.shared.metrics.active_connections.dec();
    }
}

/// The connections a listener accepted under one protocol, drained together when the
/// listener is retired, switches protocol or the proxy stops.
struct Served {
    http: GracefulShutdown,
    /// Every HTTP connection on the fast path holds a receiver; a send closes them between
    /// requests (those handed to hyper drain through `http`).
    fast: watch::Sender<()>,
    /// Every TCP connection holds a receiver; `closed()` resolves when the last one ends.
    tcp: watch::Sender<()>,
}

impl Served {
    fn new() -> Self {
        Served {
            http: GracefulShutdown::new(),
            fast: watch::channel(()).0,
            tcp: watch::channel(()).0,
        }
    }

    /// HTTP connections finish their in-flight requests and close; TCP connections are left
    /// to end by themselves (a byte stream has no request boundary to stop at).
    async fn drain(self) {
        let _ = self.fast.send(());
        self.http.shutdown().await;
        self.fast.closed().await;
        self.tcp.closed().await;
    }
}

/// Run `drain` to its end, cut short at the proxy's stop deadline once a stop is asked for.
async fn drain_until_stop(drain: impl Future<Output = ()>, mut stop: StopSignal) {
    let deadline = async move {
        // Copied out so the watch's read lock is not held across the sleep.
        let asked = stop.wait_for(Option::is_some).await.map(|d| *d);
        match asked {
            Ok(Some(d)) => tokio::time::sleep_until(d.into()).await,
            // No deadline will ever come (the proxy is gone without one): drain fully.
            _ => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = drain => {}
        _ = deadline => {}
    }
}

async fn accept_loop(
    l: WorkerListener,
    worker: Arc<WorkerCtx>,
    downstream: Arc<DownstreamLimits>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut stop: StopSignal,
    connect_timeout: Duration,
) {
    let WorkerListener {
        socket,
        mut spec,
        mut control,
    } = l;
    let listener = match tokio::net::TcpListener::from_std(socket) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, listener = %spec.name, "cannot register listener");
            return;
        }
    };
    let port = spec.port;
    let mut served = Served::new();
    // Earlier generations (before a protocol switch), draining meanwhile.
    let mut draining = JoinSet::new();
    let mut paused = false;
    let mut control_open = true;
    let mut retired: Option<Done> = None;
    let mut backoff = AcceptBackoff::default();
    loop {
        if stop.borrow().is_some() {
            break;
        }
        tokio::select! {
            accepted = listener.accept(), if !paused => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Typically EMFILE: back off instead of spinning.
                        let wait = backoff.failed();
                        tracing::warn!(error = %e, ?wait, "accept failed");
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                };
                backoff.accepted();
                // Over a maximum: closed at once, so the connections held keep their fds.
                let permit = match downstream.connections.admit(port, peer.ip()) {
                    Ok(permit) => permit,
                    Err(overflow) => {
                        worker.shared.metrics.downstream_overflow(overflow == crate::listeners::conn_limits::Overflow::PerIp);
                        drop(stream);
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                match spec.protocol {
                    ListenerProtocol::Tcp => {
                        let guard = ActiveConn::new(worker.shared.clone(), Some(served.tcp.subscribe()));
                        let w = worker.clone();
                        tokio::spawn(async move {
                            tcp::proxy(stream, port, &w, connect_timeout).await;
                            drop((guard, permit));
                        });
                    }
                    ListenerProtocol::Tls | ListenerProtocol::Captured => {
                        let handed = crate::listeners::accepted::Accepted {
                            side: spec.side,
                            peer,
                            worker: worker.clone(),
                            hyper: builder.clone(),
                            watcher: served.http.watcher(),
                            stop: served.fast.subscribe(),
                            max_head: MAX_HEADER_BYTES,
                            timeouts: downstream.timeouts,
                            connect_timeout,
                        };
                        let guard = ActiveConn::new(worker.shared.clone(), Some(served.tcp.subscribe()));
                        let tls = spec.protocol == ListenerProtocol::Tls;
                        tokio::spawn(async move {
                            if tls {
                                crate::listeners::tls_accept::serve(stream, port, handed).await;
                            } else {
                                crate::listeners::captured::serve(stream, handed).await;
                            }
                            drop((guard, permit));
                        });
                    }
                    ListenerProtocol::Http => {
                        let local = stream.local_addr().unwrap_or(peer);
                        let violation = Arc::new(AtomicBool::new(false));
                        let serving = fast_h1::Serving {
                            conn: Arc::new(ConnCtx::new(peer, local, port, violation.clone())),
                            worker: worker.clone(),
                            hyper: builder.clone(),
                            watcher: served.http.watcher(),
                            stop: served.fast.subscribe(),
                            violation,
                            max_head: MAX_HEADER_BYTES,
                            timeouts: downstream.timeouts,
                        };
                        let guard = ActiveConn::new(worker.shared.clone(), None);
                        tokio::spawn(async move {
                            fast_h1::serve(stream, serving).await;
                            drop((guard, permit));
                        });
                    }
                }
            }
            command = control.recv(), if control_open => match command {
                Some(ListenerCommand::Pause(done)) => {
                    paused = true;
                    let old = std::mem::replace(&mut served, Served::new());
                    draining.spawn(old.drain());
                    drop(done);
                }
                Some(ListenerCommand::Resume(new_spec)) => {
                    spec = new_spec;
                    paused = false;
                }
                Some(ListenerCommand::Retire(done)) => {
                    retired = Some(done);
                    break;
                }
                // The proxy keeps the sender for as long as the listener is configured.
                None => control_open = false,
            },
            changed = stop.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    // Close the socket before telling a reload that the port is gone.
    drop(listener);
    drop(retired);
    drop(control);
    draining.spawn(served.drain());
    let all = async { while draining.join_next().await.is_some() {} };
    drain_until_stop(all, stop).await;
}
