//! TCP routes on a listener: a gateway's `protocol: TCP` servers, TLS passthrough and
//! terminated `protocol: TLS` servers, and a sidecar's TCP destinations. Each connection goes
//! through the L4 policies (`filters::l4`), then the route's relay (`upstream::tcp_relay`).

use crate::core::destination::Side;
use crate::core::istio_metrics::TcpSeries;
use crate::core::tls_info::TlsInfo;
use crate::filters::l4::{self, L4Target};
use crate::pipeline::WorkerCtx;
use crate::routing::ports::{PortRoutes, TcpRoute};
use crate::snapshot::Snapshot;
use crate::upstream::cluster::Cluster;
use crate::upstream::tcp_relay::Relay;
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
    let Ok(local) = inbound.local_addr() else {
        return;
    };
    let target = L4Target {
        port,
        local,
        filters: snapshot.filters_for(Side::Gateway),
    };
    serve(
        inbound,
        route,
        &target,
        None,
        Side::Gateway,
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
    let target = L4Target {
        port,
        local,
        filters: snapshot.filters_for(Side::Gateway),
    };
    serve(
        inbound,
        route,
        &target,
        None,
        Side::Gateway,
        worker,
        connect_timeout,
    )
    .await;
}

/// A connection whose TLS was terminated here (a gateway `protocol: TLS` server, or a
/// sidecar's mTLS inbound), copied to `route`'s upstream. The policies decide at once: the
/// handshake was the first bytes. `dst`: the configured port, the local address as policies
/// see it, and a captured connection's original destination.
#[allow(clippy::too_many_arguments)]
pub async fn proxy_decrypted<S>(
    inbound: S,
    peer: SocketAddr,
    tls: &TlsInfo,
    route: &TcpRoute,
    dst: (u16, SocketAddr, Option<SocketAddr>),
    side: Side,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let snapshot = worker.shared.snapshot.load_full();
    let (port, local, original_dst) = dst;
    let target = L4Target {
        port,
        local,
        filters: snapshot.filters_for(side),
    };
    let metrics = &worker.shared.metrics;
    metrics.tcp_connections.inc();
    if !l4::admitted_after_handshake(peer, &target, Some(tls), metrics).await {
        return;
    }
    let Some(cluster) = route.pick_cluster() else {
        return;
    };
    let principal = tls.peer.as_ref().and_then(|p| p.principal.as_deref());
    Relay {
        route: &route.name,
        cluster,
        original_dst,
        metrics,
        connect_timeout,
        istio: tcp_series(worker, &snapshot, side, cluster, principal, port),
    }
    .run(inbound)
    .await;
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
    let target = L4Target {
        port: dst.port(),
        local: dst,
        filters: snapshot.filters_for(side),
    };
    serve(
        inbound,
        route,
        &target,
        Some(dst),
        side,
        worker,
        connect_timeout,
    )
    .await;
}

async fn serve(
    inbound: TcpStream,
    route: &TcpRoute,
    target: &L4Target<'_>,
    original_dst: Option<SocketAddr>,
    side: Side,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) {
    let shared = &*worker.shared;
    shared.metrics.tcp_connections.inc();
    if !l4::admitted(&inbound, target, &shared.metrics).await {
        return;
    }
    let Some(cluster) = route.pick_cluster() else {
        return;
    };
    let snapshot = shared.snapshot.load();
    let istio = tcp_series(worker, &snapshot, side, cluster, None, target.port);
    drop(snapshot);
    Relay {
        route: &route.name,
        cluster,
        original_dst,
        metrics: &shared.metrics,
        connect_timeout,
        istio,
    }
    .run_tcp(inbound, shared.splicer.get())
    .await;
}

/// Istio's TCP series of a connection: per cluster from a gateway or an outbound side, per
/// peer (`principal` over mTLS) and port on a sidecar's inbound side.
fn tcp_series(
    worker: &WorkerCtx,
    snapshot: &Snapshot,
    side: Side,
    cluster: &Cluster,
    principal: Option<&str>,
    port: u16,
) -> TcpSeries {
    let istio = &worker.shared.metrics.istio;
    if side == Side::Inbound {
        return istio.tcp(&snapshot.inbound_edge(principal, port));
    }
    istio.tcp(
        cluster
            .istio
            .get_or_init(|| snapshot.outbound_edge(Some(cluster))),
    )
}
