//! What every later layer shares about one connection and one request: where it came from
//! (`destination`, `conn`), who the proxy is (`identity`), what the policy stages see of a
//! request (`request_attrs`), the headers a proxy adds (`forwarding_headers`, `client_cert`,
//! `client_addr`), Envoy's local replies and response flags (`local_reply`), timeouts, metrics
//! and the access log. Imports nothing else of this crate.

pub mod access_log;
pub mod client_addr;
pub mod client_cert;
pub mod conn;
pub mod destination;
pub mod dynamic_metadata;
pub mod error;
pub mod forwarding_headers;
pub mod grpc_messages;
pub mod heavy_hitters;
pub mod identity;
pub mod istio_metrics;
pub mod istio_overrides;
pub mod istio_peers;
pub mod local_reply;
pub mod metrics;
pub mod metrics_exposition;
pub mod request_attrs;
pub mod share;
pub mod timeouts;
pub mod tls_info;
pub mod trace_export;
pub mod traces;
