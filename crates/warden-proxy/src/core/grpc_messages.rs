//! gRPC messages counted as a body's bytes pass (Istio's `istio_request_messages_total` and
//! `istio_response_messages_total`): each message is a 5-byte prefix (compressed flag, 4-byte
//! big-endian length) and that many bytes; a prefix split across frames is carried over, and
//! nothing is buffered. A message counts when its prefix is complete.

use crate::core::istio_metrics::GrpcSeries;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// Where a body is in its message framing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MessageCounter {
    /// Prefix bytes read of the current message (0..5).
    prefix_read: u8,
    /// The length being read from the prefix.
    length: u32,
    /// Message bytes still to skip.
    body_left: u64,
}

impl MessageCounter {
    /// The messages whose prefix completes in `data`.
    pub fn feed(&mut self, mut data: &[u8]) -> u64 {
        let mut messages = 0;
        while !data.is_empty() {
            if self.body_left > 0 {
                let skip = self.body_left.min(data.len() as u64);
                self.body_left -= skip;
                data = &data[skip as usize..];
                continue;
            }
            let byte = data[0];
            data = &data[1..];
            // Byte 0 is the compressed flag; bytes 1..5 the length.
            if self.prefix_read > 0 {
                self.length = (self.length << 8) | u32::from(byte);
            }
            self.prefix_read += 1;
            if self.prefix_read == 5 {
                messages += 1;
                self.body_left = u64::from(self.length);
                self.prefix_read = 0;
                self.length = 0;
            }
        }
        messages
    }
}

/// A body whose gRPC messages are added to `count` as they pass.
pub struct CountedMessages<B> {
    body: B,
    counter: MessageCounter,
    count: Arc<AtomicU64>,
}

impl<B> CountedMessages<B> {
    pub fn new(body: B, count: Arc<AtomicU64>) -> Self {
        CountedMessages {
            body,
            counter: MessageCounter::default(),
            count,
        }
    }
}

impl<B> Body for CountedMessages<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        if let Some(Ok(f)) = &frame {
            if let Some(data) = f.data_ref() {
                let n = this.counter.feed(data);
                if n > 0 {
                    this.count.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// gRPC's status codes as `grpc-status` carries them.
const GRPC_STATUS: [&str; 17] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
];

/// A known `grpc-status` value, as a static label.
pub fn status_label(value: &[u8]) -> Option<&'static str> {
    GRPC_STATUS.iter().find(|s| s.as_bytes() == value).copied()
}

/// A response body whose messages, and the request's counted so far, go to the request's
/// series when it ends (or is dropped), with the `grpc-status` its trailers carried.
pub struct ReportMessages<B> {
    inner: CountedMessages<B>,
    request: Arc<AtomicU64>,
    series: Option<GrpcSeries>,
    status: Option<&'static str>,
}

impl<B> ReportMessages<B> {
    pub fn new(body: B, request: Arc<AtomicU64>, series: GrpcSeries) -> Self {
        ReportMessages {
            inner: CountedMessages::new(body, Arc::new(AtomicU64::new(0))),
            request,
            series: Some(series),
            status: None,
        }
    }

    fn report(&mut self) {
        if let Some(series) = self.series.take() {
            series.report(
                self.status,
                self.request.load(Ordering::Relaxed),
                self.inner.count.load(Ordering::Relaxed),
            );
        }
    }
}

impl<B> Body for ReportMessages<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let Some(status) = f
                    .trailers_ref()
                    .and_then(|t| t.get("grpc-status"))
                    .and_then(|v| status_label(v.as_bytes()))
                {
                    this.status = Some(status);
                }
                if this.inner.is_end_stream() {
                    this.report();
                }
            }
            Some(Err(_)) => {}
            None => this.report(),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for ReportMessages<B> {
    fn drop(&mut self) {
        self.report();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len as usize));
        m
    }

    #[test]
    fn messages_count_however_the_bytes_are_cut() {
        let mut stream = Vec::new();
        for len in [0, 3, 300, 70_000, 1] {
            stream.extend(message(len));
        }
        // (cut size, messages) — every cut counts the same five.
        for cut in [1, 2, 4, 5, 6, 7, 4096, stream.len()] {
            let mut c = MessageCounter::default();
            let total: u64 = stream.chunks(cut).map(|ch| c.feed(ch)).sum();
            assert_eq!(total, 5, "cut {cut}");
            assert_eq!(
                c,
                MessageCounter::default(),
                "cut {cut}: ends between messages"
            );
        }
    }

    #[test]
    fn a_message_counts_when_its_prefix_is_complete() {
        let m = message(10);
        let mut c = MessageCounter::default();
        assert_eq!(c.feed(&m[..4]), 0);
        assert_eq!(c.feed(&m[4..5]), 1);
        assert_eq!(c.feed(&m[5..]), 0);
    }
}
