//! An HTTP/1.x response head written the way hyper writes it: the same status line, header
//! order, `content-length` rules (HEAD, 204, 304), `connection: keep-alive` for a persistent
//! HTTP/1.0 connection and `connection: close` for a closing HTTP/1.1 one, then `date`. A
//! client cannot tell a fast-path response from hyper's (the users' tests compare the two).

use crate::http_date::DATE_LEN;
use http::StatusCode;
use std::io::Write;

/// How the request shapes its response.
pub struct Framing {
    pub http10: bool,
    pub keep_alive: bool,
    /// A HEAD request: headers as for GET, no body.
    pub head: bool,
}

/// hyper's reason phrase: the canonical one, or its placeholder for codes without one (some
/// parsers need a phrase).
pub fn default_reason(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("<none>")
}

/// The body behind a response head, as hyper's server classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    /// No body at all (the body is already at its end).
    Empty,
    /// Exactly this many bytes.
    Known(u64),
    /// Streamed, length unknown.
    Unknown,
}

/// How the body is written after the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEncoding {
    /// This many bytes as they are (0: nothing is written).
    Length(u64),
    /// Chunked transfer coding, ended by [`LAST_CHUNK`].
    Chunked,
    /// Bytes as they are, ended by closing the connection.
    CloseDelimited,
}

/// What [`encode`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub body: BodyEncoding,
    /// The connection stays open after this response.
    pub keep_alive: bool,
}

/// The end of a chunked body (no trailers).
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Append the size line of a chunk of `len` bytes (the chunk's data and `\r\n` follow).
pub fn chunk_size_line(out: &mut Vec<u8>, len: usize) {
    let _ = write!(out, "{len:X}\r\n");
}

/// A response head as it reaches [`encode`]: `headers` has lowercase names and none of the
/// hop-by-hop ones (`connection`, `transfer-encoding`, `trailer`), which the caller stripped;
/// `http10` is the response's own version (an HTTP/1.0 upstream's answer ends the connection
/// of an HTTP/1.0 client, as in hyper).
pub struct Head<'r, H> {
    pub status: StatusCode,
    pub reason: &'r [u8],
    pub http10: bool,
    pub headers: H,
    pub body: BodyLength,
}

impl<'r> Head<'r, ()> {
    /// This head with `headers`: one head, written with whichever iterator the caller has.
    pub fn with_headers<H>(self, headers: H) -> Head<'r, H> {
        Head {
            status: self.status,
            reason: self.reason,
            http10: self.http10,
            headers,
            body: self.body,
        }
    }
}

/// Append a response head to `out` as hyper's server writes it (hyper 1.x
/// `proto::h1::role::Server::encode_headers` and `Conn::enforce_version`): the headers in map
/// order with a given `content-length` kept in place, then `connection` for a persistent
/// HTTP/1.0 or a closing HTTP/1.1 exchange, then `content-length` or `transfer-encoding:
/// chunked` when the headers had no length, then `date` unless given.
pub fn encode<'a, H>(
    out: &mut Vec<u8>,
    framing: &Framing,
    head: Head<'_, H>,
    date: &[u8; DATE_LEN],
) -> Written
where
    H: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    let status = head.status;
    out.extend_from_slice(if framing.http10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(head.reason);
    out.extend_from_slice(b"\r\n");
    // HEAD, 204 and 304 have no body; HEAD keeps the length it would have had.
    let bodiless_status = matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
        || status.is_informational();
    let can_have_body = !(framing.head || bodiless_status);
    let mut encoding = BodyEncoding::Length(0);
    let mut wrote_len = false;
    let mut wrote_date = false;
    for (name, value) in head.headers {
        if name == b"content-length" {
            let length = match head.body {
                BodyLength::Known(n) => Some(n),
                BodyLength::Unknown => parse_length(value),
                // Kept on a HEAD response (the length of what GET would send), else dropped
                // for the implicit `content-length: 0` below.
                BodyLength::Empty if framing.head => Some(0),
                BodyLength::Empty => None,
            };
            if let (Some(n), false) = (length, wrote_len) {
                header(out, name, value);
                wrote_len = true;
                encoding = BodyEncoding::Length(n);
            }
            continue;
        }
        wrote_date |= name == b"date";
        header(out, name, value);
    }
    let mut keep_alive = framing.keep_alive && !(framing.http10 && head.http10);
    match (framing.http10, keep_alive) {
        (true, true) => header(out, b"connection", b"keep-alive"),
        (false, false) => header(out, b"connection", b"close"),
        _ => {}
    }
    if !wrote_len {
        encoding = match head.body {
            BodyLength::Unknown if framing.http10 || !can_have_body => BodyEncoding::CloseDelimited,
            BodyLength::Unknown => {
                header(out, b"transfer-encoding", b"chunked");
                BodyEncoding::Chunked
            }
            BodyLength::Empty | BodyLength::Known(0) => {
                if !(bodiless_status || framing.head) {
                    header(out, b"content-length", b"0");
                }
                BodyEncoding::Length(0)
            }
            BodyLength::Known(n) => {
                if !bodiless_status {
                    out.extend_from_slice(b"content-length: ");
                    // itoa: `write!` goes through the formatting machinery on every response.
                    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
                BodyEncoding::Length(n)
            }
        };
    }
    if !can_have_body {
        encoding = BodyEncoding::Length(0);
    }
    if encoding == BodyEncoding::CloseDelimited {
        keep_alive = false;
    }
    if !wrote_date {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(date);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Written {
        body: encoding,
        keep_alive,
    }
}

/// A `content-length` value as hyper reads it: digits only.
fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &[u8; DATE_LEN] = b"Mon, 30 Nov 2026 03:07:17 GMT";

    fn head(
        framing: (bool, bool, bool),
        status: u16,
        headers: &[(&str, &str)],
        body: BodyLength,
    ) -> (String, Written) {
        let (http10, keep_alive, head) = framing;
        let mut out = Vec::new();
        let status = StatusCode::from_u16(status).unwrap();
        let written = encode(
            &mut out,
            &Framing {
                http10,
                keep_alive,
                head,
            },
            Head {
                status,
                reason: default_reason(status).as_bytes(),
                http10: false,
                headers: headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
                body,
            },
            DATE,
        );
        (String::from_utf8(out).unwrap(), written)
    }

    const GET11: (bool, bool, bool) = (false, true, false);

    #[test]
    fn writes_hypers_head() {
        let (text, w) = head(GET11, 200, &[("x-a", "1")], BodyLength::Known(4));
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 4\r\ndate: Mon, 30 Nov 2026 03:07:17 GMT\r\n\r\n"
        );
        assert_eq!(
            w,
            Written {
                body: BodyEncoding::Length(4),
                keep_alive: true
            }
        );
        let (text, w) = head((true, true, false), 333, &[], BodyLength::Empty);
        assert!(
            text.starts_with(
                "HTTP/1.0 333 <none>\r\nconnection: keep-alive\r\ncontent-length: 0\r\n"
            ),
            "{text}"
        );
        assert!(w.keep_alive);
        let (text, w) = head((false, false, true), 200, &[], BodyLength::Empty);
        assert!(text.contains("connection: close\r\ndate:"), "{text}");
        assert!(!w.keep_alive);
        let (text, w) = head(GET11, 204, &[], BodyLength::Empty);
        assert!(!text.contains("content-length"), "{text}");
        assert_eq!(w.body, BodyEncoding::Length(0));
    }

    #[test]
    fn keeps_an_upstreams_length_and_date_in_place() {
        let given = [("content-length", "5"), ("date", "then"), ("x-b", "2")];
        let (text, w) = head(GET11, 200, &given, BodyLength::Known(5));
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: then\r\nx-b: 2\r\n\r\n"
        );
        assert_eq!(w.body, BodyEncoding::Length(5));
        // HEAD: the length stays, no body follows.
        let (text, w) = head((false, true, true), 200, &given, BodyLength::Empty);
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n"),
            "{text}"
        );
        assert_eq!(w.body, BodyEncoding::Length(0));
    }

    #[test]
    fn an_unknown_length_is_chunked_or_ends_with_the_connection() {
        let (text, w) = head(GET11, 200, &[], BodyLength::Unknown);
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert_eq!(
            w,
            Written {
                body: BodyEncoding::Chunked,
                keep_alive: true
            }
        );
        let (text, w) = head((true, true, false), 200, &[], BodyLength::Unknown);
        assert!(!text.contains("transfer-encoding"), "{text}");
        assert_eq!(
            w,
            Written {
                body: BodyEncoding::CloseDelimited,
                keep_alive: false
            }
        );
        let mut out = Vec::new();
        chunk_size_line(&mut out, 255);
        assert_eq!(out, b"FF\r\n");
    }
}
