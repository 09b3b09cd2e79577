//! VirtualService: hosts, gateway bindings, HTTP and TCP routes and their destinations.

use super::{check_duration, check_header_name, check_positive_duration, spec, References, Report};
use crate::anchored_regex;
use crate::code::Code;
use crate::dangling::DanglingReason;
use crate::document::Doc;
use crate::field_path::FieldPath;
use crate::gateway_ref::{gateway_matches, GatewayRef};
use crate::hosts::{check_host_pattern, server_host_admits};
use crate::kinds::gateway::{Gateway, ListenerProtocol};
use crate::kinds::virtual_service::{
    CorsPolicy, Destination, HeaderOperations, Headers, HttpBody, HttpFault, HttpMatchRequest,
    HttpRoute, Percent, StringMatch, TcpRoute, VirtualService,
};

type VsDoc = Doc<VirtualService>;

pub(super) fn check(doc: &VsDoc, refs: &References, report: &mut Report) {
    let vs = &doc.spec;
    let hosts = spec().key("hosts");
    if vs.hosts.is_empty() {
        report.error(doc, &hosts, "a VirtualService needs at least one host");
    }
    for (i, host) in vs.hosts.iter().enumerate() {
        let result = if host.contains('/') {
            Err(format!(
                "host {host:?}: VirtualService hosts take no namespace"
            ))
        } else {
            check_host_pattern(host)
        };
        if let Err(e) = result {
            report.error(doc, &hosts.index(i), e);
        }
    }

    let gateways = check_gateway_refs(doc, &vs.gateways, &spec().key("gateways"), refs, report);
    check_host_binding(doc, &gateways, report);

    let has_protocol = |p: &dyn Fn(ListenerProtocol) -> bool| {
        gateways.iter().any(|g| {
            g.spec
                .servers
                .iter()
                .any(|s| s.port.listener_protocol().is_some_and(p))
        })
    };
    let terminates_http = |p| {
        matches!(
            p,
            ListenerProtocol::Http | ListenerProtocol::Http2 | ListenerProtocol::Https
        )
    };
    if !vs.http.is_empty() && !gateways.is_empty() && !has_protocol(&terminates_http) {
        report.warn(
            doc,
            &spec().key("http"),
            "http routes are used only on HTTP/HTTP2 servers, and none of the bound gateways \
             has one; ignored",
        );
    }
    if !vs.tcp.is_empty()
        && !gateways.is_empty()
        && !has_protocol(&|p| matches!(p, ListenerProtocol::Tcp | ListenerProtocol::Tls))
    {
        report.warn(
            doc,
            &spec().key("tcp"),
            "tcp routes are used only on TCP servers, and none of the bound gateways has one; \
             ignored",
        );
    }
    for (i, route) in vs.tls.iter().enumerate() {
        check_tls_route(
            doc,
            &spec().key("tls").index(i),
            route,
            &gateways,
            refs,
            report,
        );
    }

    for (i, route) in vs.http.iter().enumerate() {
        check_http_route(
            doc,
            &spec().key("http").index(i),
            route,
            &gateways,
            refs,
            report,
        );
    }
    for (i, route) in vs.tcp.iter().enumerate() {
        check_tcp_route(
            doc,
            &spec().key("tcp").index(i),
            route,
            &gateways,
            refs,
            report,
        );
    }
}

/// Resolve `gateways:` entries; unknown names are errors (`mesh` is the sidecars'). Returns the
/// Gateways found.
fn check_gateway_refs<'a>(
    doc: &VsDoc,
    list: &[String],
    path: &FieldPath,
    refs: &References<'a>,
    report: &mut Report,
) -> Vec<&'a Doc<Gateway>> {
    let ns = doc.metadata.namespace_or_default();
    let mut found = Vec::new();
    for (i, reference) in list.iter().enumerate() {
        let at = path.index(i);
        match GatewayRef::parse(ns, reference) {
            // Served by sidecars (`warden proxy --mode sidecar`).
            GatewayRef::Mesh => {}
            GatewayRef::Named { namespace, name } if namespace.is_empty() || name.is_empty() => {
                report.error(
                    doc,
                    &at,
                    format!("{reference:?} is not a gateway reference (name or namespace/name)"),
                );
            }
            named => {
                let matches: Vec<_> = refs
                    .set
                    .gateways
                    .iter()
                    .filter(|g| gateway_matches(ns, reference, g))
                    .collect();
                if matches.is_empty() && refs.check_gateways {
                    // Istio binds nothing to a missing Gateway and `istioctl analyze` warns.
                    let known: Vec<String> = refs
                        .set
                        .gateways
                        .iter()
                        .map(|g| {
                            format!("{}/{}", g.metadata.namespace_or_default(), g.metadata.name)
                        })
                        .collect();
                    report.warn_coded(
                        doc,
                        &at,
                        Code::ReferencedResourceNotFound,
                        format!(
                            "Referenced gateway not found: {reference:?} ({named}; defined: {})",
                            if known.is_empty() {
                                "none".to_owned()
                            } else {
                                known.join(", ")
                            }
                        ),
                    );
                }
                found.extend(matches);
            }
        }
    }
    found
}

/// A VirtualService binds to a Gateway only for hosts the Gateway's servers admit.
fn check_host_binding(doc: &VsDoc, gateways: &[&Doc<Gateway>], report: &mut Report) {
    let ns = doc.metadata.namespace_or_default();
    for g in gateways {
        let gw_ns = g.metadata.namespace_or_default();
        let admitted = g.spec.servers.iter().any(|s| {
            s.hosts.iter().any(|sh| {
                doc.spec
                    .hosts
                    .iter()
                    .any(|h| server_host_admits(sh, gw_ns, ns, h))
            })
        });
        if !admitted && !doc.spec.hosts.is_empty() {
            let server_hosts: Vec<&str> = g
                .spec
                .servers
                .iter()
                .flat_map(|s| s.hosts.iter().map(String::as_str))
                .collect();
            report.warn_coded(
                doc,
                &spec().key("hosts"),
                Code::VirtualServiceHostNotFoundInGateway,
                format!(
                    "one or more host [{}] defined in VirtualService {ns}/{} not found in \
                     Gateway {gw_ns}/{}. (server hosts: {}; not bound to it)",
                    doc.spec.hosts.join(" "),
                    doc.metadata.name,
                    g.metadata.name,
                    server_hosts.join(", ")
                ),
            );
        }
    }
}

fn check_http_route(
    doc: &VsDoc,
    at: &FieldPath,
    route: &HttpRoute,
    gateways: &[&Doc<Gateway>],
    refs: &References,
    report: &mut Report,
) {
    for (i, m) in route.matches.iter().enumerate() {
        check_http_match(doc, &at.key("match").index(i), m, gateways, refs, report);
    }
    let actions = [
        route.direct_response.is_some(),
        !route.route.is_empty(),
        route.redirect.is_some(),
    ]
    .iter()
    .filter(|a| **a)
    .count();
    if actions > 1 {
        report.error(
            doc,
            at,
            "an http route takes one of `route`, `redirect` and `directResponse`",
        );
    } else if actions == 0 {
        report.error(
            doc,
            at,
            "an http route needs `route` (destinations), `redirect` or `directResponse`",
        );
    }
    if let Some(r) = &route.redirect {
        check_redirect(doc, &at.key("redirect"), r, report);
    }
    if let Some(rw) = &route.rewrite {
        let path = at.key("rewrite");
        if rw.uri.is_some() && rw.uri_regex_rewrite.is_some() {
            report.error(doc, &path, "rewrite takes uri or uriRegexRewrite, not both");
        }
        if let Some(rr) = &rw.uri_regex_rewrite {
            if let Err(e) = regex::Regex::new(&rr.pattern) {
                report.error(
                    doc,
                    &path.key("uriRegexRewrite").key("match"),
                    format!("invalid regex: {e}"),
                );
            }
        }
        if route.route.is_empty() {
            report.error(doc, &path, "rewrite applies to routes with destinations");
        }
    }
    check_mirrors(doc, at, route, refs, report);
    if let Some(c) = &route.cors_policy {
        check_cors(doc, &at.key("corsPolicy"), c, report);
    }
    if let Some(dr) = &route.direct_response {
        let path = at.key("directResponse");
        if !(200..=599).contains(&dr.status) {
            report.error(
                doc,
                &path.key("status"),
                format!("status {} is not in 200..=599", dr.status),
            );
        }
        if let Some(body) = &dr.body {
            check_body(doc, &path.key("body"), body, report);
        }
    }
    let weights: Vec<Option<u32>> = route.route.iter().map(|r| r.weight).collect();
    check_weights(doc, &at.key("route"), &weights, report);
    for (i, dest) in route.route.iter().enumerate() {
        let d = at.key("route").index(i);
        check_destination(doc, &d.key("destination"), &dest.destination, refs, report);
        if let Some(h) = &dest.headers {
            check_headers(doc, &d.key("headers"), h, report);
        }
    }
    if let Some(h) = &route.headers {
        check_headers(doc, &at.key("headers"), h, report);
    }
    if let Some(f) = &route.fault {
        check_fault(doc, &at.key("fault"), f, report);
    }
    if let Some(t) = &route.timeout {
        check_duration(doc, &at.key("timeout"), t, report);
    }
    if let Some(r) = &route.retries {
        let path = at.key("retries");
        if let Some(t) = &r.per_try_timeout {
            let p = path.key("perTryTimeout");
            check_positive_duration(doc, &p, "perTryTimeout", t, report);
        }
        if let Some(on) = &r.retry_on {
            for cond in on.split(',').map(str::trim) {
                let known = RETRY_ON.contains(&cond)
                    || cond.parse::<u16>().is_ok_and(|c| (100..=599).contains(&c));
                if !known {
                    report.error(
                        doc,
                        &path.key("retryOn"),
                        format!(
                            "unknown retry condition {cond:?} (an HTTP status or one of {})",
                            RETRY_ON.join(", ")
                        ),
                    );
                }
            }
        }
    }
}

/// Envoy `retry_on` policies Istio accepts in `retries.retryOn`.
const RETRY_ON: &[&str] = &[
    "5xx",
    "gateway-error",
    "reset",
    "reset-before-request",
    "connect-failure",
    "envoy-ratelimited",
    "retriable-4xx",
    "refused-stream",
    "retriable-status-codes",
    "retriable-headers",
    "http3-post-connect-failure",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

fn check_redirect(
    doc: &VsDoc,
    at: &FieldPath,
    r: &crate::kinds::virtual_service::HttpRedirect,
    report: &mut Report,
) {
    if r.port.is_some() && r.derive_port.is_some() {
        report.error(
            doc,
            &at.key("derivePort"),
            "redirect takes port or derivePort, not both",
        );
    }
    if let Some(d) = &r.derive_port {
        if !matches!(d.as_str(), "FROM_PROTOCOL_DEFAULT" | "FROM_REQUEST_PORT") {
            report.error(
                doc,
                &at.key("derivePort"),
                format!("unknown derivePort {d:?} (FROM_PROTOCOL_DEFAULT or FROM_REQUEST_PORT)"),
            );
        }
    }
    if let Some(code) = r.redirect_code {
        if !matches!(code, 301 | 302 | 303 | 307 | 308) {
            report.error(
                doc,
                &at.key("redirectCode"),
                format!("redirectCode {code} is not a redirect (301, 302, 303, 307, 308)"),
            );
        }
    }
    if let Some(s) = &r.scheme {
        if s != "http" && s != "https" {
            report.error(
                doc,
                &at.key("scheme"),
                format!("scheme {s:?} must be http or https"),
            );
        }
    }
    if r.uri.as_deref().is_some_and(|u| !u.starts_with('/')) {
        report.error(doc, &at.key("uri"), "uri must start with '/'");
    }
}

fn check_percent(doc: &VsDoc, at: &FieldPath, p: &Percent, report: &mut Report) {
    if !(0.0..=100.0).contains(&p.value) || p.value.is_nan() {
        report.error(
            doc,
            &at.key("value"),
            format!("percentage {} must be between 0 and 100", p.value),
        );
    }
}

/// `mirror` (+ `mirrorPercentage` / `mirrorPercent`) or `mirrors[]`, on routes with destinations.
fn check_mirrors(
    doc: &VsDoc,
    at: &FieldPath,
    route: &HttpRoute,
    refs: &References,
    report: &mut Report,
) {
    let single = route.mirror.is_some();
    if single && !route.mirrors.is_empty() {
        report.error(
            doc,
            &at.key("mirrors"),
            "a route takes mirror or mirrors, not both",
        );
    }
    if !single && (route.mirror_percentage.is_some() || route.mirror_percent.is_some()) {
        let field = if route.mirror_percentage.is_some() {
            "mirrorPercentage"
        } else {
            "mirrorPercent"
        };
        report.error(doc, &at.key(field), format!("{field} needs mirror"));
    }
    if (single || !route.mirrors.is_empty()) && route.route.is_empty() {
        report.error(
            doc,
            &at.key(if single { "mirror" } else { "mirrors" }),
            "mirroring applies to routes with destinations",
        );
    }
    if let Some(m) = &route.mirror {
        check_destination(doc, &at.key("mirror"), m, refs, report);
    }
    if let Some(p) = &route.mirror_percentage {
        check_percent(doc, &at.key("mirrorPercentage"), p, report);
    }
    if route.mirror_percent.is_some_and(|p| p > 100) {
        report.error(
            doc,
            &at.key("mirrorPercent"),
            "mirrorPercent must be between 0 and 100",
        );
    }
    for (i, m) in route.mirrors.iter().enumerate() {
        let at = at.key("mirrors").index(i);
        check_destination(doc, &at.key("destination"), &m.destination, refs, report);
        if let Some(p) = &m.percentage {
            check_percent(doc, &at.key("percentage"), p, report);
        }
    }
}

fn check_cors(doc: &VsDoc, at: &FieldPath, c: &CorsPolicy, report: &mut Report) {
    for (i, m) in c.allow_origins.iter().enumerate() {
        check_string_match(doc, &at.key("allowOrigins").index(i), m, report);
    }
    for (i, m) in c.allow_methods.iter().enumerate() {
        if check_header_name(m).is_err() {
            report.error(
                doc,
                &at.key("allowMethods").index(i),
                format!("{m:?} is not an HTTP method"),
            );
        }
    }
    for (field, names) in [
        ("allowHeaders", &c.allow_headers),
        ("exposeHeaders", &c.expose_headers),
    ] {
        for (i, h) in names.iter().enumerate() {
            if let Err(e) = check_header_name(h) {
                report.error(doc, &at.key(field).index(i), e);
            }
        }
    }
    if let Some(t) = &c.max_age {
        check_duration(doc, &at.key("maxAge"), t, report);
    }
    if let Some(u) = &c.unmatched_preflights {
        if !matches!(u.as_str(), "FORWARD" | "IGNORE" | "UNSPECIFIED") {
            report.error(
                doc,
                &at.key("unmatchedPreflights"),
                format!("unknown unmatchedPreflights {u:?} (FORWARD or IGNORE)"),
            );
        }
    }
}

fn check_fault(doc: &VsDoc, at: &FieldPath, fault: &HttpFault, report: &mut Report) {
    let share = |report: &mut Report, at: FieldPath, p: Option<&Percent>| {
        if let Some(p) = p {
            check_percent(doc, &at, p, report);
        }
    };
    if fault.delay.is_none() && fault.abort.is_none() {
        report.error(doc, at, "a fault needs delay or abort");
    }
    if let Some(d) = &fault.delay {
        let at = at.key("delay");
        match (&d.fixed_delay, &d.exponential_delay) {
            (Some(t), _) => {
                check_duration(doc, &at.key("fixedDelay"), t, report);
            }
            (None, Some(_)) => report.error(
                doc,
                &at.key("exponentialDelay"),
                "exponentialDelay is not supported; use fixedDelay",
            ),
            (None, None) => report.error(doc, &at.key("fixedDelay"), "a delay needs fixedDelay"),
        }
        share(report, at.key("percentage"), d.percentage.as_ref());
        if d.percent.is_some_and(|p| p > 100) {
            report.error(doc, &at.key("percent"), "percent must be between 0 and 100");
        }
    }
    if let Some(a) = &fault.abort {
        let at = at.key("abort");
        match a.http_status {
            Some(code) if !(200..=599).contains(&code) => report.error(
                doc,
                &at.key("httpStatus"),
                format!("httpStatus {code} must be 200..=599"),
            ),
            Some(_) => {}
            None if a.grpc_status.is_some() || a.http2_error.is_some() => report.error(
                doc,
                &at,
                "only httpStatus aborts are supported (not grpcStatus or http2Error)",
            ),
            None => report.error(doc, &at.key("httpStatus"), "an abort needs httpStatus"),
        }
        share(report, at.key("percentage"), a.percentage.as_ref());
    }
}

fn check_http_match(
    doc: &VsDoc,
    at: &FieldPath,
    m: &HttpMatchRequest,
    gateways: &[&Doc<Gateway>],
    refs: &References,
    report: &mut Report,
) {
    for (field, sm) in [
        ("uri", &m.uri),
        ("method", &m.method),
        ("authority", &m.authority),
        ("scheme", &m.scheme),
    ] {
        if let Some(sm) = sm {
            check_string_match(doc, &at.key(field), sm, report);
        }
    }
    for (name, sm) in &m.headers {
        let path = at.key("headers").key(name.clone());
        if let Err(e) = check_header_name(name) {
            report.error(doc, &path, e);
        }
        check_string_match(doc, &path, sm, report);
    }
    for (name, sm) in &m.without_headers {
        let path = at.key("withoutHeaders").key(name.clone());
        if let Err(e) = check_header_name(name) {
            report.error(doc, &path, e);
        }
        check_string_match(doc, &path, sm, report);
    }
    for (name, sm) in &m.query_params {
        let path = at.key("queryParams").key(name.clone());
        if name.is_empty() {
            report.error(doc, &path, "a query parameter needs a name");
        }
        check_string_match(doc, &path, sm, report);
    }
    let own = check_gateway_refs(doc, &m.gateways, &at.key("gateways"), refs, report);
    check_match_port(doc, &at.key("port"), m.port, gateways, &own, report);
}

/// A `match.port` selects a listener port; one no bound gateway listens on never matches.
fn check_match_port(
    doc: &VsDoc,
    at: &FieldPath,
    port: Option<u16>,
    gateways: &[&Doc<Gateway>],
    own: &[&Doc<Gateway>],
    report: &mut Report,
) {
    let Some(port) = port else { return };
    if port == 0 {
        report.error(doc, at, "port must be 1..=65535");
        return;
    }
    let scope = if own.is_empty() { gateways } else { own };
    let listened = scope
        .iter()
        .any(|g| g.spec.servers.iter().any(|s| s.port.number == port));
    if !scope.is_empty() && !listened {
        report.warn(
            doc,
            at,
            format!(
                "no server of the bound gateways listens on port {port}; this match never applies"
            ),
        );
    }
}

fn check_string_match(doc: &VsDoc, at: &FieldPath, sm: &StringMatch, report: &mut Report) {
    let set = [&sm.exact, &sm.prefix, &sm.regex]
        .iter()
        .filter(|v| v.is_some())
        .count();
    if set != 1 {
        report.error(
            doc,
            at,
            format!("needs exactly one of exact, prefix or regex ({set} set)"),
        );
    }
    if let Some(re) = &sm.regex {
        if let Err(e) = regex::Regex::new(&anchored_regex(re)) {
            report.error(doc, &at.key("regex"), format!("invalid regex {re:?}: {e}"));
        }
    }
}

fn check_body(doc: &VsDoc, at: &FieldPath, body: &HttpBody, report: &mut Report) {
    if let Err(e) = body.to_bytes() {
        let path = if body.string.is_none() && body.bytes.is_some() {
            at.key("bytes")
        } else {
            at.clone()
        };
        report.error(doc, &path, e);
    }
}

fn check_headers(doc: &VsDoc, at: &FieldPath, headers: &Headers, report: &mut Report) {
    for (field, ops) in [
        ("request", &headers.request),
        ("response", &headers.response),
    ] {
        if let Some(ops) = ops {
            check_header_ops(doc, &at.key(field), ops, report);
        }
    }
}

fn check_header_ops(doc: &VsDoc, at: &FieldPath, ops: &HeaderOperations, report: &mut Report) {
    for (field, map) in [("set", &ops.set), ("add", &ops.add)] {
        for (name, value) in map {
            let path = at.key(field).key(name.clone());
            if let Err(e) = check_header_name(name) {
                report.error(doc, &path, e);
            }
            if value.contains(['\r', '\n', '\0']) {
                report.error(doc, &path, "a header value must not contain CR, LF or NUL");
            }
        }
    }
    for (i, name) in ops.remove.iter().enumerate() {
        if let Err(e) = check_header_name(name) {
            report.error(doc, &at.key("remove").index(i), e);
        }
    }
}

/// One destination takes all traffic; with several, each needs a weight and the sum must be
/// positive (weights are relative, like Envoy's weighted clusters; they need not sum to 100).
fn check_weights(doc: &VsDoc, at: &FieldPath, weights: &[Option<u32>], report: &mut Report) {
    if weights.len() < 2 {
        return;
    }
    let mut complete = true;
    for (i, w) in weights.iter().enumerate() {
        if w.is_none() {
            complete = false;
            report.error(
                doc,
                &at.index(i).key("weight"),
                "with several destinations, every destination needs a weight",
            );
        }
    }
    let sum: u64 = weights.iter().flatten().map(|w| u64::from(*w)).sum();
    if complete && sum == 0 {
        report.error(doc, at, "the destinations' weights sum to 0");
    }
}

/// Whether the VirtualService binds to a Gateway (not only to `mesh`).
fn has_gateway(doc: &VsDoc) -> bool {
    let ns = doc.metadata.namespace_or_default();
    doc.spec
        .gateways
        .iter()
        .any(|g| !matches!(GatewayRef::parse(ns, g), GatewayRef::Mesh))
}

fn check_destination(
    doc: &VsDoc,
    at: &FieldPath,
    dest: &Destination,
    refs: &References,
    report: &mut Report,
) {
    if dest.host.is_empty() {
        report.error(doc, &at.key("host"), "host is required");
        return;
    }
    if dest.port.as_ref().is_some_and(|p| p.number == 0) {
        report.error(doc, &at.key("port").key("number"), "port must be 1..=65535");
        return;
    }
    // What follows are references: Istio accepts a route whose host, subset or port nothing
    // defines (the route gets 503) and `istioctl analyze` warns, so warden does the same.
    let ns = doc.metadata.namespace_or_default();
    let service = refs.set.service_in(&dest.host, ns);
    if service.is_none() && refs.check_service_entries {
        report.dangling(
            doc,
            at,
            &at.key("host"),
            &dest.host,
            DanglingReason::Host,
            None,
        );
        return;
    }
    if let Some(subset) = &dest.subset {
        let full = crate::mesh_registry::expand_host(&dest.host, ns);
        let rule = refs.set.destination_rule_for_host(&full);
        let missing = rule.is_none_or(|dr| dr.spec.subset(subset).is_none());
        if missing && refs.check_destination_rules {
            let hint = rule.map(|dr| {
                let known: Vec<&str> = dr.spec.subsets.iter().map(|s| s.name.as_str()).collect();
                match known.is_empty() {
                    true => format!("{} has no subsets", dr.id()),
                    false => format!("{} has subsets: {}", dr.id(), known.join(", ")),
                }
            });
            report.dangling(
                doc,
                at,
                &at.key("subset"),
                &dest.host,
                DanglingReason::Subset(subset.clone()),
                hint,
            );
            return;
        }
    }
    let Some(se) = service else { return };
    let numbers: Vec<u16> = se.spec.ports.iter().map(|p| p.number).collect();
    match &dest.port {
        Some(p) if se.spec.port(Some(p.number)).is_none() => report.dangling(
            doc,
            at,
            &at.key("port").key("number"),
            &dest.host,
            DanglingReason::Port(p.number),
            Some(format!("{} has ports: {}", se.id(), ports_text(&numbers))),
        ),
        // A sidecar routes to the port the request came to; a gateway needs it spelled out.
        None if numbers.len() > 1 && has_gateway(doc) => report.dangling(
            doc,
            at,
            &at.key("port"),
            &dest.host,
            DanglingReason::PortRequired(numbers),
            None,
        ),
        _ => {}
    }
}

fn ports_text(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A PASSTHROUGH route: every match names the SNI hosts it takes (Istio requires them).
fn check_tls_route(
    doc: &VsDoc,
    at: &FieldPath,
    route: &crate::kinds::virtual_service::TlsRoute,
    gateways: &[&Doc<Gateway>],
    refs: &References,
    report: &mut Report,
) {
    if route.matches.is_empty() {
        report.error(
            doc,
            &at.key("match"),
            "a tls route needs a match with sniHosts",
        );
    }
    for (i, m) in route.matches.iter().enumerate() {
        let path = at.key("match").index(i);
        if m.sni_hosts.is_empty() {
            report.error(
                doc,
                &path.key("sniHosts"),
                "a tls match needs at least one SNI host",
            );
        }
        for (h, host) in m.sni_hosts.iter().enumerate() {
            if let Err(e) = crate::hosts::check_host_pattern(host) {
                report.error(doc, &path.key("sniHosts").index(h), e);
            }
        }
        let own = check_gateway_refs(doc, &m.gateways, &path.key("gateways"), refs, report);
        check_match_port(doc, &path.key("port"), m.port, gateways, &own, report);
    }
    check_l4_destinations(doc, at, &route.route, "tls", refs, report);
}

fn check_tcp_route(
    doc: &VsDoc,
    at: &FieldPath,
    route: &TcpRoute,
    gateways: &[&Doc<Gateway>],
    refs: &References,
    report: &mut Report,
) {
    for (i, m) in route.matches.iter().enumerate() {
        let path = at.key("match").index(i);
        let own = check_gateway_refs(doc, &m.gateways, &path.key("gateways"), refs, report);
        check_match_port(doc, &path.key("port"), m.port, gateways, &own, report);
    }
    check_l4_destinations(doc, at, &route.route, "tcp", refs, report);
}

/// A tcp or tls route's `route`: at least one destination, weights, each destination.
fn check_l4_destinations(
    doc: &VsDoc,
    at: &FieldPath,
    route: &[crate::kinds::virtual_service::RouteDestination],
    kind: &str,
    refs: &References,
    report: &mut Report,
) {
    if route.is_empty() {
        report.error(
            doc,
            &at.key("route"),
            format!("a {kind} route needs at least one destination"),
        );
    }
    let weights: Vec<Option<u32>> = route.iter().map(|r| r.weight).collect();
    check_weights(doc, &at.key("route"), &weights, report);
    for (i, dest) in route.iter().enumerate() {
        let path = at.key("route").index(i).key("destination");
        check_destination(doc, &path, &dest.destination, refs, report);
    }
}
