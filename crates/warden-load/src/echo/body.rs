//! Response bodies of the echo server without per-request allocation: nothing, a slice of a static
//! pattern, the pattern repeated, or the request body streamed straight back.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::task::{Context, Poll};

const PATTERN_LEN: usize = 64 * 1024;

/// Printable, so `curl '...?size=100'` shows something readable.
static PATTERN: [u8; PATTERN_LEN] = {
    let alphabet = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n";
    let mut out = [0u8; PATTERN_LEN];
    let mut i = 0;
    while i < PATTERN_LEN {
        out[i] = alphabet[i % alphabet.len()];
        i += 1;
    }
    out
};

pub enum EchoBody {
    Empty,
    /// `remaining` bytes of the pattern, sent in chunks of at most 64 KiB.
    Pattern {
        remaining: usize,
    },
    /// Static text (count reports, error messages).
    Text(Option<Bytes>),
    /// The request body, streamed back as it arrives.
    Echo(Incoming),
}

impl EchoBody {
    pub fn text(text: impl Into<Bytes>) -> EchoBody {
        EchoBody::Text(Some(text.into()))
    }
}

/// The next piece of a pattern body with `remaining` bytes left, at most 64 KiB; `None` when done.
/// A body of n bytes is the pattern repeated, the same on both HTTP paths.
pub(super) fn next_pattern_chunk(remaining: &mut usize) -> Option<&'static [u8]> {
    if *remaining == 0 {
        return None;
    }
    let n = (*remaining).min(PATTERN_LEN);
    *remaining -= n;
    Some(&PATTERN[..n])
}

impl Body for EchoBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            EchoBody::Empty => Poll::Ready(None),
            EchoBody::Text(text) => Poll::Ready(text.take().map(|t| Ok(Frame::data(t)))),
            EchoBody::Pattern { remaining } => Poll::Ready(
                next_pattern_chunk(remaining)
                    .map(|chunk| Ok(Frame::data(Bytes::from_static(chunk)))),
            ),
            EchoBody::Echo(incoming) => Pin::new(incoming).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            EchoBody::Empty => true,
            EchoBody::Text(text) => text.is_none(),
            EchoBody::Pattern { remaining } => *remaining == 0,
            EchoBody::Echo(incoming) => incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            EchoBody::Empty => SizeHint::with_exact(0),
            EchoBody::Text(text) => {
                SizeHint::with_exact(text.as_ref().map_or(0, |t| t.len() as u64))
            }
            EchoBody::Pattern { remaining } => SizeHint::with_exact(*remaining as u64),
            EchoBody::Echo(incoming) => incoming.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn pattern_body_has_the_requested_length() {
        for size in [0usize, 1, 1024, PATTERN_LEN, PATTERN_LEN * 2 + 7] {
            let body = EchoBody::Pattern { remaining: size };
            assert_eq!(body.size_hint().exact(), Some(size as u64));
            let bytes = body.collect().await.unwrap().to_bytes();
            assert_eq!(bytes.len(), size);
        }
    }
}
