//! The access log. A worker copies what the format reads of a request into a [`Record`] and
//! hands it to a bounded queue; one writer thread renders the lines (Envoy's format strings
//! and JSON dictionaries, or warden's own JSON shape) and writes them in batches. A full queue
//! drops the record and counts it: a slow disk never blocks a request. With no access log,
//! nothing of this runs.

pub mod format;
pub mod sent;

use crate::core::error::ProxyError;
use crate::core::local_reply::ResponseFlags;
use format::{Format, HeaderOp, HeaderRef, Op, Value, Values};
use http::{HeaderMap, HeaderValue, Method};
use std::borrow::Cow;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Records waiting for the writer; more are dropped (and counted).
const QUEUE: usize = 16 * 1024;
/// How often the writer takes what is queued: [`QUEUE`] holds this long at ~800k requests/s.
const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// Rendered lines are written in pieces of about this many bytes.
const WRITE_AT: usize = 64 * 1024;

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

/// What the log line of one request is made of, copied on the worker (the rendering happens
/// on the writer thread).
#[derive(Debug, Default)]
pub struct Record {
    pub start: Option<SystemTime>,
    pub duration: Duration,
    pub method: Option<Method>,
    /// `:path` as the request came (with its query).
    pub path: String,
    pub authority: String,
    pub scheme: &'static str,
    pub protocol: &'static str,
    /// The request's `x-request-id`, or the one the proxy made for it.
    pub request_id: String,
    /// The format's named request headers, in its order.
    pub request_headers: Vec<Option<HeaderValue>>,
    pub response_headers: Vec<Option<HeaderValue>>,
    pub status: u16,
    pub flags: ResponseFlags,
    pub details: String,
    /// The RBAC policy or rate limit rule that decided (`FILTER_STATE(warden.rule)`).
    pub policy: Option<Arc<str>>,
    pub shadow_policy: Option<Arc<str>>,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub upstream_host: Option<http::uri::Authority>,
    /// The upstream connection's own address.
    pub upstream_local: Option<SocketAddr>,
    /// Why the upstream connection's transport failed (TLS origination).
    pub transport_failure: Option<Box<str>>,
    pub upstream_cluster: Option<String>,
    pub route_name: Option<Arc<str>>,
    /// The TCP peer.
    pub peer: Option<SocketAddr>,
    /// The trusted client address (XFF rules).
    pub client_ip: Option<IpAddr>,
    pub local: Option<SocketAddr>,
    pub sni: Option<String>,
    pub dynamic_metadata: Option<crate::core::dynamic_metadata::DynamicMetadata>,
}

impl Record {
    /// The format's response headers of `headers`.
    pub fn take_response_headers(&mut self, names: &[http::HeaderName], headers: &HeaderMap) {
        self.response_headers = names.iter().map(|n| headers.get(n).cloned()).collect();
    }

    fn header<'a>(&'a self, op: &HeaderOp, response: bool) -> Value<'a> {
        let one = |r: &HeaderRef| -> Value<'a> {
            let named = |list: &'a [Option<HeaderValue>], i: usize| match list.get(i) {
                Some(Some(v)) => Value::Str(String::from_utf8_lossy(v.as_bytes())),
                _ => Value::Absent,
            };
            match r {
                HeaderRef::Method => self
                    .method
                    .as_ref()
                    .map_or(Value::Absent, |m| Value::Str(Cow::Borrowed(m.as_str()))),
                HeaderRef::Path => text(&self.path),
                HeaderRef::Authority => text(&self.authority),
                HeaderRef::Scheme => text(self.scheme),
                HeaderRef::RequestId => text(&self.request_id),
                HeaderRef::Status => Value::Num(u64::from(self.status)),
                HeaderRef::Named(i) if response => named(&self.response_headers, *i),
                HeaderRef::Named(i) => named(&self.request_headers, *i),
            }
        };
        match (one(&op.main), &op.alt) {
            (Value::Absent, Some(alt)) => one(alt),
            (v, _) => v,
        }
    }
}

fn text(s: &str) -> Value<'_> {
    if s.is_empty() {
        Value::Absent
    } else {
        Value::Str(Cow::Borrowed(s))
    }
}

fn addr(a: Option<SocketAddr>, port: bool) -> Value<'static> {
    match a {
        None => Value::Absent,
        Some(a) if port => Value::Str(Cow::Owned(a.to_string())),
        Some(a) => Value::Str(Cow::Owned(a.ip().to_string())),
    }
}

/// A record as the format's operators see it.
struct View<'a> {
    record: &'a Record,
    hostname: &'a str,
}

impl Values for View<'_> {
    fn value(&self, op: &Op) -> Value<'_> {
        let r = self.record;
        match op {
            Op::StartTime(parts) => {
                let Some(since) = r
                    .start
                    .and_then(|s| s.duration_since(SystemTime::UNIX_EPOCH).ok())
                else {
                    return Value::Absent;
                };
                let mut out = String::new();
                format::write_time(parts, since.as_secs(), since.subsec_nanos(), &mut out);
                Value::Str(Cow::Owned(out))
            }
            Op::Req(h) => r.header(h, false),
            Op::Resp(h) => r.header(h, true),
            Op::Protocol => text(r.protocol),
            Op::ResponseCode => Value::Num(u64::from(r.status)),
            Op::ResponseFlags => {
                let mut out = String::new();
                r.flags.write_to(&mut out);
                Value::Str(Cow::Owned(out))
            }
            Op::ResponseCodeDetails => text(&r.details),
            // Envoy sets termination details on connections (an L4 RBAC denial), never on an
            // HTTP stream: a request's line has `-`, as Envoy's has.
            Op::ConnectionTerminationDetails => Value::Absent,
            Op::UpstreamLocalAddress => addr(r.upstream_local, true),
            // Envoy writes the reason with its spaces as `_`.
            Op::UpstreamTransportFailureReason => {
                r.transport_failure.as_deref().map_or(Value::Absent, |t| {
                    Value::Str(Cow::Owned(t.replace(' ', "_")))
                })
            }
            Op::BytesReceived => Value::Num(r.bytes_received),
            Op::BytesSent => Value::Num(r.bytes_sent),
            Op::Duration => Value::Num(r.duration.as_millis() as u64),
            Op::UpstreamHost => r
                .upstream_host
                .as_ref()
                .map_or(Value::Absent, |h| Value::Str(Cow::Borrowed(h.as_str()))),
            Op::UpstreamCluster => r.upstream_cluster.as_deref().map_or(Value::Absent, text),
            Op::DownstreamRemoteAddress { port } => match (r.client_ip, r.peer) {
                // Envoy's remote address from `x-forwarded-for` has no port: `:0`.
                (Some(ip), Some(peer)) if ip != peer.ip() => {
                    addr(Some(SocketAddr::new(ip, 0)), *port)
                }
                (_, peer) => addr(peer, *port),
            },
            Op::DownstreamDirectRemoteAddress { port } => addr(r.peer, *port),
            Op::DownstreamLocalAddress { port } => addr(r.local, *port),
            Op::RequestedServerName => r.sni.as_deref().map_or(Value::Absent, text),
            Op::RouteName => r.route_name.as_deref().map_or(Value::Absent, text),
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
    let upstream = r.upstream_host.as_ref().map(|a| a.as_str());
    let entry = Entry {
        time,
        client_ip: r.client_ip.map(|i| i.to_string()).unwrap_or_default(),
        peer: r.peer.map(|p| p.ip().to_string()).unwrap_or_default(),
        protocol: r.protocol,
        method: r.method.as_ref().map_or("", Method::as_str),
        authority: &r.authority,
        path: r.path.split('?').next().unwrap_or(""),
        status: r.status,
        duration_ms: r.duration.as_secs_f64() * 1000.0,
        upstream,
        route: r.route_name.as_deref(),
        response_flags: flags,
        request_id: (!r.request_id.is_empty()).then_some(r.request_id.as_str()),
        response_code_details: &r.details,
        policy: r.policy.as_deref(),
        shadow_policy: r.shadow_policy.as_deref(),
        dynamic_metadata: r.dynamic_metadata.as_ref(),
    };
    if let Ok(line) = serde_json::to_string(&entry) {
        out.push_str(&line);
        out.push('\n');
    }
}

/// Where records go: the writer's queue, and the count of those a full queue dropped.
#[derive(Clone)]
pub struct Sink {
    tx: mpsc::SyncSender<Box<Record>>,
    dropped: Arc<AtomicU64>,
}

impl Sink {
    /// Queue a record; a full queue drops it (counted), never waits.
    fn log(&self, record: Box<Record>) {
        if self.tx.try_send(record).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The open access log: its queue, what the workers copy for it, and the drop count.
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
        let mut out: Box<dyn Write + Send> = match target {
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
        let (tx, rx) = mpsc::sync_channel::<Box<Record>>(QUEUE);
        std::thread::Builder::new()
            .name("warden-access-log".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut buf = String::with_capacity(64 * 1024);
                let render = |r: &Record, buf: &mut String| match &format {
                    LineFormat::Warden => warden_line(r, buf),
                    LineFormat::Envoy(f) => f.render(
                        &View {
                            record: r,
                            hostname: &hostname,
                        },
                        buf,
                    ),
                };
                let mut write = |buf: &mut String| {
                    if !buf.is_empty()
                        && out
                            .write_all(buf.as_bytes())
                            .and_then(|_| out.flush())
                            .is_err()
                    {
                        tracing::warn!("access log write failed");
                    }
                    buf.clear();
                };
                // The writer drains the queue every `DRAIN_EVERY` instead of waiting on it: a
                // receiver that waits is woken by each send, a futex call and a context switch
                // per request on the worker's side (bench/telemetry.sh: 0.56 of the throughput
                // without a log). Envoy's own access log flushes on an interval too.
                loop {
                    let open = loop {
                        match rx.try_recv() {
                            Ok(record) => render(&record, &mut buf),
                            Err(mpsc::TryRecvError::Empty) => break true,
                            Err(mpsc::TryRecvError::Disconnected) => break false,
                        }
                        if buf.len() >= WRITE_AT {
                            write(&mut buf);
                        }
                    };
                    write(&mut buf);
                    if !open {
                        return;
                    }
                    std::thread::sleep(DRAIN_EVERY);
                }
            })
            .map_err(|source| ProxyError::Thread {
                what: "access log writer",
                source,
            })?;
        Ok(AccessLog {
            sink: Sink {
                tx,
                dropped: Arc::new(AtomicU64::new(0)),
            },
            request_headers,
            response_headers,
            reads_metadata,
        })
    }

    /// Queue a record; a full queue drops it (counted), never waits.
    pub fn log(&self, record: Box<Record>) {
        self.sink.log(record);
    }

    /// `body` wrapped to queue `record` at its end, with the bytes it sent (see [`sent`]).
    pub fn log_at_end<B>(&self, record: Box<Record>, body: B) -> sent::LogAtEnd<B> {
        sent::LogAtEnd::new(body, record, self.sink.clone())
    }

    /// Records dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.sink.dropped.load(Ordering::Relaxed)
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
            Body::Json(f) => fields(f),
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

    #[test]
    fn an_envoy_format_renders_a_record() {
        let format =
            Format::text("%REQ(:METHOD)% %REQ(X-REQUEST-ID)% %REQ(USER-AGENT)% %RESP(SERVER?:STATUS)% %DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT% %UPSTREAM_CLUSTER% %RESPONSE_FLAGS% %FILTER_STATE(warden.rule)%")
                .expect("format");
        let mut flags = ResponseFlags::default();
        flags.set(crate::core::local_reply::ResponseFlag::RateLimited);
        let record = Record {
            method: Some(Method::GET),
            request_id: "abc".into(),
            request_headers: vec![Some(HeaderValue::from_static("curl/8"))],
            response_headers: vec![None],
            status: 429,
            flags,
            policy: Some(Arc::from("per-ip")),
            peer: Some("127.0.0.1:4000".parse().expect("addr")),
            client_ip: Some("10.1.2.3".parse().expect("ip")),
            ..Record::default()
        };
        let mut out = String::new();
        format.render(
            &View {
                record: &record,
                hostname: "h",
            },
            &mut out,
        );
        assert_eq!(out, "GET abc curl/8 429 10.1.2.3:0 127.0.0.1 - RL per-ip\n");
    }
}
