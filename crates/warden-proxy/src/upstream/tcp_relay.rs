//! A TCP connection's upstream leg: pick the cluster's endpoint (or the original destination),
//! connect, originate TLS when the cluster says so, and copy both ways; EOF on one side is
//! forwarded as a write shutdown (half-close) to the other. With `--accel`'s splicer and no TLS
//! upstream, the copy lets same-node apps' sends skip the sidecars (`tcp_splice`).

use crate::core::istio_metrics::TcpSeries;
use crate::core::metrics::Metrics;
use crate::upstream::cluster::Cluster;
use crate::upstream::connect::{connect, ConnectError};
use crate::upstream::tls_origination::UpstreamTls;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Where one relay goes and what it reports to.
pub struct Relay<'a> {
    /// The route's name, for logs.
    pub route: &'a str,
    pub cluster: &'a Cluster,
    /// A captured connection's original destination (ORIGINAL_DST clusters).
    pub original_dst: Option<SocketAddr>,
    pub metrics: &'a Metrics,
    pub connect_timeout: Duration,
    /// Istio's TCP series of this connection's edge.
    pub istio: TcpSeries,
}

/// The connected upstream.
struct Upstream {
    host: String,
    port: u16,
    tls: Option<Arc<UpstreamTls>>,
}

impl Relay<'_> {
    /// Connect and copy both ways.
    pub async fn run<S>(&self, mut inbound: S)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        self.istio.opened();
        if let Some((outbound, upstream)) = self.open().await {
            self.copy(&mut inbound, outbound, &upstream).await;
        }
        self.istio.closed();
    }

    /// [`Relay::run`] for a plain TCP downstream, spliced when `splicer` is given and the
    /// upstream is not TLS.
    pub async fn run_tcp(&self, mut inbound: TcpStream, splicer: Option<&warden_accel::Splicer>) {
        self.istio.opened();
        let Some((outbound, upstream)) = self.open().await else {
            self.istio.closed();
            return;
        };
        if let (None, Some(splicer)) = (&upstream.tls, splicer) {
            // Spliced bytes are not counted here (the BPF counters have them).
            if let Err(e) = crate::upstream::tcp_splice::copy(inbound, outbound, splicer).await {
                tracing::debug!(error = %e, route = self.route, "tcp proxy connection ended with error");
            }
            self.istio.closed();
            return;
        }
        self.copy(&mut inbound, outbound, &upstream).await;
        self.istio.closed();
    }

    /// Istio's byte counters: `received` from the client, `sent` to it.
    fn count(&self, copied: std::io::Result<(u64, u64)>) {
        match copied {
            Ok((received, sent)) => self.istio.bytes(received, sent),
            Err(e) => {
                tracing::debug!(error = %e, route = self.route, "tcp proxy connection ended with error");
            }
        }
    }

    async fn open(&self) -> Option<(TcpStream, Upstream)> {
        let cluster = self.cluster;
        let (host, port) = match (cluster.original_dst, self.original_dst) {
            (true, Some(dst)) => (dst.ip().to_string(), dst.port()),
            (true, None) => return None,
            (false, _) => {
                let Ok((_, lease)) = cluster.pick(None) else {
                    self.metrics.upstream_error("no_healthy");
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
        match connect(&host, port, cluster.source, self.connect_timeout).await {
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
                self.metrics.upstream_error("connect");
                None
            }
            Err(ConnectError::Timeout) => {
                self.metrics.upstream_error("timeout");
                None
            }
        }
    }

    /// Copy both ways, originating TLS first when the cluster says so.
    async fn copy<S>(&self, inbound: &mut S, mut outbound: TcpStream, upstream: &Upstream)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (host, port) = (upstream.host.as_str(), upstream.port);
        if let Some(tls) = &upstream.tls {
            let mut outbound = match tls.connect(host, outbound).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(error = %e, upstream = host, port, "upstream TLS handshake failed");
                    self.metrics.upstream_error("tls");
                    return;
                }
            };
            self.count(tokio::io::copy_bidirectional(inbound, &mut outbound).await);
            return;
        }
        self.count(tokio::io::copy_bidirectional(inbound, &mut outbound).await);
    }
}
