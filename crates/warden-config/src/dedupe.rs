//! Documents with the same kind, namespace and name: `kubectl apply -f a.yaml -f b.yaml`
//! applies the files in order, so b's document replaces a's (a warning names both places). Two
//! in one file are an error: one file holds one definition of an object.

use crate::code::Code;
use crate::document::Doc;
use crate::error::{Location, Problem};
use crate::field_path::FieldPath;
use crate::yaml_source::SourceLines;
use crate::ConfigSet;
use std::collections::HashMap;

/// Replace, in every kind's list, earlier documents by later files' ones of the same
/// kind/namespace/name, in place (an object keeps its place, as a re-applied object keeps its
/// creation time, which orders Istio's merges).
pub(crate) fn replace_reapplied(
    set: &mut ConfigSet,
    errors: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) {
    let lines = std::mem::take(&mut set.source_lines);
    let mut out = Outcome {
        lines: &lines,
        errors,
        warnings,
    };
    out.kind(&mut set.gateways);
    out.kind(&mut set.virtual_services);
    out.kind(&mut set.service_entries);
    out.kind(&mut set.destination_rules);
    out.kind(&mut set.authorization_policies);
    out.kind(&mut set.peer_authentications);
    out.kind(&mut set.request_authentications);
    out.kind(&mut set.rate_limit_policies);
    out.kind(&mut set.envoy_filters);
    out.kind(&mut set.sidecars);
    out.kind(&mut set.workload_entries);
    out.kind(&mut set.services);
    out.kind(&mut set.endpoint_slices);
    out.kind(&mut set.endpoints);
    out.kind(&mut set.pods);
    let api = &mut set.gateway_api;
    out.kind(&mut api.gateway_classes);
    out.kind(&mut api.gateways);
    out.kind(&mut api.http_routes);
    out.kind(&mut api.grpc_routes);
    out.kind(&mut api.tcp_routes);
    out.kind(&mut api.tls_routes);
    out.kind(&mut api.reference_grants);
    set.source_lines = lines;
}

struct Outcome<'a> {
    lines: &'a SourceLines,
    errors: &'a mut Vec<Problem>,
    warnings: &'a mut Vec<Problem>,
}

/// What happens to a document whose kind/namespace/name an earlier one already has.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// A later file: it replaces the earlier one.
    Replace,
    /// The same file: an error; the first one stays.
    Duplicate,
}

fn verdict(earlier_file: &std::path::Path, later_file: &std::path::Path) -> Verdict {
    if earlier_file == later_file {
        Verdict::Duplicate
    } else {
        Verdict::Replace
    }
}

impl Outcome<'_> {
    fn kind<T>(&mut self, docs: &mut Vec<Doc<T>>) {
        // Nameless documents are reported by validation; they are never duplicates.
        let mut seen: HashMap<(String, String), usize> = HashMap::new();
        let mut kept: Vec<Doc<T>> = Vec::with_capacity(docs.len());
        for doc in docs.drain(..) {
            if doc.metadata.name.is_empty() {
                kept.push(doc);
                continue;
            }
            let key = (
                doc.metadata.namespace_or_default().to_owned(),
                doc.metadata.name.clone(),
            );
            let Some(&i) = seen.get(&key) else {
                seen.insert(key, kept.len());
                kept.push(doc);
                continue;
            };
            let earlier = &kept[i];
            let earlier_at = self.place(earlier);
            let id = format!("{} {}/{}", doc.kind, key.0, key.1);
            match verdict(&earlier.file, &doc.file) {
                Verdict::Duplicate => self.errors.push(Problem::coded(
                    Code::DuplicateInFile,
                    self.location(&doc),
                    format!(
                        "duplicate {id}: already defined at {earlier_at} in the same file \
                         (across files a later one replaces an earlier one, as `kubectl apply`)"
                    ),
                )),
                Verdict::Replace => {
                    self.warnings.push(Problem::coded(
                        Code::DocumentReplaced,
                        self.location(&doc),
                        format!(
                            "{id} replaces the one at {earlier_at}, as `kubectl apply` of the \
                             files in order would"
                        ),
                    ));
                    kept[i] = doc;
                }
            }
        }
        *docs = kept;
    }

    fn location<T>(&self, doc: &Doc<T>) -> Location {
        let name = FieldPath::keys(&["metadata", "name"]);
        Location {
            file: doc.file.clone(),
            line: self.lines.line_of(&doc.file, doc.index, &name),
            document: doc.index,
            object: doc.id(),
            field: name.to_string(),
        }
    }

    /// `FILE:LINE document N`, the way a user finds the other definition.
    fn place<T>(&self, doc: &Doc<T>) -> String {
        let line = self
            .lines
            .line_of(&doc.file, doc.index, &FieldPath::root())
            .map(|l| format!(":{l}"))
            .unwrap_or_default();
        format!("{}{line} (document {})", doc.file.display(), doc.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn later_files_replace_and_one_file_may_not_repeat() {
        let cases = [
            ("a.yaml", "b.yaml", Verdict::Replace),
            ("dir/a.yaml", "dir/b.yaml", Verdict::Replace),
            ("a.yaml", "a.yaml", Verdict::Duplicate),
        ];
        for (earlier, later, want) in cases {
            assert_eq!(verdict(Path::new(earlier), Path::new(later)), want);
        }
    }
}
