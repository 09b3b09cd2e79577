//! What the TCP path applies to a connection before it is relayed: the local connection limit
//! on accept, then, on the first byte, CUSTOM policies' external authorizer (Envoy's network
//! ext_authz, waiting for the provider) and authorization (Envoy's network RBAC,
//! ONE_TIME_ON_FIRST_BYTE), in Istio's filter order. A refused connection is closed with
//! nothing written and nothing sent upstream.
//!
//! Cost: a port with none of these pays one check of three options; the CUSTOM rules are
//! matched before the first byte is waited for, so a connection no CUSTOM rule matches pays
//! no call.

use crate::core::metrics::Metrics;
use crate::core::tls_info::TlsInfo;
use crate::filters::ext_authz::ExtAuthzFilter;
use crate::filters::Filters;
use std::net::SocketAddr;
use tokio::net::TcpStream;
use warden_authz::TcpAttrs;

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
    let ext_authz = tcp_ext_authz(filters);
    if filters.local_rate_limit.is_none() && filters.authz.is_none() && ext_authz.is_none() {
        return true;
    }
    let Ok(peer) = inbound.peer_addr() else {
        return false;
    };
    if !within_limit(peer, target) {
        return false;
    }
    let custom = ext_authz.filter(|f| f.tcp_rule_matches(&tcp_attrs(peer, target.local, None)));
    if filters.authz.is_none() && custom.is_none() {
        return true;
    }
    // Envoy's network filters decide on the first byte.
    let mut first = [0u8; 1];
    match inbound.peek(&mut first).await {
        Ok(n) if n > 0 => {}
        _ => return false,
    }
    if let Some(f) = custom {
        if !f.check_connection(peer, target.local, None).await {
            return false;
        }
    }
    match &filters.authz {
        Some(authz) => authz.check_tcp(peer.ip(), target.local, None, metrics),
        None => true,
    }
}

/// The local connection limit, then the external authorizer and authorization, for a
/// connection from `peer` whose first bytes were already read (a TLS handshake, whose SNI and
/// client identity `tls` holds).
pub async fn admitted_after_handshake(
    peer: SocketAddr,
    target: &L4Target<'_>,
    tls: Option<&TlsInfo>,
    metrics: &Metrics,
) -> bool {
    if !within_limit(peer, target) {
        return false;
    }
    if let Some(f) = tcp_ext_authz(target.filters) {
        if f.tcp_rule_matches(&tcp_attrs(peer, target.local, tls))
            && !f.check_connection(peer, target.local, tls).await
        {
            return false;
        }
    }
    match &target.filters.authz {
        Some(authz) => authz.check_tcp(peer.ip(), target.local, tls, metrics),
        None => true,
    }
}

/// The ext_authz filter when it asks about connections (a gRPC provider's CUSTOM policies).
fn tcp_ext_authz(filters: &Filters) -> Option<&ExtAuthzFilter> {
    filters.ext_authz.as_ref().filter(|f| f.checks_tcp())
}

/// What CUSTOM rules match a connection by.
fn tcp_attrs<'a>(peer: SocketAddr, local: SocketAddr, tls: Option<&'a TlsInfo>) -> TcpAttrs<'a> {
    TcpAttrs {
        direct_peer: peer.ip(),
        client_ip: peer.ip(),
        dest_ip: local.ip(),
        dest_port: local.port(),
        sni: tls.and_then(|t| t.sni.as_deref()),
        principal: tls
            .and_then(|t| t.peer.as_ref())
            .and_then(|p| p.principal.as_deref()),
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
