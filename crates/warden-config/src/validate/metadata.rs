//! Envelope checks for every kind: names present and well-formed. (Documents with the same
//! kind/namespace/name were resolved before, by `dedupe`.)

use super::Report;
use crate::document::Doc;
use crate::field_path::FieldPath;
use crate::ConfigSet;

pub(super) fn check(set: &ConfigSet, report: &mut Report) {
    check_docs(&set.gateways, report);
    check_docs(&set.virtual_services, report);
    let entries = set
        .service_entries
        .iter()
        .filter(|d| d.kind == "ServiceEntry");
    check_docs(entries, report);
    check_docs(&set.sidecars, report);
    check_docs(&set.workload_entries, report);
    check_docs(&set.services, report);
    check_docs(&set.endpoint_slices, report);
    check_docs(&set.endpoints, report);
    check_docs(&set.pods, report);
    check_docs(&set.destination_rules, report);
    check_docs(&set.authorization_policies, report);
    check_docs(&set.peer_authentications, report);
    check_docs(&set.request_authentications, report);
    check_docs(&set.rate_limit_policies, report);
    check_docs(&set.envoy_filters, report);
}

fn check_docs<'a, T: 'a>(docs: impl IntoIterator<Item = &'a Doc<T>>, report: &mut Report) {
    for doc in docs {
        let name = &doc.metadata.name;
        if name.is_empty() {
            report.error(
                doc,
                &FieldPath::keys(&["metadata", "name"]),
                "metadata.name is required",
            );
            continue;
        }
        if let Some(why) = bad_name(name) {
            report.error(doc, &FieldPath::keys(&["metadata", "name"]), why);
        }
        if let Some(ns) = &doc.metadata.namespace {
            if let Some(why) = bad_name(ns) {
                report.error(doc, &FieldPath::keys(&["metadata", "namespace"]), why);
            }
        }
    }
}

/// Names are used in references (`ns/name`) and metrics labels.
fn bad_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.contains('/') || name.chars().any(char::is_whitespace) {
        return Some(format!("{name:?} must not contain '/' or whitespace"));
    }
    None
}
