//! Reading multi-document YAML from files and directories into a validated [`ConfigSet`].
//!
//! Stages: YAML text -> [`SourceDoc`]s (value + line index) -> envelope (apiVersion, kind,
//! metadata) -> typed spec per kind (unknown fields become warnings) -> cross-document validation
//! (`validate`). Every problem of every stage is collected; the load fails if any is an error.

use crate::code::Code;
use crate::document::{Doc, Metadata};
use crate::error::{ConfigErrors, Location, Problem};
use crate::field_path::FieldPath;
use crate::kind_policy::{
    classify as classify_kind, skip_matches, telemetry_behaviour_field, KindVerdict, READ_KINDS,
};
use crate::unknown_field;
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

/// Choices of the operator about a load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Kinds warden refuses (they change what requests get: `WasmPlugin`, Gateway API
    /// kinds...) that the operator accepts to skip: each is then a
    /// warning at every load instead of an error. `Kind` or `Kind.group`
    /// (`Gateway.gateway.networking.k8s.io`); see [`crate::check_skip_kind`].
    pub skip_kinds: Vec<String>,
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

/// How Gateway API kinds are named for unknown-field checks (`Gateway` alone is Istio's).
const GATEWAY_API_SCHEMA: &str = "gateway.networking.k8s.io/";

/// Kinds whose data is the whole object (`spec`, `status` or top-level fields), not `spec`.
const WHOLE_OBJECT_KINDS: &[&str] = &["Service", "Endpoints", "Pod", "EndpointSlice"];

/// Load every path (files, or directories whose `*.yaml`/`*.yml` files are read in name order,
/// symbolic links followed; dotfiles and subdirectories are skipped).
pub fn load_paths(paths: &[PathBuf]) -> Result<Loaded, ConfigErrors> {
    load_paths_with(paths, &LoadOptions::default())
}

/// [`load_paths`] with the operator's [`LoadOptions`].
pub fn load_paths_with(paths: &[PathBuf], options: &LoadOptions) -> Result<Loaded, ConfigErrors> {
    let mut loader = Loader::new(options);
    for path in paths {
        loader.add_path(path, true);
    }
    loader.finish()
}

/// Load YAML text as if read from `name` (used for embedded configs and tests).
pub fn load_str(name: &str, text: &str) -> Result<Loaded, ConfigErrors> {
    load_str_with(name, text, &LoadOptions::default())
}

/// [`load_str`] with the operator's [`LoadOptions`].
pub fn load_str_with(
    name: &str,
    text: &str,
    options: &LoadOptions,
) -> Result<Loaded, ConfigErrors> {
    let mut loader = Loader::new(options);
    loader.add_text(Path::new(name), text);
    loader.finish()
}

#[derive(Default)]
struct Loader {
    options: LoadOptions,
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
    /// Refused kinds the skip list let through, by (kind, apiVersion), as `skipped_kinds`.
    skipped_by_option: BTreeMap<(String, String), (Problem, usize)>,
}

impl Loader {
    fn new(options: &LoadOptions) -> Self {
        Self {
            options: options.clone(),
            ..Self::default()
        }
    }

    fn add_path(&mut self, path: &Path, explicit: bool) {
        if path.is_dir() {
            if !explicit {
                return; // only the directories the user named are read, not nested ones
            }
            match list_dir(path) {
                Ok(listing) => {
                    for link in listing.dangling {
                        let target = std::fs::read_link(&link)
                            .map(|t| t.display().to_string())
                            .unwrap_or_default();
                        self.files.push(link.clone());
                        self.loaded.warnings.push(Problem::coded(
                            Code::DanglingSymlink,
                            Location::file(&link, None),
                            format!("symbolic link to {target:?}, which does not exist; skipped"),
                        ));
                    }
                    for f in listing.files {
                        self.add_path(&f, false);
                    }
                }
                Err(e) => self.file_error(path, None, format!("cannot read directory: {e}")),
            }
            return;
        }
        match std::fs::read_to_string(path) {
            Ok(text) => self.add_text(path, &text),
            Err(e) => {
                let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink());
                let message = if link && !path.exists() {
                    let target = std::fs::read_link(path)
                        .map(|t| t.display().to_string())
                        .unwrap_or_default();
                    format!("cannot read file: symbolic link to {target:?}, which does not exist")
                } else {
                    format!("cannot read file: {e}")
                };
                self.file_error(path, None, message)
            }
        }
    }

    fn file_error(&mut self, path: &Path, line: Option<usize>, message: String) {
        self.files.push(path.to_path_buf());
        self.errors
            .push(Problem::new(Location::file(path, line), message));
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
            self.errors.push(Problem::new(
                loc,
                "a document must be a mapping with apiVersion, kind, metadata and spec",
            ));
            return;
        }
        if is_ratelimit_service_config(&value) {
            self.errors.push(Problem::new(
                loc,
                "this is an envoyproxy/ratelimit service config (domain, descriptors), not a \
                 Kubernetes document; check it with `warden ratelimit --check --config FILE` \
                 and serve it with `warden ratelimit`",
            ));
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
        let kind_field = FieldPath::keys(&["kind"]);
        let (doc_group, doc_version) = match env.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            // Core Kubernetes kinds: `apiVersion: v1`.
            None => ("", env.api_version.as_str()),
        };
        if env.kind.is_empty() {
            self.errors
                .push(problem_at(&loc, &lines, &kind_field, "missing kind".into()));
            return;
        }
        let mut verdict = classify_kind(&env.kind, doc_group);
        // Where a refusal points: the kind, or the field that makes the document one.
        let mut refused_at = kind_field.clone();
        if env.kind == "Telemetry" && matches!(verdict, KindVerdict::Refused { .. }) {
            match telemetry_behaviour_field(&env.spec) {
                None => verdict = KindVerdict::Ignored,
                Some(f) => refused_at = FieldPath::keys(&["spec", f]),
            }
        }
        if env.kind == "Telemetry"
            && verdict == KindVerdict::Ignored
            && self.add_telemetry_metrics(file, index, &env, &loc, &lines)
        {
            return;
        }
        let gateway_api = crate::gateway_api::GROUPS.contains(&doc_group);
        if gateway_api
            && verdict == KindVerdict::Read
            && self
                .options
                .skip_kinds
                .iter()
                .any(|e| skip_matches(e, &env.kind, doc_group))
        {
            verdict = KindVerdict::Refused {
                why: "the operator skips it".into(),
            };
        }
        match verdict {
            KindVerdict::Read => {}
            KindVerdict::Unknown { why } => {
                let problem = problem_at(&loc, &lines, &kind_field, why);
                self.errors.push(Problem {
                    code: Some(Code::UnknownKind),
                    ..problem
                });
                return;
            }
            KindVerdict::Refused { why } => {
                let skip = self
                    .options
                    .skip_kinds
                    .iter()
                    .any(|e| skip_matches(e, &env.kind, doc_group));
                let at = refused_at;
                if skip {
                    let key = (env.kind.clone(), env.api_version.clone());
                    let first = problem_at(&loc, &lines, &at, why);
                    self.skipped_by_option.entry(key).or_insert((first, 0)).1 += 1;
                } else {
                    let message = format!(
                        "kind {} ({}) is not supported: {why}. To load the rest without it, \
                         skip it explicitly (--skip-kind {})",
                        env.kind, env.api_version, env.kind
                    );
                    let problem = problem_at(&loc, &lines, &at, message);
                    self.errors.push(Problem {
                        code: Some(Code::KindNotSupported),
                        ..problem
                    });
                }
                return;
            }
            KindVerdict::Ignored if env.kind == "Telemetry" => {
                match crate::telemetry_access_logging::parse_telemetry(&env.spec) {
                    Ok(Some((logging, warnings))) => {
                        for (field, message) in warnings {
                            self.loaded.warnings.push(Problem {
                                code: Some(Code::FieldNotSupported),
                                ..problem_at(&loc, &lines, &field, message)
                            });
                        }
                        self.loaded.set.telemetry_access_logging.push(Doc {
                            file: file.to_path_buf(),
                            index,
                            api_version: env.api_version.clone(),
                            kind: env.kind.clone(),
                            metadata: env.metadata.clone(),
                            spec: logging,
                        });
                    }
                    Ok(None) => {}
                    Err(problems) => {
                        for (field, message) in problems {
                            self.errors.push(problem_at(&loc, &lines, &field, message));
                        }
                        return;
                    }
                }
                match crate::telemetry_tracing::parse_telemetry(&env.spec) {
                    Ok(Some(tracing)) => self.loaded.set.telemetry_tracing.push(Doc {
                        file: file.to_path_buf(),
                        index,
                        api_version: env.api_version.clone(),
                        kind: env.kind.clone(),
                        metadata: env.metadata.clone(),
                        spec: tracing,
                    }),
                    Ok(None) => {}
                    Err(problems) => {
                        for (field, message) in problems {
                            self.errors.push(problem_at(&loc, &lines, &field, message));
                        }
                        return;
                    }
                }
                // Its `metrics` were read above (`add_telemetry_metrics`); anything else is
                // passed by with a warning.
                let read_all = env.spec.as_object().is_some_and(|m| {
                    m.keys().all(|k| {
                        k == "accessLogging" || k == "selector" || k == "metrics" || k == "tracing"
                    })
                });
                if !read_all {
                    let key = (env.kind.clone(), env.api_version.clone());
                    let first = problem_at(&loc, &lines, &kind_field, String::new());
                    self.skipped_kinds.entry(key).or_insert((first, 0)).1 += 1;
                }
                return;
            }
            KindVerdict::Ignored => {
                // Someone else's object in a namespace dump (a Deployment, a ConfigMap...): one
                // warning per kind, at its first document, however many the dump holds.
                let key = (env.kind.clone(), env.api_version.clone());
                let first = problem_at(&loc, &lines, &kind_field, String::new());
                self.skipped_kinds.entry(key).or_insert((first, 0)).1 += 1;
                return;
            }
        }
        if gateway_api {
            let version = doc_version.to_owned();
            return self.add_gateway_api(file, index, env, loc, lines, &version, ignored);
        }
        if env.kind == "Namespace" {
            // Only its labels are read (Gateway listeners select route namespaces by them).
            let labels = env.metadata.labels.clone();
            let name = env.metadata.name.clone();
            self.loaded.set.gateway_api.namespaces.insert(name, labels);
            return;
        }
        let Some((_, group, versions)) = READ_KINDS.iter().find(|(k, _, _)| *k == env.kind) else {
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
        // The envelope's unread fields, now that the kind is one warden reads.
        let istio = !crate::kind_schema::istio_paths(&env.kind).is_empty();
        for path in ignored {
            let Some(finding) = unknown_field::classify_envelope(istio, &path) else {
                continue;
            };
            let problem = Problem {
                code: Some(finding.code),
                ..problem_at(&loc, &lines, &path, finding.message)
            };
            match finding.error {
                true => self.errors.push(problem),
                false => self.loaded.warnings.push(problem),
            }
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
                    &env.kind,
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
                        self.errors.extend(problem.map(|p| *p));
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
            "RequestAuthentication" => typed!(request_authentications),
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

    /// A Telemetry's `selector` and `metrics` (`kinds::telemetry`), decoded into the set;
    /// `tagOverrides` UPSERT is a warning (the series keep their labels). True when the
    /// document holds nothing else, so it is not also reported as passed by.
    fn add_telemetry_metrics(
        &mut self,
        file: &Path,
        index: usize,
        env: &Envelope,
        loc: &Location,
        lines: &LineIndex,
    ) -> bool {
        let Some(spec) = env.spec.as_object() else {
            return false;
        };
        let read = ["selector", "metrics"];
        let only_metrics = spec
            .keys()
            .all(|k| read.contains(&k.as_str()) || k == "targetRefs");
        if !spec.contains_key("metrics") {
            return false;
        }
        let part: serde_json::Map<String, serde_json::Value> = spec
            .iter()
            .filter(|(k, _)| read.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let decoded = decode::<crate::kinds::telemetry::Telemetry>(
            &env.kind,
            serde_json::Value::Object(part),
            &FieldPath::keys(&["spec"]),
            loc,
            lines,
            &mut self.loaded.warnings,
            &mut self.errors,
        );
        match decoded {
            Ok(telemetry) => {
                for (i, m) in telemetry.metrics.iter().enumerate() {
                    for (j, o) in m.overrides.iter().enumerate() {
                        for (tag, t) in &o.tag_overrides {
                            if t.operation.unwrap_or_default()
                                == crate::kinds::telemetry::TagOperation::Upsert
                            {
                                let at = FieldPath::keys(&["spec", "metrics"])
                                    .index(i)
                                    .key("overrides")
                                    .index(j)
                                    .key("tagOverrides")
                                    .key(tag.clone());
                                self.loaded.warnings.push(problem_at(
                                    loc,
                                    lines,
                                    &at,
                                    "tagOverrides UPSERT is not implemented by warden: the \
                                     metrics keep their standard labels"
                                        .into(),
                                ));
                            }
                        }
                    }
                }
                self.loaded.set.telemetries.push(Doc {
                    file: file.to_path_buf(),
                    index,
                    api_version: env.api_version.clone(),
                    kind: env.kind.clone(),
                    metadata: env.metadata.clone(),
                    spec: telemetry,
                });
                self.loaded
                    .set
                    .source_lines
                    .insert(file.to_path_buf(), index, lines.clone());
            }
            Err(problem) => {
                self.errors.extend(problem.map(|p| *p));
                self.failed_kinds.insert(env.kind.clone());
            }
        }
        only_metrics
    }

    /// A document of the Gateway API's groups: version checked, spec decoded into
    /// [`crate::gateway_api::GatewayApiSet`].
    #[allow(clippy::too_many_arguments)]
    fn add_gateway_api(
        &mut self,
        file: &Path,
        index: usize,
        env: Envelope,
        loc: Location,
        lines: LineIndex,
        version: &str,
        ignored: Vec<FieldPath>,
    ) {
        let versions = crate::gateway_api::READ_KINDS
            .iter()
            .find(|(k, _)| *k == env.kind)
            .map_or(&[][..], |(_, v)| *v);
        if !versions.contains(&version) {
            self.errors.push(problem_at(
                &loc,
                &lines,
                &FieldPath::keys(&["apiVersion"]),
                format!(
                    "apiVersion {:?} is not valid for kind {} (expected {})",
                    env.api_version,
                    env.kind,
                    versions
                        .iter()
                        .map(|v| format!("gateway.networking.k8s.io/{v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
            self.failed_kinds.insert(env.kind);
            return;
        }
        for path in ignored {
            let Some(finding) = unknown_field::classify_envelope(false, &path) else {
                continue;
            };
            let problem = Problem {
                code: Some(finding.code),
                ..problem_at(&loc, &lines, &path, finding.message)
            };
            match finding.error {
                true => self.errors.push(problem),
                false => self.loaded.warnings.push(problem),
            }
        }
        let schema_kind = format!("{GATEWAY_API_SCHEMA}{}", env.kind);
        let base = FieldPath::keys(&["spec"]);
        let api = &mut self.loaded.set.gateway_api;
        macro_rules! typed {
            ($field:ident) => {{
                match decode(
                    &schema_kind,
                    env.spec,
                    &base,
                    &loc,
                    &lines,
                    &mut self.loaded.warnings,
                    &mut self.errors,
                ) {
                    Ok(spec) => api.$field.push(Doc {
                        file: file.to_path_buf(),
                        index,
                        api_version: env.api_version,
                        kind: env.kind,
                        metadata: env.metadata,
                        spec,
                    }),
                    Err(problem) => {
                        self.errors.extend(problem.map(|p| *p));
                        self.failed_kinds.insert(env.kind);
                        return;
                    }
                }
            }};
        }
        match env.kind.as_str() {
            "GatewayClass" => typed!(gateway_classes),
            "Gateway" => typed!(gateways),
            "HTTPRoute" => typed!(http_routes),
            "GRPCRoute" => typed!(grpc_routes),
            "TCPRoute" => typed!(tcp_routes),
            "TLSRoute" => typed!(tls_routes),
            "ReferenceGrant" => typed!(reference_grants),
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
            first.code = Some(Code::KindIgnored);
            self.loaded.warnings.push(first);
        }
        for ((kind, api_version), (mut first, count)) in std::mem::take(&mut self.skipped_by_option)
        {
            first.message = format!(
                "kind {kind} ({api_version}) skipped as --skip-kind asks ({count} document{}, \
                 this is the first); requests do not get what it would do: {}",
                if count == 1 { "" } else { "s" },
                first.message
            );
            first.code = Some(Code::KindSkipped);
            self.loaded.warnings.push(first);
        }
        crate::dedupe::replace_reapplied(
            &mut self.loaded.set,
            &mut self.errors,
            &mut self.loaded.warnings,
        );
        crate::mesh_registry::complete(&mut self.loaded.set);
        let mut report = Report::new(&self.loaded.set.source_lines);
        validate::validate(&self.loaded.set, &self.failed_kinds, &mut report);
        let (errors, warnings, dangling) = report.into_parts();
        self.errors.extend(errors);
        self.loaded.warnings.extend(warnings);
        self.loaded.set.dangling = dangling;
        // After validation: the generated documents are checked by the translation itself,
        // at the Gateway API documents they come from.
        let translated = crate::gateway_api::translate::translate(&self.loaded.set);
        let set = &mut self.loaded.set;
        set.gateways.extend(translated.gateways);
        set.virtual_services.extend(translated.virtual_services);
        set.gateway_api.status = translated.status;
        self.errors.extend(translated.errors);
        self.loaded.warnings.extend(translated.warnings);
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
        "AuthorizationPolicy" | "Sidecar" | "PeerAuthentication" | "RequestAuthentication" => {
            *top != "exportTo"
        }
        // Gateway API kinds: every field they have is read, so an unknown one is a mistake
        // or a newer field warden does not implement.
        k if k.starts_with(GATEWAY_API_SCHEMA) => true,
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
        if let Ok(listing) = list_dir(path) {
            files.extend(listing.files);
        }
    }
    files
}

/// What a config directory holds for the loader.
#[derive(Debug, Default, PartialEq, Eq)]
struct Listing {
    /// Config files (symbolic links to files included), in name order.
    files: Vec<PathBuf>,
    /// Config-file names that are symbolic links to nothing.
    dangling: Vec<PathBuf>,
}

/// The config files directly in `dir`. Links are followed, so a ConfigMap volume (per-key links
/// `name.yaml -> ..data/name.yaml`, `..data -> ..2026_12_07_…`) yields each key once: the
/// hidden `..` entries are not config files.
fn list_dir(dir: &Path) -> std::io::Result<Listing> {
    let mut listing = Listing::default();
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        if !is_config_file(&path) {
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => listing.files.push(path),
            Ok(_) => {} // a directory named like a file
            Err(_) if entry.file_type().is_ok_and(|t| t.is_symlink()) => {
                listing.dangling.push(path)
            }
            Err(_) => {}
        }
    }
    listing.files.sort();
    listing.dangling.sort();
    Ok(listing)
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
    Problem::new(
        Location {
            line: lines.line_of(path).or(loc.line),
            field: path.to_string(),
            ..loc.clone()
        },
        message,
    )
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

/// Deserialize a spec, recording a warning or an error per field it does not read
/// ([`unknown_field`]) and an error with the field path on a type mismatch or a missing
/// required field. `Err(None)`: the errors are recorded already (a misspelt field).
fn decode<T: DeserializeOwned>(
    kind: &str,
    spec: serde_json::Value,
    base: &FieldPath,
    loc: &Location,
    lines: &LineIndex,
    warnings: &mut Vec<Problem>,
    errors: &mut Vec<Problem>,
) -> Result<T, Option<Box<Problem>>> {
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
    // Names the typos stood for: a "missing field" error for one of them is the typo's.
    let mut meant: Vec<String> = Vec::new();
    let mut typo = false;
    for relative in ignored {
        let path = base.join(&relative);
        let finding = unknown_field::classify(kind, &relative, changes_behaviour(kind, &path));
        let problem = Problem {
            code: Some(finding.code),
            ..problem_at(loc, lines, &path, finding.message)
        };
        if finding.code == Code::UnknownField && finding.error {
            typo = true;
            meant.extend(finding.suggestion);
        }
        if finding.error {
            errors.push(problem);
        } else {
            warnings.push(problem);
        }
    }
    let value = result.map_err(|e| {
        let message = e.inner().to_string();
        let consequence = message
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
            .is_some_and(|f| meant.iter().any(|m| m == f));
        if consequence {
            return None;
        }
        let path = error_path(base, e.path(), &message);
        Some(Box::new(problem_at(loc, lines, &path, message)))
    })?;
    // A misspelt field: the document is not what its author meant, so checking it further
    // would report consequences of the typo (`rout:` -> "a route needs `route`").
    match typo {
        true => Err(None),
        false => Ok(value),
    }
}

/// A document shaped like envoyproxy/ratelimit's config (a `domain` and its `descriptors`,
/// no `kind`): given to the proxy's loader by mistake, it deserves its own pointer.
fn is_ratelimit_service_config(value: &serde_json::Value) -> bool {
    value.get("kind").is_none()
        && value.get("apiVersion").is_none()
        && value.get("domain").is_some_and(|d| d.is_string())
        && value.get("descriptors").is_some_and(|d| d.is_array())
}

#[cfg(test)]
mod tests {
    use super::is_ratelimit_service_config;
    use serde_json::json;

    #[test]
    fn a_ratelimit_service_config_is_told_apart_from_kubernetes_documents() {
        for (doc, want) in [
            (json!({"domain": "edge", "descriptors": []}), true),
            (
                json!({"domain": "edge", "descriptors": [{"key": "k"}]}),
                true,
            ),
            (json!({"domain": "edge"}), false),
            (json!({"domain": 1, "descriptors": []}), false),
            (
                json!({"kind": "ConfigMap", "domain": "edge", "descriptors": []}),
                false,
            ),
            (
                json!({"apiVersion": "v1", "domain": "edge", "descriptors": []}),
                false,
            ),
        ] {
            assert_eq!(is_ratelimit_service_config(&doc), want, "{doc}");
        }
    }
}
