//! A [`Reply`] written as an HTTP/1.x response the way hyper writes it (the head rules live in
//! [`warden_http1::response_head`]); large pattern bodies are left for the caller to write.
//! Clients see no difference between the fast path and hyper (fast_h1's tests compare the two).

use super::body::next_pattern_chunk;
use super::reply::{Reply, ReplyBody};
use warden_http1::http_date::DATE_LEN;
use warden_http1::response_head::{self, BodyEncoding, BodyLength, Framing, Head};

/// Largest pattern body copied into the output buffer; bigger ones are written straight from the
/// static pattern after it.
pub(super) const INLINE_BODY: usize = 16 * 1024;

/// Append the response to `out`; returns how many pattern bytes must still be written after it.
pub(super) fn encode(
    out: &mut Vec<u8>,
    reply: &Reply,
    framing: &Framing,
    date: &[u8; DATE_LEN],
) -> usize {
    let body_len = match &reply.body {
        ReplyBody::Pattern(n) => *n,
        ReplyBody::Text(text) => text.len(),
        // The fast path serves only requests without a body, so there is nothing to echo.
        ReplyBody::Empty | ReplyBody::RequestBody => 0,
    };
    let headers = reply
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
    let status = reply.status;
    let head = Head {
        status,
        reason: response_head::default_reason(status).as_bytes(),
        http10: false,
        headers,
        body: match body_len {
            0 => BodyLength::Empty,
            n => BodyLength::Known(n as u64),
        },
    };
    if response_head::encode(out, framing, head, date).body == BodyEncoding::Length(0) {
        return 0;
    }
    match &reply.body {
        ReplyBody::Text(text) => out.extend_from_slice(text),
        ReplyBody::Pattern(n) if *n <= INLINE_BODY => {
            let mut remaining = *n;
            while let Some(chunk) = next_pattern_chunk(&mut remaining) {
                out.extend_from_slice(chunk);
            }
        }
        ReplyBody::Pattern(n) => return *n,
        ReplyBody::Empty | ReplyBody::RequestBody => {}
    }
    0
}
