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

/// Append the head of a response whose body is `body_len` bytes to `out`. Returns whether the
/// body is to be written after it (not for HEAD, 204 and 304).
pub fn encode<'a>(
    out: &mut Vec<u8>,
    framing: &Framing,
    status: StatusCode,
    reason: &[u8],
    headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    body_len: usize,
    date: &[u8; DATE_LEN],
) -> bool {
    out.extend_from_slice(if framing.http10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        header(out, name, value);
    }
    match (framing.http10, framing.keep_alive) {
        (true, true) => header(out, b"connection", b"keep-alive"),
        (false, false) => header(out, b"connection", b"close"),
        _ => {}
    }
    let bodiless_status = matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
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
    !(framing.head || bodiless_status)
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

    fn head(framing: Framing, status: u16, body_len: usize) -> (String, bool) {
        let mut out = Vec::new();
        let status = StatusCode::from_u16(status).unwrap();
        let body = encode(
            &mut out,
            &framing,
            status,
            default_reason(status).as_bytes(),
            [(&b"x-a"[..], &b"1"[..])],
            body_len,
            b"Mon, 30 Nov 2026 03:07:17 GMT",
        );
        (String::from_utf8(out).unwrap(), body)
    }

    #[test]
    fn writes_hypers_head() {
        let keep = |http10, keep_alive, head| Framing {
            http10,
            keep_alive,
            head,
        };
        assert_eq!(
            head(keep(false, true, false), 200, 4),
            (
                "HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 4\r\ndate: Mon, 30 Nov 2026 03:07:17 GMT\r\n\r\n".into(),
                true
            )
        );
        let (text, body) = head(keep(true, true, false), 333, 0);
        assert!(text.starts_with(
            "HTTP/1.0 333 <none>\r\nx-a: 1\r\nconnection: keep-alive\r\ncontent-length: 0\r\n"
        ));
        assert!(body);
        let (text, body) = head(keep(false, false, true), 200, 0);
        assert!(text.contains("connection: close\r\ndate:"), "{text}");
        assert!(!body);
        let (text, body) = head(keep(false, true, false), 204, 0);
        assert!(!text.contains("content-length") && !body);
    }
}
