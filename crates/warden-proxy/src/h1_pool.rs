//! A worker's HTTP/1.1 upstream connections: hyper `client::conn::http1` senders kept per
//! endpoint, without hyper-util's legacy pool (whose checkout, key clones and per-request
//! "wait until idle" task showed up in proxy profiles).
//!
//! A sender goes back to its list right after it was handed a request: hyper marks it ready
//! again once the previous response body has been read, so checkout takes the least recently
//! used ready sender and no task has to wait for the exchange to finish. Connections closed by
//! the upstream are dropped on the way; [`H1Pool::sweep`] closes the ones unused since the
//! previous sweep.
//!
//! A cluster's [`ReuseLimits`] (DestinationRule `maxRequestsPerConnection`, `idleTimeout`)
//! are checked without timers: a connection that has carried its last allowed request is not
//! put back (dropping its sender closes it once the response is read), and an idle connection
//! past its timeout is dropped when a checkout or a sweep comes across it.

use crate::body::ProxyBody;
use bytes::Bytes;
use http::uri::Authority;
use http::{header, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use socket2::{SockRef, TcpKeepalive};
use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::Mutex;
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
    Request(hyper::Error),
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

struct Conn {
    sender: SendRequest<ProxyBody>,
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
}

impl Conn {
    fn new(sender: SendRequest<ProxyBody>, limits: ReuseLimits) -> Self {
        Conn {
            sender,
            used: true,
            requests: 0,
            limits,
            active_at: None,
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

/// An endpoint's connections, least recently used first.
#[derive(Default)]
struct EndpointConns {
    conns: VecDeque<Conn>,
}

impl EndpointConns {
    /// The least recently used ready connection under `limits` (taken out of the list),
    /// dropping closed and expired ones on the way.
    fn checkout(&mut self, limits: &ReuseLimits) -> Option<Conn> {
        // Read the clock at most once, and only for clusters with an idle timeout.
        let mut now = None;
        let mut i = 0;
        while i < self.conns.len() {
            let c = &mut self.conns[i];
            if c.sender.is_closed() {
                self.conns.remove(i);
                continue;
            }
            if c.limits != *limits {
                i += 1;
                continue;
            }
            let ready = c.sender.is_ready();
            if limits.idle_timeout.is_some() {
                let now = *now.get_or_insert_with(Instant::now);
                if !ready {
                    // Busy now, so not idle.
                    c.active_at = Some(now);
                } else if c.expired(now) {
                    self.conns.remove(i);
                    continue;
                }
            }
            if ready {
                return self.conns.remove(i);
            }
            i += 1;
        }
        None
    }
}

/// HTTP/1.1 connections of one worker, per endpoint.
pub struct H1Pool {
    endpoints: Mutex<HashMap<Authority, EndpointConns>>,
    connect_timeout: Duration,
}

impl H1Pool {
    pub fn new(connect_timeout: Duration) -> Self {
        H1Pool {
            endpoints: Mutex::new(HashMap::new()),
            connect_timeout,
        }
    }

    /// Send `req` (origin-form URI; a missing `Host` is set to `endpoint`) to `endpoint` over
    /// a ready pooled connection or a new one, reusing connections within `limits`. A request
    /// that a pooled connection could not take (closed by the upstream meanwhile) is retried
    /// once on a new connection.
    pub async fn send(
        &self,
        endpoint: &Authority,
        limits: &ReuseLimits,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, H1Error> {
        if !req.headers().contains_key(header::HOST) {
            if let Ok(v) =
                HeaderValue::from_maybe_shared(Bytes::copy_from_slice(endpoint.as_str().as_bytes()))
            {
                req.headers_mut().insert(header::HOST, v);
            }
        }
        if let Some(mut conn) = self.checkout(endpoint, limits) {
            let sent = conn.sender.try_send_request(req);
            self.checkin(endpoint, conn);
            match sent.await {
                Ok(resp) => return Ok(resp),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(H1Error::Request(e.into_error())),
                },
            }
        }
        let mut conn = Conn::new(self.connect(endpoint).await?, *limits);
        let sent = conn.sender.send_request(req);
        self.checkin(endpoint, conn);
        sent.await.map_err(H1Error::Request)
    }

    fn checkout(&self, endpoint: &Authority, limits: &ReuseLimits) -> Option<Conn> {
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        map.get_mut(endpoint)?.checkout(limits)
    }

    /// Put a connection back right after handing it a request: it turns ready again by
    /// itself. One that has now carried its last allowed request is dropped instead: without
    /// its sender, hyper closes the connection after this response.
    fn checkin(&self, endpoint: &Authority, mut conn: Conn) {
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
        match map.get_mut(endpoint) {
            Some(e) => e.conns.push_back(conn),
            None => {
                let mut e = EndpointConns::default();
                e.conns.push_back(conn);
                map.insert(endpoint.clone(), e);
            }
        }
    }

    async fn connect(&self, endpoint: &Authority) -> Result<SendRequest<ProxyBody>, H1Error> {
        let addr = (endpoint.host(), endpoint.port_u16().unwrap_or(80));
        let stream =
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(H1Error::Connect(endpoint.clone(), e)),
                Err(_) => return Err(H1Error::ConnectTimeout(endpoint.clone())),
            };
        let _ = stream.set_nodelay(true);
        let _ = SockRef::from(&stream)
            .set_tcp_keepalive(&TcpKeepalive::new().with_time(Duration::from_secs(60)));
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
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, e| {
            e.conns.retain_mut(|c| {
                let keep = match c.limits.idle_timeout {
                    _ if c.sender.is_closed() => false,
                    // A configured idle timeout replaces the sweep's own rule, so a long one
                    // keeps connections past the next sweep.
                    Some(_) if !c.sender.is_ready() => {
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

    /// Open connections (for tests).
    pub fn connections(&self) -> usize {
        let map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        map.values().map(|e| e.conns.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// An HTTP/1.1 server on 127.0.0.1:0 answering "ok"; counts accepted connections.
    async fn server(keep_alive: bool) -> (Authority, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let host = req.headers()[header::HOST].clone();
                    let mut resp = Response::new(http_body_util::Full::new(Bytes::from("ok")));
                    resp.headers_mut().insert("x-host", host);
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

    fn get() -> Request<ProxyBody> {
        Request::builder().uri("/x").body(ProxyBody::Empty).unwrap()
    }

    async fn body(resp: Response<Incoming>) -> Bytes {
        resp.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn reuses_one_connection_for_sequential_requests() {
        let (ep, accepted) = server(true).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        for _ in 0..5 {
            let resp = pool
                .send(&ep, &ReuseLimits::default(), get())
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

    #[tokio::test]
    async fn opens_more_connections_for_concurrent_requests() {
        let (ep, accepted) = server(true).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        let limits = ReuseLimits::default();
        let (a, b) = tokio::join!(
            pool.send(&ep, &limits, get()),
            pool.send(&ep, &limits, get())
        );
        assert_eq!(body(a.unwrap()).await, "ok");
        assert_eq!(body(b.unwrap()).await, "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn replaces_connections_the_upstream_closed() {
        let (ep, accepted) = server(false).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        for _ in 0..3 {
            let resp = pool
                .send(&ep, &ReuseLimits::default(), get())
                .await
                .unwrap();
            assert_eq!(body(resp).await, "ok");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
        // Closed connections are dropped at the next checkout: only the last one is left.
        assert_eq!(pool.connections(), 1);
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
