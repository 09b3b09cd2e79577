//! `warden echo`: an HTTP (h1 + h2c) and TCP echo server that counts requests per source IP.
//!
//! HTTP connections start on a hand-written HTTP/1.1 fast path for body-less requests
//! (`fast_h1`, `h1_response`, on the pieces in `warden-http1`) and move to hyper (`http`) for h2c, request bodies,
//! delays and anything unusual; `reply` decides the answer for both.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use warden_load::echo::{EchoConfig, EchoServer};
//! let echo = EchoServer::start(EchoConfig::loopback()).await?;
//! let url = format!("http://{}/anything?size=1024", echo.http_addr().unwrap());
//! // ... send traffic ...
//! println!("{:?} total {}", echo.counts(), echo.total());
//! echo.shutdown().await;
//! # Ok(()) }
//! ```

mod body;
mod counts;
mod fast_h1;
mod h1_response;
mod http;
pub mod params;
mod reply;
mod tcp;

pub use counts::SourceCounts;
pub use reply::COUNT_PATH;

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Where to listen; `None` disables that side. Port 0 picks a free port.
#[derive(Debug, Clone, Default)]
pub struct EchoConfig {
    pub http: Option<SocketAddr>,
    pub tcp: Option<SocketAddr>,
}

impl EchoConfig {
    /// HTTP and TCP echo on free ports of 127.0.0.1.
    pub fn loopback() -> EchoConfig {
        let any_port = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
        EchoConfig {
            http: Some(any_port),
            tcp: Some(any_port),
        }
    }
}

/// A running echo server; stops when dropped or on [`EchoServer::shutdown`].
pub struct EchoServer {
    http_addr: Option<SocketAddr>,
    tcp_addr: Option<SocketAddr>,
    counts: Arc<SourceCounts>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl EchoServer {
    /// Bind the listeners and serve on the current tokio runtime.
    pub async fn start(config: EchoConfig) -> io::Result<EchoServer> {
        let (stop, stopped) = watch::channel(false);
        let counts = Arc::new(SourceCounts::default());
        let mut tasks = Vec::new();
        let mut http_addr = None;
        let mut tcp_addr = None;
        if let Some(addr) = config.http {
            let listener = TcpListener::bind(addr).await?;
            http_addr = Some(listener.local_addr()?);
            tasks.push(tokio::spawn(http::serve(
                listener,
                counts.clone(),
                stopped.clone(),
            )));
        }
        if let Some(addr) = config.tcp {
            let listener = TcpListener::bind(addr).await?;
            tcp_addr = Some(listener.local_addr()?);
            tasks.push(tokio::spawn(tcp::serve(listener, stopped.clone())));
        }
        Ok(EchoServer {
            http_addr,
            tcp_addr,
            counts,
            stop,
            tasks,
        })
    }

    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr
    }

    /// HTTP requests served per source IP since start or the last reset (`/count` excluded).
    pub fn counts(&self) -> BTreeMap<IpAddr, u64> {
        self.counts.snapshot()
    }

    pub fn total(&self) -> u64 {
        self.counts.total()
    }

    pub fn reset_counts(&self) {
        self.counts.reset()
    }

    /// Stop accepting, close every connection and wait for the listeners to finish.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

/// Accept connections until shutdown and run `serve` on each. Connection tasks live in a
/// JoinSet: dropping it on shutdown aborts them all, so a connection's hot path carries no
/// shutdown future of its own.
async fn accept_loop<F, Fut>(listener: TcpListener, mut stop: watch::Receiver<bool>, mut serve: F)
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(serve(stream, peer));
                }
                Err(err) => {
                    // Usually EMFILE; back off instead of spinning.
                    tracing::warn!(%err, "echo: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stopped(&mut stop) => return,
        }
    }
}

/// Resolves once shutdown was signalled (or the server handle is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send; drop it here rather than in a select! arm.
    let _ = stop.wait_for(|stopped| *stopped).await.map(|_| ());
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
