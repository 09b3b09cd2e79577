//! Envoy's access log formats, parsed once at load: a format string (`[%START_TIME%]
//! "%REQ(:METHOD)% ..."`) or a JSON dictionary whose values are format strings, into pieces
//! of text and command operators; rendered per line against [`Values`]. An operator warden
//! does not know is an error naming it, as in Envoy.

pub use super::json_line::JsonLine;
#[cfg(test)]
pub use super::write_text::write_time;
use http::HeaderName;
use std::borrow::Cow;

/// Istio's default TEXT format (`EnvoyTextLogFormat` in istio/istio's
/// `pilot/pkg/model/telemetry_logging.go`).
pub const ISTIO_TEXT: &str = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% \
%PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% \
%CONNECTION_TERMINATION_DETAILS% \"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% \
%BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \
\"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" \
%UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% \
%DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n";

/// Istio's default JSON keys (`EnvoyJSONLogFormatIstio`), in the order they are written.
pub const ISTIO_JSON: &[(&str, &str)] = &[
    ("start_time", "%START_TIME%"),
    ("route_name", "%ROUTE_NAME%"),
    ("method", "%REQ(:METHOD)%"),
    ("path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"),
    ("protocol", "%PROTOCOL%"),
    ("response_code", "%RESPONSE_CODE%"),
    ("response_flags", "%RESPONSE_FLAGS%"),
    ("response_code_details", "%RESPONSE_CODE_DETAILS%"),
    (
        "connection_termination_details",
        "%CONNECTION_TERMINATION_DETAILS%",
    ),
    ("bytes_received", "%BYTES_RECEIVED%"),
    ("bytes_sent", "%BYTES_SENT%"),
    ("duration", "%DURATION%"),
    (
        "upstream_service_time",
        "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
    ),
    ("x_forwarded_for", "%REQ(X-FORWARDED-FOR)%"),
    ("user_agent", "%REQ(USER-AGENT)%"),
    ("request_id", "%REQ(X-REQUEST-ID)%"),
    ("authority", "%REQ(:AUTHORITY)%"),
    ("upstream_host", "%UPSTREAM_HOST%"),
    ("upstream_cluster", "%UPSTREAM_CLUSTER%"),
    ("upstream_local_address", "%UPSTREAM_LOCAL_ADDRESS%"),
    ("downstream_local_address", "%DOWNSTREAM_LOCAL_ADDRESS%"),
    ("downstream_remote_address", "%DOWNSTREAM_REMOTE_ADDRESS%"),
    ("requested_server_name", "%REQUESTED_SERVER_NAME%"),
    (
        "upstream_transport_failure_reason",
        "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
    ),
];

/// A header an operator reads: a pseudo-header, the request id, or a named header (an index
/// into the format's request or response header list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderRef {
    Method,
    Path,
    Authority,
    Scheme,
    Status,
    /// `x-request-id`: the one the request came with, or the one the proxy made for it.
    RequestId,
    Named(usize),
}

/// `REQ(MAIN?ALT)`: the first of the two present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderOp {
    pub main: HeaderRef,
    pub alt: Option<HeaderRef>,
}

/// A part of `START_TIME(...)`'s strftime format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimePart {
    Text(String),
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    /// Seconds since the epoch (`%s`).
    Epoch,
    /// `%z`: always `+0000` (times are UTC).
    Offset,
    /// Fractional seconds with this many digits (`%3f`, `%f` = 9).
    Fraction(u8),
}

/// Envoy's command operators that warden writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `START_TIME`, Envoy's default `%Y-%m-%dT%H:%M:%S.%3fZ`, or a strftime format.
    StartTime(Vec<TimePart>),
    Req(HeaderOp),
    Resp(HeaderOp),
    Protocol,
    ResponseCode,
    ResponseFlags,
    ResponseCodeDetails,
    ConnectionTerminationDetails,
    BytesReceived,
    BytesSent,
    /// Milliseconds from the request's start to its answer.
    Duration,
    UpstreamHost,
    UpstreamCluster,
    UpstreamLocalAddress,
    UpstreamTransportFailureReason,
    DownstreamRemoteAddress {
        port: bool,
    },
    DownstreamDirectRemoteAddress {
        port: bool,
    },
    DownstreamLocalAddress {
        port: bool,
    },
    RequestedServerName,
    RouteName,
    Hostname,
    /// `DYNAMIC_METADATA(NAMESPACE:KEY:...)`.
    DynamicMetadata {
        namespace: String,
        path: Vec<String>,
    },
    /// `FILTER_STATE(KEY)`: warden's `warden.rule` (the RBAC policy or rate limit rule that
    /// decided) and `warden.shadow_rule`; other keys are `-`.
    FilterState(String),
}

/// Text, or an operator and its `:N` length limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Op(Op, Option<usize>),
}

/// A JSON format's value: format string pieces, a nested dictionary, or a non-string value
/// written as it is.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonTemplate {
    Pieces(Vec<Piece>),
    Object(Vec<(String, JsonTemplate)>),
    Literal(serde_json::Value),
}

/// A value an operator yields for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// Not there: `-` in text, `null` in JSON.
    Absent,
    Str(Cow<'a, str>),
    Num(u64),
    Json(Cow<'a, serde_json::Value>),
}

/// What one request gives the operators (the access log's record of it).
pub trait Values {
    fn value(&self, op: &Op) -> Value<'_>;

    /// [`Values::value`], for a renderer that lends `scratch` (empty) to write a computed
    /// value's text into (times, addresses, flags), so that no value allocates.
    fn value_in<'a>(&'a self, op: &Op, scratch: &'a mut String) -> Value<'a> {
        let _ = scratch;
        self.value(op)
    }

    /// The operator's text (what [`Value`] gives as text, with no length limit) appended to
    /// `out`; `false`, and nothing appended, when it has no value (`-`). A text line's values
    /// are written so, straight into it: no [`Value`] in between.
    fn write_text(&self, op: &Op, out: &mut String, scratch: &mut String) -> bool {
        scratch.clear();
        push_value(self.value_in(op, scratch), out)
    }
}

/// `value` as text appended to `out` (no length limit); `false` when absent.
pub fn push_value(value: Value<'_>, out: &mut String) -> bool {
    match value {
        Value::Absent => false,
        value => {
            push_text(value, None, out);
            true
        }
    }
}

/// A parsed format and the headers its operators read.
#[derive(Debug, Clone, PartialEq)]
pub struct Format {
    pub body: Body,
    /// Named request headers `REQ` reads, in [`HeaderRef::Named`] order.
    pub request_headers: Vec<HeaderName>,
    /// Named response headers `RESP` reads.
    pub response_headers: Vec<HeaderName>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Text(Vec<Piece>),
    Json(JsonLine),
}

impl Format {
    /// Envoy's format string (a newline is added when missing, as Istio does).
    pub fn text(format: &str) -> Result<Format, String> {
        let mut headers = Headers::default();
        let mut text = format.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        let pieces = parse_pieces(&text, &mut headers)?;
        Ok(headers.into_format(Body::Text(pieces)))
    }

    /// A JSON dictionary of format strings (Istio's `accessLogFormat` with JSON encoding).
    pub fn json(format: &str) -> Result<Format, String> {
        let value: serde_json::Value =
            serde_json::from_str(format).map_err(|e| format!("not a JSON object: {e}"))?;
        let serde_json::Value::Object(map) = value else {
            return Err("not a JSON object".into());
        };
        let mut headers = Headers::default();
        let fields = object(&map, &mut headers)?;
        Ok(headers.into_format(Body::Json(JsonLine::new(fields))))
    }

    /// Istio's JSON default.
    pub fn istio_json() -> Format {
        let mut headers = Headers::default();
        let fields = ISTIO_JSON
            .iter()
            .filter_map(|(k, v)| {
                let pieces = parse_pieces(v, &mut headers).ok()?;
                Some((k.to_string(), JsonTemplate::Pieces(pieces)))
            })
            .collect();
        headers.into_format(Body::Json(JsonLine::new(fields)))
    }

    /// One line (with its newline) for `values`.
    pub fn render(&self, values: &dyn Values, out: &mut String) {
        self.render_with(values, out, &mut String::new());
    }

    /// [`Format::render`] with a buffer kept between lines for the values it computes.
    /// Generic so that the access log's own values are written without a call through a
    /// vtable per operator.
    pub fn render_with<V: Values + ?Sized>(
        &self,
        values: &V,
        out: &mut String,
        scratch: &mut String,
    ) {
        match &self.body {
            Body::Text(pieces) => render_text(pieces, values, out, scratch),
            Body::Json(line) => line.render(values, out, scratch),
        }
    }
}

fn object(
    map: &serde_json::Map<String, serde_json::Value>,
    headers: &mut Headers,
) -> Result<Vec<(String, JsonTemplate)>, String> {
    map.iter()
        .map(|(k, v)| {
            let t = match v {
                serde_json::Value::String(s) => {
                    JsonTemplate::Pieces(parse_pieces(s, headers).map_err(|e| format!("{k}: {e}"))?)
                }
                serde_json::Value::Object(inner) => {
                    JsonTemplate::Object(object(inner, headers).map_err(|e| format!("{k}.{e}"))?)
                }
                other => JsonTemplate::Literal(other.clone()),
            };
            Ok((k.clone(), t))
        })
        .collect()
}

/// The named headers a format's operators read, collected while parsing.
#[derive(Default)]
struct Headers {
    request: Vec<HeaderName>,
    response: Vec<HeaderName>,
}

impl Headers {
    fn into_format(self, body: Body) -> Format {
        Format {
            body,
            request_headers: self.request,
            response_headers: self.response,
        }
    }
}

/// A format string's pieces.
fn parse_pieces(text: &str, headers: &mut Headers) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('%') {
        literal.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (command, tail) = split_command(after)
            .ok_or_else(|| format!("`%` at `{}` starts no command operator", clip(&rest[at..])))?;
        if !literal.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut literal)));
        }
        pieces.push(parse_command(command, headers)?);
        rest = tail;
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

fn clip(s: &str) -> &str {
    match s.char_indices().nth(24) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `NAME(ARGS):N%...` after a `%`: the command (up to its closing `%`) and what follows. A
/// `%` inside the parentheses belongs to the arguments (START_TIME's `%Y`).
fn split_command(s: &str) -> Option<(&str, &str)> {
    let name_end = s
        .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .unwrap_or(s.len());
    if name_end == 0 {
        return None;
    }
    let mut end = name_end;
    if s[end..].starts_with('(') {
        end += s[end..].find(')')? + 1;
    }
    let close = end + s[end..].find('%')?;
    Some((&s[..close], &s[close + 1..]))
}

/// One command: `NAME`, `NAME(ARGS)`, with an optional `:N` length limit.
fn parse_command(command: &str, headers: &mut Headers) -> Result<Piece, String> {
    let (head, max) = match command.rsplit_once(':') {
        Some((head, n))
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !head.is_empty() =>
        {
            if head.contains('(') && !head.ends_with(')') {
                (command, None)
            } else {
                let n: usize = n.parse().map_err(|_| format!("`{command}`: bad length"))?;
                (head, Some(n))
            }
        }
        _ => (command, None),
    };
    let (name, args) = match head.split_once('(') {
        Some((name, rest)) => {
            let args = rest
                .strip_suffix(')')
                .ok_or_else(|| format!("`{command}`: `(` without `)`"))?;
            (name, Some(args))
        }
        None => (head, None),
    };
    let no_args = |op: Op| match args {
        None => Ok(op),
        Some(_) => Err(format!("`{name}` takes no arguments")),
    };
    let op = match name {
        "START_TIME" => Op::StartTime(match args {
            None | Some("") => default_time(),
            Some(f) => time_format(f)?,
        }),
        "REQ" => Op::Req(header_op(args, name, &mut headers.request, false)?),
        "RESP" => Op::Resp(header_op(args, name, &mut headers.response, true)?),
        "PROTOCOL" => no_args(Op::Protocol)?,
        "RESPONSE_CODE" => no_args(Op::ResponseCode)?,
        "RESPONSE_FLAGS" => no_args(Op::ResponseFlags)?,
        "RESPONSE_CODE_DETAILS" => no_args(Op::ResponseCodeDetails)?,
        "CONNECTION_TERMINATION_DETAILS" => no_args(Op::ConnectionTerminationDetails)?,
        "BYTES_RECEIVED" => no_args(Op::BytesReceived)?,
        "BYTES_SENT" => no_args(Op::BytesSent)?,
        "DURATION" => no_args(Op::Duration)?,
        "UPSTREAM_HOST" => no_args(Op::UpstreamHost)?,
        "UPSTREAM_CLUSTER" | "UPSTREAM_CLUSTER_RAW" => no_args(Op::UpstreamCluster)?,
        "UPSTREAM_LOCAL_ADDRESS" => no_args(Op::UpstreamLocalAddress)?,
        "UPSTREAM_TRANSPORT_FAILURE_REASON" => no_args(Op::UpstreamTransportFailureReason)?,
        "DOWNSTREAM_REMOTE_ADDRESS" => no_args(Op::DownstreamRemoteAddress { port: true })?,
        "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT" => {
            no_args(Op::DownstreamRemoteAddress { port: false })?
        }
        "DOWNSTREAM_DIRECT_REMOTE_ADDRESS" => {
            no_args(Op::DownstreamDirectRemoteAddress { port: true })?
        }
        "DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT" => {
            no_args(Op::DownstreamDirectRemoteAddress { port: false })?
        }
        "DOWNSTREAM_LOCAL_ADDRESS" => no_args(Op::DownstreamLocalAddress { port: true })?,
        "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT" => {
            no_args(Op::DownstreamLocalAddress { port: false })?
        }
        "REQUESTED_SERVER_NAME" => no_args(Op::RequestedServerName)?,
        "ROUTE_NAME" => no_args(Op::RouteName)?,
        "HOSTNAME" => no_args(Op::Hostname)?,
        "DYNAMIC_METADATA" => {
            let args = args
                .filter(|a| !a.is_empty())
                .ok_or_else(|| "`DYNAMIC_METADATA` needs `(NAMESPACE:KEY...)`".to_string())?;
            let mut parts = args.split(':').map(str::to_string);
            let namespace = parts.next().unwrap_or_default();
            Op::DynamicMetadata {
                namespace,
                path: parts.collect(),
            }
        }
        "FILTER_STATE" => {
            let args = args
                .filter(|a| !a.is_empty())
                .ok_or_else(|| "`FILTER_STATE` needs `(KEY)`".to_string())?;
            // `KEY:PLAIN` / `KEY:TYPED` write warden's string values alike.
            let key = args.split(':').next().unwrap_or(args);
            Op::FilterState(key.to_string())
        }
        other => {
            return Err(format!(
                "command operator `{other}` is not supported by warden"
            ))
        }
    };
    Ok(Piece::Op(op, max))
}

/// `REQ(MAIN?ALT)`'s headers (pseudo-headers by name, others into `names`).
fn header_op(
    args: Option<&str>,
    op: &str,
    names: &mut Vec<HeaderName>,
    response: bool,
) -> Result<HeaderOp, String> {
    let args = args
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("`{op}` needs a header name: `{op}(NAME)`"))?;
    let (main, alt) = match args.split_once('?') {
        Some((m, a)) => (m, Some(a)),
        None => (args, None),
    };
    let mut one = |name: &str| -> Result<HeaderRef, String> {
        let lower = name.to_ascii_lowercase();
        Ok(match (lower.as_str(), response) {
            (":method", false) => HeaderRef::Method,
            (":path", false) => HeaderRef::Path,
            (":authority", false) | ("host", false) => HeaderRef::Authority,
            (":scheme", false) => HeaderRef::Scheme,
            ("x-request-id", false) => HeaderRef::RequestId,
            (":status", true) => HeaderRef::Status,
            (pseudo, _) if pseudo.starts_with(':') => {
                return Err(format!("`{op}({name})`: no such pseudo-header"))
            }
            (plain, _) => {
                let h = HeaderName::from_bytes(plain.as_bytes())
                    .map_err(|_| format!("`{op}({name})`: not a header name"))?;
                let at = match names.iter().position(|n| *n == h) {
                    Some(at) => at,
                    None => {
                        names.push(h);
                        names.len() - 1
                    }
                };
                HeaderRef::Named(at)
            }
        })
    };
    Ok(HeaderOp {
        main: one(main)?,
        alt: alt.map(&mut one).transpose()?,
    })
}

fn default_time() -> Vec<TimePart> {
    vec![
        TimePart::Year,
        TimePart::Text("-".into()),
        TimePart::Month,
        TimePart::Text("-".into()),
        TimePart::Day,
        TimePart::Text("T".into()),
        TimePart::Hour,
        TimePart::Text(":".into()),
        TimePart::Minute,
        TimePart::Text(":".into()),
        TimePart::Second,
        TimePart::Text(".".into()),
        TimePart::Fraction(3),
        TimePart::Text("Z".into()),
    ]
}

/// START_TIME's strftime subset: `%Y %m %d %H %M %S %s %z %f %1f..%9f %%`.
fn time_format(f: &str) -> Result<Vec<TimePart>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut chars = f.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        let spec = chars.next().ok_or("START_TIME: `%` at the end")?;
        let part = match spec {
            '%' => {
                text.push('%');
                continue;
            }
            'Y' => TimePart::Year,
            'm' => TimePart::Month,
            'd' => TimePart::Day,
            'H' => TimePart::Hour,
            'M' => TimePart::Minute,
            'S' => TimePart::Second,
            's' => TimePart::Epoch,
            'z' => TimePart::Offset,
            'f' => TimePart::Fraction(9),
            d @ '1'..='9' => match chars.next() {
                Some('f') => TimePart::Fraction(d as u8 - b'0'),
                _ => return Err(format!("START_TIME: `%{d}` must be `%{d}f`")),
            },
            other => return Err(format!("START_TIME: `%{other}` is not supported")),
        };
        if !text.is_empty() {
            parts.push(TimePart::Text(std::mem::take(&mut text)));
        }
        parts.push(part);
    }
    if !text.is_empty() {
        parts.push(TimePart::Text(text));
    }
    Ok(parts)
}

pub(super) fn render_text<V: Values + ?Sized>(
    pieces: &[Piece],
    values: &V,
    out: &mut String,
    scratch: &mut String,
) {
    for p in pieces {
        match p {
            // Most of a line's texts are one character (a space, a quote): pushed without a
            // library copy.
            Piece::Text(t) if t.len() == 1 => {
                if let Some(&b) = t.as_bytes().first() {
                    out.push(char::from(b));
                }
            }
            Piece::Text(t) => out.push_str(t),
            Piece::Op(op, None) => {
                if !values.write_text(op, out, scratch) {
                    out.push('-');
                }
            }
            Piece::Op(op, max) => {
                scratch.clear();
                push_text(values.value_in(op, scratch), *max, out);
            }
        }
    }
}

/// A value as text: `-` when absent, `max` characters at most.
pub(super) fn push_text(value: Value<'_>, max: Option<usize>, out: &mut String) {
    let text: Cow<'_, str> = match value {
        Value::Absent => Cow::Borrowed("-"),
        Value::Str(s) => s,
        Value::Num(n) => {
            let mut digits = itoa::Buffer::new();
            let digits = digits.format(n);
            match max {
                Some(max) => out.push_str(digits.get(..max).unwrap_or(digits)),
                None => out.push_str(digits),
            }
            return;
        }
        Value::Json(v) => match v.as_ref() {
            serde_json::Value::String(s) => Cow::Owned(s.clone()),
            other => Cow::Owned(other.to_string()),
        },
    };
    match max {
        Some(n) => out.extend(text.chars().take(n)),
        None => out.push_str(&text),
    }
}

/// A JSON format's line as a `serde_json` map (what lines were before [`JsonLine`]; the
/// tests' reference).
#[cfg(test)]
pub(super) fn render_object<V: Values + ?Sized>(
    fields: &[(String, JsonTemplate)],
    values: &V,
    scratch: &mut String,
) -> serde_json::Map<String, serde_json::Value> {
    fields
        .iter()
        .map(|(k, t)| {
            let v = match t {
                JsonTemplate::Literal(v) => v.clone(),
                JsonTemplate::Object(inner) => {
                    serde_json::Value::Object(render_object(inner, values, scratch))
                }
                // One operator alone keeps its type (numbers, null), as Envoy writes it.
                JsonTemplate::Pieces(pieces) => match pieces.as_slice() {
                    [Piece::Op(op, max)] => {
                        scratch.clear();
                        match values.value_in(op, scratch) {
                            Value::Absent => serde_json::Value::Null,
                            Value::Num(n) => serde_json::Value::from(n),
                            Value::Json(j) if max.is_none() => j.into_owned(),
                            other => {
                                let mut s = String::new();
                                push_text(other, *max, &mut s);
                                serde_json::Value::String(s)
                            }
                        }
                    }
                    _ => {
                        let mut s = String::new();
                        render_text(pieces, values, &mut s, scratch);
                        serde_json::Value::String(s)
                    }
                },
            };
            (k.clone(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request whose every operator has a value, except the absent ones.
    struct Fake;

    impl Values for Fake {
        fn value(&self, op: &Op) -> Value<'_> {
            let s = |t: &'static str| Value::Str(Cow::Borrowed(t));
            match op {
                Op::StartTime(parts) => {
                    let mut out = String::new();
                    write_time(parts, 1_700_000_000, 123_456_789, &mut out);
                    Value::Str(Cow::Owned(out))
                }
                Op::Req(h) => match (&h.main, &h.alt) {
                    (HeaderRef::Method, _) => s("GET"),
                    (HeaderRef::Named(0), Some(HeaderRef::Path)) => s("/p?q=1"),
                    (HeaderRef::RequestId, _) => s("id-1"),
                    (HeaderRef::Authority, _) => s("example.com"),
                    (HeaderRef::Named(_), _) => Value::Absent,
                    _ => s("?"),
                },
                Op::Resp(_) => Value::Absent,
                Op::Protocol => s("HTTP/1.1"),
                Op::ResponseCode => Value::Num(429),
                Op::ResponseFlags => s("RL"),
                Op::ResponseCodeDetails => s("local_rate_limited"),
                Op::BytesReceived => Value::Num(0),
                Op::BytesSent => Value::Num(18),
                Op::Duration => Value::Num(1),
                Op::DownstreamRemoteAddress { port: true } => s("127.0.0.9:5000"),
                Op::RouteName => s("r1"),
                Op::DynamicMetadata { .. } => Value::Json(Cow::Owned(serde_json::json!({"a": 1}))),
                Op::FilterState(k) if k == "warden.rule" => s("per-ip"),
                _ => Value::Absent,
            }
        }
    }

    fn line(format: &Format) -> String {
        let mut out = String::new();
        format.render(&Fake, &mut out);
        out
    }

    #[test]
    fn text_formats_render_each_operator() {
        let cases = [
            (
                "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS%",
                "[2023-11-14T22:13:20.123Z] \"GET /p?q=1 HTTP/1.1\" 429 RL\n",
            ),
            ("%START_TIME(%s.%6f %Y/%m/%d %%)%", "1700000000.123456 2023/11/14 %\n"),
            ("%RESPONSE_CODE_DETAILS:5% %ROUTE_NAME%|", "local r1|\n"),
            ("%REQ(USER-AGENT)% %UPSTREAM_HOST% %RESP(SERVER)%", "- - -\n"),
            ("%DYNAMIC_METADATA(lua:a)% %FILTER_STATE(warden.rule:PLAIN)%", "{\"a\":1} per-ip\n"),
            ("100% sure", "100% sure\n"),
        ];
        for (format, want) in cases {
            match Format::text(format) {
                Ok(f) => assert_eq!(line(&f), want, "{format}"),
                Err(e) if format == "100% sure" => assert!(e.contains("starts no"), "{e}"),
                Err(e) => panic!("{format}: {e}"),
            }
        }
    }

    #[test]
    fn bad_formats_are_errors_naming_the_operator() {
        let cases = [
            ("%NOT_AN_OP%", "`NOT_AN_OP` is not supported"),
            ("%REQ%", "`REQ` needs a header name"),
            ("%REQ(:bogus)%", "no such pseudo-header"),
            ("%PROTOCOL(x)%", "takes no arguments"),
            ("%START_TIME(%Q)%", "`%Q` is not supported"),
            ("%DURATION", "starts no command operator"),
        ];
        for (format, want) in cases {
            let e = Format::text(format).expect_err(format);
            assert!(e.contains(want), "{format}: {e}");
        }
    }

    #[test]
    fn istios_defaults_parse() {
        let text = Format::text(ISTIO_TEXT).expect("istio text");
        assert_eq!(text.request_headers.len(), 3, "{:?}", text.request_headers);
        let json = Format::istio_json();
        let Body::Json(line) = &json.body else {
            panic!("json");
        };
        assert_eq!(line.fields.len(), ISTIO_JSON.len());
    }

    #[test]
    fn json_keeps_types_of_lone_operators() {
        let f = Format::json(
            r#"{"code":"%RESPONSE_CODE%","ua":"%REQ(USER-AGENT)%","both":"%RESPONSE_CODE% %RESPONSE_FLAGS%","n":{"md":"%DYNAMIC_METADATA(lua)%"},"k":7}"#,
        )
        .expect("json");
        let v: serde_json::Value = serde_json::from_str(&line(&f)).expect("line is JSON");
        assert_eq!(
            v,
            serde_json::json!({"code": 429, "ua": null, "both": "429 RL", "n": {"md": {"a": 1}}, "k": 7})
        );
        assert!(Format::json("[1]").is_err());
        assert!(Format::json(r#"{"a":"%NOPE%"}"#)
            .unwrap_err()
            .contains("a: "));
    }
}
