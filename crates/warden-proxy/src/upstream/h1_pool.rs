//! A worker's HTTP/1.1 upstream connections, per endpoint, without hyper-util's legacy pool
//! (whose checkout, key clones and per-request "wait until idle" task showed up in proxy
//! profiles). Two kinds share the same bookkeeping:
//! - body-less requests go over [`LeanConn`]s ([`crate::upstream::h1_exchange`]): a connection is out of
//!   the pool while its exchange runs and goes back when its response body has been read;
//!   checkout takes the most recently used one, as Envoy's pools do;
//! - requests with a body go over hyper `client::conn::http1` senders. A sender goes back to
//!   its list right after it was handed a request: hyper marks it ready again once the
//!   previous response body has been read, so checkout takes the least recently used ready
//!   sender and no task has to wait for the exchange to finish.
//!
//! Connections closed by the upstream are dropped on the way; [`H1Pool::sweep`] closes the ones
//! unused since the previous sweep.
//!
//! A cluster's [`ReuseLimits`] (DestinationRule `maxRequestsPerConnection`, `idleTimeout`)
//! are checked without timers: a connection that has carried its last allowed request is not
//! put back (dropping it closes it once the response is read), and an idle connection past its
//! timeout is dropped when a checkout or a sweep comes across it.

use crate::upstream::body::ProxyBody;
use crate::upstream::connect::{connect, ConnectError};
use crate::upstream::h1_exchange::{self, BodylessRequest, ExchangeError, Home, LeanConn};
use bytes::Bytes;
use http::uri::Authority;
use http::{header, request, HeaderValue, Method, Request, Response};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use socket2::{SockRef, TcpKeepalive};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// How an upstream exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum H1Error {
    #[error("connect to {0}: {1}")]
    Connect(Authority, std::io::Error),
    #[error("connect to {0}: timed out")]
    ConnectTimeout(Authority),
    #[error("handshake: {0}")]
    Handshake(hyper::Error),
    #[error("upstream request: {0}")]
    Request(#[source] hyper::Error),
    #[error("upstream exchange: {0}")]
    Exchange(ExchangeError),
}

impl H1Error {
    pub fn is_connect(&self) -> bool {
        matches!(self, H1Error::Connect(..) | H1Error::ConnectTimeout(_))
    }
}

/// How long a cluster's upstream connections may be reused (DestinationRule
/// `trafficPolicy.connectionPool.http`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReuseLimits {
    /// `maxRequestsPerConnection`; `None` (unset or 0) is unlimited.
    pub max_requests: Option<NonZeroU32>,
    /// `idleTimeout`: a connection with no request handed to it for this long is not reused.
    pub idle_timeout: Option<Duration>,
}

/// What the pool needs to know about a connection of either kind.
pub trait PoolConn {
    /// Checkout takes the most recently used ready connection (else the least recently used).
    const NEWEST_FIRST: bool;
    fn is_closed(&self) -> bool;
    /// Can take a request now.
    fn is_ready(&self) -> bool;
}

impl PoolConn for SendRequest<ProxyBody> {
    /// Senders are put back while busy, so the oldest are the likeliest to be ready.
    const NEWEST_FIRST: bool = false;
    fn is_closed(&self) -> bool {
        SendRequest::is_closed(self)
    }
    fn is_ready(&self) -> bool {
        SendRequest::is_ready(self)
    }
}

impl PoolConn for LeanConn {
    /// As Envoy's pools do: the connections in use stay few and busy, so the kernel keeps
    /// piggybacking ACKs on the next request. Taken oldest first, every connection of a large
    /// pool idled past the 40 ms delayed-ACK timer between uses, and each response read then
    /// cost the proxy a pure ACK (one per request at 1000 connections with global limits).
    /// The spare connections idle out at the next sweep.
    const NEWEST_FIRST: bool = true;
    fn is_closed(&self) -> bool {
        LeanConn::is_closed(self)
    }
    /// Only idle lean connections are in the pool.
    fn is_ready(&self) -> bool {
        true
    }
}

/// A connection with its reuse bookkeeping.
pub struct Pooled<C> {
    /// Boxed once, when the connection is made: a pooled connection is moved several times
    /// per request (checkout, into its response body, checkin), and inline it made each move
    /// a copy of 168 bytes.
    pub conn: Box<C>,
    /// Set on checkout, cleared by [`H1Pool::sweep`].
    used: bool,
    /// Requests handed to this connection so far.
    requests: u32,
    /// Only requests with the same limits reuse the connection, as if each cluster policy had
    /// its own pool; connections left under old limits by a reload idle out.
    limits: ReuseLimits,
    /// Last time a request was handed to it or it was seen busy; kept only with an idle
    /// timeout, so clusters without one never read the clock.
    active_at: Option<Instant>,
    /// The connection's own address (Envoy's `%UPSTREAM_LOCAL_ADDRESS%`), read once when it
    /// is made.
    pub local: Option<SocketAddr>,
}

impl<C> Pooled<C> {
    fn new(conn: C, limits: ReuseLimits, local: Option<SocketAddr>) -> Self {
        Pooled {
            conn: Box::new(conn),
            used: true,
            requests: 0,
            limits,
            active_at: None,
            local,
        }
    }

    /// Idle past its timeout at `now`. The idle time is counted from the last request handed
    /// to it (or the last time a checkout saw it busy), so a long exchange can make it expire
    /// early, never late.
    fn expired(&self, now: Instant) -> bool {
        match (self.limits.idle_timeout, self.active_at) {
            (Some(t), Some(at)) => now.saturating_duration_since(at) > t,
            _ => false,
        }
    }
}

/// An endpoint's connections, least recently used first (put back at the end).
struct EndpointConns<C> {
    conns: VecDeque<Pooled<C>>,
}

impl<C: PoolConn> EndpointConns<C> {
    /// A ready connection under `limits`, newest or oldest first as `C` prefers (taken out of
    /// the list), dropping closed and expired ones on the way.
    fn checkout(&mut self, limits: &ReuseLimits) -> Option<Pooled<C>> {
        // Read the clock at most once, and only for clusters with an idle timeout.
        let mut now = None;
        // Counted from the preferred end; a removal there leaves `visited` pointing at the
        // next one to look at.
        let mut visited = 0;
        while visited < self.conns.len() {
            let at = if C::NEWEST_FIRST {
                self.conns.len() - 1 - visited
            } else {
                visited
            };
            match self.conns[at].examine(limits, &mut now) {
                Examined::Take => return self.conns.remove(at),
                Examined::Drop => {
                    self.conns.remove(at);
                }
                Examined::Skip => visited += 1,
            }
        }
        None
    }
}

/// What a checkout does with a pooled connection it comes across.
enum Examined {
    Take,
    /// Closed, or idle past its timeout.
    Drop,
    /// Busy, or under other limits.
    Skip,
}

impl<C: PoolConn> Pooled<C> {
    fn examine(&mut self, limits: &ReuseLimits, now: &mut Option<Instant>) -> Examined {
        if self.conn.is_closed() {
            return Examined::Drop;
        }
        if self.limits != *limits {
            return Examined::Skip;
        }
        let ready = self.conn.is_ready();
        if limits.idle_timeout.is_some() {
            let now = *now.get_or_insert_with(Instant::now);
            if !ready {
                // Busy now, so not idle.
                self.active_at = Some(now);
            } else if self.expired(now) {
                return Examined::Drop;
            }
        }
        if ready {
            Examined::Take
        } else {
            Examined::Skip
        }
    }
}

/// One kind of connection of one worker, per endpoint. Keyed by the endpoint's text, hashed
/// with foldhash: `Authority`'s own `Hash` feeds the hasher one lowercased byte at a time,
/// which cost more than the rest of the pool's work on every checkout and checkin. The keys
/// come from the configuration (always spelled the same way), not from clients.
pub struct Conns<C> {
    endpoints: Mutex<HashMap<Box<str>, EndpointConns<C>, foldhash::fast::RandomState>>,
}

/// The connections body-less requests use (shared with their response bodies, which put them
/// back).
pub type LeanConns = Conns<LeanConn>;

impl<C: PoolConn> Conns<C> {
    fn new() -> Self {
        Conns {
            endpoints: Mutex::new(HashMap::default()),
        }
    }

    fn checkout(&self, endpoint: &Authority, limits: &ReuseLimits) -> Option<Pooled<C>> {
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        map.get_mut(endpoint.as_str())?.checkout(limits)
    }

    /// Put a connection back after one more request: a hyper sender right after it was
    /// handed the request (it turns ready again by itself), a lean connection once its
    /// response was read. One that has now carried its last allowed request is dropped
    /// instead, which closes it once the response is read.
    pub fn checkin(&self, endpoint: &Authority, mut conn: Pooled<C>) {
        conn.requests = conn.requests.saturating_add(1);
        if conn
            .limits
            .max_requests
            .is_some_and(|max| conn.requests >= max.get())
        {
            return;
        }
        conn.used = true;
        if conn.limits.idle_timeout.is_some() {
            conn.active_at = Some(Instant::now());
        }
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        match map.get_mut(endpoint.as_str()) {
            Some(e) => e.conns.push_back(conn),
            None => {
                let mut conns = VecDeque::new();
                conns.push_back(conn);
                map.insert(Box::from(endpoint.as_str()), EndpointConns { conns });
            }
        }
    }

    /// See [`H1Pool::sweep`].
    fn sweep(&self, now: Instant) {
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, e| {
            e.conns.retain_mut(|c| {
                let keep = match c.limits.idle_timeout {
                    _ if c.conn.is_closed() => false,
                    // A configured idle timeout replaces the sweep's own rule, so a long one
                    // keeps connections past the next sweep.
                    Some(_) if !c.conn.is_ready() => {
                        c.active_at = Some(now);
                        true
                    }
                    Some(_) => !c.expired(now),
                    None => c.used,
                };
                c.used = false;
                keep
            });
            !e.conns.is_empty()
        });
    }

    fn len(&self) -> usize {
        let map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        map.values().map(|e| e.conns.len()).sum()
    }
}

/// HTTP/1.1 connections of one worker, per endpoint.
pub struct H1Pool {
    hyper: Conns<SendRequest<ProxyBody>>,
    lean: Arc<LeanConns>,
    connect_timeout: Duration,
    /// The local address connections are made from, when not the kernel's choice.
    source: Option<std::net::IpAddr>,
}

/// Whether a request goes over a lean connection ([`H1Pool::send_bodyless`]).
pub fn bodyless(parts: &request::Parts, body: &ProxyBody) -> bool {
    matches!(body, ProxyBody::Empty) && parts.method != Method::CONNECT
}

/// Sets a missing `Host` to the endpoint, as the request goes to it directly.
fn ensure_host(headers: &mut http::HeaderMap, endpoint: &Authority) {
    if !headers.contains_key(header::HOST) {
        if let Ok(v) =
            HeaderValue::from_maybe_shared(Bytes::copy_from_slice(endpoint.as_str().as_bytes()))
        {
            headers.insert(header::HOST, v);
        }
    }
}

impl H1Pool {
    pub fn new(connect_timeout: Duration) -> Self {
        H1Pool {
            hyper: Conns::new(),
            lean: Arc::new(Conns::new()),
            connect_timeout,
            source: None,
        }
    }

    /// A pool whose connections are made from `source`.
    pub fn with_source(connect_timeout: Duration, source: std::net::IpAddr) -> Self {
        H1Pool {
            source: Some(source),
            ..H1Pool::new(connect_timeout)
        }
    }

    /// Send `req` (origin-form URI; a missing `Host` is set to `endpoint`) to `endpoint` over
    /// a ready pooled connection or a new one, reusing connections within `limits`. Body-less
    /// requests take the lean path ([`Self::send_bodyless`]). A request that a pooled
    /// connection could not take (closed by the upstream meanwhile) is retried once on a new
    /// connection.
    pub async fn send(
        &self,
        endpoint: &Authority,
        limits: &ReuseLimits,
        req: Request<ProxyBody>,
    ) -> Result<Response<ProxyBody>, H1Error> {
        self.send_from(endpoint, limits, req).await.map(|(r, _)| r)
    }

    /// [`Self::send`], with the local address of the connection that carried the request.
    pub async fn send_from(
        &self,
        endpoint: &Authority,
        limits: &ReuseLimits,
        req: Request<ProxyBody>,
    ) -> Result<(Response<ProxyBody>, Option<SocketAddr>), H1Error> {
        let (mut parts, body) = req.into_parts();
        if bodyless(&parts, &body) {
            // Callers of `send` get the headers in the map.
            let request = BodylessRequest {
                parts: &parts,
                lines: None,
                forwarding: None,
            };
            let (mut response, local) = self.send_bodyless(endpoint, limits, request).await?;
            h1_exchange::response_headers_mut(&mut response);
            return Ok((response, local));
        }
        ensure_host(&mut parts.headers, endpoint);
        let mut req = Request::from_parts(parts, body);
        if let Some(mut conn) = self.hyper.checkout(endpoint, limits) {
            let sent = conn.conn.try_send_request(req);
            let local = conn.local;
            self.hyper.checkin(endpoint, conn);
            match sent.await {
                Ok(resp) => return Ok((resp.map(ProxyBody::Streamed), local)),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(H1Error::Request(e.into_error())),
                },
            }
        }
        let stream = self.connect(endpoint).await?;
        let local = stream.local_addr().ok();
        let sender = self.handshake(stream).await?;
        let mut conn = Pooled::new(sender, *limits, local);
        let sent = conn.conn.send_request(req);
        self.hyper.checkin(endpoint, conn);
        let resp = sent.await.map_err(H1Error::Request)?;
        Ok((resp.map(ProxyBody::Streamed), local))
    }

    /// A body-less request over a lean connection ([`crate::upstream::h1_exchange`]). A pooled
    /// connection that turns out closed before answering anything (the upstream closed it
    /// while idle) is replaced by a new one, for idempotent methods only, as nginx does.
    /// Takes the request by reference: retries replay it without a copy. `forwarding` is
    /// written into the head when it is not in `parts` already. With the response comes the
    /// local address of the connection.
    pub async fn send_bodyless(
        &self,
        endpoint: &Authority,
        limits: &ReuseLimits,
        request: BodylessRequest<'_>,
    ) -> Result<(Response<ProxyBody>, Option<SocketAddr>), H1Error> {
        if let Some(mut conn) = self.lean.checkout(endpoint, limits) {
            match conn.conn.exchange(request, endpoint).await {
                Ok((head, bytes)) => return self.lean_response(endpoint, conn, head, bytes),
                Err(ExchangeError::NoResponse(_)) if request.parts.method.is_idempotent() => {}
                Err(e) => return Err(H1Error::Exchange(e)),
            }
        }
        let stream = self.connect(endpoint).await?;
        let local = stream.local_addr().ok();
        let mut conn = Pooled::new(LeanConn::new(stream), *limits, local);
        let (head, bytes) = conn
            .conn
            .exchange(request, endpoint)
            .await
            .map_err(H1Error::Exchange)?;
        self.lean_response(endpoint, conn, head, bytes)
    }

    /// The response, its body owning `conn` until read to its end.
    fn lean_response(
        &self,
        endpoint: &Authority,
        conn: Pooled<LeanConn>,
        head: warden_http1::response_read::ResponseHead,
        bytes: Bytes,
    ) -> Result<(Response<ProxyBody>, Option<SocketAddr>), H1Error> {
        let home = Home {
            pool: self.lean.clone(),
            endpoint: endpoint.clone(),
        };
        let local = conn.local;
        h1_exchange::into_response(head, bytes, conn, home)
            .map(|r| (r, local))
            .map_err(H1Error::Exchange)
    }

    async fn connect(&self, endpoint: &Authority) -> Result<TcpStream, H1Error> {
        let port = endpoint.port_u16().unwrap_or(80);
        let stream = match connect(endpoint.host(), port, self.source, self.connect_timeout).await {
            Ok(s) => s,
            Err(ConnectError::Io(e)) => return Err(H1Error::Connect(endpoint.clone(), e)),
            Err(ConnectError::Timeout) => return Err(H1Error::ConnectTimeout(endpoint.clone())),
        };
        let _ = SockRef::from(&stream)
            .set_tcp_keepalive(&TcpKeepalive::new().with_time(Duration::from_secs(60)));
        Ok(stream)
    }

    async fn handshake(&self, stream: TcpStream) -> Result<SendRequest<ProxyBody>, H1Error> {
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(H1Error::Handshake)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended with error");
            }
        });
        Ok(sender)
    }

    /// Close connections idle past their idle timeout or, without one, not used since the
    /// previous sweep (dropping the sender ends the connection once it is idle).
    pub fn sweep(&self) {
        let now = Instant::now();
        self.hyper.sweep(now);
        self.lean.sweep(now);
    }

    /// Open connections (for tests).
    pub fn connections(&self) -> usize {
        self.hyper.len() + self.lean.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use hyper::body::Incoming;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// An HTTP/1.1 server on 127.0.0.1:0 answering "ok" with `x-conn`, the number of the
    /// connection (from 1); counts accepted connections.
    async fn server(keep_alive: bool) -> (Authority, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let conn = count.fetch_add(1, Ordering::SeqCst) + 1;
                let service =
                    hyper::service::service_fn(move |req: Request<Incoming>| async move {
                        let host = req.headers()[header::HOST].clone();
                        let mut resp = Response::new(http_body_util::Full::new(Bytes::from("ok")));
                        resp.headers_mut().insert("x-host", host);
                        resp.headers_mut().insert("x-conn", conn.into());
                        Ok::<_, std::convert::Infallible>(resp)
                    });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .keep_alive(keep_alive)
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        (addr.to_string().parse().unwrap(), accepted)
    }

    /// A body-less request: the lean path.
    fn get() -> Request<ProxyBody> {
        Request::builder().uri("/x").body(ProxyBody::Empty).unwrap()
    }

    /// A request with a body: hyper's client.
    fn post() -> Request<ProxyBody> {
        Request::builder()
            .method("POST")
            .uri("/x")
            .body(ProxyBody::full(Bytes::from("data")))
            .unwrap()
    }

    async fn body(resp: Response<ProxyBody>) -> Bytes {
        resp.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn reuses_one_connection_for_sequential_requests() {
        for request in [get, post] {
            reuses_one_connection(request).await;
        }
    }

    async fn reuses_one_connection(request: fn() -> Request<ProxyBody>) {
        let (ep, accepted) = server(true).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        for _ in 0..5 {
            let resp = pool
                .send(&ep, &ReuseLimits::default(), request())
                .await
                .unwrap();
            assert_eq!(resp.headers()["x-host"], ep.as_str());
            assert_eq!(body(resp).await, "ok");
            // Let the connection task see the end of the exchange.
            tokio::task::yield_now().await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert_eq!(pool.connections(), 1);
    }

    /// Two body-less requests sent at once (each needs its own connection), answered.
    async fn two_at_once(
        pool: &H1Pool,
        ep: &Authority,
        limits: &ReuseLimits,
    ) -> (Response<ProxyBody>, Response<ProxyBody>) {
        let (a, b) = tokio::join!(pool.send(ep, limits, get()), pool.send(ep, limits, get()));
        (a.unwrap(), b.unwrap())
    }

    #[tokio::test]
    async fn opens_more_connections_for_concurrent_requests() {
        let (ep, accepted) = server(true).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        let (a, b) = two_at_once(&pool, &ep, &ReuseLimits::default()).await;
        assert_eq!(body(a).await, "ok");
        assert_eq!(body(b).await, "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn body_less_requests_take_the_most_recently_used_connection() {
        let (ep, accepted) = server(true).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        let limits = ReuseLimits::default();
        let (a, b) = two_at_once(&pool, &ep, &limits).await;
        let last = b.headers()["x-conn"].clone();
        assert_ne!(a.headers()["x-conn"], last);
        // Read in this order, `b`'s connection goes back to the pool last.
        body(a).await;
        body(b).await;
        pool.sweep();
        for _ in 0..3 {
            let resp = pool.send(&ep, &limits, get()).await.unwrap();
            assert_eq!(resp.headers()["x-conn"], last);
            body(resp).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        // The other one was not used since the last sweep: this one closes it.
        pool.sweep();
        assert_eq!(pool.connections(), 1);
    }

    #[tokio::test]
    async fn replaces_connections_the_upstream_closed() {
        for (request, left) in [(get as fn() -> Request<ProxyBody>, 0), (post, 1)] {
            let (ep, accepted) = server(false).await;
            let pool = H1Pool::new(Duration::from_secs(1));
            for _ in 0..3 {
                let resp = pool
                    .send(&ep, &ReuseLimits::default(), request())
                    .await
                    .unwrap();
                assert_eq!(body(resp).await, "ok");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(accepted.load(Ordering::SeqCst), 3);
            // A lean connection answered with `connection: close` is never put back; hyper's
            // closed senders are dropped at the next checkout, so only the last one is left.
            assert_eq!(pool.connections(), left);
        }
    }

    /// An upstream that answers one request per connection, then closes it without saying so
    /// (no `connection: close`): the next request finds the pooled connection closed.
    #[tokio::test]
    async fn a_connection_closed_while_idle_is_replaced() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ep: Authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            }
        });
        let pool = H1Pool::new(Duration::from_secs(1));
        for _ in 0..3 {
            let resp = pool
                .send(&ep, &ReuseLimits::default(), get())
                .await
                .unwrap();
            assert_eq!(body(resp).await, "ok");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn lean_responses_stream_every_framing() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let answers: [&[u8]; 4] = [
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            b"HTTP/1.1 299 Custom\r\nx-a: 1\r\nx-a: 2\r\ncontent-length: 5\r\n\r\nabcde",
            b"HTTP/1.1 103 Early\r\nlink: <a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.0 200 OK\r\n\r\nuntil close",
        ];
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ep: Authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        tokio::spawn(async move {
            for answer in answers {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                // In two writes, so the body arrives after the head.
                let (a, b) = answer.split_at(answer.len() / 2);
                s.write_all(a).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                s.write_all(b).await.unwrap();
            }
        });
        let pool = H1Pool::new(Duration::from_secs(1));
        let limits = ReuseLimits {
            max_requests: NonZeroU32::new(1),
            idle_timeout: None,
        };
        let mut seen = Vec::new();
        for _ in 0..4 {
            let resp = pool.send(&ep, &limits, get()).await.unwrap();
            let status = resp.status().as_u16();
            let reason = resp
                .extensions()
                .get::<hyper::ext::ReasonPhrase>()
                .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned());
            let xa = resp.headers().get_all("x-a").iter().count();
            seen.push((status, reason, xa, body(resp).await));
        }
        assert_eq!(
            seen,
            [
                (200, None, 0, Bytes::from("abcde")),
                (299, Some("Custom".to_string()), 2, Bytes::from("abcde")),
                (204, None, 0, Bytes::new()),
                (200, None, 0, Bytes::from("until close")),
            ]
        );
    }

    #[tokio::test]
    async fn sweep_closes_unused_connections() {
        let (ep, _) = server(true).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        body(
            pool.send(&ep, &ReuseLimits::default(), get())
                .await
                .unwrap(),
        )
        .await;
        pool.sweep();
        assert_eq!(pool.connections(), 1, "used since the last sweep");
        pool.sweep();
        assert_eq!(pool.connections(), 0);
    }

    /// `n` sequential requests under `limits`, each response read to the end.
    async fn sequential(pool: &H1Pool, ep: &Authority, limits: &ReuseLimits, n: usize) {
        for _ in 0..n {
            let resp = pool.send(ep, limits, get()).await.unwrap();
            assert_eq!(body(resp).await, "ok");
            // Let the connection task see the end of the exchange.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn max_requests_per_connection_closes_used_up_connections() {
        let (ep, accepted) = server(true).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        let limits = ReuseLimits {
            max_requests: NonZeroU32::new(2),
            idle_timeout: None,
        };
        sequential(&pool, &ep, &limits, 6).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
        assert_eq!(pool.connections(), 0, "the third connection is used up too");

        let one = ReuseLimits {
            max_requests: NonZeroU32::new(1),
            idle_timeout: None,
        };
        sequential(&pool, &ep, &one, 3).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 6);
    }

    #[tokio::test]
    async fn idle_connections_past_the_timeout_are_not_reused() {
        let (ep, accepted) = server(true).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        let limits = ReuseLimits {
            max_requests: None,
            idle_timeout: Some(Duration::from_millis(150)),
        };
        sequential(&pool, &ep, &limits, 3).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(300)).await;
        sequential(&pool, &ep, &limits, 2).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(pool.connections(), 1, "the expired one was dropped");

        // The sweep follows the idle timeout instead of its own "unused since the last sweep".
        pool.sweep();
        pool.sweep();
        assert_eq!(pool.connections(), 1, "within its idle timeout");
        tokio::time::sleep(Duration::from_millis(300)).await;
        pool.sweep();
        assert_eq!(pool.connections(), 0);
    }

    #[tokio::test]
    async fn connections_are_reused_only_under_the_same_limits() {
        let (ep, accepted) = server(true).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        let limited = ReuseLimits {
            max_requests: NonZeroU32::new(100),
            idle_timeout: None,
        };
        sequential(&pool, &ep, &ReuseLimits::default(), 2).await;
        sequential(&pool, &ep, &limited, 2).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(pool.connections(), 2);
    }

    #[tokio::test]
    async fn refused_connect_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ep: Authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        drop(listener);
        let pool = H1Pool::new(Duration::from_secs(1));
        let err = pool
            .send(&ep, &ReuseLimits::default(), get())
            .await
            .unwrap_err();
        assert!(err.is_connect(), "{err}");
    }
}
