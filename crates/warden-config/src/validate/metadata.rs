//! Envelope checks for every kind: names present and unique per kind and namespace.

use super::Report;
use crate::document::Doc;
use crate::field_path::FieldPath;
use crate::ConfigSet;
use std::collections::HashMap;
use std::path::PathBuf;

type Seen = HashMap<(String, String, String), (PathBuf, usize)>;

pub(super) fn check(set: &ConfigSet, report: &mut Report) {
    let mut seen = Seen::new();
    check_docs(&set.gateways, &mut seen, report);
    check_docs(&set.virtual_services, &mut seen, report);
    let entries = set
        .service_entries
        .iter()
        .filter(|d| d.kind == "ServiceEntry");
    check_docs(entries, &mut seen, report);
    check_docs(&set.sidecars, &mut seen, report);
    check_docs(&set.workload_entries, &mut seen, report);
    check_docs(&set.services, &mut seen, report);
    check_docs(&set.endpoint_slices, &mut seen, report);
    check_docs(&set.endpoints, &mut seen, report);
    check_docs(&set.pods, &mut seen, report);
    check_docs(&set.destination_rules, &mut seen, report);
    check_docs(&set.authorization_policies, &mut seen, report);
    check_docs(&set.peer_authentications, &mut seen, report);
    check_docs(&set.rate_limit_policies, &mut seen, report);
    check_docs(&set.envoy_filters, &mut seen, report);
}

fn check_docs<'a, T: 'a>(
    docs: impl IntoIterator<Item = &'a Doc<T>>,
    seen: &mut Seen,
    report: &mut Report,
) {
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
        let key = (
            doc.kind.clone(),
            doc.metadata.namespace_or_default().to_owned(),
            name.clone(),
        );
        if let Some((file, index)) = seen.get(&key) {
            report.error(
                doc,
                &FieldPath::keys(&["metadata", "name"]),
                format!(
                    "duplicate {} {}/{}: already defined in {} document {}",
                    key.0,
                    key.1,
                    key.2,
                    file.display(),
                    index
                ),
            );
        } else {
            seen.insert(key, (doc.file.clone(), doc.index));
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
