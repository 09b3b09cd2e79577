//! Reading multi-document YAML from files and directories into a validated [`ConfigSet`].
//!
//! Stages: YAML text -> [`SourceDoc`]s (value + line index) -> envelope (apiVersion, kind,
//! metadata) -> typed spec per kind (unknown fields become warnings) -> cross-document validation
//! (`validate`). Every problem of every stage is collected; the load fails if any is an error.

use crate::document::{Doc, Metadata};
use crate::error::{ConfigErrors, Location, Problem};
use crate::field_path::FieldPath;
use crate::validate::{self, Report};
use crate::yaml_source::{parse_documents, LineIndex, SourceDoc};
use crate::ConfigSet;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A successful load: the typed documents and the warnings (unsupported fields) found on the way.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub set: ConfigSet,
    pub warnings: Vec<Problem>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: serde_json::Value,
    /// Top-level fields besides the envelope: `status` of dumped objects, and the data of the
    /// Kubernetes kinds that keep it there (EndpointSlice, Endpoints).
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// The kinds warden reads, their API groups and the versions accepted for them.
const KINDS: &[(&str, &str, &[&str])] = &[
    ("Gateway", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("VirtualService", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("ServiceEntry", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("DestinationRule", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("EnvoyFilter", "networking.istio.io", &["v1alpha3"]),
    (
        "AuthorizationPolicy",
        "security.istio.io",
        &["v1beta1", "v1"],
    ),
    (
        "PeerAuthentication",
        "security.istio.io",
        &["v1beta1", "v1"],
    ),
    ("Sidecar", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("WorkloadEntry", "networking.istio.io", ISTIO_NET_VERSIONS),
    // The warden group's versions are owned by the RateLimitPolicy kind; any is accepted here.
    ("RateLimitPolicy", "warden.dev", &[]),
    // Kubernetes objects read as the mesh's service registry.
    ("Service", "", &["v1"]),
    ("Endpoints", "", &["v1"]),
    ("Pod", "", &["v1"]),
    ("EndpointSlice", "discovery.k8s.io", &["v1"]),
];

/// Kinds whose data is the whole object (`spec`, `status` or top-level fields), not `spec`.
const WHOLE_OBJECT_KINDS: &[&str] = &["Service", "Endpoints", "Pod", "EndpointSlice"];

/// Groups whose kinds warden owns: an unknown kind there is a typo, not someone else's object.
const OWN_GROUPS: &[&str] = &["warden.dev"];
const ISTIO_NET_VERSIONS: &[&str] = &["v1alpha3", "v1beta1", "v1"];

/// Load every path (files, or directories whose `*.yaml`/`*.yml` files are read in name order;
/// dotfiles and subdirectories are skipped).
pub fn load_paths(paths: &[PathBuf]) -> Result<Loaded, ConfigErrors> {
    let mut loader = Loader::default();
    for path in paths {
        loader.add_path(path, true);
    }
    loader.finish()
}

/// Load YAML text as if read from `name` (used for embedded configs and tests).
pub fn load_str(name: &str, text: &str) -> Result<Loaded, ConfigErrors> {
    let mut loader = Loader::default();
    loader.add_text(Path::new(name), text);
    loader.finish()
}

#[derive(Default)]
struct Loader {
    loaded: Loaded,
    errors: Vec<Problem>,
    /// Files in load order, so problems are reported in the order the user gave the files.
    files: Vec<PathBuf>,
    /// Kinds of which a document failed to decode: references to them are not checked, since
    /// the missing document would produce a second, misleading error.
    failed_kinds: BTreeSet<String>,
    /// Kinds warden does not use, by (kind, apiVersion): the first document's place and how
    /// many documents were skipped.
    skipped_kinds: BTreeMap<(String, String), (Problem, usize)>,
}

impl Loader {
    fn add_path(&mut self, path: &Path, explicit: bool) {
        if path.is_dir() {
            if !explicit {
                return; // only the directories the user named are read, not nested ones
            }
            let entries = match std::fs::read_dir(path) {
                Ok(e) => e,
                Err(e) => {
                    return self.file_error(path, None, format!("cannot read directory: {e}"));
                }
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_config_file(p) && p.is_file())
                .collect();
            files.sort();
            for f in files {
                self.add_path(&f, false);
            }
            return;
        }
        match std::fs::read_to_string(path) {
            Ok(text) => self.add_text(path, &text),
            Err(e) => self.file_error(path, None, format!("cannot read file: {e}")),
        }
    }

    fn file_error(&mut self, path: &Path, line: Option<usize>, message: String) {
        self.files.push(path.to_path_buf());
        self.errors.push(Problem {
            location: Location::file(path, line),
            message,
        });
    }

    fn add_text(&mut self, file: &Path, text: &str) {
        let docs = match parse_documents(text) {
            Ok(d) => d,
            Err(e) => return self.file_error(file, e.line, format!("invalid YAML: {}", e.message)),
        };
        self.files.push(file.to_path_buf());
        let mut index = 0;
        for doc in docs {
            for item in unwrap_list(doc) {
                index += 1;
                self.add_document(file, index, item);
            }
        }
    }

    fn add_document(&mut self, file: &Path, index: usize, source: SourceDoc) {
        let SourceDoc { value, lines } = source;
        let mut loc = Location {
            file: file.to_path_buf(),
            line: lines.line_of(&FieldPath::root()),
            document: index,
            ..Location::default()
        };
        if !value.is_object() {
            self.errors.push(Problem {
                location: loc,
                message: "a document must be a mapping with apiVersion, kind, metadata and spec"
                    .into(),
            });
            return;
        }
        // Kept for the error path: references to this kind are then not checked.
        let raw_kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .map(str::to_owned);
        let mut ignored = Vec::new();
        let env: Result<Envelope, _> = {
            let mut record = |p: serde_ignored::Path<'_>| ignored.push(FieldPath::from_ignored(&p));
            serde_path_to_error::deserialize(serde_ignored::Deserializer::new(value, &mut record))
        };
        let env = match env {
            Ok(env) => env,
            Err(e) => {
                let message = e.inner().to_string();
                let path = error_path(&FieldPath::root(), e.path(), &message);
                self.errors.push(problem_at(&loc, &lines, &path, message));
                self.failed_kinds.extend(raw_kind);
                return;
            }
        };
        loc.object = format!("{}/{}", env.kind, env.metadata.name);
        if !WHOLE_OBJECT_KINDS.contains(&env.kind.as_str()) {
            for key in env.rest.keys().filter(|k| *k != "status") {
                ignored.push(FieldPath::keys(&[key]));
            }
        }
        for path in ignored {
            // Kubernetes bookkeeping (status, metadata.uid...) carries no config; stay quiet.
            let top = match path.segments().first() {
                Some(crate::field_path::Segment::Key(k)) => k.as_str(),
                _ => "",
            };
            if top != "status" && top != "metadata" {
                self.loaded.warnings.push(problem_at(
                    &loc,
                    &lines,
                    &path,
                    "field not supported by warden; ignored".into(),
                ));
            }
        }
        let kind_field = FieldPath::keys(&["kind"]);
        let (doc_group, doc_version) = match env.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            // Core Kubernetes kinds: `apiVersion: v1`.
            None => ("", env.api_version.as_str()),
        };
        let Some((_, group, versions)) = KINDS.iter().find(|(k, _, _)| *k == env.kind) else {
            if env.kind.is_empty() || OWN_GROUPS.contains(&doc_group) {
                let message = if env.kind.is_empty() {
                    "missing kind".to_owned()
                } else {
                    let names: Vec<&str> = KINDS.iter().map(|(k, _, _)| *k).collect();
                    format!(
                        "unknown kind {:?} (supported: {})",
                        env.kind,
                        names.join(", ")
                    )
                };
                self.errors
                    .push(problem_at(&loc, &lines, &kind_field, message));
            } else {
                // Someone else's object in a namespace dump (a Deployment, a ConfigMap...): one
                // warning per kind, at its first document, however many the dump holds.
                let key = (env.kind.clone(), env.api_version.clone());
                let first = problem_at(&loc, &lines, &kind_field, String::new());
                self.skipped_kinds.entry(key).or_insert((first, 0)).1 += 1;
            }
            return;
        };
        if doc_group != *group || !(versions.is_empty() || versions.contains(&doc_version)) {
            let expected = if versions.is_empty() {
                format!("{group}/<version>")
            } else {
                versions
                    .iter()
                    .map(|v| format!("{group}/{v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            self.errors.push(problem_at(
                &loc,
                &lines,
                &FieldPath::keys(&["apiVersion"]),
                format!(
                    "apiVersion {:?} is not valid for kind {} (expected {expected})",
                    env.api_version, env.kind
                ),
            ));
            self.failed_kinds.insert(env.kind);
            return;
        }
        let whole = WHOLE_OBJECT_KINDS.contains(&env.kind.as_str());
        let (data, base) = if whole {
            let mut object = env.rest;
            if !env.spec.is_null() {
                object.insert("spec".into(), env.spec);
            }
            (serde_json::Value::Object(object), FieldPath::root())
        } else {
            (env.spec, FieldPath::keys(&["spec"]))
        };
        let set = &mut self.loaded.set;
        macro_rules! typed {
            ($field:ident) => {{
                match decode(
                    data,
                    &base,
                    &loc,
                    &lines,
                    &mut self.loaded.warnings,
                    &mut self.errors,
                ) {
                    Ok(spec) => set.$field.push(Doc {
                        file: file.to_path_buf(),
                        index,
                        api_version: env.api_version,
                        kind: env.kind,
                        metadata: env.metadata,
                        spec,
                    }),
                    Err(problem) => {
                        self.errors.push(problem);
                        self.failed_kinds.insert(env.kind);
                    }
                }
            }};
        }
        match env.kind.as_str() {
            "Gateway" => typed!(gateways),
            "VirtualService" => typed!(virtual_services),
            "ServiceEntry" => typed!(service_entries),
            "DestinationRule" => typed!(destination_rules),
            "EnvoyFilter" => typed!(envoy_filters),
            "AuthorizationPolicy" => typed!(authorization_policies),
            "PeerAuthentication" => typed!(peer_authentications),
            "RateLimitPolicy" => typed!(rate_limit_policies),
            "Sidecar" => typed!(sidecars),
            "WorkloadEntry" => typed!(workload_entries),
            "Service" => typed!(services),
            "Endpoints" => typed!(endpoints),
            "Pod" => typed!(pods),
            "EndpointSlice" => typed!(endpoint_slices),
            _ => return,
        }
        self.loaded
            .set
            .source_lines
            .insert(file.to_path_buf(), index, lines);
    }

    fn finish(mut self) -> Result<Loaded, ConfigErrors> {
        for ((kind, api_version), (mut first, count)) in std::mem::take(&mut self.skipped_kinds) {
            first.message = match count {
                1 => format!("kind {kind} ({api_version}) is not used by warden; skipped"),
                n => format!(
                    "kind {kind} ({api_version}) is not used by warden; skipped ({n} documents, \
                     this is the first)"
                ),
            };
            self.loaded.warnings.push(first);
        }
        crate::mesh_registry::complete(&mut self.loaded.set);
        let mut report = Report::new(&self.loaded.set.source_lines);
        validate::validate(&self.loaded.set, &self.failed_kinds, &mut report);
        let (errors, warnings) = report.into_parts();
        self.errors.extend(errors);
        self.loaded.warnings.extend(warnings);
        let files = self.files;
        let order = |p: &Problem| {
            let file = files
                .iter()
                .position(|f| *f == p.location.file)
                .unwrap_or(usize::MAX);
            (file, p.location.document, p.location.line)
        };
        self.errors.sort_by_key(order);
        self.loaded.warnings.sort_by_key(order);
        if self.errors.is_empty() {
            Ok(self.loaded)
        } else {
            Err(ConfigErrors::new(self.errors).with_warnings(self.loaded.warnings))
        }
    }
}

/// Whether an unknown field at `path` of a `kind` document could change which requests a
/// route or policy takes or what they get (a route action, a match condition, a traffic or
/// authorization rule): those are errors, since ignoring them would silently change
/// behaviour. Fields about visibility or bookkeeping (`exportTo`, names) stay warnings.
fn changes_behaviour(kind: &str, path: &FieldPath) -> bool {
    use crate::field_path::Segment;
    let keys: Vec<&str> = path
        .segments()
        .iter()
        .filter_map(|s| match s {
            Segment::Key(k) => Some(k.as_str()),
            Segment::Index(_) => None,
        })
        .collect();
    let (Some(&"spec"), Some(top)) = (keys.first(), keys.get(1)) else {
        return false;
    };
    match kind {
        "VirtualService" => matches!(*top, "http" | "tcp" | "tls" | "delegate"),
        "DestinationRule" => matches!(*top, "trafficPolicy" | "subsets" | "workloadSelector"),
        "Gateway" => matches!(*top, "servers" | "selector"),
        "ServiceEntry" => matches!(*top, "ports" | "endpoints" | "resolution"),
        "AuthorizationPolicy" | "Sidecar" | "PeerAuthentication" => *top != "exportTo",
        _ => false,
    }
}

/// The documents a YAML document stands for: the `items` of a `kind: List` (what
/// `kubectl get ... -o yaml` prints), each with its own lines, else the document itself.
fn unwrap_list(doc: SourceDoc) -> Vec<SourceDoc> {
    let is_list = doc.value.get("kind").and_then(|k| k.as_str()) == Some("List")
        && doc.value.get("items").is_some_and(|i| i.is_array());
    if !is_list {
        return vec![doc];
    }
    let SourceDoc { value, lines } = doc;
    let items = match value {
        serde_json::Value::Object(mut map) => match map.remove("items") {
            Some(serde_json::Value::Array(items)) => items,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, value)| SourceDoc {
            value,
            lines: lines.subtree(&FieldPath::keys(&["items"]).index(i)),
        })
        .collect()
}

/// The files [`load_paths`] reads for `paths`, in its order: named files, and the config files
/// directly inside named directories (for callers that watch or vet them before a load).
pub fn config_files(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let Ok(entries) = std::fs::read_dir(path) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_config_file(p) && p.is_file())
            .collect();
        found.sort();
        files.extend(found);
    }
    files
}

/// `*.yaml` / `*.yml`, not a dotfile (editors' swap files, `..data` of ConfigMap mounts).
fn is_config_file(p: &Path) -> bool {
    let hidden = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    let yaml = matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("yaml") | Some("yml")
    );
    yaml && !hidden
}

fn problem_at(loc: &Location, lines: &LineIndex, path: &FieldPath, message: String) -> Problem {
    Problem {
        location: Location {
            line: lines.line_of(path).or(loc.line),
            field: path.to_string(),
            ..loc.clone()
        },
        message,
    }
}

/// The path of a serde error below `base`; "missing field `x`" names `x` itself.
fn error_path(base: &FieldPath, path: &serde_path_to_error::Path, message: &str) -> FieldPath {
    let mut full = base.join(&FieldPath::from_path_to_error(path));
    if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some(name) = rest.split('`').next() {
            full = full.key(name);
        }
    }
    full
}

/// Deserialize a spec, recording a warning per ignored (unsupported) field and an error with the
/// field path on a type mismatch or a missing required field.
fn decode<T: DeserializeOwned>(
    spec: serde_json::Value,
    base: &FieldPath,
    loc: &Location,
    lines: &LineIndex,
    warnings: &mut Vec<Problem>,
    errors: &mut Vec<Problem>,
) -> Result<T, Problem> {
    let spec = if spec.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        spec
    };
    let mut ignored = Vec::new();
    let result: Result<T, _> = {
        let mut record = |p: serde_ignored::Path<'_>| ignored.push(FieldPath::from_ignored(&p));
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(spec, &mut record))
    };
    let kind = loc.object.split('/').next().unwrap_or("");
    for path in ignored {
        let path = base.join(&path);
        if changes_behaviour(kind, &path) {
            errors.push(problem_at(
                loc,
                lines,
                &path,
                "not supported by warden yet; it would change what requests get, so it is \
                 an error rather than ignored"
                    .into(),
            ));
        } else {
            warnings.push(problem_at(
                loc,
                lines,
                &path,
                "field not supported by warden; ignored".into(),
            ));
        }
    }
    result.map_err(|e| {
        let message = e.inner().to_string();
        let path = error_path(base, e.path(), &message);
        problem_at(loc, lines, &path, message)
    })
}
