//! A sidecar's captured connections: find where each was headed, then serve it as HTTP (the
//! fast path, as a gateway's) or as TCP, by the registry's protocol for that destination, or by
//! its first bytes when the port's protocol is not declared (Istio's protocol sniffing).

use crate::core::conn::ConnCtx;
use crate::core::destination::{original_dst, Side};
use crate::core::tls_info::TlsInfo;
use crate::listeners::accepted::Accepted;
use crate::listeners::capture_plan::{plan, Plan};
use crate::listeners::fast_h1;
use crate::listeners::tcp;
use crate::listeners::tls_terminate;
use crate::snapshot::Snapshot;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

pub async fn serve(stream: TcpStream, c: Accepted) {
    let dst = match original_dst(&stream) {
        Ok(d) => d,
        Err(e) => {
            // Dialed directly, not redirected: there is nowhere to send it.
            tracing::debug!(error = %e, peer = %c.peer, "no original destination; closing");
            return;
        }
    };
    let shared = c.worker.shared.clone();
    let Ok(listener) = stream.local_addr() else {
        return;
    };
    if listener == dst {
        shared.metrics.upstream_error("blackhole");
        tracing::debug!(%dst, peer = %c.peer, "connection to the listener itself refused");
        return;
    }
    let snapshot = shared.snapshot.load_full();
    if c.side == Side::Inbound {
        if let Some(inbound) = snapshot.inbound_tls.as_ref() {
            match mutual_tls(&stream, inbound, dst.port(), &snapshot).await {
                Peer::Closed => return,
                Peer::Plaintext => {}
                Peer::PlaintextRefused => {
                    tracing::debug!(peer = %c.peer, %dst, "plaintext refused (PeerAuthentication STRICT)");
                    shared.metrics.tls_handshake_failed("plaintext_refused");
                    return;
                }
                Peer::Tls(config) => {
                    return serve_mtls(stream, listener, dst, config, c, snapshot.clone()).await
                }
            }
        }
    }
    match plan(&snapshot, c.side, listener, dst) {
        Plan::Loop | Plan::Close => {
            shared.metrics.upstream_error("blackhole");
            tracing::debug!(%dst, "unknown destination refused (REGISTRY_ONLY)");
            return;
        }
        Plan::Http => {}
        Plan::Tcp(route) => {
            return tcp::proxy_route(stream, route, dst, c.side, &c.worker, c.connect_timeout)
                .await;
        }
        Plan::Detect(route) => {
            let timeout = snapshot.sidecar.as_ref().and_then(|s| s.detection_timeout);
            if !looks_like_http(&stream, timeout).await {
                return tcp::proxy_route(stream, route, dst, c.side, &c.worker, c.connect_timeout)
                    .await;
            }
        }
    }
    drop(snapshot);
    let local = stream.local_addr().unwrap_or(dst);
    let violation = Arc::new(AtomicBool::new(false));
    let conn = ConnCtx::new(c.peer, local, dst.port(), violation.clone()).captured(c.side, dst);
    fast_h1::serve(stream, c.serving(conn, violation)).await;
}

/// What an inbound connection's first bytes and the port's PeerAuthentication mode make it.
enum Peer {
    Plaintext,
    PlaintextRefused,
    Tls(Arc<warden_tls::rustls::ServerConfig>),
    Closed,
}

async fn mutual_tls(
    stream: &TcpStream,
    inbound: &crate::snapshot::InboundTls,
    port: u16,
    snapshot: &Snapshot,
) -> Peer {
    use warden_config::kinds::peer_authentication::PeerMode;
    let mode = inbound.mode(port);
    if mode == PeerMode::Disable {
        return Peer::Plaintext;
    }
    // PERMISSIVE waits as protocol detection does (a server-first protocol sends nothing);
    // STRICT as long as a handshake may take.
    let wait = match mode {
        PeerMode::Strict => Some(crate::listeners::tls_terminate::HANDSHAKE_TIMEOUT),
        _ => snapshot.sidecar.as_ref().and_then(|s| s.detection_timeout),
    };
    let first = async {
        let mut buf = [0u8; 3];
        loop {
            match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) if n >= buf.len() => {
                    return Some(warden_tls::client_hello::looks_like_tls(&buf))
                }
                // Fewer bytes than a record header: wait for the rest.
                Ok(_) => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    };
    let tls = match wait {
        None => first.await,
        Some(t) => tokio::time::timeout(t, first).await.unwrap_or(Some(false)),
    };
    match (tls, mode, &inbound.config) {
        (None, ..) => Peer::Closed,
        (Some(true), _, Some(config)) => Peer::Tls(config.clone()),
        (Some(_), PeerMode::Strict, _) => Peer::PlaintextRefused,
        _ => Peer::Plaintext,
    }
}

/// An inbound connection from a mesh peer: terminate its mTLS (the peer's identity goes to the
/// policies), then serve the decrypted bytes as the destination port's protocol says (a port
/// whose protocol is not declared: HTTP when ALPN chose HTTP, else TCP).
async fn serve_mtls(
    stream: TcpStream,
    listener: SocketAddr,
    dst: SocketAddr,
    config: Arc<warden_tls::rustls::ServerConfig>,
    c: Accepted,
    snapshot: Arc<Snapshot>,
) {
    let Some(tls) =
        tls_terminate::handshake(stream, config, &c.worker.shared.metrics, c.peer).await
    else {
        return;
    };
    let session = tls.get_ref().1;
    let alpn_http = matches!(session.alpn_protocol(), Some(b"h2") | Some(b"http/1.1"));
    // Istio's sidecar inbound: APPEND_FORWARD with Subject, URI and DNS unless its
    // proxyHeaders say otherwise.
    let by = snapshot
        .inbound_tls
        .as_ref()
        .map_or(&[][..], |t| &t.local_uri_sans[..]);
    let details = c.worker.shared.client_cert.element_details(Side::Inbound);
    let info = Arc::new(TlsInfo::of(session, by, details));
    let mut tls = tls;
    let mut input = bytes::BytesMut::new();
    let tcp = match plan(&snapshot, c.side, listener, dst) {
        Plan::Loop | Plan::Close => return,
        Plan::Http => None,
        Plan::Detect(_) if alpn_http => None,
        Plan::Tcp(route) => Some(route),
        Plan::Detect(route) => {
            let timeout = snapshot.sidecar.as_ref().and_then(|s| s.detection_timeout);
            match sniff_decrypted(&mut tls, &mut input, timeout).await {
                None => return,
                Some(true) => None,
                Some(false) => Some(route),
            }
        }
    };
    if let Some(route) = tcp {
        let replayed = warden_http1::replay_io::ReplayIo::new(input.freeze(), tls);
        return tcp::proxy_decrypted(
            replayed,
            c.peer,
            &info,
            route,
            (dst.port(), dst, Some(dst)),
            c.side,
            &c.worker,
            c.connect_timeout,
        )
        .await;
    }
    let violation = Arc::new(AtomicBool::new(false));
    let conn = ConnCtx::new(c.peer, dst, dst.port(), violation.clone())
        .captured(c.side, dst)
        .with_tls(info);
    fast_h1::serve_tls(tls, input, c.serving(conn, violation)).await;
}

/// Read the first decrypted bytes into `input` until they tell HTTP (`Some(true)`) from
/// other bytes, within `timeout` (a peer that sends nothing speaks a server-first protocol:
/// TCP); `None` when the connection ended first.
async fn sniff_decrypted<S: tokio::io::AsyncRead + Unpin>(
    tls: &mut S,
    input: &mut bytes::BytesMut,
    timeout: Option<Duration>,
) -> Option<bool> {
    use tokio::io::AsyncReadExt;
    let read = async {
        loop {
            if let Some(verdict) = classify(input) {
                return Some(verdict);
            }
            match tls.read_buf(input).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    };
    match timeout {
        None => read.await,
        Some(t) => tokio::time::timeout(t, read).await.unwrap_or(Some(false)),
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
