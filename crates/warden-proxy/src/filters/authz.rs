//! Stage 3, AuthorizationPolicy: [`warden_authz::Authorizer`] compiled for this proxy's scope,
//! checked after the route match (HTTP) or on a TCP connection's first byte.

use crate::core::identity::ProxyIdentity;
use crate::core::local_reply::LocalReply;
use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::filters::chain::{FilterState, Flow, HttpFilter, RBAC};
use crate::routing::ports::{ListenerSpec, PortRoutes};
use crate::routing::sidecar_tables::{PortProtocol, SidecarRoutes};
use crate::routing::Route;
use http::StatusCode;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use warden_authz::{
    Authorizer, AuthorizerStats, CustomRules, Decision, HttpAttrs, ProxyScope, RequestAuth,
    TcpAttrs, DENY_BODY, DENY_STATUS, NONE_POLICY,
};
use warden_config::{ConfigSet, Problem};

/// The compiled policies that apply to this proxy; absent from the snapshot when none do.
#[derive(Debug)]
pub struct AuthzFilter {
    authorizer: Authorizer,
    /// The `none` label of an ALLOW miss, allocated once.
    none: Arc<str>,
}

/// What the pipeline keeps of a check for its access log.
#[derive(Debug, Default)]
pub struct AuthzNote {
    /// The rule that denied, or `none` for an ALLOW miss; `None` when allowed.
    pub denied_by: Option<Arc<str>>,
    /// The first dry-run policy that would have denied.
    pub shadow_denied_by: Option<Arc<str>>,
}

impl AuthzNote {
    pub fn allowed(&self) -> bool {
        self.denied_by.is_none()
    }
}

/// The scope policies are selected by: the proxy's namespace and labels, and every Gateway this
/// proxy serves (for `targetRefs`).
pub fn proxy_scope(set: &ConfigSet, identity: &ProxyIdentity) -> ProxyScope {
    ProxyScope {
        namespace: identity.namespace.clone(),
        labels: identity.labels.clone(),
        // A Gateway API Gateway is targeted by its own name, not its Istio Gateway's.
        gateway_names: set
            .gateways
            .iter()
            .flat_map(|g| {
                let name = g.metadata.name.as_str();
                let source = warden_config::gateway_api::selection::source_gateway_name(name);
                std::iter::once(name).chain(source)
            })
            .map(str::to_owned)
            .collect(),
        ..ProxyScope::default()
    }
}

impl AuthzFilter {
    /// Compile the policies in scope; `None` when no policy applies (the stage is skipped).
    /// The CUSTOM policies in scope come back apart, for the ext_authz filter.
    pub fn build(
        set: &ConfigSet,
        identity: &ProxyIdentity,
    ) -> Result<(Option<AuthzFilter>, Option<CustomRules>), Vec<Problem>> {
        let mut authorizer = Authorizer::compile_set(set, &proxy_scope(set, identity))?;
        let custom = authorizer.take_custom();
        let stats = authorizer.stats();
        if authorizer.is_empty() {
            return Ok((None, custom));
        }
        tracing::info!(
            policies = stats.policies,
            rules = stats.rules,
            cidrs = stats.cidrs,
            index_bytes = stats.index_bytes,
            "authorization policies compiled"
        );
        Ok((
            Some(AuthzFilter {
                authorizer,
                none: Arc::from(NONE_POLICY),
            }),
            custom,
        ))
    }

    pub fn stats(&self) -> AuthorizerStats {
        self.authorizer.stats()
    }

    /// Decide an HTTP request (after the route match and jwt_authn's `auth`) and count the
    /// decision.
    pub fn check_http(
        &self,
        req: &RequestAttrs<'_>,
        auth: Option<&warden_jwt::Verified>,
        metrics: &Metrics,
    ) -> AuthzNote {
        let decision = self.authorizer.check_http(&http_attrs(req, auth));
        self.note(decision, metrics)
    }

    /// Decide a TCP connection on its first byte; a denied one is closed with nothing written.
    pub fn check_tcp(
        &self,
        peer: IpAddr,
        local: SocketAddr,
        tls: Option<&crate::core::tls_info::TlsInfo>,
        metrics: &Metrics,
    ) -> bool {
        let decision = self.authorizer.check_tcp(&TcpAttrs {
            direct_peer: peer,
            client_ip: peer,
            dest_ip: local.ip(),
            dest_port: local.port(),
            sni: tls.and_then(|t| t.sni.as_deref()),
            principal: tls
                .and_then(|t| t.peer.as_ref())
                .and_then(|p| p.principal.as_deref()),
        });
        let n = self.note(decision, metrics);
        if let Some(policy) = &n.denied_by {
            tracing::debug!(%peer, %local, policy = &**policy, "tcp connection denied by RBAC");
        }
        n.allowed()
    }

    fn note(&self, decision: Decision, metrics: &Metrics) -> AuthzNote {
        for policy in &decision.shadow_denied {
            metrics.authz_shadow_denied(policy);
        }
        let denied_by = if decision.allow {
            metrics.authz.allowed.inc();
            None
        } else {
            let label: Arc<str> = match decision.policy {
                Some(p) => p,
                None => self.none.clone(),
            };
            metrics.authz_denied(&label);
            Some(label)
        };
        AuthzNote {
            denied_by,
            shadow_denied_by: decision.shadow_denied.into_iter().next(),
        }
    }
}

/// What a policy check reads of a request (RBAC's and ext_authz's matching).
pub fn http_attrs<'a>(
    req: &'a RequestAttrs<'_>,
    auth: Option<&'a warden_jwt::Verified>,
) -> HttpAttrs<'a> {
    HttpAttrs {
        direct_peer: req.peer_ip,
        client_ip: req.client_ip,
        dest_ip: req.local_addr.ip(),
        // Envoy's destination_port: the port the connection was accepted on.
        dest_port: req.local_addr.port(),
        host: req.authority,
        method: req.method.as_str(),
        path: req.path,
        headers: req.headers,
        sni: req.tls.and_then(|t| t.sni.as_deref()),
        principal: req
            .tls
            .and_then(|t| t.peer.as_ref())
            .and_then(|p| p.principal.as_deref()),
        request_auth: auth.map(|v| RequestAuth {
            principal: &v.principal,
            claims: v.claims(),
        }),
    }
}

/// What the policies' rules with HTTP-only fields do on the TCP connections this proxy serves
/// (a gateway's TCP servers and TLS ports with a TCP or SNI route, a sidecar's inbound ports
/// declared TCP), one located warning per rule; none when it serves no TCP.
pub fn tcp_notes(
    set: &ConfigSet,
    identity: &ProxyIdentity,
    listeners: &[ListenerSpec],
    ports: &[PortRoutes],
    sidecar: Option<&SidecarRoutes>,
) -> Vec<Problem> {
    let mut tcp: Vec<u16> = match sidecar {
        Some(s) => s
            .inbound_protocols()
            .filter(|(_, proto)| *proto == PortProtocol::Tcp)
            .map(|(port, _)| port)
            .collect(),
        None => listeners
            .iter()
            .zip(ports)
            .filter(|(_, routes)| match routes {
                PortRoutes::Tcp(route) => route.is_some(),
                PortRoutes::Tls(t) => t.tcp.is_some() || !t.passthrough.is_empty(),
                PortRoutes::Http(_) => false,
            })
            .map(|(l, _)| l.port)
            .collect(),
    };
    if tcp.is_empty() {
        return Vec::new();
    }
    tcp.sort_unstable();
    tcp.dedup();
    let list: Vec<String> = tcp.iter().map(u16::to_string).collect();
    let side = if sidecar.is_some() { "inbound " } else { "" };
    let plural = if list.len() > 1 { "s" } else { "" };
    let what = format!("TCP connections ({side}port{plural} {})", list.join(", "));
    // Istio leaves HTTP providers out of TCP chains (an unknown one denies there too).
    let grpc = |name: &str| {
        !identity
            .extension_providers
            .iter()
            .any(|p| p.name == name && p.envoy_ext_authz_http.is_some())
    };
    warden_authz::tcp_notes(set, &proxy_scope(set, identity), &what, &grpc)
}

/// Envoy's `rbac` filter: DENY, then ALLOW policies; a denial answers 403 and names the rule.
impl HttpFilter for AuthzFilter {
    fn name(&self) -> &str {
        RBAC
    }

    #[inline]
    fn on_request(
        &self,
        req: &RequestAttrs<'_>,
        _route: &Route,
        state: &mut FilterState,
        metrics: &Metrics,
    ) -> Flow {
        let note = self.check_http(req, state.request_auth.as_deref(), metrics);
        // A dry-run CUSTOM policy ext_authz noted stays noted when no dry-run RBAC rule hits.
        if note.shadow_denied_by.is_some() {
            state.notes.shadow_policy = note.shadow_denied_by;
        }
        match note.denied_by {
            None => Flow::Continue,
            Some(policy) => {
                let reply = denied_reply();
                state.notes.flag = reply.flag;
                state.notes.policy = Some(policy);
                state.notes.details = Some(RBAC_DENIED);
                Flow::Reply(reply.into_response())
            }
        }
    }
}

/// Envoy's RBAC denial: 403 `RBAC: access denied`, `text/plain` (no response flag).
/// Envoy's response code details of an RBAC denial.
pub const RBAC_DENIED: &str = "rbac_access_denied_matched_policy";

pub fn denied_reply() -> LocalReply {
    LocalReply::new(
        StatusCode::from_u16(DENY_STATUS).unwrap_or(StatusCode::FORBIDDEN),
        DENY_BODY,
        None,
    )
}
