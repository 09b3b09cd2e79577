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
use crate::core::destination::Side;
use crate::core::identity::SidecarSettings;
use crate::routing::header_ops::HeaderOps;
use crate::routing::sidecar_tables::{PortProtocol, SidecarRoutes, INBOUND_SOURCE};
use crate::routing::{RetryPolicy, Route, RouteAction, RouteCounters, RouteTable, WeightedCluster};
use crate::upstream::cluster::Cluster;
use crate::upstream::retry_on::RetryOn;
use bytes::Bytes;
use http::StatusCode;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use warden_config::hosts::host_matches;
use warden_config::kinds::service_entry::{ServiceEntry, ServicePort};
use warden_config::kinds::sidecar::OutboundMode;
use warden_config::mesh_registry::expand_host;
use warden_config::{Doc, GatewayRef, VirtualService};

impl SidecarRoutes {
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
                source_route: None,
            },
        });
        for table in outbound_http.values_mut() {
            table.add("*", std::slice::from_ref(&catch_all));
        }
        let mut inbound_cluster =
            Cluster::original_dst("InboundPassthroughCluster".into(), Some(INBOUND_SOURCE));
        // gRPC in, gRPC out: Istio's inbound clusters use the downstream protocol.
        inbound_cluster.protocol = crate::upstream::cluster::UpstreamProtocol::Downstream;
        let inbound_cluster = Arc::new(inbound_cluster);
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

/// A sidecar's two listeners.
pub(super) fn listeners(settings: &SidecarSettings) -> Vec<super::ListenerSpec> {
    vec![
        super::ListenerSpec {
            name: "virtualOutbound".into(),
            port: settings.outbound_port,
            protocol: super::ListenerProtocol::Captured,
            side: Side::Outbound,
        },
        super::ListenerSpec {
            name: "virtualInbound".into(),
            port: settings.inbound_port,
            protocol: super::ListenerProtocol::Captured,
            side: Side::Inbound,
        },
    ]
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
        source_route: None,
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
