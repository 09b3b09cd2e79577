//! An accepted connection handed from its accept loop to the code that serves it.

use crate::core::conn::ConnCtx;
use crate::core::destination::Side;
use crate::listeners::fast_h1;
use crate::pipeline::WorkerCtx;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What serving an accepted connection past its first bytes (a Gateway TLS port's, a
/// sidecar's captured one) needs from its accept loop.
pub struct Accepted {
    pub side: Side,
    pub peer: SocketAddr,
    pub worker: Arc<WorkerCtx>,
    pub hyper: Arc<auto::Builder<TokioExecutor>>,
    pub watcher: Watcher,
    pub stop: watch::Receiver<()>,
    pub max_head: usize,
    pub timeouts: crate::core::timeouts::Timeouts,
    pub connect_timeout: Duration,
}

impl Accepted {
    /// The HTTP server's view of `conn`.
    pub(crate) fn serving(self, conn: ConnCtx, violation: Arc<AtomicBool>) -> fast_h1::Serving {
        fast_h1::Serving {
            conn: Arc::new(conn),
            worker: self.worker,
            hyper: self.hyper,
            watcher: self.watcher,
            stop: self.stop,
            violation,
            max_head: self.max_head,
            timeouts: self.timeouts,
        }
    }
}
