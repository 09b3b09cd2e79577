//! YAML documents (Istio kinds and warden kinds) turned into a validated, typed model.
//!
//! Stages: `yaml_source` parses multi-document YAML and records the line of every node; `load`
//! reads files and directories, decides about each kind (`kind_policy`), replaces documents
//! re-applied by a later file (`dedupe`), decodes each kind's serde shape (`kinds/`) and
//! reports every field it does not read (`unknown_field`: a typo, or an Istio field warden
//! lacks), never a silent drop; `validate` checks values and cross-document references (Istio's
//! way: a reference nothing defines is a coded warning, `dangling`). Every problem names file,
//! line, document (kind/name) and field path, and all of them are reported at once. `hosts`, `gateway_ref` and `lookup` hold the matching rules the
//! proxy shares with validation. The reference for users is docs/config.md.

#![forbid(unsafe_code)]

pub mod ban;
pub mod code;
pub mod dangling;
mod dedupe;
pub mod document;
pub mod duration;
pub mod error;
pub mod ext_authz_provider;
pub mod field_path;
pub mod gateway_api;
pub mod gateway_ref;
pub mod hosts;
pub mod istio_annotations;
mod kind_policy;
pub mod kind_schema;
pub mod kinds;
pub mod load;
mod lookup;
pub mod mesh_config;
pub mod mesh_registry;
pub mod pod_info;
pub mod proxy_config;
pub mod schema;
mod suggest;
pub mod telemetry_access_logging;
pub mod telemetry_tracing;
pub mod tracing_provider;
mod unknown_field;
mod validate;
pub mod yaml_expansion;
pub mod yaml_source;

pub use code::Code;
pub use dangling::{DanglingReason, DanglingRef, DestinationSlot, RouteSection};
pub use document::{Doc, Metadata};
pub use duration::parse_duration;
pub use error::{ConfigErrors, Location, Problem};
pub use field_path::FieldPath;
pub use gateway_ref::{gateway_matches, GatewayRef};
pub use kind_policy::check_skip_kind;
pub use kinds::authorization_policy::AuthorizationPolicy;
pub use kinds::destination_rule::{DestinationRule, LbPolicy};
pub use kinds::envoy_filter::EnvoyFilter;
pub use kinds::gateway::{Gateway, ListenerProtocol};
pub use kinds::rate_limit_policy::RateLimitPolicy;
pub use kinds::service_entry::{Resolution, ServiceEntry};
pub use kinds::virtual_service::{
    anchored_regex, effective_weights, StringMatchKind, VirtualService,
};
pub use load::{
    config_files, load_paths, load_paths_with, load_str, load_str_with, LoadOptions, Loaded,
};

/// Everything one load produced, in file/document order.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ConfigSet {
    pub gateways: Vec<Doc<Gateway>>,
    pub virtual_services: Vec<Doc<VirtualService>>,
    pub service_entries: Vec<Doc<ServiceEntry>>,
    pub destination_rules: Vec<Doc<DestinationRule>>,
    pub authorization_policies: Vec<Doc<AuthorizationPolicy>>,
    pub peer_authentications: Vec<Doc<kinds::peer_authentication::PeerAuthentication>>,
    pub request_authentications: Vec<Doc<kinds::request_authentication::RequestAuthentication>>,
    pub rate_limit_policies: Vec<Doc<RateLimitPolicy>>,
    pub envoy_filters: Vec<Doc<EnvoyFilter>>,
    pub sidecars: Vec<Doc<kinds::sidecar::Sidecar>>,
    pub workload_entries: Vec<Doc<kinds::service_entry::WorkloadEntry>>,
    /// Kubernetes objects read as a service registry (`kubectl get svc,endpointslices,pods`).
    pub services: Vec<Doc<kinds::kubernetes::Service>>,
    pub endpoint_slices: Vec<Doc<kinds::kubernetes::EndpointSlice>>,
    pub endpoints: Vec<Doc<kinds::kubernetes::Endpoints>>,
    pub pods: Vec<Doc<kinds::kubernetes::Pod>>,
    /// Telemetry resources' `metrics` (the rest of the kind is decided by `kind_policy`).
    pub telemetries: Vec<Doc<kinds::telemetry::Telemetry>>,
    /// Kubernetes Gateway API documents; what they stand for is in `gateways` and
    /// `virtual_services` too (generated, see [`gateway_api::translate`]).
    pub gateway_api: gateway_api::GatewayApiSet,
    /// Telemetry documents' `accessLogging` (their `metrics` and `tracing` are not here).
    pub telemetry_access_logging: Vec<Doc<telemetry_access_logging::TelemetryAccessLogging>>,
    /// Telemetry documents' `tracing`.
    pub telemetry_tracing: Vec<Doc<telemetry_tracing::TelemetryTracing>>,
    /// Route destinations that nothing in the load defines (each also a coded warning): the
    /// proxy answers 503 for them, as Envoy does for a route whose cluster does not exist.
    /// See [`ConfigSet::dangling_destination`].
    pub dangling: Vec<DanglingRef>,
    /// Where each document's fields are, so later stages can report lines too
    /// ([`ConfigSet::locate`]).
    #[serde(skip)]
    pub source_lines: yaml_source::SourceLines,
}
