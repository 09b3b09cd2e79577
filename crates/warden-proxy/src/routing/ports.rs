//! What each listener port serves: its protocol and side (`ListenerSpec`) and its compiled
//! routes (`PortRoutes`: an HTTP route table, a TCP route, or a TLS port's servers).

use crate::routing::tls_tables::TlsPortRoutes;
use crate::routing::RouteTable;
use crate::upstream::cluster::Cluster;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ListenerProtocol {
    /// HTTP/1.1 and h2c on the same port.
    Http,
    Tcp,
    /// HTTPS and TLS servers: the ClientHello's SNI picks a server, which terminates (then
    /// HTTP or TCP) or passes the bytes through.
    Tls,
    /// A sidecar's outbound or inbound listener: HTTP or TCP per connection, by where it was
    /// headed.
    Captured,
}

/// A port some Gateway server asks for, or one of a sidecar's two listeners.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ListenerSpec {
    pub name: String,
    pub port: u16,
    pub protocol: ListenerProtocol,
    pub side: crate::core::destination::Side,
}

#[derive(Debug)]
pub struct TcpRoute {
    pub name: Arc<str>,
    pub clusters: Vec<(Arc<Cluster>, u32)>,
    pub total_weight: u32,
}

impl TcpRoute {
    pub fn pick_cluster(&self) -> Option<&Arc<Cluster>> {
        if self.clusters.len() <= 1 || self.total_weight == 0 {
            return self.clusters.first().map(|(c, _)| c);
        }
        let mut ticket = fastrand::u32(..self.total_weight);
        for (c, w) in &self.clusters {
            if ticket < *w {
                return Some(c);
            }
            ticket -= w;
        }
        self.clusters.last().map(|(c, _)| c)
    }
}

#[derive(Debug)]
pub enum PortRoutes {
    Http(RouteTable),
    Tcp(Option<TcpRoute>),
    Tls(TlsPortRoutes),
}
