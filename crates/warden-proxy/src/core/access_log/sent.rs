//! `%BYTES_SENT%` as Envoy counts it: the body bytes handed to the client, so a streamed
//! answer's line waits for its body's end. [`LogAtEnd`] wraps the body and queues the record
//! when the body ends, or when it is dropped before: the client went away (`DC`,
//! `downstream_remote_disconnect`, as Envoy) or the upstream's body failed (`UC`,
//! `upstream_reset_after_response_started{connection_termination}`), with what was sent.
//! Bodies already in memory (local replies, direct responses) are logged at once with their
//! length: they are not wrapped.

use super::{Record, Sink};
use crate::core::local_reply::ResponseFlag;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// A streamed response body whose log record is queued when it ends.
pub struct LogAtEnd<B> {
    body: B,
    record: Option<Box<Record>>,
    sink: Sink,
    sent: u64,
    /// The body yielded an error (the upstream's side failed mid-body).
    failed: bool,
}

impl<B> LogAtEnd<B> {
    pub(super) fn new(body: B, record: Box<Record>, sink: Sink) -> Self {
        LogAtEnd {
            body,
            record: Some(record),
            sink,
            sent: 0,
            failed: false,
        }
    }

    fn finish(&mut self, cut: Option<ResponseFlag>) {
        let Some(mut record) = self.record.take() else {
            return;
        };
        record.bytes_sent = self.sent;
        if let Some(flag) = cut {
            record.flags.set(flag);
            record.details.clear();
            record.details.push_str(cut_details(flag));
        }
        self.sink.log(record);
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
        match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    this.sent += data.len() as u64;
                }
                if this.body.is_end_stream() {
                    this.finish(None);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => {
                this.failed = true;
                Poll::Ready(Some(Err(e)))
            }
            None => {
                this.finish(None);
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<B> Drop for LogAtEnd<B> {
    fn drop(&mut self) {
        if self.record.is_some() {
            let flag = cut_flag(self.failed);
            self.finish(Some(flag));
        }
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
