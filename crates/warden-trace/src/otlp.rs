//! Spans as OTLP's `ExportTraceServiceRequest` (opentelemetry-proto's generated messages), one
//! resource per exporting proxy: `service.name` as Istio sets it and the resource attributes.

use crate::span::{Span, SpanKind};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, status, ResourceSpans, ScopeSpans, Status};
use std::time::{SystemTime, UNIX_EPOCH};

pub use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;

/// Who exports: the resource's attributes, `service.name` first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exporter {
    pub service_name: String,
    pub attributes: Vec<(String, String)>,
}

/// The export request for `spans`, all from `exporter`: their names, tags and values move into
/// the message instead of being copied (the exporter's spans are sent once).
pub fn export_request(
    exporter: &Exporter,
    spans: impl IntoIterator<Item = Span>,
) -> ExportTraceServiceRequest {
    let mut attributes = vec![key_value(
        "service.name".into(),
        exporter.service_name.clone(),
    )];
    attributes.extend(
        exporter
            .attributes
            .iter()
            .map(|(k, v)| key_value(k.clone(), v.clone())),
    );
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "warden".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                spans: spans.into_iter().map(otlp_span).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn otlp_span(s: Span) -> opentelemetry_proto::tonic::trace::v1::Span {
    opentelemetry_proto::tonic::trace::v1::Span {
        trace_id: s.trace_id.0.to_vec(),
        span_id: s.span_id.0.to_vec(),
        trace_state: s.trace_state.unwrap_or_default(),
        parent_span_id: s.parent_span_id.map(|p| p.0.to_vec()).unwrap_or_default(),
        name: s.name,
        kind: match s.kind {
            SpanKind::Server => span::SpanKind::Server,
            SpanKind::Client => span::SpanKind::Client,
        } as i32,
        start_time_unix_nano: unix_nanos(s.start),
        end_time_unix_nano: unix_nanos(s.end),
        attributes: s
            .attributes
            .into_iter()
            .map(|(k, v)| key_value(k.into_owned(), v))
            .collect(),
        status: Some(Status {
            code: if s.error {
                status::StatusCode::Error
            } else {
                status::StatusCode::Unset
            } as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn key_value(key: String, value: String) -> KeyValue {
    KeyValue {
        key,
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..Default::default()
    }
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{SpanId, TraceId};
    use std::time::Duration;

    #[test]
    fn spans_become_one_resource_with_its_service_name() {
        let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let s = Span {
            trace_id: TraceId([1; 16]),
            span_id: SpanId([2; 8]),
            parent_span_id: Some(SpanId([3; 8])),
            name: "httpbin.default.svc.cluster.local:8000/*".into(),
            kind: SpanKind::Server,
            start,
            end: start + Duration::from_millis(5),
            attributes: vec![("http.status_code".into(), "503".into())],
            error: true,
            trace_state: Some("vendor=x".into()),
        };
        let exporter = Exporter {
            service_name: "httpbin.default".into(),
            attributes: vec![("k8s.namespace.name".into(), "default".into())],
        };
        let req = export_request(&exporter, [s.clone()]);
        let rs = &req.resource_spans[0];
        let keys: Vec<_> = rs
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|a| a.key.as_str())
            .collect();
        assert_eq!(keys, ["service.name", "k8s.namespace.name"]);
        let o = &rs.scope_spans[0].spans[0];
        assert_eq!(o.trace_id, vec![1; 16]);
        assert_eq!(o.parent_span_id, vec![3; 8]);
        assert_eq!(o.kind, span::SpanKind::Server as i32);
        assert_eq!(o.end_time_unix_nano - o.start_time_unix_nano, 5_000_000);
        assert_eq!(
            o.status.as_ref().unwrap().code,
            status::StatusCode::Error as i32
        );
        assert_eq!(o.trace_state, "vendor=x");
        let root = Span {
            parent_span_id: None,
            error: false,
            ..s
        };
        let o = export_request(&exporter, [root.clone()]).resource_spans[0].scope_spans[0].spans[0]
            .clone();
        assert!(o.parent_span_id.is_empty());
        assert_eq!(o.status.unwrap().code, status::StatusCode::Unset as i32);
    }
}
