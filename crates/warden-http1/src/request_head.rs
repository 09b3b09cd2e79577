//! One HTTP/1.x request head as a fast path reads it (`httparse`, the parser inside hyper),
//! and whether the fast path may answer it. Whatever it is not sure about goes to hyper, which
//! then answers, or refuses, exactly as it always did.
//!
//! The caller owns the header slots ([`HeaderSlots`]) so that the parsed headers can borrow
//! both the read buffer and the slots without an allocation per request.

use crate::connection_tokens::names_a_header;
use http::Method;
use std::mem::MaybeUninit;

/// More headers than this and hyper takes the request (its own limit is 100).
pub const MAX_HEADERS: usize = 64;
/// Longer request targets go to hyper, which enforces its own URI limits.
const MAX_TARGET: usize = 8 * 1024;

/// Room for one request's headers, left uninitialised as hyper does: zeroing 64 of them
/// costs more than the parse.
pub type HeaderSlots<'b> = [MaybeUninit<httparse::Header<'b>>; MAX_HEADERS];

/// Fresh slots for [`parse`].
pub fn header_slots<'b>() -> HeaderSlots<'b> {
    [const { MaybeUninit::uninit() }; MAX_HEADERS]
}

pub enum Parsed<'b, 'h> {
    /// A complete head the fast path can answer.
    Fast(FastRequest<'b, 'h>),
    /// Not a complete head yet.
    Partial,
    /// hyper's job: a body, an upgrade, an expectation, a head or target it must judge itself.
    Hyper,
}

/// A request without a body.
pub struct FastRequest<'b, 'h> {
    pub method: Method,
    /// The request target as sent: `path[?query]`.
    pub target: &'b str,
    pub path: &'b str,
    pub query: Option<&'b str>,
    /// The header lines as sent (names in their original case).
    pub headers: &'h [httparse::Header<'b>],
    pub http10: bool,
    pub keep_alive: bool,
    /// A `Connection` line names a header (a token other than `close` and `keep-alive`),
    /// which a proxy must drop along with the hop-by-hop ones.
    pub connection_names: bool,
    /// Length of the head (request line to the empty line), which is the whole request.
    pub len: usize,
}

pub fn parse<'b, 'h>(buf: &'b [u8], slots: &'h mut HeaderSlots<'b>) -> Parsed<'b, 'h> {
    let mut req = httparse::Request::new(&mut []);
    let parsed =
        httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, buf, slots);
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        // Malformed, or too many headers.
        Err(_) => return Parsed::Hyper,
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Hyper;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Hyper;
    };
    // CONNECT turns the connection into a tunnel; that is hyper's business.
    if method == Method::CONNECT || !is_fast_target(target) {
        return Parsed::Hyper;
    }
    let http10 = version == 0;
    let headers: &'h [httparse::Header<'b>] = &*std::mem::take(&mut req.headers);
    let Some(Connection {
        keep_alive,
        connection_names,
    }) = bodyless_connection(headers, http10)
    else {
        return Parsed::Hyper;
    };
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    Parsed::Fast(FastRequest {
        method,
        target,
        path,
        query,
        headers,
        http10,
        keep_alive,
        connection_names,
        len,
    })
}

/// What a body-less request's `Connection` lines say.
struct Connection {
    keep_alive: bool,
    connection_names: bool,
}

/// Whether the connection stays open after this request, with hyper's rules: HTTP/1.1 unless a
/// `Connection` line says `close`, HTTP/1.0 only if one says `keep-alive`; once a line said
/// `close`, a later `keep-alive` does not undo it; and whether a `Connection` line names other
/// headers. `None` when the request has (or may have) a body, an upgrade or an expectation.
fn bodyless_connection(headers: &[httparse::Header<'_>], http10: bool) -> Option<Connection> {
    let mut keep_alive = !http10;
    let mut close = false;
    let mut saw_length = false;
    let mut connection_names = false;
    for header in headers {
        let name = header.name;
        if name.eq_ignore_ascii_case("connection") {
            connection_names |= header.value.split(|&b| b == b',').any(names_a_header);
            if close || has_token(header.value, "close") {
                close = true;
                keep_alive = false;
            } else if !keep_alive {
                keep_alive = has_token(header.value, "keep-alive");
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            if saw_length || header.value != b"0" {
                return None;
            }
            saw_length = true;
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("upgrade")
        {
            return None;
        }
    }
    Some(Connection {
        keep_alive,
        connection_names,
    })
}

/// A header value as `HeaderValue::to_str` gives it: only values of visible ASCII (or tabs)
/// are text.
pub fn visible_str(value: &[u8]) -> Option<&str> {
    if value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

/// A comma-separated token in a header value, compared as hyper does: only values of visible
/// ASCII have tokens at all.
fn has_token(value: &[u8], token: &str) -> bool {
    visible_str(value).is_some_and(|v| {
        v.split(',')
            .any(|item| item.trim_ascii().eq_ignore_ascii_case(token))
    })
}

/// An origin-form target (`/path?query`) made only of bytes `http::Uri` accepts both in a path
/// and in a query (with the first `?` as the separator), so splitting it at `?` gives what
/// `Uri::path` and `Uri::query` would. Anything else (`#`, `"`, `` ` ``, non-ASCII, absolute
/// form, `*`) goes to hyper, which parses it exactly.
fn is_fast_target(target: &str) -> bool {
    target.starts_with('/')
        && target.len() <= MAX_TARGET
        && target
            .bytes()
            .all(|b| matches!(b, 0x21 | 0x24..=0x3b | 0x3d | 0x3f..=0x5f | 0x61..=0x7e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the tests look at of a fast request (the slots do not outlive the call).
    struct Seen {
        method: Method,
        path: String,
        query: Option<String>,
        headers: Vec<(String, Vec<u8>)>,
        http10: bool,
        keep_alive: bool,
        connection_names: bool,
        len: usize,
    }

    fn fast(head: &str) -> Seen {
        let mut slots = header_slots();
        match parse(head.as_bytes(), &mut slots) {
            Parsed::Fast(r) => Seen {
                method: r.method,
                path: r.path.into(),
                query: r.query.map(Into::into),
                headers: r
                    .headers
                    .iter()
                    .map(|h| (h.name.to_string(), h.value.to_vec()))
                    .collect(),
                http10: r.http10,
                keep_alive: r.keep_alive,
                connection_names: r.connection_names,
                len: r.len,
            },
            Parsed::Partial => panic!("partial: {head:?}"),
            Parsed::Hyper => panic!("left to hyper: {head:?}"),
        }
    }

    fn left_to_hyper(head: &str) -> bool {
        matches!(parse(head.as_bytes(), &mut header_slots()), Parsed::Hyper)
    }

    #[test]
    fn reads_a_bodyless_request() {
        let head = "GET /a/b?size=10&x=%20 HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\nGET";
        let request = fast(head);
        assert_eq!(request.method, Method::GET);
        assert_eq!(
            (request.path.as_str(), request.query.as_deref()),
            ("/a/b", Some("size=10&x=%20"))
        );
        assert_eq!(
            request.headers,
            [
                ("Host".to_string(), b"h".to_vec()),
                ("Content-Length".to_string(), b"0".to_vec())
            ]
        );
        assert!(!request.http10 && request.keep_alive);
        assert_eq!(request.len, head.len() - 3);
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHost:", &mut header_slots()),
            Parsed::Partial
        ));
    }

    #[test]
    fn keep_alive_follows_hypers_rules() {
        let keep = |head: &str| fast(head).keep_alive;
        assert!(!keep(
            "GET / HTTP/1.1\r\nConnection: Keep-Alive, Close\r\n\r\n"
        ));
        assert!(!keep(
            "GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n"
        ));
        assert!(keep("GET / HTTP/1.1\r\nConnection: closed\r\n\r\n"));
        assert!(!keep("GET / HTTP/1.0\r\n\r\n"));
        assert!(keep("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
        assert!(fast("HEAD / HTTP/1.0\r\n\r\n").http10);
    }

    #[test]
    fn connection_naming_other_headers_is_noted() {
        let names = |head: &str| fast(head).connection_names;
        assert!(!names(
            "GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n"
        ));
        assert!(names(
            "GET / HTTP/1.1\r\nConnection: close, x-secret\r\n\r\n"
        ));
    }

    #[test]
    fn bodies_upgrades_and_odd_targets_go_to_hyper() {
        for head in [
            "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\n\r\n",
            "GET http://a/ HTTP/1.1\r\n\r\n",
            "GET /a#b HTTP/1.1\r\n\r\n",
            "GET /a\"b HTTP/1.1\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
        ] {
            assert!(left_to_hyper(head), "{head:?}");
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert!(left_to_hyper(&format!("GET / HTTP/1.1\r\n{many}\r\n")));
    }
}
