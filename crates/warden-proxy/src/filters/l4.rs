//! What the TCP path applies to a connection before it is relayed: the local connection limit
//! on accept, then authorization on the first byte (Envoy's network RBAC,
//! ONE_TIME_ON_FIRST_BYTE). A refused connection is closed with nothing written.

use crate::core::metrics::Metrics;
use crate::core::tls_info::TlsInfo;
use crate::filters::Filters;
use std::net::SocketAddr;
use tokio::net::TcpStream;

/// Where a connection was headed, as the policies see it.
pub struct L4Target<'a> {
    /// The listener's configured port, or a captured connection's original port.
    pub port: u16,
    pub local: SocketAddr,
    pub filters: &'a Filters,
}

/// The L4 policies for a plain TCP connection. False: drop it without writing.
pub async fn admitted(inbound: &TcpStream, target: &L4Target<'_>, metrics: &Metrics) -> bool {
    let filters = target.filters;
    if filters.local_rate_limit.is_none() && filters.authz.is_none() {
        return true;
    }
    let Ok(peer) = inbound.peer_addr() else {
        return false;
    };
    if !within_limit(peer, target) {
        return false;
    }
    if let Some(authz) = &filters.authz {
        let mut first = [0u8; 1];
        match inbound.peek(&mut first).await {
            Ok(n) if n > 0 => {}
            _ => return false,
        }
        return authz.check_tcp(peer.ip(), target.local, None, metrics);
    }
    true
}

/// The local connection limit, then authorization, for a connection from `peer` whose first
/// bytes were already read (a TLS handshake, whose SNI and client identity `tls` holds).
pub fn admitted_after_handshake(
    peer: SocketAddr,
    target: &L4Target<'_>,
    tls: Option<&TlsInfo>,
    metrics: &Metrics,
) -> bool {
    if !within_limit(peer, target) {
        return false;
    }
    match &target.filters.authz {
        Some(authz) => authz.check_tcp(peer.ip(), target.local, tls, metrics),
        None => true,
    }
}

fn within_limit(peer: SocketAddr, target: &L4Target<'_>) -> bool {
    match &target.filters.local_rate_limit {
        Some(limiter) if !limiter.admit_connection(target.port, peer.ip()) => {
            tracing::debug!(%peer, port = target.port, "connection over the local limit; closing");
            false
        }
        _ => true,
    }
}
