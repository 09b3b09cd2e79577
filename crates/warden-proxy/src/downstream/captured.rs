//! A sidecar's captured connections: find where each was headed, then serve it as HTTP (the
//! fast path, as a gateway's) or as TCP, by the registry's protocol for that destination, or by
//! its first bytes when the port's protocol is not declared (Istio's protocol sniffing).

use crate::control::snapshot::{PortProtocol, Snapshot, TcpRoute};
use crate::control::state::{ConnCtx, WorkerCtx};
use crate::downstream::destination::{original_dst, Side};
use crate::downstream::fast_h1;
use crate::upstream::tcp_proxy;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::watch;

/// What serving a captured connection needs from its accept loop.
pub struct Captured {
    pub side: Side,
    pub peer: SocketAddr,
    pub worker: Arc<WorkerCtx>,
    pub hyper: Arc<auto::Builder<TokioExecutor>>,
    pub watcher: Watcher,
    pub stop: watch::Receiver<()>,
    pub max_head: usize,
    pub timeouts: crate::downstream::timeouts::Timeouts,
    pub connect_timeout: Duration,
}

/// How one connection is served, decided from the snapshot.
enum Plan<'a> {
    Http,
    Tcp(&'a TcpRoute),
    Detect(&'a TcpRoute),
    Close,
}

pub async fn serve(stream: TcpStream, c: Captured) {
    let dst = match original_dst(&stream) {
        Ok(d) => d,
        Err(e) => {
            // Dialed directly, not redirected: there is nowhere to send it.
            tracing::debug!(error = %e, peer = %c.peer, "no original destination; closing");
            return;
        }
    };
    let shared = c.worker.shared.clone();
    let snapshot = shared.snapshot.load_full();
    match plan(&snapshot, c.side, dst) {
        Plan::Close => {
            shared.metrics.upstream_error("blackhole");
            tracing::debug!(%dst, "unknown destination refused (REGISTRY_ONLY)");
            return;
        }
        Plan::Http => {}
        Plan::Tcp(route) => {
            return tcp_proxy::proxy_route(
                stream,
                route,
                dst,
                c.side,
                &c.worker,
                c.connect_timeout,
            )
            .await;
        }
        Plan::Detect(route) => {
            let timeout = snapshot.sidecar.as_ref().and_then(|s| s.detection_timeout);
            if !looks_like_http(&stream, timeout).await {
                return tcp_proxy::proxy_route(
                    stream,
                    route,
                    dst,
                    c.side,
                    &c.worker,
                    c.connect_timeout,
                )
                .await;
            }
        }
    }
    drop(snapshot);
    let local = stream.local_addr().unwrap_or(dst);
    let violation = Arc::new(AtomicBool::new(false));
    let conn = ConnCtx::new(c.peer, local, dst.port(), violation.clone()).captured(c.side, dst);
    fast_h1::serve(
        stream,
        fast_h1::Serving {
            conn: Arc::new(conn),
            worker: c.worker,
            hyper: c.hyper,
            watcher: c.watcher,
            stop: c.stop,
            violation,
            max_head: c.max_head,
            timeouts: c.timeouts,
        },
    )
    .await;
}

fn plan(snapshot: &Snapshot, side: Side, dst: SocketAddr) -> Plan<'_> {
    use crate::control::snapshot::Outbound;
    let Some(sidecar) = snapshot.sidecar.as_ref() else {
        return Plan::Close;
    };
    match side {
        Side::Outbound | Side::Gateway => match sidecar.outbound(dst) {
            Outbound::Http => Plan::Http,
            Outbound::Tcp(r) => Plan::Tcp(r),
            Outbound::Detect(r) => Plan::Detect(r),
            Outbound::Refuse => Plan::Close,
        },
        Side::Inbound => match (sidecar.inbound(dst.port()), sidecar.inbound_tcp_route()) {
            (PortProtocol::Http, _) => Plan::Http,
            (PortProtocol::Tcp, Some(r)) => Plan::Tcp(r),
            (PortProtocol::Detect, Some(r)) => Plan::Detect(r),
            (_, None) => Plan::Close,
        },
    }
}

/// Whether the client's first bytes are an HTTP/1 request line's method or the HTTP/2
/// preface. Waits for them up to `timeout` (forever when `None`, as Istio's default); a
/// client that sends nothing by then speaks a server-first protocol: TCP.
async fn looks_like_http(stream: &TcpStream, timeout: Option<Duration>) -> bool {
    let sniff = async {
        let mut buf = [0u8; 16];
        loop {
            let n = match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            match classify(&buf[..n]) {
                Some(verdict) => return verdict,
                // A method cut short: wait for the rest of it.
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    };
    match timeout {
        None => sniff.await,
        Some(t) => tokio::time::timeout(t, sniff).await.unwrap_or(false),
    }
}

/// `Some(true)`: HTTP; `Some(false)`: not; `None`: too few bytes to tell.
fn classify(bytes: &[u8]) -> Option<bool> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0";
    if bytes.len() >= 4 && bytes.starts_with(b"PRI ") {
        return Some(PREFACE.starts_with(&bytes[..bytes.len().min(PREFACE.len())]));
    }
    // A method: upper-case token characters, then a space.
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b' ' => return Some(i > 0),
            b'A'..=b'Z' | b'-' | b'_' => continue,
            _ => return Some(false),
        }
    }
    if bytes.len() < 16 {
        None
    } else {
        Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn http_is_told_from_other_bytes() {
        assert_eq!(classify(b"GET / HTTP/1.1\r\n"), Some(true));
        assert_eq!(classify(b"PRI * HTTP/2.0\r\n"), Some(true));
        assert_eq!(classify(b"DELETE /x"), Some(true));
        assert_eq!(classify(b"GE"), None);
        assert_eq!(classify(b"\x16\x03\x01\x02"), Some(false));
        assert_eq!(classify(b"hello world"), Some(false));
        assert_eq!(classify(b"AAAAAAAAAAAAAAAAAAAA"), Some(false));
        assert_eq!(classify(b" GET"), Some(false));
    }
}
