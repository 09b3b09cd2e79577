//! The immutable, precompiled view of a config that every request reads through one `ArcSwap`
//! load: listeners, route tables per port, upstream clusters and the pipeline's engines.
//! Built off the hot path; a failed build leaves the running snapshot in place.

use crate::filters::chain::ChainExtensions;
use crate::filters::Filters;
use crate::routing::header_ops::HeaderOps;
use crate::routing::matcher::StringMatcher;
use crate::routing::{
    Fault, Mirror, RequestMatch, RetryPolicy, Route, RouteAction, RouteCounters, RouteTable,
    WeightedCluster,
};
use crate::upstream::cluster::{Cluster, Endpoint, LbPolicy, UpstreamProtocol};
use crate::upstream::h1_pool::ReuseLimits;
use crate::upstream::retry_on::RetryOn;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use warden_config::gateway_matches;
use warden_config::hosts::server_host_admits;
use warden_config::kinds::virtual_service::{HttpFault, HttpRoute, VirtualService};
use warden_config::{parse_duration, ConfigErrors, ConfigSet, Doc, Problem, ServiceEntry};

mod gateway_tls;
mod istio_edges;
mod peer_authn;
mod sidecar;
pub mod telemetry_logging;
mod tracing_plan;
mod upstream_tls;
pub use crate::core::identity::{MeshCredentials, ProxyIdentity, SidecarSettings};
pub use crate::routing::ports::{ListenerProtocol, ListenerSpec, PortRoutes, TcpRoute};
pub use crate::routing::sidecar_tables::{Outbound, PortProtocol, SidecarRoutes, INBOUND_SOURCE};
pub use crate::routing::tls_tables::{SniRoute, TlsAction, TlsPortRoutes, TlsServer};
pub use peer_authn::InboundTls;

#[derive(Debug)]
pub struct Snapshot {
    pub listeners: Vec<ListenerSpec>,
    /// Same order as `listeners`.
    pub ports: Vec<PortRoutes>,
    pub clusters: BTreeMap<String, Arc<Cluster>>,
    pub filters: Filters,
    pub config: ConfigSet,
    pub warnings: Vec<Problem>,
    /// The Gateways this gateway proxy does not serve (`namespace/name`) and why: their
    /// `selector` picks other proxies ([`warden_config::gateway_api::selection`]).
    pub skipped_gateways: Vec<(String, String)>,
    pub identity: ProxyIdentity,
    /// A sidecar's outbound and inbound routes (its `listeners` are its two ports).
    pub sidecar: Option<SidecarRoutes>,
    /// A sidecar's inbound mTLS (PeerAuthentication modes and the mesh server config).
    pub inbound_tls: Option<InboundTls>,
    /// The certificate files the running config read, as they were: a change reloads.
    pub tls_files: warden_tls::file_stamps::FileStamps,
    /// The (no) policies of a sidecar's outbound side: Istio applies them inbound.
    outbound_filters: Filters,
    /// The Telemetry `accessLogging` that applies to this proxy.
    pub access_logging: telemetry_logging::AccessLogPolicy,
    /// Whether a route or a policy stage reads request headers other than `Host`; see
    /// [`Snapshot::reads_request_headers`].
    reads_request_headers: bool,
    /// Istio metrics edges resolved against this snapshot's registry as requests meet them.
    pub istio_edges: crate::core::istio_metrics::EdgeCache,
    /// Distributed tracing (none: nothing of it runs per request).
    pub tracing: Option<Arc<crate::core::traces::TracePlan>>,
}

impl Snapshot {
    /// Whether a request's headers must be in its map before routing: a route matches on
    /// headers, or a policy stage may read them (authz conditions, local limit header
    /// selectors or actions, global limit descriptors). Otherwise a fast-path request keeps
    /// its lines as read (`RequestLines`): routing reads `Host` from them and the upstream
    /// encoder copies them.
    pub fn reads_request_headers(&self) -> bool {
        self.reads_request_headers
    }

    pub fn routes_for_port(&self, port: u16) -> Option<&PortRoutes> {
        let i = self.listeners.iter().position(|l| l.port == port)?;
        self.ports.get(i)
    }

    /// The HTTP routes of a connection: its Gateway port's, or for a sidecar those of the
    /// original destination's port (outbound) or the inbound ones.
    pub fn http_routes(&self, conn: &crate::core::conn::ConnCtx) -> Option<&RouteTable> {
        use crate::core::destination::Side;
        let routes = match (conn.side, &self.sidecar) {
            (Side::Gateway, _) => self.routes_for_port(conn.port),
            (Side::Outbound, Some(s)) => s.outbound_http(conn.port),
            (Side::Inbound, Some(s)) => Some(&s.inbound_http),
            (_, None) => None,
        };
        match routes {
            Some(PortRoutes::Http(t)) => Some(t),
            Some(PortRoutes::Tls(t)) => Some(&t.http),
            _ => None,
        }
    }

    /// The policy stages a connection's requests go through: none on a sidecar's outbound
    /// side (Istio enforces AuthorizationPolicy and rate limits where requests arrive).
    pub fn filters_for(&self, side: crate::core::destination::Side) -> &Filters {
        match side {
            crate::core::destination::Side::Outbound => &self.outbound_filters,
            _ => &self.filters,
        }
    }

    /// Compile a loaded config. `previous` lets engines adopt state (limiter buckets) that must
    /// survive a reload.
    pub fn build(
        loaded: warden_config::Loaded,
        identity: &ProxyIdentity,
        previous: Option<&Snapshot>,
    ) -> Result<Snapshot, ConfigErrors> {
        Snapshot::build_with(loaded, identity, previous, &ChainExtensions::default())
    }

    /// [`Snapshot::build`] with filters added to every chain at their positions.
    pub fn build_with(
        loaded: warden_config::Loaded,
        identity: &ProxyIdentity,
        previous: Option<&Snapshot>,
        extensions: &ChainExtensions,
    ) -> Result<Snapshot, ConfigErrors> {
        let mut loaded = loaded;
        let mut skipped_gateways = Vec::new();
        if identity.sidecar.is_none() {
            // Istio's Gateway selection: by `selector` against this proxy's labels.
            let (ns, labels) = (&identity.namespace, &identity.labels);
            loaded
                .set
                .gateways
                .retain(|g| {
                    match warden_config::gateway_api::selection::selection(g, ns, labels) {
                        Ok(()) => true,
                        Err(why) => {
                            let id = format!(
                                "{}/{}",
                                g.metadata.namespace_or_default(),
                                g.metadata.name
                            );
                            skipped_gateways.push((id, why));
                            false
                        }
                    }
                });
        }
        let mut b = Builder {
            set: &loaded.set,
            identity,
            default_port: None,
            errors: Vec::new(),
            warnings: loaded.warnings.clone(),
            clusters: BTreeMap::new(),
            tls_files: Vec::new(),
        };
        b.warn_unselected(identity);
        let (listeners, sidecar) = match &identity.sidecar {
            None => {
                b.warn_mesh_only();
                (b.listeners(), None)
            }
            Some(settings) => (
                sidecar::listeners(settings),
                Some(SidecarRoutes::build(&mut b, identity, settings)),
            ),
        };
        let inbound_tls = identity.sidecar.as_ref().map(|_| b.inbound_tls());
        let mut ports = Vec::with_capacity(listeners.len());
        for l in &listeners {
            ports.push(match l.protocol {
                ListenerProtocol::Http => PortRoutes::Http(b.http_routes(l.port)),
                ListenerProtocol::Tcp => PortRoutes::Tcp(b.tcp_route(l.port)),
                ListenerProtocol::Tls => PortRoutes::Tls(b.tls_port(l.port)),
                ListenerProtocol::Captured => PortRoutes::Tcp(None),
            });
        }
        let routes = crate::filters::route_sites::RouteCatalog::build(
            &loaded.set,
            &listeners,
            &ports,
            sidecar.as_ref(),
        );
        let mut filters = match Filters::build(
            &loaded.set,
            identity,
            &routes,
            previous.map(|p| &p.filters),
            extensions,
        ) {
            Ok(f) => f,
            Err(mut problems) => {
                b.errors.append(&mut problems);
                Filters::default()
            }
        };
        // An ext_authz provider gets TLS as any upstream: its service's DestinationRule, else
        // auto mTLS to meshed endpoints.
        if let Some((host, port, http2)) = filters
            .ext_authz
            .as_ref()
            .and_then(|f| f.provider_service())
        {
            if let (Ok(Some(tls)), Some(f)) = (
                b.provider_tls(&host, port, http2),
                filters.ext_authz.as_mut(),
            ) {
                f.set_tls(tls.0, tls.1);
            }
        }
        b.warnings.extend(filters.warnings.iter().cloned());
        b.warnings.extend(routes.take_unmatched());
        if filters.authz.is_some() || filters.ext_authz.is_some() {
            b.warnings.extend(crate::filters::authz::tcp_notes(
                &loaded.set,
                identity,
                &listeners,
                &ports,
                sidecar.as_ref(),
            ));
        }
        if !b.errors.is_empty() {
            let warnings = loaded.warnings.iter().chain(&b.warnings).cloned();
            return Err(ConfigErrors::new(b.errors).with_warnings(warnings));
        }
        let clusters = b.clusters;
        let warnings = b.warnings;
        let tls_files =
            warden_tls::file_stamps::FileStamps::of(b.tls_files.iter().map(|p| p.as_path()));
        let outbound_filters = Filters::outbound(extensions);
        let reads_request_headers = ports
            .iter()
            .chain(sidecar.iter().flat_map(SidecarRoutes::http_tables))
            .any(|p| matches!(p, PortRoutes::Http(t) if t.matches_headers()))
            || filters.reads_request_headers()
            || outbound_filters.reads_request_headers();
        let access_logging =
            telemetry_logging::access_log_policy(&loaded.set.telemetry_access_logging, identity);
        let mut warnings = warnings;
        let tracing = tracing_plan::build(&loaded.set, identity, &mut warnings);
        Ok(Snapshot {
            access_logging,
            tracing,
            reads_request_headers,
            listeners,
            ports,
            clusters,
            filters,
            config: loaded.set,
            warnings,
            skipped_gateways,
            identity: identity.clone(),
            sidecar,
            inbound_tls,
            tls_files,
            outbound_filters,
            istio_edges: Default::default(),
        })
    }
}

struct Builder<'a> {
    set: &'a ConfigSet,
    identity: &'a ProxyIdentity,
    /// The service port a sidecar is compiling routes for: the port of destinations that name
    /// none (Istio routes a mesh request to the port it came to).
    default_port: Option<u16>,
    errors: Vec<Problem>,
    warnings: Vec<Problem>,
    clusters: BTreeMap<String, Arc<Cluster>>,
    /// Certificate files read while building (watched for changes).
    tls_files: Vec<std::path::PathBuf>,
}

/// For the servers on `port` of the Gateways `vs` binds to that set `tls.httpsRedirect`: which
/// of its hosts they admit, and the 301 to `https://` their requests get.
#[allow(clippy::type_complexity)]
fn https_redirect_route<'s>(
    set: &'s ConfigSet,
    vs: &'s Doc<VirtualService>,
    port: u16,
) -> Option<(Box<dyn Fn(&str) -> bool + 's>, Arc<Route>)> {
    let ns = vs.metadata.namespace_or_default();
    let servers: Vec<(&str, &warden_config::kinds::gateway::Server)> = set
        .gateways
        .iter()
        .filter(|gw| vs.spec.gateways.iter().any(|r| gateway_matches(ns, r, gw)))
        .flat_map(|gw| {
            gw.spec
                .servers
                .iter()
                .filter(|s| {
                    s.port.number == port && s.tls.as_ref().is_some_and(|t| t.https_redirect)
                })
                .map(move |s| (gw.metadata.namespace_or_default(), s))
        })
        .collect();
    if servers.is_empty() {
        return None;
    }
    let admits = move |host: &str| {
        servers.iter().any(|(gw_ns, s)| {
            s.hosts
                .iter()
                .any(|sh| server_host_admits(sh, gw_ns, ns, host))
        })
    };
    let route = Route {
        name: format!("{ns}/{}/https-redirect", vs.metadata.name).into(),
        matches: Vec::new(),
        action: RouteAction::Redirect(crate::routing::Redirect {
            status: StatusCode::MOVED_PERMANENTLY,
            scheme: Some("https".into()),
            authority: None,
            port: None,
            port_rule: crate::routing::DerivePort::ProtocolDefault,
            uri: None,
            prefix_rewrite: None,
        }),
        request_headers: HeaderOps::default(),
        response_headers: HeaderOps::default(),
        counters: RouteCounters::default(),
        fault: None,
        rewrite: None,
        cors: None,
        envoy_names: Box::new([]),
        source_route: None,
    };
    Some((Box::new(admits), Arc::new(route)))
}

/// The hosts of `vs` admitted by a server on `port` of a Gateway that `vs` references
/// (Istio's binding: `gateways:` plus overlapping, namespace-admitted `hosts`).
fn admitted_hosts<'s>(set: &'s ConfigSet, vs: &'s Doc<VirtualService>, port: u16) -> Vec<&'s str> {
    let ns = vs.metadata.namespace_or_default();
    let servers: Vec<(&str, &warden_config::kinds::gateway::Server)> = set
        .gateways
        .iter()
        .filter(|gw| vs.spec.gateways.iter().any(|r| gateway_matches(ns, r, gw)))
        .flat_map(|gw| {
            gw.spec
                .servers
                .iter()
                .filter(|s| s.port.number == port)
                .map(move |s| (gw.metadata.namespace_or_default(), s))
        })
        .collect();
    vs.spec
        .hosts
        .iter()
        .filter(|h| {
            servers.iter().any(|(gw_ns, server)| {
                server
                    .hosts
                    .iter()
                    .any(|sh| server_host_admits(sh, gw_ns, ns, h))
            })
        })
        .map(|h| h.as_str())
        .collect()
}

impl Builder<'_> {
    fn error<T>(&mut self, doc: &Doc<T>, field: String, message: impl Into<String>) {
        self.errors.push(Problem {
            code: None,
            location: self.set.locate(doc, &field),
            message: message.into(),
        });
    }

    fn warn<T>(&mut self, doc: &Doc<T>, field: String, message: impl Into<String>) {
        self.warnings.push(Problem {
            code: None,
            location: self.set.locate(doc, &field),
            message: message.into(),
        });
    }

    /// Policies in this proxy's namespace (or Istio's root namespace) whose workload selector
    /// wants labels this proxy does not have: inert here, which is rarely what was meant
    /// (Istio's ingress pods carry `istio: ingressgateway` and `app: istio-ingressgateway`).
    fn warn_unselected(&mut self, identity: &ProxyIdentity) {
        const ROOT_NAMESPACE: &str = "istio-system";
        let set = self.set;
        let ours = |ns: &str| ns == identity.namespace || ns == ROOT_NAMESPACE;
        let wanted = |labels: &BTreeMap<String, String>| -> Option<String> {
            let missing = labels
                .iter()
                .any(|(k, v)| identity.labels.get(k) != Some(v));
            missing.then(|| {
                labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
        };
        let have = || {
            let mut l: Vec<String> = identity
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if l.is_empty() {
                l.push("none; set --label".into());
            }
            l.join(", ")
        };
        // A selector that names a workload the config knows (a Pod or WorkloadEntry of that
        // namespace, of any namespace for the root namespace's) is that workload's: a namespace
        // dump holds every pod's policies.
        let carries = |have: &BTreeMap<String, String>, want: &BTreeMap<String, String>| {
            want.iter().all(|(k, v)| have.get(k) == Some(v))
        };
        let in_scope = |policy_ns: &str, workload_ns: &str| {
            policy_ns == ROOT_NAMESPACE || policy_ns == workload_ns
        };
        let another_workloads = |ns: &str, labels: &BTreeMap<String, String>| {
            set.pods.iter().any(|p| {
                in_scope(ns, p.metadata.namespace_or_default())
                    && carries(&p.metadata.labels, labels)
            }) || set.workload_entries.iter().any(|w| {
                in_scope(ns, w.metadata.namespace_or_default()) && carries(&w.spec.labels, labels)
            })
        };
        let unselected = |ns: &str, labels: &BTreeMap<String, String>, what: &str| {
            if !ours(ns) || another_workloads(ns, labels) {
                return None;
            }
            wanted(labels).map(|w| {
                format!(
                    "selects [{w}], which this proxy does not have (its labels: {}); the {what} does not apply here",
                    have()
                )
            })
        };
        for ap in &set.authorization_policies {
            let Some(sel) = &ap.spec.selector else {
                continue;
            };
            let ns = ap.metadata.namespace_or_default();
            if let Some(m) = unselected(ns, &sel.match_labels, "policy") {
                self.warn(ap, "spec.selector.matchLabels".into(), m);
            }
        }
        for ef in &set.envoy_filters {
            let Some(sel) = &ef.spec.workload_selector else {
                continue;
            };
            let ns = ef.metadata.namespace_or_default();
            if let Some(m) = unselected(ns, &sel.labels, "filter") {
                self.warn(ef, "spec.workloadSelector.labels".into(), m);
            }
        }
        // `match.context` for the other role: the patch is not applied here, and says so.
        let role = if identity.sidecar.is_some() {
            "sidecar"
        } else {
            "gateway"
        };
        for ef in &set.envoy_filters {
            for (i, patch) in ef.spec.config_patches.iter().enumerate() {
                let context = patch.matches.as_ref().and_then(|m| m.context.as_deref());
                let other = match (context, identity.sidecar.is_some()) {
                    (Some("GATEWAY"), true) => "gateways",
                    (Some("SIDECAR_INBOUND" | "SIDECAR_OUTBOUND"), false) => "sidecars",
                    _ => continue,
                };
                self.warn(
                    ef,
                    format!("spec.configPatches[{i}].match.context"),
                    format!(
                        "context {} is for {other}; this proxy is a {role}, so the patch does not apply here",
                        context.unwrap_or_default()
                    ),
                );
            }
        }
    }

    /// A gateway does not serve VirtualServices bound to `mesh` only (no `gateways`).
    fn warn_mesh_only(&mut self) {
        for vs in self
            .set
            .virtual_services
            .iter()
            .filter(|v| v.spec.gateways.is_empty())
        {
            self.warn(
                vs,
                "spec.gateways".into(),
                "no gateways: this VirtualService applies to sidecars (mesh) only; a gateway \
                 ignores it",
            );
        }
    }

    fn listeners(&mut self) -> Vec<ListenerSpec> {
        let mut out: Vec<ListenerSpec> = Vec::new();
        for gw in &self.set.gateways {
            for (i, server) in gw.spec.servers.iter().enumerate() {
                let protocol = match server.port.protocol.to_ascii_uppercase().as_str() {
                    "HTTP" | "HTTP2" | "GRPC" => ListenerProtocol::Http,
                    "TCP" => ListenerProtocol::Tcp,
                    "HTTPS" | "TLS" => ListenerProtocol::Tls,
                    other => {
                        self.error(
                            gw,
                            format!("spec.servers[{i}].port.protocol"),
                            format!("protocol {other:?} is not supported (HTTP, HTTP2, TCP)"),
                        );
                        continue;
                    }
                };
                let port = server.port.number;
                if let Some(existing) = out.iter().find(|l| l.port == port) {
                    if existing.protocol != protocol {
                        self.error(
                            gw,
                            format!("spec.servers[{i}].port"),
                            format!(
                                "port {port} is already declared with protocol {:?}",
                                existing.protocol
                            ),
                        );
                    }
                    continue;
                }
                let name = server.port.name.clone().unwrap_or_else(|| {
                    let p = match protocol {
                        ListenerProtocol::Tcp => "tcp",
                        ListenerProtocol::Tls => "https",
                        _ => "http",
                    };
                    format!("{p}_{port}")
                });
                out.push(ListenerSpec {
                    name,
                    port,
                    protocol,
                    side: crate::core::destination::Side::Gateway,
                });
            }
        }
        out
    }

    fn http_routes(&mut self, port: u16) -> RouteTable {
        let mut table = RouteTable::default();
        let set = self.set;
        for vs in &set.virtual_services {
            let hosts = admitted_hosts(set, vs, port);
            if hosts.is_empty() {
                continue;
            }
            let mut routes = Vec::new();
            for (i, r) in vs.spec.http.iter().enumerate() {
                if !route_applies_to_port(r, port) {
                    continue;
                }
                if let Some(route) = self.http_route(vs, i, r) {
                    routes.push(Arc::new(route));
                }
            }
            let redirected = https_redirect_route(set, vs, port);
            for host in hosts {
                match &redirected {
                    // Envoy's `require_tls: ALL` on the server's virtual hosts: every
                    // request is sent to https first.
                    Some((admits, redirect)) if admits(host) => {
                        table.add(host, std::slice::from_ref(redirect));
                    }
                    _ => table.add(host, &routes),
                }
            }
        }
        table
    }

    fn http_route(&mut self, vs: &Doc<VirtualService>, i: usize, r: &HttpRoute) -> Option<Route> {
        let field = |rest: &str| format!("spec.http[{i}]{rest}");
        let name: Arc<str> = format!(
            "{}/{}/{}",
            vs.metadata.namespace_or_default(),
            vs.metadata.name,
            r.name.clone().unwrap_or_else(|| i.to_string())
        )
        .into();
        let errors_before = self.errors.len();
        let mut matches = Vec::new();
        for (j, m) in r.matches.iter().enumerate() {
            let compile = |b: &mut Self, what: &str, sm: &Option<_>, fold: bool| {
                sm.as_ref().and_then(|sm| {
                    StringMatcher::compile(sm, fold)
                        .map_err(|e| b.error(vs, field(&format!(".match[{j}].{what}")), e))
                        .ok()
                })
            };
            let uri = compile(self, "uri", &m.uri, m.ignore_uri_case);
            let method = compile(self, "method", &m.method, false);
            let authority = compile(self, "authority", &m.authority, false);
            let headers =
                self.header_matchers(vs, &field(&format!(".match[{j}].headers")), &m.headers);
            let without_headers = self.header_matchers(
                vs,
                &field(&format!(".match[{j}].withoutHeaders")),
                &m.without_headers,
            );
            let mut query_params = Vec::new();
            for (name, sm) in &m.query_params {
                match StringMatcher::compile(sm, false) {
                    Ok(sm) => query_params.push((name.clone(), sm)),
                    Err(e) => self.error(vs, field(&format!(".match[{j}].queryParams.{name}")), e),
                }
            }
            let scheme = compile(self, "scheme", &m.scheme, false);
            // Who calls is known when compiling: this proxy's own workload.
            let source_ok = m
                .source_labels
                .iter()
                .all(|(k, v)| self.identity.labels.get(k) == Some(v))
                && m.source_namespace
                    .as_deref()
                    .is_none_or(|ns| ns == self.identity.namespace);
            if !source_ok {
                continue;
            }
            matches.push(RequestMatch {
                uri,
                ignore_uri_case: m.ignore_uri_case,
                method,
                authority,
                headers,
                without_headers,
                query_params,
                scheme,
                port: m.port,
            });
        }
        if !r.matches.is_empty() && matches.is_empty() {
            // Every match names another caller (`sourceLabels`/`sourceNamespace`): this proxy
            // never takes the route.
            return None;
        }
        let headers = r.headers.as_ref();
        let request_headers = HeaderOps::compile(headers.and_then(|h| h.request.as_ref()))
            .map_err(|e| self.error(vs, field(".headers.request"), e))
            .unwrap_or_default();
        let response_headers = HeaderOps::compile(headers.and_then(|h| h.response.as_ref()))
            .map_err(|e| self.error(vs, field(".headers.response"), e))
            .unwrap_or_default();
        let action = if let Some(dr) = &r.direct_response {
            self.direct_response(vs, i, dr)
        } else if let Some(rd) = &r.redirect {
            Some(RouteAction::Redirect(redirect(rd)))
        } else if !r.route.is_empty() {
            self.forward(vs, i, r)
        } else {
            self.error(vs, field(""), "route needs route[] or directResponse");
            None
        };
        let fault = r.fault.as_ref().map(|f| Fault {
            delay: f.delay.as_ref().and_then(|d| {
                let t = parse_duration(d.fixed_delay.as_deref()?).ok()?;
                Some((t, HttpFault::share(d.percentage.as_ref(), d.percent)))
            }),
            abort: f.abort.as_ref().and_then(|a| {
                let status = StatusCode::from_u16(a.http_status?).ok()?;
                Some((status, HttpFault::share(a.percentage.as_ref(), None)))
            }),
        });
        if self.errors.len() > errors_before {
            return None;
        }
        // Istio makes one Envoy route per match, named `http[].name` (+ `.match name`).
        let http_name = r.name.as_deref().unwrap_or("");
        let mut envoy_names: Vec<Box<str>> = r
            .matches
            .iter()
            .map(|m| match m.name.as_deref() {
                Some(n) => format!("{http_name}.{n}").into(),
                None => http_name.into(),
            })
            .collect();
        if envoy_names.is_empty() {
            envoy_names.push(http_name.into());
        }
        envoy_names.dedup();
        Some(Route {
            name,
            envoy_names: envoy_names.into(),
            source_route: r.source_route.as_deref().map(Arc::from),
            matches,
            action: action?,
            request_headers,
            response_headers,
            counters: RouteCounters::default(),
            fault,
            rewrite: self.rewrite(vs, i, r.rewrite.as_ref()),
            cors: self.cors(vs, i, r.cors_policy.as_ref()),
        })
    }

    fn cors(
        &mut self,
        vs: &Doc<VirtualService>,
        i: usize,
        policy: Option<&warden_config::kinds::virtual_service::CorsPolicy>,
    ) -> Option<Box<crate::routing::cors::Cors>> {
        match crate::routing::cors::Cors::compile(policy?) {
            Ok(c) => Some(Box::new(c)),
            Err(e) => {
                self.error(vs, format!("spec.http[{i}].corsPolicy"), e);
                None
            }
        }
    }

    /// `mirror` (with `mirrorPercentage`, else the deprecated `mirrorPercent`, else 100) or
    /// `mirrors[]`, each resolved to its cluster like a route destination.
    fn mirrors(
        &mut self,
        vs: &Doc<VirtualService>,
        i: usize,
        r: &HttpRoute,
    ) -> Option<Box<[Mirror]>> {
        let mut out = Vec::new();
        if let Some(dest) = &r.mirror {
            let share = match (&r.mirror_percentage, r.mirror_percent) {
                (Some(p), _) => p.value,
                (None, Some(p)) => f64::from(p),
                (None, None) => 100.0,
            };
            let cluster = self.cluster(vs, format!("spec.http[{i}].mirror"), dest)?;
            out.push(Mirror { cluster, share });
        }
        for (j, m) in r.mirrors.iter().enumerate() {
            let at = format!("spec.http[{i}].mirrors[{j}].destination");
            let cluster = self.cluster(vs, at, &m.destination)?;
            let share = m.percentage.as_ref().map_or(100.0, |p| p.value);
            out.push(Mirror { cluster, share });
        }
        Some(out.into_boxed_slice())
    }

    fn rewrite(
        &mut self,
        vs: &Doc<VirtualService>,
        i: usize,
        rw: Option<&warden_config::kinds::virtual_service::HttpRewrite>,
    ) -> Option<Box<crate::routing::Rewrite>> {
        let rw = rw?;
        let authority = match rw.authority.as_deref().map(HeaderValue::from_str) {
            None => None,
            Some(Ok(v)) => Some(v),
            Some(Err(_)) => {
                self.error(
                    vs,
                    format!("spec.http[{i}].rewrite.authority"),
                    "not a valid Host",
                );
                return None;
            }
        };
        let regex = match &rw.uri_regex_rewrite {
            None => None,
            Some(rr) => match regex::Regex::new(&rr.pattern) {
                // Envoy writes groups as \1; the regex crate as ${1}.
                Ok(re) => Some((re, envoy_substitution(&rr.rewrite))),
                Err(e) => {
                    self.error(
                        vs,
                        format!("spec.http[{i}].rewrite.uriRegexRewrite.match"),
                        format!("invalid regex: {e}"),
                    );
                    return None;
                }
            },
        };
        Some(Box::new(crate::routing::Rewrite {
            uri: rw.uri.as_deref().map(Into::into),
            authority,
            regex,
        }))
    }

    fn direct_response(
        &mut self,
        vs: &Doc<VirtualService>,
        i: usize,
        dr: &warden_config::kinds::virtual_service::DirectResponse,
    ) -> Option<RouteAction> {
        let Ok(status) = StatusCode::from_u16(dr.status) else {
            self.error(
                vs,
                format!("spec.http[{i}].directResponse.status"),
                format!("invalid HTTP status {}", dr.status),
            );
            return None;
        };
        let body = match dr.body.as_ref() {
            None => Bytes::new(),
            Some(b) => match (&b.string, &b.bytes) {
                (Some(s), None) => Bytes::from(s.clone()),
                (None, Some(encoded)) => match decode_base64(encoded) {
                    Some(raw) => Bytes::from(raw),
                    None => {
                        self.error(
                            vs,
                            format!("spec.http[{i}].directResponse.body.bytes"),
                            "invalid base64",
                        );
                        return None;
                    }
                },
                _ => {
                    self.error(
                        vs,
                        format!("spec.http[{i}].directResponse.body"),
                        "exactly one of string or bytes must be set",
                    );
                    return None;
                }
            },
        };
        let content_type = (!body.is_empty()).then(|| HeaderValue::from_static("text/plain"));
        Some(RouteAction::Direct {
            status,
            body,
            content_type,
        })
    }

    fn header_matchers(
        &mut self,
        vs: &Doc<VirtualService>,
        field: &str,
        map: &BTreeMap<String, warden_config::kinds::virtual_service::StringMatch>,
    ) -> Vec<(http::HeaderName, StringMatcher)> {
        let mut out = Vec::new();
        for (name, sm) in map {
            let Ok(hname) = http::HeaderName::from_bytes(name.as_bytes()) else {
                self.error(vs, format!("{field}.{name}"), "invalid header name");
                continue;
            };
            match StringMatcher::compile(sm, false) {
                Ok(sm) => out.push((hname, sm)),
                Err(e) => self.error(vs, format!("{field}.{name}"), e),
            }
        }
        out
    }

    fn duration(
        &mut self,
        vs: &Doc<VirtualService>,
        field: String,
        text: Option<&str>,
    ) -> Option<Duration> {
        let text = text?;
        match parse_duration(text) {
            Ok(d) if d.is_zero() => None,
            Ok(d) => Some(d),
            Err(e) => {
                self.error(vs, field, e);
                None
            }
        }
    }

    fn forward(
        &mut self,
        vs: &Doc<VirtualService>,
        i: usize,
        r: &HttpRoute,
    ) -> Option<RouteAction> {
        let mut clusters = Vec::new();
        for (j, dest) in r.route.iter().enumerate() {
            let f = |rest: &str| format!("spec.http[{i}].route[{j}]{rest}");
            let cluster = self.cluster(vs, f(".destination"), &dest.destination)?;
            let h = dest.headers.as_ref();
            let request_headers = HeaderOps::compile(h.and_then(|h| h.request.as_ref()))
                .map_err(|e| self.error(vs, f(".headers.request"), e))
                .ok()?;
            let response_headers = HeaderOps::compile(h.and_then(|h| h.response.as_ref()))
                .map_err(|e| self.error(vs, f(".headers.response"), e))
                .ok()?;
            clusters.push(WeightedCluster {
                cluster,
                // A single destination without weight takes everything (Istio default 100).
                weight: dest
                    .weight
                    .unwrap_or(if r.route.len() == 1 { 100 } else { 0 }),
                request_headers,
                response_headers,
            });
        }
        let total_weight = clusters.iter().map(|c| c.weight).sum();
        let timeout = self.duration(vs, format!("spec.http[{i}].timeout"), r.timeout.as_deref());
        let retries = match &r.retries {
            Some(rt) => RetryPolicy {
                attempts: rt.attempts,
                per_try_timeout: self.duration(
                    vs,
                    format!("spec.http[{i}].retries.perTryTimeout"),
                    rt.per_try_timeout.as_deref(),
                ),
                // An empty `retryOn` keeps Istio's default conditions.
                on: match rt.retry_on.as_deref().map(str::trim) {
                    None | Some("") => RetryOn::default(),
                    Some(list) => match RetryOn::parse(list) {
                        Ok(on) => on,
                        Err(e) => {
                            self.error(vs, format!("spec.http[{i}].retries.retryOn"), e);
                            RetryOn::default()
                        }
                    },
                },
            },
            // Istio's default retry policy: 2 retries on connect failure / 503.
            None => RetryPolicy {
                attempts: 2,
                per_try_timeout: None,
                on: RetryOn::default(),
            },
        };
        let mirrors = self.mirrors(vs, i, r)?;
        Some(RouteAction::Forward {
            clusters,
            total_weight,
            timeout,
            retries,
            mirrors,
        })
    }

    fn tcp_route(&mut self, port: u16) -> Option<TcpRoute> {
        let set = self.set;
        let bound: Vec<&Doc<VirtualService>> = set
            .virtual_services
            .iter()
            .filter(|vs| !admitted_hosts(set, vs, port).is_empty())
            .collect();
        self.first_tcp_route(&bound, port)
    }

    /// The first `tcp[]` route of `virtual_services` (in order) that applies to `port`, its
    /// clusters built; `None` also when one of them cannot be built (the error is recorded).
    fn first_tcp_route(
        &mut self,
        virtual_services: &[&Doc<VirtualService>],
        port: u16,
    ) -> Option<TcpRoute> {
        for vs in virtual_services {
            for (i, r) in vs.spec.tcp.iter().enumerate() {
                let applies = r.matches.is_empty()
                    || r.matches.iter().any(|m| m.port.is_none_or(|p| p == port));
                if !applies {
                    continue;
                }
                let mut clusters = Vec::new();
                for (j, dest) in r.route.iter().enumerate() {
                    let cluster = self.cluster(
                        vs,
                        format!("spec.tcp[{i}].route[{j}].destination"),
                        &dest.destination,
                    )?;
                    let weight = dest
                        .weight
                        .unwrap_or(if r.route.len() == 1 { 100 } else { 0 });
                    clusters.push((cluster, weight));
                }
                let total_weight = clusters.iter().map(|(_, w)| w).sum();
                return Some(TcpRoute {
                    name: format!(
                        "{}/{}/tcp{}",
                        vs.metadata.namespace_or_default(),
                        vs.metadata.name,
                        i
                    )
                    .into(),
                    clusters,
                    total_weight,
                });
            }
        }
        None
    }

    /// The cluster for a destination, built once per (host, port, subset) from its service.
    fn cluster(
        &mut self,
        vs: &Doc<VirtualService>,
        field: String,
        dest: &warden_config::kinds::virtual_service::Destination,
    ) -> Option<Arc<Cluster>> {
        let host = dest.host.as_str();
        let port = dest.port.as_ref().map(|p| p.number);
        let set = self.set;
        let ns = vs.metadata.namespace_or_default();
        // A destination nothing defines (host, subset, port) loaded with Istio's analyzer
        // warning (IST0101/IST0112); as in Envoy, only its route fails: 503, no upstream.
        if set.dangling_destination(vs, &field).is_some() {
            let subset = dest.subset.as_deref().unwrap_or("");
            return Some(self.missing_cluster(host, port.unwrap_or(80), subset));
        }
        let Some(se) = set.service_in(host, ns) else {
            self.warn(
                vs,
                field.clone(),
                format!("no ServiceEntry for host {host:?}; requests will get 503"),
            );
            let port = port.unwrap_or(80);
            return Some(self.empty_cluster(host, port));
        };
        let svc_port = match port.or(self.default_port) {
            Some(p) => se.spec.ports.iter().find(|sp| sp.number == p),
            None if se.spec.ports.len() == 1 => se.spec.ports.first(),
            None => {
                self.error(
                    vs,
                    format!("{field}.port"),
                    format!("{host} has several ports; destination.port.number is required"),
                );
                return None;
            }
        };
        let Some(svc_port) = svc_port else {
            self.error(
                vs,
                format!("{field}.port"),
                format!("ServiceEntry {} has no port {:?}", se.metadata.name, port),
            );
            return None;
        };
        let host = warden_config::mesh_registry::expand_host(host, ns);
        self.subset_cluster(se, &host, svc_port, dest.subset.as_deref())
    }

    /// The cluster `outbound|PORT||HOST` of a registry service's port, built once.
    fn service_cluster(
        &mut self,
        se: &Doc<ServiceEntry>,
        host: &str,
        svc_port: &warden_config::kinds::service_entry::ServicePort,
    ) -> Option<Arc<Cluster>> {
        self.subset_cluster(se, host, svc_port, None)
    }

    /// `outbound|PORT|SUBSET|HOST`: the endpoints with the subset's labels, under the subset's
    /// policy (validation made sure the subset exists).
    fn subset_cluster(
        &mut self,
        se: &Doc<ServiceEntry>,
        host: &str,
        svc_port: &warden_config::kinds::service_entry::ServicePort,
        subset: Option<&str>,
    ) -> Option<Arc<Cluster>> {
        let name = format!(
            "outbound|{}|{}|{}",
            svc_port.number,
            subset.unwrap_or(""),
            host
        );
        if let Some(c) = self.clusters.get(&name) {
            return Some(c.clone());
        }
        let cluster = Arc::new(self.build_cluster(se, name.clone(), host, svc_port, subset)?);
        self.clusters.insert(name, cluster.clone());
        Some(cluster)
    }

    /// `outbound|PORT|SUBSET|HOST` for a destination nothing defines: requests get 503 `NC`.
    fn missing_cluster(&mut self, host: &str, port: u16, subset: &str) -> Arc<Cluster> {
        let name = format!("outbound|{port}|{subset}|{host}");
        self.clusters
            .entry(name.clone())
            .or_insert_with(|| Arc::new(Cluster::missing(name)))
            .clone()
    }

    fn empty_cluster(&mut self, host: &str, port: u16) -> Arc<Cluster> {
        let name = format!("outbound|{port}||{host}");
        self.clusters
            .entry(name.clone())
            .or_insert_with(|| {
                Arc::new(Cluster::new(
                    name,
                    Vec::new(),
                    LbPolicy::RoundRobin,
                    UpstreamProtocol::Http1,
                    u32::MAX,
                ))
            })
            .clone()
    }

    fn build_cluster(
        &mut self,
        se: &Doc<ServiceEntry>,
        name: String,
        host: &str,
        svc_port: &warden_config::kinds::service_entry::ServicePort,
        subset: Option<&str>,
    ) -> Option<Cluster> {
        let dr = self.set.destination_rule_for_host(host);
        let subset = subset.and_then(|name| dr.and_then(|d| d.spec.subset(name)));
        // Istio's default NONE: no endpoints, the connection's original destination.
        let resolution = se.spec.resolution.as_deref().unwrap_or("NONE");
        let default_port = svc_port.target_port.unwrap_or(svc_port.number);
        let port_name = svc_port.name.as_deref().unwrap_or("");
        let mut endpoints = Vec::new();
        for (k, ep) in se.spec.endpoints.iter().enumerate() {
            let in_subset = subset.is_none_or(|s| {
                s.labels
                    .iter()
                    .all(|(key, v)| ep.labels.get(key) == Some(v))
            });
            if !in_subset {
                continue;
            }
            let port = ep.ports.get(port_name).copied().unwrap_or(default_port);
            let text = match ep.address.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
                Ok(ip) => format!("{ip}:{port}"),
                Err(_) if resolution == "DNS" => format!("{}:{port}", ep.address),
                Err(_) => {
                    self.error(
                        se,
                        format!("spec.endpoints[{k}].address"),
                        format!(
                            "{:?} is not an IP address (resolution {resolution})",
                            ep.address
                        ),
                    );
                    return None;
                }
            };
            match text.parse() {
                Ok(a) => endpoints.push(Endpoint::new(a)),
                Err(_) => {
                    self.error(
                        se,
                        format!("spec.endpoints[{k}].address"),
                        "invalid address",
                    );
                    return None;
                }
            }
        }
        if endpoints.is_empty() && resolution == "DNS" {
            match format!("{host}:{default_port}").parse() {
                Ok(a) => endpoints.push(Endpoint::new(a)),
                Err(_) => self.error(se, "spec.hosts".into(), format!("invalid host {host:?}")),
            }
        }
        let policy = dr.and_then(|d| d.spec.policy_for(subset));
        let policy = policy.as_ref();
        let lb = match policy
            .and_then(|p| p.load_balancer.as_ref())
            .and_then(|l| l.simple.as_deref())
        {
            // Istio's default.
            None => LbPolicy::LeastRequest,
            Some(s) => match LbPolicy::parse(s) {
                Ok(lb) => lb,
                Err(e) => {
                    if let Some(d) = dr {
                        self.error(d, "spec.trafficPolicy.loadBalancer.simple".into(), e);
                    }
                    return None;
                }
            },
        };
        let pool = policy.and_then(|p| p.connection_pool.as_ref());
        let http = pool.and_then(|p| p.http.as_ref());
        let max_requests = http.and_then(|h| h.http2_max_requests).unwrap_or(u32::MAX);
        let max_conns = pool
            .and_then(|p| p.tcp.as_ref())
            .and_then(|t| t.max_connections)
            .map(|c| c.saturating_add(http.and_then(|h| h.http1_max_pending_requests).unwrap_or(0)))
            .unwrap_or(u32::MAX);
        let idle_timeout = match http.and_then(|h| h.idle_timeout.as_deref()) {
            None => None,
            Some(text) => match parse_duration(text) {
                Ok(d) => Some(d).filter(|d| !d.is_zero()),
                Err(e) => {
                    if let Some(d) = dr {
                        self.error(
                            d,
                            "spec.trafficPolicy.connectionPool.http.idleTimeout".into(),
                            e,
                        );
                    }
                    return None;
                }
            },
        };
        let reuse = ReuseLimits {
            // 0 is unlimited, as in Istio.
            max_requests: http
                .and_then(|h| h.max_requests_per_connection)
                .and_then(NonZeroU32::new),
            idle_timeout,
        };
        let upgrade = http.and_then(|h| h.h2_upgrade_policy.as_deref()) == Some("UPGRADE");
        let h2_port = matches!(
            svc_port
                .protocol
                .as_deref()
                .map(|p| p.to_ascii_uppercase())
                .as_deref(),
            Some("HTTP2") | Some("GRPC")
        );
        let protocol = if upgrade || h2_port {
            UpstreamProtocol::Http2
        } else {
            UpstreamProtocol::Http1
        };
        let http2 = protocol == UpstreamProtocol::Http2;
        let meshed = !endpoints.is_empty() && upstream_tls::meshed(&se.spec, subset);
        let tls = match (dr, policy.and_then(|p| p.tls_for_port(svc_port.number))) {
            (Some(dr), Some(tls)) => self.upstream_tls(dr, tls, host, http2).ok()?,
            _ if meshed && self.auto_mtls_applies() => self
                .upstream_tls(se, &upstream_tls::auto_mtls(), host, http2)
                .ok()?,
            _ => None,
        };
        let mut cluster = Cluster::new(name, endpoints, lb, protocol, max_requests.min(max_conns))
            .with_reuse(reuse)
            .with_tls(tls);
        cluster.original_dst = resolution == "NONE";
        if let Some(od) = policy.and_then(|p| p.outlier_detection.as_ref()) {
            match crate::upstream::outlier::OutlierPolicy::from_config(od) {
                Ok(p) => cluster = cluster.with_outlier(p),
                Err(e) => {
                    if let Some(d) = dr {
                        self.error(d, "spec.trafficPolicy.outlierDetection".into(), e);
                    }
                    return None;
                }
            }
        }
        Some(cluster)
    }
}

/// A VirtualService `redirect` (validated by warden-config).
fn redirect(r: &warden_config::kinds::virtual_service::HttpRedirect) -> crate::routing::Redirect {
    use crate::routing::DerivePort;
    crate::routing::Redirect {
        status: r
            .redirect_code
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::MOVED_PERMANENTLY),
        scheme: r.scheme.as_deref().map(Into::into),
        authority: r.authority.as_deref().map(Into::into),
        port: r.port,
        port_rule: match r.derive_port.as_deref() {
            Some("FROM_PROTOCOL_DEFAULT") => DerivePort::ProtocolDefault,
            Some("FROM_REQUEST_PORT") => DerivePort::RequestPort,
            _ => DerivePort::Keep,
        },
        uri: r.uri.as_deref().map(Into::into),
        prefix_rewrite: r
            .prefix_rewrite
            .as_ref()
            .map(|(prefix, with)| (prefix.as_str().into(), with.as_str().into())),
    }
}

/// Envoy's `\N` group references as the regex crate's `${N}` (a literal `$` escaped).
fn envoy_substitution(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek().is_some_and(|d| d.is_ascii_digit()) => {
                out.push_str("${");
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    out.push(d);
                    chars.next();
                }
                out.push('}');
            }
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out
}

fn route_applies_to_port(r: &HttpRoute, port: u16) -> bool {
    r.matches.is_empty() || r.matches.iter().any(|m| m.port.is_none_or(|p| p == port))
}

/// Standard base64 (with or without padding), as Istio's `bytes` fields use.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let clean: Vec<u8> = text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut acc = 0u32;
        for &c in chunk {
            acc = (acc << 6) | value(c)?;
        }
        match chunk.len() {
            4 => out.extend_from_slice(&acc.to_be_bytes()[1..]),
            3 => out.extend_from_slice(&(acc << 6).to_be_bytes()[1..3]),
            2 => out.push((acc >> 4) as u8),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_warns_about_mesh_only_virtual_services_a_sidecar_serves_them() {
        let yaml = "apiVersion: networking.istio.io/v1\nkind: VirtualService\n\
                    metadata: {name: vs}\nspec:\n  hosts: [a.example]\n  \
                    http: [{directResponse: {status: 200}}]\n";
        let loaded = || warden_config::load_str("t.yaml", yaml).unwrap();
        let gateway = Snapshot::build(loaded(), &ProxyIdentity::default(), None).unwrap();
        assert!(
            gateway
                .warnings
                .iter()
                .any(|w| w.location.field == "spec.gateways"
                    && w.message.contains("sidecars (mesh) only")),
            "{:?}",
            gateway.warnings
        );
        let sidecar = ProxyIdentity {
            sidecar: Some(SidecarSettings::default()),
            ..ProxyIdentity::default()
        };
        let sidecar = Snapshot::build(loaded(), &sidecar, None).unwrap();
        assert!(sidecar.warnings.is_empty(), "{:?}", sidecar.warnings);
    }

    #[test]
    fn envoy_group_references_become_regex_crate_ones() {
        assert_eq!(envoy_substitution("/v2/\\1"), "/v2/${1}");
        assert_eq!(envoy_substitution("\\12x$"), "${12}x$$");
    }

    #[test]
    fn a_policy_selecting_other_labels_is_named_in_a_warning() {
        let yaml = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n\
                    metadata: {name: p, namespace: istio-system}\nspec:\n  \
                    selector: {matchLabels: {app: istio-ingressgateway}}\n  action: DENY\n  \
                    rules: [{from: [{source: {ipBlocks: [1.2.3.4]}}]}]\n";
        let loaded = warden_config::load_str("t.yaml", yaml).unwrap();
        let identity = ProxyIdentity {
            labels: [("istio".to_string(), "ingressgateway".to_string())].into(),
            ..ProxyIdentity::default()
        };
        let s = Snapshot::build(loaded, &identity, None).unwrap();
        assert!(
            s.warnings
                .iter()
                .any(|w| w.message.contains("selects [app=istio-ingressgateway]")
                    && w.message.contains("istio=ingressgateway")),
            "{:?}",
            s.warnings
        );
    }

    /// In a namespace dump every pod's policies are there: one selecting another known pod is
    /// that pod's, and says nothing.
    #[test]
    fn a_policy_for_another_known_pod_is_not_warned_about() {
        let yaml = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n\
                    metadata: {name: p, namespace: default}\nspec:\n  \
                    selector: {matchLabels: {app: ratings}}\n  action: DENY\n  \
                    rules: [{from: [{source: {ipBlocks: [1.2.3.4]}}]}]\n---\n\
                    apiVersion: v1\nkind: Pod\nmetadata: {name: ratings-1, namespace: default, \
                    labels: {app: ratings, version: v1}}\nspec: {containers: [{name: r}]}\n\
                    status: {podIP: 10.0.0.9}\n";
        let loaded = warden_config::load_str("t.yaml", yaml).unwrap();
        let identity = ProxyIdentity {
            namespace: "default".into(),
            labels: [("app".to_string(), "reviews".to_string())].into(),
            sidecar: Some(SidecarSettings::default()),
            ..ProxyIdentity::default()
        };
        let s = Snapshot::build(loaded, &identity, None).unwrap();
        assert!(
            !s.warnings.iter().any(|w| w.message.contains("selects [")),
            "{:?}",
            s.warnings
        );
        // The root namespace's policies select workloads of every namespace.
        let root = yaml.replace(
            "name: p, namespace: default",
            "name: p, namespace: istio-system",
        );
        let loaded = warden_config::load_str("t.yaml", &root).unwrap();
        let s = Snapshot::build(loaded, &identity, None).unwrap();
        assert!(
            !s.warnings.iter().any(|w| w.message.contains("selects [")),
            "{:?}",
            s.warnings
        );
    }

    /// A gateway with a TCP server says what a `methods` ALLOW rule does to its connections
    /// (istio.io authz-tcp); with HTTP servers only there is nothing to say.
    #[test]
    fn http_only_policy_fields_are_explained_for_tcp_servers_only() {
        let gateway = |servers: &str, tcp: &str| {
            format!(
                "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\n\
                 spec:\n  servers:\n{servers}---\n\
                 apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: echo}}\n\
                 spec:\n  hosts: [echo.example]\n  resolution: STATIC\n  \
                 ports: [{{number: 9000, name: tcp, protocol: TCP}}]\n  \
                 endpoints: [{{address: 127.0.0.1}}]\n---\n\
                 apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs}}\n\
                 spec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  \
                 http: [{{directResponse: {{status: 200}}}}]\n{tcp}---\n\
                 apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n\
                 metadata: {{name: get-only}}\nspec:\n  action: ALLOW\n  \
                 rules: [{{to: [{{operation: {{methods: [GET]}}}}]}}]\n"
            )
        };
        let http = "  - {port: {number: 8080, name: http, protocol: HTTP}, hosts: [\"*\"]}\n";
        let tcp = "  - {port: {number: 31400, name: tcp, protocol: TCP}, hosts: [\"*\"]}\n";
        let tcp_route =
            "  tcp: [{route: [{destination: {host: echo.example, port: {number: 9000}}}]}]\n";
        let notes = |yaml: String| -> Vec<String> {
            let loaded = warden_config::load_str("t.yaml", &yaml).unwrap();
            let identity = ProxyIdentity {
                namespace: "default".into(),
                ..ProxyIdentity::default()
            };
            let s = Snapshot::build(loaded, &identity, None).unwrap();
            s.warnings
                .iter()
                .filter(|w| w.message.contains("HTTP-only"))
                .map(ToString::to_string)
                .collect()
        };
        let with_tcp = notes(gateway(&format!("{http}{tcp}"), tcp_route));
        assert_eq!(with_tcp.len(), 1, "{with_tcp:?}");
        assert!(
            with_tcp[0].contains(
                "AuthorizationPolicy/get-only), field spec.rules[0]: uses HTTP-only fields \
                 (methods): on TCP connections (port 31400) this ALLOW rule never matches"
            ),
            "{with_tcp:?}"
        );
        assert_eq!(notes(gateway(http, "")), Vec::<String>::new());
    }

    #[test]
    fn base64_decodes() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode_base64("aGk=").unwrap(), b"hi");
        assert_eq!(decode_base64("").unwrap(), b"");
        assert!(decode_base64("a$==").is_none());
    }
}
