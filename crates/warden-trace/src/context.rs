//! Trace ids and the trace context of a request's headers: W3C Trace Context
//! (`traceparent: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`) and Zipkin's B3
//! (`x-b3-traceid`/`x-b3-spanid`/`x-b3-sampled`/`x-b3-flags`, or one `b3` header). Parsing is
//! strict where the specifications are (an invalid context is no context: the proxy starts a
//! new trace, as Envoy's tracers do).

use std::fmt;

/// A 16-byte trace id; never all zero when valid.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TraceId(pub [u8; 16]);

/// An 8-byte span id; never all zero when valid.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SpanId(pub [u8; 8]);

impl TraceId {
    /// A new random id (never zero).
    pub fn random(rng: &mut fastrand::Rng) -> Self {
        loop {
            let id = rng.u128(..);
            if id != 0 {
                return TraceId(id.to_be_bytes());
            }
        }
    }

    /// Lowercase hex, 32 characters.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

impl SpanId {
    /// A new random id (never zero).
    pub fn random(rng: &mut fastrand::Rng) -> Self {
        loop {
            let id = rng.u64(..);
            if id != 0 {
                return SpanId(id.to_be_bytes());
            }
        }
    }

    /// Lowercase hex, 16 characters.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

/// Which header formats a provider reads and writes: Envoy's OpenTelemetry tracer speaks W3C
/// Trace Context, its Zipkin tracer B3 (multi-header written; single `b3` read too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Propagation {
    pub w3c: bool,
    pub b3: bool,
}

/// The context a request came with: the caller's trace and span, and its sampling decision
/// when it made one (`None`: B3 ids without a sampling state; the proxy decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: Option<bool>,
}

/// What a B3 header set says: a context, or only a sampling decision (`b3: 0`, `b3: 1`, `d`,
/// or `x-b3-sampled` alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum B3 {
    Context(Parent),
    SamplingOnly(bool),
}

/// `traceparent` as the W3C specification reads it: version `ff` is invalid; version `00` is
/// exactly 55 characters; a later version may carry more after a `-`. Ids are lowercase hex
/// and not all zero.
pub fn parse_traceparent(value: &[u8]) -> Option<Parent> {
    if value.len() < 55 {
        return None;
    }
    let version = hex_byte(&value[0..2])?;
    if version == 0xff || (version == 0 && value.len() != 55) {
        return None;
    }
    if value.len() > 55 && value[55] != b'-' {
        return None;
    }
    if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let trace_id = TraceId(hex_array(&value[3..35])?);
    let span_id = SpanId(hex_array(&value[36..52])?);
    let flags = hex_byte(&value[53..55])?;
    if trace_id.0 == [0; 16] || span_id.0 == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id,
        span_id,
        sampled: Some(flags & 1 == 1),
    })
}

/// The `traceparent` a hop sends: version 00, this hop's span as the parent, the sampled flag.
pub fn traceparent(trace_id: TraceId, span_id: SpanId, sampled: bool) -> [u8; 55] {
    let mut out = [0u8; 55];
    write_traceparent(trace_id, span_id, sampled, &mut out);
    out
}

/// [`traceparent`] written where it goes (a request head's line: no array copied out).
#[inline]
pub fn write_traceparent(trace_id: TraceId, span_id: SpanId, sampled: bool, out: &mut [u8; 55]) {
    out[0] = b'0';
    out[1] = b'0';
    out[2] = b'-';
    out[3..35].copy_from_slice(&crate::hex::digits16(trace_id.0));
    out[35] = b'-';
    out[36..52].copy_from_slice(&crate::hex::digits8(span_id.0));
    out[52] = b'-';
    out[53] = b'0';
    out[54] = if sampled { b'1' } else { b'0' };
}

/// The multi-header B3 set (`x-b3-traceid`, `x-b3-spanid`, `x-b3-sampled`, `x-b3-flags`): a
/// 64- or 128-bit trace id (a 64-bit one is the low half) with a span id, or a sampling state
/// alone. `x-b3-flags: 1` (debug) means sampled.
pub fn parse_b3_multi(
    trace_id: Option<&[u8]>,
    span_id: Option<&[u8]>,
    sampled: Option<&[u8]>,
    flags: Option<&[u8]>,
) -> Option<B3> {
    let sampled = match (flags, sampled) {
        (Some(b"1"), _) => Some(true),
        (_, Some(s)) => Some(b3_sampling(s)?),
        (_, None) => None,
    };
    match (trace_id, span_id) {
        (Some(t), Some(s)) => Some(B3::Context(Parent {
            trace_id: b3_trace_id(t)?,
            span_id: SpanId(hex_array(s)?).valid()?,
            sampled,
        })),
        (None, None) => sampled.map(B3::SamplingOnly),
        _ => None,
    }
}

/// The single `b3` header: `{trace}-{span}[-{sampling}[-{parent span}]]`, or a sampling state
/// alone (`0`, `1`, `d`).
pub fn parse_b3_single(value: &[u8]) -> Option<B3> {
    let mut fields = value.split(|&b| b == b'-');
    let first = fields.next()?;
    let Some(span) = fields.next() else {
        return Some(B3::SamplingOnly(b3_sampling(first)?));
    };
    let sampled = match fields.next() {
        Some(s) => Some(b3_sampling(s)?),
        None => None,
    };
    if let Some(parent) = fields.next() {
        SpanId(hex_array(parent)?).valid()?;
    }
    if fields.next().is_some() {
        return None;
    }
    Some(B3::Context(Parent {
        trace_id: b3_trace_id(first)?,
        span_id: SpanId(hex_array(span)?).valid()?,
        sampled,
    }))
}

impl SpanId {
    fn valid(self) -> Option<Self> {
        (self.0 != [0; 8]).then_some(self)
    }
}

fn b3_trace_id(text: &[u8]) -> Option<TraceId> {
    let mut id = [0u8; 16];
    match text.len() {
        32 => id = hex_array(text)?,
        16 => id[8..].copy_from_slice(&hex_array::<8>(text)?),
        _ => return None,
    }
    (id != [0; 16]).then_some(TraceId(id))
}

/// B3's sampling state: `1`/`true` sampled, `0`/`false` not, `d` debug (sampled).
fn b3_sampling(text: &[u8]) -> Option<bool> {
    match text {
        b"1" | b"d" | b"true" => Some(true),
        b"0" | b"false" => Some(false),
        _ => None,
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    match two {
        [h, l] => Some(hex_digit(*h)? << 4 | hex_digit(*l)?),
        _ => None,
    }
}

fn hex_array<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = hex_byte(pair)?;
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    crate::hex::write(bytes, &mut out);
    out.into_iter().map(char::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const S: &str = "00f067aa0ba902b7";

    fn parent(sampled: Option<bool>) -> Parent {
        Parent {
            trace_id: TraceId(hex_array(T.as_bytes()).unwrap()),
            span_id: SpanId(hex_array(S.as_bytes()).unwrap()),
            sampled,
        }
    }

    #[test]
    fn traceparent_is_read_as_the_w3c_specification_says() {
        let cases: &[(&str, Option<Parent>)] = &[
            (&format!("00-{T}-{S}-01"), Some(parent(Some(true)))),
            (&format!("00-{T}-{S}-00"), Some(parent(Some(false)))),
            // Only the sampled bit is read of the flags.
            (&format!("00-{T}-{S}-03"), Some(parent(Some(true)))),
            // A later version may add fields after a dash.
            (
                &format!("01-{T}-{S}-01-what-else"),
                Some(parent(Some(true))),
            ),
            (&format!("01-{T}-{S}-01"), Some(parent(Some(true)))),
            (&format!("01-{T}-{S}-01x"), None),
            (&format!("00-{T}-{S}-01-extra"), None),
            (&format!("ff-{T}-{S}-01"), None),
            (&format!("00-{}-{S}-01", "0".repeat(32)), None),
            (&format!("00-{T}-{}-01", "0".repeat(16)), None),
            (&format!("00-{}-{S}-01", T.to_uppercase()), None),
            (&format!("00-{T}-{S}-0g"), None),
            (&format!("00_{T}-{S}-01"), None),
            (&format!("00-{T}-{S}"), None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_traceparent(text.as_bytes()), *want, "{text}");
        }
    }

    #[test]
    fn traceparent_is_written_with_this_hops_span() {
        let p = parent(None);
        let text = traceparent(p.trace_id, p.span_id, true);
        assert_eq!(
            std::str::from_utf8(&text).unwrap(),
            format!("00-{T}-{S}-01")
        );
        let text = traceparent(p.trace_id, p.span_id, false);
        assert_eq!(parse_traceparent(&text), Some(parent(Some(false))));
    }

    #[test]
    fn b3_multi_headers() {
        let t64 = "a3ce929d0e0e4736";
        let mut short = [0u8; 16];
        short[8..].copy_from_slice(&hex_array::<8>(t64.as_bytes()).unwrap());
        type Case<'a> = (
            (
                Option<&'a str>,
                Option<&'a str>,
                Option<&'a str>,
                Option<&'a str>,
            ),
            Option<B3>,
        );
        let cases: &[Case] = &[
            (
                (Some(T), Some(S), Some("1"), None),
                Some(B3::Context(parent(Some(true)))),
            ),
            (
                (Some(T), Some(S), Some("0"), None),
                Some(B3::Context(parent(Some(false)))),
            ),
            (
                (Some(T), Some(S), None, None),
                Some(B3::Context(parent(None))),
            ),
            (
                (Some(T), Some(S), Some("0"), Some("1")),
                Some(B3::Context(parent(Some(true)))),
            ),
            ((Some(T), Some(S), Some("yes"), None), None),
            ((Some(T), None, Some("1"), None), None),
            ((None, None, Some("0"), None), Some(B3::SamplingOnly(false))),
            ((None, None, None, None), None),
            (
                (Some(t64), Some(S), Some("true"), None),
                Some(B3::Context(Parent {
                    trace_id: TraceId(short),
                    span_id: parent(None).span_id,
                    sampled: Some(true),
                })),
            ),
            ((Some("abc"), Some(S), None, None), None),
        ];
        for ((t, s, sampled, flags), want) in cases {
            let b = |o: &Option<&'static str>| o.map(str::as_bytes);
            assert_eq!(
                parse_b3_multi(b(t), b(s), b(sampled), b(flags)),
                *want,
                "{t:?} {s:?} {sampled:?} {flags:?}"
            );
        }
    }

    #[test]
    fn b3_single_header() {
        let cases: &[(String, Option<B3>)] = &[
            (format!("{T}-{S}"), Some(B3::Context(parent(None)))),
            (format!("{T}-{S}-1"), Some(B3::Context(parent(Some(true))))),
            (format!("{T}-{S}-d"), Some(B3::Context(parent(Some(true))))),
            (
                format!("{T}-{S}-0-{S}"),
                Some(B3::Context(parent(Some(false)))),
            ),
            (format!("{T}-{S}-0-xyz"), None),
            (format!("{T}-{S}-2"), None),
            (format!("{T}-{S}-1-{S}-more"), None),
            ("0".into(), Some(B3::SamplingOnly(false))),
            ("d".into(), Some(B3::SamplingOnly(true))),
            ("2".into(), None),
            (format!("{T}-{}", "0".repeat(16)), None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_b3_single(text.as_bytes()), *want, "{text}");
        }
    }

    #[test]
    fn every_byte_is_written_as_two_lowercase_digits() {
        for b in 0..=255u8 {
            let mut out = [0u8; 2];
            crate::hex::write(&[b], &mut out);
            assert_eq!(std::str::from_utf8(&out).unwrap(), format!("{b:02x}"));
        }
    }

    #[test]
    fn random_ids_are_never_zero_and_differ() {
        let mut rng = fastrand::Rng::with_seed(7);
        let a = TraceId::random(&mut rng);
        let b = TraceId::random(&mut rng);
        assert_ne!(a, b);
        assert_ne!(a.0, [0; 16]);
        assert_eq!(a.hex().len(), 32);
        assert_eq!(SpanId::random(&mut rng).hex().len(), 16);
    }
}
