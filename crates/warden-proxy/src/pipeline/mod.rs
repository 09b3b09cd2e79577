//! The HTTP request pipeline: every request goes through these stages, in this order.
//!
//! 1. **decode**   framing checks (Content-Length with Transfer-Encoding -> 400) and
//!    [`RequestAttrs`] (trusted client address per Envoy's XFF rules)
//! 2. **route**    VirtualService match, first match wins; none -> 404 `NR`
//! 3. **authz**             [`Filters::authz`]             -> 403 `RBAC: access denied`
//! 4. **local rate limit**  [`Filters::local_rate_limit`]  -> 429 `local_rate_limited`
//! 5. **global rate limit** [`Filters::global_rate_limit`] -> 429 / 500 (RLS)
//! 6. **action**   direct response (pre-built bytes) or upstream (pool, LB, timeout, retries)
//! 7. **respond**  route response headers, filter response headers, metrics, access log
//!
//! Stages 3-5 are engines compiled into the [`Snapshot`](crate::control::snapshot::Snapshot) from the
//! ConfigSet; an empty slot costs one branch.

pub mod authority;
pub mod client_cert;
pub mod cors;
pub mod filters;
pub mod forwarding_headers;
pub mod header_ops;
pub mod local_reply;
pub mod matcher;
pub mod routing;

use crate::control::access_log::{now_rfc3339, Entry};
use crate::control::snapshot::{ProxyIdentity, Snapshot};
use crate::control::state::{ConnCtx, Shared, WorkerCtx};
use crate::downstream::client_addr::trusted_client_addr;
use crate::pipeline::cors::CorsVerdict;
use crate::pipeline::filters::authz::{self, AuthzFilter};
use crate::pipeline::filters::local_rate_limit::{LimitVerdict, LocalRateLimitFilter};
use crate::pipeline::forwarding_headers::{
    strip_hop_by_hop, Forwarding, X_FORWARDED_FOR, X_REQUEST_ID,
};
use crate::pipeline::local_reply::{LocalReply, ResponseFlag};
use crate::pipeline::routing::{host_of, Fault, Route, RouteAction, RouteInput, WeightedCluster};
use crate::upstream::body::ProxyBody;
use crate::upstream::h1_exchange::response_headers_mut;
use crate::upstream::{forward_boxed, Outgoing};
use http::{header, HeaderMap, HeaderValue, Method, Request, Response};
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use warden_config::{ConfigSet, Problem};
use warden_http1::request_head::visible_str;
use warden_http1::request_lines::RequestLines;
use warden_local_ratelimit::RateLimitHeaders;

/// What the policy stages see of a request.
pub struct RequestAttrs<'a> {
    /// The TCP peer (Envoy's direct remote address; `ipBlocks`).
    pub peer_ip: IpAddr,
    /// The trusted client address (`remoteIpBlocks`, rate-limit `remote_address`).
    pub client_ip: IpAddr,
    pub method: &'a Method,
    pub authority: &'a str,
    /// Path without the query string.
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// The request's header map: empty while a fast-path request's lines are kept as read,
    /// which only happens when no stage reads headers ([`Snapshot::reads_request_headers`]).
    pub headers: &'a HeaderMap,
    /// A fast-path request's lines as read, when they are not in `headers`.
    pub lines: Option<&'a RequestLines>,
    /// The listener's configured port.
    pub port: u16,
    /// The local address the connection was accepted on (`destination.ip` / `.port`).
    pub local_addr: SocketAddr,
    /// Which side of the proxy took the request (gateway port, sidecar inbound).
    pub side: crate::downstream::destination::Side,
    /// The virtual host (index in the port's route table) routing picked; set by stage 2,
    /// read by the rate limit stages for EnvoyFilter patches that name one.
    pub vhost: u32,
    /// TLS terminated here: the SNI and the client certificate's identity.
    pub tls: Option<&'a crate::downstream::tls_accept::TlsInfo>,
}

impl RequestAttrs<'_> {
    /// The first value of a header, from the map or the lines kept as read.
    pub fn header(&self, name: &header::HeaderName) -> Option<&[u8]> {
        first_value(self.headers, self.lines, name)
    }
}

/// The first value of a request header: from the lines kept as read when there are some (the
/// map is empty then), else from the map.
fn first_value<'a>(
    headers: &'a HeaderMap,
    lines: Option<&'a RequestLines>,
    name: &header::HeaderName,
) -> Option<&'a [u8]> {
    match lines {
        Some(lines) => lines.get(name.as_str().as_bytes()),
        None => headers.get(name).map(HeaderValue::as_bytes),
    }
}

/// A policy stage's decision.
pub enum Verdict {
    Continue,
    /// Continue, adding these headers to the response (e.g. `x-ratelimit-*`).
    ContinueWithHeaders(HeaderMap),
    /// Continue, adding `request` to the upstream request and `response` to the response
    /// (the RLS's `request_headers_to_add` / `response_headers_to_add`).
    ContinueWithRequestHeaders {
        request: HeaderMap,
        response: HeaderMap,
    },
    Reply(LocalReply),
    /// A local reply carrying extra headers (`x-envoy-ratelimited`, `x-ratelimit-*`).
    ReplyWithHeaders(LocalReply, HeaderMap),
}

pub type VerdictFuture<'a> = Pin<Box<dyn Future<Output = Verdict> + Send + 'a>>;

/// An asynchronous policy stage (global rate limit via the RLS).
/// `metrics` receives the stage's outcome counters; `as_any` lets a rebuilt filter adopt
/// state (counters, connections) from the previous snapshot's.
pub trait AsyncRequestFilter: Send + Sync + fmt::Debug {
    fn check<'a>(
        &'a self,
        req: &'a RequestAttrs<'a>,
        route: &'a Route,
        metrics: &'a crate::control::metrics::Metrics,
    ) -> VerdictFuture<'a>;
    fn as_any(&self) -> &dyn std::any::Any;
}

/// The compiled policy engines of a snapshot. Later issues fill these slots in
/// [`Filters::build`].
#[derive(Debug, Default)]
pub struct Filters {
    pub authz: Option<AuthzFilter>,
    pub local_rate_limit: Option<LocalRateLimitFilter>,
    pub global_rate_limit: Option<Box<dyn AsyncRequestFilter>>,
}

impl Filters {
    /// Compile the policy kinds (`authorization_policies`, `rate_limit_policies`,
    /// `envoy_filters`) that apply to this proxy; `previous` hands over state (limiter buckets)
    /// across reloads. All problems of all stages are reported together.
    pub fn build(
        set: &ConfigSet,
        identity: &ProxyIdentity,
        routes: &filters::route_sites::RouteCatalog,
        previous: Option<&Filters>,
    ) -> Result<Filters, Vec<Problem>> {
        let mut problems = Vec::new();
        let authz = AuthzFilter::build(set, identity).unwrap_or_else(|p| {
            problems.extend(p);
            None
        });
        let local_rate_limit = LocalRateLimitFilter::build(
            set,
            identity,
            routes,
            previous.and_then(|p| p.local_rate_limit.as_ref()),
        )
        .unwrap_or_else(|p| {
            problems.extend(p);
            None
        });
        let global_rate_limit =
            crate::pipeline::filters::global_rate_limit::GlobalRateLimit::build(
                set,
                identity,
                routes,
                previous.and_then(|p| p.global_rate_limit.as_deref()),
            )
            .unwrap_or_else(|p| {
                problems.extend(p);
                None
            })
            .map(|f| Box::new(f) as Box<dyn AsyncRequestFilter>);
        if !problems.is_empty() {
            // The limiters read the same EnvoyFilters: a bad patch is reported once, at its line.
            let mut seen = std::collections::HashSet::new();
            problems.retain(|p| seen.insert(p.to_string()));
            return Err(problems.into_iter().map(|p| set.with_line(p)).collect());
        }
        Ok(Filters {
            authz,
            local_rate_limit,
            global_rate_limit,
        })
    }

    /// Whether a stage may read request headers (see [`Snapshot::reads_request_headers`]).
    /// Authz and the global limit are counted as readers whatever their rules say.
    pub fn reads_request_headers(&self) -> bool {
        self.authz.is_some()
            || self.global_rate_limit.is_some()
            || self
                .local_rate_limit
                .as_ref()
                .is_some_and(|l| l.reads_request_headers())
    }

    pub fn stage_names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.authz.is_some() {
            v.push("authz");
        }
        if self.local_rate_limit.is_some() {
            v.push("local_rate_limit");
        }
        if self.global_rate_limit.is_some() {
            v.push("global_rate_limit");
        }
        v
    }
}

/// Per-request outcome for metrics and the access log.
#[derive(Default)]
struct Outcome {
    route: Option<Arc<Route>>,
    upstream: Option<http::uri::Authority>,
    flag: Option<ResponseFlag>,
    /// The RBAC rule (`none` for an ALLOW miss) or rate limit rule that stopped the request.
    policy: Option<Arc<str>>,
    /// Envoy's response code details prefix for a policy denial.
    details: Option<&'static str>,
    /// A dry-run policy (or shadow-mode limit) that would have stopped it.
    shadow_policy: Option<Arc<str>>,
}

/// What the access log needs of the request, captured only when logging is on.
struct LogFields {
    method: Method,
    authority: String,
    path: String,
    protocol: &'static str,
    request_id: Option<String>,
    client_ip: IpAddr,
}

/// Run a request through the pipeline; the body is hyper's stream (hyper's server) or nothing
/// (the fast path's body-less requests). The fast path's requests come with their header
/// lines as read and an empty map (see [`RequestLines`]); they are read into the map here
/// when something is configured that reads headers.
///
/// Stages 1-4, and a direct response when no global limit applies, need no waiting: they run
/// here, before any future exists, and the answer comes back at once. Only a request that
/// waits (global limit, upstream) gets a future, on the heap: building a future the size of
/// the whole pipeline and moving it into a box cost a direct response or a local 429 more
/// than its routing.
pub fn handle<'a>(
    req: Request<ProxyBody>,
    lines: Option<RequestLines>,
    conn: &'a ConnCtx,
    worker: &'a WorkerCtx,
) -> Handling<'a> {
    let start = Instant::now();
    let shared = &*worker.shared;
    let snapshot = shared.snapshot.load_full();
    let mut outcome = Outcome::default();
    let mut log = None;
    match decide(req, lines, conn, shared, &snapshot, &mut outcome, &mut log) {
        Decided::Now(response, limit_headers) => Handling::Answered(finish(
            shared,
            conn,
            start,
            response,
            limit_headers,
            &outcome,
            log,
        )),
        // One future holding the request once: no async block around `act` keeping its own
        // copy (the box stays below the upstream future's size class).
        Decided::Later(waiting) => Handling::Waiting(Box::pin(act(
            waiting, conn, worker, snapshot, outcome, log, start,
        ))),
    }
}

/// A request's answer: ready, or a future for one that waits.
pub enum Handling<'a> {
    Answered(Answer),
    Waiting(Pin<Box<dyn Future<Output = Answer> + Send + 'a>>),
}

impl Handling<'_> {
    /// The answer, waited for if need be (hyper's server, which awaits every request anyway).
    pub async fn answer(self) -> Answer {
        match self {
            Handling::Answered(answer) => answer,
            Handling::Waiting(waiting) => waiting.await,
        }
    }
}

/// The answer to a handled request, counted and logged.
fn finish(
    shared: &Shared,
    conn: &ConnCtx,
    start: Instant,
    mut response: Response<ProxyBody>,
    limit_headers: Option<RateLimitHeaders>,
    outcome: &Outcome,
    log: Option<LogFields>,
) -> Answer {
    if outcome.flag == Some(ResponseFlag::DownstreamProtocolError) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    record(shared, conn, start, response.status(), outcome, log);
    Answer {
        response,
        limit_headers,
    }
}

/// What the pipeline answers: the response, and the local limiter's `x-ratelimit-*` when they
/// are not in its header map yet. The fast path writes those itself, in place of any lines of
/// the same names (no map to build, no three values to render as `HeaderValue`s, for every
/// request a non-triggering limit passes); [`Answer::into_response`] puts them in the map.
pub struct Answer {
    pub response: Response<ProxyBody>,
    pub limit_headers: Option<RateLimitHeaders>,
}

impl Answer {
    /// The response with everything in its header map.
    pub fn into_response(self) -> Response<ProxyBody> {
        let mut response = self.response;
        if let Some(h) = self.limit_headers {
            h.apply(response.headers_mut());
        }
        response
    }
}

/// Metrics and the access log line of one answered request.
fn record(
    shared: &Shared,
    conn: &ConnCtx,
    start: Instant,
    status: http::StatusCode,
    outcome: &Outcome,
    log: Option<LogFields>,
) {
    let status = status.as_u16();
    let elapsed = start.elapsed();
    let metrics = &shared.metrics;
    metrics.requests.inc();
    metrics.duration.observe(elapsed.as_secs_f64());
    match &outcome.route {
        Some(route) => {
            if let Some(c) = route
                .counters
                .get(status, || metrics.route_code_counter(&route.name, status))
            {
                c.inc();
            }
        }
        None => {
            metrics.route_code_counter("none", status).inc();
        }
    }
    if let (Some(access_log), Some(fields)) = (&shared.access_log, log) {
        let upstream = outcome.upstream.as_ref().map(|a| a.to_string());
        access_log.log(&Entry {
            time: now_rfc3339(),
            client_ip: fields.client_ip.to_string(),
            peer: conn.peer.ip().to_string(),
            protocol: fields.protocol,
            method: fields.method.as_str(),
            authority: &fields.authority,
            path: &fields.path,
            status,
            duration_ms: elapsed.as_secs_f64() * 1000.0,
            upstream: upstream.as_deref(),
            route: outcome.route.as_ref().map(|r| &*r.name),
            response_flags: outcome.flag.map_or("-", |f| f.code()),
            request_id: fields.request_id.as_deref(),
            response_code_details: outcome.details.map(|d| match &outcome.policy {
                Some(p) if d == RBAC_DENIED => format!("{d}[{p}]"),
                _ => d.to_string(),
            }),
            policy: outcome.policy.as_deref(),
            shadow_policy: outcome.shadow_policy.as_deref(),
        });
    }
}

/// Stage 1: what the policy stages see of the request (the trusted client address per the
/// XFF rules).
fn request_attrs<'a>(
    conn: &'a ConnCtx,
    shared: &Shared,
    parts: &'a http::request::Parts,
    lines: Option<&'a RequestLines>,
    authority: &'a str,
) -> RequestAttrs<'a> {
    let headers = &parts.headers;
    let peer_ip = conn.peer.ip();
    let client_ip = trusted_client_addr(
        peer_ip,
        || {
            headers
                .get_all(&X_FORWARDED_FOR)
                .iter()
                .map(|v| v.as_bytes())
        },
        true,
        shared.num_trusted_proxies,
    );
    RequestAttrs {
        peer_ip,
        client_ip,
        method: &parts.method,
        authority,
        path: parts.uri.path(),
        query: parts.uri.query(),
        headers,
        lines,
        port: conn.port,
        local_addr: conn.local,
        side: conn.side,
        vhost: u32::MAX,
        tls: conn.tls.as_deref(),
    }
}

/// What the access log needs of the request.
fn log_fields(parts: &http::request::Parts, authority: &str, client_ip: IpAddr) -> LogFields {
    LogFields {
        method: parts.method.clone(),
        authority: authority.to_string(),
        path: parts.uri.path().to_string(),
        protocol: match parts.version {
            http::Version::HTTP_2 => "HTTP/2",
            http::Version::HTTP_10 => "HTTP/1.0",
            _ => "HTTP/1.1",
        },
        request_id: parts
            .headers
            .get(&X_REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .map(Into::into),
        client_ip,
    }
}

/// The request's authority: the URI's (HTTP/2, absolute form) or the `Host` header (from
/// the lines kept as read when the map does not hold them).
fn authority_of<'a>(parts: &'a http::request::Parts, lines: Option<&'a RequestLines>) -> &'a str {
    if let Some(a) = parts.uri.authority() {
        return a.as_str();
    }
    first_value(&parts.headers, lines, &header::HOST)
        .and_then(visible_str)
        .unwrap_or("")
}

/// Stage 2: the VirtualService route (first match wins) and its virtual host's index; `None`
/// answers 404 `NR`.
fn find_route<'s>(
    snapshot: &'s Snapshot,
    conn: &ConnCtx,
    attrs: &RequestAttrs<'_>,
) -> Option<(u32, &'s Arc<Route>)> {
    let table = snapshot.http_routes(conn)?;
    table.find_in_vhost(&RouteInput {
        method: attrs.method,
        host: host_of(attrs.authority),
        authority: attrs.authority,
        path: attrs.path,
        query: attrs.query,
        headers: attrs.headers,
        port: attrs.port,
    })
}

/// What the synchronous policy stages let through.
#[derive(Default)]
struct SyncPass {
    /// `x-ratelimit-*` of the local limiter, applied straight to the response at the end: no
    /// header map on the hot path.
    local_limit_headers: Option<RateLimitHeaders>,
    /// For the upstream request (shadow mode's `request_headers_to_add_when_not_enforced`).
    /// Boxed: rarely there, and inline it would be 96 bytes of every proxied request's future.
    request_headers: Option<Box<HeaderMap>>,
    /// An allowed cross-origin request's `origin`: its response gets the route's CORS headers.
    cors_origin: Option<Box<HeaderValue>>,
}

/// What stages 3-4 decided.
enum Policies {
    Pass(SyncPass),
    /// The reply that ends the request, and the local limiter's headers for it (see
    /// [`Answer`]).
    Reply(Response<ProxyBody>, Option<RateLimitHeaders>),
}

/// Stages 3 (authz) and 4 (local rate limit).
fn sync_policies(
    filters: &Filters,
    attrs: &RequestAttrs<'_>,
    route: &Route,
    shared: &Shared,
    outcome: &mut Outcome,
) -> Policies {
    let mut passed = SyncPass::default();
    let logging = shared.access_log.is_some();
    if let Some(authz) = &filters.authz {
        let note = authz.check_http(attrs, &shared.metrics);
        outcome.shadow_policy = note.shadow_denied_by;
        if let Some(policy) = note.denied_by {
            outcome.policy = Some(policy);
            outcome.details = Some(RBAC_DENIED);
            return Policies::Reply(local(authz::denied_reply(), outcome), None);
        }
    }
    if let Some(limiter) = &filters.local_rate_limit {
        match limiter.check_http(attrs, route) {
            LimitVerdict::Pass {
                response_headers,
                request_headers,
                shadow_rule,
            } => {
                passed.local_limit_headers = response_headers;
                if !request_headers.is_empty() {
                    let add = passed.request_headers.get_or_insert_with(Box::default);
                    for (name, value) in request_headers {
                        add.insert(name.clone(), value.clone());
                    }
                }
                if let (true, Some(rule)) = (logging, shadow_rule) {
                    outcome.shadow_policy = Some(Arc::from(rule));
                }
            }
            LimitVerdict::Limited {
                response,
                response_headers,
                rule,
            } => {
                outcome.flag = Some(ResponseFlag::RateLimited);
                outcome.details = Some(LOCAL_RATE_LIMITED);
                if logging {
                    outcome.policy = Some(Arc::from(rule));
                }
                return Policies::Reply(response, response_headers);
            }
        }
    }
    Policies::Pass(passed)
}

fn decorate_cors(
    route: &Route,
    origin: Option<Box<HeaderValue>>,
    response: &mut Response<ProxyBody>,
) {
    if let (Some(cors), Some(origin)) = (&route.cors, origin) {
        cors.decorate(*origin, response);
    }
}

/// A VirtualService `directResponse`.
fn direct_response(
    status: http::StatusCode,
    body: &bytes::Bytes,
    content_type: Option<&HeaderValue>,
) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::full(body.clone()));
    // A code without a standard reason phrase (the seed's 333) is written with Envoy's
    // `Unknown` by both server paths (`fast_h1::status_phrase`), not through an extension
    // that would allocate a map on every response.
    *resp.status_mut() = status;
    if let Some(ct) = content_type {
        resp.headers_mut().insert(header::CONTENT_TYPE, ct.clone());
    }
    resp
}

/// A `redirect`'s answer: its status, no body, and the `location` made from the request.
fn redirect_response(
    r: &crate::pipeline::routing::Redirect,
    attrs: &RequestAttrs<'_>,
) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::Empty);
    *resp.status_mut() = r.status;
    let location = r.location(attrs.authority, attrs.path, attrs.query);
    if let Ok(v) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// A route's `rewrite`, on the request before it goes upstream: the path (query kept) and
/// Host (the lines kept as read move into the map first, so the new value is the only one).
fn rewrite_request(
    parts: &mut http::request::Parts,
    lines: &mut Option<RequestLines>,
    route: &Route,
    rw: &crate::pipeline::routing::Rewrite,
) {
    if let Some(path) = rw.path(route, parts.uri.path()) {
        let pq = match parts.uri.query() {
            Some(q) => format!("{path}?{q}"),
            None => path,
        };
        let mut uri = http::uri::Parts::from(parts.uri.clone());
        if let Ok(pq) = http::uri::PathAndQuery::try_from(pq) {
            uri.path_and_query = Some(pq);
            if let Ok(u) = http::Uri::from_parts(uri) {
                parts.uri = u;
            }
        }
    }
    if let Some(authority) = &rw.authority {
        if let Some(l) = lines.take() {
            l.read_into(&mut parts.headers, forwarding_headers::ADDED);
        }
        parts.headers.insert(header::HOST, authority.clone());
        if parts.uri.authority().is_some() {
            let mut uri = http::uri::Parts::from(parts.uri.clone());
            if let Ok(a) = http::uri::Authority::try_from(authority.as_bytes()) {
                uri.authority = Some(a);
                if let Ok(u) = http::Uri::from_parts(uri) {
                    parts.uri = u;
                }
            }
        }
    }
}

/// Stage 7: the route's response headers, then the policy stages' headers (the local
/// limiter's are left to the server, see [`Answer`]).
fn respond(response: &mut Response<ProxyBody>, route: &Route, extra_headers: Option<HeaderMap>) {
    if !route.response_headers.is_empty() {
        route.response_headers.apply(response_headers_mut(response));
    }
    // These replace what the upstream sent of their names, so they need no upstream lines
    // read into the map: lines kept as read give way to them (`h1_exchange::into_response`).
    if let Some(h) = extra_headers {
        response.headers_mut().extend(h);
    }
}

/// The request for the upstream: hop-by-hop headers stripped, then the forwarding headers,
/// then the policy stages' and the route's and cluster's header operations. Those see (and may
/// replace) the forwarding headers, so with any of them the request's lines kept as read and
/// the forwarding headers go into the map; without, the upstream encoder writes them
/// ([`Forwarding`]).
///
/// Not inline in `run`: locals of an `async fn` keep their room in its future even once moved,
/// and that future is moved into a box per request.
fn outgoing<'a>(
    mut parts: http::request::Parts,
    lines: Option<RequestLines>,
    body: ProxyBody,
    forwarding: Forwarding<'a>,
    extra_request_headers: Option<Box<HeaderMap>>,
    route: &Route,
    target: &WeightedCluster,
) -> Outgoing<'a> {
    let edited = extra_request_headers.is_some()
        || !route.request_headers.is_empty()
        || !target.request_headers.is_empty();
    let lines = match lines {
        Some(lines) if edited => {
            lines.read_into(&mut parts.headers, forwarding_headers::ADDED);
            None
        }
        lines => lines,
    };
    strip_hop_by_hop(&mut parts.headers);
    let forwarding = if edited {
        forwarding.apply(&mut parts.headers);
        if let Some(h) = extra_request_headers {
            parts.headers.extend(*h);
        }
        route.request_headers.apply(&mut parts.headers);
        target.request_headers.apply(&mut parts.headers);
        None
    } else {
        Some(forwarding)
    };
    Outgoing {
        parts,
        lines,
        forwarding,
        body,
        original_dst: None,
    }
}

/// Envoy's response code details of the policy stages.
const RBAC_DENIED: &str = "rbac_access_denied_matched_policy";
const LOCAL_RATE_LIMITED: &str = "local_rate_limited";

fn local(reply: LocalReply, outcome: &mut Outcome) -> Response<ProxyBody> {
    outcome.flag = reply.flag;
    reply.into_response()
}

fn local_with_headers(
    reply: LocalReply,
    headers: HeaderMap,
    outcome: &mut Outcome,
) -> Response<ProxyBody> {
    let mut resp = local(reply, outcome);
    resp.headers_mut().extend(headers);
    resp
}

/// What [`decide`] decided. Returned once, on the stack; boxing `Waiting` would cost every
/// proxied request an allocation.
#[allow(clippy::large_enum_variant)]
enum Decided {
    /// The response, and the local limiter's headers for it.
    Now(Response<ProxyBody>, Option<RateLimitHeaders>),
    /// Stages 5-7 wait for something ([`act`]).
    Later(Waiting),
}

/// A request past stages 1-4 that waits for the global limit or an upstream.
struct Waiting {
    parts: http::request::Parts,
    lines: Option<RequestLines>,
    body: ProxyBody,
    /// Stage 1's trusted client address.
    client_ip: IpAddr,
    route: Arc<Route>,
    /// Stage 2's virtual host, for stage 5.
    vhost: u32,
    passed: SyncPass,
}

/// Stages 1-4, then the direct response when there is no global limit to wait for.
fn decide(
    req: Request<ProxyBody>,
    mut lines: Option<RequestLines>,
    conn: &ConnCtx,
    shared: &Shared,
    snapshot: &Snapshot,
    outcome: &mut Outcome,
    log: &mut Option<LogFields>,
) -> Decided {
    let (mut parts, body) = req.into_parts();
    // Readers of arbitrary headers get the map: the configured stages, the access log
    // (`x-request-id`) and the trusted client address (`x-forwarded-for`).
    if snapshot.reads_request_headers()
        || shared.access_log.is_some()
        || shared.num_trusted_proxies > 0
    {
        if let Some(lines) = lines.take() {
            lines.read_into(&mut parts.headers, forwarding_headers::ADDED);
        }
    }
    // Stages that read headers see the request's XFCC as Envoy's would (changed before
    // routing); the rest of the change is made when the request is sent.
    if snapshot.reads_request_headers()
        && client_cert::drops_clients(
            shared.client_cert.for_side(conn.side),
            conn.client_presented_cert(),
        )
    {
        parts
            .headers
            .remove(&forwarding_headers::X_FORWARDED_CLIENT_CERT);
    }
    // One authority for every stage and the upstream (or a 400), see `authority`.
    let rejected = authority::resolve(&mut parts, &mut lines).err();
    let authority = authority_of(&parts, lines.as_ref());
    let mut attrs = request_attrs(conn, shared, &parts, lines.as_ref(), authority);
    if shared.access_log.is_some() {
        *log = Some(log_fields(&parts, authority, attrs.client_ip));
    }

    // 1. decode
    if conn.take_framing_violation() {
        return Decided::Now(local(LocalReply::bad_request(), outcome), None);
    }
    if let Some(rejection) = rejected {
        shared.metrics.downstream_rejected(rejection.label());
        outcome.details = Some(rejection.details());
        return Decided::Now(local(LocalReply::bad_request(), outcome), None);
    }

    // 2. route
    let Some((vhost, route)) = find_route(snapshot, conn, &attrs) else {
        return Decided::Now(local(LocalReply::no_route(), outcome), None);
    };
    attrs.vhost = vhost;
    outcome.route = Some(route.clone());
    let route = route.clone();

    // 3-4. synchronous policies
    let filters = snapshot.filters_for(conn.side);
    let mut passed = match sync_policies(filters, &attrs, &route, shared, outcome) {
        Policies::Pass(passed) => passed,
        Policies::Reply(reply, limit_headers) => return Decided::Now(reply, limit_headers),
    };
    // CORS after RBAC and the local limit, as Istio orders Envoy's filters (a preflight an
    // AuthorizationPolicy denies is denied).
    if let Some(cors) = &route.cors {
        match cors.check(&parts.method, &parts.headers) {
            CorsVerdict::Pass => {}
            CorsVerdict::Answer(response) => {
                return Decided::Now(response, passed.local_limit_headers)
            }
            CorsVerdict::Allowed(origin) => passed.cors_origin = Some(Box::new(origin)),
        }
    }
    if filters.global_rate_limit.is_none() && route.fault.is_none() {
        let now = match &route.action {
            RouteAction::Direct {
                status,
                body,
                content_type,
            } => Some(direct_response(*status, body, content_type.as_ref())),
            RouteAction::Redirect(r) => Some(redirect_response(r, &attrs)),
            RouteAction::Forward { .. } => None,
        };
        if let Some(mut response) = now {
            // 6-7 without waiting.
            respond(&mut response, &route, None);
            decorate_cors(&route, passed.cors_origin, &mut response);
            return Decided::Now(response, passed.local_limit_headers);
        }
    }
    let client_ip = attrs.client_ip;
    Decided::Later(Waiting {
        parts,
        lines,
        body,
        client_ip,
        route,
        vhost,
        passed,
    })
}

/// Stages 5-7 of a request that waits, then its answer, counted and logged. The stages are a
/// labeled block rather than a nested `async fn`, and `waiting`'s fields are used in place:
/// each copy of the request would be room in this future, which is boxed per request.
async fn act(
    mut waiting: Waiting,
    conn: &ConnCtx,
    worker: &WorkerCtx,
    snapshot: Arc<Snapshot>,
    mut outcome: Outcome,
    log: Option<LogFields>,
    start: Instant,
) -> Answer {
    let shared = &*worker.shared;
    let mut limit_headers = None;
    let cors_origin = waiting.passed.cors_origin.take();
    let mut response = 'stages: {
        let filters = snapshot.filters_for(conn.side);
        let route = &waiting.route;
        let SyncPass {
            mut local_limit_headers,
            request_headers: mut extra_request_headers,
            cors_origin: _,
        } = waiting.passed;
        // 5. global rate limit
        let mut extra_headers: Option<HeaderMap> = None;
        if let Some(f) = &filters.global_rate_limit {
            let lines = waiting.lines.as_ref();
            let authority = authority_of(&waiting.parts, lines);
            let mut attrs = request_attrs(conn, shared, &waiting.parts, lines, authority);
            attrs.vhost = waiting.vhost;
            // The global stage's own replies carry them too.
            if let Some(h) = local_limit_headers.take() {
                h.apply(extra_headers.get_or_insert_with(HeaderMap::new));
            }
            match f.check(&attrs, route, &shared.metrics).await {
                Verdict::Continue => {}
                Verdict::ContinueWithHeaders(h) => {
                    extra_headers.get_or_insert_with(HeaderMap::new).extend(h)
                }
                Verdict::ContinueWithRequestHeaders { request, response } => {
                    extra_request_headers
                        .get_or_insert_with(Box::default)
                        .extend(request);
                    extra_headers
                        .get_or_insert_with(HeaderMap::new)
                        .extend(response)
                }
                Verdict::Reply(r) => break 'stages local(r, &mut outcome),
                Verdict::ReplyWithHeaders(r, mut h) => {
                    h.extend(extra_headers.take().unwrap_or_default());
                    break 'stages local_with_headers(r, h, &mut outcome);
                }
            }
        }
        let client_ip = waiting.client_ip;
        let peer_ip = conn.peer.ip();

        // Fault injection: Istio's fault filter sits after the policies, before the router.
        if let Some(fault) = &route.fault {
            if let Some((delay, share)) = fault.delay {
                if Fault::applies(share) {
                    outcome.flag = Some(ResponseFlag::DelayInjected);
                    tokio::time::sleep(delay).await;
                }
            }
            if let Some((status, share)) = fault.abort {
                if Fault::applies(share) {
                    break 'stages local(LocalReply::fault_abort(status), &mut outcome);
                }
            }
        }

        // 6. action
        let mut response = match &route.action {
            RouteAction::Direct {
                status,
                body,
                content_type,
            } => direct_response(*status, body, content_type.as_ref()),
            RouteAction::Redirect(r) => {
                let lines = waiting.lines.as_ref();
                let authority = authority_of(&waiting.parts, lines);
                let attrs = request_attrs(conn, shared, &waiting.parts, lines, authority);
                redirect_response(r, &attrs)
            }
            RouteAction::Forward {
                timeout,
                retries,
                mirrors,
                ..
            } => {
                if let Some(rw) = &route.rewrite {
                    rewrite_request(&mut waiting.parts, &mut waiting.lines, route, rw);
                }
                let Some(target) = route.pick_cluster() else {
                    break 'stages local(LocalReply::no_healthy_upstream(), &mut outcome);
                };
                if waiting.parts.version == http::Version::HTTP_2
                    && !waiting.parts.headers.contains_key(header::HOST)
                {
                    if let Ok(v) = HeaderValue::from_str(authority_of(&waiting.parts, None)) {
                        waiting.parts.headers.insert(header::HOST, v);
                    }
                }
                let forwarding = Forwarding::new(
                    peer_ip,
                    &conn.peer_value,
                    client_ip,
                    shared.num_trusted_proxies,
                )
                .on_side(conn.side)
                .over_tls(conn.tls.is_some())
                .client_cert(
                    shared.client_cert.for_side(conn.side),
                    conn.client_presented_cert(),
                    conn.tls.as_ref().and_then(|t| t.xfcc.as_ref()),
                );
                // Boxed (see `forward_boxed`): the request's future is moved into place per
                // request, and direct responses should not pay for the upstream future's size.
                let mut request = outgoing(
                    waiting.parts,
                    waiting.lines,
                    waiting.body,
                    forwarding,
                    extra_request_headers,
                    route,
                    target,
                );
                request.original_dst = conn.original_dst.as_ref().map(|(_, a)| a);
                if !mirrors.is_empty() {
                    crate::upstream::mirror::shadow(
                        &worker.upstream.mirror,
                        &worker.shared,
                        mirrors,
                        &mut request,
                        *timeout,
                    );
                }
                let upstream = forward_boxed(
                    &worker.upstream,
                    &shared.metrics,
                    target,
                    request,
                    *timeout,
                    retries,
                );
                match upstream.await {
                    Ok(up) => {
                        outcome.upstream = Some(up.endpoint);
                        let mut response = up.response;
                        // hyper's clients' responses; lines kept as read skip them when written.
                        strip_hop_by_hop(response.headers_mut());
                        if !target.response_headers.is_empty() {
                            target
                                .response_headers
                                .apply(response_headers_mut(&mut response));
                        }
                        response
                    }
                    Err(failure) => {
                        outcome.upstream = failure.endpoint;
                        break 'stages local(failure.reply, &mut outcome);
                    }
                }
            }
        };

        // 7. respond
        respond(&mut response, route, extra_headers);
        limit_headers = local_limit_headers;
        response
    };
    // Envoy's CORS filter sees every answer after it, local replies included.
    decorate_cors(&waiting.route, cors_origin, &mut response);
    finish(shared, conn, start, response, limit_headers, &outcome, log)
}
