//! Envoy's `ext_authz` filter as Istio builds it for `action: CUSTOM` AuthorizationPolicies:
//! after jwt_authn, before RBAC; only requests a CUSTOM rule matches are sent to the provider
//! (Istio's shadow RBAC filter in front of ext_authz); dry-run CUSTOM policies are only noted.
//!
//! The provider comes from `meshConfig.extensionProviders` by the policies' `provider.name`, its
//! service resolved through the registry (ServiceEntry, Kubernetes Service) as Istio's
//! `LookupCluster` does, with TLS by its DestinationRule as for any upstream, or auto mTLS to
//! meshed endpoints ([`ExtAuthzFilter::set_tls`], called by the snapshot). As in Istio, a workload whose CUSTOM policies name more than one
//! provider, a provider the mesh config lacks, or a service the registry lacks, gets every
//! request denied (RBAC's 403), and `warden check` says why.
//!
//! gRPC providers are called on the worker's HTTP/2 connection to them (the rate limit
//! service's per-worker pool, `global_rate_limit::rls_connection`), HTTP providers over a
//! pooled HTTP/1.1 client; the check and the answer's meaning are [`warden_extauthz`]'s. Allowed: the answer's header edits go to the
//! upstream request as a [`RequestEdit`] (so the rate limiters after this filter see them),
//! its response headers to the answer, its `dynamic_metadata` under
//! `envoy.filters.http.ext_authz`. Denied: the provider's status, headers and body, flag
//! `UAEX`. A failed or timed-out check continues with `failOpen`, else answers `statusOnError`
//! (403 by default), flag `UAEX`.
//!
//! Cost: nothing when no CUSTOM policy applies (no stage); one rule match per request
//! otherwise; a matching request pays one CheckRequest (its headers copied into the message)
//! and one unary call.

use crate::core::identity::ProxyIdentity;
use crate::core::local_reply::{LocalReply, ResponseFlag};
use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::core::tls_info::TlsInfo;
use crate::filters::authz::{denied_reply, http_attrs, RBAC_DENIED};
use crate::filters::chain::{
    FilterState, Flow, HttpFilter, RequestEdit, Verdict, VerdictFuture, EXT_AUTHZ,
};
use crate::filters::global_rate_limit::{rls_address, rls_connection};
use crate::routing::Route;
use crate::upstream::body::{BoxError, ProxyBody};
use crate::upstream::tls_origination::UpstreamTls;
use bytes::{Bytes, BytesMut};
use http::uri::Authority;
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use warden_authz::{CustomRules, TcpAttrs};
use warden_config::ext_authz_provider::{self, ExtensionProvider, RequestBody};
use warden_config::{ConfigSet, Problem};
use warden_extauthz::answer::{self, Outcome};
use warden_extauthz::check_request::{self, Attributes};
use warden_extauthz::http_check::{self, HeaderPattern, HttpSettings};
use warden_extauthz::{CheckRequest, CheckResponse, CHECK_METHOD, METADATA_NAMESPACE};

/// Envoy's response code details.
const DENIED_DETAILS: &str = "ext_authz_denied";
const ERROR_DETAILS: &str = "ext_authz_error";

/// A provider, resolved.
#[derive(Debug)]
pub struct Provider {
    pub name: String,
    /// `host:port` connected to, and how it was found (for `warden check`).
    pub address: String,
    pub via: String,
    authority: Authority,
    /// The registry host and service port (its DestinationRule's TLS applies).
    host: String,
    port: u16,
    /// TLS by the service's DestinationRule or auto mTLS ([`ExtAuthzFilter::set_tls`]): the
    /// latter, for `warden check`.
    auto_mtls: bool,
    grpc_tls: Option<rls_connection::GrpcTls>,
    https: Option<Arc<UpstreamTls>>,
    timeout: Duration,
    fail_open: bool,
    status_on_error: StatusCode,
    clear_route_cache: bool,
    body: Option<RequestBody>,
    kind: Kind,
}

/// How the provider is asked.
#[derive(Debug)]
enum Kind {
    /// `envoy.service.auth.v3.Authorization/Check` on the worker's HTTP/2 connection.
    Grpc,
    /// The request itself, over a pooled HTTP/1.1 client.
    Http(Box<HttpKind>),
}

#[derive(Debug)]
struct HttpKind {
    settings: HttpSettings,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<Bytes>,
    >,
}

/// Connecting to an HTTP provider over TLS gives up after this (the check's `timeout` bounds
/// the whole exchange too).
const TLS_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// An HTTP provider's answer body is cut off here.
const MAX_ANSWER_BODY: usize = 1 << 20;

/// What the matching requests get.
#[derive(Debug)]
pub enum Target {
    /// Sent to this provider.
    Provider(Provider),
    /// Istio's deny-all: the providers cannot be used (why).
    DenyAll(String),
}

/// Checks by outcome (Envoy's `ext_authz.ok`, `denied`, `error`, `failure_mode_allowed`) and
/// how long answered ones took.
#[derive(Debug)]
pub struct Stats {
    ok: AtomicU64,
    denied: AtomicU64,
    error: AtomicU64,
    failure_mode_allowed: AtomicU64,
    /// Seconds from sending a check to its answer (answered checks only).
    latency: Histogram,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            ok: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            error: AtomicU64::new(0),
            failure_mode_allowed: AtomicU64::new(0),
            latency: Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
            ]),
        }
    }
}

#[derive(Debug)]
pub struct ExtAuthzFilter {
    rules: CustomRules,
    /// None when only dry-run CUSTOM policies apply.
    pub target: Option<Target>,
    /// This workload's SPIFFE id (mesh credentials and a service account): the check's
    /// destination principal on a connection whose mTLS ended here, as Envoy's local
    /// certificate gives it.
    own_principal: Option<String>,
    stats: Stats,
    /// Connections' checks (Envoy's network ext_authz, stat prefix `tcp.`).
    tcp_stats: Stats,
}

impl ExtAuthzFilter {
    /// The filter for the CUSTOM policies in scope (none: no filter). A provider that cannot
    /// be used is a warning (located at the policy's `spec.provider.name`) and a deny-all.
    pub fn build(
        set: &ConfigSet,
        identity: &ProxyIdentity,
        rules: Option<CustomRules>,
        warnings: &mut Vec<Problem>,
    ) -> Option<ExtAuthzFilter> {
        let rules = rules?;
        let target = (!rules.is_dry_run_only()).then(|| {
            let target = resolve(set, &identity.extension_providers, &rules);
            if let Target::DenyAll(why) = &target {
                warnings.push(policy_problem(set, &rules, why));
            }
            target
        });
        let own_principal = identity
            .mesh
            .as_ref()
            .zip(identity.service_account.as_ref())
            .map(|(mesh, sa)| {
                format!(
                    "spiffe://{}/ns/{}/sa/{sa}",
                    mesh.trust_domain, identity.namespace
                )
            });
        Some(ExtAuthzFilter {
            rules,
            target,
            own_principal,
            stats: Stats::default(),
            tcp_stats: Stats::default(),
        })
    }

    /// Whether a matching request's body is read for the check.
    pub fn reads_request_body(&self) -> bool {
        matches!(&self.target, Some(Target::Provider(p)) if p.body.is_some())
    }

    /// The provider's registry host, service port, and whether it speaks gRPC: what its
    /// DestinationRule is looked up by.
    pub fn provider_service(&self) -> Option<(String, u16, bool)> {
        match &self.target {
            Some(Target::Provider(p)) => {
                Some((p.host.clone(), p.port, matches!(p.kind, Kind::Grpc)))
            }
            _ => None,
        }
    }

    /// Check over TLS (the provider service's DestinationRule `tls`, built as any upstream's).
    /// `auto_mtls`: Istio's auto mTLS chose it, not a DestinationRule.
    pub fn set_tls(&mut self, tls: Arc<UpstreamTls>, auto_mtls: bool) {
        let Some(Target::Provider(p)) = &mut self.target else {
            return;
        };
        p.auto_mtls = auto_mtls;
        if matches!(p.kind, Kind::Grpc) {
            let mut config = (*tls.config).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            let name = tls.sni.clone().or_else(|| {
                warden_tls::rustls::pki_types::ServerName::try_from(p.host.clone()).ok()
            });
            if let Some(name) = name {
                p.grpc_tls = Some(rls_connection::GrpcTls {
                    config: Arc::new(config),
                    name,
                });
            }
        } else {
            p.https = Some(tls);
        }
    }

    /// One line for `warden check`.
    pub fn describe(&self) -> String {
        match &self.target {
            None => "dry-run CUSTOM policies only (nothing is sent)".into(),
            Some(Target::DenyAll(why)) => format!("every request denied: {why}"),
            Some(Target::Provider(p)) => format!(
                "provider {} at {} ({}{}), timeout {:?}, {}",
                p.name,
                p.address,
                p.via,
                if p.grpc_tls.is_some() || p.https.is_some() {
                    format!(
                        ", TLS by {}",
                        if p.auto_mtls {
                            "auto mTLS"
                        } else {
                            "DestinationRule"
                        }
                    )
                } else {
                    String::new()
                },
                p.timeout,
                if p.fail_open {
                    "fail open".to_string()
                } else {
                    format!("{} on error", p.status_on_error.as_u16())
                }
            ),
        }
    }
}

/// The one provider the enforced CUSTOM policies name, resolved; or why none can be used.
fn resolve(set: &ConfigSet, providers: &[ExtensionProvider], rules: &CustomRules) -> Target {
    let names = rules.provider_names();
    let [name] = names[..] else {
        return Target::DenyAll(format!(
            "only 1 provider can be used per workload, found multiple providers: {names:?}"
        ));
    };
    let Some(provider) = providers.iter().find(|p| p.name == name) else {
        let known: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
        return Target::DenyAll(format!(
            "available providers (meshConfig.extensionProviders, --mesh-config) are {known:?} \
             but found {name:?}"
        ));
    };
    let Some(common) = provider.common() else {
        return Target::DenyAll(format!(
            "extension provider {name:?} is not an envoyExtAuthzGrpc or envoyExtAuthzHttp provider"
        ));
    };
    let kind = match &provider.envoy_ext_authz_http {
        None => Kind::Grpc,
        Some(h) => Kind::Http(Box::new(HttpKind {
            settings: http_settings(h),
            client: hyper_util::client::legacy::Client::builder(
                hyper_util::rt::TokioExecutor::new(),
            )
            .build_http(),
        })),
    };
    // `namespace/host` or `host`; the registry knows hosts by their full names.
    let host = common
        .service
        .split_once('/')
        .map_or(common.service, |(_, h)| h);
    let port = u16::try_from(common.port).unwrap_or(0);
    let (address, via) = match rls_address::registry_address(set, host, port) {
        Ok(Some(found)) => found,
        Ok(None) if host.parse::<std::net::IpAddr>().is_ok() => {
            (join(host, port), "an address".to_string())
        }
        Ok(None) => {
            return Target::DenyAll(format!(
                "extension provider {name:?}: could not find service {host} in the registry \
                 (ServiceEntry or Kubernetes Service)"
            ))
        }
        Err(e) => return Target::DenyAll(format!("extension provider {name:?}: {e}")),
    };
    let authority = match rls_connection::authority(&address) {
        Ok(a) => a,
        Err(e) => return Target::DenyAll(format!("extension provider {name:?}: {address}: {e}")),
    };
    let status = ext_authz_provider::status_on_error(common.status_on_error)
        .ok()
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::FORBIDDEN);
    Target::Provider(Provider {
        name: name.to_owned(),
        address,
        via,
        authority,
        host: host.to_owned(),
        port,
        auto_mtls: false,
        grpc_tls: None,
        https: None,
        timeout: common.timeout,
        fail_open: common.fail_open,
        status_on_error: status,
        clear_route_cache: common.clear_route_cache,
        body: common.body,
        kind,
    })
}

/// Istio's HTTP provider settings as the check uses them (`includeHeadersInCheck` only when
/// `includeRequestHeadersInCheck` is empty, as Istio reads the deprecated field).
fn http_settings(h: &ext_authz_provider::HttpProvider) -> HttpSettings {
    let patterns = |v: &[String]| v.iter().map(|p| HeaderPattern::parse(p)).collect();
    let request = if h.include_request_headers_in_check.is_empty() {
        &h.include_headers_in_check
    } else {
        &h.include_request_headers_in_check
    };
    HttpSettings {
        path_prefix: h.path_prefix.clone(),
        request_headers: patterns(request),
        additional_headers: h
            .include_additional_headers_in_check
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    http::HeaderName::from_bytes(k.as_bytes()).ok()?,
                    http::HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect(),
        upstream_on_allow: patterns(&h.headers_to_upstream_on_allow),
        downstream_on_allow: patterns(&h.headers_to_downstream_on_allow),
        downstream_on_deny: patterns(&h.headers_to_downstream_on_deny),
    }
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A warning at the first enforced CUSTOM policy's `spec.provider.name`.
fn policy_problem(set: &ConfigSet, rules: &CustomRules, why: &str) -> Problem {
    let doc = rules.providers.first().and_then(|(_, id)| {
        set.authorization_policies
            .iter()
            .find(|d| format!("{}/{}", d.metadata.namespace_or_default(), d.metadata.name) == *id)
    });
    let location = match doc {
        Some(d) => set.locate(d, "spec.provider.name"),
        None => warden_config::Location::default(),
    };
    Problem {
        code: None,
        location,
        message: format!(
            "CUSTOM policy: {why}; every request to this workload is denied, as Istio does"
        ),
    }
}

impl HttpFilter for ExtAuthzFilter {
    fn name(&self) -> &str {
        EXT_AUTHZ
    }

    fn on_request(
        &self,
        req: &RequestAttrs<'_>,
        _route: &Route,
        state: &mut FilterState,
        _metrics: &Metrics,
    ) -> Flow {
        if let Some(Target::DenyAll(_)) = &self.target {
            let reply = denied_reply();
            state.notes.details = Some(RBAC_DENIED);
            return Flow::Reply(reply.into_response());
        }
        let matched = self
            .rules
            .check_http(&http_attrs(req, state.request_auth.as_deref()));
        if matched.shadow.is_some() {
            state.notes.shadow_policy = matched.shadow;
        }
        match (&matched.rule, &self.target) {
            (Some(_), Some(Target::Provider(_))) => Flow::Wait,
            _ => Flow::Continue,
        }
    }

    fn on_request_waiting<'a>(
        &'a self,
        req: &'a RequestAttrs<'a>,
        _route: &'a Route,
        state: &'a mut FilterState,
        _metrics: &'a Metrics,
    ) -> VerdictFuture<'a> {
        Box::pin(async move {
            let Some(Target::Provider(provider)) = &self.target else {
                return Verdict::Continue;
            };
            self.check(provider, req, state).await
        })
    }

    fn reads_request_body(&self) -> bool {
        ExtAuthzFilter::reads_request_body(self)
    }
}

impl ExtAuthzFilter {
    async fn check(
        &self,
        provider: &Provider,
        req: &RequestAttrs<'_>,
        state: &mut FilterState,
    ) -> Verdict {
        let body = match (provider.body, state.request_body.take()) {
            (Some(settings), Some(body)) => match read_body(*body, settings).await {
                Ok((check, partial, upstream)) => {
                    state.request_body = Some(Box::new(upstream));
                    Some((check, partial, settings.pack_as_bytes))
                }
                Err(reply) => return Verdict::Reply(reply),
            },
            (_, body) => {
                state.request_body = body;
                None
            }
        };
        let call = async {
            match &provider.kind {
                Kind::Grpc => {
                    let request = check_request(req, body.as_ref(), self.own_principal.as_deref());
                    let conn =
                        rls_connection::get_with(&provider.authority, provider.grpc_tls.as_ref())
                            .await
                            .map_err(|e| e.to_string())?;
                    let answer = conn
                        .unary::<CheckRequest, CheckResponse>(CHECK_METHOD, &request)
                        .await
                        .map_err(|s| format!("{}: {}", s.code(), s.message()))?;
                    Ok(answer::interpret(answer))
                }
                Kind::Http(http) => http_check(provider, http, req, body.as_ref()).await,
            }
        };
        let sent = std::time::Instant::now();
        let outcome = match tokio::time::timeout(provider.timeout, call).await {
            Ok(Ok(outcome)) => {
                self.stats.latency.observe(sent.elapsed().as_secs_f64());
                outcome
            }
            Ok(Err(e)) => return self.failed(provider, &e, state),
            Err(_) => return self.failed(provider, "timed out", state),
        };
        match outcome {
            Outcome::Allowed(allowed) => {
                self.stats.ok.fetch_add(1, Ordering::Relaxed);
                let mut edit = RequestEdit {
                    reroute: provider.clear_route_cache,
                    ..RequestEdit::default()
                };
                if !allowed.request.is_empty() || !allowed.remove.is_empty() {
                    let mut headers = req.headers.clone();
                    for name in &allowed.remove {
                        headers.remove(name);
                    }
                    answer::apply(&allowed.request, &mut headers);
                    edit.headers = Some(headers);
                }
                if !allowed.query_set.is_empty() || !allowed.query_remove.is_empty() {
                    let query =
                        answer::edit_query(req.query, &allowed.query_set, &allowed.query_remove);
                    edit.path_and_query = Some(match query {
                        Some(q) => format!("{}?{q}", req.path),
                        None => req.path.to_owned(),
                    });
                }
                if edit.reroute || edit.headers.is_some() || edit.path_and_query.is_some() {
                    state.request_edit = Some(Box::new(edit));
                }
                if let Some(metadata) = allowed.dynamic_metadata {
                    state
                        .dynamic_metadata
                        .get_or_insert_with(Default::default)
                        .insert(METADATA_NAMESPACE.to_owned(), metadata);
                }
                if allowed.response.is_empty() {
                    return Verdict::Continue;
                }
                let mut headers = HeaderMap::new();
                answer::apply(&allowed.response, &mut headers);
                Verdict::ContinueWithHeaders(headers)
            }
            Outcome::Denied(denied) => {
                self.stats.denied.fetch_add(1, Ordering::Relaxed);
                state.notes.details = Some(DENIED_DETAILS);
                let mut headers = HeaderMap::new();
                answer::apply(&denied.headers, &mut headers);
                let reply = LocalReply {
                    status: StatusCode::from_u16(denied.status).unwrap_or(StatusCode::FORBIDDEN),
                    body: denied.body,
                    flag: Some(ResponseFlag::Unauthorized),
                };
                Verdict::ReplyWithHeaders(reply, headers)
            }
        }
    }

    /// A check that could not be made: continue (`failOpen`) or `statusOnError`.
    fn failed(&self, provider: &Provider, error: &str, state: &mut FilterState) -> Verdict {
        self.stats.error.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(provider = %provider.name, error, "ext_authz check failed");
        match answer::on_error(provider.fail_open, provider.status_on_error.as_u16()) {
            None => {
                self.stats
                    .failure_mode_allowed
                    .fetch_add(1, Ordering::Relaxed);
                Verdict::Continue
            }
            Some(_) => {
                state.notes.details = Some(ERROR_DETAILS);
                Verdict::Reply(LocalReply {
                    status: provider.status_on_error,
                    body: Bytes::new(),
                    flag: Some(ResponseFlag::Unauthorized),
                })
            }
        }
    }
}

/// CUSTOM on TCP: Envoy's network ext_authz as Istio builds it (`envoy.filters.network.ext_authz`
/// behind a shadow network RBAC filter). Only gRPC providers are asked (Istio leaves a CUSTOM
/// policy with an HTTP provider out of TCP filter chains); rules match as DENY rules do on
/// TCP (HTTP-only fields ignored); the check is the connection's peers, made on its first byte;
/// anything but OK closes the connection before a byte reaches the upstream, as does a failed
/// check without `failOpen`; a provider that cannot be used closes the matching connections
/// (Istio's deny rules for a bad CUSTOM action).
impl ExtAuthzFilter {
    /// Whether any connection can be checked: false without a CUSTOM policy that is enforced
    /// on TCP, so a TCP port pays nothing for HTTP-only providers.
    pub fn checks_tcp(&self) -> bool {
        match &self.target {
            Some(Target::Provider(p)) => matches!(p.kind, Kind::Grpc),
            Some(Target::DenyAll(_)) => true,
            None => false,
        }
    }

    /// Whether a connection with `attrs` is sent to the provider (a pure rule match, made
    /// before waiting for its first byte).
    pub fn tcp_rule_matches(&self, attrs: &TcpAttrs<'_>) -> bool {
        self.checks_tcp() && self.rules.check_tcp(attrs).rule.is_some()
    }

    /// Ask the provider about a connection a rule matched: true lets it on. `tls`: the
    /// connection's terminated TLS (the peer's SPIFFE id is the source principal).
    pub async fn check_connection(
        &self,
        source: SocketAddr,
        destination: SocketAddr,
        tls: Option<&TlsInfo>,
    ) -> bool {
        let provider = match &self.target {
            Some(Target::Provider(p)) if matches!(p.kind, Kind::Grpc) => p,
            Some(Target::DenyAll(why)) => {
                tracing::debug!(%source, why = why.as_str(), "tcp connection closed: CUSTOM provider unusable");
                return false;
            }
            _ => return true,
        };
        let peer = tls.and_then(|t| t.peer.as_ref());
        let principal = peer.and_then(|p| p.uri_sans.iter().find(|u| u.starts_with("spiffe://")));
        let request = check_request::build_tcp(&check_request::Connection {
            source,
            source_principal: principal.map(String::as_str),
            destination,
            destination_principal: self
                .own_principal
                .as_deref()
                .filter(|_| principal.is_some()),
        });
        let call = async {
            let conn = rls_connection::get_with(&provider.authority, provider.grpc_tls.as_ref())
                .await
                .map_err(|e| e.to_string())?;
            conn.unary::<CheckRequest, CheckResponse>(CHECK_METHOD, &request)
                .await
                .map_err(|s| format!("{}: {}", s.code(), s.message()))
        };
        let stats = &self.tcp_stats;
        let sent = std::time::Instant::now();
        let error = match tokio::time::timeout(provider.timeout, call).await {
            Ok(Ok(answer)) => {
                stats.latency.observe(sent.elapsed().as_secs_f64());
                return if answer::connection_allowed(&answer) {
                    stats.ok.fetch_add(1, Ordering::Relaxed);
                    true
                } else {
                    stats.denied.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%source, %destination, "tcp connection denied by ext_authz");
                    false
                };
            }
            Ok(Err(e)) => e,
            Err(_) => "timed out".to_owned(),
        };
        stats.error.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(provider = %provider.name, error, "ext_authz tcp check failed");
        if provider.fail_open {
            stats.failure_mode_allowed.fetch_add(1, Ordering::Relaxed);
        }
        provider.fail_open
    }
}

/// One HTTP check: the request's head as Envoy's HTTP ext_authz sends it, then its answer's
/// meaning; `Err` when no answer came.
async fn http_check(
    provider: &Provider,
    http: &HttpKind,
    req: &RequestAttrs<'_>,
    body: Option<&(Bytes, bool, bool)>,
) -> Result<Outcome, String> {
    let path = match req.query {
        Some(q) => format!("{}?{q}", req.path),
        None => req.path.to_owned(),
    };
    let head = http_check::check_head(
        &http.settings,
        req.method,
        req.authority,
        &path,
        req.headers,
        body.map(|(b, partial, _)| (&b[..], *partial)),
    );
    let bytes = body.map(|(b, _, _)| b.clone()).unwrap_or_default();
    let mut request = http::Request::new(http_body_util::Full::new(bytes.clone()));
    *request.method_mut() = head.method;
    let scheme = if provider.https.is_some() {
        "https"
    } else {
        "http"
    };
    *request.uri_mut() = format!("{scheme}://{}{}", provider.authority, head.path)
        .parse()
        .map_err(|e| format!("check URI: {e}"))?;
    *request.headers_mut() = head.headers;
    let response = match &provider.https {
        None => http.client.request(request).await,
        Some(tls) => {
            tls.client(TLS_CONNECT_TIMEOUT)
                .request(request.map(|_| ProxyBody::full(bytes)))
                .await
        }
    }
    .map_err(|e| e.to_string())?;
    let (parts, answer) = response.into_parts();
    let answer =
        http_body_util::BodyExt::collect(http_body_util::Limited::new(answer, MAX_ANSWER_BODY))
            .await
            .map_err(|e| format!("answer body: {e}"))?
            .to_bytes();
    Ok(http_check::interpret(
        &http.settings,
        parts.status.as_u16(),
        &parts.headers,
        answer,
    ))
}

/// The CheckRequest of a request (and the body read for it: bytes, cut, packed as bytes).
fn check_request(
    req: &RequestAttrs<'_>,
    body: Option<&(Bytes, bool, bool)>,
    own_principal: Option<&str>,
) -> CheckRequest {
    let path_and_query;
    let path = match req.query {
        Some(q) => {
            path_and_query = format!("{}?{q}", req.path);
            path_and_query.as_str()
        }
        None => req.path,
    };
    let peer = req.tls.and_then(|t| t.peer.as_ref());
    let principal = peer.and_then(|p| p.uri_sans.iter().find(|u| u.starts_with("spiffe://")));
    check_request::build(
        &Attributes {
            source: std::net::SocketAddr::new(req.peer_ip, req.peer_port),
            source_principal: principal.map(String::as_str),
            destination: req.local_addr,
            // A mesh mTLS connection ended here (the peer's SPIFFE id is known).
            destination_principal: own_principal.filter(|_| principal.is_some()),
            method: req.method.as_str(),
            path,
            host: req.authority,
            scheme: if req.tls.is_some() { "https" } else { "http" },
            protocol: crate::core::request_attrs::protocol_text(req.version),
            headers: req.headers,
            sni: req.tls.and_then(|t| t.sni.as_deref()),
            time: SystemTime::now(),
        },
        body.map(|(bytes, partial, pack_as_bytes)| check_request::Body {
            bytes,
            partial: *partial,
            pack_as_bytes: *pack_as_bytes,
        }),
    )
}

/// Envoy's buffering for the check: up to `maxRequestBytes`; a longer body is answered 413
/// unless `allowPartialMessage`, when the check gets its first `maxRequestBytes` and the
/// upstream the whole body (what was read, then the rest as it comes). Returns the check's
/// bytes, whether they were cut, and the upstream's body.
async fn read_body(
    mut body: ProxyBody,
    settings: RequestBody,
) -> Result<(Bytes, bool, ProxyBody), LocalReply> {
    let max = settings.max_request_bytes as usize;
    let mut read = BytesMut::new();
    let ended = loop {
        if read.len() > max {
            break false;
        }
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => break true,
            Some(Ok(frame)) => {
                // Trailers end the body for the check; they are not forwarded here.
                if let Ok(data) = frame.into_data() {
                    read.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => return Err(LocalReply::bad_request()),
        }
    };
    let read = read.freeze();
    if read.len() <= max && ended {
        return Ok((read.clone(), false, ProxyBody::full(read)));
    }
    if !settings.allow_partial_message {
        return Err(LocalReply::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large",
            None,
        ));
    }
    let check = read.slice(..max.min(read.len()));
    let upstream = if ended {
        ProxyBody::full(read)
    } else {
        ProxyBody::Boxed(Box::pin(Prefixed {
            prefix: Some(read),
            rest: body,
        }))
    };
    Ok((check, true, upstream))
}

/// The bytes read for the check, then the rest of the body.
struct Prefixed {
    prefix: Option<Bytes>,
    rest: ProxyBody,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// `ext_authz_checks_total{outcome}`: ok, denied, error (of which failure_mode_allowed
/// continued); `ext_authz_check_duration_seconds`.
pub fn register_metrics(registry: &mut Registry, f: &ExtAuthzFilter) {
    register_stats(registry, &f.stats, "");
    if f.checks_tcp() {
        register_stats(registry, &f.tcp_stats, "tcp_");
    }
}

/// One set of counters: `ext_authz_{prefix}checks_total{outcome}` and the latency histogram.
fn register_stats(registry: &mut Registry, s: &Stats, prefix: &str) {
    let family = Family::<OutcomeLabels, Counter>::default();
    for (outcome, n) in [
        ("ok", &s.ok),
        ("denied", &s.denied),
        ("error", &s.error),
        ("failure_mode_allowed", &s.failure_mode_allowed),
    ] {
        family
            .get_or_create(&OutcomeLabels { outcome })
            .inc_by(n.load(Ordering::Relaxed));
    }
    let what = if prefix.is_empty() {
        "requests"
    } else {
        "TCP connections"
    };
    registry.register(
        format!("ext_authz_{prefix}checks"),
        format!(
            "External authorization checks of {what} by outcome (failure_mode_allowed: errors let through by failOpen)"
        ),
        family,
    );
    registry.register(
        format!("ext_authz_{prefix}check_duration_seconds"),
        "Time from sending a check to the provider's answer",
        s.latency.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn settings(max: u32, partial: bool) -> RequestBody {
        RequestBody {
            max_request_bytes: max,
            allow_partial_message: partial,
            pack_as_bytes: false,
        }
    }

    #[tokio::test]
    async fn bodies_are_cut_at_max_request_bytes_and_forwarded_whole() {
        let body = || ProxyBody::full(Bytes::from_static(b"0123456789"));
        let (check, partial, upstream) = read_body(body(), settings(64, false)).await.unwrap();
        assert_eq!((&check[..], partial), (&b"0123456789"[..], false));
        assert_eq!(upstream.collect().await.unwrap().to_bytes(), "0123456789");
        let (check, partial, upstream) = read_body(body(), settings(4, true)).await.unwrap();
        assert_eq!((&check[..], partial), (&b"0123"[..], true));
        assert_eq!(upstream.collect().await.unwrap().to_bytes(), "0123456789");
        let refused = read_body(body(), settings(4, false)).await.unwrap_err();
        assert_eq!(refused.status, StatusCode::PAYLOAD_TOO_LARGE);
        // A body still arriving past the limit: the rest follows what was read.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        for chunk in ["0123", "4567", "89"] {
            tx.send(Ok(Frame::data(Bytes::from(chunk)))).await.unwrap();
        }
        drop(tx);
        let streamed = ProxyBody::Boxed(Box::pin(http_body_util::StreamBody::new(
            tokio_stream_from(rx),
        )));
        let (check, partial, upstream) = read_body(streamed, settings(5, true)).await.unwrap();
        assert_eq!((&check[..], partial), (&b"01234"[..], true));
        assert_eq!(upstream.collect().await.unwrap().to_bytes(), "0123456789");
    }

    fn tokio_stream_from(
        mut rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
    ) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, BoxError>> {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
