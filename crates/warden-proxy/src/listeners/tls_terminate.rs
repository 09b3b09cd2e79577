//! TLS termination, one for every listener that terminates: a Gateway's HTTPS/TLS servers
//! (`tls_accept`, after the SNI picked the server) and a sidecar's inbound mesh mTLS
//! (`captured`, by PeerAuthentication). The handshake is bounded in time and its failures are
//! counted by reason (`warden_downstream_tls_handshake_failures_total`).

use crate::core::metrics::Metrics;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use warden_tls::rustls::ServerConfig;
use warden_tls::tokio_rustls::server::TlsStream;

/// A ClientHello and the handshake after it must be done within this (Envoy's listener
/// filter timeout is 15 s; browsers finish in milliseconds).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Complete the handshake with `config`; `None` (counted) when it fails or times out.
pub async fn handshake(
    stream: TcpStream,
    config: Arc<ServerConfig>,
    metrics: &Metrics,
    peer: SocketAddr,
) -> Option<TlsStream<TcpStream>> {
    let acceptor = warden_tls::tokio_rustls::TlsAcceptor::from(config);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            metrics.tls_handshakes.inc();
            Some(tls)
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, %peer, "TLS handshake failed");
            metrics.tls_handshake_failed(warden_tls::handshake_error::reason(&e));
            None
        }
        Err(_) => {
            metrics.tls_handshake_failed("timeout");
            None
        }
    }
}
