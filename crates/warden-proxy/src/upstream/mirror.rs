//! `mirror` / `mirrors`: Envoy's request shadowing. A copy of the request goes to each mirror
//! cluster that draws its share, on its own task; its answer is read and dropped, and nothing
//! about it reaches the client (fire and forget). The copy's `Host` gets Envoy's `-shadow`
//! suffix (`reviews:9080` -> `reviews-shadow:9080`). A request body is teed frame by frame:
//! if a mirror falls behind by more than [`COPY_FRAMES`] frames its copy is abandoned (the
//! shadow request fails, never completes with a truncated body), so a slow mirror cannot slow
//! the client down.

use crate::core::forwarding_headers;
use crate::core::metrics::Metrics;
use crate::upstream::body::{BoxError, ProxyBody};
use crate::upstream::cluster::{Cluster, UpstreamProtocol};
use crate::upstream::Outgoing;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// `mirror` / `mirrors[]`: a copy of a share of the route's requests, fire and forget.
#[derive(Debug)]
pub struct Mirror {
    pub cluster: Arc<Cluster>,
    /// Percent of requests (0..=100).
    pub share: f64,
}

/// How far a mirror's copy of a body may lag behind the request's own.
const COPY_FRAMES: usize = 32;

/// The bound on a shadow exchange when the route has no timeout (Istio disables route
/// timeouts by default; an unbounded shadow could hold a task and a connection forever).
const DEFAULT_SHADOW_TIMEOUT: Duration = Duration::from_secs(15);

/// The clients shadows are sent with: hyper's (the lean HTTP/1.1 pool serves the request's
/// own task and borrows it).
pub struct MirrorClients {
    h1: Client<HttpConnector, ProxyBody>,
    h2: Client<HttpConnector, ProxyBody>,
}

impl MirrorClients {
    pub fn new(connect_timeout: Duration) -> Self {
        let client = |h2: bool| {
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            connector.set_connect_timeout(Some(connect_timeout));
            let mut builder = Client::builder(TokioExecutor::new());
            builder
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(Duration::from_secs(60))
                .http2_only(h2);
            builder.build(connector)
        };
        MirrorClients {
            h1: client(false),
            h2: client(true),
        }
    }
}

/// Send the shadows of `out` to the mirrors that draw their share. `out`'s body is replaced by
/// a tee when it has one.
pub fn shadow(
    clients: &MirrorClients,
    metrics: &Arc<Metrics>,
    mirrors: &[Mirror],
    out: &mut Outgoing<'_>,
    timeout: Option<Duration>,
) {
    let chosen: Vec<&Mirror> = mirrors
        .iter()
        .filter(|m| crate::core::share::draws(m.share))
        .collect();
    if chosen.is_empty() {
        return;
    }
    let mut head = crate::upstream::clone_parts(&out.parts);
    if let Some(lines) = &out.lines {
        lines.read_into(&mut head.headers, forwarding_headers::ADDED);
    }
    if let Some(f) = &out.forwarding {
        f.apply(&mut head.headers);
    }
    let host = head
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| head.uri.authority().map(|a| a.as_str().to_owned()));
    if let Some(v) = host.and_then(|h| HeaderValue::from_str(&shadow_host(&h)).ok()) {
        head.headers.insert(header::HOST, v);
    }
    let mut copies = Vec::new();
    let has_body = !out.body.is_end_stream();
    for m in chosen {
        let body = if has_body {
            let (tx, rx) = mpsc::channel(COPY_FRAMES);
            copies.push(tx);
            ProxyBody::Boxed(Box::pin(ShadowBody { rx, ended: false }))
        } else {
            ProxyBody::Empty
        };
        let mut parts = crate::upstream::clone_parts(&head);
        let cluster = m.cluster.clone();
        let metrics = metrics.clone();
        let protocol = cluster.protocol.for_request(parts.version);
        let client = match protocol {
            UpstreamProtocol::Http2 => clients.h2.clone(),
            _ => clients.h1.clone(),
        };
        let limit = timeout.unwrap_or(DEFAULT_SHADOW_TIMEOUT);
        tokio::spawn(async move {
            let kind = match cluster.pick(None) {
                Err(_) => "overflow",
                Ok((_, lease)) => {
                    let endpoint = lease.endpoint().authority.clone();
                    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                    match Uri::try_from(format!("http://{endpoint}{path}")) {
                        Err(_) => "failed",
                        Ok(uri) => {
                            parts.uri = uri;
                            parts.version = match protocol {
                                UpstreamProtocol::Http2 => Version::HTTP_2,
                                _ => Version::HTTP_11,
                            };
                            let exchange = async {
                                let resp = client.request(Request::from_parts(parts, body)).await?;
                                // Read to the end, so the connection goes back to the pool.
                                resp.into_body().collect().await?;
                                Ok::<_, BoxError>(())
                            };
                            let outcome = tokio::time::timeout(limit, exchange).await;
                            drop(lease);
                            match outcome {
                                Ok(Ok(())) => "answered",
                                Ok(Err(_)) | Err(_) => "failed",
                            }
                        }
                    }
                }
            };
            metrics.mirror(kind);
        });
    }
    if !copies.is_empty() {
        let inner = std::mem::replace(&mut out.body, ProxyBody::Empty);
        out.body = ProxyBody::Boxed(Box::pin(Tee {
            inner,
            copies,
            metrics: metrics.clone(),
        }));
    }
}

/// Envoy's shadow authority: `-shadow` after the host, before any port.
fn shadow_host(host: &str) -> String {
    // A port follows the last ':' unless that colon is inside an IPv6 literal.
    match host.rfind(':') {
        Some(i)
            if !host[i..].contains(']') && (!host.starts_with('[') || host[..i].ends_with(']')) =>
        {
            format!("{}-shadow{}", &host[..i], &host[i..])
        }
        _ => format!("{host}-shadow"),
    }
}

enum Copy {
    Frame(Frame<Bytes>),
    End,
}

/// The request's body, with each frame also offered to the mirrors' copies.
struct Tee {
    inner: ProxyBody,
    copies: Vec<mpsc::Sender<Copy>>,
    metrics: Arc<Metrics>,
}

impl Tee {
    fn offer(&mut self, frame: &Frame<Bytes>) {
        let metrics = &self.metrics;
        self.copies.retain(|tx| {
            let copy = match frame.data_ref() {
                Some(d) => Frame::data(d.clone()),
                None => match frame.trailers_ref() {
                    Some(t) => Frame::trailers(t.clone()),
                    None => return true,
                },
            };
            let sent = tx.try_send(Copy::Frame(copy)).is_ok();
            if !sent {
                metrics.mirror("body_dropped");
            }
            sent
        });
    }
}

impl Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => self.offer(frame),
            Poll::Ready(None) => {
                for tx in self.copies.drain(..) {
                    let _ = tx.try_send(Copy::End);
                }
            }
            // A failed body fails the copies too: their senders go without `End`.
            Poll::Ready(Some(Err(_))) => self.copies.clear(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A mirror's copy of the body: ends cleanly only when the request's own body did.
struct ShadowBody {
    rx: mpsc::Receiver<Copy>,
    ended: bool,
}

#[derive(Debug)]
struct CopyAbandoned;

impl std::fmt::Display for CopyAbandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the mirror fell behind the request body; its copy was abandoned")
    }
}

impl std::error::Error for CopyAbandoned {}

impl Body for ShadowBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Copy::Frame(f))) => Poll::Ready(Some(Ok(f))),
            Poll::Ready(Some(Copy::End)) => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(None) => Poll::Ready(Some(Err(Box::new(CopyAbandoned)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::shadow_host;

    #[test]
    fn shadow_suffix_goes_before_the_port() {
        assert_eq!(shadow_host("reviews:9080"), "reviews-shadow:9080");
        assert_eq!(shadow_host("httpbin"), "httpbin-shadow");
        assert_eq!(shadow_host("[::1]:80"), "[::1]-shadow:80");
        assert_eq!(shadow_host("[::1]"), "[::1]-shadow");
    }
}
