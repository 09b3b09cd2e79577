//! Per kind: the fields warden reads ([`Schema`] of its type) and the fields Istio defines
//! (`istio_fields.txt`, from Istio's CRDs). Together they tell a typo (`rout`: in neither)
//! from an Istio feature warden lacks (`delegate`: Istio's only).

use crate::kinds;
use crate::schema::Schema;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// The schema of what warden reads of a `kind` document: its `spec`, or the whole object for
/// the Kubernetes kinds read whole (Service, Pod...). `None` for kinds warden does not read.
pub fn warden_schema(kind: &str) -> Option<&'static Schema> {
    static CACHE: OnceLock<BTreeMap<&'static str, Schema>> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            BTreeMap::from([
                ("Gateway", Schema::of::<kinds::gateway::Gateway>()),
                (
                    "VirtualService",
                    Schema::of::<kinds::virtual_service::VirtualService>(),
                ),
                (
                    "ServiceEntry",
                    Schema::of::<kinds::service_entry::ServiceEntry>(),
                ),
                (
                    "DestinationRule",
                    Schema::of::<kinds::destination_rule::DestinationRule>(),
                ),
                (
                    "EnvoyFilter",
                    Schema::of::<kinds::envoy_filter::EnvoyFilter>(),
                ),
                (
                    "AuthorizationPolicy",
                    Schema::of::<kinds::authorization_policy::AuthorizationPolicy>(),
                ),
                (
                    "PeerAuthentication",
                    Schema::of::<kinds::peer_authentication::PeerAuthentication>(),
                ),
                (
                    "RequestAuthentication",
                    Schema::of::<kinds::request_authentication::RequestAuthentication>(),
                ),
                ("Sidecar", Schema::of::<kinds::sidecar::Sidecar>()),
                (
                    "WorkloadEntry",
                    Schema::of::<kinds::service_entry::WorkloadEntry>(),
                ),
                (
                    "RateLimitPolicy",
                    Schema::of::<kinds::rate_limit_policy::RateLimitPolicy>(),
                ),
                ("Service", Schema::of::<kinds::kubernetes::Service>()),
                ("Endpoints", Schema::of::<kinds::kubernetes::Endpoints>()),
                ("Pod", Schema::of::<kinds::kubernetes::Pod>()),
                (
                    "EndpointSlice",
                    Schema::of::<kinds::kubernetes::EndpointSlice>(),
                ),
            ])
        })
        .get(kind)
}

/// Istio's field paths of `kind` below `spec` (`http[].route[].destination.host`); empty for
/// kinds that are not Istio's.
pub fn istio_paths(kind: &str) -> &'static BTreeSet<String> {
    static CACHE: OnceLock<BTreeMap<String, BTreeSet<String>>> = OnceLock::new();
    static EMPTY: BTreeSet<String> = BTreeSet::new();
    CACHE
        .get_or_init(|| {
            let mut by_kind: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            let lines = include_str!("istio_fields.txt")
                .lines()
                .filter(|l| !l.starts_with('#'));
            for line in lines {
                if let Some((kind, path)) = line.split_once(' ') {
                    by_kind
                        .entry(kind.to_owned())
                        .or_default()
                        .insert(path.to_owned());
                }
            }
            by_kind
        })
        .get(kind)
        .unwrap_or(&EMPTY)
}

/// `path` (below the kind's schema root) written as a schema path: list indexes as `[]`, keys
/// of free maps as `{}` (`http[0].match[1].headers.x-user` -> `http[].match[].headers{}`).
/// `None` when the path leaves the schema.
pub fn schema_pattern(schema: &Schema, path: &crate::FieldPath) -> Option<String> {
    use crate::field_path::Segment;
    let mut node = schema;
    let mut out = String::new();
    for seg in path.segments() {
        node = match (node, seg) {
            (Schema::Seq(inner), Segment::Index(_)) => {
                out.push_str("[]");
                inner
            }
            (Schema::Struct(fields), Segment::Key(k)) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
                fields.get(k)?
            }
            (Schema::Map(inner), Segment::Key(_)) => {
                out.push_str("{}");
                inner
            }
            _ => return None,
        };
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldPath;

    #[test]
    fn every_read_kind_has_a_schema_and_istio_kinds_have_istio_paths() {
        for (kind, group, _) in crate::kind_policy::READ_KINDS {
            assert!(warden_schema(kind).is_some(), "{kind}");
            let istio = group.ends_with("istio.io");
            assert_eq!(!istio_paths(kind).is_empty(), istio, "{kind}");
        }
        let vs = istio_paths("VirtualService");
        assert!(vs.contains("http[].route[].destination.host"));
        assert!(vs.contains("http[].delegate"));
        assert!(!vs.contains("http[].rout"));
    }

    #[test]
    fn patterns_follow_the_schema() {
        let vs = warden_schema("VirtualService").expect("schema");
        let cases = [
            (
                "http[0].route[1].destination",
                Some("http[].route[].destination"),
            ),
            (
                "http[0].match[1].headers.x-user",
                Some("http[].match[].headers{}"),
            ),
            ("hosts", Some("hosts")),
            ("http[0].nope", None),
        ];
        for (path, want) in cases {
            assert_eq!(
                schema_pattern(vs, &FieldPath::parse(path)).as_deref(),
                want,
                "{path}"
            );
        }
    }
}
