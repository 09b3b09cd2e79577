//! HTTP/1.1 fast-path pieces shared by `warden proxy` (local replies) and `warden echo`.
//!
//! hyper's HTTP/1 dispatcher builds a request, a header map, a response and a body per request
//! and moves the bytes through its own buffers; for answers decided without an upstream that
//! was most of the user-space CPU. A fast path parses body-less requests straight from its read
//! buffer ([`request_head`]), answers into one output buffer ([`response_head`], [`http_date`])
//! and hands the connection to hyper mid-stream ([`replay_io`]) for anything else. The proxy's
//! upstream side reads body-less exchanges' responses with [`response_read`].

#![forbid(unsafe_code)]

mod chunked_lines;
mod connection_tokens;
pub mod http_date;
pub mod replay_io;
pub mod request_head;
pub mod request_lines;
pub mod response_head;
pub mod response_read;
pub mod socket_read;

/// What an HTTP/2 prior-knowledge connection starts with.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a connection's first bytes are (a prefix of) the HTTP/2 preface: a first read may
/// stop anywhere. An HTTP/1 request that happens to start the same way is served by hyper just
/// as well.
pub fn starts_like_h2(first: &[u8]) -> bool {
    let checked = first.len().min(H2_PREFACE.len());
    first[..checked] == H2_PREFACE[..checked]
}
