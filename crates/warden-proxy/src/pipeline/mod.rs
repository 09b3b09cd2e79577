//! One HTTP request through the proxy, the same for gateway and sidecar:
//!
//! 1. **decode**  framing checks (Content-Length with Transfer-Encoding -> 400), one authority
//!    (`routing::authority`, or a 400) and [`RequestAttrs`] (the trusted client address per
//!    Envoy's XFF rules)
//! 2. **route**   VirtualService match, first match wins; none -> 404 `NR`
//! 3. **filters** the side's filter chain (`filters::chain`: RBAC -> 403, local rate limit ->
//!    429, CORS, global rate limit -> 429 / 500, fault, added filters), each answering,
//!    continuing or waiting
//! 4. **action**  direct response or redirect (pre-built), or the upstream (pool, load
//!    balancing, timeout, retries, mirrors)
//! 5. **respond** route response headers, the filters' response phases in reverse, metrics,
//!    access log
//!
//! Requests that need no waiting (no filter waits, a direct response, a local reply) are
//! answered in [`handle`] before any future exists; the rest get one boxed future ([`act`]),
//! which resumes the chain where it stopped.

#[cfg(test)]
mod decision_tests;
mod istio_record;
mod shared;
mod unanswered;

pub use shared::{Shared, WorkerCtx};

use crate::core::access_log::{AccessLog, Field, Record};
use crate::core::client_addr::{client_addr_by_cidrs, trusted_client_addr};
use crate::core::client_cert;
use crate::core::conn::ConnCtx;
use crate::core::dynamic_metadata::DynamicMetadata;
use crate::core::forwarding_headers::{self, strip_hop_by_hop, Forwarding, X_FORWARDED_FOR};
use crate::core::local_reply::{LocalReply, ResponseFlag};
use crate::core::request_attrs::{authority_of, RequestAttrs};
use crate::filters::chain::{FilterState, Notes, Verdict};
use crate::filters::ChainFlow;
use crate::routing::{authority, host_of, Route, RouteAction, RouteInput, WeightedCluster};
use crate::snapshot::Snapshot;
use crate::upstream::body::ProxyBody;
use crate::upstream::h1_exchange::{response_header, response_headers_mut};
use crate::upstream::{forward_boxed, Outgoing};
use http::{header, HeaderMap, HeaderValue, Request, Response};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use warden_http1::request_lines::RequestLines;
use warden_local_ratelimit::RateLimitHeaders;

/// Per-request outcome for metrics and the access log (the filters' part is in their
/// [`Notes`]).
#[derive(Default)]
struct Outcome {
    route: Option<Arc<Route>>,
    upstream: Option<http::uri::Authority>,
    /// The trusted client address (for `/ratelimit/top`).
    client_ip: Option<IpAddr>,
    /// The cluster the request went to (kept only for the access log).
    cluster: Option<Arc<crate::upstream::cluster::Cluster>>,
    /// The upstream's response is the answer (`via_upstream`).
    answered_upstream: bool,
    istio: istio_record::RequestSide,
    /// The upstream connection's local address and a TLS origination's failure (access log).
    upstream_local: Option<std::net::SocketAddr>,
    transport_failure: Option<Box<str>>,
    /// A gRPC request's messages, counted as its body goes upstream.
    grpc_requests: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// The request's trace, when tracing is configured.
    trace: Option<crate::core::traces::RequestTrace>,
}

/// Run a request through the pipeline; the body is hyper's stream (hyper's server) or nothing
/// (the fast path's body-less requests). The fast path's requests come with their header
/// lines as read and an empty map (see [`RequestLines`]); they are read into the map here
/// when something is configured that reads headers.
///
/// Decoding, routing, the filters that do not wait and a direct response run here, before any
/// future exists, and the answer comes back at once. Only a request that waits (a waiting
/// filter, the upstream) gets a future, on the heap: building a future the size of the whole
/// pipeline and moving it into a box cost a direct response or a local 429 more than its
/// routing.
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
    let mut state = FilterState::new(shared.access_log.is_some());
    let mut log = None;
    match decide(
        req,
        lines,
        conn,
        shared,
        &snapshot,
        &mut outcome,
        &mut state,
        &mut log,
    ) {
        Decided::Now(response, limit_headers) => Handling::Answered({
            settle_for_log(shared, &mut state);
            finish(
                shared,
                conn,
                start,
                response,
                limit_headers,
                &mut outcome,
                &state,
                log,
            )
        }),
        // One future holding the request once: no async block around `act` keeping its own
        // copy (the box stays below the upstream future's size class).
        // Its box is allocated first and the future made in it: `Box::pin(act(..))` made
        // the future on the stack and copied all of it (its every state) into the box.
        Decided::Later(waiting) => {
            let boxed = Box::write(
                Box::new_uninit(),
                act(waiting, conn, worker, snapshot, outcome, state, log, start),
            );
            Handling::Waiting(Box::into_pin(boxed))
        }
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
// What a request leaves for its metrics and log line, each from a different stage.
#[allow(clippy::too_many_arguments)]
fn finish(
    shared: &Shared,
    conn: &ConnCtx,
    start: Instant,
    mut response: Response<ProxyBody>,
    limit_headers: Option<RateLimitHeaders>,
    outcome: &mut Outcome,
    state: &FilterState,
    log: Option<LogFields>,
) -> Answer {
    let notes = &state.notes;
    let metadata = state.dynamic_metadata.as_deref();
    let auth = state.request_auth.as_ref();
    if notes.flag == Some(ResponseFlag::DownstreamProtocolError) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if notes.flag == Some(ResponseFlag::RateLimited) {
        note_limited(shared, outcome, notes, auth);
    }
    // One clock read for Istio's metrics and the rest.
    let elapsed = start.elapsed();
    istio_record::record(
        shared,
        conn,
        elapsed,
        &mut response,
        outcome.route.as_deref(),
        outcome.istio,
        notes.flag,
        outcome.grpc_requests.as_ref(),
    );
    record(
        shared,
        elapsed,
        &mut response,
        outcome,
        notes,
        metadata,
        log,
    );
    if let Some(trace) = outcome.trace.take_if(|t| t.started.is_some()) {
        report_span(shared, conn, elapsed, &response, outcome, notes, trace);
    }
    Answer {
        response,
        limit_headers,
    }
}

/// A sampled request's span, queued for the exporter.
#[cold]
fn report_span(
    shared: &Shared,
    conn: &ConnCtx,
    elapsed: std::time::Duration,
    response: &Response<ProxyBody>,
    outcome: &Outcome,
    notes: &Notes,
    trace: crate::core::traces::RequestTrace,
) {
    let Some(tracer) = &shared.tracer else {
        return;
    };
    let upstream = outcome.upstream.as_ref().map(|a| a.as_str());
    let answered = crate::core::traces::Answered {
        status: response.status().as_u16(),
        response_size: http_body::Body::size_hint(response.body())
            .exact()
            .or_else(|| content_length(response.headers()))
            .unwrap_or(0),
        flags: notes.flags(),
        upstream_cluster: outcome.cluster.as_ref().map(|c| c.name.as_ref()),
        upstream_address: upstream,
        kind: match conn.side {
            crate::core::destination::Side::Inbound => warden_trace::SpanKind::Server,
            _ => warden_trace::SpanKind::Client,
        },
        elapsed,
    };
    if let Some(finished) = trace.finish(&answered) {
        tracer.push(finished);
    }
}

/// The dynamic metadata an access log that writes it reads (jwt_authn's payload is written
/// on first read: `FilterState::settle_metadata`).
fn settle_for_log(shared: &Shared, state: &mut FilterState) {
    if shared.access_log.as_ref().is_some_and(|l| l.reads_metadata) {
        state.settle_metadata();
    }
}

/// A limited request's client in its limiter's heavy hitters (`/ratelimit/top`): the JWT
/// principal when the request had one, else the trusted client address.
#[cold]
fn note_limited(
    shared: &Shared,
    outcome: &Outcome,
    notes: &Notes,
    auth: Option<&Arc<warden_jwt::Verified>>,
) {
    use crate::core::heavy_hitters::{Client, Limiter};
    let limiter = if notes.details == Some(crate::filters::local_rate_limit::LOCAL_RATE_LIMITED) {
        Limiter::Local
    } else {
        Limiter::Global
    };
    let client = match (auth, outcome.client_ip) {
        (Some(v), _) => Client::Principal(v.clone()),
        (None, Some(ip)) => Client::Ip(ip),
        (None, None) => return,
    };
    shared.limited.record(
        limiter,
        client,
        notes.policy.as_ref(),
        std::time::SystemTime::now(),
    );
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
// As `finish`: each argument comes from a different stage.
#[allow(clippy::too_many_arguments)]
fn record(
    shared: &Shared,
    elapsed: std::time::Duration,
    response: &mut Response<ProxyBody>,
    outcome: &Outcome,
    notes: &Notes,
    metadata: Option<&DynamicMetadata>,
    log: Option<LogFields>,
) {
    let status = response.status().as_u16();
    let metrics = &shared.metrics;
    metrics.requests.inc();
    metrics.duration.observe(elapsed.as_micros() as u64);
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
        if fields.filter.is_none_or(|f| f.admits(status)) {
            let record = finish_record(
                access_log, fields, elapsed, response, outcome, notes, metadata,
            );
            log_when_sent(access_log, record, response);
        }
    }
}

/// The rest of a request's log record, once it is answered.
fn finish_record(
    access_log: &AccessLog,
    fields: LogFields,
    elapsed: std::time::Duration,
    response: &Response<ProxyBody>,
    outcome: &Outcome,
    notes: &Notes,
    metadata: Option<&DynamicMetadata>,
) -> Box<Record> {
    let mut r = fields.record;
    r.duration = elapsed;
    r.status = response.status().as_u16();
    r.flags = notes.flags();
    r.write_text(Field::Details, |out| {
        notes.write_details(outcome.answered_upstream, out)
    });
    r.policy = notes.policy.clone();
    r.shadow_policy = notes.shadow_policy.clone();
    upstream_fields(&mut r, outcome);
    if !access_log.response_headers.is_empty() {
        r.take_response_headers(&access_log.response_headers, |name| {
            response_header(response, name)
        });
    }
    // A body in memory is sent whole; a streamed one is counted as it goes (`log_when_sent`).
    r.bytes_sent = match response.body() {
        ProxyBody::Full(Some(b)) => b.len() as u64,
        _ => 0,
    };
    if access_log.reads_metadata {
        r.dynamic_metadata = metadata.cloned();
    }
    r
}

/// What the log line says of the route and the upstream (answered or not: `unanswered`).
fn upstream_fields(r: &mut Record, outcome: &Outcome) {
    if let Some(host) = &outcome.upstream {
        r.set_text(Field::UpstreamHost, host.as_str());
    }
    r.upstream_local = outcome.upstream_local;
    if let Some(failure) = &outcome.transport_failure {
        r.set_text(Field::TransportFailure, failure);
    }
    if let Some(cluster) = &outcome.cluster {
        r.set_text(Field::UpstreamCluster, &cluster.name);
    }
    if let Some(route) = &outcome.route {
        r.set_text(Field::RouteName, &route.name);
    }
}

/// A gRPC request's body, counting its messages as it goes upstream (Istio's
/// `istio_request_messages_total`, reported with the response).
#[cold]
fn count_grpc_requests(body: ProxyBody, outcome: &mut Outcome) -> ProxyBody {
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    outcome.grpc_requests = Some(count.clone());
    ProxyBody::Boxed(Box::pin(crate::core::grpc_messages::CountedMessages::new(
        body, count,
    )))
}

/// Queue the record now when the answer's body is in memory (or empty), else when its streamed
/// body ends ([`crate::core::access_log::sent`]). A wrapper would hide an upstream's header
/// lines kept as read from the writer, so they move into the map first; an upstream body
/// read by the proxy needs none.
fn log_when_sent(access_log: &AccessLog, record: Box<Record>, response: &mut Response<ProxyBody>) {
    let streamed = match response.body() {
        ProxyBody::Full(_) | ProxyBody::Empty => false,
        body => !http_body::Body::is_end_stream(body),
    };
    if !streamed {
        access_log.log(record);
        return;
    }
    // An upstream's body read by the proxy counts what it sends itself: its header lines
    // stay as read, for the response's writer.
    if let ProxyBody::H1(body) = response.body_mut() {
        body.log_at_end(access_log.count_sent(record));
        return;
    }
    response_headers_mut(response);
    let body = std::mem::replace(response.body_mut(), ProxyBody::Empty);
    *response.body_mut() = ProxyBody::Boxed(Box::pin(access_log.log_at_end(record, body)));
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The trusted client address, per the XFF rules (Envoy's `xff_num_trusted_hops`, or its
/// `xff_trusted_cidrs`).
fn client_ip(conn: &ConnCtx, shared: &Shared, headers: &HeaderMap) -> IpAddr {
    let xff = || {
        headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .map(|v| v.as_bytes())
    };
    match &shared.xff_trusted_cidrs {
        Some(trusted) => client_addr_by_cidrs(conn.peer.ip(), xff, trusted),
        None => trusted_client_addr(conn.peer.ip(), xff, true, shared.num_trusted_proxies),
    }
}

/// What the filters see of the request; `client_ip` is computed once per request
/// ([`client_ip`]).
fn request_attrs<'a>(
    conn: &'a ConnCtx,
    parts: &'a http::request::Parts,
    lines: Option<&'a RequestLines>,
    authority: &'a str,
    client_ip: IpAddr,
) -> RequestAttrs<'a> {
    RequestAttrs {
        peer_ip: conn.peer.ip(),
        peer_port: conn.peer.port(),
        version: parts.version,
        client_ip,
        method: &parts.method,
        authority,
        path: parts.uri.path(),
        query: parts.uri.query(),
        headers: &parts.headers,
        lines,
        port: conn.port,
        local_addr: conn.local,
        side: conn.side,
        vhost: u32::MAX,
        tls: conn.tls.as_deref(),
    }
}

/// What the access log needs of the request, captured only when logging is on; `request_id`
/// is the `x-request-id` made for a request that came without one (the upstream gets it too).
struct LogFields {
    record: Box<Record>,
    request_id: Option<[u8; 16]>,
    /// Telemetry's `filter`: which answers are logged.
    filter: Option<crate::core::access_log::CodeFilter>,
}

/// What the access log needs of the request (read from its lines as read when it has them:
/// no header map is built for the log).
fn log_fields(
    access_log: &AccessLog,
    conn: &ConnCtx,
    parts: &http::request::Parts,
    lines: Option<&RequestLines>,
    authority: &str,
    client_ip: IpAddr,
) -> LogFields {
    let request = crate::core::access_log::record::Request {
        method: parts.method.as_str(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path(), |pq| pq.as_str()),
        authority,
        headers: &parts.headers,
        lines,
        scheme: if conn.tls.is_some() { "https" } else { "http" },
        protocol: crate::core::request_attrs::protocol_text(parts.version),
        sni: conn.tls.as_ref().and_then(|t| t.sni.as_deref()),
        peer: conn.peer,
        local: conn.local,
        client_ip,
        peer_text: Some(conn.peer_text()),
        // A gateway and a sidecar's inbound side append the peer to `x-forwarded-for`.
        xff_peer: (conn.side != crate::core::destination::Side::Outbound)
            .then_some(&conn.peer_value),
    };
    let (record, request_id) = access_log.capture(&request);
    LogFields {
        record,
        request_id,
        filter: None,
    }
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

fn local(reply: LocalReply, state: &mut FilterState) -> Response<ProxyBody> {
    state.notes.replied(reply.flag);
    reply.into_response()
}

/// What [`decide`] decided. Returned once, on the stack; boxing `Waiting` would cost every
/// proxied request an allocation.
#[allow(clippy::large_enum_variant)]
enum Decided {
    /// The response, and the local limiter's headers for it.
    Now(Response<ProxyBody>, Option<RateLimitHeaders>),
    /// The rest waits for a filter or the upstream ([`act`]).
    Later(Waiting),
}

/// A routed request whose filters let it through so far, waiting for a filter or the
/// upstream.
struct Waiting {
    parts: http::request::Parts,
    lines: Option<RequestLines>,
    body: ProxyBody,
    /// The trusted client address.
    client_ip: IpAddr,
    route: Arc<Route>,
    /// The virtual host routing picked, for the filters that resume.
    vhost: u32,
    /// The chain's index to resume at (the filter that waits; the chain's length: none).
    resume: usize,
}

/// Decode, route and the filters that answer without waiting, then a direct response or
/// redirect when nothing waits.
#[allow(clippy::too_many_arguments)]
fn decide(
    req: Request<ProxyBody>,
    mut lines: Option<RequestLines>,
    conn: &ConnCtx,
    shared: &Shared,
    snapshot: &Snapshot,
    outcome: &mut Outcome,
    state: &mut FilterState,
    log: &mut Option<LogFields>,
) -> Decided {
    let (mut parts, body) = req.into_parts();
    outcome.istio = istio_record::request_side(&parts, &body);
    // Readers of arbitrary headers get the map: the configured filters and the trusted client
    // address (`x-forwarded-for`); the access log reads the lines.
    if snapshot.reads_request_headers() || shared.reads_xff() {
        if let Some(lines) = lines.take() {
            lines.read_into(&mut parts.headers, forwarding_headers::ADDED);
        }
    }
    // Filters that read headers see the request's XFCC as Envoy's would (changed before
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
    // One authority for every filter and the upstream (or a 400), see `authority`.
    let rejected = authority::resolve(&mut parts, &mut lines).err();
    let authority = authority_of(&parts, lines.as_ref());
    let client_ip = client_ip(conn, shared, &parts.headers);
    let mut attrs = request_attrs(conn, &parts, lines.as_ref(), authority, client_ip);
    outcome.client_ip = Some(client_ip);
    if let Some(access_log) = shared
        .access_log
        .as_ref()
        .filter(|_| !snapshot.access_logging.disabled)
    {
        let mut fields = log_fields(
            access_log,
            conn,
            &parts,
            lines.as_ref(),
            authority,
            attrs.client_ip,
        );
        fields.filter = snapshot.access_logging.filter;
        *log = Some(fields);
    }
    if let Some(plan) = &snapshot.tracing {
        let headers = crate::core::traces::Headers {
            map: &parts.headers,
            lines: lines.as_ref(),
        };
        // What a reported span names, copied only for a sampled request.
        let facts = || crate::core::traces::RequestFacts {
            method: &parts.method,
            scheme: if conn.tls.is_some() { "https" } else { "http" },
            authority,
            path_and_query: parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.path(), |pq| pq.as_str()),
            version: parts.version,
            peer: conn.peer,
            port: conn.port,
            made_request_id: log.as_ref().and_then(|l| l.request_id),
        };
        outcome.trace = Some(crate::core::traces::start(plan, headers, client_ip, facts));
    }

    // 1. decode
    if conn.take_framing_violation() {
        return Decided::Now(local(LocalReply::bad_request(), state), None);
    }
    if let Some(rejection) = rejected {
        shared.metrics.downstream_rejected(rejection.label());
        state.notes.details = Some(rejection.details());
        return Decided::Now(local(LocalReply::bad_request(), state), None);
    }

    // 2. route
    let Some((mut vhost, route)) = find_route(snapshot, conn, &attrs) else {
        return Decided::Now(local(LocalReply::no_route(), state), None);
    };
    attrs.vhost = vhost;
    outcome.route = Some(route.clone());
    let mut route = route.clone();

    // 3. the filters that answer at once
    let filters = snapshot.filters_for(conn.side);
    let mut flow = filters.on_request(0, &attrs, &route, state, &shared.metrics);
    // A filter that does not wait changed the request (jwt_authn): the ones after it see it.
    while let ChainFlow::Edited(at) = flow {
        if let Some(edit) = state.request_edit.take() {
            let routed = apply_filter_edit(
                *edit,
                (&mut parts, &mut lines),
                (conn, snapshot, client_ip),
                (&mut vhost, &mut route),
                outcome,
            );
            if routed.is_err() {
                return Decided::Now(local(LocalReply::no_route(), state), None);
            }
        }
        let authority = authority_of(&parts, lines.as_ref());
        attrs = request_attrs(conn, &parts, lines.as_ref(), authority, client_ip);
        attrs.vhost = vhost;
        flow = filters.on_request(at + 1, &attrs, &route, state, &shared.metrics);
    }
    let resume = match flow {
        ChainFlow::Edited(_) => unreachable!("edits are applied above"),
        ChainFlow::Reply(mut response, at) => {
            filters.on_response(at, &route, state, &mut response);
            return Decided::Now(response, state.local_limit_headers.take());
        }
        ChainFlow::Wait(at) => at,
        ChainFlow::Passed => {
            // 4-5 without waiting.
            if let Some(mut response) = local_action(&route, &attrs) {
                respond(&mut response, &route, None);
                filters.on_response(filters.len(), &route, state, &mut response);
                return Decided::Now(response, state.local_limit_headers.take());
            }
            filters.len()
        }
    };
    Decided::Later(Waiting {
        parts,
        lines,
        body,
        client_ip,
        route,
        vhost,
        resume,
    })
}

/// A route's answer made here: its direct response, or its redirect; `None` forwards.
fn local_action(route: &Route, attrs: &RequestAttrs<'_>) -> Option<Response<ProxyBody>> {
    match &route.action {
        RouteAction::Direct {
            status,
            body,
            content_type,
        } => Some(direct_response(*status, body, content_type.as_ref())),
        RouteAction::Redirect(r) => Some(redirect_response(r, attrs)),
        RouteAction::Forward { .. } => None,
    }
}

/// The filters from the one that waits on, then the route's action, then the answer, counted
/// and logged. The steps are a labeled block rather than a nested `async fn`, and the
/// request's parts are used in place: each copy of the request would be room in this future,
/// which is boxed per request.
// A plain fn returning an `async move` block, not an `async fn`: an async fn keeps each
// argument twice in its state, as received and as the local it is moved into at the first
// poll (rust-lang/rust#62958), and this state is copied into its box on every request. Here
// the request's pieces are captured once and used in place.
#[allow(clippy::too_many_arguments)]
fn act<'a>(
    waiting: Waiting,
    conn: &'a ConnCtx,
    worker: &'a WorkerCtx,
    snapshot: Arc<Snapshot>,
    outcome: Outcome,
    mut state: FilterState,
    log: Option<LogFields>,
    start: Instant,
) -> impl Future<Output = Answer> + Send + 'a {
    let shared = &*worker.shared;
    // Counts and logs the request if its client goes away before the answer (`DC`).
    let mut pending = unanswered::Unanswered::new(shared, conn, start, outcome, log);
    let Waiting {
        mut parts,
        mut lines,
        mut body,
        client_ip,
        mut route,
        mut vhost,
        resume,
    } = waiting;
    async move {
        let filters = snapshot.filters_for(conn.side);
        let mut reached = filters.len();
        let mut limit_headers = None;
        let mut response = 'stages: {
            // 3. the rest of the chain, from the filter that waits
            let answered = if resume < filters.len() {
                let mut authority = authority_of(&parts, lines.as_ref());
                let mut attrs = request_attrs(conn, &parts, lines.as_ref(), authority, client_ip);
                attrs.vhost = vhost;
                // A waiting filter's own replies carry the local limiter's headers too.
                if let Some(h) = state.local_limit_headers.take() {
                    h.apply(state.add_response_headers());
                }
                if filters.reads_request_body() {
                    let taken = std::mem::replace(&mut body, ProxyBody::Empty);
                    state.request_body = Some(Box::new(taken));
                }
                let mut at = resume;
                loop {
                    let verdict = filters
                        .on_request_waiting(at, &attrs, &route, &mut state, &shared.metrics)
                        .await;
                    match verdict {
                        Verdict::Continue => {}
                        Verdict::ContinueWithHeaders(h) => state.add_response_headers().extend(h),
                        Verdict::ContinueWithRequestHeaders { request, response } => {
                            state.add_request_headers().extend(request);
                            state.add_response_headers().extend(response);
                        }
                        Verdict::Reply(r) => {
                            reached = at;
                            break 'stages local(r, &mut state);
                        }
                        Verdict::ReplyWithHeaders(r, mut h) => {
                            reached = at;
                            h.extend(
                                state
                                    .response_headers
                                    .take()
                                    .map(|b| *b)
                                    .unwrap_or_default(),
                            );
                            let mut response = local(r, &mut state);
                            response.headers_mut().extend(h);
                            break 'stages response;
                        }
                    }
                    // A filter changed the request (its waiting phase, or one after it that does
                    // not wait): the next one sees the change.
                    let mut next = at + 1;
                    let flow = loop {
                        if let Some(edit) = state.request_edit.take() {
                            let routed = apply_filter_edit(
                                *edit,
                                (&mut parts, &mut lines),
                                (conn, &snapshot, client_ip),
                                (&mut vhost, &mut route),
                                &mut pending.outcome,
                            );
                            if routed.is_err() {
                                reached = next;
                                break 'stages local(LocalReply::no_route(), &mut state);
                            }
                            authority = authority_of(&parts, lines.as_ref());
                            attrs =
                                request_attrs(conn, &parts, lines.as_ref(), authority, client_ip);
                            attrs.vhost = vhost;
                        }
                        match filters.on_request(next, &attrs, &route, &mut state, &shared.metrics)
                        {
                            ChainFlow::Edited(edited) => next = edited + 1,
                            flow => break flow,
                        }
                    };
                    match flow {
                        ChainFlow::Passed => {
                            if let Some(b) = state.request_body.take() {
                                body = *b;
                            }
                            break;
                        }
                        ChainFlow::Wait(next) => at = next,
                        ChainFlow::Reply(response, next) => {
                            reached = next;
                            break 'stages response;
                        }
                        ChainFlow::Edited(_) => unreachable!("edits are applied in the loop above"),
                    }
                }
                local_action(&route, &attrs)
            } else {
                None
            };

            // 4. action
            let mut response = match (answered, &route.action) {
                (Some(response), _) => response,
                (
                    None,
                    RouteAction::Forward {
                        timeout,
                        retries,
                        mirrors,
                        ..
                    },
                ) => {
                    if let Some(rw) = &route.rewrite {
                        rewrite_request(&mut parts, &mut lines, &route, rw);
                    }
                    let Some(target) = route.pick_cluster() else {
                        break 'stages local(LocalReply::no_healthy_upstream(), &mut state);
                    };
                    pending.outcome.istio.picked = istio_record::picked(&route, target);
                    if parts.version == http::Version::HTTP_2
                        && !parts.headers.contains_key(header::HOST)
                    {
                        if let Ok(v) = HeaderValue::from_str(authority_of(&parts, None)) {
                            parts.headers.insert(header::HOST, v);
                        }
                    }
                    if shared.access_log.is_some()
                        || pending
                            .outcome
                            .trace
                            .as_ref()
                            .is_some_and(|t| t.started.is_some())
                    {
                        pending.outcome.cluster = Some(target.cluster.clone());
                    }
                    let mut forwarding = Forwarding::new(
                        conn.peer.ip(),
                        &conn.peer_value,
                        client_ip,
                        shared.trusted_hops_from(conn.peer.ip()),
                    )
                    .on_side(conn.side)
                    .over_tls(conn.tls.is_some())
                    .client_cert(
                        shared.client_cert.for_side(conn.side),
                        conn.client_presented_cert(),
                        conn.tls.as_ref().and_then(|t| t.xfcc.as_ref()),
                    );
                    // The id the log line names is the one the upstream gets.
                    if let Some(id) =
                        pending.log.as_ref().and_then(|l| l.request_id).or_else(|| {
                            pending
                                .outcome
                                .trace
                                .as_ref()
                                .and_then(|t| t.made_request_id())
                        })
                    {
                        forwarding = forwarding.with_request_id(id);
                    }
                    if pending.outcome.istio.grpc {
                        body = count_grpc_requests(body, &mut pending.outcome);
                    }
                    if let (Some(trace), Some(plan)) = (&pending.outcome.trace, &snapshot.tracing) {
                        forwarding = forwarding.with_trace(trace, plan.propagation);
                    }
                    // Boxed (see `forward_boxed`): the request's future is moved into place per
                    // request, and direct responses should not pay for the upstream future's size.
                    let mut request = outgoing(
                        parts,
                        lines,
                        body,
                        forwarding,
                        state.request_headers.take(),
                        &route,
                        target,
                    );
                    request.original_dst = conn.original_dst.as_ref().map(|(_, a)| a);
                    if !mirrors.is_empty() {
                        crate::upstream::mirror::shadow(
                            &worker.upstream.mirror,
                            &shared.metrics,
                            mirrors,
                            &mut request,
                            *timeout,
                        );
                    }
                    let upstream = forward_boxed(
                        &worker.upstream,
                        &shared.metrics,
                        &target.cluster,
                        request,
                        *timeout,
                        retries,
                    );
                    match upstream.await {
                        Ok(up) => {
                            pending.outcome.upstream = Some(up.endpoint);
                            pending.outcome.upstream_local = up.local;
                            pending.outcome.answered_upstream = true;
                            if up.retries_exhausted {
                                state
                                    .notes
                                    .more_flags
                                    .set(ResponseFlag::UpstreamRetryLimitExceeded);
                            }
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
                            pending.outcome.upstream = failure.endpoint;
                            pending.outcome.transport_failure = failure.transport_failure;
                            if failure.retries_exhausted {
                                state
                                    .notes
                                    .more_flags
                                    .set(ResponseFlag::UpstreamRetryLimitExceeded);
                            }
                            if failure.per_try_timeout {
                                state.notes.details = Some("upstream_per_try_timeout");
                            }
                            break 'stages local(failure.reply, &mut state);
                        }
                    }
                }
                // A direct response or redirect is answered when the chain ends above.
                (None, _) => local(LocalReply::no_route(), &mut state),
            };

            // 5. respond
            respond(
                &mut response,
                &route,
                state.response_headers.take().map(|b| *b),
            );
            limit_headers = state.local_limit_headers.take();
            response
        };
        if state.response_waits {
            filters
                .on_response_waiting(reached, &route, &mut state, &mut response)
                .await;
        } else {
            filters.on_response(reached, &route, &mut state, &mut response);
        }
        settle_for_log(shared, &mut state);
        let (outcome, log) = pending.answered();
        finish(
            shared,
            conn,
            start,
            response,
            limit_headers,
            outcome,
            &state,
            log,
        )
    }
}

/// Apply the edit a filter left ([`crate::filters::chain::FilterState::request_edit`]); after
/// `clearRouteCache()` the changed request is routed again (`Err`: no route matches it).
fn apply_filter_edit(
    edit: crate::filters::chain::RequestEdit,
    (parts, lines): (&mut http::request::Parts, &mut Option<RequestLines>),
    (conn, snapshot, client_ip): (&ConnCtx, &Snapshot, IpAddr),
    (vhost, route): (&mut u32, &mut Arc<Route>),
    outcome: &mut Outcome,
) -> Result<(), ()> {
    let reroute = edit.reroute;
    apply_edit(parts, lines, edit);
    if reroute {
        let authority = authority_of(parts, lines.as_ref());
        let attrs = request_attrs(conn, parts, lines.as_ref(), authority, client_ip);
        let (v, r) = find_route(snapshot, conn, &attrs).ok_or(())?;
        *vhost = v;
        *route = r.clone();
        outcome.route = Some(route.clone());
    }
    Ok(())
}

/// A filter's change to the request, made to the request itself: headers (the lines kept as
/// read are dropped: the filter's map holds every header), method, `:path` and `:authority`.
fn apply_edit(
    parts: &mut http::request::Parts,
    lines: &mut Option<RequestLines>,
    edit: crate::filters::chain::RequestEdit,
) {
    if let Some(headers) = edit.headers {
        *lines = None;
        parts.headers = headers;
    }
    if let Some(l) = lines
        .as_mut()
        .filter(|_| !edit.remove.is_empty() || !edit.append.is_empty())
    {
        // Lines kept as read stay lines: nothing reads the map (jwt_authn's token removed).
        l.edit(&edit.remove, &edit.append);
    } else if !edit.remove.is_empty() || !edit.append.is_empty() {
        for name in &edit.remove {
            parts.headers.remove(name);
        }
        for (name, value) in edit.append {
            parts.headers.append(name, value);
        }
    }
    if let Some(method) = edit.method {
        parts.method = method;
    }
    if edit.path_and_query.is_some() || edit.authority.is_some() {
        let mut uri = http::uri::Parts::from(parts.uri.clone());
        if let Some(pq) = edit
            .path_and_query
            .and_then(|pq| http::uri::PathAndQuery::try_from(pq).ok())
        {
            uri.path_and_query = Some(pq);
        }
        if uri.authority.is_some() {
            if let Some(a) = edit
                .authority
                .and_then(|a| http::uri::Authority::try_from(a).ok())
            {
                uri.authority = Some(a);
            }
        }
        if let Ok(u) = http::Uri::from_parts(uri) {
            parts.uri = u;
        }
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
    r: &crate::routing::Redirect,
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
    rw: &crate::routing::Rewrite,
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
