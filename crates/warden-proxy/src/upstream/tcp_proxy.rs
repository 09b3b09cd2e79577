//! `protocol: TCP` servers: pick the VirtualService tcp route's cluster, connect, and copy both
//! ways; EOF on one side is forwarded as a write shutdown (half-close) to the other.
//! Before that, the L4 policies: the local connection limit on accept, then authorization on
//! the first byte (Envoy's network RBAC); a refused connection is closed with nothing written.

use crate::control::metrics::Metrics;
use crate::control::snapshot::PortRoutes;
use crate::control::state::WorkerCtx;
use crate::pipeline::Filters;
use std::time::Duration;
use tokio::net::TcpStream;

pub async fn proxy(
    mut inbound: TcpStream,
    port: u16,
    worker: &WorkerCtx,
    connect_timeout: Duration,
) {
    let shared = &*worker.shared;
    shared.metrics.tcp_connections.inc();
    let snapshot = shared.snapshot.load_full();
    if !admitted(&inbound, port, &snapshot.filters, &shared.metrics).await {
        return;
    }
    let Some(PortRoutes::Tcp(Some(route))) = snapshot.routes_for_port(port) else {
        tracing::debug!(port, "no tcp route; closing");
        return;
    };
    let Some(cluster) = route.pick_cluster() else {
        return;
    };
    let Ok((_, lease)) = cluster.pick(None) else {
        shared.metrics.upstream_error("no_healthy");
        return;
    };
    let target = lease.endpoint().authority.as_str();
    let outbound = match tokio::time::timeout(connect_timeout, TcpStream::connect(target)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, upstream = target, "tcp upstream connect failed");
            shared.metrics.upstream_error("connect");
            return;
        }
        Err(_) => {
            shared.metrics.upstream_error("timeout");
            return;
        }
    };
    let _ = outbound.set_nodelay(true);
    let mut outbound = outbound;
    if let Err(e) = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await {
        tracing::debug!(error = %e, route = &*route.name, "tcp proxy connection ended with error");
    }
}

/// The L4 policy stages. False: drop the connection without writing.
async fn admitted(inbound: &TcpStream, port: u16, filters: &Filters, metrics: &Metrics) -> bool {
    if filters.local_rate_limit.is_none() && filters.authz.is_none() {
        return true;
    }
    let (Ok(peer), Ok(local)) = (inbound.peer_addr(), inbound.local_addr()) else {
        return false;
    };
    if let Some(limiter) = &filters.local_rate_limit {
        if !limiter.admit_connection(port, peer.ip()) {
            tracing::debug!(%peer, port, "connection over the local limit; closing");
            return false;
        }
    }
    if let Some(authz) = &filters.authz {
        // Envoy's network RBAC decides on the first byte (ONE_TIME_ON_FIRST_BYTE).
        let mut first = [0u8; 1];
        match inbound.peek(&mut first).await {
            Ok(n) if n > 0 => {}
            _ => return false,
        }
        return authz.check_tcp(peer.ip(), local, metrics);
    }
    true
}
