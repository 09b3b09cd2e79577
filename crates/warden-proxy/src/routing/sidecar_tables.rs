//! A sidecar's compiled route tables: outbound by original destination (VIP:port, then the
//! port's HTTP virtual hosts), inbound by port, and how each port's connections are served.

use crate::routing::ports::{PortRoutes, TcpRoute};
use crate::routing::RouteTable;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use warden_config::kinds::service_entry::ServicePort;
use warden_config::kinds::sidecar::OutboundMode;

/// Istio's inbound passthrough source address, which capture rules return early for.
pub const INBOUND_SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6));

/// How a port's connections are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum PortProtocol {
    Http,
    Tcp,
    /// Not declared: HTTP if the first bytes are an HTTP/1 request line or the HTTP/2 preface.
    Detect,
}

impl PortProtocol {
    /// Istio's reading of a ServiceEntry port protocol (TLS and HTTPS are opaque bytes to a
    /// sidecar that does not originate TLS).
    pub fn of(port: &ServicePort) -> Self {
        match port
            .protocol
            .as_deref()
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            Some("HTTP") | Some("HTTP2") | Some("GRPC") | Some("GRPC-WEB") => PortProtocol::Http,
            Some(_) => PortProtocol::Tcp,
            None => PortProtocol::Detect,
        }
    }

    pub fn merge(a: Option<Self>, b: Self) -> Self {
        match a {
            None => b,
            Some(a) if a == b => a,
            Some(_) => PortProtocol::Detect,
        }
    }
}

/// A sidecar's compiled outbound and inbound routes.
#[derive(Debug)]
pub struct SidecarRoutes {
    /// Virtual hosts of every HTTP service port, by port number (with the catch-all of the
    /// outbound policy).
    pub outbound_http: HashMap<u16, PortRoutes>,
    /// The route of each service VIP:port that carries TCP (declared, or detected as not HTTP).
    pub outbound_tcp: HashMap<SocketAddr, PortRoutes>,
    /// How each known VIP:port is served.
    pub outbound_dst: HashMap<SocketAddr, PortProtocol>,
    pub outbound_mode: OutboundMode,
    /// Unknown destinations under ALLOW_ANY (a TCP route to ORIGINAL_DST).
    pub passthrough: PortRoutes,
    pub inbound_http: PortRoutes,
    pub inbound_tcp: PortRoutes,
    /// Protocols the registry declares for this pod's ports.
    pub inbound_ports: HashMap<u16, PortProtocol>,
    pub detection_timeout: Option<Duration>,
}

/// How an outbound connection is served.
pub enum Outbound<'a> {
    Http,
    Tcp(&'a TcpRoute),
    /// HTTP if it looks like HTTP, else this TCP route.
    Detect(&'a TcpRoute),
    /// REGISTRY_ONLY and nothing known there: close.
    Refuse,
}

impl SidecarRoutes {
    /// Every HTTP route table, for [`super::Snapshot::reads_request_headers`].
    pub fn http_tables(&self) -> impl Iterator<Item = &PortRoutes> {
        self.outbound_http
            .values()
            .chain(std::iter::once(&self.inbound_http))
    }

    /// For `warden check`: the HTTP tables by port, the TCP routes by VIP:port, the protocols
    /// of this pod's declared ports.
    pub fn outbound_http_tables(&self) -> impl Iterator<Item = (u16, &RouteTable)> {
        self.outbound_http.iter().filter_map(|(p, r)| match r {
            PortRoutes::Http(t) => Some((*p, t)),
            PortRoutes::Tcp(_) | PortRoutes::Tls(_) => None,
        })
    }

    pub fn outbound_tcp_routes(&self) -> impl Iterator<Item = (SocketAddr, &TcpRoute)> {
        self.outbound_tcp.iter().filter_map(|(d, r)| match r {
            PortRoutes::Tcp(Some(t)) => Some((*d, t)),
            _ => None,
        })
    }

    pub fn inbound_protocols(&self) -> impl Iterator<Item = (u16, PortProtocol)> + '_ {
        self.inbound_ports.iter().map(|(p, proto)| (*p, *proto))
    }

    pub fn outbound_http(&self, port: u16) -> Option<&PortRoutes> {
        self.outbound_http.get(&port)
    }

    /// How a connection to `dst` is served: its service's protocol when `dst` is a known
    /// VIP:port; else HTTP when some service serves HTTP on that port (Istio's 0.0.0.0:PORT
    /// listener, which routes by Host), else the outbound policy as TCP.
    pub fn outbound(&self, dst: SocketAddr) -> Outbound<'_> {
        fn route(r: Option<&PortRoutes>) -> Option<&TcpRoute> {
            match r {
                Some(PortRoutes::Tcp(Some(t))) => Some(t),
                _ => None,
            }
        }
        let fallback = route(Some(&self.passthrough));
        match self.outbound_dst.get(&dst) {
            Some(PortProtocol::Http) => Outbound::Http,
            Some(PortProtocol::Tcp) => match route(self.outbound_tcp.get(&dst)) {
                Some(t) => Outbound::Tcp(t),
                None => Outbound::Refuse,
            },
            Some(PortProtocol::Detect) => match route(self.outbound_tcp.get(&dst)) {
                Some(t) => Outbound::Detect(t),
                None => Outbound::Http,
            },
            // Requests that match no virtual host get the policy's catch-all there.
            None if self.outbound_http.contains_key(&dst.port()) => {
                match (self.outbound_mode, fallback) {
                    (OutboundMode::AllowAny, Some(t)) => Outbound::Detect(t),
                    _ => Outbound::Http,
                }
            }
            None => match (self.outbound_mode, fallback) {
                (OutboundMode::AllowAny, Some(t)) => Outbound::Tcp(t),
                _ => Outbound::Refuse,
            },
        }
    }

    /// The protocol of this pod's port `port`.
    pub fn inbound(&self, port: u16) -> PortProtocol {
        self.inbound_ports
            .get(&port)
            .copied()
            .unwrap_or(PortProtocol::Detect)
    }

    pub fn inbound_tcp_route(&self) -> Option<&TcpRoute> {
        match &self.inbound_tcp {
            PortRoutes::Tcp(Some(t)) => Some(t),
            _ => None,
        }
    }
}
