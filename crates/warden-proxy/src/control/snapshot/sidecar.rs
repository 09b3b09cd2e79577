//! A sidecar's routes, compiled from the service registry (ServiceEntries, and Kubernetes
//! Services made into them by warden-config) and the VirtualServices bound to `mesh`.
//!
//! Outbound, as Istio's outbound listeners: a captured connection's original destination
//! (VIP:port) names a service port; HTTP ports route by `Host` over the virtual hosts of every
//! service on that port (mesh VirtualServices first, else straight to the service), TCP ports
//! by the VIP:port's `tcp[]` route or to the service. What matches nothing follows
//! `outboundTrafficPolicy`: ALLOW_ANY passes through to the original destination, REGISTRY_ONLY
//! answers 502 (HTTP) or closes (TCP).
//!
//! Inbound: every port goes to the app on the original destination, connecting from
//! 127.0.0.6 (Istio's inbound passthrough); HTTP or TCP as the registry declares the port that
//! targets this pod, else detected from the first bytes.

use super::{Builder, PortRoutes, TcpRoute};
use crate::downstream::destination::Side;
use crate::pipeline::header_ops::HeaderOps;
use crate::pipeline::routing::{
    RetryPolicy, Route, RouteAction, RouteCounters, RouteTable, WeightedCluster,
};
use crate::upstream::cluster::Cluster;
use crate::upstream::retry_on::RetryOn;
use bytes::Bytes;
use http::StatusCode;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use warden_config::hosts::host_matches;
use warden_config::kinds::service_entry::{ServiceEntry, ServicePort};
use warden_config::kinds::sidecar::OutboundMode;
use warden_config::mesh_registry::expand_host;
use warden_config::{Doc, GatewayRef, VirtualService};

/// Istio's inbound passthrough source address, which capture rules return early for.
pub const INBOUND_SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6));

/// What `warden proxy --mode sidecar` was started with.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SidecarSettings {
    pub outbound_port: u16,
    pub inbound_port: u16,
    /// The mesh config's `outboundTrafficPolicy.mode` (a Sidecar resource for this workload
    /// overrides it).
    pub outbound_mode: OutboundMode,
    /// How long to wait for a client's first bytes on a port whose protocol is not declared
    /// (Istio's `protocolDetectionTimeout`); then it is TCP. `None` waits as long as it takes.
    pub detection_timeout: Option<Duration>,
}

impl Default for SidecarSettings {
    fn default() -> Self {
        SidecarSettings {
            outbound_port: 15001,
            inbound_port: 15006,
            outbound_mode: OutboundMode::AllowAny,
            detection_timeout: None,
        }
    }
}

impl SidecarSettings {
    pub(super) fn listeners(&self) -> Vec<super::ListenerSpec> {
        vec![
            super::ListenerSpec {
                name: "virtualOutbound".into(),
                port: self.outbound_port,
                protocol: super::ListenerProtocol::Captured,
                side: Side::Outbound,
            },
            super::ListenerSpec {
                name: "virtualInbound".into(),
                port: self.inbound_port,
                protocol: super::ListenerProtocol::Captured,
                side: Side::Inbound,
            },
        ]
    }
}

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
    fn of(port: &ServicePort) -> Self {
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

    fn merge(a: Option<Self>, b: Self) -> Self {
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
    outbound_http: HashMap<u16, PortRoutes>,
    /// The route of each service VIP:port that carries TCP (declared, or detected as not HTTP).
    outbound_tcp: HashMap<SocketAddr, PortRoutes>,
    /// How each known VIP:port is served.
    outbound_dst: HashMap<SocketAddr, PortProtocol>,
    pub outbound_mode: OutboundMode,
    /// Unknown destinations under ALLOW_ANY (a TCP route to ORIGINAL_DST).
    passthrough: PortRoutes,
    pub inbound_http: PortRoutes,
    pub inbound_tcp: PortRoutes,
    /// Protocols the registry declares for this pod's ports.
    inbound_ports: HashMap<u16, PortProtocol>,
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
    pub(super) fn http_tables(&self) -> impl Iterator<Item = &PortRoutes> {
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

    pub(super) fn build(
        b: &mut Builder<'_>,
        identity: &super::ProxyIdentity,
        settings: &SidecarSettings,
    ) -> SidecarRoutes {
        let set = b.set;
        let outbound_mode = b.outbound_mode(identity, settings);
        let passthrough = Arc::new(Cluster::original_dst("PassthroughCluster".into(), None));
        let mut outbound_http: HashMap<u16, RouteTable> = HashMap::new();
        let mut outbound_tcp = HashMap::new();
        let mut outbound_dst = HashMap::new();
        let mesh_vs: Vec<&Doc<VirtualService>> = set
            .virtual_services
            .iter()
            .filter(|vs| bound_to_mesh(vs))
            .collect();
        for se in &set.service_entries {
            let vips = vips(se);
            for port in &se.spec.ports {
                let protocol = PortProtocol::of(port);
                for host in &se.spec.hosts {
                    let vs_for_host: Vec<&Doc<VirtualService>> = mesh_vs
                        .iter()
                        .copied()
                        .filter(|vs| {
                            let ns = vs.metadata.namespace_or_default();
                            vs.spec
                                .hosts
                                .iter()
                                .any(|h| host_matches(&expand_host(h, ns), host))
                        })
                        .collect();
                    if protocol != PortProtocol::Tcp {
                        let routes = b.mesh_http_routes(se, host, port, &vs_for_host);
                        let table = outbound_http.entry(port.number).or_default();
                        for domain in domains(se, host, &vips) {
                            table.add(&domain, &routes);
                        }
                    }
                    if protocol != PortProtocol::Http {
                        for ip in &vips {
                            if let Some(r) = b.mesh_tcp_route(se, host, port, &vs_for_host) {
                                let dst = SocketAddr::new(*ip, port.number);
                                outbound_tcp.insert(dst, PortRoutes::Tcp(Some(r)));
                            }
                        }
                    }
                }
                for ip in &vips {
                    outbound_dst.insert(SocketAddr::new(*ip, port.number), protocol);
                }
            }
        }
        // What no virtual host matches, on every HTTP port.
        let catch_all = Arc::new(match outbound_mode {
            OutboundMode::AllowAny => forward_route("allow_any", passthrough.clone(), 0),
            OutboundMode::RegistryOnly => Route {
                name: "block_all".into(),
                matches: Vec::new(),
                action: RouteAction::Direct {
                    status: StatusCode::BAD_GATEWAY,
                    body: Bytes::new(),
                    content_type: None,
                },
                request_headers: HeaderOps::default(),
                response_headers: HeaderOps::default(),
                counters: RouteCounters::default(),
                fault: None,
                rewrite: None,
                cors: None,
                envoy_names: Box::new(["block_all".into()]),
            },
        });
        for table in outbound_http.values_mut() {
            table.add("*", std::slice::from_ref(&catch_all));
        }
        let inbound_cluster = Arc::new(Cluster::original_dst(
            "InboundPassthroughCluster".into(),
            Some(INBOUND_SOURCE),
        ));
        let mut inbound_table = RouteTable::default();
        // Envoy's inbound routes have no retry policy.
        inbound_table.add(
            "*",
            &[Arc::new(forward_route(
                "inbound",
                inbound_cluster.clone(),
                0,
            ))],
        );
        SidecarRoutes {
            outbound_http: outbound_http
                .into_iter()
                .map(|(p, t)| (p, PortRoutes::Http(t)))
                .collect(),
            outbound_tcp,
            outbound_dst,
            outbound_mode,
            passthrough: PortRoutes::Tcp(Some(tcp_to("PassthroughCluster", passthrough))),
            inbound_http: PortRoutes::Http(inbound_table),
            inbound_tcp: PortRoutes::Tcp(Some(tcp_to("inbound|tcp", inbound_cluster))),
            inbound_ports: inbound_ports(set, identity),
            detection_timeout: settings.detection_timeout,
        }
    }
}

/// `gateways` empty (Istio's default is `mesh`) or naming `mesh`.
fn bound_to_mesh(vs: &Doc<VirtualService>) -> bool {
    let ns = vs.metadata.namespace_or_default();
    vs.spec.gateways.is_empty()
        || vs
            .spec
            .gateways
            .iter()
            .any(|g| matches!(GatewayRef::parse(ns, g), GatewayRef::Mesh))
}

/// A service's virtual IPs (single addresses; CIDR ranges other than a host are not VIPs).
fn vips(se: &Doc<ServiceEntry>) -> Vec<IpAddr> {
    se.spec
        .addresses
        .iter()
        .filter_map(|a| {
            a.parse::<IpAddr>().ok().or_else(|| {
                let net: ipnet::IpNet = a.parse().ok()?;
                (net.prefix_len() == net.max_prefix_len()).then(|| net.addr())
            })
        })
        .collect()
}

/// The names a request to `host` may carry in `Host`: the host, a Kubernetes service's short
/// forms (`name`, `name.ns`, `name.ns.svc`), and its VIPs.
fn domains(se: &Doc<ServiceEntry>, host: &str, vips: &[IpAddr]) -> Vec<String> {
    let mut out = vec![host.to_ascii_lowercase()];
    if se.kind == "Service" {
        if let Some(short) = host.strip_suffix(".cluster.local") {
            let mut parts = short.rsplitn(3, '.');
            let _svc = parts.next();
            if let (Some(ns), Some(name)) = (parts.next(), parts.next()) {
                out.push(name.to_owned());
                out.push(format!("{name}.{ns}"));
                out.push(short.to_owned());
            }
        }
    }
    out.extend(vips.iter().map(|ip| match ip {
        IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    }));
    out
}

fn forward_route(name: &str, cluster: Arc<Cluster>, retries: u32) -> Route {
    Route {
        name: name.into(),
        matches: Vec::new(),
        action: RouteAction::Forward {
            clusters: vec![WeightedCluster {
                cluster,
                weight: 100,
                request_headers: HeaderOps::default(),
                response_headers: HeaderOps::default(),
            }],
            total_weight: 100,
            timeout: None,
            retries: RetryPolicy {
                attempts: retries,
                per_try_timeout: None,
                on: RetryOn::default(),
            },
            mirrors: Box::default(),
        },
        request_headers: HeaderOps::default(),
        response_headers: HeaderOps::default(),
        counters: RouteCounters::default(),
        fault: None,
        rewrite: None,
        cors: None,
        // Istio's generated routes: `default` (inbound, a service's own cluster), `allow_any`.
        envoy_names: Box::new([if name == "inbound" || name.contains(':') {
            "default".into()
        } else {
            name.into()
        }]),
    }
}

fn tcp_to(name: &str, cluster: Arc<Cluster>) -> TcpRoute {
    TcpRoute {
        name: name.into(),
        clusters: vec![(cluster, 100)],
        total_weight: 100,
    }
}

/// The protocols the registry declares for this pod's ports: the service ports whose
/// endpoints include one of the pod's addresses, by the port they reach on it.
fn inbound_ports(
    set: &warden_config::ConfigSet,
    identity: &super::ProxyIdentity,
) -> HashMap<u16, PortProtocol> {
    let mut out: HashMap<u16, PortProtocol> = HashMap::new();
    for se in &set.service_entries {
        for ep in &se.spec.endpoints {
            let Ok(ip) = ep.address.parse::<IpAddr>() else {
                continue;
            };
            if !identity.pod_ips.contains(&ip) {
                continue;
            }
            for port in &se.spec.ports {
                let target = ep.port_for(port);
                let merged = PortProtocol::merge(out.get(&target).copied(), PortProtocol::of(port));
                out.insert(target, merged);
            }
        }
    }
    out
}

impl Builder<'_> {
    /// The outbound policy: a Sidecar resource selecting this workload (in its namespace),
    /// else the mesh config's.
    fn outbound_mode(
        &mut self,
        identity: &super::ProxyIdentity,
        settings: &SidecarSettings,
    ) -> OutboundMode {
        let set = self.set;
        let applies = |sc: &&Doc<warden_config::kinds::sidecar::Sidecar>| {
            sc.metadata.namespace_or_default() == identity.namespace
                && sc.spec.workload_selector.as_ref().is_none_or(|sel| {
                    sel.labels
                        .iter()
                        .all(|(k, v)| identity.labels.get(k) == Some(v))
                })
        };
        // A selector is more specific than a namespace-wide Sidecar.
        let chosen = set
            .sidecars
            .iter()
            .filter(applies)
            .max_by_key(|sc| sc.spec.workload_selector.is_some());
        let Some(sc) = chosen else {
            return settings.outbound_mode;
        };
        for (field, present) in [
            ("spec.egress", sc.spec.egress.is_some()),
            ("spec.ingress", sc.spec.ingress.is_some()),
        ] {
            if present {
                self.error(
                    sc,
                    field.into(),
                    "not supported yet: it would change which services this sidecar reaches \
                     or how its ports are served",
                );
            }
        }
        match sc
            .spec
            .outbound_traffic_policy
            .as_ref()
            .and_then(|p| p.mode.as_deref())
        {
            None => settings.outbound_mode,
            Some(mode) => match OutboundMode::parse(mode) {
                Ok(m) => m,
                Err(e) => {
                    self.error(sc, "spec.outboundTrafficPolicy.mode".into(), e);
                    settings.outbound_mode
                }
            },
        }
    }

    /// The routes of `host`'s virtual host on `port`: the http routes of the mesh
    /// VirtualServices for it (in load order) that apply to the port, else one route to the
    /// service itself.
    fn mesh_http_routes(
        &mut self,
        se: &Doc<ServiceEntry>,
        host: &str,
        port: &ServicePort,
        vs_for_host: &[&Doc<VirtualService>],
    ) -> Vec<Arc<Route>> {
        let mut routes = Vec::new();
        self.default_port = Some(port.number);
        for vs in vs_for_host {
            for (i, r) in vs.spec.http.iter().enumerate() {
                if !super::route_applies_to_port(r, port.number) {
                    continue;
                }
                if let Some(route) = self.http_route(vs, i, r) {
                    routes.push(Arc::new(route));
                }
            }
        }
        self.default_port = None;
        if routes.is_empty() {
            if let Some(cluster) = self.service_cluster(se, host, port) {
                let name = format!("{}:{}", host, port.number);
                // Istio's default retry policy: 2 retries on connect failure / 503.
                routes.push(Arc::new(forward_route(&name, cluster, 2)));
            }
        }
        routes
    }

    /// The TCP route of `host`'s port: the first matching `tcp[]` route of a mesh
    /// VirtualService for it, else to the service.
    fn mesh_tcp_route(
        &mut self,
        se: &Doc<ServiceEntry>,
        host: &str,
        port: &ServicePort,
        vs_for_host: &[&Doc<VirtualService>],
    ) -> Option<TcpRoute> {
        self.default_port = Some(port.number);
        let route = self.first_tcp_route(vs_for_host, port.number);
        self.default_port = None;
        if route.is_some() {
            return route;
        }
        let cluster = self.service_cluster(se, host, port)?;
        Some(tcp_to(
            &format!("outbound|{}||{}", port.number, host),
            cluster,
        ))
    }
}
