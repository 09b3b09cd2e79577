//! One HTTP/2 connection to each rate limit service (and ext_authz provider) per worker thread,
//! like Envoy's per-worker gRPC clients; calls are made on it by
//! [`warden_ratelimit::grpc_client`].
//!
//! The connection is made on first use, shared by the worker's concurrent calls while it is
//! being made, replaced when it closes, and after a failed connect the service is not tried
//! again for [`RETRY_AFTER`] (calls fail at once, and fail open or closed as configured). A
//! keep-alive PING every [`KEEP_ALIVE_INTERVAL`] closes a connection whose peer went silent.

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt, Shared};
use h2::client::SendRequest;
use h2::{Ping, PingPong};
use http::uri::{Authority, Uri};
use http::HeaderValue;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_ratelimit::grpc_client;
use warden_ratelimit::lease::LEASE_HEADER;
use warden_ratelimit::{RateLimitRequest, RateLimitResponse};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// A PING not answered within this closes the connection (hyper's default).
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// After a failed connect, calls fail without trying again for this long.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// A live connection: its sender, its ShouldRateLimit URI, its authority, and whether its
/// task has ended.
#[derive(Clone)]
struct Live {
    send: SendRequest<Bytes>,
    uri: Uri,
    authority: Authority,
    closed: Arc<AtomicBool>,
}

type Connecting = Shared<BoxFuture<'static, Result<Live, Arc<str>>>>;

enum Slot {
    Ready(Live),
    Connecting(Connecting),
    Failed { until: Instant, reason: Arc<str> },
}

thread_local! {
    /// This worker's connections by RLS address. The worker's runtime drives them; the
    /// thread and its runtime end together.
    static SLOTS: RefCell<HashMap<(Authority, bool), Slot>> = RefCell::new(HashMap::new());
}

/// TLS to a gRPC service (an ext_authz provider's DestinationRule): the client config, with
/// `h2` offered by ALPN, and the name the certificate must have.
#[derive(Clone)]
pub struct GrpcTls {
    pub config: Arc<warden_tls::rustls::ClientConfig>,
    pub name: warden_tls::rustls::pki_types::ServerName<'static>,
}

impl std::fmt::Debug for GrpcTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTls").field("name", &self.name).finish()
    }
}

/// This worker's connection to one RLS address.
pub struct RlsConnection(Live);

impl RlsConnection {
    /// One ShouldRateLimit call, asking for a quota lease if `ask_lease` (a service that does
    /// not grant them ignores the metadata).
    pub async fn should_rate_limit(
        self,
        request: &RateLimitRequest,
        ask_lease: bool,
    ) -> Result<RateLimitResponse, tonic::Status> {
        let ask = [(LEASE_HEADER, HeaderValue::from_static("1"))];
        let metadata = if ask_lease { &ask[..] } else { &[] };
        grpc_client::unary_with_metadata(self.0.send, &self.0.uri, metadata, request).await
    }

    /// One unary call of `method` (a `/package.Service/Method` path).
    pub async fn unary<Req: prost::Message, Resp: prost::Message + Default>(
        self,
        method: &'static str,
        request: &Req,
    ) -> Result<Resp, tonic::Status> {
        let uri = grpc_client::method_uri(&self.0.authority, method);
        grpc_client::unary(self.0.send, &uri, request).await
    }
}

/// This worker's connection to `authority` (`host:port`, checked by [`authority`]).
pub async fn get(authority: &Authority) -> Result<RlsConnection, Arc<str>> {
    get_with(authority, None).await
}

/// [`get`], over TLS when `tls` is given (a connection of its own).
pub async fn get_with(
    authority: &Authority,
    tls: Option<&GrpcTls>,
) -> Result<RlsConnection, Arc<str>> {
    let key = (authority.clone(), tls.is_some());
    let connecting = SLOTS.with(|slots| {
        let mut slots = slots.borrow_mut();
        match slots.get(&key) {
            Some(Slot::Ready(live)) if !live.closed.load(Ordering::Relaxed) => {
                return Ok(Ok(live.clone()))
            }
            Some(Slot::Connecting(pending)) => return Ok(Err(pending.clone())),
            Some(Slot::Failed { until, reason }) if Instant::now() < *until => {
                return Err(reason.clone())
            }
            _ => {}
        }
        let pending = connect(authority.clone(), tls.cloned()).boxed().shared();
        slots.insert(key.clone(), Slot::Connecting(pending.clone()));
        Ok(Err(pending))
    })?;
    Ok(RlsConnection(match connecting {
        Ok(live) => live,
        Err(pending) => {
            let result = pending.await;
            SLOTS.with(|slots| {
                let mut slots = slots.borrow_mut();
                if let Some(slot @ Slot::Connecting(_)) = slots.get_mut(&key) {
                    *slot = match &result {
                        Ok(live) => Slot::Ready(live.clone()),
                        Err(reason) => Slot::Failed {
                            until: Instant::now() + RETRY_AFTER,
                            reason: reason.clone(),
                        },
                    };
                }
            });
            result?
        }
    }))
}

/// `host:port` as a URI authority; the port is required.
pub fn authority(address: &str) -> Result<Authority, String> {
    let authority: Authority = address.parse().map_err(|e| format!("{e}"))?;
    if authority.port_u16().is_none() {
        return Err("a port is required (host:port)".into());
    }
    Ok(authority)
}

async fn connect(authority: Authority, tls: Option<GrpcTls>) -> Result<Live, Arc<str>> {
    let failed = |what: &str, e: &dyn std::fmt::Display| -> Arc<str> {
        Arc::from(format!("{what} gRPC service {authority}: {e}"))
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
    let (send, closed) = match tls {
        None => {
            let (send, connection) = grpc_client::handshake(stream)
                .await
                .map_err(|e| failed("HTTP/2 handshake failed with", &e))?;
            (send, drive(connection))
        }
        Some(tls) => {
            let _ = stream.set_nodelay(true);
            let stream = warden_tls::tokio_rustls::TlsConnector::from(tls.config)
                .connect(tls.name, stream)
                .await
                .map_err(|e| failed("TLS handshake failed with", &e))?;
            let (send, connection) = grpc_client::handshake_over(stream)
                .await
                .map_err(|e| failed("HTTP/2 handshake failed with", &e))?;
            (send, drive(connection))
        }
    };
    let uri = grpc_client::method_uri(&authority, grpc_client::SHOULD_RATE_LIMIT);
    Ok(Live {
        send,
        uri,
        authority,
        closed,
    })
}

/// Run a connection until it ends or stops answering PINGs; the flag says it has ended.
fn drive<T>(mut connection: h2::client::Connection<T, Bytes>) -> Arc<AtomicBool>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let closed = Arc::new(AtomicBool::new(false));
    let ping_pong = connection.ping_pong();
    let done = closed.clone();
    tokio::spawn(async move {
        tokio::select! {
            result = connection => if let Err(e) = result {
                tracing::debug!(error = %e, "gRPC service connection closed");
            },
            () = keep_alive(ping_pong) => {
                tracing::debug!("gRPC service did not answer a keep-alive PING; closing");
            }
        }
        done.store(true, Ordering::Relaxed);
    });
    closed
}

/// Returns when a PING goes unanswered (or cannot be sent); never without a PingPong.
async fn keep_alive(ping_pong: Option<PingPong>) {
    let Some(mut ping_pong) = ping_pong else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(KEEP_ALIVE_INTERVAL).await;
        let pong = tokio::time::timeout(KEEP_ALIVE_TIMEOUT, ping_pong.ping(Ping::opaque()));
        if !matches!(pong.await, Ok(Ok(_))) {
            return;
        }
    }
}
