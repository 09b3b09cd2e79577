//! The access log. A worker copies what the format reads of a request into a [`Record`]; when
//! the request ends it renders the line (Envoy's format strings and JSON dictionaries, or
//! warden's own JSON shape) into a bounded batch that one writer thread takes and writes
//! every 20 ms ([`batch`]). A full batch drops the line and counts it: a slow disk never
//! blocks a request. With no access log, nothing of this runs.

mod batch;
pub mod format;
pub mod json_line;
pub mod record;
pub mod sent;
mod text_plan;
pub mod write_text;

use crate::core::error::ProxyError;
use format::{Format, HeaderOp, HeaderRef, Op, Value, Values};
pub use record::{Field, Record};
use std::borrow::Cow;
use std::cell::RefCell;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    Stdout,
    File(PathBuf),
}

impl AccessLogTarget {
    /// `-` (and Istio's `/dev/stdout`) is stdout, anything else a file path (appended to).
    pub fn parse(text: &str) -> Self {
        if text == "-" || text == "/dev/stdout" {
            AccessLogTarget::Stdout
        } else {
            AccessLogTarget::File(PathBuf::from(text))
        }
    }
}

/// What a line looks like: warden's JSON (`--access-log` alone), or an Envoy format (Istio's
/// `accessLogEncoding` / `accessLogFormat`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum LineFormat {
    #[default]
    Warden,
    Envoy(Arc<Format>),
}

/// Which answers are logged: Telemetry's `filter.expression` on `response.code`.
pub use warden_config::telemetry_access_logging::CodeExpression as CodeFilter;

impl Record {
    fn header<'a>(&'a self, op: &HeaderOp, response: bool) -> Value<'a> {
        let one = |r: &HeaderRef| -> Value<'a> {
            match r {
                HeaderRef::Method => present(self.text(Field::Method)),
                HeaderRef::Path => non_empty(self.text(Field::Path)),
                HeaderRef::Authority => non_empty(self.text(Field::Authority)),
                HeaderRef::Scheme => text(self.scheme),
                HeaderRef::RequestId => non_empty(self.text(Field::RequestId)),
                HeaderRef::Status => Value::Num(u64::from(self.status)),
                HeaderRef::Named(i) if response => present(self.response_header(*i)),
                HeaderRef::Named(i) => present(self.request_header(*i)),
            }
        };
        match (one(&op.main), &op.alt) {
            (Value::Absent, Some(alt)) => one(alt),
            (v, _) => v,
        }
    }
}

/// A header operator's text, for a line written without [`Value`]s.
enum HeaderText<'a> {
    Str(&'a str),
    Num(u16),
}

impl Record {
    /// What [`Record::header`] gives, appended to `out`; `false` when absent.
    fn push_header(&self, op: &HeaderOp, response: bool, out: &mut String) -> bool {
        let found = match self.header_text(&op.main, response) {
            None => op
                .alt
                .as_ref()
                .and_then(|alt| self.header_text(alt, response)),
            found => found,
        };
        match found {
            Some(HeaderText::Str(s)) => out.push_str(s),
            Some(HeaderText::Num(n)) => write_text::push_u64(out, u64::from(n)),
            None => return false,
        }
        true
    }

    fn header_text(&self, r: &HeaderRef, response: bool) -> Option<HeaderText<'_>> {
        fn non_empty(s: Option<&str>) -> Option<&str> {
            s.filter(|s| !s.is_empty())
        }
        let s = match r {
            HeaderRef::Method => self.text(Field::Method),
            HeaderRef::Path => non_empty(self.text(Field::Path)),
            HeaderRef::Authority => non_empty(self.text(Field::Authority)),
            HeaderRef::Scheme => non_empty(Some(self.scheme)),
            HeaderRef::RequestId => non_empty(self.text(Field::RequestId)),
            HeaderRef::Status => return Some(HeaderText::Num(self.status)),
            HeaderRef::Named(i) if response => self.response_header(*i),
            HeaderRef::Named(i) => self.request_header(*i),
        };
        s.map(HeaderText::Str)
    }
}

fn text(s: &str) -> Value<'_> {
    if s.is_empty() {
        Value::Absent
    } else {
        Value::Str(Cow::Borrowed(s))
    }
}

/// A text that is there (empty or not), or `-`.
fn present(s: Option<&str>) -> Value<'_> {
    s.map_or(Value::Absent, |s| Value::Str(Cow::Borrowed(s)))
}

/// A text that is there and not empty, or `-`.
fn non_empty(s: Option<&str>) -> Value<'_> {
    s.map_or(Value::Absent, text)
}

fn addr(a: Option<SocketAddr>, port: bool, scratch: &mut String) -> Value<'_> {
    match a {
        None => Value::Absent,
        Some(a) => {
            if port {
                write_text::push_socket_addr(scratch, a);
            } else {
                write_text::push_ip(scratch, a.ip());
            }
            Value::Str(Cow::Borrowed(scratch))
        }
    }
}

/// A record as the format's operators see it.
struct View<'a> {
    record: &'a Record,
    hostname: &'a str,
    /// START_TIME's text of the current second and the last line's addresses (the
    /// worker's).
    caches: &'a RefCell<write_text::LineCaches>,
}

impl View<'_> {
    /// The record's start in `parts`; `false` without one.
    fn write_time(&self, parts: &[format::TimePart], out: &mut String) -> bool {
        let Some(since) = self
            .record
            .start
            .and_then(|s| s.duration_since(SystemTime::UNIX_EPOCH).ok())
        else {
            return false;
        };
        self.caches
            .borrow_mut()
            .time
            .write(parts, since.as_secs(), since.subsec_nanos(), out);
        true
    }

    /// The peer `a` in `out`: its connection's text when the record has it, else as
    /// [`View::push_addr`] writes it.
    fn push_peer(&self, slot: usize, out: &mut String, a: Option<SocketAddr>, port: bool) -> bool {
        match self.record.text(Field::Peer) {
            Some(text) if port && a.is_some() => {
                out.push_str(text);
                true
            }
            _ => self.push_addr(slot, out, a, port),
        }
    }

    /// `a` in `out` from the worker's cache of `slot`'s address; `false` without one.
    fn push_addr(&self, slot: usize, out: &mut String, a: Option<SocketAddr>, port: bool) -> bool {
        match a {
            None => false,
            Some(a) => {
                self.caches.borrow_mut().push_addr(slot, a, port, out);
                true
            }
        }
    }
}

/// `s` appended when there (empty or not).
fn push_present(out: &mut String, s: Option<&str>) -> bool {
    match s {
        Some(s) => {
            out.push_str(s);
            true
        }
        None => false,
    }
}

/// `s` appended when there and not empty.
fn push_non_empty(out: &mut String, s: Option<&str>) -> bool {
    push_present(out, s.filter(|s| !s.is_empty()))
}

impl Values for View<'_> {
    /// What `value_in` gives, written straight into the line: the operators of Istio's
    /// formats, each as its `Value` would be written (`write_text_is_value_as_text` holds
    /// them to it); the rest through `value_in`.
    #[inline(always)]
    fn write_text(&self, op: &Op, out: &mut String, scratch: &mut String) -> bool {
        let r = self.record;
        let num = |out: &mut String, n: u64| {
            write_text::push_u64(out, n);
            true
        };
        match op {
            Op::StartTime(parts) => self.write_time(parts, out),
            Op::Req(h) => r.push_header(h, false, out),
            Op::Resp(h) => r.push_header(h, true, out),
            Op::Protocol => push_non_empty(out, Some(r.protocol)),
            Op::ResponseCode => num(out, u64::from(r.status)),
            Op::ResponseFlags => {
                r.flags.write_to(out);
                true
            }
            Op::ResponseCodeDetails => push_non_empty(out, r.text(Field::Details)),
            Op::ConnectionTerminationDetails => false,
            Op::UpstreamLocalAddress => self.push_addr(0, out, r.upstream_local, true),
            Op::BytesReceived => num(out, r.bytes_received),
            Op::BytesSent => num(out, r.bytes_sent),
            Op::Duration => num(out, r.duration.as_millis() as u64),
            Op::UpstreamHost => push_present(out, r.text(Field::UpstreamHost)),
            Op::UpstreamCluster => push_non_empty(out, r.text(Field::UpstreamCluster)),
            Op::DownstreamRemoteAddress { port } => match (r.client_ip, r.peer) {
                (Some(ip), Some(peer)) if ip != peer.ip() => {
                    self.push_addr(1, out, Some(SocketAddr::new(ip, 0)), *port)
                }
                (_, peer) => self.push_peer(1, out, peer, *port),
            },
            Op::DownstreamDirectRemoteAddress { port } => self.push_peer(2, out, r.peer, *port),
            Op::DownstreamLocalAddress { port } => self.push_addr(3, out, r.local, *port),
            Op::RequestedServerName => push_non_empty(out, r.text(Field::Sni)),
            Op::RouteName => push_non_empty(out, r.text(Field::RouteName)),
            Op::Hostname => push_non_empty(out, Some(self.hostname)),
            Op::UpstreamTransportFailureReason
            | Op::DynamicMetadata { .. }
            | Op::FilterState(_) => {
                scratch.clear();
                format::push_value(self.value_in(op, scratch), out)
            }
        }
    }

    fn value(&self, op: &Op) -> Value<'_> {
        // What computed values are written into, then owned (the renderer uses `value_in`).
        let mut scratch = String::new();
        match self.value_in(op, &mut scratch) {
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
            Value::Json(j) => Value::Json(Cow::Owned(j.into_owned())),
            Value::Num(n) => Value::Num(n),
            Value::Absent => Value::Absent,
        }
    }

    fn value_in<'s>(&'s self, op: &Op, scratch: &'s mut String) -> Value<'s> {
        let r = self.record;
        match op {
            Op::StartTime(parts) => {
                if !self.write_time(parts, scratch) {
                    return Value::Absent;
                }
                Value::Str(Cow::Borrowed(scratch))
            }
            Op::Req(h) => r.header(h, false),
            Op::Resp(h) => r.header(h, true),
            Op::Protocol => text(r.protocol),
            Op::ResponseCode => Value::Num(u64::from(r.status)),
            Op::ResponseFlags => {
                r.flags.write_to(scratch);
                Value::Str(Cow::Borrowed(scratch))
            }
            Op::ResponseCodeDetails => non_empty(r.text(Field::Details)),
            // Envoy sets termination details on connections (an L4 RBAC denial), never on an
            // HTTP stream: a request's line has `-`, as Envoy's has.
            Op::ConnectionTerminationDetails => Value::Absent,
            Op::UpstreamLocalAddress => addr(r.upstream_local, true, scratch),
            // Envoy writes the reason with its spaces as `_`.
            Op::UpstreamTransportFailureReason => {
                r.text(Field::TransportFailure).map_or(Value::Absent, |t| {
                    scratch.extend(t.chars().map(|c| if c == ' ' { '_' } else { c }));
                    Value::Str(Cow::Borrowed(scratch))
                })
            }
            Op::BytesReceived => Value::Num(r.bytes_received),
            Op::BytesSent => Value::Num(r.bytes_sent),
            Op::Duration => Value::Num(r.duration.as_millis() as u64),
            Op::UpstreamHost => present(r.text(Field::UpstreamHost)),
            Op::UpstreamCluster => non_empty(r.text(Field::UpstreamCluster)),
            Op::DownstreamRemoteAddress { port } => match (r.client_ip, r.peer) {
                // Envoy's remote address from `x-forwarded-for` has no port: `:0`.
                (Some(ip), Some(peer)) if ip != peer.ip() => {
                    addr(Some(SocketAddr::new(ip, 0)), *port, scratch)
                }
                (_, peer) => addr(peer, *port, scratch),
            },
            Op::DownstreamDirectRemoteAddress { port } => addr(r.peer, *port, scratch),
            Op::DownstreamLocalAddress { port } => addr(r.local, *port, scratch),
            Op::RequestedServerName => non_empty(r.text(Field::Sni)),
            Op::RouteName => non_empty(r.text(Field::RouteName)),
            Op::Hostname => text(self.hostname),
            Op::DynamicMetadata { namespace, path } => {
                let Some(ns) = r.dynamic_metadata.as_ref().and_then(|m| m.get(namespace)) else {
                    return Value::Absent;
                };
                let mut keys = path.iter();
                let Some(first) = keys.next() else {
                    return Value::Json(Cow::Owned(serde_json::Value::Object(ns.clone())));
                };
                let mut at = ns.get(first);
                for k in keys {
                    at = at.and_then(|v| v.get(k));
                }
                at.map_or(Value::Absent, |v| Value::Json(Cow::Borrowed(v)))
            }
            Op::FilterState(key) => match key.as_str() {
                "warden.rule" => r.policy.as_deref().map_or(Value::Absent, text),
                "warden.shadow_rule" => r.shadow_policy.as_deref().map_or(Value::Absent, text),
                _ => Value::Absent,
            },
        }
    }
}

/// warden's own JSON line (`--access-log` without an Envoy format).
#[derive(Debug, serde::Serialize)]
struct Entry<'a> {
    time: String,
    client_ip: String,
    peer: String,
    protocol: &'a str,
    method: &'a str,
    authority: &'a str,
    path: &'a str,
    status: u16,
    duration_ms: f64,
    upstream: Option<&'a str>,
    route: Option<&'a str>,
    response_flags: String,
    request_id: Option<&'a str>,
    /// Envoy's `%RESPONSE_CODE_DETAILS%`, e.g. `rbac_access_denied_matched_policy[none]`.
    response_code_details: &'a str,
    /// The RBAC rule (`none` for an ALLOW miss) or rate limit rule that stopped the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'a str>,
    /// A dry-run policy or shadow-mode limit that would have stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow_policy: Option<&'a str>,
    /// Envoy's `%DYNAMIC_METADATA%`: what filters (Lua) wrote, by namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    dynamic_metadata: Option<&'a crate::core::dynamic_metadata::DynamicMetadata>,
}

fn warden_line(r: &Record, out: &mut String) {
    let mut flags = String::new();
    r.flags.write_to(&mut flags);
    let time = r
        .start
        .map(|t| humantime::format_rfc3339_millis(t).to_string())
        .unwrap_or_default();
    let request_id = r.text(Field::RequestId).unwrap_or("");
    let entry = Entry {
        time,
        client_ip: r.client_ip.map(|i| i.to_string()).unwrap_or_default(),
        peer: r.peer.map(|p| p.ip().to_string()).unwrap_or_default(),
        protocol: r.protocol,
        method: r.text(Field::Method).unwrap_or(""),
        authority: r.text(Field::Authority).unwrap_or(""),
        path: r
            .text(Field::Path)
            .unwrap_or("")
            .split('?')
            .next()
            .unwrap_or(""),
        status: r.status,
        duration_ms: r.duration.as_secs_f64() * 1000.0,
        upstream: r.text(Field::UpstreamHost),
        route: r.text(Field::RouteName),
        response_flags: flags,
        request_id: (!request_id.is_empty()).then_some(request_id),
        response_code_details: r.text(Field::Details).unwrap_or(""),
        policy: r.policy.as_deref(),
        shadow_policy: r.shadow_policy.as_deref(),
        dynamic_metadata: r.dynamic_metadata.as_ref(),
    };
    if let Ok(line) = serde_json::to_string(&entry) {
        out.push_str(&line);
        out.push('\n');
    }
}

/// Where records go: rendered on the worker into the writer's batch ([`batch`]), with the
/// count of those a full batch dropped.
#[derive(Clone)]
pub struct Sink {
    shared: Arc<batch::Shared>,
}

impl Sink {
    /// Render the record's line into the batch (a full batch drops it, counted), never
    /// waits; the record's memory goes back to this worker's pool.
    fn log(&self, record: Box<Record>) {
        self.shared.log(&record);
        record::recycle(record);
    }
}

/// A [`LineFormat`] made ready to write records' lines: a TEXT format compiled into steps.
#[derive(Debug)]
enum LineWriter {
    Warden,
    Text(text_plan::TextPlan),
    Json(Arc<Format>),
}

impl LineWriter {
    fn new(format: &LineFormat) -> Self {
        match format {
            LineFormat::Warden => LineWriter::Warden,
            LineFormat::Envoy(f) => match &f.body {
                format::Body::Text(pieces) => LineWriter::Text(text_plan::TextPlan::new(pieces)),
                format::Body::Json(_) => LineWriter::Json(f.clone()),
            },
        }
    }

    /// One line of `record` appended to `out`, with `hostname` for `%HOSTNAME%`, `caches`
    /// what the worker keeps from line to line and `scratch` computed values' text.
    fn render(
        &self,
        hostname: &str,
        caches: &RefCell<write_text::LineCaches>,
        record: &Record,
        out: &mut String,
        scratch: &mut String,
    ) {
        let view = View {
            record,
            hostname,
            caches,
        };
        match self {
            LineWriter::Warden => warden_line(record, out),
            LineWriter::Text(plan) => plan.render(&view, out, scratch),
            LineWriter::Json(f) => f.render_with(&view, out, scratch),
        }
    }
}

/// The open access log: its batch, what the workers copy for it, and the drop count.
pub struct AccessLog {
    sink: Sink,
    /// The request and response headers the format reads (copied per request).
    pub request_headers: Vec<http::HeaderName>,
    pub response_headers: Vec<http::HeaderName>,
    /// The format writes `DYNAMIC_METADATA` (warden's JSON always does).
    pub reads_metadata: bool,
}

impl AccessLog {
    pub fn open(target: &AccessLogTarget) -> Result<Self, ProxyError> {
        Self::open_with(target, LineFormat::Warden)
    }

    pub fn open_with(target: &AccessLogTarget, format: LineFormat) -> Result<Self, ProxyError> {
        let out: Box<dyn Write + Send> = match target {
            AccessLogTarget::Stdout => Box::new(std::io::stdout()),
            AccessLogTarget::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| ProxyError::AccessLog {
                        path: path.clone(),
                        source,
                    })?,
            ),
        };
        let (request_headers, response_headers, reads_metadata) = match &format {
            LineFormat::Warden => (Vec::new(), Vec::new(), true),
            LineFormat::Envoy(f) => (
                f.request_headers.clone(),
                f.response_headers.clone(),
                f.reads_metadata(),
            ),
        };
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let shared = batch::open(format, hostname, out).map_err(|source| ProxyError::Thread {
            what: "access log writer",
            source,
        })?;
        Ok(AccessLog {
            sink: Sink { shared },
            request_headers,
            response_headers,
            reads_metadata,
        })
    }

    /// A request's record, and the `x-request-id` made for it when it came without one.
    pub fn capture(&self, request: &record::Request<'_>) -> (Box<Record>, Option<[u8; 16]>) {
        record::capture(request, &self.request_headers)
    }

    /// Queue a record; a full queue drops it (counted), never waits.
    pub fn log(&self, record: Box<Record>) {
        self.sink.log(record);
    }

    /// `body` wrapped to queue `record` at its end, with the bytes it sent (see [`sent`]).
    pub fn log_at_end<B>(&self, record: Box<Record>, body: B) -> sent::LogAtEnd<B> {
        sent::LogAtEnd::new(body, record, self.sink.clone())
    }

    /// `record` queued when the body that holds this ends, with the bytes it sent (a body
    /// type that counts for itself; see [`sent`]).
    pub fn count_sent(&self, record: Box<Record>) -> sent::SentCount {
        sent::SentCount::new(record, self.sink.clone())
    }

    /// Records dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.sink.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Format {
    /// Whether an operator reads dynamic metadata (copied per request only then).
    pub fn reads_metadata(&self) -> bool {
        use format::{Body, JsonTemplate, Piece};
        fn pieces(p: &[Piece]) -> bool {
            p.iter()
                .any(|p| matches!(p, Piece::Op(Op::DynamicMetadata { .. }, _)))
        }
        fn fields(f: &[(String, JsonTemplate)]) -> bool {
            f.iter().any(|(_, t)| match t {
                JsonTemplate::Pieces(p) => pieces(p),
                JsonTemplate::Object(o) => fields(o),
                JsonTemplate::Literal(_) => false,
            })
        }
        match &self.body {
            Body::Text(p) => pieces(p),
            Body::Json(line) => fields(&line.fields),
        }
    }
}

/// The access log `warden proxy` runs with: `--access-log` (`flag`) wins over the mesh
/// config's `accessLogFile`; the line is Istio's (`accessLogEncoding`, `accessLogFormat`, or
/// Istio's default for the encoding) whenever the mesh config says any of them, else
/// warden's JSON. A format warden cannot write is a problem naming the mesh config's field.
pub fn from_mesh(
    flag: Option<&str>,
    mesh: &warden_config::mesh_config::MeshConfig,
) -> Result<Option<(AccessLogTarget, LineFormat)>, Box<warden_config::Problem>> {
    use warden_config::mesh_config::AccessLogEncoding;
    let from_mesh = mesh.access_log_file.as_deref().filter(|f| !f.is_empty());
    let Some(target) = flag.or(from_mesh).map(AccessLogTarget::parse) else {
        return Ok(None);
    };
    let istio = from_mesh.is_some()
        || mesh.access_log_encoding.is_some()
        || mesh.access_log_format.is_some();
    if !istio {
        return Ok(Some((target, LineFormat::Warden)));
    }
    let text = mesh
        .access_log_format
        .as_deref()
        .filter(|f| !f.trim().is_empty());
    let parsed = match (mesh.access_log_encoding.unwrap_or_default(), text) {
        (AccessLogEncoding::Text, None) => Format::text(format::ISTIO_TEXT),
        (AccessLogEncoding::Text, Some(f)) => Format::text(f),
        (AccessLogEncoding::Json, None) => Ok(Format::istio_json()),
        (AccessLogEncoding::Json, Some(f)) => Format::json(f),
    };
    match parsed {
        Ok(f) => Ok(Some((target, LineFormat::Envoy(Arc::new(f))))),
        Err(message) => Err(Box::new(warden_config::Problem {
            location: mesh.access_log_format_at.clone().unwrap_or_default(),
            message,
            code: None,
        })),
    }
}

/// RFC 3339 UTC time with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A view seen through `Values::value` alone (the default `value_in`).
    struct Plain<'a>(&'a View<'a>);

    impl Values for Plain<'_> {
        fn value(&self, op: &Op) -> Value<'_> {
            self.0.value(op)
        }
    }

    /// Every operator warden writes.
    const EVERY_OPERATOR: &str = "%START_TIME% %START_TIME(%s.%6f %Y)% %REQ(:METHOD)% \
%REQ(:PATH)% %REQ(:AUTHORITY)% %REQ(:SCHEME)% %REQ(X-REQUEST-ID)% %REQ(USER-AGENT)% \
%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %RESP(SERVER?:STATUS)% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \
%PROTOCOL% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% \
%CONNECTION_TERMINATION_DETAILS% %UPSTREAM_TRANSPORT_FAILURE_REASON% %BYTES_RECEIVED% \
%BYTES_SENT% %DURATION% %UPSTREAM_HOST% %UPSTREAM_CLUSTER% %UPSTREAM_LOCAL_ADDRESS% \
%DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT% \
%DOWNSTREAM_DIRECT_REMOTE_ADDRESS% %DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT% \
%DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT% %REQUESTED_SERVER_NAME% \
%ROUTE_NAME% %HOSTNAME% %DYNAMIC_METADATA(lua:a)% %DYNAMIC_METADATA(lua)% \
%FILTER_STATE(warden.rule)% %FILTER_STATE(warden.shadow_rule)% %FILTER_STATE(other)%";

    /// Records with every field there, none, or there but empty, over IPv4 and IPv6.
    fn records(format: &Format) -> Vec<Record> {
        let mut flags = crate::core::local_reply::ResponseFlags::default();
        flags.set(crate::core::local_reply::ResponseFlag::UpstreamReset);
        flags.set(crate::core::local_reply::ResponseFlag::RateLimited);
        let mut full = Record {
            start: Some(SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789)),
            duration: Duration::from_micros(12_345),
            scheme: "https",
            protocol: "HTTP/1.1",
            status: 503,
            flags,
            policy: Some(Arc::from("ns.rule")),
            shadow_policy: Some(Arc::from("dry")),
            bytes_received: 12,
            bytes_sent: 65_536,
            upstream_local: Some("10.0.0.1:40000".parse().expect("addr")),
            peer: Some("127.0.0.1:4000".parse().expect("addr")),
            client_ip: Some("10.1.2.3".parse().expect("ip")),
            local: Some("127.0.0.1:8080".parse().expect("addr")),
            dynamic_metadata: Some(
                [(
                    "lua".to_string(),
                    serde_json::json!({"a": "x y", "n": 1})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                )]
                .into(),
            ),
            ..Record::default()
        };
        for (field, text) in [
            (Field::Method, "POST"),
            (Field::Path, "/p?q=1"),
            (Field::Authority, "example.com"),
            (Field::RequestId, "id-1"),
            (
                Field::Details,
                "upstream_reset_before_response_started{connection_termination}",
            ),
            (Field::UpstreamHost, "10.0.0.2:80"),
            (
                Field::UpstreamCluster,
                "outbound|80||b.ns.svc.cluster.local",
            ),
            (Field::RouteName, "r1"),
            (Field::Sni, "example.com"),
            (Field::TransportFailure, "TLS error: bad cert"),
            // The peer's text, as its connection renders it.
            (Field::Peer, "127.0.0.1:4000"),
        ] {
            full.set_text(field, text);
        }
        full.set_request_headers(&format.request_headers, |n| Some(n.as_str().as_bytes()));
        full.take_response_headers(&format.response_headers, |_| Some(&b"7"[..]));
        let mut empty = Record {
            start: Some(SystemTime::UNIX_EPOCH),
            peer: Some("[2001:db8::1]:5000".parse().expect("addr")),
            client_ip: Some("2001:db8::1".parse().expect("ip")),
            local: Some("[::1]:80".parse().expect("addr")),
            upstream_local: Some("[fe80::1%2]:9".parse().expect("addr")),
            ..Record::default()
        };
        for field in [
            Field::Method,
            Field::Path,
            Field::Authority,
            Field::RequestId,
            Field::Details,
            Field::UpstreamHost,
            Field::UpstreamCluster,
            Field::RouteName,
            Field::Sni,
            Field::TransportFailure,
        ] {
            empty.set_text(field, "");
        }
        empty.set_text(Field::Peer, "[2001:db8::1]:5000");
        empty.set_request_headers(&format.request_headers, |_| Some(&b""[..]));
        empty.take_response_headers(&format.response_headers, |_| None);
        let mut v6_client = Record {
            peer: Some("127.0.0.1:4000".parse().expect("addr")),
            client_ip: Some("2001:db8::7".parse().expect("ip")),
            ..Record::default()
        };
        v6_client.set_text(Field::Peer, "127.0.0.1:4000");
        v6_client.set_request_headers(&format.request_headers, |_| None);
        vec![full, empty, v6_client, Record::default()]
    }

    /// A text line's direct writing gives what each operator's `Value` gives as text.
    #[test]
    fn write_text_is_value_as_text() {
        let format = Format::text(EVERY_OPERATOR).expect("format");
        let format::Body::Text(pieces) = &format.body else {
            panic!("text");
        };
        let time = RefCell::default();
        for (i, record) in records(&format).iter().enumerate() {
            for hostname in ["h", ""] {
                let view = View {
                    record,
                    hostname,
                    caches: &time,
                };
                for piece in pieces {
                    let format::Piece::Op(op, _) = piece else {
                        continue;
                    };
                    let (mut direct, mut scratch) = (String::new(), String::new());
                    if !view.write_text(op, &mut direct, &mut scratch) {
                        direct.push('-');
                    }
                    let mut want = String::new();
                    if !format::push_value(view.value(op), &mut want) {
                        want.push('-');
                    }
                    assert_eq!(direct, want, "record {i}: {op:?}");
                }
            }
        }
    }

    /// Lines as the writer renders them, byte for byte (Istio's default among the formats).
    #[test]
    fn istios_text_line_for_each_record() {
        let format = Format::text(format::ISTIO_TEXT).expect("istio");
        let records = records(&format);
        let time = RefCell::default();
        let want = [
            "[2023-11-14T22:13:20.123Z] \"POST x-envoy-original-path HTTP/1.1\" 503 UC,RL \
upstream_reset_before_response_started{connection_termination} - \"TLS_error:_bad_cert\" 12 \
65536 12 7 \"x-forwarded-for\" \"user-agent\" \"id-1\" \"example.com\" \"10.0.0.2:80\" \
outbound|80||b.ns.svc.cluster.local 10.0.0.1:40000 127.0.0.1:8080 10.1.2.3:0 example.com r1\n",
            // Texts there but empty: `-` only where Envoy's operator treats empty as absent.
            "[1970-01-01T00:00:00.000Z] \"  -\" 0 - - - \"\" 0 0 0 - \"\" \"\" \"-\" \"-\" \
\"\" - [fe80::1%2]:9 [::1]:80 [2001:db8::1]:5000 - -\n",
            "[-] \"- - -\" 0 - - - \"-\" 0 0 0 - \"-\" \"-\" \"-\" \"-\" \"-\" - - - [2001:db8::7]:0 - -\n",
            "[-] \"- - -\" 0 - - - \"-\" 0 0 0 - \"-\" \"-\" \"-\" \"-\" \"-\" - - - - - -\n",
        ];
        for (record, want) in records.iter().zip(want) {
            let view = View {
                record,
                hostname: "h",
                caches: &time,
            };
            let mut out = String::new();
            format.render_with(&view, &mut out, &mut String::new());
            assert_eq!(out, want);
            let mut plain = String::new();
            format.render(&Plain(&view), &mut plain);
            assert_eq!(plain, want);
            let mut planned = String::new();
            let LineWriter::Text(plan) =
                LineWriter::new(&LineFormat::Envoy(Arc::new(format.clone())))
            else {
                panic!("text");
            };
            plan.render(&view, &mut planned, &mut String::new());
            assert_eq!(planned, want);
        }
    }

    /// A TEXT format's plan writes what the format writes, for every operator (with length
    /// limits, alternatives, literals around and between them).
    #[test]
    fn plan_lines_are_the_formats() {
        let formats = [
            EVERY_OPERATOR.to_string(),
            EVERY_OPERATOR.replace("% %", "%%"),
            format!("é{EVERY_OPERATOR}é"),
            "%REQ(:METHOD):2%-%REQ(:PATH?X-REQUEST-ID):0%%CONNECTION_TERMINATION_DETAILS:0%\
%CONNECTION_TERMINATION_DETAILS:3%|%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME?:STATUS)% \
%REQ(USER-AGENT?:AUTHORITY)% %RESPONSE_CODE:1% %START_TIME:4% lit"
                .to_string(),
            String::new(),
        ];
        let time = RefCell::default();
        for text in &formats {
            let format = Format::text(text).expect("format");
            let LineWriter::Text(plan) =
                LineWriter::new(&LineFormat::Envoy(Arc::new(format.clone())))
            else {
                panic!("text");
            };
            for (i, record) in records(&format).iter().enumerate() {
                for hostname in ["h", ""] {
                    let view = View {
                        record,
                        hostname,
                        caches: &time,
                    };
                    let (mut want, mut planned) = (String::new(), String::new());
                    format.render_with(&view, &mut want, &mut String::new());
                    plan.render(&view, &mut planned, &mut String::new());
                    assert_eq!(planned, want, "{text} record {i}");
                }
            }
        }
    }

    /// A JSON line is, byte for byte, what the `serde_json` map of its values gave (keys
    /// sorted, types kept), for Istio's default and a dictionary with every kind of value.
    #[test]
    fn json_lines_are_what_a_serde_json_map_gives() {
        let custom = format!(
            r#"{{"all":"{EVERY_OPERATOR}","code":"%RESPONSE_CODE%","st":"%RESP(SERVER?:STATUS)%","md":"%DYNAMIC_METADATA(lua)%","mdc":"%DYNAMIC_METADATA(lua):3%","ua":"%REQ(USER-AGENT):2%","p":"%REQ(:PATH)%","z":{{"b":"%REQ(:METHOD)%","a":[1,"x"],"n":null,"t":true,"f":1.5,"e":{{}}}},"lit":"no \"ops\"","empty":"","A":"%BYTES_SENT%","rule":"%FILTER_STATE(warden.rule)%"}}"#
        );
        for format in [Format::istio_json(), Format::json(&custom).expect("custom")] {
            let format::Body::Json(line) = &format.body else {
                panic!("json");
            };
            let mut records = records(&format);
            // Texts JSON escapes.
            let mut odd = Record::default();
            odd.set_text(Field::Path, "/a\"b\\c\n\u{1}\u{7f}é");
            odd.set_text(Field::Method, "\t");
            odd.set_request_headers(&format.request_headers, |_| Some(&b"ua\"\x1f"[..]));
            odd.take_response_headers(&format.response_headers, |_| Some(&b"s\\"[..]));
            records.push(odd);
            let time = RefCell::default();
            for (i, record) in records.iter().enumerate() {
                let view = View {
                    record,
                    hostname: "h\"",
                    caches: &time,
                };
                let mut scratch = String::new();
                let mut want = serde_json::Value::Object(format::render_object(
                    &line.fields,
                    &view,
                    &mut scratch,
                ))
                .to_string();
                want.push('\n');
                let mut out = String::new();
                format.render_with(&view, &mut out, &mut scratch);
                assert_eq!(out, want, "record {i}");
            }
        }
    }

    #[test]
    fn an_envoy_format_renders_a_record() {
        let format =
            Format::text("%REQ(:METHOD)% %REQ(X-REQUEST-ID)% %REQ(USER-AGENT)% %RESP(SERVER?:STATUS)% %DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT% %UPSTREAM_CLUSTER% %RESPONSE_FLAGS% %FILTER_STATE(warden.rule)%")
                .expect("format");
        let mut flags = crate::core::local_reply::ResponseFlags::default();
        flags.set(crate::core::local_reply::ResponseFlag::RateLimited);
        let mut record = Record {
            status: 429,
            flags,
            policy: Some(Arc::from("per-ip")),
            peer: Some("127.0.0.1:4000".parse().expect("addr")),
            client_ip: Some("10.1.2.3".parse().expect("ip")),
            ..Record::default()
        };
        record.set_text(Field::Method, "GET");
        record.set_text(Field::RequestId, "abc");
        record.set_request_headers(&format.request_headers, |_| Some(&b"curl/8"[..]));
        record.take_response_headers(&format.response_headers, |_| None);
        let time = RefCell::default();
        let view = View {
            record: &record,
            hostname: "h",
            caches: &time,
        };
        // The writer's way (a scratch kept between lines) and the plain one write the same.
        let mut out = String::new();
        format.render_with(&view, &mut out, &mut String::new());
        let mut plain = String::new();
        format.render(&Plain(&view), &mut plain);
        assert_eq!(out, plain);
        assert_eq!(out, "GET abc curl/8 429 10.1.2.3:0 127.0.0.1 - RL per-ip\n");
    }
}
