//! A TEXT format compiled for the access log's records: each operator resolved once to what
//! it reads of a record (a text's field, a header's place, a number), with the literal
//! text before it, so a line is one loop over steps. The format's own renderer goes through
//! the operator, then its header reference, then the record's accessor per value; this
//! writes the same bytes (`plan_lines_are_the_formats` holds it to that).

use super::format::{HeaderOp, HeaderRef, Op, Piece, Values};
use super::record::Field;
use super::write_text::push_u64;
use super::View;

/// A text format's steps and the literal text after its last operator.
#[derive(Debug, Clone, PartialEq)]
pub struct TextPlan {
    steps: Vec<Step>,
    tail: Lit,
}

#[derive(Debug, Clone, PartialEq)]
struct Step {
    lit: Lit,
    what: What,
}

/// Literal text: most of a line's are one character (a space, a quote), pushed without a
/// library copy.
#[derive(Debug, Clone, PartialEq)]
enum Lit {
    None,
    Byte(u8),
    Text(String),
}

impl Lit {
    fn new(text: String) -> Self {
        match text.as_bytes() {
            [] => Lit::None,
            [b] if b.is_ascii() => Lit::Byte(*b),
            _ => Lit::Text(text),
        }
    }

    #[inline(always)]
    fn push(&self, out: &mut String) {
        match self {
            Lit::None => {}
            // ASCII (made so): the mask tells the compiler, so the push writes one byte.
            Lit::Byte(b) => out.push(char::from(*b & 0x7f)),
            Lit::Text(t) => out.push_str(t),
        }
    }
}

/// What an operator writes, resolved.
#[derive(Debug, Clone, PartialEq)]
enum What {
    /// A record's text; absent (`-`) when not there, or, `empty_absent`, empty.
    Text {
        field: Field,
        empty_absent: bool,
    },
    /// The `i`-th request header the format names, when there (empty or not).
    RequestHeader(usize),
    /// The `i`-th response header the format names.
    ResponseHeader(usize),
    /// `REQ(NAMED?PSEUDO)` (Istio's `X-ENVOY-ORIGINAL-PATH?:PATH`): the `i`-th request header
    /// the format names when there, else the record's text as in `Text`.
    RequestHeaderOr {
        i: usize,
        field: Field,
        empty_absent: bool,
    },
    /// `REQ(A?B)`, `RESP(...)` of a status: as the record writes header operators.
    Header {
        op: HeaderOp,
        response: bool,
    },
    ResponseCode,
    BytesReceived,
    BytesSent,
    Duration,
    ResponseFlags,
    /// Any other operator, as the record's view writes it.
    Op(Op),
    /// An operator with a length limit.
    Limited(Op, usize),
}

impl TextPlan {
    /// `pieces` compiled.
    pub fn new(pieces: &[Piece]) -> Self {
        let mut steps = Vec::new();
        let mut lit = String::new();
        for piece in pieces {
            match piece {
                Piece::Text(t) => lit.push_str(t),
                // Envoy never sets it on an HTTP stream (see `View::value_in`): always `-`.
                Piece::Op(Op::ConnectionTerminationDetails, None) => lit.push('-'),
                Piece::Op(op, max) => steps.push(Step {
                    lit: Lit::new(std::mem::take(&mut lit)),
                    what: what(op, *max),
                }),
            }
        }
        TextPlan {
            steps,
            tail: Lit::new(lit),
        }
    }

    /// The line of `view`'s record appended to `out`; `scratch` for computed values.
    pub(super) fn render(&self, view: &View<'_>, out: &mut String, scratch: &mut String) {
        let r = view.record;
        for step in &self.steps {
            step.lit.push(out);
            let written = match &step.what {
                What::Text {
                    field,
                    empty_absent,
                } => push_text(out, r.text(*field), *empty_absent),
                What::RequestHeader(i) => push_text(out, r.request_header(*i), false),
                What::RequestHeaderOr {
                    i,
                    field,
                    empty_absent,
                } => match r.request_header(*i) {
                    Some(t) => push_text(out, Some(t), false),
                    None => push_text(out, r.text(*field), *empty_absent),
                },
                What::ResponseHeader(i) => push_text(out, r.response_header(*i), false),
                What::Header { op, response } => r.push_header(op, *response, out),
                What::ResponseCode => {
                    push_u64(out, u64::from(r.status));
                    true
                }
                What::BytesReceived => {
                    push_u64(out, r.bytes_received);
                    true
                }
                What::BytesSent => {
                    push_u64(out, r.bytes_sent);
                    true
                }
                What::Duration => {
                    push_u64(out, r.duration.as_millis() as u64);
                    true
                }
                What::ResponseFlags => {
                    r.flags.write_to(out);
                    true
                }
                What::Op(op) => view.write_text(op, out, scratch),
                What::Limited(op, max) => {
                    scratch.clear();
                    super::format::push_text(view.value_in(op, scratch), Some(*max), out);
                    true
                }
            };
            if !written {
                out.push('-');
            }
        }
        self.tail.push(out);
    }
}

#[inline(always)]
fn push_text(out: &mut String, text: Option<&str>, empty_absent: bool) -> bool {
    match text {
        Some(t) if !(empty_absent && t.is_empty()) => {
            out.push_str(t);
            true
        }
        _ => false,
    }
}

/// An operator resolved to what it reads of a record; each arm writes what `View::write_text`
/// writes for it.
fn what(op: &Op, max: Option<usize>) -> What {
    let text = |field, empty_absent| What::Text {
        field,
        empty_absent,
    };
    if let Some(max) = max {
        return What::Limited(op.clone(), max);
    }
    // A request pseudo-header's text and whether empty is absent (`Record::header_text`).
    let pseudo = |h: &HeaderRef| match h {
        HeaderRef::Method => Some((Field::Method, false)),
        HeaderRef::Path => Some((Field::Path, true)),
        HeaderRef::Authority => Some((Field::Authority, true)),
        HeaderRef::RequestId => Some((Field::RequestId, true)),
        _ => None,
    };
    match op {
        Op::Req(HeaderOp {
            main: HeaderRef::Named(i),
            alt: None,
        }) => What::RequestHeader(*i),
        Op::Req(HeaderOp { main, alt: None }) => match pseudo(main) {
            Some((field, empty_absent)) => text(field, empty_absent),
            None => What::Op(op.clone()),
        },
        Op::Req(HeaderOp {
            main: HeaderRef::Named(i),
            alt: Some(alt),
        }) => match pseudo(alt) {
            Some((field, empty_absent)) => What::RequestHeaderOr {
                i: *i,
                field,
                empty_absent,
            },
            None => What::Op(op.clone()),
        },
        Op::Resp(HeaderOp {
            main: HeaderRef::Named(i),
            alt: None,
        }) => What::ResponseHeader(*i),
        Op::Req(h) => What::Header {
            op: h.clone(),
            response: false,
        },
        Op::Resp(h) => What::Header {
            op: h.clone(),
            response: true,
        },
        Op::ResponseCode => What::ResponseCode,
        Op::BytesReceived => What::BytesReceived,
        Op::BytesSent => What::BytesSent,
        Op::Duration => What::Duration,
        Op::ResponseFlags => What::ResponseFlags,
        Op::ResponseCodeDetails => text(Field::Details, true),
        Op::UpstreamHost => text(Field::UpstreamHost, false),
        Op::UpstreamCluster => text(Field::UpstreamCluster, true),
        Op::RequestedServerName => text(Field::Sni, true),
        Op::RouteName => text(Field::RouteName, true),
        other => What::Op(other.clone()),
    }
}
