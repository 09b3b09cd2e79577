//! Distributed tracing as Envoy does it for Istio, in pure pieces: trace contexts read from and
//! written to headers (`context`: W3C `traceparent`, B3 multi-header and single `b3`), the
//! sampling decision (`sampling`), ids as hex and `x-request-id`'s UUID
//! (`hex`), a finished span (`span`) and its OTLP encoding (`otlp`).
//! The proxy owns the I/O: headers, the queue and the exporter.

#![forbid(unsafe_code)]

pub mod context;
pub mod hex;
pub mod otlp;
pub mod sampling;
pub mod span;

pub use context::{Parent, Propagation, SpanId, TraceId};
pub use sampling::{Decision, Reason, SamplingInput};
pub use span::{Span, SpanKind};
