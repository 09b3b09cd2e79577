//! Distributed tracing on the request path, as Envoy does it for Istio: the caller's trace
//! context read from the request (W3C `traceparent`, or B3 for a Zipkin provider), the
//! sampling decision (`warden_trace::sampling`), this hop's span id sent upstream as the
//! parent, and, for a sampled request, the span with Envoy's and Istio's tags once it is
//! answered. The queue and the exporter are in `trace_export`.
//!
//! Cost: without a [`TracePlan`] nothing here runs. With one, every request has its header
//! lines looked over once for a trace header's name (a map: a lookup per name), one random
//! draw, an id pair and the propagation headers (one or four small values); a sampled and
//! reported request also copies the few request fields its span names into one box, and its
//! span is made from that on the exporter's thread once it is answered.

use crate::core::local_reply::ResponseFlags;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::SystemTime;
use warden_trace::context::{self, B3};
use warden_trace::hex;
use warden_trace::otlp::Exporter;
use warden_trace::sampling::{self, SamplingInput};
use warden_trace::{Propagation, Span, SpanId, SpanKind, TraceId};

pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
pub static X_B3_TRACEID: HeaderName = HeaderName::from_static("x-b3-traceid");
pub static X_B3_SPANID: HeaderName = HeaderName::from_static("x-b3-spanid");
pub static X_B3_PARENTSPANID: HeaderName = HeaderName::from_static("x-b3-parentspanid");
pub static X_B3_SAMPLED: HeaderName = HeaderName::from_static("x-b3-sampled");
pub static X_B3_FLAGS: HeaderName = HeaderName::from_static("x-b3-flags");
pub static B3_SINGLE: HeaderName = HeaderName::from_static("b3");
pub static X_CLIENT_TRACE_ID: HeaderName = HeaderName::from_static("x-client-trace-id");
pub static X_ENVOY_FORCE_TRACE: HeaderName = HeaderName::from_static("x-envoy-force-trace");
static X_ENVOY_DOWNSTREAM_SERVICE_CLUSTER: HeaderName =
    HeaderName::from_static("x-envoy-downstream-service-cluster");

/// A request's headers as the pipeline holds them: the fast path's lines kept as read (no map
/// is built for tracing), or the map.
#[derive(Clone, Copy)]
pub struct Headers<'a> {
    pub map: &'a HeaderMap,
    pub lines: Option<&'a warden_http1::request_lines::RequestLines>,
}

impl<'a> Headers<'a> {
    pub fn get(&self, name: &HeaderName) -> Option<&'a [u8]> {
        match self.lines {
            Some(lines) => lines.get(name.as_str().as_bytes()),
            None => self.map.get(name).map(HeaderValue::as_bytes),
        }
    }
}

/// Envoy's `max_path_tag_length` default: the longest `http.url` tag.
pub const DEFAULT_MAX_PATH_TAG_LENGTH: usize = 256;

/// A proxy's tracing, compiled with its snapshot: how contexts travel, how often a request is
/// sampled, and where sampled spans go.
#[derive(Debug)]
pub struct TracePlan {
    /// The provider's name (for `warden check`).
    pub provider: String,
    pub propagation: Propagation,
    /// The sampling percentage as Envoy's fraction of 10000.
    pub per_ten_thousand: u32,
    /// Where sampled spans are sent; none: not reported (a Zipkin provider, whose export warden
    /// does not have, or Telemetry's `disableSpanReporting`).
    pub report: Option<Arc<Report>>,
    pub max_path_tag_length: usize,
    /// Tags on every span: Istio's `istio.*`, `component`, and literal and environment custom
    /// tags.
    pub tags: Vec<(Cow<'static, str>, String)>,
    /// Custom tags from a request header: (tag, header, default when absent).
    pub header_tags: Vec<(Cow<'static, str>, HeaderName, String)>,
}

impl TracePlan {
    /// One line for `warden check`.
    pub fn describe(&self) -> String {
        let format = match (self.propagation.w3c, self.propagation.b3) {
            (true, _) => "W3C traceparent",
            (false, true) => "B3",
            (false, false) => "no headers",
        };
        let percent = f64::from(self.per_ten_thousand) / 100.0;
        let spans = match &self.report {
            Some(r) => format!("spans over OTLP/gRPC to {}", r.address),
            None => "spans not reported".to_owned(),
        };
        format!(
            "provider {}, {format}, {percent}% sampled, {spans}",
            self.provider
        )
    }
}

/// An OTLP collector and who reports to it.
#[derive(Debug)]
pub struct Report {
    /// `host:port` of the collector's gRPC port.
    pub address: String,
    pub exporter: Exporter,
}

/// One request's trace: its ids, its decision, and (sampled and reported) what its span needs.
#[derive(Debug)]
pub struct RequestTrace {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// The caller's span.
    pub parent: Option<SpanId>,
    pub sampled: bool,
    pub started: Option<Box<Started>>,
}

/// What a reported span names of its request, copied as the request starts.
#[derive(Debug)]
pub struct Started {
    start: SystemTime,
    plan: Arc<TracePlan>,
    report: Arc<Report>,
    /// The span's name when its cluster does not give one ([`operation_name`]).
    fallback_operation: String,
    method: String,
    url: String,
    protocol: &'static str,
    user_agent: String,
    downstream_cluster: String,
    /// The request's `x-request-id`, or the one made for it ([`Started::made_request_id`]).
    request_id: String,
    made_request_id: Option<[u8; 16]>,
    client_trace_id: Option<String>,
    request_size: u64,
    trace_state: Option<String>,
    peer: SocketAddr,
    /// The header custom tags' values.
    header_tags: Vec<(Cow<'static, str>, String)>,
}

/// What a reported span names of its request besides its headers ([`start`] asks for it only
/// for a sampled request of a plan that reports).
pub struct RequestFacts<'a> {
    pub method: &'a http::Method,
    pub scheme: &'static str,
    pub authority: &'a str,
    pub path_and_query: &'a str,
    pub version: http::Version,
    pub peer: SocketAddr,
    /// The listener's port (of the span name when no cluster gives one).
    pub port: u16,
    /// An `x-request-id` already made for this request (the access log's).
    pub made_request_id: Option<[u8; 16]>,
}

/// The request's trace: the caller's context (by the plan's propagation), the decision, a new
/// span id for this hop; `client_ip` is the trusted client address (an internal one may force
/// sampling). `facts` are made only when the request's span is reported: most requests are
/// not sampled, and they pay for nothing else.
pub fn start<'f>(
    plan: &Arc<TracePlan>,
    headers: Headers<'_>,
    client_ip: IpAddr,
    facts: impl FnOnce() -> RequestFacts<'f>,
) -> RequestTrace {
    // Most requests bring no trace header: no context to parse, nothing forces the decision
    // (lines kept as read are looked over once for a name first, without collecting).
    let propagation = plan.propagation;
    let quick_none = headers.lines.is_some_and(|lines| {
        !lines
            .iter()
            .any(|(n, _)| trace_name(propagation, n).is_some())
    });
    let found = if quick_none {
        TraceHeaders::default()
    } else {
        headers.trace_headers(propagation)
    };
    let (parent, input) = if found.any {
        let (parent, parent_sampled) = match found.caller() {
            Some(B3::Context(p)) => (Some(p), p.sampled),
            Some(B3::SamplingOnly(s)) => (None, Some(s)),
            None => (None, None),
        };
        let input = SamplingInput {
            parent: parent_sampled,
            client_trace_id: found.client_trace_id.is_some(),
            forced_internal: found.force_trace && is_internal(client_ip),
        };
        (parent, input)
    } else {
        (None, SamplingInput::default())
    };
    let mut rng = fastrand::Rng::new();
    let decision = sampling::decide(input, plan.per_ten_thousand, rng.u32(..));
    let trace_id = parent.map_or_else(|| TraceId::random(&mut rng), |p| p.trace_id);
    let span_id = SpanId::random(&mut rng);
    let started = match (&plan.report, decision.sampled) {
        (Some(report), true) => Some(started(plan, report, headers, &facts(), &mut rng)),
        _ => None,
    };
    RequestTrace {
        trace_id,
        span_id,
        parent: parent.map(|p| p.span_id),
        sampled: decision.sampled,
        started,
    }
}

/// Envoy's internal request (`x-envoy-internal`): from a private or loopback address.
fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private() || v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
    }
}

/// The headers a trace starts from, each the first of its name: those of the provider's
/// format and the two that force sampling.
#[derive(Debug, Default, Clone, Copy)]
struct TraceHeaders<'a> {
    traceparent: Option<&'a [u8]>,
    b3: Option<&'a [u8]>,
    b3_trace_id: Option<&'a [u8]>,
    b3_span_id: Option<&'a [u8]>,
    b3_sampled: Option<&'a [u8]>,
    b3_flags: Option<&'a [u8]>,
    client_trace_id: Option<&'a [u8]>,
    force_trace: bool,
    /// Any of the above was found.
    any: bool,
}

impl<'a> Headers<'a> {
    /// The trace headers: lines kept as read in one pass (every traced request reads them, and
    /// a lookup per name walked the lines once per name), a map by lookups.
    fn trace_headers(&self, propagation: Propagation) -> TraceHeaders<'a> {
        let mut found = TraceHeaders::default();
        match self.lines {
            Some(lines) => {
                for (name, value) in lines.iter() {
                    found.note(propagation, name, value);
                }
            }
            None => {
                let get = |n: &HeaderName| self.map.get(n).map(HeaderValue::as_bytes);
                if propagation.w3c {
                    found.traceparent = get(&TRACEPARENT);
                }
                if propagation.b3 {
                    found.b3 = get(&B3_SINGLE);
                    found.b3_trace_id = get(&X_B3_TRACEID);
                    found.b3_span_id = get(&X_B3_SPANID);
                    found.b3_sampled = get(&X_B3_SAMPLED);
                    found.b3_flags = get(&X_B3_FLAGS);
                }
                found.client_trace_id = get(&X_CLIENT_TRACE_ID);
                found.force_trace = self.map.contains_key(&X_ENVOY_FORCE_TRACE);
                found.any = found.force_trace
                    || [
                        found.traceparent,
                        found.b3,
                        found.b3_trace_id,
                        found.b3_span_id,
                        found.b3_sampled,
                        found.b3_flags,
                        found.client_trace_id,
                    ]
                    .iter()
                    .any(Option::is_some);
            }
        }
        found
    }
}

/// The trace headers [`TraceHeaders`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TraceName {
    TraceParent,
    ClientTraceId,
    ForceTrace,
    B3,
    B3TraceId,
    B3SpanId,
    B3Sampled,
    B3Flags,
}

/// Which trace header a line (lowercase `name`) is, of those `propagation` reads. Names are
/// told apart by length first, so most lines cost one comparison.
#[inline]
fn trace_name(propagation: Propagation, name: &[u8]) -> Option<TraceName> {
    match name.len() {
        11 if propagation.w3c && name == b"traceparent" => Some(TraceName::TraceParent),
        17 if name == b"x-client-trace-id" => Some(TraceName::ClientTraceId),
        19 if name == b"x-envoy-force-trace" => Some(TraceName::ForceTrace),
        2 | 10..=12 if propagation.b3 => match name {
            b"b3" => Some(TraceName::B3),
            b"x-b3-traceid" => Some(TraceName::B3TraceId),
            b"x-b3-spanid" => Some(TraceName::B3SpanId),
            b"x-b3-sampled" => Some(TraceName::B3Sampled),
            b"x-b3-flags" => Some(TraceName::B3Flags),
            _ => None,
        },
        _ => None,
    }
}

impl<'a> TraceHeaders<'a> {
    /// One line (lowercase `name`): kept when it is the first of a name read. Names are told
    /// apart by length first, so most lines cost one comparison.
    fn note(&mut self, propagation: Propagation, name: &[u8], value: &'a [u8]) {
        let slot = match trace_name(propagation, name) {
            None => return,
            Some(TraceName::ForceTrace) => {
                self.force_trace = true;
                self.any = true;
                return;
            }
            Some(TraceName::TraceParent) => &mut self.traceparent,
            Some(TraceName::ClientTraceId) => &mut self.client_trace_id,
            Some(TraceName::B3) => &mut self.b3,
            Some(TraceName::B3TraceId) => &mut self.b3_trace_id,
            Some(TraceName::B3SpanId) => &mut self.b3_span_id,
            Some(TraceName::B3Sampled) => &mut self.b3_sampled,
            Some(TraceName::B3Flags) => &mut self.b3_flags,
        };
        if slot.is_none() {
            *slot = Some(value);
        }
        self.any = true;
    }

    /// The caller's context: W3C first when the provider speaks it, then B3 (single, then
    /// multi); the headers of a format the provider does not speak were not read.
    fn caller(&self) -> Option<B3> {
        if let Some(p) = self.traceparent.and_then(context::parse_traceparent) {
            return Some(B3::Context(p));
        }
        if let Some(b3) = self.b3.and_then(context::parse_b3_single) {
            return Some(b3);
        }
        // No B3 header (every request of a W3C provider): nothing to parse.
        if self.b3_trace_id.is_none()
            && self.b3_span_id.is_none()
            && self.b3_sampled.is_none()
            && self.b3_flags.is_none()
        {
            return None;
        }
        context::parse_b3_multi(
            self.b3_trace_id,
            self.b3_span_id,
            self.b3_sampled,
            self.b3_flags,
        )
    }
}

#[cold]
fn started(
    plan: &Arc<TracePlan>,
    report: &Arc<Report>,
    headers: Headers<'_>,
    facts: &RequestFacts<'_>,
    rng: &mut fastrand::Rng,
) -> Box<Started> {
    let text = |n: &HeaderName| {
        headers
            .get(n)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let sent_id = text(&crate::core::forwarding_headers::X_REQUEST_ID);
    let made = match (&sent_id, facts.made_request_id) {
        (Some(_), _) => None,
        (None, Some(id)) => Some(id),
        (None, None) => Some(rng.u128(..).to_le_bytes()),
    };
    let request_id = match (sent_id, made) {
        (Some(id), _) => id,
        (None, Some(id)) => crate::core::forwarding_headers::request_id_string(id),
        (None, None) => String::new(),
    };
    let mut url = format!(
        "{}://{}{}",
        facts.scheme, facts.authority, facts.path_and_query
    );
    truncate_at_char(&mut url, plan.max_path_tag_length);
    Box::new(Started {
        start: SystemTime::now(),
        plan: plan.clone(),
        report: report.clone(),
        fallback_operation: format!("{}:{}/*", without_port(facts.authority), facts.port),
        method: facts.method.as_str().to_owned(),
        url,
        protocol: crate::core::request_attrs::protocol_text(facts.version),
        user_agent: text(&http::header::USER_AGENT).unwrap_or_else(|| "-".into()),
        downstream_cluster: text(&X_ENVOY_DOWNSTREAM_SERVICE_CLUSTER).unwrap_or_else(|| "-".into()),
        request_id,
        made_request_id: made,
        client_trace_id: text(&X_CLIENT_TRACE_ID),
        request_size: headers
            .get(&http::header::CONTENT_LENGTH)
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0),
        trace_state: text(&TRACESTATE),
        peer: facts.peer,
        header_tags: plan
            .header_tags
            .iter()
            .map(|(tag, header, default)| {
                (tag.clone(), text(header).unwrap_or_else(|| default.clone()))
            })
            .collect(),
    })
}

fn truncate_at_char(text: &mut String, max: usize) {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    }
}

impl RequestTrace {
    /// The `x-request-id` made for a reported request that came without one: the upstream
    /// gets the id its span names.
    pub fn made_request_id(&self) -> Option<[u8; 16]> {
        self.started.as_ref().and_then(|s| s.made_request_id)
    }

    /// The context the upstream gets, in a header map: this hop's span as the parent, the
    /// decision, in the provider's format, replacing the request's. A `tracestate` is passed
    /// on as it came. (Lines kept as read are not edited: the upstream encoder leaves the
    /// request's out and writes [`Self::encode`]'s.)
    pub fn inject(&self, propagation: Propagation, headers: &mut HeaderMap) {
        let mut remove: Vec<HeaderName> = Vec::new();
        let mut add: Vec<(HeaderName, HeaderValue)> = Vec::new();
        if propagation.w3c {
            let value = context::traceparent(self.trace_id, self.span_id, self.sampled);
            if let Ok(v) = HeaderValue::from_bytes(&value) {
                remove.push(TRACEPARENT.clone());
                add.push((TRACEPARENT.clone(), v));
            }
        }
        if propagation.b3 {
            // One context upstream: the multi-header form Envoy's Zipkin tracer writes.
            remove.extend([
                B3_SINGLE.clone(),
                X_B3_FLAGS.clone(),
                X_B3_TRACEID.clone(),
                X_B3_SPANID.clone(),
                X_B3_PARENTSPANID.clone(),
                X_B3_SAMPLED.clone(),
            ]);
            add.push((X_B3_TRACEID.clone(), hex_value(&self.trace_id.0)));
            add.push((X_B3_SPANID.clone(), hex_value(&self.span_id.0)));
            if let Some(p) = self.parent {
                add.push((X_B3_PARENTSPANID.clone(), hex_value(&p.0)));
            }
            add.push((
                X_B3_SAMPLED.clone(),
                HeaderValue::from_static(if self.sampled { "1" } else { "0" }),
            ));
        }
        for name in &remove {
            headers.remove(name);
        }
        for (name, value) in add {
            headers.append(name, value);
        }
    }

    /// [`Self::inject`]'s lines, written into an upstream request head (the fast path's:
    /// nothing allocated).
    pub fn encode(&self, propagation: Propagation, out: &mut Vec<u8>) {
        if propagation.w3c {
            // The line made whole, then one copy into the head.
            const NAME: &[u8; 13] = b"traceparent: ";
            let mut line = [0u8; 13 + 55 + 2];
            let (name, rest) = line.split_at_mut(13);
            let (value, end) = rest.split_at_mut(55);
            name.copy_from_slice(NAME);
            if let Ok(value) = <&mut [u8; 55]>::try_from(value) {
                context::write_traceparent(self.trace_id, self.span_id, self.sampled, value);
            }
            end.copy_from_slice(b"\r\n");
            out.extend_from_slice(&line);
        }
        if propagation.b3 {
            let mut hex = [0u8; 32];
            hex::write(&self.trace_id.0, &mut hex);
            out.extend_from_slice(b"x-b3-traceid: ");
            out.extend_from_slice(&hex);
            hex::write(&self.span_id.0, &mut hex[..16]);
            out.extend_from_slice(b"\r\nx-b3-spanid: ");
            out.extend_from_slice(&hex[..16]);
            if let Some(p) = self.parent {
                hex::write(&p.0, &mut hex[..16]);
                out.extend_from_slice(b"\r\nx-b3-parentspanid: ");
                out.extend_from_slice(&hex[..16]);
            }
            out.extend_from_slice(if self.sampled {
                b"\r\nx-b3-sampled: 1\r\n"
            } else {
                b"\r\nx-b3-sampled: 0\r\n"
            });
        }
    }

    /// What a reported request leaves for its span once answered ([`Finished::into_span`]).
    pub fn finish(self, answer: &Answered<'_>) -> Option<Finished> {
        let started = self.started?;
        Some(Finished {
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent: self.parent,
            started,
            status: answer.status,
            response_size: answer.response_size,
            flags: answer.flags,
            upstream_cluster: answer.upstream_cluster.map(str::to_owned),
            upstream_address: answer.upstream_address.map(str::to_owned),
            kind: answer.kind,
            elapsed: answer.elapsed,
        })
    }
}

/// A reported request as it was answered: what it copied as it started and what the answer
/// said. The exporter's thread makes it a [`Span`] ([`Finished::into_span`]): a span's tags are
/// a score of small allocations, and each one made on a worker and freed on the exporter's
/// thread cost the allocator a slow path on both.
#[derive(Debug)]
pub struct Finished {
    trace_id: TraceId,
    span_id: SpanId,
    parent: Option<SpanId>,
    started: Box<Started>,
    status: u16,
    response_size: u64,
    flags: ResponseFlags,
    upstream_cluster: Option<String>,
    upstream_address: Option<String>,
    kind: SpanKind,
    elapsed: std::time::Duration,
}

impl Finished {
    /// Where the span goes.
    pub fn report(&self) -> &Arc<Report> {
        &self.started.report
    }

    /// The span, with Envoy's tags of the answer.
    pub fn into_span(self) -> Span {
        let s = *self.started;
        let plan = &s.plan;
        let mut tags: Vec<(Cow<'static, str>, String)> = Vec::with_capacity(plan.tags.len() + 18);
        tags.extend(plan.tags.iter().cloned());
        tags.extend(s.header_tags);
        let mut flags = String::new();
        self.flags.write_to(&mut flags);
        let cluster = self.upstream_cluster.as_deref().unwrap_or("-");
        for (k, v) in [
            ("guid:x-request-id", s.request_id),
            ("http.url", s.url),
            ("http.method", s.method),
            ("downstream_cluster", s.downstream_cluster),
            ("user_agent", s.user_agent),
            ("http.protocol", s.protocol.to_owned()),
            ("peer.address", s.peer.ip().to_string()),
            ("request_size", s.request_size.to_string()),
            ("response_size", self.response_size.to_string()),
            ("http.status_code", self.status.to_string()),
            ("response_flags", flags),
            ("upstream_cluster", cluster.to_owned()),
            ("upstream_cluster.name", cluster.to_owned()),
        ] {
            tags.push((Cow::Borrowed(k), v));
        }
        if let Some(a) = self.upstream_address {
            tags.push(("upstream_address".into(), a));
        }
        if let Some(id) = s.client_trace_id {
            tags.push(("guid:x-client-trace-id".into(), id));
        }
        let error = self.status >= 500;
        if error {
            tags.push(("error".into(), "true".into()));
        }
        Span {
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent,
            name: self
                .upstream_cluster
                .as_deref()
                .and_then(operation_name)
                .unwrap_or(s.fallback_operation),
            kind: self.kind,
            start: s.start,
            end: s.start + self.elapsed,
            attributes: tags,
            error,
            trace_state: s.trace_state,
        }
    }
}

/// Whether a request's own header line (lowercase `name`) gives way to the context this hop
/// sends ([`RequestTrace::encode`]).
pub fn replaces_line(propagation: Propagation, name: &[u8]) -> bool {
    (propagation.w3c && name == b"traceparent")
        || (propagation.b3
            && (name == b"b3"
                || name == b"x-b3-traceid"
                || name == b"x-b3-spanid"
                || name == b"x-b3-parentspanid"
                || name == b"x-b3-sampled"
                || name == b"x-b3-flags"))
}

/// What [`RequestTrace::finish`] reads of the answer.
pub struct Answered<'a> {
    pub status: u16,
    pub response_size: u64,
    pub flags: ResponseFlags,
    pub upstream_cluster: Option<&'a str>,
    pub upstream_address: Option<&'a str>,
    pub kind: SpanKind,
    pub elapsed: std::time::Duration,
}

/// Istio's span name, its route decorator: `host:port/*` of the destination service, from an
/// `outbound|PORT|SUBSET|HOST` cluster (else the request's host and the listener's port).
pub fn operation_name(cluster: &str) -> Option<String> {
    let mut parts = cluster.split('|');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("outbound"), Some(p), Some(_), Some(h)) if !h.is_empty() && !p.is_empty() => {
            Some(format!("{h}:{p}/*"))
        }
        _ => None,
    }
}

/// The host of an authority (`[v6]` keeps its brackets).
fn without_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |i| &authority[..=i]);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

fn hex_value(bytes: &[u8]) -> HeaderValue {
    let mut out = [0u8; 32];
    let n = bytes.len() * 2;
    hex::write(bytes, &mut out[..n]);
    HeaderValue::from_bytes(&out[..n]).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(propagation: Propagation, per_ten_thousand: u32) -> Arc<TracePlan> {
        Arc::new(TracePlan {
            provider: "otel".into(),
            propagation,
            per_ten_thousand,
            report: Some(Arc::new(Report {
                address: "127.0.0.1:4317".into(),
                exporter: Exporter::default(),
            })),
            max_path_tag_length: 20,
            tags: vec![("component".into(), "proxy".into())],
            header_tags: vec![(
                "user".into(),
                HeaderName::from_static("x-user"),
                "anonymous".into(),
            )],
        })
    }

    const EXTERNAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 9));

    fn facts() -> RequestFacts<'static> {
        static GET: http::Method = http::Method::GET;
        RequestFacts {
            method: &GET,
            scheme: "http",
            authority: "example.com",
            path_and_query: "/a/very/long/path?q=1",
            version: http::Version::HTTP_11,
            peer: "10.0.0.1:5555".parse().unwrap(),
            port: 8080,
            made_request_id: None,
        }
    }

    fn map(h: &HeaderMap) -> Headers<'_> {
        Headers {
            map: h,
            lines: None,
        }
    }

    const W3C: Propagation = Propagation {
        w3c: true,
        b3: false,
    };
    const B3M: Propagation = Propagation {
        w3c: false,
        b3: true,
    };
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_caller_context_is_continued_with_a_new_span() {
        let mut h = HeaderMap::new();
        h.insert(&TRACEPARENT, HeaderValue::from_static(TP));
        h.insert(&TRACESTATE, HeaderValue::from_static("v=1"));
        let t = start(&plan(W3C, 0), map(&h), EXTERNAL, facts);
        assert!(t.sampled, "the caller's flag wins over 0%");
        assert_eq!(t.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent.unwrap().hex(), "00f067aa0ba902b7");
        let mut out = h.clone();
        t.inject(W3C, &mut out);
        let sent = out.get(&TRACEPARENT).unwrap().to_str().unwrap();
        assert_eq!(
            sent,
            format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01", t.span_id.hex())
        );
        assert_eq!(out.get(&TRACESTATE).unwrap(), "v=1");
        // A W3C provider leaves B3 headers alone, and reads none.
        let mut h = HeaderMap::new();
        h.insert(&X_B3_SAMPLED, HeaderValue::from_static("1"));
        let t = start(&plan(W3C, 0), map(&h), EXTERNAL, facts);
        assert!(!t.sampled && t.parent.is_none());
    }

    #[test]
    fn b3_is_read_and_written_as_multi_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            &B3_SINGLE,
            HeaderValue::from_static("4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0"),
        );
        let t = start(&plan(B3M, 10_000), map(&h), EXTERNAL, facts);
        assert!(!t.sampled, "the caller's 0 wins over 100%");
        t.inject(B3M, &mut h);
        assert!(h.get(&B3_SINGLE).is_none() && h.get(&TRACEPARENT).is_none());
        assert_eq!(
            h.get(&X_B3_TRACEID).unwrap(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(
            h.get(&X_B3_SPANID).unwrap().to_str().unwrap(),
            t.span_id.hex()
        );
        assert_eq!(h.get(&X_B3_PARENTSPANID).unwrap(), "00f067aa0ba902b7");
        assert_eq!(h.get(&X_B3_SAMPLED).unwrap(), "0");
    }

    #[test]
    fn a_new_trace_is_sampled_by_the_percentage_or_the_client() {
        let h = HeaderMap::new();
        let t = start(&plan(W3C, 0), map(&h), EXTERNAL, facts);
        assert!(!t.sampled && t.parent.is_none() && t.started.is_none());
        let t = start(&plan(W3C, 10_000), map(&h), EXTERNAL, facts);
        assert!(t.sampled && t.started.is_some());
        assert!(t.made_request_id().is_some());
        let mut h = HeaderMap::new();
        h.insert(&X_CLIENT_TRACE_ID, HeaderValue::from_static("abc"));
        assert!(start(&plan(W3C, 0), map(&h), EXTERNAL, facts).sampled);
        // Forced only from an internal address.
        let mut h = HeaderMap::new();
        h.insert(&X_ENVOY_FORCE_TRACE, HeaderValue::from_static("true"));
        assert!(!start(&plan(W3C, 0), map(&h), EXTERNAL, facts).sampled);
        let internal = "10.1.2.3".parse().unwrap();
        assert!(start(&plan(W3C, 0), map(&h), internal, facts).sampled);
    }

    #[test]
    fn a_finished_span_has_envoys_tags() {
        let p = plan(W3C, 10_000);
        let mut h = HeaderMap::new();
        h.insert(
            &crate::core::forwarding_headers::X_REQUEST_ID,
            HeaderValue::from_static("rid"),
        );
        let t = start(&p, map(&h), EXTERNAL, facts);
        assert_eq!(t.made_request_id(), None);
        let span = t
            .finish(&Answered {
                status: 503,
                response_size: 19,
                flags: ResponseFlags::default().with(Some(
                    crate::core::local_reply::ResponseFlag::NoHealthyUpstream,
                )),
                upstream_cluster: Some("outbound|80||a.b"),
                upstream_address: None,
                kind: SpanKind::Client,
                elapsed: std::time::Duration::from_millis(3),
            })
            .unwrap()
            .into_span();
        assert_eq!(span.name, "a.b:80/*");
        for (k, v) in [
            ("component", "proxy"),
            ("guid:x-request-id", "rid"),
            ("http.url", "http://example.com/a"),
            ("http.status_code", "503"),
            ("response_flags", "UH"),
            ("upstream_cluster", "outbound|80||a.b"),
            ("error", "true"),
            ("user_agent", "-"),
            ("user", "anonymous"),
        ] {
            assert_eq!(span.attribute(k), Some(v), "{k}");
        }
        assert!(span.error && span.parent_span_id.is_none());
    }

    #[test]
    fn header_lines_kept_as_read_are_read_without_a_map() {
        let read = [
            httparse::Header {
                name: "Host",
                value: b"a",
            },
            httparse::Header {
                name: "TraceParent",
                value: TP.as_bytes(),
            },
        ];
        let lines = warden_http1::request_lines::RequestLines::new(&read).unwrap();
        let empty = HeaderMap::new();
        let t = start(
            &plan(W3C, 0),
            Headers {
                map: &empty,
                lines: Some(&lines),
            },
            EXTERNAL,
            facts,
        );
        assert!(t.sampled);
        assert_eq!(t.parent.unwrap().hex(), "00f067aa0ba902b7");
    }

    #[test]
    fn encoded_lines_are_the_injected_headers() {
        let mut h = HeaderMap::new();
        h.insert(&TRACEPARENT, HeaderValue::from_static(TP));
        let both = Propagation {
            w3c: true,
            b3: true,
        };
        let t = start(&plan(both, 0), map(&h), EXTERNAL, facts);
        let mut map_headers = HeaderMap::new();
        t.inject(both, &mut map_headers);
        let mut written = Vec::new();
        t.encode(both, &mut written);
        let text = String::from_utf8(written).unwrap();
        let lines: Vec<(String, String)> = text
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(": ").unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        let from_map: Vec<(String, String)> = map_headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(lines, from_map);
        for (name, _) in &lines {
            assert!(replaces_line(both, name.as_bytes()), "{name}");
        }
        assert!(!replaces_line(W3C, b"x-b3-sampled"));
        assert!(!replaces_line(B3M, b"traceparent"));
        assert!(!replaces_line(both, b"tracestate"));
    }

    #[test]
    fn trace_names_by_propagation() {
        use TraceName::*;
        // (name, under W3C, under B3 multi-header)
        let cases = [
            ("traceparent", Some(TraceParent), None),
            ("tracestate", None, None),
            (
                "x-client-trace-id",
                Some(ClientTraceId),
                Some(ClientTraceId),
            ),
            ("x-envoy-force-trace", Some(ForceTrace), Some(ForceTrace)),
            ("b3", None, Some(B3)),
            ("x-b3-traceid", None, Some(B3TraceId)),
            ("x-b3-spanid", None, Some(B3SpanId)),
            ("x-b3-parentspanid", None, None),
            ("x-b3-sampled", None, Some(B3Sampled)),
            ("x-b3-flags", None, Some(B3Flags)),
            ("host", None, None),
            ("user-agent", None, None),
            ("x-b3-other", None, None),
        ];
        for (name, w3c, b3) in cases {
            assert_eq!(trace_name(W3C, name.as_bytes()), w3c, "{name} W3C");
            assert_eq!(trace_name(B3M, name.as_bytes()), b3, "{name} B3");
            // A line the classifier names is one a scan keeps.
            let mut found = TraceHeaders::default();
            found.note(B3M, name.as_bytes(), b"v");
            assert_eq!(found.any, b3.is_some(), "{name}");
        }
        // `x-b3-spanid` is as long as `traceparent`: W3C's look does not hide it from B3's.
        let both = Propagation {
            w3c: true,
            b3: true,
        };
        assert_eq!(trace_name(both, b"x-b3-spanid"), Some(B3SpanId));
        assert_eq!(trace_name(both, b"traceparent"), Some(TraceParent));
    }

    #[test]
    fn warden_check_says_what_is_traced() {
        assert_eq!(
            plan(W3C, 100).describe(),
            "provider otel, W3C traceparent, 1% sampled, spans over OTLP/gRPC to 127.0.0.1:4317"
        );
    }

    #[test]
    fn operation_names_are_istios_decorators() {
        for (cluster, want) in [
            (
                "outbound|8000||httpbin.default.svc.cluster.local",
                Some("httpbin.default.svc.cluster.local:8000/*"),
            ),
            (
                "outbound|9080|v1|reviews.default.svc.cluster.local",
                Some("reviews.default.svc.cluster.local:9080/*"),
            ),
            ("inbound|8080||", None),
            ("PassthroughCluster", None),
        ] {
            assert_eq!(operation_name(cluster).as_deref(), want, "{cluster}");
        }
        for (authority, want) in [
            ("example.com:8080", "example.com"),
            ("example.com", "example.com"),
            ("[::1]:80", "[::1]"),
        ] {
            assert_eq!(without_port(authority), want);
        }
    }
}
