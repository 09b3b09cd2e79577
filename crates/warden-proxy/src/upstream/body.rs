//! One body type for both directions, so nothing is boxed per request: a streamed hyper body,
//! an upstream response read without hyper ([`H1Body`]), a pre-built `Bytes` (direct and local
//! replies) or nothing.

use crate::upstream::h1_exchange::H1Body;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The body's error: hyper's, or the lean upstream exchange's.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub enum ProxyBody {
    Streamed(Incoming),
    /// A downstream request's body from hyper's server: its errors are the client's framing
    /// errors (a bad chunk size, an oversized chunk extension, bad trailers), marked as such
    /// ([`DownstreamBodyError`]) so that the failed exchange is answered 400, not 503; and a
    /// body that stops arriving for the stream idle timeout ends with [`StreamIdleTimeout`]
    /// (answered 408). Build it with [`ProxyBody::downstream`].
    Downstream(Incoming, Option<Box<StreamIdle>>),
    /// Boxed: it holds the connection, and `ProxyBody` is moved around with every response.
    H1(Box<H1Body>),
    Full(Option<Bytes>),
    Empty,
    /// A mirrored request's body or its copy (`mirror`): rare, so boxed.
    Boxed(Pin<Box<dyn Body<Data = Bytes, Error = BoxError> + Send>>),
}

impl std::fmt::Debug for ProxyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxyBody::Streamed(b) => f.debug_tuple("Streamed").field(b).finish(),
            ProxyBody::Downstream(b, _) => f.debug_tuple("Downstream").field(b).finish(),
            ProxyBody::H1(b) => f.debug_tuple("H1").field(b).finish(),
            ProxyBody::Full(b) => f.debug_tuple("Full").field(b).finish(),
            ProxyBody::Empty => f.write_str("Empty"),
            ProxyBody::Boxed(_) => f.write_str("Boxed"),
        }
    }
}

impl From<Bytes> for ProxyBody {
    fn from(bytes: Bytes) -> Self {
        ProxyBody::full(bytes)
    }
}

impl ProxyBody {
    /// A downstream request body, ended with [`StreamIdleTimeout`] once no byte of it has come
    /// for `idle` (no timer for a body that is already complete).
    pub fn downstream(body: Incoming, idle: Option<Duration>) -> Self {
        let timer = match idle {
            Some(after) if !body.is_end_stream() => Some(Box::new(StreamIdle {
                after,
                sleep: Box::pin(tokio::time::sleep(after)),
            })),
            _ => None,
        };
        ProxyBody::Downstream(body, timer)
    }

    pub fn full(bytes: Bytes) -> Self {
        if bytes.is_empty() {
            ProxyBody::Empty
        } else {
            ProxyBody::Full(Some(bytes))
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Streamed(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            ProxyBody::Downstream(b, idle) => match Pin::new(b).poll_frame(cx) {
                Poll::Ready(frame) => {
                    if let Some(idle) = idle {
                        idle.restart();
                    }
                    Poll::Ready(
                        frame.map(|f| f.map_err(|e| Box::new(DownstreamBodyError(e)) as BoxError)),
                    )
                }
                Poll::Pending => match idle {
                    Some(idle) => match idle.sleep.as_mut().poll(cx) {
                        Poll::Ready(()) => {
                            Poll::Ready(Some(Err(Box::new(StreamIdleTimeout(idle.after)))))
                        }
                        Poll::Pending => Poll::Pending,
                    },
                    None => Poll::Pending,
                },
            },
            ProxyBody::H1(b) => Pin::new(b).poll_frame(cx),
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|d| Ok(Frame::data(d)))),
            ProxyBody::Empty => Poll::Ready(None),
            ProxyBody::Boxed(b) => b.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Streamed(b) | ProxyBody::Downstream(b, _) => b.is_end_stream(),
            ProxyBody::H1(b) => b.is_end_stream(),
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Empty => true,
            ProxyBody::Boxed(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Streamed(b) | ProxyBody::Downstream(b, _) => b.size_hint(),
            ProxyBody::H1(b) => b.size_hint(),
            ProxyBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ProxyBody::Full(None) | ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Boxed(b) => b.size_hint(),
        }
    }
}

/// A downstream request body that hyper's server could not read: the client's fault.
#[derive(Debug)]
pub struct DownstreamBodyError(pub hyper::Error);

impl std::fmt::Display for DownstreamBodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "downstream request body: {}", self.0)
    }
}

impl std::error::Error for DownstreamBodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The stream idle timer of a downstream body: restarted by every frame.
#[derive(Debug)]
pub struct StreamIdle {
    after: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl StreamIdle {
    fn restart(&mut self) {
        self.sleep
            .as_mut()
            .reset(tokio::time::Instant::now() + self.after);
    }
}

/// A downstream request body stalled for the stream idle timeout.
#[derive(Debug)]
pub struct StreamIdleTimeout(pub Duration);

impl std::fmt::Display for StreamIdleTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "downstream request body idle for {:?} (stream idle timeout)",
            self.0
        )
    }
}

impl std::error::Error for StreamIdleTimeout {}

/// Whether an upstream exchange failed because the downstream body stalled (somewhere in its
/// source chain).
pub fn caused_by_stream_idle(e: &(dyn std::error::Error + 'static)) -> bool {
    caused_by::<StreamIdleTimeout>(e)
}

/// Whether an upstream exchange failed because the downstream body did (somewhere in its
/// source chain: hyper's clients wrap the body's error in their own).
pub fn caused_by_downstream_body(e: &(dyn std::error::Error + 'static)) -> bool {
    caused_by::<DownstreamBodyError>(e)
}

/// Whether `E` is somewhere in `e`'s source chain.
fn caused_by<E: std::error::Error + 'static>(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.is::<E>() {
            return true;
        }
        next = e.source();
    }
    false
}
