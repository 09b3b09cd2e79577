//! A [`Reply`] written as an HTTP/1.x response the way hyper writes it: the same status line,
//! header order, `content-length` and body rules (HEAD, 204, 304), `connection: keep-alive` for
//! a persistent HTTP/1.0 connection and `connection: close` for a closing HTTP/1.1 one. Clients
//! see no difference between the fast path and hyper (fast_h1's tests compare the two).

use super::body::next_pattern_chunk;
use super::http_date::DATE_LEN;
use super::reply::{Reply, ReplyBody};
use http::StatusCode;
use std::io::Write;

/// Largest pattern body copied into the output buffer; bigger ones are written straight from the
/// static pattern after it.
pub(super) const INLINE_BODY: usize = 16 * 1024;

/// How the request shapes its response.
pub(super) struct Framing {
    pub http10: bool,
    pub keep_alive: bool,
    /// A HEAD request: headers as for GET, no body.
    pub head: bool,
}

/// Append the response to `out`; returns how many pattern bytes must still be written after it.
pub(super) fn encode(
    out: &mut Vec<u8>,
    reply: &Reply,
    framing: &Framing,
    date: &[u8; DATE_LEN],
) -> usize {
    out.extend_from_slice(if framing.http10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(reply.status.as_str().as_bytes());
    out.push(b' ');
    // hyper's placeholder for codes without a reason phrase: some parsers need one.
    let reason = reply.status.canonical_reason().unwrap_or("<none>");
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &reply.headers {
        header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    match (framing.http10, framing.keep_alive) {
        (true, true) => header(out, b"connection", b"keep-alive"),
        (false, false) => header(out, b"connection", b"close"),
        _ => {}
    }
    let body_len = match &reply.body {
        ReplyBody::Pattern(n) => *n,
        ReplyBody::Text(text) => text.len(),
        // The fast path serves only requests without a body, so there is nothing to echo.
        ReplyBody::Empty | ReplyBody::RequestBody => 0,
    };
    let bodiless_status = matches!(
        reply.status,
        StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
    );
    // As hyper: no length on 204/304, and none on HEAD when the GET body would be empty.
    let empty_head = framing.head && body_len == 0;
    if !(bodiless_status || empty_head) {
        out.extend_from_slice(b"content-length: ");
        let _ = write!(out, "{body_len}");
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"date: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\n\r\n");
    if framing.head || bodiless_status {
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

fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
