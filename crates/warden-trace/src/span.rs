//! A finished span: what the proxy records of one request once it is answered.

use crate::context::{SpanId, TraceId};
use std::borrow::Cow;
use std::time::SystemTime;

/// Envoy's span kind by the listener's direction: a sidecar's inbound side is the server; its
/// outbound side and a gateway (Istio builds gateways as outbound listeners) the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Server,
    Client,
}

/// One span. Attribute values are strings, as Envoy's tracers set tags.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// The caller's span (none: this span starts the trace).
    pub parent_span_id: Option<SpanId>,
    /// Istio's route decorator: `host:port/*` of the destination.
    pub name: String,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(Cow<'static, str>, String)>,
    /// Envoy's `error` tag (a 5xx answer, or none): the span's status is ERROR.
    pub error: bool,
    /// The caller's `tracestate`, kept.
    pub trace_state: Option<String>,
}

impl Span {
    /// The value of an attribute (tests and the admin page).
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}
