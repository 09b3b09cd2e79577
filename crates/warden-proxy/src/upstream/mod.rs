//! Sending a request to a cluster: per-worker pooled hyper clients (HTTP/1.1 keep-alive and
//! h2c), endpoint choice, retries, timeouts, and mapping failures to Envoy's local replies.

pub mod body;
pub mod cluster;
pub mod connect;
pub mod h1_exchange;
pub mod h1_pool;
pub mod mirror;
pub mod outlier;
pub mod retry_on;
pub mod tcp_relay;
pub(crate) mod tcp_splice;
pub mod tls_origination;

use crate::core::forwarding_headers::{self, strip_hop_by_hop, Forwarding};
use crate::core::local_reply::LocalReply;
use crate::core::metrics::Metrics;
use crate::upstream::body::ProxyBody;
use crate::upstream::cluster::{Cluster, PickError, UpstreamProtocol};
use crate::upstream::h1_exchange::BodylessRequest;
use crate::upstream::h1_pool::{bodyless, H1Pool};
use crate::upstream::retry_on::RetryPolicy;
use http::uri::{PathAndQuery, Scheme};
use http::{request, Request, Response, Uri, Version};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use warden_http1::request_lines::RequestLines;

/// Connection pools of one worker. Each worker owns its pools so connections stay on the
/// thread that uses them.
pub struct UpstreamClients {
    h1: H1Pool,
    h2: Client<HttpConnector, ProxyBody>,
    /// Those of clusters that connect from a fixed local address (a sidecar's inbound
    /// passthrough from 127.0.0.6): their own pools, since a connection's source is part of
    /// what it is.
    sourced: Option<(std::net::IpAddr, H1Pool, Client<HttpConnector, ProxyBody>)>,
    /// Shadow requests' clients (`mirror`).
    pub mirror: mirror::MirrorClients,
    /// For the TLS clusters' clients, made on first use.
    pub connect_timeout: Duration,
}

fn h2_client(
    connect_timeout: Duration,
    source: Option<std::net::IpAddr>,
) -> Client<HttpConnector, ProxyBody> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(connect_timeout));
    connector.set_keepalive(Some(Duration::from_secs(60)));
    connector.set_local_address(source);
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(60));
    builder.http2_only(true).build(connector)
}

impl UpstreamClients {
    /// `source`: the local address of the clusters that have one (at most one is used).
    pub fn new(connect_timeout: Duration, source: Option<std::net::IpAddr>) -> Self {
        UpstreamClients {
            h1: H1Pool::new(connect_timeout),
            h2: h2_client(connect_timeout, None),
            mirror: mirror::MirrorClients::new(connect_timeout),
            connect_timeout,
            sourced: source.map(|ip| {
                (
                    ip,
                    H1Pool::with_source(connect_timeout, ip),
                    h2_client(connect_timeout, Some(ip)),
                )
            }),
        }
    }

    /// The pools a cluster's requests use.
    fn for_cluster(
        &self,
        cluster: &crate::upstream::cluster::Cluster,
    ) -> (&H1Pool, &Client<HttpConnector, ProxyBody>) {
        match (&self.sourced, cluster.source) {
            (Some((ip, h1, h2)), Some(want)) if *ip == want => (h1, h2),
            _ => (&self.h1, &self.h2),
        }
    }

    /// Close HTTP/1.1 connections unused since the previous call; call it periodically.
    pub fn sweep_idle(&self) {
        self.h1.sweep();
        if let Some((_, h1, _)) = &self.sourced {
            h1.sweep();
        }
    }
}

/// How often a worker closes upstream connections that stayed unused (the legacy client's
/// idle timeout was 60 s; a connection goes after 30-60 s unused, or after its cluster's
/// `idleTimeout` when one is set).
pub const IDLE_SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// A failed exchange, from either client.
enum SendError {
    /// With the transport's reason when TLS failed (Envoy's
    /// `%UPSTREAM_TRANSPORT_FAILURE_REASON%`).
    Connect(Option<Box<str>>),
    /// The downstream request's body was malformed (see `body::DownstreamBodyError`).
    DownstreamBody,
    /// The downstream request's body stalled (`body::StreamIdleTimeout`).
    StreamIdle,
    /// The upstream's response was not HTTP as it should be (Envoy's `UPE`).
    Protocol(String),
    Other(String),
}

/// The upstream's answer, with the endpoint that produced it (for access logs).
pub struct Upstreamed {
    pub response: Response<ProxyBody>,
    pub endpoint: http::uri::Authority,
    /// The local address of the connection that carried it (`%UPSTREAM_LOCAL_ADDRESS%`).
    pub local: Option<std::net::SocketAddr>,
    /// Retries ran out on a response they would have retried (Envoy's `URX`).
    pub retries_exhausted: bool,
}

pub struct ForwardFailure {
    pub reply: LocalReply,
    pub endpoint: Option<http::uri::Authority>,
    /// A try's own timeout expired (Envoy's details `upstream_per_try_timeout`); two flags
    /// rather than a `&str`: the result is moved on every request.
    pub per_try_timeout: bool,
    /// Retries ran out on a failure they would have retried (Envoy's `URX`).
    pub retries_exhausted: bool,
    /// Why the connection's transport failed (a TLS origination's handshake error), for
    /// `%UPSTREAM_TRANSPORT_FAILURE_REASON%`.
    pub transport_failure: Option<Box<str>>,
}

fn fail(reply: LocalReply, endpoint: Option<http::uri::Authority>) -> ForwardFailure {
    ForwardFailure {
        reply,
        endpoint,
        per_try_timeout: false,
        retries_exhausted: false,
        transport_failure: None,
    }
}

/// [`forward`] on the heap, built outside any `async fn`: a future that is constructed and
/// then boxed inside an async body still reserves its full size in the caller's state
/// (rust-lang/rust#62958), and that state is moved on every request.
pub fn forward_boxed<'a>(
    clients: &'a UpstreamClients,
    metrics: &'a Metrics,
    target: &'a Cluster,
    outgoing: Outgoing<'a>,
    timeout: Option<Duration>,
    retries: &'a RetryPolicy,
) -> Pin<Box<dyn Future<Output = Result<Upstreamed, ForwardFailure>> + Send + 'a>> {
    // The box first, the future made in it (see `pipeline::handle`).
    let boxed = Box::write(
        Box::new_uninit(),
        forward(clients, metrics, target, outgoing, timeout, retries),
    );
    Box::into_pin(boxed)
}

/// A request on its way to a cluster.
pub struct Outgoing<'a> {
    pub parts: request::Parts,
    /// The downstream request's lines as read, when `parts` does not hold them.
    pub lines: Option<RequestLines>,
    /// The forwarding headers when they are not in `parts` yet.
    pub forwarding: Option<Forwarding<'a>>,
    pub body: ProxyBody,
    /// Where the captured connection was headed: the endpoint of ORIGINAL_DST clusters.
    pub original_dst: Option<&'a http::uri::Authority>,
}

/// Forward one request. Retries (connect failure, reset, 503) only happen when the request has
/// no body: bodies are streamed and cannot be replayed.
///
/// A plain fn returning an `async move` block, not an `async fn`: an async fn keeps each
/// argument twice in its state, as received and as the local it is moved into
/// (rust-lang/rust#62958), and this state is copied into its box on every request. For the
/// same reason each branch awaits the future it builds rather than one kept in a local: a
/// future in a local and then awaited (or wrapped in a timeout) takes room twice.
fn forward<'a>(
    clients: &'a UpstreamClients,
    metrics: &'a Metrics,
    target: &'a Cluster,
    outgoing: Outgoing<'a>,
    timeout: Option<Duration>,
    retries: &'a RetryPolicy,
) -> impl Future<Output = Result<Upstreamed, ForwardFailure>> + Send + 'a {
    let Outgoing {
        parts,
        lines,
        forwarding,
        body,
        original_dst,
    } = outgoing;
    async move {
        if target.missing {
            // As Envoy's router: no cluster, no try and no retry.
            metrics.upstream_error("no_cluster");
            return Err(fail(LocalReply::no_cluster(), None));
        }
        let replayable = retries.attempts > 0 && http_body::Body::is_end_stream(&body);
        let once = Pick {
            exclude: None,
            original_dst,
        };
        match (replayable, timeout) {
            (false, None) => {
                attempt(
                    clients,
                    metrics,
                    target,
                    Head {
                        parts: HeadParts::Owned(parts),
                        lines: lines.as_ref(),
                        forwarding: forwarding.as_ref(),
                    },
                    body,
                    once,
                    retries.per_try_timeout,
                )
                .await
            }
            (false, Some(t)) => timed_out(
                metrics,
                tokio::time::timeout(
                    t,
                    attempt(
                        clients,
                        metrics,
                        target,
                        Head {
                            parts: HeadParts::Owned(parts),
                            lines: lines.as_ref(),
                            forwarding: forwarding.as_ref(),
                        },
                        body,
                        once,
                        retries.per_try_timeout,
                    ),
                )
                .await,
            ),
            (true, None) => {
                replays(
                    clients,
                    metrics,
                    target,
                    &parts,
                    lines.as_ref(),
                    forwarding.as_ref(),
                    original_dst,
                    retries,
                )
                .await
            }
            (true, Some(t)) => timed_out(
                metrics,
                tokio::time::timeout(
                    t,
                    replays(
                        clients,
                        metrics,
                        target,
                        &parts,
                        lines.as_ref(),
                        forwarding.as_ref(),
                        original_dst,
                        retries,
                    ),
                )
                .await,
            ),
        }
    }
}

/// The route's timeout over all tries, expired or not.
fn timed_out(
    metrics: &Metrics,
    result: Result<Result<Upstreamed, ForwardFailure>, tokio::time::error::Elapsed>,
) -> Result<Upstreamed, ForwardFailure> {
    result.unwrap_or_else(|_| {
        metrics.upstream_error("timeout");
        Err(fail(LocalReply::timeout(), None))
    })
}

/// The tries of a body-less request, each from the borrowed head, until one is not retried.
#[allow(clippy::too_many_arguments)]
async fn replays(
    clients: &UpstreamClients,
    metrics: &Metrics,
    target: &Cluster,
    parts: &request::Parts,
    lines: Option<&RequestLines>,
    forwarding: Option<&Forwarding<'_>>,
    original_dst: Option<&http::uri::Authority>,
    retries: &RetryPolicy,
) -> Result<Upstreamed, ForwardFailure> {
    let mut exclude = None;
    let mut last = None;
    for n in 0..=retries.attempts {
        match attempt(
            clients,
            metrics,
            target,
            Head {
                parts: HeadParts::Borrowed(parts),
                lines,
                forwarding,
            },
            ProxyBody::Empty,
            Pick {
                exclude,
                original_dst,
            },
            retries.per_try_timeout,
        )
        .await
        {
            Ok(mut up) if retries.on.retries_response(&up.response) => {
                if n == retries.attempts {
                    up.retries_exhausted = true;
                    return Ok(up);
                }
                last = Some(Ok(up));
            }
            Ok(up) => return Ok(up),
            Err(mut f) if retries.on.retries_failure(f.reply.flag) => {
                if n == retries.attempts {
                    f.retries_exhausted = true;
                    return Err(f);
                }
                exclude = endpoint_index(target, f.endpoint.as_ref());
                last = Some(Err(f));
            }
            Err(f) => return Err(f),
        }
    }
    last.unwrap_or_else(|| Err(fail(LocalReply::no_healthy_upstream(), None)))
}

fn endpoint_index(target: &Cluster, ep: Option<&http::uri::Authority>) -> Option<usize> {
    let ep = ep?;
    target.endpoints.iter().position(|e| &e.authority == ep)
}

pub(crate) fn clone_parts(parts: &request::Parts) -> request::Parts {
    let mut req = Request::new(());
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = parts.uri.clone();
    *req.version_mut() = parts.version;
    *req.headers_mut() = parts.headers.clone();
    req.into_parts().0
}

/// The request head an attempt sends, and its lines and forwarding headers not in it yet.
struct Head<'a> {
    parts: HeadParts<'a>,
    lines: Option<&'a RequestLines>,
    forwarding: Option<&'a Forwarding<'a>>,
}

/// Borrowed when retries may replay the head, owned otherwise. Not boxed: it is moved once
/// into `attempt`, as the head by value always was, and a box would cost an allocation per
/// request.
#[allow(clippy::large_enum_variant)]
enum HeadParts<'a> {
    Borrowed(&'a request::Parts),
    Owned(request::Parts),
}

impl Head<'_> {
    fn get(&self) -> &request::Parts {
        match &self.parts {
            HeadParts::Borrowed(parts) => parts,
            HeadParts::Owned(parts) => parts,
        }
    }

    /// For hyper's clients, which take the request by value: a borrowed head is copied, and
    /// the lines kept as read and the forwarding headers are added to it.
    fn into_owned(self) -> request::Parts {
        let mut parts = match self.parts {
            HeadParts::Borrowed(parts) => clone_parts(parts),
            HeadParts::Owned(parts) => parts,
        };
        if let Some(lines) = self.lines {
            lines.read_into(&mut parts.headers, forwarding_headers::ADDED);
            strip_hop_by_hop(&mut parts.headers);
        }
        if let Some(forwarding) = self.forwarding {
            forwarding.apply(&mut parts.headers);
        }
        parts
    }
}

/// How an attempt chooses its endpoint: avoiding the one that failed (retries), or the
/// captured connection's destination (ORIGINAL_DST clusters).
struct Pick<'a> {
    exclude: Option<usize>,
    original_dst: Option<&'a http::uri::Authority>,
}

/// A client's error as an attempt's failure: a connect failure or anything else.
/// gRPC over HTTP/2 carries `te: trailers` end to end (gRPC servers refuse a call without
/// it, "Missing :te header"); as a hop-by-hop header it was stripped, and Envoy keeps it.
fn keep_grpc_te(headers: &mut http::HeaderMap) {
    let grpc = headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    }
}

fn send_error(is_connect: bool, e: impl std::error::Error + 'static) -> SendError {
    if is_connect {
        SendError::Connect(transport_failure(&e))
    } else if crate::upstream::body::caused_by_stream_idle(&e) {
        SendError::StreamIdle
    } else if crate::upstream::body::caused_by_downstream_body(&e) {
        SendError::DownstreamBody
    } else if caused_by_malformed_response(&e) {
        SendError::Protocol(e.to_string())
    } else {
        // hyper's own text is only the outermost ("client error (SendRequest)").
        let mut text = e.to_string();
        let mut next = e.source();
        while let Some(cause) = next {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            next = cause.source();
        }
        SendError::Other(text)
    }
}

/// A TLS handshake's failure somewhere in a connect error's source chain, as Envoy words the
/// reason (`TLS_error:|...:TLS_error_end`, rustls' text where BoringSSL's would be).
fn transport_failure(e: &(dyn std::error::Error + 'static)) -> Option<Box<str>> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<warden_tls::rustls::Error>() {
            return Some(format!("TLS_error:|{tls}:TLS_error_end").into_boxed_str());
        }
        // An `io::Error`'s `source` skips the error it wraps (connectors wrap twice).
        next = match err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// Whether a client's error is the upstream's response failing to parse (Envoy's `UPE`):
/// hyper's parse errors, or the lean HTTP/1.1 exchange's response errors.
fn caused_by_malformed_response(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_parse() || h.is_parse_status() {
                return true;
            }
        }
        if let Some(x) = err.downcast_ref::<h1_exchange::ExchangeError>() {
            if matches!(
                x,
                h1_exchange::ExchangeError::Response(_) | h1_exchange::ExchangeError::Header
            ) {
                return true;
            }
        }
        if let Some(h1_pool::H1Error::Exchange(
            h1_exchange::ExchangeError::Response(_) | h1_exchange::ExchangeError::Header,
        )) = err.downcast_ref::<h1_pool::H1Error>()
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// `scheme://endpoint/path`, what hyper's clients connect by.
fn absolute_uri(
    scheme: Scheme,
    endpoint: &http::uri::Authority,
    path: PathAndQuery,
) -> Result<Uri, SendError> {
    let mut uri = http::uri::Parts::default();
    uri.scheme = Some(scheme);
    uri.authority = Some(endpoint.clone());
    uri.path_and_query = Some(path);
    Uri::from_parts(uri).map_err(|e| SendError::Other(e.to_string()))
}

/// One try. A body-less HTTP/1.1 request is written straight from a borrowed head, so retries
/// need no copy, with the forwarding headers written into it; hyper's clients get them in
/// their copy.
///
/// A plain fn returning an `async move` block, as [`forward`], and the send awaited where it
/// is built, in each arm, for the same reason.
// Written out, not `async fn`: see above.
#[allow(clippy::manual_async_fn)]
fn attempt<'a>(
    clients: &'a UpstreamClients,
    metrics: &'a Metrics,
    target: &'a Cluster,
    head: Head<'a>,
    body: ProxyBody,
    pick: Pick<'a>,
    per_try_timeout: Option<Duration>,
) -> impl Future<Output = Result<Upstreamed, ForwardFailure>> + Send + 'a {
    async move {
        let Pick {
            exclude,
            original_dst,
        } = pick;
        let cluster = target;
        let (endpoint, lease, index) = match (cluster.original_dst, original_dst) {
            (true, Some(dst)) => (dst.clone(), None, None),
            (true, None) => {
                metrics.upstream_error("no_healthy");
                return Err(fail(LocalReply::no_healthy_upstream(), None));
            }
            (false, _) => {
                let (index, lease) = cluster.pick(exclude).map_err(|e| match e {
                    PickError::NoHealthyUpstream => {
                        metrics.upstream_error("no_healthy");
                        fail(LocalReply::no_healthy_upstream(), None)
                    }
                    PickError::Overflow => {
                        metrics.upstream_error("overflow");
                        fail(LocalReply::overflow(), None)
                    }
                })?;
                (lease.endpoint().authority.clone(), Some(lease), Some(index))
            }
        };
        let record = |outcome| {
            if let Some(i) = index {
                cluster.record(i, outcome);
            }
        };
        let result = match per_try_timeout {
            None => send(clients, cluster, &endpoint, head, body).await,
            Some(t) => {
                match tokio::time::timeout(t, send(clients, cluster, &endpoint, head, body)).await {
                    Ok(r) => r,
                    Err(_) => {
                        metrics.upstream_error("timeout");
                        record(outlier::Outcome::LocalFailure);
                        let mut failure = fail(LocalReply::timeout(), Some(endpoint));
                        failure.per_try_timeout = true;
                        return Err(failure);
                    }
                }
            }
        };
        drop(lease);
        match &result {
            Ok((response, _)) => record(outlier::Outcome::Status(response.status().as_u16())),
            Err(SendError::Connect(_) | SendError::Protocol(_) | SendError::Other(_)) => {
                record(outlier::Outcome::LocalFailure)
            }
            // The client's body failed or stalled, not the endpoint.
            Err(SendError::DownstreamBody | SendError::StreamIdle) => {}
        }
        match result {
            Ok((response, local)) => Ok(Upstreamed {
                response,
                endpoint,
                local,
                retries_exhausted: false,
            }),
            Err(SendError::Connect(reason)) => {
                metrics.upstream_error("connect");
                let mut failure = fail(LocalReply::connect_failure(), Some(endpoint));
                failure.transport_failure = reason;
                Err(failure)
            }
            Err(SendError::DownstreamBody) => {
                // hyper's client aborted the upstream request without ending its body, so the
                // upstream never sees it complete; the client gets the 400 its framing earned.
                metrics.downstream_rejected("body_framing");
                Err(fail(LocalReply::bad_request(), Some(endpoint)))
            }
            Err(SendError::StreamIdle) => {
                // As Envoy: 408 `stream timeout` when nothing was answered yet; the upstream
                // request was aborted without its end.
                metrics.downstream_timeout(crate::core::timeouts::Expired::StreamIdle);
                Err(fail(LocalReply::stream_idle_timeout(), Some(endpoint)))
            }
            Err(SendError::Protocol(e)) => {
                tracing::debug!(error = %e, upstream = %endpoint, "upstream response malformed");
                metrics.upstream_error("reset");
                Err(fail(LocalReply::upstream_protocol_error(), Some(endpoint)))
            }
            Err(SendError::Other(e)) => {
                tracing::debug!(error = %e, upstream = %endpoint, "upstream request failed");
                metrics.upstream_error("reset");
                Err(fail(LocalReply::upstream_reset(), Some(endpoint)))
            }
        }
    }
}

/// One try's exchange with the endpoint picked, by the client the cluster's protocol and the
/// request call for.
fn send<'a>(
    clients: &'a UpstreamClients,
    cluster: &'a Cluster,
    endpoint: &'a http::uri::Authority,
    head: Head<'a>,
    body: ProxyBody,
) -> impl Future<Output = Result<(Response<ProxyBody>, Option<std::net::SocketAddr>), SendError>>
       + Send
       + 'a {
    let (h1, h2) = clients.for_cluster(cluster);
    async move {
        let path = head
            .get()
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        if let Some(tls) = &cluster.tls {
            let mut parts = head.into_owned();
            parts.uri = absolute_uri(Scheme::HTTPS, endpoint, path)?;
            parts.version = if tls.http2 {
                keep_grpc_te(&mut parts.headers);
                Version::HTTP_2
            } else {
                Version::HTTP_11
            };
            return Box::pin(
                tls.client(clients.connect_timeout)
                    .request(Request::from_parts(parts, body)),
            )
            .await
            .map(hyper_response)
            .map_err(|e| send_error(e.is_connect(), e));
        }
        match cluster.protocol.for_request(head.get().version) {
            UpstreamProtocol::Http1 if bodyless(head.get(), &body) => h1
                .send_bodyless(
                    endpoint,
                    &cluster.reuse,
                    BodylessRequest {
                        parts: head.get(),
                        lines: head.lines,
                        forwarding: head.forwarding,
                    },
                )
                .await
                .map_err(|e| send_error(e.is_connect(), e)),
            UpstreamProtocol::Http1 | UpstreamProtocol::Downstream => {
                let mut parts = head.into_owned();
                // Origin-form: the connection is already to the endpoint.
                parts.version = Version::HTTP_11;
                parts.uri = Uri::from(path);
                // Boxed, as the h2 branch below: hyper's client futures are over a kilobyte,
                // and inline they sized every request's `forward` future (3464 bytes, 2344
                // without them), which is copied into its box on every request.
                Box::pin(h1.send_from(endpoint, &cluster.reuse, Request::from_parts(parts, body)))
                    .await
                    .map_err(|e| send_error(e.is_connect(), e))
            }
            UpstreamProtocol::Http2 => {
                let mut parts = head.into_owned();
                parts.uri = absolute_uri(Scheme::HTTP, endpoint, path)?;
                parts.version = Version::HTTP_2;
                keep_grpc_te(&mut parts.headers);
                Box::pin(h2.request(Request::from_parts(parts, body)))
                    .await
                    .map(hyper_response)
                    .map_err(|e| send_error(e.is_connect(), e))
            }
        }
    }
}

/// A hyper client's response, with the local address its connector recorded.
fn hyper_response(
    r: Response<hyper::body::Incoming>,
) -> (Response<ProxyBody>, Option<std::net::SocketAddr>) {
    let local = r
        .extensions()
        .get::<hyper_util::client::legacy::connect::HttpInfo>()
        .map(|i| i.local_addr());
    (r.map(ProxyBody::Streamed), local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyper_clients_get_absolute_uris_to_the_endpoint() {
        let ep: http::uri::Authority = "10.0.0.7:8080".parse().expect("authority");
        let cases = [
            (Scheme::HTTP, "/a?b=1", "http://10.0.0.7:8080/a?b=1"),
            (Scheme::HTTPS, "/", "https://10.0.0.7:8080/"),
            (Scheme::HTTP, "/%20x", "http://10.0.0.7:8080/%20x"),
        ];
        for (scheme, path, want) in cases {
            let uri = absolute_uri(scheme, &ep, PathAndQuery::from_static(path)).ok();
            assert_eq!(uri.map(|u| u.to_string()).as_deref(), Some(want));
        }
    }
}
