//! `protocol: TCP` servers: pick the VirtualService tcp route's cluster, connect, and copy both
//! ways; EOF on one side is forwarded as a write shutdown (half-close) to the other.

use crate::snapshot::PortRoutes;
use crate::state::WorkerCtx;
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
