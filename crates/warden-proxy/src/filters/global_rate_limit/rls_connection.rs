//! One HTTP/2 connection to each rate limit service per worker thread, like Envoy's per-worker
//! gRPC clients, used straight through hyper's HTTP/2 client.
//!
//! Why not tonic's `Channel`: it queues every call through a `tower::Buffer` task and a stack
//! of reconnect layers; measured in the proxy, that cost about as much CPU per decision as
//! forwarding the request upstream. Here a call is handed to the connection task directly.
//! The connection is made on first use, shared by the worker's concurrent calls while it is
//! being made, replaced when it closes, and after a failed connect the service is not tried
//! again for [`RETRY_AFTER`] (calls fail at once, and fail open or closed as configured).

use futures_util::future::{BoxFuture, FutureExt, Shared};
use http::uri::{Authority, Scheme, Uri};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tonic::body::Body;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// After a failed connect, calls fail without trying again for this long.
const RETRY_AFTER: Duration = Duration::from_millis(100);

type Connecting = Shared<BoxFuture<'static, Result<SendRequest<Body>, Arc<str>>>>;

enum Slot {
    Ready(SendRequest<Body>),
    Connecting(Connecting),
    Failed { until: Instant, reason: Arc<str> },
}

thread_local! {
    /// This worker's connections by RLS address. The worker's runtime drives them; the
    /// thread and its runtime end together.
    static SLOTS: RefCell<HashMap<Authority, Slot>> = RefCell::new(HashMap::new());
}

/// A gRPC service over this worker's connection to one RLS address.
#[derive(Clone)]
pub struct RlsConnection {
    send: SendRequest<Body>,
    authority: Authority,
}

/// This worker's connection to `authority` (`host:port`, checked by [`authority`]).
pub async fn get(authority: &Authority) -> Result<RlsConnection, Arc<str>> {
    let connecting = SLOTS.with(|slots| {
        let mut slots = slots.borrow_mut();
        match slots.get(authority) {
            Some(Slot::Ready(send)) if !send.is_closed() => return Ok(Ok(send.clone())),
            Some(Slot::Connecting(pending)) => return Ok(Err(pending.clone())),
            Some(Slot::Failed { until, reason }) if Instant::now() < *until => {
                return Err(reason.clone())
            }
            _ => {}
        }
        let pending = connect(authority.clone()).boxed().shared();
        slots.insert(authority.clone(), Slot::Connecting(pending.clone()));
        Ok(Err(pending))
    })?;
    let send = match connecting {
        Ok(send) => send,
        Err(pending) => {
            let result = pending.await;
            SLOTS.with(|slots| {
                let mut slots = slots.borrow_mut();
                if let Some(slot @ Slot::Connecting(_)) = slots.get_mut(authority) {
                    *slot = match &result {
                        Ok(send) => Slot::Ready(send.clone()),
                        Err(reason) => Slot::Failed {
                            until: Instant::now() + RETRY_AFTER,
                            reason: reason.clone(),
                        },
                    };
                }
            });
            result?
        }
    };
    Ok(RlsConnection {
        send,
        authority: authority.clone(),
    })
}

/// `host:port` as a URI authority; the port is required.
pub fn authority(address: &str) -> Result<Authority, String> {
    let authority: Authority = address.parse().map_err(|e| format!("{e}"))?;
    if authority.port_u16().is_none() {
        return Err("a port is required (host:port)".into());
    }
    Ok(authority)
}

async fn connect(authority: Authority) -> Result<SendRequest<Body>, Arc<str>> {
    let failed = |what: &str, e: &dyn std::fmt::Display| -> Arc<str> {
        Arc::from(format!("{what} rate limit service {authority}: {e}"))
    };
    let connecting = tokio::net::TcpStream::connect(authority.as_str());
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(failed("cannot connect to", &e)),
        Err(_) => {
            return Err(failed(
                "timed out connecting to",
                &format!("{CONNECT_TIMEOUT:?}"),
            ))
        }
    };
    let _ = stream.set_nodelay(true);
    let (send, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failed("HTTP/2 handshake failed with", &e))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "rate limit service connection closed");
        }
    });
    Ok(send)
}

impl tonic::codegen::Service<http::Request<Body>> for RlsConnection {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // The generated client sends a path only; HTTP/2 needs :scheme and :authority.
        let mut parts = std::mem::take(request.uri_mut()).into_parts();
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = Some(self.authority.clone());
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
        Box::pin(self.send.send_request(request))
    }
}
