//! A JSON format's line written straight into the output: the dictionary is compiled once into
//! steps, pre-serialized JSON text (keys, punctuation, constant values) and the values of
//! operators, so a line builds no `serde_json` map (a key and a value allocated per field, a
//! tree to insert them into, then the whole serialized). Keys are written sorted, nested
//! dictionaries too, as Envoy's JSON formatter writes them (`sortJsonStructFields`).

use super::format::{
    push_text, render_text, HeaderRef, JsonTemplate, Op, Piece, TimePart, Value, Values,
};
use super::write_text::push_u64;
use std::fmt::Write;

/// A JSON dictionary of format strings and the steps that write its line.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonLine {
    /// The dictionary as configured (its keys in the configured order).
    pub fields: Vec<(String, JsonTemplate)>,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// JSON text written as it is.
    Raw(String),
    /// An operator alone in its value: its type kept (a number, `null` when absent, metadata
    /// as JSON), as Envoy writes it.
    Value(Op, Option<usize>, Kind),
    /// Several pieces: one string (an absent operator is `-` in it).
    Text(Vec<Piece>),
}

/// What a lone operator's value can be, known from the operator: its text is written
/// straight into the line unless it may be metadata or a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Always a number.
    Number,
    /// A string or absent.
    Text,
    /// A string that never needs escaping (digits, addresses, flags), or absent.
    Clean,
    /// Anything: asked for its `Value`.
    Any,
}

fn kind(op: &Op, max: Option<usize>) -> Kind {
    let status = |h: &super::format::HeaderOp| {
        h.main == HeaderRef::Status || h.alt == Some(HeaderRef::Status)
    };
    match op {
        _ if max.is_some() => Kind::Any,
        Op::ResponseCode | Op::BytesReceived | Op::BytesSent | Op::Duration => Kind::Number,
        Op::StartTime(parts)
            if parts.iter().all(|p| match p {
                TimePart::Text(t) => !t.bytes().any(needs_escape),
                _ => true,
            }) =>
        {
            Kind::Clean
        }
        Op::Protocol
        | Op::ResponseFlags
        | Op::ConnectionTerminationDetails
        | Op::UpstreamLocalAddress
        | Op::DownstreamRemoteAddress { .. }
        | Op::DownstreamDirectRemoteAddress { .. }
        | Op::DownstreamLocalAddress { .. } => Kind::Clean,
        Op::Req(h) | Op::Resp(h) if status(h) => Kind::Any,
        Op::DynamicMetadata { .. } => Kind::Any,
        _ => Kind::Text,
    }
}

impl JsonLine {
    pub fn new(fields: Vec<(String, JsonTemplate)>) -> Self {
        let mut steps = Vec::new();
        let mut raw = String::new();
        object(&fields, &mut raw, &mut steps);
        raw.push('\n');
        steps.push(Step::Raw(raw));
        JsonLine { fields, steps }
    }

    /// One line (with its newline) for `values`.
    pub fn render<V: Values + ?Sized>(&self, values: &V, out: &mut String, scratch: &mut String) {
        for step in &self.steps {
            match step {
                Step::Raw(text) => out.push_str(text),
                Step::Value(op, max, kind) => write_value(op, *max, *kind, values, out, scratch),
                Step::Text(pieces) => {
                    let start = out.len();
                    out.push('"');
                    render_text(pieces, values, out, scratch);
                    escape_from(out, start + 1);
                    out.push('"');
                }
            }
        }
    }
}

/// `fields` as an object's steps, keys sorted; JSON text goes to `raw` until a value needs a
/// step of its own.
fn object(fields: &[(String, JsonTemplate)], raw: &mut String, steps: &mut Vec<Step>) {
    let mut sorted: Vec<&(String, JsonTemplate)> = fields.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    // A key configured twice keeps its last value, as a map would.
    sorted.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            std::mem::swap(later, earlier);
            true
        } else {
            false
        }
    });
    raw.push('{');
    for (i, (key, template)) in sorted.into_iter().enumerate() {
        if i > 0 {
            raw.push(',');
        }
        push_json_str(raw, key);
        raw.push(':');
        match template {
            JsonTemplate::Literal(v) => {
                let _ = write!(raw, "{v}");
            }
            JsonTemplate::Object(inner) => object(inner, raw, steps),
            JsonTemplate::Pieces(pieces) => {
                steps.push(Step::Raw(std::mem::take(raw)));
                steps.push(match pieces.as_slice() {
                    [Piece::Op(op, max)] => Step::Value(op.clone(), *max, kind(op, *max)),
                    _ => Step::Text(pieces.clone()),
                });
            }
        }
    }
    raw.push('}');
}

fn write_value<V: Values + ?Sized>(
    op: &Op,
    max: Option<usize>,
    kind: Kind,
    values: &V,
    out: &mut String,
    scratch: &mut String,
) {
    match kind {
        Kind::Number => {
            if !values.write_text(op, out, scratch) {
                out.push_str("null");
            }
        }
        Kind::Text | Kind::Clean => {
            let start = out.len();
            out.push('"');
            if values.write_text(op, out, scratch) {
                if kind == Kind::Text {
                    escape_from(out, start + 1);
                }
                out.push('"');
            } else {
                out.truncate(start);
                out.push_str("null");
            }
        }
        Kind::Any => {
            scratch.clear();
            match values.value_in(op, scratch) {
                Value::Absent => out.push_str("null"),
                Value::Num(n) => push_u64(out, n),
                Value::Json(j) if max.is_none() => {
                    let _ = write!(out, "{j}");
                }
                other => {
                    let start = out.len();
                    out.push('"');
                    push_text(other, max, out);
                    escape_from(out, start + 1);
                    out.push('"');
                }
            }
        }
    }
}

/// Whether a byte must be escaped in a JSON string.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether any byte of `s` must be escaped: eight bytes at a time (a byte at a time cost a
/// JSON line more than all the rest of it).
fn any_needs_escape(s: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether a byte of `v` is below `n` (n <= 0x80): exact as to whether any is.
    let below = |v: u64, n: u8| v.wrapping_sub(ONES * u64::from(n)) & !v & HIGH != 0;
    let zero = |v: u64| below(v, 1);
    let mut chunks = s.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let v = u64::from_ne_bytes(word);
        if below(v, 0x20)
            || zero(v ^ (ONES * u64::from(b'"')))
            || zero(v ^ (ONES * u64::from(b'\\')))
        {
            return true;
        }
    }
    chunks.remainder().iter().any(|b| needs_escape(*b))
}

/// `out` from `start` on escaped as a JSON string's content (the text is usually clean: then
/// nothing moves).
fn escape_from(out: &mut String, start: usize) {
    let Some(tail) = out.get(start..) else {
        return;
    };
    if !any_needs_escape(tail.as_bytes()) {
        return;
    }
    let tail = out.split_off(start);
    push_escaped(out, &tail);
}

/// `s` as a quoted JSON string.
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    push_escaped(out, s);
    out.push('"');
}

/// `s` escaped as `serde_json` escapes a string's content: `"`, `\` and control characters
/// (the short forms where JSON has them, else `\u00XX` in lowercase hex).
fn push_escaped(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut clean = 0;
    for (i, b) in s.bytes().enumerate() {
        if !needs_escape(b) {
            continue;
        }
        out.push_str(s.get(clean..i).unwrap_or_default());
        clean = i + 1;
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
    }
    out.push_str(s.get(clean..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_need_escaping_when_a_byte_does() {
        let clean =
            b"abcdefghijklmnopqrstuvwxyz0123456789 !#$%&'()*+,-./:;<=>?@[]^_`{|}~\x7f\xc3\xa9";
        for len in 0..clean.len() {
            for at in 0..len {
                for bad in [0u8, 0x1f, b'"', b'\\', b'\n'] {
                    let mut s = clean[..len].to_vec();
                    assert!(!any_needs_escape(&s));
                    s[at] = bad;
                    assert!(any_needs_escape(&s), "{s:?}");
                }
            }
        }
        // Bytes next to the bounds of the ranges: 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x80, 0xff.
        assert!(!any_needs_escape(
            b" !#[]\x80\xff\x20\x21\x23\x5b\x5d\x80\xff"
        ));
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut every: String = (0u8..0x80).map(char::from).collect();
        every.push_str("é\u{2028}\u{7f}");
        for s in [every.as_str(), "", "plain", "a\"b\\c\nd", "\u{1}x\u{1f}"] {
            let mut out = String::new();
            push_json_str(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).expect("json"), "{s:?}");
            // In place, after text that stays.
            let mut tail = String::from("keep");
            tail.push_str(s);
            escape_from(&mut tail, 4);
            assert_eq!(tail, format!("keep{}", &out[1..out.len() - 1]));
        }
    }
}
