//! TCP routes: pick the route's cluster, connect, and copy both ways; EOF on one side is
//! forwarded as a write shutdown (half-close) to the other. Before that, the L4 policies: the
//! local connection limit on accept, then authorization on the first byte (Envoy's network
//! RBAC); a refused connection is closed with nothing written. Serves a gateway's
//! `protocol: TCP` servers and a sidecar's TCP destinations.

use crate::control::metrics::Metrics;
use crate::control::snapshot::{PortRoutes, TcpRoute};
use crate::control::state::WorkerCtx;
use crate::downstream::destination::Side;
use crate::downstream::tls_accept::TlsInfo;
use crate::pipeline::Filters;
use crate::upstream::connect::{connect, ConnectError};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;

/// A gateway TCP server's connection on `port`.
pub async fn proxy(inbound: TcpStream, port: u16, worker: &WorkerCtx, connect_timeout: Duration) {
    let snapshot = worker.shared.snapshot.load_full();
    let Some(PortRoutes::Tcp(Some(route))) = snapshot.routes_for_port(port) else {
        worker.shared.metrics.tcp_connections.inc();
        tracing::debug!(port, "no tcp route; closing");
        return;
    };
    let local = match inbound.local_addr() {
        Ok(l) => l,
        Err(_) => return,
    };
    serve(
        inbound,
        route,
        Target {
            port,
            local,
            original_dst: None,
            filters: snapshot.filters_for(Side::Gateway),
        },
        worker,
        connect_timeout,
    )
    .await;
}

/// A gateway TLS server's connection on `port`: PASSTHROUGH (`inbound` still holds the
/// client's ClientHello, forwarded untouched) on the SNI route `route`.
pub async fn proxy_passthrough(
    inbound: TcpStream,
    route: &TcpRoute,
    port: u16,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) {
    let snapshot = worker.shared.snapshot.load_full();
    let Ok(local) = inbound.local_addr() else {
        return;
    };
    let target = Target {
        port,
        local,
        original_dst: None,
        filters: snapshot.filters_for(Side::Gateway),
    };
    serve(inbound, route, target, worker, connect_timeout).await;
}

/// A connection whose TLS was terminated here (a gateway `protocol: TLS` server, or a
/// sidecar's mTLS inbound), copied to `route`'s upstream. The policies decide at once: the
/// handshake was the first bytes.
#[allow(clippy::too_many_arguments)]
pub async fn proxy_decrypted<S>(
    inbound: S,
    peer: SocketAddr,
    tls: &TlsInfo,
    route: &TcpRoute,
    target_dst: (u16, SocketAddr, Option<SocketAddr>),
    side: Side,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let snapshot = worker.shared.snapshot.load_full();
    let (port, local, original_dst) = target_dst;
    let target = Target {
        port,
        local,
        original_dst,
        filters: snapshot.filters_for(side),
    };
    let shared = &*worker.shared;
    shared.metrics.tcp_connections.inc();
    if !decide(peer, &target, Some(tls), &shared.metrics) {
        return;
    }
    relay(inbound, route, &target, worker, connect_timeout).await;
}

/// A sidecar's TCP connection headed to `dst`, on `route`. Inbound ones go through the
/// policies (as `dst`'s port); outbound ones have none.
pub async fn proxy_route(
    inbound: TcpStream,
    route: &TcpRoute,
    dst: SocketAddr,
    side: Side,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) {
    let snapshot = worker.shared.snapshot.load_full();
    serve(
        inbound,
        route,
        Target {
            port: dst.port(),
            local: dst,
            original_dst: Some(dst),
            filters: snapshot.filters_for(side),
        },
        worker,
        connect_timeout,
    )
    .await;
}

/// Where a connection was headed, as the policies see it.
struct Target<'a> {
    port: u16,
    local: SocketAddr,
    original_dst: Option<SocketAddr>,
    filters: &'a Filters,
}

async fn serve(
    inbound: TcpStream,
    route: &TcpRoute,
    target: Target<'_>,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) {
    let shared = &*worker.shared;
    shared.metrics.tcp_connections.inc();
    if !admitted(&inbound, &target, &shared.metrics).await {
        return;
    }
    relay_tcp(inbound, route, &target, worker, connect_timeout).await;
}

/// Pick the route's endpoint, connect and copy both ways.
async fn relay<S>(
    mut inbound: S,
    route: &TcpRoute,
    target: &Target<'_>,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Some((outbound, upstream)) = open_upstream(route, target, worker, connect_timeout).await
    else {
        return;
    };
    copy_to(&mut inbound, outbound, &upstream, route, worker).await;
}

/// [`relay`] for a plain TCP downstream: with `--accel`'s splicer and no TLS upstream, the
/// copy lets same-node apps' sends skip the sidecars (`tcp_splice`).
async fn relay_tcp(
    mut inbound: TcpStream,
    route: &TcpRoute,
    target: &Target<'_>,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) {
    let Some((outbound, upstream)) = open_upstream(route, target, worker, connect_timeout).await
    else {
        return;
    };
    if let (None, Some(splicer)) = (&upstream.tls, worker.shared.splicer.get()) {
        if let Err(e) = crate::upstream::tcp_splice::copy(inbound, outbound, splicer).await {
            tracing::debug!(error = %e, route = &*route.name, "tcp proxy connection ended with error");
        }
        return;
    }
    copy_to(&mut inbound, outbound, &upstream, route, worker).await;
}

/// The connected upstream of a TCP route.
struct Upstream {
    host: String,
    port: u16,
    tls: Option<std::sync::Arc<crate::upstream::tls_origination::UpstreamTls>>,
}

async fn open_upstream(
    route: &TcpRoute,
    target: &Target<'_>,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) -> Option<(TcpStream, Upstream)> {
    let shared = &*worker.shared;
    let cluster = route.pick_cluster()?;
    let (host, port) = match (cluster.original_dst, target.original_dst) {
        (true, Some(dst)) => (dst.ip().to_string(), dst.port()),
        (true, None) => return None,
        (false, _) => {
            let Ok((_, lease)) = cluster.pick(None) else {
                shared.metrics.upstream_error("no_healthy");
                return None;
            };
            let authority = lease.endpoint().authority.clone();
            drop(lease);
            (
                authority.host().to_owned(),
                authority.port_u16().unwrap_or(80),
            )
        }
    };
    match connect(&host, port, cluster.source, connect_timeout).await {
        Ok(s) => Some((
            s,
            Upstream {
                host,
                port,
                tls: cluster.tls.clone(),
            },
        )),
        Err(ConnectError::Io(e)) => {
            tracing::debug!(error = %e, upstream = host, port, "tcp upstream connect failed");
            shared.metrics.upstream_error("connect");
            None
        }
        Err(ConnectError::Timeout) => {
            shared.metrics.upstream_error("timeout");
            None
        }
    }
}

/// Copy both ways, originating TLS first when the cluster says so.
async fn copy_to<S>(
    inbound: &mut S,
    mut outbound: TcpStream,
    upstream: &Upstream,
    route: &TcpRoute,
    worker: &WorkerCtx,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (host, port) = (upstream.host.as_str(), upstream.port);
    if let Some(tls) = &upstream.tls {
        let mut outbound = match tls.connect(host, outbound).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, upstream = host, port, "upstream TLS handshake failed");
                worker.shared.metrics.upstream_error("tls");
                return;
            }
        };
        if let Err(e) = tokio::io::copy_bidirectional(inbound, &mut outbound).await {
            tracing::debug!(error = %e, route = &*route.name, "tcp proxy connection ended with error");
        }
        return;
    }
    if let Err(e) = tokio::io::copy_bidirectional(inbound, &mut outbound).await {
        tracing::debug!(error = %e, route = &*route.name, "tcp proxy connection ended with error");
    }
}

/// The L4 policy stages. False: drop the connection without writing.
async fn admitted(inbound: &TcpStream, target: &Target<'_>, metrics: &Metrics) -> bool {
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
        // Envoy's network RBAC decides on the first byte (ONE_TIME_ON_FIRST_BYTE).
        let mut first = [0u8; 1];
        match inbound.peek(&mut first).await {
            Ok(n) if n > 0 => {}
            _ => return false,
        }
        return authz.check_tcp(peer.ip(), target.local, None, metrics);
    }
    true
}

fn within_limit(peer: SocketAddr, target: &Target<'_>) -> bool {
    match &target.filters.local_rate_limit {
        Some(limiter) if !limiter.admit_connection(target.port, peer.ip()) => {
            tracing::debug!(%peer, port = target.port, "connection over the local limit; closing");
            false
        }
        _ => true,
    }
}

/// The local connection limit, then authorization, for a connection from `peer` whose first
/// bytes were already read (a TLS handshake, whose SNI and client identity `tls` holds).
fn decide(peer: SocketAddr, target: &Target<'_>, tls: Option<&TlsInfo>, metrics: &Metrics) -> bool {
    if !within_limit(peer, target) {
        return false;
    }
    match &target.filters.authz {
        Some(authz) => authz.check_tcp(peer.ip(), target.local, tls, metrics),
        None => true,
    }
}
