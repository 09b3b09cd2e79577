//! Reading an upstream's HTTP/1.x response: its head (`httparse`, as hyper's client parses it)
//! and how its body is delimited (RFC 9112 §6.3), then the body itself ([`BodyReader`]):
//! counted, chunked (decoded, trailers dropped) or up to the end of the connection.

use crate::chunked_lines::{self, Line};
use crate::connection_tokens::names_a_header;
use bytes::{Buf, Bytes, BytesMut};
use std::mem::MaybeUninit;
use std::ops::Range;

/// More header lines than this and the response is refused (hyper's client allows 100).
pub const MAX_HEADERS: usize = 100;
/// A head longer than this is refused (hyper's default read buffer limit is about 400 KiB; an
/// upstream sending this much head is broken).
pub const MAX_HEAD: usize = 64 * 1024;
/// Trailer sections longer than this (CRLFs included) are refused.
const MAX_TRAILERS: usize = 16 * 1024;
/// A chunk-size line (with extensions) longer than this before its line feed is refused.
const MAX_CHUNK_SIZE_LINE: usize = 1024;

/// How the body after a head is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body: a HEAD request, 1xx, 204, 304, or `content-length: 0`.
    Empty,
    Length(u64),
    Chunked,
    /// Up to the end of the connection (no length given).
    UntilClose,
}

/// A parsed response head; names and values are ranges into the head's bytes, so the caller
/// can share them (`Bytes::slice`) instead of copying.
#[derive(Debug, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub reason: Range<usize>,
    pub http10: bool,
    pub headers: Vec<(Range<usize>, Range<usize>)>,
    pub framing: BodyFraming,
    /// The connection may carry another request once this body has been read.
    pub reusable: bool,
    /// `Connection` names a header (a token other than `close` and `keep-alive`), which a
    /// proxy must drop along with the hop-by-hop ones.
    pub connection_names: bool,
    /// Length of the head, the empty line included.
    pub len: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ParsedResponse {
    Partial,
    /// An interim (1xx other than 101) head of this length: skip it, the real one follows.
    Interim(usize),
    Head(ResponseHead),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResponseError {
    #[error("invalid response head: {0}")]
    Head(httparse::Error),
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("invalid content-length")]
    ContentLength,
    #[error("101 Switching Protocols without an upgrade request")]
    UnexpectedSwitch,
    #[error("invalid chunked body")]
    Chunked,
    #[error("connection closed before the response completed")]
    Incomplete,
}

/// Parse the head at the start of `buf`, for a request that was `HEAD` if `head_request`.
pub fn parse_head(buf: &[u8], head_request: bool) -> Result<ParsedResponse, ResponseError> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut res, buf, &mut slots)
    {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(ResponseError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(ParsedResponse::Partial),
        Err(e) => return Err(ResponseError::Head(e)),
    };
    let status = res.code.unwrap_or(0);
    let http10 = res.version == Some(0);
    if status == 101 {
        return Err(ResponseError::UnexpectedSwitch);
    }
    if (100..200).contains(&status) {
        return Ok(ParsedResponse::Interim(len));
    }
    let offset = |s: &[u8]| s.as_ptr() as usize - buf.as_ptr() as usize;
    // Names and values are slices of `buf`.
    let range = |s: &[u8]| offset(s)..offset(s) + s.len();
    let mut headers = Vec::with_capacity(res.headers.len());
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut close = http10;
    let mut connection_names = false;
    for h in res.headers.iter() {
        headers.push((range(h.name.as_bytes()), range(h.value)));
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = parse_length(h.value).ok_or(ResponseError::ContentLength)?;
            // Repeated values must agree (RFC 9110 §8.6).
            if length.is_some_and(|l| l != n) {
                return Err(ResponseError::ContentLength);
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
            // Only the last coding says whether the body is chunked.
            chunked = last_token(h.value).eq_ignore_ascii_case(b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    if http10 {
                        close = false;
                    }
                } else if names_a_header(token) {
                    connection_names = true;
                }
            }
        }
    }
    let framing = if head_request || status == 204 || status == 304 {
        BodyFraming::Empty
    } else if transfer_encoding {
        // Transfer-Encoding overrides Content-Length; a body not chunked last runs to the end.
        if chunked {
            BodyFraming::Chunked
        } else {
            BodyFraming::UntilClose
        }
    } else {
        match length {
            Some(0) => BodyFraming::Empty,
            Some(n) => BodyFraming::Length(n),
            None => BodyFraming::UntilClose,
        }
    };
    // A head with both is suspect (request smuggling): do not reuse the connection after it.
    let reusable =
        !close && framing != BodyFraming::UntilClose && !(transfer_encoding && length.is_some());
    Ok(ParsedResponse::Head(ResponseHead {
        status,
        reason: reason_range(buf, res.reason),
        http10,
        headers,
        framing,
        reusable,
        connection_names,
        len,
    }))
}

/// Where the reason phrase lies in `buf`. httparse hands back a `""` of its own (not a slice
/// of `buf`) for a phrase that is not UTF-8, so that one is found in the status line instead:
/// everything after `HTTP/1.x NNN ` up to the line's end.
fn reason_range(buf: &[u8], reason: Option<&str>) -> Range<usize> {
    let start = buf.as_ptr() as usize;
    if let Some(r) = reason.filter(|r| !r.is_empty()) {
        let at = r.as_ptr() as usize;
        if at >= start && at + r.len() <= start + buf.len() {
            return at - start..at - start + r.len();
        }
    }
    let line_end = buf
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(buf.len());
    // "HTTP/1.1 200 " is 13 bytes; a status line may also end right after the code.
    let from = 13.min(line_end);
    from..line_end
}

/// Below this, body data is copied out of the read buffer instead of split off.
const COPY_BELOW: usize = 4096;

/// The first `n` bytes of `buf`. Small pieces are copied: a split-off piece shares the buffer,
/// so the connection's next read would have to allocate a new one; large ones are split off
/// without a copy.
fn take_bytes(buf: &mut BytesMut, n: usize) -> Bytes {
    if n < COPY_BELOW {
        let bytes = Bytes::copy_from_slice(&buf[..n]);
        buf.advance(n);
        bytes
    } else {
        buf.split_to(n).freeze()
    }
}

/// Up to `n` counted body bytes from a non-empty `buf`, and how many are still due after them.
fn take_counted(buf: &mut BytesMut, n: u64) -> (Bytes, u64) {
    let take = n.min(buf.len() as u64);
    (take_bytes(buf, take as usize), n - take)
}

fn parse_length(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn last_token(v: &[u8]) -> &[u8] {
    v.rsplit(|&b| b == b',').next().unwrap_or(v).trim_ascii()
}

/// What [`BodyReader::next`] found in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyStep {
    Data(Bytes),
    /// Read more bytes into the buffer, then call again.
    NeedMore,
    /// The body is complete; what is left in the buffer is not part of it.
    Done,
}

/// Takes a body out of a read buffer as it fills.
#[derive(Debug)]
pub struct BodyReader {
    state: State,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    /// In the trailer section, this many bytes of it read.
    Trailers(usize),
    UntilClose,
    Done,
}

impl BodyReader {
    pub fn new(framing: BodyFraming) -> Self {
        let state = match framing {
            BodyFraming::Empty | BodyFraming::Length(0) => State::Done,
            BodyFraming::Length(n) => State::Length(n),
            BodyFraming::Chunked => State::ChunkSize,
            BodyFraming::UntilClose => State::UntilClose,
        };
        BodyReader { state }
    }

    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Bytes still expected, when the framing says.
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// The next piece of body from `buf`.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<BodyStep, ResponseError> {
        loop {
            match self.state {
                State::Done => return Ok(BodyStep::Done),
                State::Length(_) | State::ChunkData(_) | State::UntilClose if buf.is_empty() => {
                    return Ok(BodyStep::NeedMore)
                }
                State::Length(n) => {
                    let (data, rest) = take_counted(buf, n);
                    self.state = if rest == 0 {
                        State::Done
                    } else {
                        State::Length(rest)
                    };
                    return Ok(BodyStep::Data(data));
                }
                State::UntilClose => {
                    let all = buf.len();
                    return Ok(BodyStep::Data(take_bytes(buf, all)));
                }
                // Judged once the line is whole (`chunked_lines`), so that how the bytes were
                // split into reads cannot change the outcome.
                State::ChunkSize => match chunked_lines::chunk_size(buf, MAX_CHUNK_SIZE_LINE) {
                    Line::Partial => return Ok(BodyStep::NeedMore),
                    Line::Invalid => return Err(ResponseError::Chunked),
                    Line::Whole { len, value: size } => {
                        buf.advance(len);
                        self.state = if size == 0 {
                            State::Trailers(0)
                        } else {
                            State::ChunkData(size)
                        };
                    }
                },
                State::ChunkData(n) => {
                    let (data, rest) = take_counted(buf, n);
                    self.state = if rest == 0 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(rest)
                    };
                    return Ok(BodyStep::Data(data));
                }
                State::ChunkEnd => {
                    if buf.len() < 2 {
                        return Ok(BodyStep::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ResponseError::Chunked);
                    }
                    buf.advance(2);
                    self.state = State::ChunkSize;
                }
                // Trailer fields are checked line by line and dropped, as a proxy to an HTTP/1
                // client may do; the section as a whole is bounded.
                State::Trailers(seen) => {
                    match chunked_lines::trailer_line(buf, (MAX_TRAILERS - seen).saturating_sub(1))
                    {
                        Line::Partial => return Ok(BodyStep::NeedMore),
                        Line::Invalid => return Err(ResponseError::Chunked),
                        Line::Whole { len, value: end } => {
                            buf.advance(len);
                            self.state = if end {
                                State::Done
                            } else {
                                State::Trailers(seen + len)
                            };
                        }
                    }
                }
            }
        }
    }

    /// The connection ended: fine for a body that runs to the end, an error for the others.
    pub fn on_eof(&mut self) -> Result<(), ResponseError> {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(ResponseError::Incomplete),
        }
    }
}

/// How a chunked body fed in reads of `piece` bytes ended: what fuzz/chunked_body and the
/// regression tests compare across read sizes (the outcome must not depend on them).
#[doc(hidden)]
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkedOutcome {
    /// The body, and what followed it (in the buffer or not yet fed).
    Body {
        body: Vec<u8>,
        left: Vec<u8>,
    },
    /// The input ended before the body did (an error at EOF), with the body read so far.
    Incomplete(Vec<u8>),
    Error(ResponseError),
}

#[doc(hidden)]
pub fn decode_chunked_in_reads(wire: &[u8], piece: usize) -> ChunkedOutcome {
    let piece = piece.max(1);
    let mut reader = BodyReader::new(BodyFraming::Chunked);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut fed = 0;
    loop {
        match reader.next(&mut buf) {
            Ok(BodyStep::Data(d)) => {
                assert!(!d.is_empty(), "an empty data step could loop forever");
                body.extend_from_slice(&d);
            }
            Ok(BodyStep::Done) => {
                let mut left = buf.to_vec();
                left.extend_from_slice(&wire[fed..]);
                return ChunkedOutcome::Body { body, left };
            }
            Ok(BodyStep::NeedMore) if fed < wire.len() => {
                let end = (fed + piece).min(wire.len());
                buf.extend_from_slice(&wire[fed..end]);
                fed = end;
            }
            Ok(BodyStep::NeedMore) => {
                assert!(reader.on_eof().is_err());
                return ChunkedOutcome::Incomplete(body);
            }
            Err(e) => return ChunkedOutcome::Error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str, head_request: bool) -> ResponseHead {
        match parse_head(raw.as_bytes(), head_request).unwrap() {
            ParsedResponse::Head(h) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn connection_naming_a_header_is_flagged() {
        for (raw, names) in [
            ("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\n\r\n", false),
            (
                "HTTP/1.1 200 OK\r\nconnection: close, , keep-alive\r\n\r\n",
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\nconnection: keep-alive, X-Trace\r\n\r\n",
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nconnection: close\r\nconnection: te\r\n\r\n",
                true,
            ),
        ] {
            assert_eq!(head(raw, false).connection_names, names, "{raw}");
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let cases = [
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
                false,
                BodyFraming::Length(5),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                false,
                BodyFraming::Empty,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
                true,
                BodyFraming::Empty,
                true,
            ),
            (
                "HTTP/1.1 204 No Content\r\n\r\n",
                false,
                BodyFraming::Empty,
                true,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n",
                false,
                BodyFraming::Empty,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
                false,
                BodyFraming::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
                false,
                BodyFraming::UntilClose,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
                false,
                BodyFraming::Chunked,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\n\r\n",
                false,
                BodyFraming::UntilClose,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 1\r\nconnection: close\r\n\r\n",
                false,
                BodyFraming::Length(1),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n",
                false,
                BodyFraming::Length(1),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\ncontent-length: 1\r\nConnection: Keep-Alive\r\n\r\n",
                false,
                BodyFraming::Length(1),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n",
                false,
                BodyFraming::Length(2),
                true,
            ),
        ];
        for (raw, head_request, framing, reusable) in cases {
            let h = head(raw, head_request);
            assert_eq!((h.framing, h.reusable), (framing, reusable), "{raw:?}");
            assert_eq!(h.len, raw.len());
        }
    }

    #[test]
    fn bad_heads_are_errors() {
        for raw in [
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 1x\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "NOT HTTP\r\n\r\n",
        ] {
            assert!(parse_head(raw.as_bytes(), false).is_err(), "{raw:?}");
        }
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-len", false),
            Ok(ParsedResponse::Partial)
        );
        assert_eq!(
            parse_head(
                b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200",
                false
            ),
            Ok(ParsedResponse::Interim(40))
        );
    }

    /// Found by fuzzing (fuzz/fuzz_targets/response_head.rs): a reason phrase that is not
    /// UTF-8 made httparse return a `""` outside the buffer, and its range was computed from
    /// that pointer (an overflow, then an out-of-bounds slice in the proxy).
    /// Every input of fuzz/seeds/chunked_body (first byte: the read size the fuzzer picked)
    /// decodes the same in reads of 1..=16 bytes, in the fuzzer's size and at once.
    #[test]
    fn every_chunked_seed_decodes_the_same_however_it_is_split() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/chunked_body");
        let mut seeds = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let Some((&piece, wire)) = data.split_first() else {
                continue;
            };
            let whole = decode_chunked_in_reads(wire, wire.len());
            for size in (1..=16).chain([usize::from(piece % 16) + 1]) {
                assert_eq!(
                    decode_chunked_in_reads(wire, size),
                    whole,
                    "{} in reads of {size}",
                    path.display()
                );
            }
            seeds += 1;
        }
        assert!(seeds >= 8, "{seeds} seeds");
    }

    fn seed(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../../fuzz/seeds/chunked_body/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(path).unwrap()[1..].to_vec()
    }

    /// Found by fuzz/chunked_body (size-line-split.bin): a size line without its end was an
    /// error when read in pieces and incomplete when read at once; now every split waits for
    /// the line (it never ends within the input), and a line feed makes it an error.
    #[test]
    fn a_size_line_is_judged_once_whole() {
        let wire = seed("size-line-split.bin");
        assert_eq!(
            decode_chunked_in_reads(&wire[..146], 1),
            ChunkedOutcome::Incomplete(Vec::new())
        );
        let mut ended = wire[..146].to_vec();
        ended.extend_from_slice(b"\r\n");
        assert_eq!(
            decode_chunked_in_reads(&ended, 7),
            ChunkedOutcome::Error(ResponseError::Chunked)
        );
        // The whole seed's first line passes the size-line limit: refused however it is read.
        for piece in [1, 5, wire.len()] {
            assert_eq!(
                decode_chunked_in_reads(&wire, piece),
                ChunkedOutcome::Error(ResponseError::Chunked)
            );
        }
    }

    /// Found by fuzz/chunked_body (trailer-split.bin, size-zero-trailers-split.bin): httparse
    /// called a malformed trailer prefix invalid but the whole section partial (and took
    /// those size lines). Under whole-line judging both inputs are refused at their first
    /// line (a bare LF; a leading space, which hyper refuses too) in any split; trailer lines
    /// are judged one whole line at a time, and the section is bounded.
    #[test]
    fn trailer_lines_are_judged_once_whole() {
        for name in ["trailer-split.bin", "size-zero-trailers-split.bin"] {
            let wire = seed(name);
            let whole = decode_chunked_in_reads(&wire, wire.len());
            assert!(
                matches!(whole, ChunkedOutcome::Error(_)),
                "{name}: {whole:?}"
            );
            for piece in 1..=16 {
                assert_eq!(
                    decode_chunked_in_reads(&wire, piece),
                    whole,
                    "{name} {piece}"
                );
            }
        }
        let wire = b"1\r\na\r\n0\r\nx-a: 1\r\nbad line\r\n\r\n";
        assert_eq!(
            decode_chunked_in_reads(wire, 3),
            ChunkedOutcome::Error(ResponseError::Chunked)
        );
        let wire = b"1\r\na\r\n0\r\nx-a: 1\r\n\r\nNEXT";
        for piece in [1, 2, 100] {
            assert_eq!(
                decode_chunked_in_reads(wire, piece),
                ChunkedOutcome::Body {
                    body: b"a".to_vec(),
                    left: b"NEXT".to_vec()
                }
            );
        }
        // The section is bounded, its CRLFs included.
        let mut long = b"0\r\n".to_vec();
        while long.len() < MAX_TRAILERS + 100 {
            long.extend_from_slice(b"x-pad: 0123456789012345678901234567890123456789\r\n");
        }
        long.extend_from_slice(b"\r\n");
        for piece in [1, 16, long.len()] {
            assert_eq!(
                decode_chunked_in_reads(&long, piece),
                ChunkedOutcome::Error(ResponseError::Chunked)
            );
        }
    }

    #[test]
    fn a_reason_phrase_that_is_not_utf8_stays_in_the_buffer() {
        let raw = b"HTTP/1.1 200 OK\xca\xca\r\ncontent-length: 5\r\n\r\n";
        let ParsedResponse::Head(h) = parse_head(raw, false).unwrap() else {
            panic!()
        };
        assert_eq!(&raw[h.reason.clone()], b"OK\xca\xca");
        assert_eq!(h.framing, BodyFraming::Length(5));
        let ParsedResponse::Head(h) = parse_head(b"HTTP/1.1 204\r\n\r\n", false).unwrap() else {
            panic!()
        };
        assert!(h.reason.is_empty() && h.reason.end <= h.len);
    }

    #[test]
    fn head_ranges_point_into_the_buffer() {
        let raw = "HTTP/1.1 299 Fine Thanks\r\nX-A: 1\r\nx-b:  two \r\n\r\n";
        let h = head(raw, false);
        assert_eq!(h.status, 299);
        assert_eq!(&raw[h.reason.clone()], "Fine Thanks");
        let pairs: Vec<_> = h
            .headers
            .iter()
            .map(|(n, v)| (&raw[n.clone()], &raw[v.clone()]))
            .collect();
        assert_eq!(pairs, [("X-A", "1"), ("x-b", "two")]);
    }

    /// Feed `wire` to a reader one piece at a time; the body and what is left after it.
    fn read_all(framing: BodyFraming, wire: &[u8], piece: usize) -> (Vec<u8>, Vec<u8>) {
        let mut reader = BodyReader::new(framing);
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match reader.next(&mut buf).unwrap() {
                BodyStep::Data(d) => body.extend_from_slice(&d),
                BodyStep::Done => return (body, buf.to_vec()),
                BodyStep::NeedMore if fed < wire.len() => {
                    let end = (fed + piece).min(wire.len());
                    buf.extend_from_slice(&wire[fed..end]);
                    fed = end;
                }
                BodyStep::NeedMore => {
                    reader.on_eof().unwrap();
                    return (body, buf.to_vec());
                }
            }
        }
    }

    #[test]
    fn bodies_are_read_whatever_the_read_sizes() {
        let chunked = b"5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        for piece in [1, 2, 3, 7, 1000] {
            assert_eq!(
                read_all(BodyFraming::Chunked, chunked, piece).0,
                b"hello world!"
            );
            let (body, _) = read_all(BodyFraming::Chunked, b"3\r\nabc\r\n0\r\n\r\n", piece);
            assert_eq!(body, b"abc");
            assert_eq!(
                read_all(BodyFraming::Length(5), b"12345NEXT", piece).0,
                b"12345"
            );
            assert_eq!(
                read_all(BodyFraming::UntilClose, b"to the end", piece).0,
                b"to the end"
            );
        }
        // Whatever is fed after the end stays in the buffer.
        assert_eq!(read_all(BodyFraming::Chunked, chunked, 1000).1, b"NEXT");
        assert_eq!(
            read_all(BodyFraming::Length(5), b"12345NEXT", 1000).1,
            b"NEXT"
        );
    }

    #[test]
    fn broken_bodies_are_errors() {
        let mut reader = BodyReader::new(BodyFraming::Chunked);
        let mut buf = BytesMut::from(&b"zz\r\n"[..]);
        assert_eq!(reader.next(&mut buf), Err(ResponseError::Chunked));

        let mut reader = BodyReader::new(BodyFraming::Chunked);
        let mut buf = BytesMut::from(&b"3\r\nabcX\r\n"[..]);
        assert!(matches!(reader.next(&mut buf), Ok(BodyStep::Data(_))));
        assert_eq!(reader.next(&mut buf), Err(ResponseError::Chunked));

        let mut reader = BodyReader::new(BodyFraming::Length(10));
        let mut buf = BytesMut::from(&b"abc"[..]);
        assert!(matches!(reader.next(&mut buf), Ok(BodyStep::Data(_))));
        assert_eq!(reader.remaining(), Some(7));
        assert_eq!(reader.on_eof(), Err(ResponseError::Incomplete));
    }
}
