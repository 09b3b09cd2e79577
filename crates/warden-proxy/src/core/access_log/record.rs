//! What one request's log line is made of ([`Record`]), copied on the worker: numbers and
//! addresses as they are, and every text (the request's method, path, authority and id, the
//! format's headers, the answer's details, the upstream's names) into one buffer. A record's
//! box and buffer are reused by the worker that rendered it (a pool per thread); the worker
//! builds no header map for it: the format's headers are found in one pass over the request's
//! lines as read.

use super::write_text::push_lossy;
use crate::core::dynamic_metadata::DynamicMetadata;
use crate::core::forwarding_headers::{push_request_id, X_FORWARDED_FOR, X_REQUEST_ID};
use crate::core::local_reply::ResponseFlags;
use http::{header, HeaderMap, HeaderName, HeaderValue};
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use warden_http1::request_lines::RequestLines;

/// A record's texts other than the format's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Method,
    /// `:path` as the request came (with its query).
    Path,
    Authority,
    /// The request's `x-request-id`, or the one the proxy made for it.
    RequestId,
    /// `%RESPONSE_CODE_DETAILS%`.
    Details,
    UpstreamHost,
    UpstreamCluster,
    RouteName,
    Sni,
    /// Why the upstream connection's transport failed (TLS origination).
    TransportFailure,
    /// The TCP peer as text (`ip:port`), when its connection has it rendered.
    Peer,
}

/// Texts before the format's headers.
const FIELDS: usize = 11;
/// Spans kept in the record itself: the fields and six headers (Istio's default formats read
/// four); more go to a vector.
const INLINE: usize = FIELDS + 6;

/// Where a text is in the buffer; `start == u32::MAX`: not there.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    end: u32,
}

const ABSENT: Span = Span {
    start: u32::MAX,
    end: 0,
};

/// A record's texts: one buffer, and where each is in it (read and written through
/// [`Record`]'s methods).
#[derive(Debug)]
pub struct Texts {
    buf: String,
    spans: [Span; INLINE],
    more: Vec<Span>,
    /// How many request headers the format names (response headers' slots follow theirs).
    request_headers: usize,
}

impl Default for Texts {
    fn default() -> Self {
        Texts::with_capacity(0)
    }
}

impl Texts {
    fn with_capacity(capacity: usize) -> Self {
        Texts {
            buf: String::with_capacity(capacity),
            spans: [ABSENT; INLINE],
            more: Vec::new(),
            request_headers: 0,
        }
    }

    fn get(&self, slot: usize) -> Option<&str> {
        let span = match self.spans.get(slot) {
            Some(span) => *span,
            None => *self.more.get(slot - INLINE)?,
        };
        if span.start == u32::MAX {
            return None;
        }
        self.buf.get(span.start as usize..span.end as usize)
    }

    /// Slot `slot`'s text is what `write` appends to the buffer (a slot written again points
    /// at its new text).
    fn write(&mut self, slot: usize, write: impl FnOnce(&mut String)) {
        let start = self.buf.len();
        write(&mut self.buf);
        // Texts are request heads' and names' parts: far below 4 GiB.
        let (Ok(start), Ok(end)) = (u32::try_from(start), u32::try_from(self.buf.len())) else {
            return;
        };
        let span = Span { start, end };
        match self.spans.get_mut(slot) {
            Some(s) => *s = span,
            None => {
                let at = slot - INLINE;
                if self.more.len() <= at {
                    self.more.resize(at + 1, ABSENT);
                }
                if let Some(s) = self.more.get_mut(at) {
                    *s = span;
                }
            }
        }
    }
}

/// What the log line of one request is made of, copied on the worker (the rendering happens
/// on the writer thread).
#[derive(Debug)]
pub struct Record {
    pub start: Option<SystemTime>,
    pub duration: Duration,
    pub scheme: &'static str,
    pub protocol: &'static str,
    pub status: u16,
    pub flags: ResponseFlags,
    /// The RBAC policy or rate limit rule that decided (`FILTER_STATE(warden.rule)`).
    pub policy: Option<Arc<str>>,
    pub shadow_policy: Option<Arc<str>>,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    /// The upstream connection's own address.
    pub upstream_local: Option<SocketAddr>,
    /// The TCP peer.
    pub peer: Option<SocketAddr>,
    /// The trusted client address (XFF rules).
    pub client_ip: Option<IpAddr>,
    pub local: Option<SocketAddr>,
    pub dynamic_metadata: Option<DynamicMetadata>,
    pub texts: Texts,
}

impl Default for Record {
    fn default() -> Self {
        Record::with_capacity(0)
    }
}

impl Record {
    fn with_capacity(capacity: usize) -> Self {
        Record {
            start: None,
            duration: Duration::ZERO,
            scheme: "",
            protocol: "",
            status: 0,
            flags: ResponseFlags::default(),
            policy: None,
            shadow_policy: None,
            bytes_received: 0,
            bytes_sent: 0,
            upstream_local: None,
            peer: None,
            client_ip: None,
            local: None,
            dynamic_metadata: None,
            texts: Texts::with_capacity(capacity),
        }
    }

    /// A field's text; `None` when it was never set.
    pub fn text(&self, field: Field) -> Option<&str> {
        self.texts.get(field as usize)
    }

    pub fn set_text(&mut self, field: Field, text: &str) {
        self.texts.write(field as usize, |buf| buf.push_str(text));
    }

    /// A field's text is what `write` appends.
    pub fn write_text(&mut self, field: Field, write: impl FnOnce(&mut String)) {
        self.texts.write(field as usize, write);
    }

    /// The `i`-th request header the format names; `None` when the request had none.
    pub fn request_header(&self, i: usize) -> Option<&str> {
        if i >= self.texts.request_headers {
            return None;
        }
        self.texts.get(FIELDS + i)
    }

    /// The `i`-th response header the format names.
    pub fn response_header(&self, i: usize) -> Option<&str> {
        self.texts.get(FIELDS + self.texts.request_headers + i)
    }

    /// The format's request headers, `names`, from `value` (`None`: not there).
    pub fn set_request_headers<'n, 'v>(
        &mut self,
        names: &'n [HeaderName],
        mut value: impl FnMut(&'n HeaderName) -> Option<&'v [u8]>,
    ) {
        self.texts.request_headers = names.len();
        for (i, name) in names.iter().enumerate() {
            if let Some(v) = value(name) {
                self.texts.write(FIELDS + i, |buf| push_lossy(buf, v));
            }
        }
    }

    /// The format's response headers, `names`, from `value`.
    pub fn take_response_headers<'n, 'v>(
        &mut self,
        names: &'n [HeaderName],
        mut value: impl FnMut(&'n HeaderName) -> Option<&'v [u8]>,
    ) {
        let base = FIELDS + self.texts.request_headers;
        for (i, name) in names.iter().enumerate() {
            if let Some(v) = value(name) {
                self.texts.write(base + i, |buf| push_lossy(buf, v));
            }
        }
    }
}

/// What the worker reads of a request for its record.
pub struct Request<'a> {
    pub method: &'a str,
    /// The target as it came (with its query).
    pub path_and_query: &'a str,
    pub authority: &'a str,
    /// The request's header map, and its lines as read when the map does not hold them (the
    /// fast path's: the map is empty then).
    pub headers: &'a HeaderMap,
    pub lines: Option<&'a RequestLines>,
    pub scheme: &'static str,
    pub protocol: &'static str,
    pub sni: Option<&'a str>,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub client_ip: IpAddr,
    /// `peer` as text, rendered once per connection.
    pub peer_text: Option<&'a str>,
    /// The peer as `x-forwarded-for` names it, appended to the request's for
    /// `REQ(X-FORWARDED-FOR)` on the sides that send it so (a gateway, a sidecar's inbound).
    pub xff_peer: Option<&'a HeaderValue>,
}

impl<'a> Request<'a> {
    /// The first value of `name` (lowercase).
    fn get(&self, name: &HeaderName) -> Option<&'a [u8]> {
        match self.lines {
            Some(lines) => lines.get(name.as_str().as_bytes()),
            None => self.headers.get(name).map(HeaderValue::as_bytes),
        }
    }

    /// Every value of `name`, in order.
    fn get_all(&self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (lines, map) = match self.lines {
            Some(lines) => (Some(lines.get_all(name.as_str().as_bytes())), None),
            None => (None, Some(self.headers.get_all(name).iter())),
        };
        lines
            .into_iter()
            .flatten()
            .chain(map.into_iter().flatten().map(HeaderValue::as_bytes))
    }
}

/// Room for what a record's texts usually hold beyond the path and authority: the method,
/// the id, a user agent, the details and the upstream's names.
const TEXT_ROOM: usize = 320;

/// Records a worker keeps for reuse (their boxes and text buffers), at most this many: a
/// record is rendered on the worker that made it, so it comes back to the same thread.
const POOLED: usize = 64;

thread_local! {
    // Boxes, not records: a record travels as a `Box<Record>` (a body holds it till its end),
    // and the box is what is reused.
    #[allow(clippy::vec_box)]
    static POOL: RefCell<Vec<Box<Record>>> = const { RefCell::new(Vec::new()) };
}

/// A record with nothing set and room for `capacity` bytes of text, from this thread's pool.
fn take(capacity: usize) -> Box<Record> {
    let pooled = POOL
        .try_with(|pool| pool.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten();
    match pooled {
        Some(mut r) => {
            r.texts.buf.reserve(capacity);
            r
        }
        None => Box::new(Record::with_capacity(capacity)),
    }
}

/// A record whose texts grew past this (a very long path) is freed, not kept.
const POOLED_TEXT: usize = 16 * 1024;

/// `record`'s memory kept for this thread's next one.
pub fn recycle(mut record: Box<Record>) {
    if record.texts.buf.capacity() > POOLED_TEXT {
        return;
    }
    let mut texts = std::mem::take(&mut record.texts);
    texts.buf.clear();
    texts.spans = [ABSENT; INLINE];
    texts.more.clear();
    texts.request_headers = 0;
    *record = Record {
        texts,
        ..Record::default()
    };
    // A thread that is ending frees it instead.
    let _ = POOL.try_with(|pool| {
        if let Ok(mut pool) = pool.try_borrow_mut() {
            if pool.len() < POOLED {
                pool.push(record);
            }
        }
    });
}

/// The format's first [`SCANNED`] request headers are found in the one pass over a request's
/// lines that finds the record's own; more are looked up one by one.
const SCANNED: usize = 8;

/// What one pass over a request's lines finds for its record.
#[derive(Default)]
struct Scanned<'a> {
    content_length: Option<&'a [u8]>,
    request_id: Option<&'a [u8]>,
    named: [Option<&'a [u8]>; SCANNED],
    /// How many `x-forwarded-for` lines there are.
    xff_lines: usize,
}

fn scan<'a>(lines: &'a RequestLines, names: &[HeaderName]) -> Scanned<'a> {
    let mut wanted: [&[u8]; SCANNED] = [b""; SCANNED];
    for (w, name) in wanted.iter_mut().zip(names) {
        *w = name.as_str().as_bytes();
    }
    let wanted = wanted.get(..names.len().min(SCANNED)).unwrap_or_default();
    let mut found = Scanned::default();
    for (name, value) in lines.iter() {
        match name {
            b"content-length" => {
                found.content_length.get_or_insert(value);
            }
            b"x-request-id" => {
                found.request_id.get_or_insert(value);
            }
            b"x-forwarded-for" => found.xff_lines += 1,
            _ => {}
        }
        for (slot, want) in found.named.iter_mut().zip(wanted) {
            if slot.is_none() && name == *want {
                *slot = Some(value);
            }
        }
    }
    found
}

/// The record of `req`, with the request id made for it when it came without one (the
/// upstream gets that one too).
pub fn capture(
    req: &Request<'_>,
    request_headers: &[HeaderName],
) -> (Box<Record>, Option<[u8; 16]>) {
    let mut r = take(req.path_and_query.len() + req.authority.len() + TEXT_ROOM);
    r.start = Some(SystemTime::now());
    r.scheme = req.scheme;
    r.protocol = req.protocol;
    r.peer = Some(req.peer);
    r.client_ip = Some(req.client_ip);
    r.local = Some(req.local);
    // The lines as read are walked once for every header the record copies; a map is asked
    // per header.
    let scanned = req.lines.map(|lines| scan(lines, request_headers));
    let (content_length, request_id) = match &scanned {
        Some(s) => (s.content_length, s.request_id),
        None => (req.get(&header::CONTENT_LENGTH), req.get(&X_REQUEST_ID)),
    };
    r.bytes_received = content_length
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0);
    r.set_text(Field::Method, req.method);
    r.set_text(Field::Path, req.path_and_query);
    r.set_text(Field::Authority, req.authority);
    let made_id = match request_id {
        Some(id) => {
            r.write_text(Field::RequestId, |buf| push_lossy(buf, id));
            None
        }
        None => {
            let random = fastrand::u128(..).to_le_bytes();
            r.write_text(Field::RequestId, |buf| push_request_id(random, buf));
            Some(random)
        }
    };
    if let Some(sni) = req.sni {
        r.set_text(Field::Sni, sni);
    }
    if let Some(peer) = req.peer_text {
        r.set_text(Field::Peer, peer);
    }
    match &scanned {
        Some(s) => {
            let mut i = 0;
            r.set_request_headers(request_headers, |name| {
                let found = match s.named.get(i) {
                    Some(found) => *found,
                    None => req.get(name),
                };
                i += 1;
                found
            })
        }
        None => r.set_request_headers(request_headers, |name| req.get(name)),
    }
    // `REQ(X-FORWARDED-FOR)` is what the upstream gets, as in Envoy's log: with the peer
    // appended by a gateway and a sidecar's inbound side.
    if let Some(peer) = req.xff_peer {
        if let Some(i) = request_headers.iter().position(|n| *n == X_FORWARDED_FOR) {
            match &scanned {
                // No `x-forwarded-for` line: the peer alone.
                Some(s) if s.xff_lines == 0 => r
                    .texts
                    .write(FIELDS + i, |buf| push_lossy(buf, peer.as_bytes())),
                _ => r
                    .texts
                    .write(FIELDS + i, |buf| xff_with_peer(buf, req, peer.as_bytes())),
            }
        }
    }
    (r, made_id)
}

/// The request's `x-forwarded-for` values (several form one list) with `peer` appended, as
/// `forwarding_headers::xff_with_peer` makes them.
fn xff_with_peer(buf: &mut String, req: &Request<'_>, peer: &[u8]) {
    for value in req.get_all(&X_FORWARDED_FOR).filter(|v| !v.is_empty()) {
        // Invalid UTF-8 replaced value by value is what the whole would get: the separator is
        // ASCII, so no sequence spans two values.
        push_lossy(buf, value);
        buf.push_str(", ");
    }
    push_lossy(buf, peer);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::forwarding_headers::xff_with_peer as map_xff_with_peer;

    fn names(list: &[&str]) -> Vec<HeaderName> {
        list.iter()
            .map(|n| HeaderName::from_bytes(n.as_bytes()).expect("name"))
            .collect()
    }

    /// The request `head`'s header lines, as the fast path keeps them and as a map.
    fn both(head: &[(&str, &[u8])]) -> (RequestLines, HeaderMap) {
        let parsed: Vec<httparse::Header<'_>> = head
            .iter()
            .map(|(name, value)| httparse::Header { name, value })
            .collect();
        let lines = RequestLines::new(&parsed).expect("lines");
        let mut map = HeaderMap::new();
        lines.read_into(&mut map, 0);
        (lines, map)
    }

    fn request<'a>(
        map: &'a HeaderMap,
        lines: Option<&'a RequestLines>,
        peer: &'a HeaderValue,
    ) -> Request<'a> {
        Request {
            method: "GET",
            path_and_query: "/p?q=1",
            authority: "example.com",
            headers: map,
            lines,
            scheme: "http",
            protocol: "HTTP/1.1",
            sni: None,
            peer: "10.0.0.9:5000".parse().expect("addr"),
            local: "10.0.0.1:80".parse().expect("addr"),
            client_ip: "10.0.0.9".parse().expect("ip"),
            peer_text: Some("10.0.0.9:5000"),
            xff_peer: Some(peer),
        }
    }

    /// A record's texts are the same from the lines as read and from the map built of them,
    /// and the same as what the map's own functions make (`xff_with_peer`).
    #[test]
    fn lines_and_map_give_the_same_record() {
        let heads: [&[(&str, &[u8])]; 5] = [
            &[
                ("Host", b"a"),
                ("User-Agent", b"curl/8"),
                ("X-Request-ID", b"id-1"),
            ],
            &[
                ("x-forwarded-for", b"1.1.1.1"),
                ("X-Forwarded-For", b""),
                ("x-forwarded-for", b"2.2.2.2, 3.3.3.3"),
                ("content-length", b"12"),
                ("x-request-id", b""),
            ],
            &[
                ("user-agent", b"caf\xc3\xa9 \xff"),
                ("x-forwarded-for", b""),
            ],
            &[("content-length", b"+7"), ("user-agent", b"")],
            &[
                ("content-length", b"x"),
                ("x-envoy-original-path", b"/orig"),
            ],
        ];
        let format = names(&["x-envoy-original-path", "x-forwarded-for", "user-agent"]);
        let peer = HeaderValue::from_static("10.0.0.9");
        for head in heads {
            let (lines, map) = both(head);
            let (from_lines, lines_id) = capture(&request(&map, Some(&lines), &peer), &format);
            let (from_map, map_id) = capture(&request(&map, None, &peer), &format);
            assert_eq!(lines_id.is_some(), map_id.is_some(), "{head:?}");
            assert_eq!(from_lines.bytes_received, from_map.bytes_received);
            let want_len = map
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .unwrap_or(0);
            assert_eq!(from_map.bytes_received, want_len, "{head:?}");
            for i in 0..format.len() {
                assert_eq!(from_lines.request_header(i), from_map.request_header(i));
            }
            let xff = map_xff_with_peer(&map, &peer)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            assert_eq!(
                from_map.request_header(1).map(str::to_string),
                xff,
                "{head:?}"
            );
            let ua = map
                .get(header::USER_AGENT)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            assert_eq!(from_map.request_header(2).map(str::to_string), ua);
            if lines_id.is_none() {
                assert_eq!(
                    from_lines.text(Field::RequestId),
                    map.get(&X_REQUEST_ID)
                        .map(|v| String::from_utf8_lossy(v.as_bytes()))
                        .as_deref()
                );
            }
            assert_eq!(from_lines.text(Field::Path), Some("/p?q=1"));
            assert_eq!(from_lines.text(Field::Method), Some("GET"));
        }
    }

    #[test]
    fn a_made_request_id_is_the_one_the_upstream_gets() {
        let map = HeaderMap::new();
        let peer = HeaderValue::from_static("10.0.0.9");
        let (r, made) = capture(&request(&map, None, &peer), &[]);
        let made = made.expect("made");
        assert_eq!(
            r.text(Field::RequestId),
            Some(crate::core::forwarding_headers::request_id_string(made).as_str())
        );
    }

    #[test]
    fn texts_past_the_inline_spans_and_rewritten_ones() {
        let many: Vec<String> = (0..12).map(|i| format!("h{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let request = names(&many);
        let response = names(&["server", "x-two"]);
        let mut r = Record::default();
        r.set_request_headers(&request, |n| {
            (n.as_str() != "h3").then_some(n.as_str().as_bytes())
        });
        r.take_response_headers(&response, |n| (n == "x-two").then_some(&b"2"[..]));
        for (i, name) in many.iter().enumerate() {
            let want = (*name != "h3").then_some(*name);
            assert_eq!(r.request_header(i), want);
        }
        assert_eq!(r.request_header(12), None);
        assert_eq!(
            (r.response_header(0), r.response_header(1)),
            (None, Some("2"))
        );
        assert_eq!(r.text(Field::Details), None);
        r.set_text(Field::Details, "via_upstream");
        r.set_text(Field::Details, "downstream_remote_disconnect");
        assert_eq!(r.text(Field::Details), Some("downstream_remote_disconnect"));
        r.set_text(Field::Sni, "");
        assert_eq!(r.text(Field::Sni), Some(""));
    }
}
