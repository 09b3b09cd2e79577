//! gRPC serving threads: one single-threaded tokio runtime per thread (by default one per
//! core), each serving whole connections. A call is decoded, decided (with its Redis round trip
//! on the thread's own connections, see `store::redis`) and answered on one thread: on a
//! multi-thread runtime each Redis decision paid ~10 us of cross-thread wakeups.
//!
//! Connections are accepted on the caller's runtime and handed to the thread with the fewest
//! open connections. RLS clients hold few long-lived connections (Envoy: one per worker), and
//! SO_REUSEPORT's 4-tuple hash would put 4 connections 3:1 or 4:0 on 2 threads half the time.
//!
//! The listener is TCP, or a unix socket (`GRPC_UDS`); with `GRPC_SERVER_USE_TLS` each
//! connection's handshake runs on its serving thread ([`GrpcTls`]).

use super::counted_stream::{CountedStream, OpenSlot};
use super::grpc_conn::{self, ConnLimits, GrpcRoutes};
use super::grpc_tls::GrpcTls;
use crate::serving_thread;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};

/// The gRPC listener: TCP, or a unix socket (`GRPC_UDS`).
#[derive(Debug)]
pub(crate) enum GrpcListener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// An accepted connection on its way to a serving thread (std types cross runtimes).
#[derive(Debug)]
enum Accepted {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

/// Where the acceptor hands connections to one serving thread, and how many it has open.
struct ThreadInbox {
    handoff: mpsc::UnboundedSender<Handoff>,
    open: Arc<AtomicUsize>,
}

/// The running threads and their acceptor.
#[derive(Debug)]
pub(crate) struct GrpcThreads {
    acceptor: JoinHandle<()>,
    threads: Vec<(std::thread::JoinHandle<()>, oneshot::Receiver<()>)>,
}

impl GrpcThreads {
    /// Starts `count` threads serving `routes` and the acceptor task on the current runtime.
    /// Everything stops when `shutdown` flips or its sender is dropped; in-flight calls finish
    /// first.
    pub fn start(
        count: usize,
        listener: GrpcListener,
        tls: Option<Arc<GrpcTls>>,
        routes: GrpcRoutes,
        limits: ConnLimits,
        shutdown: watch::Receiver<bool>,
    ) -> io::Result<GrpcThreads> {
        let mut inboxes = Vec::new();
        let mut threads = Vec::new();
        for index in 0..count.max(1) {
            // Built here so that a failure is reported by `Server::start`.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (handoff, incoming) = mpsc::unbounded_channel();
            let (done_tx, done_rx) = oneshot::channel();
            let routes = routes.clone();
            let shutdown = shutdown.clone();
            let tls = tls.clone();
            let thread = std::thread::Builder::new()
                .name(format!("rls-grpc-{index}"))
                .spawn(move || {
                    serving_thread::mark(index);
                    runtime.block_on(serve_thread(incoming, tls, routes, limits, shutdown));
                    // The runtime (and with it the tasks driving this thread's Redis
                    // connections) is gone before `join` resolves.
                    drop(runtime);
                    let _ = done_tx.send(());
                })?;
            threads.push((thread, done_rx));
            inboxes.push(ThreadInbox {
                handoff,
                open: Arc::new(AtomicUsize::new(0)),
            });
        }
        let acceptor = tokio::spawn(accept(listener, inboxes, shutdown));
        Ok(GrpcThreads { acceptor, threads })
    }

    /// Waits until the acceptor and every thread have ended (after shutdown was signalled).
    pub async fn join(self) {
        let _ = self.acceptor.await;
        for (thread, done) in self.threads {
            // Resolves (Ok or Err) once the thread has finished serving.
            let _ = done.await;
            let _ = thread.join();
        }
    }
}

type Handoff = (Accepted, OpenSlot);

/// Serves one connection: its TLS handshake first when configured.
async fn serve_conn<S>(
    stream: CountedStream<S>,
    tls: Option<Arc<GrpcTls>>,
    routes: GrpcRoutes,
    limits: ConnLimits,
    shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    match tls {
        None => grpc_conn::serve(stream, routes, limits, shutdown).await,
        Some(tls) => match tls.accept(stream).await {
            Ok(stream) => grpc_conn::serve(stream, routes, limits, shutdown).await,
            Err(e) => tracing::debug!(error = %e, "gRPC TLS handshake failed"),
        },
    }
}

/// One thread's serving loop: each handed-off connection is a task on this thread's runtime.
async fn serve_thread(
    mut incoming: mpsc::UnboundedReceiver<Handoff>,
    tls: Option<Arc<GrpcTls>>,
    routes: GrpcRoutes,
    limits: ConnLimits,
    shutdown: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    let mut stop = shutdown.clone();
    loop {
        tokio::select! {
            next = incoming.recv() => {
                let Some((accepted, slot)) = next else { break };
                let (tls, routes, stop) = (tls.clone(), routes.clone(), shutdown.clone());
                let registered = match accepted {
                    Accepted::Tcp(s) => tokio::net::TcpStream::from_std(s).map(|s| {
                        conns.spawn(serve_conn(CountedStream::new(s, slot), tls, routes, limits, stop));
                    }),
                    Accepted::Unix(s) => tokio::net::UnixStream::from_std(s).map(|s| {
                        conns.spawn(serve_conn(CountedStream::new(s, slot), tls, routes, limits, stop));
                    }),
                };
                if let Err(e) = registered {
                    tracing::debug!(error = %e, "gRPC connection not registered");
                }
            }
            // Reaps ended connections.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    // Each connection has seen the signal too (GOAWAY); wait for their in-flight calls.
    while conns.join_next().await.is_some() {}
}

/// Accepts until shutdown and hands each connection to the least loaded thread.
async fn accept(
    listener: GrpcListener,
    inboxes: Vec<ThreadInbox>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = accept_one(&listener) => accepted,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(e) => {
                // Per-connection errors (reset before accept, out of descriptors): keep going,
                // after a pause so a persistent error does not spin.
                tracing::debug!(error = %e, "gRPC accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
        };
        let Some(inbox) = inboxes
            .iter()
            .min_by_key(|l| l.open.load(Ordering::Relaxed))
        else {
            return;
        };
        let _ = inbox.handoff.send((stream, OpenSlot::take(&inbox.open)));
    }
}

/// One accepted connection, as a std stream ready to cross to a serving thread.
async fn accept_one(listener: &GrpcListener) -> io::Result<Accepted> {
    match listener {
        GrpcListener::Tcp(l) => {
            let (stream, _) = l.accept().await?;
            let _ = stream.set_nodelay(true);
            Ok(Accepted::Tcp(stream.into_std()?))
        }
        GrpcListener::Unix(l) => {
            let (stream, _) = l.accept().await?;
            Ok(Accepted::Unix(stream.into_std()?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_go_to_the_least_loaded_thread() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let inbox = || {
            let (handoff, rx) = mpsc::unbounded_channel();
            let open = Arc::new(AtomicUsize::new(0));
            (ThreadInbox { handoff, open }, rx)
        };
        let ((inbox0, mut rx0), (inbox1, mut rx1)) = (inbox(), inbox());
        let inboxes = vec![inbox0, inbox1];
        let open: Vec<_> = inboxes.iter().map(|l| l.open.clone()).collect();
        let (stop_tx, stop_rx) = watch::channel(false);
        let acceptor = tokio::spawn(accept(GrpcListener::Tcp(listener), inboxes, stop_rx));

        let mut clients = Vec::new();
        let mut handed = Vec::new();
        for _ in 0..4 {
            clients.push(tokio::net::TcpStream::connect(addr).await.unwrap());
            // Wait for this connection's hand-off so the next one sees the updated counts.
            let next = tokio::select! {
                Some(h) = rx0.recv() => (0, h),
                Some(h) = rx1.recv() => (1, h),
            };
            handed.push(next);
        }
        let per_thread = |t| handed.iter().filter(|(i, _)| *i == t).count();
        assert_eq!((per_thread(0), per_thread(1)), (2, 2));
        assert_eq!(open[0].load(Ordering::Relaxed), 2);

        // A closed connection frees its slot; the next one goes to that thread.
        let position = handed.iter().position(|(i, _)| *i == 1).unwrap();
        drop(handed.remove(position));
        assert_eq!(open[1].load(Ordering::Relaxed), 1);
        clients.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        assert!(rx1.recv().await.is_some());

        stop_tx.send(true).unwrap();
        acceptor.await.unwrap();
    }
}
