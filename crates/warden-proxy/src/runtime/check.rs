//! `warden check`: what a config would run, as text (listeners, routes, upstreams, policies).

use crate::routing::RouteAction;
use crate::routing::RouteTable;
use crate::snapshot::{ListenerProtocol, PortRoutes, SidecarRoutes, Snapshot, TcpRoute};
use std::fmt::Write;
use warden_config::mesh_config::ProxyConfig as MeshDefaults;

/// A human-readable summary of a compiled snapshot.
pub fn describe(s: &Snapshot) -> String {
    describe_with(s, &MeshDefaults::default())
}

/// [`describe`] with the mesh config's `defaultConfig` (`gatewayTopology`, `proxyHeaders`).
pub fn describe_with(s: &Snapshot, mesh: &MeshDefaults) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "listeners ({}):", s.listeners.len());
    for (l, routes) in s.listeners.iter().zip(&s.ports) {
        match routes {
            PortRoutes::Http(t) => {
                let _ = writeln!(
                    out,
                    "  {} port {} HTTP (h1 + h2c): {} virtual host(s), {} route(s)",
                    l.name,
                    l.port,
                    t.vhosts.len(),
                    t.route_count()
                );
            }
            PortRoutes::Tcp(_) if l.protocol == ListenerProtocol::Captured => {
                let _ = writeln!(
                    out,
                    "  {} port {} {:?}: captured connections, by original destination",
                    l.name, l.port, l.side
                );
            }
            PortRoutes::Tcp(r) => {
                let target =
                    r.as_ref()
                        .map_or("no tcp route (connections are closed)".to_string(), |r| {
                            let names: Vec<&str> =
                                r.clusters.iter().map(|(c, _)| c.name.as_str()).collect();
                            format!("{} -> {}", r.name, names.join(", "))
                        });
                let _ = writeln!(out, "  {} port {} TCP: {}", l.name, l.port, target);
            }
            PortRoutes::Tls(t) => {
                let _ = writeln!(
                    out,
                    "  {} port {} TLS (by SNI): {} server(s), {} virtual host(s), {} route(s), \
                     {} SNI route(s){}",
                    l.name,
                    l.port,
                    t.servers.len(),
                    t.http.vhosts.len(),
                    t.http.route_count(),
                    t.passthrough.len(),
                    if t.tcp.is_some() { ", a tcp route" } else { "" }
                );
                for server in &t.servers {
                    let what = match &server.action {
                        crate::snapshot::TlsAction::Passthrough => "PASSTHROUGH",
                        crate::snapshot::TlsAction::Terminate { mutual, http, .. } => {
                            match (*mutual, *http) {
                                (true, true) => "terminate (client certificates), HTTP",
                                (true, false) => "terminate (client certificates), TCP",
                                (false, true) => "terminate, HTTP",
                                (false, false) => "terminate, TCP",
                            }
                        }
                    };
                    let _ = writeln!(out, "    [{}]: {what}", server.hosts.join(", "));
                }
            }
        }
    }
    describe_gateways(&mut out, s);
    if let Ok(t) = crate::runtime::gateway_topology::resolve(s, mesh, None, None) {
        out.push_str(&t.describe(s.sidecar.is_some()));
    }
    let _ = writeln!(out, "routes:");
    for (l, routes) in s.listeners.iter().zip(&s.ports) {
        match routes {
            PortRoutes::Http(t) => describe_table(&mut out, &format!("port {}", l.port), t),
            PortRoutes::Tls(t) => {
                describe_table(&mut out, &format!("port {} (TLS)", l.port), &t.http)
            }
            PortRoutes::Tcp(_) => {}
        }
    }
    if let Some(sidecar) = &s.sidecar {
        describe_sidecar(&mut out, sidecar);
    }
    let _ = writeln!(out, "upstreams ({}):", s.clusters.len());
    for c in s.clusters.values() {
        let eps: Vec<String> = c
            .endpoints
            .iter()
            .map(|e| e.authority.to_string())
            .collect();
        let mut limit = if c.max_requests == u32::MAX {
            String::new()
        } else {
            format!(", max {} in flight", c.max_requests)
        };
        if let Some(n) = c.reuse.max_requests {
            let _ = write!(limit, ", max {n} request(s)/connection");
        }
        if let Some(t) = c.reuse.idle_timeout {
            let _ = write!(limit, ", idle timeout {t:?}");
        }
        if let Some(o) = &c.outlier {
            let p = &o.policy;
            let _ = write!(
                limit,
                ", outlier ejection after {} consecutive 5xx / {} gateway errors for {:?} x times, max {}% out",
                p.consecutive_5xx, p.consecutive_gateway, p.base_ejection, p.max_ejection_percent
            );
        }
        if c.missing {
            limit.push_str(", not defined by the config (its routes answer 503, response flag NC)");
        }
        if c.original_dst {
            // Only a sidecar's captured connections have one.
            let _ = write!(
                limit,
                ", ORIGINAL_DST (resolution NONE: each connection's original destination{})",
                if s.sidecar.is_some() {
                    ""
                } else {
                    "; a gateway has none, so its requests get 503 UH"
                }
            );
        }
        let _ = writeln!(
            out,
            "  {} {:?} {:?} {} endpoint(s) [{}]{}",
            c.name,
            c.protocol,
            c.lb,
            eps.len(),
            eps.join(", "),
            limit
        );
    }
    let _ = writeln!(
        out,
        "policies: {} AuthorizationPolicy, {} RateLimitPolicy, {} EnvoyFilter; active stages: [{}]",
        s.config.authorization_policies.len(),
        s.config.rate_limit_policies.len(),
        s.config.envoy_filters.len(),
        s.filters.stage_names().join(", ")
    );
    describe_jwt(&mut out, s);
    if let Some(f) = &s.filters.ext_authz {
        let _ = writeln!(out, "external authorization (CUSTOM): {}", f.describe());
    }
    describe_rate_limits(&mut out, s);
    if let Some(t) = &s.tracing {
        let _ = writeln!(out, "tracing: {}", t.describe());
    }
    let api = &s.config.gateway_api;
    if !api.status.is_empty() {
        // The conditions a Gateway API controller would set, so a user sees why a route is
        // not attached (warden_config::gateway_api::status).
        let _ = writeln!(out, "gateway API status ({}):", api.status.len());
        out.push_str(&api.describe_status());
    }
    if !s.warnings.is_empty() {
        let _ = writeln!(out, "warnings ({}):", s.warnings.len());
        for w in &s.warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    out
}

/// RequestAuthentication of this workload: the policies, each issuer and where its keys come
/// from; and the policies that key on identities (request principals, `request.auth.*`,
/// claims, jwt_authn metadata).
fn describe_jwt(out: &mut String, s: &Snapshot) {
    if let Some(f) = &s.filters.jwt_authn {
        let _ = writeln!(out, "request authentication ({}):", f.policies.join(", "));
        for line in f.authn.describe() {
            let _ = writeln!(out, "  issuer {line}");
        }
        if f.remote_keys().next().is_some() {
            let _ = writeln!(
                out,
                "  jwksUri keys are fetched at start and refreshed; until a first set arrives, \
                 tokens of that issuer get 401 \"{}\" (requests without a token pass)",
                warden_jwt::Status::JwksFetchFail.message()
            );
        }
    }
    let users = identity_users(s);
    if !users.is_empty() {
        let _ = writeln!(out, "identities used by: {}", users.join("; "));
        if s.filters.jwt_authn.is_none() {
            let _ = writeln!(
                out,
                "  no RequestAuthentication selects this workload: no request has a principal \
                 or claims"
            );
        }
    }
}

/// The policies of this workload that read the request's JWT identity, with what they read.
fn identity_users(s: &Snapshot) -> Vec<String> {
    let set = &s.config;
    let scope = crate::filters::authz::proxy_scope(set, &s.identity);
    let mut out = Vec::new();
    for doc in set
        .authorization_policies
        .iter()
        .filter(|d| scope.selects(d))
    {
        let mut what: Vec<String> = Vec::new();
        for rule in &doc.spec.rules {
            for src in rule.from.iter().filter_map(|f| f.source.as_ref()) {
                if !src.request_principals.is_empty() {
                    what.push("requestPrincipals".into());
                }
                if !src.not_request_principals.is_empty() {
                    what.push("notRequestPrincipals".into());
                }
            }
            for c in &rule.when {
                if c.key.trim().starts_with("request.auth.") {
                    what.push(c.key.trim().to_owned());
                }
            }
        }
        what.dedup();
        if !what.is_empty() {
            out.push(format!("{} ({})", doc.id(), what.join(", ")));
        }
    }
    for doc in &set.rate_limit_policies {
        let spec = serde_json::to_string(&doc.spec).unwrap_or_default();
        if spec.contains("\"claims\":[{") {
            out.push(format!("{} (claims)", doc.id()));
        }
    }
    for doc in &set.envoy_filters {
        let spec = serde_json::to_string(&doc.spec).unwrap_or_default();
        if spec.contains(warden_local_ratelimit::request::JWT_AUTHN_METADATA) {
            out.push(format!("{} (jwt_authn metadata)", doc.id()));
        }
    }
    out
}

/// Which Gateways this proxy serves and which it skips, and why (their `selector`).
fn describe_gateways(out: &mut String, s: &Snapshot) {
    if s.sidecar.is_some() || (s.config.gateways.is_empty() && s.skipped_gateways.is_empty()) {
        return;
    }
    let served: Vec<String> = s
        .config
        .gateways
        .iter()
        .map(|g| format!("{}/{}", g.metadata.namespace_or_default(), g.metadata.name))
        .collect();
    let labels: Vec<String> = s
        .identity
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let whose = if labels.is_empty() {
        "no labels: every Gateway".to_owned()
    } else {
        format!("labels {{{}}}", labels.join(", "))
    };
    let _ = writeln!(
        out,
        "gateways served ({}, this proxy has {whose}): {}",
        served.len(),
        if served.is_empty() {
            "none".to_owned()
        } else {
            served.join(", ")
        }
    );
    for (id, why) in &s.skipped_gateways {
        let _ = writeln!(out, "  skipped {id}: {why}");
    }
}

/// Whether warning `w` fails `warden check --strict` (Istio's `--failure-threshold Warning`):
/// every warning does but the two that report a choice rather than a problem, kinds the
/// operator skipped on the command line and objects warden does not read.
pub fn fails_strict(w: &warden_config::Problem) -> bool {
    use warden_config::Code;
    !matches!(w.code, Some(Code::KindSkipped | Code::KindIgnored))
}

/// Where the global limiter's RLS is (the address each reference resolves to) and which
/// routes the EnvoyFilter route patches landed on.
fn describe_rate_limits(out: &mut String, s: &Snapshot) {
    let global = s.filters.global_rate_limit.as_ref();
    if let Some(g) = global {
        match &g.rls_target {
            Some(t) => {
                let _ = writeln!(
                    out,
                    "rate limit service: {} -> {} ({})",
                    t.reference, t.address, t.via
                );
            }
            None => {
                let _ = writeln!(out, "rate limit service: embedded (in process, memory)");
            }
        }
    }
    let local = s.filters.local_rate_limit.as_ref().map(|l| &l.landings);
    let landings: Vec<&String> = global
        .map(|g| &g.landings)
        .into_iter()
        .chain(local)
        .flatten()
        .collect();
    if !landings.is_empty() {
        let _ = writeln!(out, "rate limit route patches ({}):", landings.len());
        for l in landings {
            let _ = writeln!(out, "  {l}");
        }
    }
    if !s.filters.lua.is_empty() {
        let _ = writeln!(
            out,
            "lua filters ({}), every script compiled:",
            s.filters.lua.len()
        );
        for f in &s.filters.lua {
            let _ = writeln!(out, "  {}", f.described());
        }
        let _ = writeln!(
            out,
            "http filter chain: {} -> envoy.filters.http.router",
            s.filters.chain_names().join(" -> ")
        );
    }
}

/// A table's virtual hosts and their routes, under `label` (`port 80`, `outbound port 9080`).
fn describe_table(out: &mut String, label: &str, t: &RouteTable) {
    for vh in &t.vhosts {
        let _ = writeln!(out, "  {label} host {}:", vh.domains.join(", "));
        for r in &vh.routes {
            let action = match &r.action {
                RouteAction::Direct { status, body, .. } => {
                    format!("direct response {} ({} bytes)", status.as_u16(), body.len())
                }
                RouteAction::Redirect(r) => format!("redirect {}", r.status.as_u16()),
                RouteAction::Forward {
                    clusters, timeout, ..
                } => {
                    let targets: Vec<String> = clusters
                        .iter()
                        .map(|c| format!("{} ({}%)", c.cluster.name, c.weight))
                        .collect();
                    let t = timeout.map_or(String::new(), |t| format!(", timeout {t:?}"));
                    format!("-> {}{t}", targets.join(", "))
                }
            };
            let _ = writeln!(
                out,
                "    {} [{} match(es)] {}",
                r.name,
                r.matches.len(),
                action
            );
        }
    }
}

fn tcp_targets(r: &TcpRoute) -> String {
    let names: Vec<&str> = r.clusters.iter().map(|(c, _)| c.name.as_str()).collect();
    format!("{} -> {}", r.name, names.join(", "))
}

/// A sidecar's outbound HTTP ports, TCP destinations, policy and inbound ports.
fn describe_sidecar(out: &mut String, s: &SidecarRoutes) {
    let mut ports: Vec<_> = s.outbound_http_tables().collect();
    ports.sort_by_key(|(p, _)| *p);
    for (port, table) in ports {
        describe_table(out, &format!("outbound port {port}"), table);
    }
    let mut tcp: Vec<_> = s.outbound_tcp_routes().collect();
    tcp.sort_by_key(|(dst, _)| *dst);
    for (dst, route) in tcp {
        let _ = writeln!(out, "  outbound {dst} TCP: {}", tcp_targets(route));
    }
    let _ = writeln!(
        out,
        "  outbound unknown destinations: {:?}",
        s.outbound_mode
    );
    let mut inbound: Vec<_> = s.inbound_protocols().collect();
    inbound.sort();
    let declared: Vec<String> = inbound
        .iter()
        .map(|(p, proto)| format!("{p} {proto:?}"))
        .collect();
    let _ = writeln!(
        out,
        "  inbound: to the app on the original port from 127.0.0.6; declared ports [{}], others detected",
        declared.join(", ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_config::{Code, Location, Problem};

    #[test]
    fn which_warnings_fail_strict() {
        let rows = [
            (None, true),
            (Some(Code::ReferencedResourceNotFound), true),
            (
                Some(Code::VirtualServiceDestinationPortSelectorRequired),
                true,
            ),
            (Some(Code::DocumentReplaced), true),
            (Some(Code::FieldNotSupported), true),
            (Some(Code::EnvoyFilterPatchUnmatched), true),
            (Some(Code::DanglingSymlink), true),
            (Some(Code::KindSkipped), false),
            (Some(Code::KindIgnored), false),
        ];
        for (code, want) in rows {
            let w = Problem {
                code,
                location: Location::default(),
                message: String::new(),
            };
            assert_eq!(fails_strict(&w), want, "{code:?}");
        }
    }
}
