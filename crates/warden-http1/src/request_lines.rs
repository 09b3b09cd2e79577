//! A fast-path request's header lines kept as read, without a header map.
//!
//! Building an `http::HeaderMap` (a name parsed and hashed, a value copied, per line, and the
//! map's two tables allocated and freed) cost a body-less request about as much as parsing it.
//! Most requests through a gateway need only their `Host` and, when proxied, their lines
//! copied into the upstream request; the proxy reads the few lines it needs from here and
//! builds the map only when a configured stage reads arbitrary headers ([`RequestLines::read_into`]).
//!
//! The lines are stored in one buffer, each as its name's and its value's lengths followed by
//! the name (lowercased, as a map holds it and as it is written upstream) and the value: one
//! allocation, and walking the lines skips from one to the next without scanning bytes.

use http::{HeaderMap, HeaderName, HeaderValue};
use std::sync::atomic::{AtomicU64, Ordering};

/// A request's end-to-end header lines, as httparse validated them (which is what `http`
/// accepts, see the tests).
#[derive(Debug)]
pub struct RequestLines {
    /// Exactly as long as the lines: a box, two words in the futures that carry it.
    text: Box<[u8]>,
    /// Lines a filter removed through a shared reference ([`RequestLines::remove_shared`]):
    /// bit `i` is the `i`-th line of `text`. A filter sees the request by reference, so a
    /// removal made this way needs no edit pass (an atomic only to stay `Sync`: one thread
    /// owns a request).
    removed: AtomicU64,
}

impl Clone for RequestLines {
    fn clone(&self) -> Self {
        RequestLines {
            text: self.text.clone(),
            removed: AtomicU64::new(self.removed.load(Ordering::Relaxed)),
        }
    }
}

/// The same lines, whatever their layout.
impl PartialEq for RequestLines {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for RequestLines {}

/// Bytes before each line's name: the name's and the value's lengths.
const LENGTHS: usize = 8;

impl RequestLines {
    /// The lines of a parsed head; `None` when a line is too long to describe. (A head whose
    /// `Connection` names headers to drop goes through a map: `FastRequest::connection_names`.)
    pub fn new(headers: &[httparse::Header<'_>]) -> Option<RequestLines> {
        let len = headers
            .iter()
            .map(|h| LENGTHS + h.name.len() + h.value.len())
            .sum();
        let mut text = Vec::with_capacity(len);
        for header in headers {
            let name = header.name.as_bytes();
            let mut lengths = [0u8; LENGTHS];
            let (name_len, value_len) = lengths.split_at_mut(4);
            name_len.copy_from_slice(&u32::try_from(name.len()).ok()?.to_le_bytes());
            value_len.copy_from_slice(&u32::try_from(header.value.len()).ok()?.to_le_bytes());
            text.extend_from_slice(&lengths);
            // A byte loop: names are short, and a library copy per name costs more.
            text.extend(name.iter().map(u8::to_ascii_lowercase));
            text.extend_from_slice(header.value);
        }
        Some(RequestLines {
            text: text.into_boxed_slice(),
            removed: AtomicU64::new(0),
        })
    }

    /// `(lowercase name, value)` of every line, in order.
    pub fn iter(&self) -> Lines<'_> {
        Lines {
            rest: &self.text,
            index: 0,
            removed: self.removed.load(Ordering::Relaxed),
        }
    }

    /// Remove every line named `name` (lowercase) through a shared reference; `false`, and
    /// nothing removed, when one of them is past the 64th line (then [`RequestLines::edit`]).
    pub fn remove_shared(&self, name: &[u8]) -> bool {
        let mut marks = 0u64;
        let mut rest = &self.text[..];
        let mut index = 0u32;
        while let Some((name_len, value_len)) = lengths_at(rest, 0) {
            let line_name = rest.get(LENGTHS..LENGTHS + name_len);
            if line_name == Some(name) {
                let Some(bit) = 1u64.checked_shl(index) else {
                    return false;
                };
                marks |= bit;
            }
            rest = rest
                .get(LENGTHS + name_len + value_len..)
                .unwrap_or_default();
            index += 1;
        }
        let removed = self.removed.load(Ordering::Relaxed);
        self.removed.store(removed | marks, Ordering::Relaxed);
        true
    }

    /// The values of the lines named `name` (lowercase).
    pub fn get_all<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, value)| value)
    }

    /// The first value named `name` (lowercase).
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| value)
    }

    /// The lines without those named in `remove`, then `append`'s: what a filter that only
    /// drops and adds headers (jwt_authn's token) leaves, without building a map. A removal
    /// alone is made in place: the line's name length becomes 0 (no header has an empty name)
    /// and its bytes count as its value, and iteration skips it — no copy of the other lines, no allocation.
    pub fn edit(&mut self, remove: &[HeaderName], append: &[(HeaderName, HeaderValue)]) {
        if append.is_empty() {
            self.drop_lines(remove);
            return;
        }
        let added = append
            .iter()
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
        let kept = || {
            self.iter()
                .filter(|(n, _)| !remove.iter().any(|r| r.as_str().as_bytes() == *n))
        };
        // Exactly the new length: a box made from a longer buffer would be reallocated.
        let len = kept()
            .chain(added.clone())
            .map(|(n, v)| LENGTHS + n.len() + v.len())
            .sum();
        let mut text = Vec::with_capacity(len);
        for (name, value) in kept().chain(added) {
            // Kept lines' lengths fit (they did when read); names and values to add are far
            // below 4 GiB.
            let (Ok(name_len), Ok(value_len)) =
                (u32::try_from(name.len()), u32::try_from(value.len()))
            else {
                continue;
            };
            text.extend_from_slice(&name_len.to_le_bytes());
            text.extend_from_slice(&value_len.to_le_bytes());
            // `HeaderName`s are lowercase already, as kept lines are.
            text.extend_from_slice(name);
            text.extend_from_slice(value);
        }
        self.text = text.into_boxed_slice();
        // The kept lines are renumbered: none of them is removed.
        self.removed = AtomicU64::new(0);
    }

    /// Every line named in `remove` marked removed, in place.
    fn drop_lines(&mut self, remove: &[HeaderName]) {
        let mut at = 0;
        while let Some((name_len, value_len)) = lengths_at(&self.text, at) {
            let name_at = at + LENGTHS;
            let gone = self
                .text
                .get(name_at..name_at + name_len)
                .is_some_and(|n| remove.iter().any(|r| r.as_str().as_bytes() == n));
            // The name's bytes join the value's, so the line keeps its length to skip.
            if let (true, Ok(skip)) = (gone, u32::try_from(name_len + value_len)) {
                if let Some(lengths) = self.text.get_mut(at..at + LENGTHS) {
                    lengths[..4].copy_from_slice(&0u32.to_le_bytes());
                    lengths[4..].copy_from_slice(&skip.to_le_bytes());
                }
            }
            at = name_at + name_len + value_len;
        }
    }

    /// Append every line to `headers` (which gets room for `extra` more).
    pub fn read_into(&self, headers: &mut HeaderMap, extra: usize) {
        headers.reserve(self.iter().count() + extra);
        for (name, value) in self.iter() {
            // httparse admits exactly what `http` does, so nothing is skipped.
            if let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
            {
                headers.append(name, value);
            }
        }
    }
}

/// The lines of a [`RequestLines`].
pub struct Lines<'a> {
    rest: &'a [u8],
    /// The next line's number, for `removed`.
    index: u32,
    removed: u64,
}

impl<'a> Iterator for Lines<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (lengths, rest) = self.rest.split_first_chunk::<LENGTHS>()?;
            let (name_len, value_len) = lengths.split_at(4);
            let name_len = u32::from_le_bytes(name_len.try_into().ok()?) as usize;
            let value_len = u32::from_le_bytes(value_len.try_into().ok()?) as usize;
            let (name, rest) = rest.split_at_checked(name_len)?;
            let (value, rest) = rest.split_at_checked(value_len)?;
            self.rest = rest;
            // Lines are numbered only when some are marked removed (most requests: none).
            if self.removed != 0 {
                let marked = self.removed.checked_shr(self.index).unwrap_or(0) & 1 == 1;
                self.index += 1;
                if marked {
                    continue;
                }
            }
            // An empty name is a line an edit removed.
            if !name.is_empty() {
                return Some((name, value));
            }
        }
    }
}

/// The name's and the value's lengths of the line that starts at `at`.
fn lengths_at(text: &[u8], at: usize) -> Option<(usize, usize)> {
    let lengths = text.get(at..)?.first_chunk::<LENGTHS>()?;
    let (name_len, value_len) = lengths.split_at(4);
    Some((
        u32::from_le_bytes(name_len.try_into().ok()?) as usize,
        u32::from_le_bytes(value_len.try_into().ok()?) as usize,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_head::{header_slots, parse, Parsed};

    fn lines(head: &str) -> Option<RequestLines> {
        let mut slots = header_slots();
        match parse(head.as_bytes(), &mut slots) {
            Parsed::Fast(request) => RequestLines::new(request.headers),
            _ => panic!("not a fast request: {head:?}"),
        }
    }

    #[test]
    fn an_edit_drops_named_lines_and_appends_new_ones_in_order() {
        let head = "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer t\r\nX-A: 1\r\nauthorization: again\r\n\r\n";
        let name = |n: &str| HeaderName::from_bytes(n.as_bytes()).unwrap();
        let line = |n: &str, v: &'static str| (name(n), HeaderValue::from_static(v));
        type Want = &'static [(&'static [u8], &'static [u8])];
        type Added = Vec<(HeaderName, HeaderValue)>;
        let cases: [(Vec<HeaderName>, Added, Want); 3] = [
            (
                vec![name("authorization")],
                vec![],
                &[(b"host", b"a"), (b"x-a", b"1")],
            ),
            (
                vec![name("authorization"), name("x-a")],
                vec![line("x-sub", "alice"), line("x-a", "2")],
                &[(b"host", b"a"), (b"x-sub", b"alice"), (b"x-a", b"2")],
            ),
            (
                vec![],
                vec![],
                &[
                    (b"host", b"a"),
                    (b"authorization", b"Bearer t"),
                    (b"x-a", b"1"),
                    (b"authorization", b"again"),
                ],
            ),
        ];
        for (remove, append, want) in cases {
            let mut l = lines(head).unwrap();
            l.edit(&remove, &append);
            let got: Vec<(&[u8], &[u8])> = l.iter().collect();
            assert_eq!(got, want, "{remove:?} {append:?}");
            // A later edit of edited lines (removed in place, then rebuilt) sees the same.
            l.edit(&[name("x-none")], &[line("x-late", "1")]);
            let got: Vec<(&[u8], &[u8])> = l.iter().collect();
            let mut want = want.to_vec();
            want.push((b"x-late", b"1"));
            assert_eq!(got, want, "then appended to");
        }
    }

    #[test]
    fn a_shared_removal_hides_lines_until_an_edit_rebuilds_them() {
        let head = "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer t\r\nX-A: 1\r\nauthorization: again\r\n\r\n";
        let l = lines(head).unwrap();
        assert!(l.remove_shared(b"authorization"));
        let got: Vec<(&[u8], &[u8])> = l.iter().collect();
        assert_eq!(got, [(&b"host"[..], &b"a"[..]), (b"x-a", b"1")]);
        assert_eq!(l.get(b"authorization"), None);
        assert!(l.remove_shared(b"x-none"), "nothing to remove is fine");
        // An edit keeps what the removal left, then appends.
        let mut l = l.clone();
        let add = [(
            HeaderName::from_static("x-b"),
            HeaderValue::from_static("2"),
        )];
        l.edit(&[HeaderName::from_static("host")], &add);
        let got: Vec<(&[u8], &[u8])> = l.iter().collect();
        assert_eq!(got, [(&b"x-a"[..], &b"1"[..]), (b"x-b", b"2")]);
        assert!(l.remove_shared(b"x-b"));
        assert_eq!(l.iter().count(), 1);

        // Past the 64th line a shared removal refuses, removing nothing.
        let mut many = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
        for i in 0..70 {
            many.push_str(&format!("X-{i}: v\r\n"));
        }
        many.push_str("X-0: again\r\n\r\n");
        let mut slots = [httparse::EMPTY_HEADER; 100];
        let mut req = httparse::Request::new(&mut slots);
        assert!(req.parse(many.as_bytes()).unwrap().is_complete());
        let l = RequestLines::new(req.headers).unwrap();
        assert!(l.remove_shared(b"x-3"), "line 4 of 72");
        assert!(!l.remove_shared(b"x-0"), "one of them is line 72");
        assert_eq!(l.get_all(b"x-0").count(), 2);
        assert_eq!(l.iter().count(), 71);
    }

    #[test]
    fn keeps_the_lines_in_order_with_lowercase_names() {
        let l = lines("GET / HTTP/1.1\r\nHost: a:80\r\nX-Forwarded-For: 1.2.3.4\r\nx-forwarded-for: 5.6.7.8, 9.9.9.9\r\nEmpty:\r\nX-Colon: a:b\r\n\r\n").unwrap();
        let all: Vec<(&[u8], &[u8])> = l.iter().collect();
        assert_eq!(
            all,
            [
                (&b"host"[..], &b"a:80"[..]),
                (b"x-forwarded-for", b"1.2.3.4"),
                (b"x-forwarded-for", b"5.6.7.8, 9.9.9.9"),
                (b"empty", b""),
                (b"x-colon", b"a:b"),
            ]
        );
        assert_eq!(l.get(b"host"), Some(&b"a:80"[..]));
        assert_eq!(l.get(b"missing"), None);
        assert_eq!(l.get_all(b"x-forwarded-for").count(), 2);
    }

    #[test]
    fn reads_into_the_same_map_as_appending_each_line() {
        let head = "GET / HTTP/1.1\r\nHost: h\r\nAccept: */*\r\naccept: text/plain\r\nX-Bin: caf\u{e9}\r\n\r\n";
        let mut map = HeaderMap::new();
        lines(head).unwrap().read_into(&mut map, 0);
        let mut slots = header_slots();
        let Parsed::Fast(request) = parse(head.as_bytes(), &mut slots) else {
            panic!()
        };
        let mut expected = HeaderMap::new();
        for h in request.headers {
            expected.append(
                HeaderName::from_bytes(h.name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(h.value).unwrap(),
            );
        }
        assert_eq!(map, expected);
    }

    #[test]
    fn httparse_admits_exactly_the_lines_http_accepts() {
        // `new` relies on it: a line httparse parsed makes a `HeaderName` and a `HeaderValue`.
        for b in 0u8..=255 {
            if b == b'\r' || b == b'\n' {
                continue;
            }
            let value = [b'a', b, b'b'];
            let mut head = b"GET / HTTP/1.1\r\nx: ".to_vec();
            head.extend_from_slice(&value);
            head.extend_from_slice(b"\r\n\r\n");
            let mut slots = header_slots();
            assert_eq!(
                matches!(parse(&head, &mut slots), Parsed::Fast(_)),
                HeaderValue::from_bytes(&value).is_ok(),
                "value byte {b}"
            );
            let name = [b'a', b];
            let mut head = b"GET / HTTP/1.1\r\n".to_vec();
            head.extend_from_slice(&name);
            head.extend_from_slice(b": v\r\n\r\n");
            let mut slots = header_slots();
            let parsed = matches!(parse(&head, &mut slots), Parsed::Fast(_));
            // httparse ends a name at `:` and, for requests, refuses space before it.
            if b != b':' {
                assert_eq!(
                    parsed,
                    HeaderName::from_bytes(&name).is_ok(),
                    "name byte {b}"
                );
            }
        }
    }
}
