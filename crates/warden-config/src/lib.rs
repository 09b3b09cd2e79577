//! YAML documents (Istio kinds and warden kinds) turned into a validated, typed model.
//!
//! Each kind's serde shape lives in `kinds/`; the loader (`load`) reads multi-document YAML from
//! files or directories, dispatches on `kind`, and reports every error of a load at once with
//! file, document (kind/name) and field path. Unknown fields become warnings, never silent drops.

pub mod document;
pub mod kinds;

pub use document::{Doc, Metadata};
pub use kinds::authorization_policy::AuthorizationPolicy;
pub use kinds::destination_rule::DestinationRule;
pub use kinds::envoy_filter::EnvoyFilter;
pub use kinds::gateway::Gateway;
pub use kinds::rate_limit_policy::RateLimitPolicy;
pub use kinds::service_entry::ServiceEntry;
pub use kinds::virtual_service::VirtualService;

/// Everything one load produced, in file/document order.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ConfigSet {
    pub gateways: Vec<Doc<Gateway>>,
    pub virtual_services: Vec<Doc<VirtualService>>,
    pub service_entries: Vec<Doc<ServiceEntry>>,
    pub destination_rules: Vec<Doc<DestinationRule>>,
    pub authorization_policies: Vec<Doc<AuthorizationPolicy>>,
    pub rate_limit_policies: Vec<Doc<RateLimitPolicy>>,
    pub envoy_filters: Vec<Doc<EnvoyFilter>>,
    /// Where each document's fields are, so later stages can report lines too.
    #[serde(skip)]
    pub source_lines: yaml_source::SourceLines,
}

impl ConfigSet {
    /// The location of `field` (e.g. `spec.rules[0].from`) in `doc`, with its line when known:
    /// for problems found by the crates that compile the documents.
    pub fn locate<T>(&self, doc: &Doc<T>, field: &str) -> Location {
        let path = FieldPath::parse(field);
        Location {
            file: doc.file.clone(),
            line: self.source_lines.line_of(&doc.file, doc.index, &path),
            document: doc.index,
            object: doc.id(),
            field: field.to_owned(),
        }
    }
}

pub mod duration;
pub mod error;
pub mod load;

pub use duration::parse_duration;
pub use error::{ConfigErrors, Location, Problem};
pub use load::{load_paths, load_str, Loaded};
pub mod field_path;
pub mod gateway_ref;
pub mod hosts;
mod lookup;
mod validate;
pub mod yaml_source;

pub use field_path::FieldPath;
pub use gateway_ref::{gateway_matches, GatewayRef};
pub use kinds::destination_rule::LbPolicy;
pub use kinds::gateway::ListenerProtocol;
pub use kinds::service_entry::Resolution;
pub use kinds::virtual_service::{anchored_regex, effective_weights, StringMatchKind};
