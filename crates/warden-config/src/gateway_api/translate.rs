//! Gateway API objects turned into the Istio model the proxy serves, as Istio's own
//! controller does: each Gateway becomes an Istio `Gateway` (one server per served listener),
//! and the routes attached to it become one `VirtualService` per (Gateway, port, hostname)
//! whose HTTP routes are sorted by the Gateway API's match precedence (`precedence`), so
//! Istio's first-match order gives the spec's answer. TCP and TLS routes become `tcp` and
//! `tls` routes of one VirtualService per (Gateway, port). Statuses are computed on the way
//! (`status`), and every problem is located at the Gateway API document it comes from.

use super::attach::{self, RouteInfo, GROUP};
use super::kinds::*;
use super::listener_tls;
use super::precedence::{self, MatchRank};
use super::reference_grant::{self, From, To};
use super::status::{
    self, Condition, ListenerFindings, ObjectStatus, RefProblem, Refusal, SectionStatus,
};
use super::GatewayApiSet;
use crate::document::{Doc, Metadata};
use crate::error::Problem;
use crate::kinds::gateway::{Gateway, Port, Server, ServerTls};
use crate::kinds::virtual_service::{
    Destination, FaultAbort, HeaderOperations, Headers, HttpFault, HttpMatchRequest,
    HttpMirrorPolicy, HttpRedirect, HttpRewrite, HttpRoute, HttpRouteDestination,
    L4MatchAttributes, Percent, PortSelector, RegexRewrite, Retries, RouteDestination, StringMatch,
    TcpRoute, TlsMatchAttributes, TlsRoute, VirtualService,
};
use crate::ConfigSet;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Controllers whose GatewayClasses warden serves.
pub const CONTROLLERS: &[&str] = &[
    "istio.io/gateway-controller",
    "warden.dev/gateway-controller",
];

/// The class Istio installs for its controller; it needs no GatewayClass document.
const BUILTIN_CLASS: &str = "istio";

/// What translating produced, for the loader to merge into the set.
#[derive(Debug, Default)]
pub struct Translated {
    pub gateways: Vec<Doc<Gateway>>,
    pub virtual_services: Vec<Doc<VirtualService>>,
    pub status: Vec<ObjectStatus>,
    pub errors: Vec<Problem>,
    pub warnings: Vec<Problem>,
}

/// Translate the Gateway API documents of `set` (it is only read).
pub fn translate(set: &ConfigSet) -> Translated {
    let mut t = Translator {
        set,
        api: &set.gateway_api,
        out: Translated::default(),
        http: BTreeMap::new(),
        mesh: BTreeMap::new(),
        l4: BTreeMap::new(),
        gateways: Vec::new(),
    };
    t.classes();
    t.gateways();
    t.http_routes();
    t.grpc_routes();
    t.l4_routes();
    t.finish();
    t.out
}

/// A Gateway warden serves, as translation sees it.
struct OurGateway<'a> {
    doc: &'a Doc<GatewaySpec>,
    listeners: Vec<ListenerFindings>,
    usable: Vec<bool>,
}

/// The HTTP routes of one generated VirtualService: (gateway index, port, hostname).
type HttpKey = (usize, u16, String);
/// One match's generated routes with its precedence.
type Ranked = (MatchRank, Vec<HttpRoute>);
/// The TCP and TLS routes of one generated VirtualService: (gateway index, port).
type L4Key = (usize, u16);

#[derive(Default)]
struct L4Routes {
    tcp: Vec<TcpRoute>,
    tls: Vec<TlsRoute>,
}

struct Translator<'a> {
    set: &'a ConfigSet,
    api: &'a GatewayApiSet,
    out: Translated,
    http: BTreeMap<HttpKey, Vec<Ranked>>,
    /// Mesh routes (GAMMA: a Service parent), by the Service's host.
    mesh: BTreeMap<String, Vec<Ranked>>,
    l4: BTreeMap<L4Key, L4Routes>,
    gateways: Vec<OurGateway<'a>>,
}

/// A resolved `backendRef`: the Istio destination, and whether it resolves.
struct Backend {
    destination: Destination,
    weight: u32,
    found: bool,
}

impl<'a> Translator<'a> {
    fn problem<T>(&self, doc: &Doc<T>, field: &str, message: String) -> Problem {
        Problem::new(self.set.locate(doc, field), message)
    }

    fn warn<T>(&mut self, doc: &Doc<T>, field: &str, message: String) {
        let p = self.problem(doc, field, message);
        self.out.warnings.push(p);
    }

    fn error<T>(&mut self, doc: &Doc<T>, field: &str, message: String) {
        let p = self.problem(doc, field, message);
        self.out.errors.push(p);
    }

    /// GatewayClasses of warden's controllers are Accepted; others are someone else's.
    fn classes(&mut self) {
        for c in &self.api.gateway_classes {
            if CONTROLLERS.contains(&c.spec.controller_name.as_str()) {
                self.out.status.push(ObjectStatus {
                    kind: "GatewayClass".into(),
                    namespace: String::new(),
                    name: c.metadata.name.clone(),
                    file: c.file.clone(),
                    document: c.index,
                    conditions: vec![Condition::yes("Accepted", "Accepted")],
                    sections: Vec::new(),
                });
            }
        }
    }

    /// Whether Gateways of class `name` are warden's: a GatewayClass of one of
    /// [`CONTROLLERS`], Istio's built-in `istio`, or a class the config does not define
    /// (served, with a warning, so the Gateway API's examples load as written).
    fn class_of(&self, name: &str) -> ClassVerdict {
        match self
            .api
            .gateway_classes
            .iter()
            .find(|c| c.metadata.name == name)
        {
            Some(c) if CONTROLLERS.contains(&c.spec.controller_name.as_str()) => ClassVerdict::Ours,
            Some(c) => ClassVerdict::Other(c.spec.controller_name.clone()),
            None if name == BUILTIN_CLASS => ClassVerdict::Ours,
            None => ClassVerdict::Undefined,
        }
    }

    fn gateways(&mut self) {
        let api = self.api;
        for gw in &api.gateways {
            match self.class_of(&gw.spec.gateway_class_name) {
                ClassVerdict::Ours => {}
                ClassVerdict::Undefined => self.warn(
                    gw,
                    "spec.gatewayClassName",
                    format!(
                        "GatewayClass {:?} is not in the config; served as if its controller \
                         were warden's (controllerName {})",
                        gw.spec.gateway_class_name, CONTROLLERS[0]
                    ),
                ),
                ClassVerdict::Other(controller) => {
                    self.warn(
                        gw,
                        "spec.gatewayClassName",
                        format!(
                            "GatewayClass {:?} belongs to controller {controller:?}, not to \
                             warden ({}); this Gateway is not served",
                            gw.spec.gateway_class_name,
                            CONTROLLERS.join(", ")
                        ),
                    );
                    continue;
                }
            }
            for (field, set) in [
                ("spec.addresses", !gw.spec.addresses.is_empty()),
                ("spec.infrastructure", gw.spec.infrastructure.is_some()),
            ] {
                if set {
                    self.warn(
                        gw,
                        field,
                        "not used by warden: a proxy's listeners bind where it is told \
                         (--listen-host), and no Service is deployed"
                            .into(),
                    );
                }
            }
            if gw.spec.tls.is_some() {
                self.error(
                    gw,
                    "spec.tls",
                    "Gateway-level TLS (backend client certificates, frontend validation) is \
                     not supported by warden yet"
                        .into(),
                );
            }
            let listeners = self.listener_findings(gw);
            let usable = listeners.iter().map(ListenerFindings::programmed).collect();
            self.gateways.push(OurGateway {
                doc: gw,
                listeners,
                usable,
            });
        }
    }

    /// Protocol, TLS and conflict findings of each listener of `gw`.
    fn listener_findings(&mut self, gw: &'a Doc<GatewaySpec>) -> Vec<ListenerFindings> {
        let ns = gw.metadata.namespace_or_default();
        let mut out = Vec::with_capacity(gw.spec.listeners.len());
        for (i, l) in gw.spec.listeners.iter().enumerate() {
            let at = format!("spec.listeners[{i}]");
            let mut f = ListenerFindings::default();
            match l.protocol.as_str() {
                "HTTP" | "TCP" => {}
                "HTTPS" | "TLS" => {
                    let passthrough =
                        l.tls.as_ref().and_then(|t| t.mode.as_deref()) == Some("Passthrough");
                    match &l.tls {
                        None => {
                            self.error(gw, &at, format!("a {} listener needs `tls`", l.protocol))
                        }
                        Some(_) if passthrough && l.protocol == "HTTPS" => self.error(
                            gw,
                            &format!("{at}.tls.mode"),
                            "an HTTPS listener terminates TLS (mode Terminate); pass TLS \
                             through with protocol TLS"
                                .into(),
                        ),
                        Some(tls) if !passthrough => {
                            f.unresolved = self.certificate_problem(gw, ns, &at, tls);
                            match listener_tls::terminate_mode(&tls.options) {
                                Ok(m) => {
                                    for (key, why) in m.ignored {
                                        self.warn(
                                            gw,
                                            &format!("{at}.tls.options.{key}"),
                                            format!("not used: {why}"),
                                        );
                                    }
                                }
                                Err(e) => self.error(gw, &format!("{at}.tls.options"), e),
                            }
                        }
                        Some(_) => {}
                    }
                    if let Some(mode) = l.tls.as_ref().and_then(|t| t.mode.as_deref()) {
                        if !matches!(mode, "Terminate" | "Passthrough") {
                            self.error(
                                gw,
                                &format!("{at}.tls.mode"),
                                format!("tls.mode {mode:?} is not one of Terminate, Passthrough"),
                            );
                        }
                    }
                    if l.tls
                        .as_ref()
                        .is_some_and(|t| t.frontend_validation.is_some())
                    {
                        self.error(
                            gw,
                            &format!("{at}.tls.frontendValidation"),
                            "client certificate validation of Gateway API listeners is not \
                             supported by warden yet"
                                .into(),
                        );
                    }
                }
                other => {
                    f.not_accepted = Some((
                        "UnsupportedProtocol",
                        format!("protocol {other:?} is not supported (HTTP, HTTPS, TLS, TCP)"),
                    ));
                    self.warn(
                        gw,
                        &format!("{at}.protocol"),
                        format!(
                            "protocol {other:?} is not supported (HTTP, HTTPS, TLS, TCP); the \
                             listener is not served"
                        ),
                    );
                }
            }
            let (_, invalid) = attach::admitted_kinds(l);
            if !invalid.is_empty() && f.unresolved.is_none() {
                f.unresolved = Some((
                    "InvalidRouteKinds",
                    format!(
                        "route kinds {} cannot attach to a {} listener",
                        invalid.join(", "),
                        l.protocol
                    ),
                ));
            }
            out.push(f);
        }
        // Listeners that cannot share a port: HTTP, TCP and the TLS family (HTTPS and TLS,
        // chosen by SNI) each need the port alone; the same hostname twice is ambiguous.
        let listeners = &gw.spec.listeners;
        fn family(p: &str) -> &str {
            match p {
                "HTTPS" | "TLS" => "TLS",
                other => other,
            }
        }
        for i in 0..listeners.len() {
            for j in 0..listeners.len() {
                if i == j || listeners[i].port != listeners[j].port {
                    continue;
                }
                let (a, b) = (&listeners[i], &listeners[j]);
                if family(&a.protocol) != family(&b.protocol) {
                    out[i].conflicted = Some((
                        "ProtocolConflict",
                        format!(
                            "port {} is also {} listener {:?}",
                            a.port, b.protocol, b.name
                        ),
                    ));
                } else if a.hostname == b.hostname && a.protocol == b.protocol {
                    out[i].conflicted = Some((
                        "HostnameConflict",
                        format!("listener {:?} has the same port and hostname", b.name),
                    ));
                }
            }
        }
        out
    }

    /// Why the listener's first certificate cannot be used, if it cannot.
    fn certificate_problem(
        &mut self,
        gw: &Doc<GatewaySpec>,
        ns: &str,
        at: &str,
        tls: &ListenerTls,
    ) -> Option<(&'static str, String)> {
        let Some(cert) = tls.certificate_refs.first() else {
            self.error(
                gw,
                &format!("{at}.tls.certificateRefs"),
                "a listener that terminates TLS needs a certificateRef".into(),
            );
            return Some(("InvalidCertificateRef", "no certificateRefs".into()));
        };
        if tls.certificate_refs.len() > 1 {
            self.warn(
                gw,
                &format!("{at}.tls.certificateRefs[1]"),
                "warden serves the first certificateRef of a listener; the others are not used"
                    .into(),
            );
        }
        let group = cert.group.as_deref().unwrap_or("");
        let kind = cert.kind.as_deref().unwrap_or("Secret");
        if !group.is_empty() || kind != "Secret" {
            return Some((
                "InvalidCertificateRef",
                format!("certificateRef {group}/{kind} is not a Secret"),
            ));
        }
        let target_ns = cert.namespace.as_deref().unwrap_or(ns);
        let allowed = reference_grant::permitted(
            &self.api.reference_grants,
            From {
                group: GROUP,
                kind: "Gateway",
                namespace: ns,
            },
            To {
                group: "",
                kind: "Secret",
                namespace: target_ns,
                name: &cert.name,
            },
        );
        if !allowed {
            self.warn(
                gw,
                &format!("{at}.tls.certificateRefs[0]"),
                format!(
                    "Secret {target_ns}/{} is in another namespace and no ReferenceGrant there \
                     allows it (RefNotPermitted); the listener is not served",
                    cert.name
                ),
            );
            return Some((
                "RefNotPermitted",
                format!("Secret {target_ns}/{} needs a ReferenceGrant", cert.name),
            ));
        }
        None
    }

    /// The folder of `--credentials-dir` a certificateRef names: the Secret's name, under its
    /// namespace's folder when it is not the Gateway's.
    fn credential_name(gw_ns: &str, cert: &ObjectRef) -> String {
        match cert.namespace.as_deref() {
            Some(ns) if ns != gw_ns => format!("{ns}/{}", cert.name),
            _ => cert.name.clone(),
        }
    }

    fn namespace_labels(&self) -> impl Fn(&str) -> BTreeMap<String, String> + '_ {
        move |ns: &str| self.api.namespaces.get(ns).cloned().unwrap_or_default()
    }

    /// The gateway a parentRef names among warden's, or why none; `Ok(None)`: a Gateway of
    /// another controller (nothing to report, as Istio reports nothing for it).
    fn parent_gateway(&self, route_ns: &str, parent: &ParentRef) -> Result<Option<usize>, Refusal> {
        let group = parent.group.as_deref().unwrap_or(GROUP);
        let kind = parent.kind.as_deref().unwrap_or("Gateway");
        if group != GROUP || kind != "Gateway" {
            return Err(Refusal::NoMatchingParent(format!(
                "parent {group}/{kind} is not supported (a Gateway, or a Service for mesh routes)"
            )));
        }
        let ns = parent.namespace.as_deref().unwrap_or(route_ns);
        if let Some(i) = self.gateways.iter().position(|g| {
            g.doc.metadata.name == parent.name && g.doc.metadata.namespace_or_default() == ns
        }) {
            return Ok(Some(i));
        }
        let theirs = self
            .api
            .gateways
            .iter()
            .any(|g| g.metadata.name == parent.name && g.metadata.namespace_or_default() == ns);
        match theirs {
            true => Ok(None),
            false => Err(Refusal::NoMatchingParent(format!(
                "no Gateway {ns}/{} in the config",
                parent.name
            ))),
        }
    }

    /// Resolve one backend (or mirror) reference of a route of `kind` in `ns`.
    fn backend(
        &self,
        kind: &str,
        ns: &str,
        target: &ObjectRef,
        weight: Option<u32>,
    ) -> Result<Backend, RefProblem> {
        let group = target.group.as_deref().unwrap_or("");
        let target_kind = target.kind.as_deref().unwrap_or("Service");
        let target_ns = target.namespace.as_deref().unwrap_or(ns);
        let host = match (group, target_kind) {
            ("", "Service") => format!("{}.{target_ns}.svc.cluster.local", target.name),
            // Istio's extension: a ServiceEntry host by name.
            ("networking.istio.io", "Hostname") => target.name.clone(),
            _ => {
                return Err(RefProblem::InvalidKind(format!(
                    "backendRef {group}/{target_kind} {} is not a Service (or Istio Hostname)",
                    target.name
                )))
            }
        };
        let allowed = reference_grant::permitted(
            &self.api.reference_grants,
            From {
                group: GROUP,
                kind,
                namespace: ns,
            },
            To {
                group,
                kind: target_kind,
                namespace: target_ns,
                name: &target.name,
            },
        );
        if !allowed {
            return Err(RefProblem::RefNotPermitted(format!(
                "backendRef {target_kind} {target_ns}/{} is in another namespace and no \
                 ReferenceGrant there allows {kind}s of {ns}",
                target.name
            )));
        }
        let destination = Destination {
            host: host.clone(),
            subset: None,
            port: target.port.map(|number| PortSelector { number }),
        };
        let found = match self.set.service_entry_for_host(&host) {
            None => false,
            Some(se) => target
                .port
                .is_none_or(|p| se.spec.ports.iter().any(|sp| sp.number == p)),
        };
        Ok(Backend {
            destination,
            weight: weight.unwrap_or(1),
            found,
        })
    }

    /// Every backendRef of a rule: the destinations with their weights (invalid ones kept,
    /// with `found: false`), and the problems for `ResolvedRefs`.
    fn backends(
        &mut self,
        kind: &str,
        doc_ns: &str,
        refs: &[HttpBackendRef],
        problems: &mut Vec<RefProblem>,
    ) -> Vec<Backend> {
        let mut out = Vec::new();
        for r in refs {
            match self.backend(kind, doc_ns, &r.target(), r.weight) {
                Ok(b) => {
                    if !b.found {
                        problems.push(RefProblem::BackendNotFound(format!(
                            "backendRef {} port {} is not in the config (no Service or \
                             ServiceEntry)",
                            b.destination.host,
                            r.port.map_or("(none)".into(), |p| p.to_string())
                        )));
                    }
                    out.push(b);
                }
                Err(p) => {
                    problems.push(p);
                    // Traffic for it fails (500), as it would for a missing Service.
                    out.push(Backend {
                        destination: Destination {
                            host: format!("{}.invalid", r.name),
                            subset: None,
                            port: r.port.map(|number| PortSelector { number }),
                        },
                        weight: r.weight.unwrap_or(1),
                        found: false,
                    });
                }
            }
        }
        out
    }

    fn http_routes(&mut self) {
        let api = self.api;
        for doc in &api.http_routes {
            let rules: Vec<RuleParts> = doc
                .spec
                .rules
                .iter()
                .enumerate()
                .map(|(i, r)| RuleParts {
                    index: i,
                    name: r.name.clone(),
                    matches: if r.matches.is_empty() {
                        vec![HttpRouteMatch::default()]
                    } else {
                        r.matches.clone()
                    },
                    filters: &r.filters,
                    backend_refs: &r.backend_refs,
                    timeouts: r.timeouts.as_ref(),
                    retry: r.retry.as_ref(),
                    session_persistence: r.session_persistence.is_some(),
                    field: format!("spec.rules[{i}]"),
                })
                .collect();
            self.route_with_rules(
                doc,
                "HTTPRoute",
                &doc.spec.parent_refs,
                &doc.spec.hostnames,
                rules,
            );
        }
    }

    fn grpc_routes(&mut self) {
        let api = self.api;
        for doc in &api.grpc_routes {
            let mut rules = Vec::new();
            let mut bad = false;
            for (i, r) in doc.spec.rules.iter().enumerate() {
                let mut matches = Vec::new();
                for (j, m) in r.matches.iter().enumerate() {
                    match grpc_match(m) {
                        Ok(hm) => matches.push(hm),
                        Err(e) => {
                            self.error(doc, &format!("spec.rules[{i}].matches[{j}].method"), e);
                            bad = true;
                        }
                    }
                }
                if matches.is_empty() {
                    matches.push(HttpRouteMatch::default());
                }
                rules.push(RuleParts {
                    index: i,
                    name: r.name.clone(),
                    matches,
                    filters: &r.filters,
                    backend_refs: &r.backend_refs,
                    timeouts: None,
                    retry: None,
                    session_persistence: r.session_persistence.is_some(),
                    field: format!("spec.rules[{i}]"),
                });
            }
            if !bad {
                self.route_with_rules(
                    doc,
                    "GRPCRoute",
                    &doc.spec.parent_refs,
                    &doc.spec.hostnames,
                    rules,
                );
            }
        }
    }

    /// Attach an HTTP or gRPC route and add its rules to the VirtualServices of its
    /// listeners' hostnames.
    fn route_with_rules<T>(
        &mut self,
        doc: &'a Doc<T>,
        kind: &'static str,
        parents: &[ParentRef],
        hostnames: &[String],
        rules: Vec<RuleParts<'a>>,
    ) {
        let ns = doc.metadata.namespace_or_default();
        let route_name = format!("{ns}/{}", doc.metadata.name);
        let mut refs = Vec::new();
        let mut unsupported: Option<Refusal> = None;
        let mut built: Vec<Ranked> = Vec::new();
        let errors_before = self.out.errors.len();
        for rule in &rules {
            match self.rule_routes(doc, kind, &route_name, rule, &mut refs) {
                Ok(mut b) => built.append(&mut b),
                Err(r) => {
                    unsupported.get_or_insert(r);
                }
            }
        }
        if self.out.errors.len() > errors_before {
            return; // refused at load: nothing to attach
        }
        let mut sections = Vec::new();
        for (p, parent) in parents.iter().enumerate() {
            if let Some(service) = mesh_parent(parent, ns) {
                // GAMMA: the route is the Service's mesh route (sidecars), as Istio makes it.
                let attached = match (&unsupported, self.set.service_entry_for_host(&service)) {
                    (Some(u), _) => Err(u.clone()),
                    (None, None) => Err(Refusal::NoMatchingParent(format!(
                        "no Service {service} in the config"
                    ))),
                    (None, Some(_)) => Ok(()),
                };
                if let Err(r) = &attached {
                    self.warn(
                        doc,
                        &format!("spec.parentRefs[{p}]"),
                        format!(
                            "not attached to Service {service}: {} ({})",
                            r.message(),
                            r.reason()
                        ),
                    );
                }
                sections.push(SectionStatus {
                    name: format!("parent Service {service}"),
                    conditions: status::route_parent(attached.as_ref().map(|_| ()), &refs),
                });
                if attached.is_ok() {
                    let entry = self.mesh.entry(service).or_default();
                    for (rank, routes) in &built {
                        let with_port = routes
                            .iter()
                            .cloned()
                            .map(|mut r| {
                                r.matches.iter_mut().for_each(|m| m.port = parent.port);
                                r
                            })
                            .collect();
                        entry.push((rank.clone(), with_port));
                    }
                }
                continue;
            }
            let attached = self.attach_to_gateway(
                doc,
                (kind, hostnames),
                (p, parent),
                (unsupported.as_ref(), &refs),
                &mut sections,
            );
            for (g, port, hostnames) in attached {
                for host in hostnames {
                    let entry = self.http.entry((g, port, host)).or_default();
                    for (rank, routes) in &built {
                        let with_port = routes
                            .iter()
                            .cloned()
                            .map(|mut r| {
                                r.matches.iter_mut().for_each(|m| m.port = Some(port));
                                r
                            })
                            .collect();
                        entry.push((rank.clone(), with_port));
                    }
                }
            }
        }
        self.route_status(doc, kind, ("spec.rules", &refs), sections);
    }

    /// The Istio routes of one rule, each with its precedence rank (one per match; a path
    /// prefix is split in two where a prefix replacement needs it), or why the rule cannot
    /// be served.
    fn rule_routes<T>(
        &mut self,
        doc: &Doc<T>,
        kind: &str,
        route_name: &str,
        rule: &RuleParts<'_>,
        refs: &mut Vec<RefProblem>,
    ) -> Result<Vec<Ranked>, Refusal> {
        let ns = doc.metadata.namespace_or_default();
        let at = &rule.field;
        let mut base = HttpRoute {
            name: Some(
                rule.name
                    .clone()
                    .unwrap_or_else(|| format!("{}.{}.{}", ns, doc.metadata.name, rule.index)),
            ),
            source_route: Some(super::route_source(kind, ns, &doc.metadata.name)),
            ..HttpRoute::default()
        };
        if rule.session_persistence {
            return Err(Refusal::UnsupportedValue(format!(
                "{at}.sessionPersistence is not supported by warden"
            )));
        }
        let mut redirect_prefix: Option<String> = None;
        let mut rewrite_prefix: Option<String> = None;
        for (i, f) in rule.filters.iter().enumerate() {
            let fat = format!("{at}.filters[{i}]");
            match f.kind.as_str() {
                "RequestHeaderModifier" => {
                    let h = base.headers.get_or_insert_with(Headers::default);
                    h.request = f.request_header_modifier.as_ref().map(header_ops);
                }
                "ResponseHeaderModifier" => {
                    let h = base.headers.get_or_insert_with(Headers::default);
                    h.response = f.response_header_modifier.as_ref().map(header_ops);
                }
                "RequestRedirect" => {
                    let Some(r) = &f.request_redirect else {
                        self.error(
                            doc,
                            &fat,
                            "type RequestRedirect needs `requestRedirect`".into(),
                        );
                        continue;
                    };
                    let (redirect, prefix) = redirect_of(r);
                    if let Some(code) = r.status_code {
                        if ![301, 302, 303, 307, 308].contains(&code) {
                            self.error(
                                doc,
                                &format!("{fat}.requestRedirect.statusCode"),
                                format!("statusCode {code} is not one of 301, 302, 303, 307, 308"),
                            );
                        }
                    }
                    base.redirect = Some(redirect);
                    redirect_prefix = prefix;
                }
                "URLRewrite" => {
                    let Some(r) = &f.url_rewrite else {
                        self.error(doc, &fat, "type URLRewrite needs `urlRewrite`".into());
                        continue;
                    };
                    let mut rw = HttpRewrite {
                        authority: r.hostname.clone(),
                        ..HttpRewrite::default()
                    };
                    match r.path.as_ref() {
                        Some(p) if p.kind == "ReplaceFullPath" => {
                            rw.uri_regex_rewrite = Some(RegexRewrite {
                                pattern: "^/.*$".into(),
                                rewrite: p.replace_full_path.clone().unwrap_or_else(|| "/".into()),
                            })
                        }
                        Some(p) if p.kind == "ReplacePrefixMatch" => {
                            rewrite_prefix =
                                Some(p.replace_prefix_match.clone().unwrap_or_else(|| "/".into()))
                        }
                        Some(p) => self.error(
                            doc,
                            &format!("{fat}.urlRewrite.path.type"),
                            format!(
                                "path type {:?} is not one of ReplaceFullPath, ReplacePrefixMatch",
                                p.kind
                            ),
                        ),
                        None => {}
                    }
                    base.rewrite = Some(rw);
                }
                "RequestMirror" => {
                    let Some(m) = &f.request_mirror else {
                        self.error(doc, &fat, "type RequestMirror needs `requestMirror`".into());
                        continue;
                    };
                    match self.backend(kind, ns, &m.backend_ref, Some(1)) {
                        Ok(b) => {
                            if !b.found {
                                refs.push(RefProblem::BackendNotFound(format!(
                                    "mirror backendRef {} is not in the config",
                                    b.destination.host
                                )));
                                continue;
                            }
                            let percentage = match (&m.fraction, m.percent) {
                                (Some(fr), _) => Some(Percent {
                                    value: 100.0 * f64::from(fr.numerator)
                                        / f64::from(fr.denominator.unwrap_or(100).max(1)),
                                }),
                                (None, Some(p)) => Some(Percent {
                                    value: f64::from(p),
                                }),
                                (None, None) => None,
                            };
                            base.mirrors.push(HttpMirrorPolicy {
                                destination: b.destination,
                                percentage,
                            });
                        }
                        Err(p) => refs.push(p),
                    }
                }
                other => {
                    return Err(Refusal::UnsupportedValue(format!(
                        "filter type {other} ({fat}) is not supported by warden (nor by Istio's \
                         gateway controller)"
                    )))
                }
            }
        }
        if rule.backend_refs.iter().any(|b| !b.filters.is_empty()) {
            return Err(Refusal::UnsupportedValue(format!(
                "{at}.backendRefs[].filters are not supported by warden (nor by Istio)"
            )));
        }
        if let Some(t) = rule.timeouts {
            let parse = |b: &mut Self, v: &Option<String>, name: &str| -> Option<String> {
                let v = v.as_ref()?;
                match crate::duration::parse_duration(v) {
                    Ok(d) if d.is_zero() => None,
                    Ok(_) => Some(v.clone()),
                    Err(e) => {
                        b.error(doc, &format!("{at}.timeouts.{name}"), e.to_string());
                        None
                    }
                }
            };
            let request = parse(self, &t.request, "request");
            let backend = parse(self, &t.backend_request, "backendRequest");
            base.timeout = request;
            if let Some(b) = backend {
                match &rule.retry {
                    Some(_) => {
                        base.retries
                            .get_or_insert_with(Retries::default)
                            .per_try_timeout = Some(b)
                    }
                    None => base.timeout = Some(b),
                }
            }
        }
        if let Some(r) = rule.retry {
            let mut on = vec![
                "connect-failure",
                "refused-stream",
                "unavailable",
                "cancelled",
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
            on.extend(r.codes.iter().map(u16::to_string));
            let attempts = r.attempts.unwrap_or(2);
            let retries = base.retries.get_or_insert_with(Retries::default);
            retries.attempts = attempts;
            retries.retry_on = (attempts > 0).then(|| on.join(","));
            if r.backoff.is_some() {
                self.warn(
                    doc,
                    &format!("{at}.retry.backoff"),
                    "retry backoff is Envoy's default (25ms base) in warden; the value is not used"
                        .into(),
                );
            }
        }
        let backends = self.backends(kind, ns, rule.backend_refs, refs);
        if base.redirect.is_none() {
            match backend_plan(backends) {
                BackendPlan::Fail => {
                    base.direct_response = Some(crate::kinds::virtual_service::DirectResponse {
                        status: 500,
                        body: None,
                    })
                }
                BackendPlan::Route { to, fail_percent } => {
                    base.route = to;
                    // The unresolved backends' share answers 500 (the spec), drawn per
                    // request as Envoy's fault filter draws an abort.
                    base.fault = fail_percent.map(|value| HttpFault {
                        delay: None,
                        abort: Some(FaultAbort {
                            http_status: Some(500),
                            percentage: Some(Percent { value }),
                            ..FaultAbort::default()
                        }),
                    });
                }
            }
        }
        let mut out = Vec::new();
        for (j, m) in rule.matches.iter().enumerate() {
            let rank = MatchRank::of(m, None, route_name, rule.index, j);
            let rank = MatchRank {
                created: self.created_of(doc),
                ..rank
            };
            match match_requests(m) {
                Ok(split) => {
                    let routes = split_routes(
                        &base,
                        split,
                        rewrite_prefix.as_deref(),
                        redirect_prefix.as_deref(),
                    );
                    out.push((rank, routes));
                }
                Err((field, e)) => self.error(doc, &format!("{at}.matches[{j}]{field}"), e),
            }
        }
        Ok(out)
    }

    /// Attach route `doc` (its kind and hostnames in `route`) through its Gateway parent
    /// `parent`, its `parentRefs[p]` (`refused`: why none of its rules can be served; `refs`:
    /// its unresolved references): the parent's status section goes to `sections` (none for a
    /// Gateway of another controller: Istio reports nothing for it), a refusal is also a
    /// located warning, and each listener it attached to counts it. Returns, per listener,
    /// (Gateway index, port, the route's hostnames there).
    fn attach_to_gateway<T>(
        &mut self,
        doc: &Doc<T>,
        route: (&'static str, &[String]),
        (p, parent): (usize, &ParentRef),
        (refused, refs): (Option<&Refusal>, &[RefProblem]),
        sections: &mut Vec<SectionStatus>,
    ) -> Vec<(usize, u16, Vec<String>)> {
        let (kind, hostnames) = route;
        let ns = doc.metadata.namespace_or_default();
        let attached = match self.parent_gateway(ns, parent) {
            Ok(None) => return Vec::new(),
            Ok(Some(g)) => {
                let gw = &self.gateways[g];
                let labels = self.namespace_labels();
                attach::attach(
                    &gw.doc.spec.listeners,
                    &gw.usable,
                    gw.doc.metadata.namespace_or_default(),
                    parent,
                    RouteInfo {
                        kind,
                        namespace: ns,
                        hostnames,
                    },
                    &labels,
                )
                .map(|a| (g, a))
            }
            Err(r) => Err(r),
        };
        let attached = match (refused, attached) {
            (Some(u), Ok(_)) => Err(u.clone()),
            (_, a) => a,
        };
        if let Err(r) = &attached {
            self.warn(
                doc,
                &format!("spec.parentRefs[{p}]"),
                format!(
                    "not attached to {}: {} ({})",
                    parent_label(parent, ns),
                    r.message(),
                    r.reason()
                ),
            );
        }
        sections.push(SectionStatus {
            name: format!("parent {}", parent_label(parent, ns)),
            conditions: status::route_parent(attached.as_ref().map(|_| ()), refs),
        });
        let Ok((g, attached)) = attached else {
            return Vec::new();
        };
        attached
            .into_iter()
            .map(|a| {
                self.gateways[g].listeners[a.listener].attached_routes += 1;
                let port = self.gateways[g].doc.spec.listeners[a.listener].port;
                (g, port, a.hostnames)
            })
            .collect()
    }

    /// Route `doc`'s status (a section per parent), and one located warning listing its
    /// unresolved references (`refs`, found under `field`), if any.
    fn route_status<T>(
        &mut self,
        doc: &Doc<T>,
        kind: &str,
        (field, refs): (&str, &[RefProblem]),
        sections: Vec<SectionStatus>,
    ) {
        if let Some(first) = refs.first() {
            let all: Vec<&str> = refs.iter().map(RefProblem::message).collect();
            self.warn(
                doc,
                field,
                format!(
                    "unresolved references ({}): {}",
                    first.reason(),
                    all.join("; ")
                ),
            );
        }
        self.out.status.push(ObjectStatus {
            kind: kind.into(),
            namespace: doc.metadata.namespace_or_default().into(),
            name: doc.metadata.name.clone(),
            file: doc.file.clone(),
            document: doc.index,
            conditions: Vec::new(),
            sections,
        });
    }

    fn created_of<T>(&self, doc: &Doc<T>) -> Option<String> {
        doc.metadata.creation_timestamp.clone()
    }

    fn l4_routes(&mut self) {
        let api = self.api;
        for (kind, docs) in [("TCPRoute", &api.tcp_routes), ("TLSRoute", &api.tls_routes)] {
            for doc in docs {
                self.l4_route(kind, doc);
            }
        }
    }

    fn l4_route(&mut self, kind: &'static str, doc: &'a Doc<L4RouteSpec>) {
        let ns = doc.metadata.namespace_or_default();
        let mut refs = Vec::new();
        // Istio serves the first rule of a TCP or TLS route (the spec allows only one).
        let Some(rule) = doc.spec.rules.first() else {
            self.error(doc, "spec.rules", format!("a {kind} needs one rule"));
            return;
        };
        if doc.spec.rules.len() > 1 {
            self.warn(
                doc,
                "spec.rules[1]",
                "only the first rule of a TCP or TLS route is served".into(),
            );
        }
        let backends = self.backends(kind, ns, &rule.backend_refs, &mut refs);
        let route: Vec<RouteDestination> = backends
            .into_iter()
            .filter(|b| b.weight > 0 && b.found)
            .map(|b| RouteDestination {
                destination: b.destination,
                weight: Some(b.weight),
            })
            .collect();
        let mut sections = Vec::new();
        for (p, parent) in doc.spec.parent_refs.iter().enumerate() {
            let attached = self.attach_to_gateway(
                doc,
                (kind, &doc.spec.hostnames),
                (p, parent),
                (None, &refs),
                &mut sections,
            );
            for (g, port, hostnames) in attached {
                let entry = self.l4.entry((g, port)).or_default();
                match kind {
                    "TLSRoute" => entry.tls.push(TlsRoute {
                        matches: vec![TlsMatchAttributes {
                            sni_hosts: hostnames,
                            port: Some(port),
                            gateways: Vec::new(),
                        }],
                        route: route.clone(),
                    }),
                    _ => entry.tcp.push(TcpRoute {
                        matches: vec![L4MatchAttributes {
                            port: Some(port),
                            gateways: Vec::new(),
                        }],
                        route: route.clone(),
                    }),
                }
            }
        }
        self.route_status(doc, kind, ("spec.rules[0].backendRefs", &refs), sections);
    }

    /// The generated Istio documents, and the Gateways' statuses.
    fn finish(&mut self) {
        let mut generated_gateways = Vec::new();
        let mut gateway_status = Vec::new();
        for g in &self.gateways {
            let gw = g.doc;
            let ns = gw.metadata.namespace_or_default();
            let mut servers = Vec::new();
            for (i, l) in gw.spec.listeners.iter().enumerate() {
                if !g.usable[i] {
                    continue;
                }
                let tls = l.tls.as_ref().map(|t| match t.mode.as_deref() {
                    Some("Passthrough") => ServerTls {
                        mode: Some("PASSTHROUGH".into()),
                        ..ServerTls::default()
                    },
                    _ => ServerTls {
                        // Refused at load when the options name a mode warden cannot serve.
                        mode: Some(
                            listener_tls::terminate_mode(&t.options)
                                .map_or("SIMPLE", |m| m.mode)
                                .into(),
                        ),
                        credential_name: t
                            .certificate_refs
                            .first()
                            .map(|c| Self::credential_name(ns, c)),
                        ..ServerTls::default()
                    },
                });
                servers.push(Server {
                    port: Port {
                        number: l.port,
                        protocol: l.protocol.clone(),
                        name: Some(l.name.clone()),
                        target_port: None,
                    },
                    hosts: vec![l.hostname.clone().unwrap_or_else(|| "*".into())],
                    name: Some(l.name.clone()),
                    tls,
                });
            }
            generated_gateways.push(Doc {
                file: gw.file.clone(),
                index: gw.index,
                api_version: "networking.istio.io/v1".into(),
                kind: "Gateway".into(),
                metadata: Metadata {
                    name: generated_gateway_name(&gw.metadata.name),
                    namespace: Some(ns.into()),
                    ..Metadata::default()
                },
                spec: Gateway {
                    selector: BTreeMap::new(),
                    servers,
                },
            });
            gateway_status.push(ObjectStatus {
                kind: "Gateway".into(),
                namespace: ns.into(),
                name: gw.metadata.name.clone(),
                file: gw.file.clone(),
                document: gw.index,
                conditions: status::gateway(&g.listeners),
                sections: gw
                    .spec
                    .listeners
                    .iter()
                    .zip(&g.listeners)
                    .map(|(l, f)| SectionStatus {
                        name: format!(
                            "listener {} (port {} {}, {} route(s))",
                            l.name, l.port, l.protocol, f.attached_routes
                        ),
                        conditions: f.conditions(),
                    })
                    .collect(),
            });
        }
        let http = std::mem::take(&mut self.http);
        for ((g, port, host), entries) in http {
            let gw = self.gateways[g].doc;
            let mut vs =
                self.generated_vs(gw, &format!("{port}-{}", host.replace('*', "wildcard")));
            vs.spec.hosts = vec![host];
            self.push_http(vs, entries);
        }
        let mesh = std::mem::take(&mut self.mesh);
        for (host, entries) in mesh {
            let (name, ns) = host
                .strip_suffix(".svc.cluster.local")
                .and_then(|h| h.split_once('.'))
                .unwrap_or((host.as_str(), "default"));
            let vs_name = format!("{name}-mesh");
            let vs = Doc {
                file: PathBuf::from(format!("gateway-api#mesh/{ns}/{vs_name}")),
                index: 0,
                api_version: "networking.istio.io/v1".into(),
                kind: "VirtualService".into(),
                metadata: Metadata {
                    name: vs_name,
                    namespace: Some(ns.into()),
                    ..Metadata::default()
                },
                spec: VirtualService {
                    hosts: vec![host.clone()],
                    ..VirtualService::default()
                },
            };
            self.push_http(vs, entries);
        }
        let l4 = std::mem::take(&mut self.l4);
        for ((g, port), routes) in l4 {
            let gw = self.gateways[g].doc;
            let mut vs = self.generated_vs(gw, &format!("{port}-l4"));
            vs.spec.hosts = vec!["*".into()];
            vs.spec.tcp = routes.tcp;
            vs.spec.tls = routes.tls;
            self.out.virtual_services.push(vs);
        }
        self.out.gateways = generated_gateways;
        gateway_status.append(&mut self.out.status);
        self.out.status = gateway_status;
    }

    /// `vs` with the HTTP routes of `entries` in precedence order, added to the output.
    fn push_http(&mut self, mut vs: Doc<VirtualService>, mut entries: Vec<Ranked>) {
        entries.sort_by(|a, b| precedence::order(&a.0, &b.0));
        for (_, routes) in entries {
            vs.spec.http.extend(routes);
        }
        self.out.virtual_services.push(vs);
    }

    /// An empty generated VirtualService of Gateway `gw`, bound to its generated Gateway. Its
    /// `file` names the Gateway's and what it stands for, so nothing mistakes it for a
    /// document of that file.
    fn generated_vs(&self, gw: &Doc<GatewaySpec>, suffix: &str) -> Doc<VirtualService> {
        let ns = gw.metadata.namespace_or_default();
        let name = format!("{}-{suffix}", gw.metadata.name);
        Doc {
            file: PathBuf::from(format!("{}#gateway-api/{ns}/{name}", gw.file.display())),
            index: gw.index,
            api_version: "networking.istio.io/v1".into(),
            kind: "VirtualService".into(),
            metadata: Metadata {
                name,
                namespace: Some(ns.into()),
                ..Metadata::default()
            },
            spec: VirtualService {
                gateways: vec![format!(
                    "{ns}/{}",
                    generated_gateway_name(&gw.metadata.name)
                )],
                ..VirtualService::default()
            },
        }
    }
}

enum ClassVerdict {
    Ours,
    Other(String),
    Undefined,
}

/// Where a rule's requests go, from its backends.
#[derive(Debug, PartialEq)]
enum BackendPlan {
    /// No backend with weight, or none that resolves: every request gets 500 (the spec).
    Fail,
    /// The resolved backends with their weights; `fail_percent`: the share of requests that
    /// would have gone to unresolved ones, which get 500 instead.
    Route {
        to: Vec<HttpRouteDestination>,
        fail_percent: Option<f64>,
    },
}

fn backend_plan(backends: Vec<Backend>) -> BackendPlan {
    let total: u32 = backends.iter().map(|b| b.weight).sum();
    let lost: u32 = backends.iter().filter(|b| !b.found).map(|b| b.weight).sum();
    if total == 0 || lost == total {
        return BackendPlan::Fail;
    }
    let to = backends
        .into_iter()
        .filter(|b| b.found && b.weight > 0)
        .map(|b| HttpRouteDestination {
            destination: b.destination,
            weight: Some(b.weight),
            headers: None,
        })
        .collect();
    BackendPlan::Route {
        to,
        fail_percent: (lost > 0).then(|| 100.0 * f64::from(lost) / f64::from(total)),
    }
}

/// The Istio Gateway standing for Gateway API Gateway `name` (Istio's own naming; the
/// reverse is [`super::selection::source_gateway_name`]).
pub fn generated_gateway_name(name: &str) -> String {
    format!("{name}-istio-autogenerated-k8s-gateway")
}

/// The host of the Service a parentRef names (GAMMA's mesh routes), if it names one.
fn mesh_parent(parent: &ParentRef, route_ns: &str) -> Option<String> {
    let group = parent.group.as_deref().unwrap_or(GROUP);
    let kind = parent.kind.as_deref().unwrap_or("Gateway");
    (group.is_empty() && kind == "Service").then(|| {
        let ns = parent.namespace.as_deref().unwrap_or(route_ns);
        format!("{}.{ns}.svc.cluster.local", parent.name)
    })
}

fn parent_label(parent: &ParentRef, route_ns: &str) -> String {
    let ns = parent.namespace.as_deref().unwrap_or(route_ns);
    let mut s = format!("{ns}/{}", parent.name);
    if let Some(section) = &parent.section_name {
        s.push_str(&format!(" section {section}"));
    }
    if let Some(port) = parent.port {
        s.push_str(&format!(" port {port}"));
    }
    s
}

/// A rule as translation needs it, for HTTPRoutes and GRPCRoutes alike.
struct RuleParts<'a> {
    index: usize,
    name: Option<String>,
    matches: Vec<HttpRouteMatch>,
    filters: &'a [HttpRouteFilter],
    backend_refs: &'a [HttpBackendRef],
    timeouts: Option<&'a HttpRouteTimeouts>,
    retry: Option<&'a HttpRouteRetry>,
    session_persistence: bool,
    field: String,
}

fn header_ops(f: &HeaderFilter) -> HeaderOperations {
    HeaderOperations {
        set: f
            .set
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
        add: f
            .add
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
        remove: f.remove.clone(),
    }
}

/// The Istio redirect of a RequestRedirect filter, and its `ReplacePrefixMatch` (applied per
/// generated route by [`split_routes`]).
fn redirect_of(r: &RedirectFilter) -> (HttpRedirect, Option<String>) {
    let mut out = HttpRedirect {
        scheme: r.scheme.clone(),
        authority: r.hostname.clone(),
        port: r.port,
        // The API server defaults statusCode to 302.
        redirect_code: Some(r.status_code.unwrap_or(302)),
        ..HttpRedirect::default()
    };
    if r.port.is_none() {
        // "When empty, the port of the request is used", unless the scheme changes.
        out.derive_port = Some(
            match r.scheme {
                Some(_) => "FROM_PROTOCOL_DEFAULT",
                None => "FROM_REQUEST_PORT",
            }
            .into(),
        );
    }
    let mut prefix = None;
    if let Some(p) = &r.path {
        match p.kind.as_str() {
            "ReplaceFullPath" => out.uri = p.replace_full_path.clone(),
            _ => prefix = Some(p.replace_prefix_match.clone().unwrap_or_else(|| "/".into())),
        }
    }
    (out, prefix)
}

/// The Istio match conditions of one Gateway API match: a path prefix other than `/` is the
/// path itself (exact) or anything below it (prefix `path/`), the spec's segment-wise prefix.
/// Err: (field below the match, message).
fn match_requests(m: &HttpRouteMatch) -> Result<PathSplit, (String, String)> {
    let (kind, value) = precedence::path_of(m);
    let mut base = HttpMatchRequest::default();
    for h in &m.headers {
        base.headers.insert(
            h.name.to_ascii_lowercase(),
            string_match(h.kind.as_deref(), &h.value).map_err(|e| (".headers".into(), e))?,
        );
    }
    for q in &m.query_params {
        base.query_params.insert(
            q.name.clone(),
            string_match(q.kind.as_deref(), &q.value).map_err(|e| (".queryParams".into(), e))?,
        );
    }
    if let Some(method) = &m.method {
        base.method = Some(StringMatch {
            exact: Some(method.clone()),
            ..StringMatch::default()
        });
    }
    let with_uri = |uri: StringMatch| HttpMatchRequest {
        uri: Some(uri),
        ..base.clone()
    };
    let exact = |v: &str| StringMatch {
        exact: Some(v.into()),
        ..StringMatch::default()
    };
    let prefix = |v: &str| StringMatch {
        prefix: Some(v.into()),
        ..StringMatch::default()
    };
    if kind != "RegularExpression" && !value.starts_with('/') {
        return Err((
            ".path.value".into(),
            format!("path {value:?} must start with /"),
        ));
    }
    Ok(match kind {
        "Exact" => PathSplit::One(with_uri(exact(value))),
        "RegularExpression" => {
            regex::Regex::new(&crate::anchored_regex(value)).map_err(|e| {
                (
                    ".path.value".into(),
                    format!("invalid regular expression: {e}"),
                )
            })?;
            PathSplit::One(with_uri(StringMatch {
                regex: Some(value.into()),
                ..StringMatch::default()
            }))
        }
        "PathPrefix" if value == "/" => PathSplit::One(with_uri(prefix("/"))),
        "PathPrefix" => PathSplit::Prefix {
            exact: with_uri(exact(value)),
            below: with_uri(prefix(&format!("{value}/"))),
            value: value.to_owned(),
        },
        other => {
            return Err((
                ".path.type".into(),
                format!("path type {other:?} is not one of Exact, PathPrefix, RegularExpression"),
            ))
        }
    })
}

/// The conditions a Gateway API path match stands for.
// Built and consumed once per match while loading: boxing would only add allocations.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
enum PathSplit {
    One(HttpMatchRequest),
    /// A segment-wise prefix `value`: the path itself, and anything below `value/`.
    Prefix {
        exact: HttpMatchRequest,
        below: HttpMatchRequest,
        value: String,
    },
}

fn string_match(kind: Option<&str>, value: &str) -> Result<StringMatch, String> {
    match kind.unwrap_or("Exact") {
        "Exact" => Ok(StringMatch {
            exact: Some(value.into()),
            ..StringMatch::default()
        }),
        "RegularExpression" => {
            regex::Regex::new(&crate::anchored_regex(value))
                .map_err(|e| format!("invalid regular expression {value:?}: {e}"))?;
            Ok(StringMatch {
                regex: Some(value.into()),
                ..StringMatch::default()
            })
        }
        other => Err(format!(
            "match type {other:?} is not one of Exact, RegularExpression"
        )),
    }
}

/// The Istio routes of one match of a rule built as `base`. A segment-wise prefix is one
/// route with both conditions, or two (the path itself, then below it) when a
/// `ReplacePrefixMatch` must replace `value` differently in each.
fn split_routes(
    base: &HttpRoute,
    split: PathSplit,
    rewrite_prefix: Option<&str>,
    redirect_prefix: Option<&str>,
) -> Vec<HttpRoute> {
    let with = |matches: Vec<HttpMatchRequest>| HttpRoute {
        matches,
        ..base.clone()
    };
    // `ReplacePrefixMatch: /` removes the prefix; a trailing `/` of the replacement is
    // not doubled (`/foo` with `/bar/`: `/foo/x` -> `/bar/x`).
    let trimmed = |r: &str| -> String {
        match r.trim_end_matches('/') {
            "" => "/".into(),
            t => t.into(),
        }
    };
    let below = |r: &str| -> String {
        match trimmed(r).as_str() {
            "/" => "/".into(),
            t => format!("{t}/"),
        }
    };
    match split {
        PathSplit::One(m) => {
            let mut r = with(vec![m.clone()]);
            let matched = m.uri.as_ref().and_then(|u| u.prefix.clone());
            if let Some(p) = rewrite_prefix {
                if let Some(rw) = r.rewrite.as_mut() {
                    // Prefix `/` (or an exact or regex path): the matched prefix is the
                    // leading `/`, so the replacement goes in front of the rest.
                    rw.uri_regex_rewrite = Some(RegexRewrite {
                        pattern: "^/".into(),
                        rewrite: below(p),
                    });
                }
            }
            if let (Some(p), Some(rd)) = (redirect_prefix, r.redirect.as_mut()) {
                rd.prefix_rewrite = Some((matched.unwrap_or_else(|| "/".into()), below(p)));
            }
            vec![r]
        }
        PathSplit::Prefix {
            exact,
            below: under,
            value,
        } => {
            if rewrite_prefix.is_none() && redirect_prefix.is_none() {
                return vec![with(vec![exact, under])];
            }
            let mut a = with(vec![exact]);
            let mut b = with(vec![under]);
            if let Some(p) = rewrite_prefix {
                if let Some(rw) = a.rewrite.as_mut() {
                    rw.uri = Some(trimmed(p));
                }
                if let Some(rw) = b.rewrite.as_mut() {
                    rw.uri = Some(below(p));
                }
            }
            if let Some(p) = redirect_prefix {
                if let Some(rd) = a.redirect.as_mut() {
                    rd.uri = Some(trimmed(p));
                }
                if let Some(rd) = b.redirect.as_mut() {
                    rd.prefix_rewrite = Some((format!("{value}/"), below(p)));
                }
            }
            vec![a, b]
        }
    }
}

/// A GRPCRoute match as the HTTP match it stands for: `/{service}/{method}` paths.
fn grpc_match(m: &GrpcRouteMatch) -> Result<HttpRouteMatch, String> {
    let path = match &m.method {
        None => None,
        Some(mm) => {
            let regex = mm.kind.as_deref() == Some("RegularExpression");
            let (kind, value) = match (mm.service.as_deref(), mm.method.as_deref(), regex) {
                (None, None, _) => return Err("a method match needs service or method".into()),
                (Some(s), Some(m), false) => ("Exact", format!("/{s}/{m}")),
                (Some(s), None, false) => ("PathPrefix", format!("/{s}")),
                (None, Some(m), false) => {
                    ("RegularExpression", format!("/[^/]+/{}", regex::escape(m)))
                }
                (s, m, true) => (
                    "RegularExpression",
                    format!("/{}/{}", s.unwrap_or("[^/]+"), m.unwrap_or("[^/]+")),
                ),
            };
            Some(HttpPathMatch {
                kind: Some(kind.into()),
                value: Some(value),
            })
        }
    };
    Ok(HttpRouteMatch {
        path,
        headers: m.headers.clone(),
        query_params: Vec::new(),
        method: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unresolved_backends_fail_their_share_of_requests() {
        let backend = |host: &str, weight: u32, found: bool| Backend {
            destination: Destination {
                host: host.into(),
                subset: None,
                port: None,
            },
            weight,
            found,
        };
        // (backends as (host, weight, found), resolved hosts routed to, percent that get 500)
        type Case = (
            &'static [(&'static str, u32, bool)],
            &'static [&'static str],
            Option<f64>,
        );
        let cases: [Case; 6] = [
            (&[("a", 1, true)], &["a"], None),
            (&[("a", 3, true), ("b", 1, false)], &["a"], Some(25.0)),
            (&[("a", 1, true), ("b", 0, false)], &["a"], None),
            (&[("a", 0, true), ("b", 1, true)], &["b"], None),
            (
                &[("a", 1, false), ("b", 1, true), ("c", 2, false)],
                &["b"],
                Some(75.0),
            ),
            (&[("a", 1, true), ("b", 1, true)], &["a", "b"], None),
        ];
        for (given, hosts, fail) in cases {
            let plan = backend_plan(given.iter().map(|(h, w, f)| backend(h, *w, *f)).collect());
            let BackendPlan::Route { to, fail_percent } = plan else {
                panic!("{given:?}: {plan:?}");
            };
            let routed: Vec<&str> = to.iter().map(|d| d.destination.host.as_str()).collect();
            assert_eq!(
                (routed.as_slice(), fail_percent),
                (hosts, fail),
                "{given:?}"
            );
        }
        for fails in [
            vec![backend("a", 1, false)],
            vec![backend("a", 0, true)],
            vec![backend("a", 2, false), backend("b", 0, true)],
            vec![],
        ] {
            assert_eq!(backend_plan(fails), BackendPlan::Fail);
        }
    }

    fn prefix_match(v: &str) -> HttpRouteMatch {
        HttpRouteMatch {
            path: Some(HttpPathMatch {
                kind: Some("PathPrefix".into()),
                value: Some(v.into()),
            }),
            ..HttpRouteMatch::default()
        }
    }

    fn uris(routes: &[HttpRoute]) -> Vec<String> {
        routes
            .iter()
            .map(|r| {
                r.matches
                    .iter()
                    .map(|m| {
                        let u = m.uri.as_ref().unwrap();
                        match (&u.exact, &u.prefix, &u.regex) {
                            (Some(e), _, _) => format!("={e}"),
                            (_, Some(p), _) => format!("^{p}"),
                            (_, _, Some(r)) => format!("~{r}"),
                            _ => "?".into(),
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect()
    }

    /// The spec's segment-wise prefix, and ReplacePrefixMatch as its table shows it.
    #[test]
    fn prefixes_are_segment_wise_and_replacements_follow_the_spec() {
        let base = HttpRoute {
            rewrite: Some(HttpRewrite::default()),
            ..HttpRoute::default()
        };
        let split = match_requests(&prefix_match("/foo/")).unwrap();
        assert_eq!(
            uris(&split_routes(&base, split.clone(), None, None)),
            ["=/foo|^/foo/"]
        );
        let cases = [
            ("/xyz", Some("/xyz"), Some("/xyz/")),
            ("/xyz/", Some("/xyz"), Some("/xyz/")),
            ("/", Some("/"), Some("/")),
        ];
        for (replacement, exact, below) in cases {
            let routes = split_routes(&base, split.clone(), Some(replacement), None);
            assert_eq!(uris(&routes), ["=/foo", "^/foo/"]);
            let got: Vec<Option<&str>> = routes
                .iter()
                .map(|r| r.rewrite.as_ref().unwrap().uri.as_deref())
                .collect();
            assert_eq!(got, [exact, below], "{replacement}");
        }
        let root = match_requests(&HttpRouteMatch::default()).unwrap();
        let routes = split_routes(&base, root, Some("/api"), None);
        assert_eq!(uris(&routes), ["^/"]);
        let rw = routes[0]
            .rewrite
            .as_ref()
            .unwrap()
            .uri_regex_rewrite
            .as_ref()
            .unwrap();
        assert_eq!((rw.pattern.as_str(), rw.rewrite.as_str()), ("^/", "/api/"));
    }

    #[test]
    fn matches_translate_and_bad_ones_are_located() {
        let m = HttpRouteMatch {
            path: Some(HttpPathMatch {
                kind: Some("Exact".into()),
                value: Some("/a".into()),
            }),
            headers: vec![NameValueMatch {
                kind: None,
                name: "Env".into(),
                value: "canary".into(),
            }],
            query_params: vec![NameValueMatch {
                kind: Some("RegularExpression".into()),
                name: "v".into(),
                value: "[0-9]+".into(),
            }],
            method: Some("POST".into()),
        };
        let PathSplit::One(got) = match_requests(&m).unwrap() else {
            panic!("exact is one condition")
        };
        assert_eq!(got.headers["env"].exact.as_deref(), Some("canary"));
        assert_eq!(got.query_params["v"].regex.as_deref(), Some("[0-9]+"));
        assert_eq!(got.method.unwrap().exact.as_deref(), Some("POST"));
        let bad = [
            (Some("Exact"), "a", ".path.value"),
            (Some("RegularExpression"), "(", ".path.value"),
            (Some("Glob"), "/a", ".path.type"),
        ];
        for (kind, value, field) in bad {
            let m = HttpRouteMatch {
                path: Some(HttpPathMatch {
                    kind: kind.map(Into::into),
                    value: Some(value.into()),
                }),
                ..HttpRouteMatch::default()
            };
            assert_eq!(match_requests(&m).unwrap_err().0, field, "{kind:?} {value}");
        }
    }

    #[test]
    fn grpc_methods_are_paths() {
        let m = |service: Option<&str>, method: Option<&str>, kind: Option<&str>| GrpcRouteMatch {
            method: Some(GrpcMethodMatch {
                kind: kind.map(Into::into),
                service: service.map(Into::into),
                method: method.map(Into::into),
            }),
            headers: Vec::new(),
        };
        let path = |g: GrpcRouteMatch| {
            let p = grpc_match(&g).unwrap().path.unwrap();
            format!("{} {}", p.kind.unwrap(), p.value.unwrap())
        };
        assert_eq!(
            path(m(Some("pkg.Svc"), Some("Get"), None)),
            "Exact /pkg.Svc/Get"
        );
        assert_eq!(path(m(Some("pkg.Svc"), None, None)), "PathPrefix /pkg.Svc");
        assert_eq!(
            path(m(None, Some("Get"), None)),
            "RegularExpression /[^/]+/Get"
        );
        assert_eq!(
            path(m(Some("pkg\\..*"), None, Some("RegularExpression"))),
            "RegularExpression /pkg\\..*/[^/]+"
        );
        assert!(grpc_match(&m(None, None, None)).is_err());
    }

    #[test]
    fn redirects_default_to_302_and_the_request_port() {
        let (r, prefix) = redirect_of(&RedirectFilter::default());
        assert_eq!(r.redirect_code, Some(302));
        assert_eq!(r.derive_port.as_deref(), Some("FROM_REQUEST_PORT"));
        assert_eq!(prefix, None);
        let (r, _) = redirect_of(&RedirectFilter {
            scheme: Some("https".into()),
            ..RedirectFilter::default()
        });
        assert_eq!(r.derive_port.as_deref(), Some("FROM_PROTOCOL_DEFAULT"));
    }
}
