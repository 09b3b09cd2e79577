//! What a field warden's types do not read is: an Istio field warden does not implement (yet),
//! or a field no one defines — for Istio's kinds a typo that `kubectl apply` would refuse
//! ("strict decoding error: unknown field"), reported with the closest known name.

use crate::code::Code;
use crate::field_path::{FieldPath, Segment};
use crate::kind_schema::{istio_paths, schema_pattern, warden_schema};
use crate::suggest::closest;

/// How to report one unread field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub error: bool,
    pub code: Code,
    pub message: String,
    /// The known name a typo stands for.
    pub suggestion: Option<String>,
}

/// Decide about the unread field at `path` (below the kind's schema root: `http[0].rout` for
/// `spec.http[0].rout`) of a `kind` document. `changes_behaviour` says whether ignoring a
/// field there could change what requests get.
pub(crate) fn classify(kind: &str, path: &FieldPath, changes_behaviour: bool) -> Finding {
    let not_supported = if changes_behaviour {
        Finding {
            error: true,
            code: Code::FieldNotSupported,
            message: "not supported by warden yet; it would change what requests get, so it is \
                      an error rather than ignored"
                .into(),
            suggestion: None,
        }
    } else {
        Finding {
            error: false,
            code: Code::FieldNotSupported,
            message: "field not supported by warden; ignored".into(),
            suggestion: None,
        }
    };
    let Some(Segment::Key(name)) = path.segments().last() else {
        return not_supported;
    };
    let Some(schema) = warden_schema(kind) else {
        return not_supported;
    };
    let parent = path.parent();
    let known: Vec<&str> = schema.at(&parent).map(|n| n.fields()).unwrap_or_default();
    let suggestion = closest(name, known.iter().copied());
    let istio = istio_paths(kind);
    if istio.is_empty() {
        // Not an Istio kind: its schema is not known here beyond what warden reads.
        return match suggestion {
            Some(s) => Finding {
                message: format!("unknown field `{name}`, did you mean `{s}`?"),
                code: Code::UnknownField,
                suggestion: Some(s.to_owned()),
                ..not_supported
            },
            None => not_supported,
        };
    }
    let pattern = schema_pattern(schema, &parent).map(|p| {
        if p.is_empty() {
            name.clone()
        } else {
            format!("{p}.{name}")
        }
    });
    if pattern.is_some_and(|p| istio.contains(&p)) {
        return not_supported;
    }
    let message = match suggestion {
        Some(s) => format!("unknown field `{name}`, did you mean `{s}`?"),
        None => format!(
            "unknown field `{name}` (fields here: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ),
    };
    Finding {
        error: true,
        code: Code::UnknownField,
        message,
        suggestion: suggestion.map(str::to_owned),
    }
}

/// Kubernetes' ObjectMeta fields: set by the API server or by tools, never config.
const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The top-level fields of a Kubernetes object.
const ENVELOPE: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];

/// Decide about an unread field of a document's envelope (`metadata.namespce`, `sepc`), for a
/// kind warden reads; `istio` says whether it is one of Istio's kinds. `None`: nothing to say
/// (a `status`, the API server's metadata).
pub(crate) fn classify_envelope(istio: bool, path: &FieldPath) -> Option<Finding> {
    let keys: Vec<&str> = path
        .segments()
        .iter()
        .filter_map(|s| match s {
            Segment::Key(k) => Some(k.as_str()),
            Segment::Index(_) => None,
        })
        .collect();
    let typo = |name: &str, known: &[&str]| {
        let suggestion = closest(name, known.iter().copied());
        let message = match suggestion {
            Some(s) => format!("unknown field `{name}`, did you mean `{s}`?"),
            None => format!("unknown field `{name}` (fields here: {})", known.join(", ")),
        };
        Finding {
            error: true,
            code: Code::UnknownField,
            message,
            suggestion: suggestion.map(str::to_owned),
        }
    };
    match keys.as_slice() {
        ["status", ..] => None,
        // A misspelt `namespace` would move the object to `default` unnoticed.
        ["metadata", field, ..] if OBJECT_META.contains(field) => None,
        ["metadata", field, ..] => Some(typo(field, OBJECT_META)),
        [field, ..] if istio => Some(typo(field, ENVELOPE)),
        _ => Some(Finding {
            error: false,
            code: Code::FieldNotSupported,
            message: "field not supported by warden; ignored".into(),
            suggestion: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_typos_are_errors_and_bookkeeping_is_quiet() {
        let cases = [
            (true, "status.conditions", None),
            (true, "metadata.uid", None),
            (true, "metadata.managedFields[0].manager", None),
            (
                true,
                "metadata.namespce",
                Some("unknown field `namespce`, did you mean `namespace`?"),
            ),
            (
                false,
                "metadata.lables",
                Some("unknown field `lables`, did you mean `labels`?"),
            ),
            (
                true,
                "sepc",
                Some("unknown field `sepc`, did you mean `spec`?"),
            ),
            (
                true,
                "data",
                Some("unknown field `data` (fields here: apiVersion, kind,"),
            ),
            (
                false,
                "data",
                Some("field not supported by warden; ignored"),
            ),
        ];
        for (istio, path, want) in cases {
            let got = classify_envelope(istio, &FieldPath::parse(path)).map(|f| f.message);
            match (got.as_deref(), want) {
                (None, None) => {}
                (Some(g), Some(w)) if g.starts_with(w) => {}
                (g, w) => panic!("{path}: {g:?}, want {w:?}"),
            }
        }
    }

    #[test]
    fn typos_get_the_closest_name_and_istio_fields_keep_not_supported() {
        let cases = [
            (
                "VirtualService",
                "http[0].rout",
                true,
                "unknown field `rout`, did you mean `route`?",
            ),
            (
                "VirtualService",
                "http[0].matchs",
                true,
                "unknown field `matchs`, did you mean `match`?",
            ),
            (
                "VirtualService",
                "http[0].match[0].uri.prefx",
                true,
                "unknown field `prefx`, did you mean `prefix`?",
            ),
            (
                "VirtualService",
                "http[0].route[0].destnation",
                true,
                "unknown field `destnation`, did you mean `destination`?",
            ),
            (
                "VirtualService",
                "hots",
                false,
                "unknown field `hots`, did you mean `hosts`?",
            ),
            (
                "ServiceEntry",
                "locaton",
                false,
                "unknown field `locaton`, did you mean `location`?",
            ),
            (
                "VirtualService",
                "http[0].delegate",
                true,
                "not supported by warden yet",
            ),
            (
                "VirtualService",
                "exportTo",
                false,
                "field not supported by warden; ignored",
            ),
            (
                "DestinationRule",
                "trafficPolicy.tunnel",
                true,
                "not supported by warden yet",
            ),
            (
                "VirtualService",
                "http[0].zzz",
                true,
                "unknown field `zzz` (fields here: ",
            ),
        ];
        for (kind, path, behaviour, want) in cases {
            let f = classify(kind, &FieldPath::parse(path), behaviour);
            assert!(f.message.starts_with(want), "{kind} {path}: {}", f.message);
            let unknown = want.starts_with("unknown");
            assert_eq!(f.error, unknown || behaviour, "{kind} {path}");
            let code = if unknown {
                Code::UnknownField
            } else {
                Code::FieldNotSupported
            };
            assert_eq!(f.code, code, "{kind} {path}");
        }
    }
}
