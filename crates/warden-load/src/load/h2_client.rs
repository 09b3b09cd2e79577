//! One HTTP/1.1 or h2c client connection, and the loop a connection task runs.
//!
//! The hyper connection future is polled in the same task as the request (not spawned), so a
//! request/response costs no cross-task wake-ups.

use super::connect::connect;
use super::stats::ConnStats;
use super::{RequestError, Shared};
use bytes::Bytes;
use futures_util::FutureExt;
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::time::Instant;

/// The request every send clones: built once, before the run starts.
#[derive(Debug, Clone)]
pub struct RequestTemplate {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl RequestTemplate {
    fn build(&self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

struct ClientConn {
    sender: Sender,
    driver: Driver,
    closed: bool,
}

impl ClientConn {
    async fn open(shared: &Shared, source: Option<IpAddr>) -> Result<ClientConn, RequestError> {
        let io = TokioIo::new(connect(shared.target.addr, source).await?);
        let (sender, driver): (Sender, Driver) = if shared.http2 {
            let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(RequestError::Http)?;
            (Sender::H2(sender), Box::pin(conn))
        } else {
            let (sender, conn) = http1::handshake(io).await.map_err(RequestError::Http)?;
            (Sender::H1(sender), Box::pin(conn))
        };
        Ok(ClientConn {
            sender,
            driver,
            closed: false,
        })
    }

    /// False once the server closed the connection (e.g. after `Connection: close`).
    fn is_usable(&mut self) -> bool {
        if !self.closed && self.driver.as_mut().now_or_never().is_some() {
            self.closed = true;
        }
        let sender_closed = match &self.sender {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        };
        !self.closed && !sender_closed
    }

    /// Send one request and read the whole response body; returns (status, body bytes).
    async fn exchange(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<(u16, u64), RequestError> {
        let ClientConn {
            sender,
            driver,
            closed,
        } = self;
        let exchange = async move {
            let response = match sender {
                Sender::H1(s) => {
                    s.ready().await.map_err(RequestError::Http)?;
                    s.send_request(request).await
                }
                Sender::H2(s) => {
                    s.ready().await.map_err(RequestError::Http)?;
                    s.send_request(request).await
                }
            }
            .map_err(RequestError::Http)?;
            let status = response.status().as_u16();
            let mut body = response.into_body();
            let mut received = 0u64;
            while let Some(frame) = body.frame().await {
                if let Some(data) = frame.map_err(RequestError::Http)?.data_ref() {
                    received += data.len() as u64;
                }
            }
            Ok((status, received))
        };
        tokio::pin!(exchange);
        loop {
            tokio::select! {
                biased;
                out = &mut exchange => return out,
                // The exchange fails by itself once the connection is gone.
                _ = driver.as_mut(), if !*closed => *closed = true,
            }
        }
    }
}

/// Run requests from the shared schedule on one connection (reopened as needed) until done.
pub async fn run_connection(shared: Arc<Shared>, source: Option<IpAddr>) -> ConnStats {
    let mut stats = ConnStats::new(shared.connections);
    let mut conn: Option<ClientConn> = None;
    let sent = shared.template.body.len() as u64;
    while let Some(slot) = shared.schedule.next() {
        let start = slot.wait().await;
        let outcome = tokio::time::timeout(shared.timeout, async {
            if conn.as_mut().is_some_and(|c| !c.is_usable()) {
                conn = None;
            }
            let c = match &mut conn {
                Some(c) => c,
                None => {
                    stats.sockets += 1;
                    conn.insert(ClientConn::open(&shared, source).await?)
                }
            };
            c.exchange(shared.template.build()).await
        })
        .await;
        let latency = Instant::now() - start;
        match outcome {
            Ok(Ok((status, received))) => stats.record_ok(Some(status), latency, sent, received),
            Ok(Err(err)) => {
                conn = None;
                stats.record_error(err.kind(), latency);
            }
            Err(_) => {
                conn = None;
                stats.record_error("timeout", latency);
            }
        }
        if !shared.keepalive {
            conn = None;
        }
        shared.progress.tick();
    }
    stats
}
