//! `%BYTES_SENT%` as Envoy counts it: the body bytes handed to the client, so a streamed
//! answer's line waits for its body's end. [`LogAtEnd`] wraps the body and queues the record
//! when the body ends, or when it is dropped before: the client went away (`DC`,
//! `downstream_remote_disconnect`, as Envoy) or the upstream's body failed (`UC`,
//! `upstream_reset_after_response_started{connection_termination}`), with what was sent.
//! Bodies already in memory (local replies, direct responses) are logged at once with their
//! length: they are not wrapped. An upstream's body read by the proxy counts for itself
//! ([`SentCount`]).

use super::{Record, Sink};
use crate::core::local_reply::ResponseFlag;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// A streamed response body whose log record is queued when it ends.
pub struct LogAtEnd<B> {
    body: B,
    count: SentCount,
}

impl<B> LogAtEnd<B> {
    pub(super) fn new(body: B, record: Box<Record>, sink: Sink) -> Self {
        LogAtEnd {
            body,
            count: SentCount::new(record, sink),
        }
    }
}

/// A record waiting for its body's end, and the body bytes sent so far: what a body type that
/// counts for itself holds (an upstream's body read by the proxy, whose header lines a
/// [`LogAtEnd`] around it would hide from the response's writer), and what [`LogAtEnd`] holds.
/// Dropped before the end, it queues the record as cut.
pub struct SentCount {
    record: Option<Box<Record>>,
    sink: Sink,
    sent: u64,
    /// The body yielded an error (the upstream's side failed mid-body).
    failed: bool,
}

impl SentCount {
    pub(super) fn new(record: Box<Record>, sink: Sink) -> Self {
        SentCount {
            record: Some(record),
            sink,
            sent: 0,
            failed: false,
        }
    }

    /// What the body's `poll_frame` gave; `ended`: whether the body is at its end after it.
    pub fn saw<E>(
        &mut self,
        polled: &Option<Result<Frame<Bytes>, E>>,
        ended: impl FnOnce() -> bool,
    ) {
        match polled {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    self.sent += data.len() as u64;
                }
                if ended() {
                    self.finish(None);
                }
            }
            Some(Err(_)) => self.failed = true,
            None => self.finish(None),
        }
    }

    fn finish(&mut self, cut: Option<ResponseFlag>) {
        let Some(mut record) = self.record.take() else {
            return;
        };
        record.bytes_sent = self.sent;
        if let Some(flag) = cut {
            record.flags.set(flag);
            record.set_text(super::Field::Details, cut_details(flag));
        }
        self.sink.log(record);
    }
}

impl Drop for SentCount {
    fn drop(&mut self) {
        if self.record.is_some() {
            let flag = cut_flag(self.failed);
            self.finish(Some(flag));
        }
    }
}

/// Envoy's details for a body cut short by `flag`'s reason.
fn cut_details(flag: ResponseFlag) -> &'static str {
    match flag {
        ResponseFlag::DownstreamConnectionTermination => "downstream_remote_disconnect",
        _ => "upstream_reset_after_response_started{connection_termination}",
    }
}

/// Why a body dropped before its end was cut: its own error, else the client.
fn cut_flag(failed: bool) -> ResponseFlag {
    if failed {
        ResponseFlag::UpstreamReset
    } else {
        ResponseFlag::DownstreamConnectionTermination
    }
}

impl<B> Body for LogAtEnd<B>
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
        let polled = ready!(Pin::new(&mut this.body).poll_frame(cx));
        let body = &this.body;
        this.count.saw(&polled, || body.is_end_stream());
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_body_names_who_cut_it() {
        let cases = [
            (false, "DC", "downstream_remote_disconnect"),
            (
                true,
                "UC",
                "upstream_reset_after_response_started{connection_termination}",
            ),
        ];
        for (failed, code, details) in cases {
            let flag = cut_flag(failed);
            assert_eq!((flag.code(), cut_details(flag)), (code, details));
        }
    }
}
