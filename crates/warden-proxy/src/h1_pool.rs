//! A worker's HTTP/1.1 upstream connections: hyper `client::conn::http1` senders kept per
//! endpoint, without hyper-util's legacy pool (whose checkout, key clones and per-request
//! "wait until idle" task showed up in proxy profiles).
//!
//! A sender goes back to its list right after it was handed a request: hyper marks it ready
//! again once the previous response body has been read, so checkout takes the least recently
//! used ready sender and no task has to wait for the exchange to finish. Connections closed by
//! the upstream are dropped on the way; [`H1Pool::sweep`] closes the ones unused since the
//! previous sweep.

use crate::body::ProxyBody;
use bytes::Bytes;
use http::uri::Authority;
use http::{header, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use socket2::{SockRef, TcpKeepalive};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
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

struct Conn {
    sender: SendRequest<ProxyBody>,
    /// Set on checkout, cleared by [`H1Pool::sweep`].
    used: bool,
}

/// An endpoint's connections, least recently used first.
#[derive(Default)]
struct EndpointConns {
    conns: VecDeque<Conn>,
}

impl EndpointConns {
    /// The least recently used ready sender (taken out of the list), dropping closed ones on
    /// the way.
    fn checkout(&mut self) -> Option<SendRequest<ProxyBody>> {
        let mut i = 0;
        while i < self.conns.len() {
            let c = &self.conns[i];
            if c.sender.is_closed() {
                self.conns.remove(i);
            } else if c.sender.is_ready() {
                return self.conns.remove(i).map(|c| c.sender);
            } else {
                i += 1;
            }
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
    /// a ready pooled connection or a new one. A request that a pooled connection could not
    /// take (closed by the upstream meanwhile) is retried once on a new connection.
    pub async fn send(
        &self,
        endpoint: &Authority,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, H1Error> {
        if !req.headers().contains_key(header::HOST) {
            if let Ok(v) =
                HeaderValue::from_maybe_shared(Bytes::copy_from_slice(endpoint.as_str().as_bytes()))
            {
                req.headers_mut().insert(header::HOST, v);
            }
        }
        if let Some(mut sender) = self.checkout(endpoint) {
            let sent = sender.try_send_request(req);
            self.checkin(endpoint, sender);
            match sent.await {
                Ok(resp) => return Ok(resp),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(H1Error::Request(e.into_error())),
                },
            }
        }
        let mut sender = self.connect(endpoint).await?;
        let sent = sender.send_request(req);
        self.checkin(endpoint, sender);
        sent.await.map_err(H1Error::Request)
    }

    fn checkout(&self, endpoint: &Authority) -> Option<SendRequest<ProxyBody>> {
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        map.get_mut(endpoint)?.checkout()
    }

    /// Put a sender back right after handing it a request: it turns ready again by itself.
    fn checkin(&self, endpoint: &Authority, sender: SendRequest<ProxyBody>) {
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let conn = Conn { sender, used: true };
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

    /// Close connections not used since the previous sweep (dropping the sender ends the
    /// connection once it is idle).
    pub fn sweep(&self) {
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, e| {
            e.conns.retain_mut(|c| {
                let keep = c.used && !c.sender.is_closed();
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
            let resp = pool.send(&ep, get()).await.unwrap();
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
        let (a, b) = tokio::join!(pool.send(&ep, get()), pool.send(&ep, get()));
        assert_eq!(body(a.unwrap()).await, "ok");
        assert_eq!(body(b.unwrap()).await, "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn replaces_connections_the_upstream_closed() {
        let (ep, accepted) = server(false).await;
        let pool = H1Pool::new(Duration::from_secs(1));
        for _ in 0..3 {
            let resp = pool.send(&ep, get()).await.unwrap();
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
        body(pool.send(&ep, get()).await.unwrap()).await;
        pool.sweep();
        assert_eq!(pool.connections(), 1, "used since the last sweep");
        pool.sweep();
        assert_eq!(pool.connections(), 0);
    }

    #[tokio::test]
    async fn refused_connect_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ep: Authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        drop(listener);
        let pool = H1Pool::new(Duration::from_secs(1));
        let err = pool.send(&ep, get()).await.unwrap_err();
        assert!(err.is_connect(), "{err}");
    }
}
