//! Splicing the sidecar into each workload document of a YAML stream.

use crate::capture_args::{capture_args, status_port, Unsupported};
use crate::emit::{self, s, Y};
use crate::probes::{self, Change};
use crate::sidecar::{
    PodSidecar, SidecarSettings, CONFIG_VOLUME, CREDENTIALS_VOLUME, DEFAULT_CONTAINER_ANNOTATION,
    INIT_CONTAINER, INJECT_ANNOTATION, PODINFO_VOLUME, PROXY_CONTAINER, STATUS_ANNOTATION,
};
use serde_json::Value;
use std::collections::BTreeMap;
use warden_config::yaml_source::{parse_documents, LineIndex};
use warden_config::FieldPath;

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("line {}: {message}", line.map_or("?".to_string(), |l| l.to_string()))]
    Yaml {
        line: Option<usize>,
        message: String,
    },
    #[error("document {document} ({object})")]
    Annotation {
        document: usize,
        object: String,
        source: Unsupported,
    },
    #[error("document {document} ({object}): {message}")]
    Shape {
        document: usize,
        object: String,
        message: String,
    },
}

/// The rewritten text and what happened to each workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    pub text: String,
    /// `Kind/name` of each workload given the sidecar.
    pub injected: Vec<String>,
    /// `Kind/name` and why each other workload was left as it was.
    pub left: Vec<(String, String)>,
    /// `Kind/name` and what of an injected workload was left as it was (a probe not
    /// rewritten).
    pub notes: Vec<(String, String)>,
}

/// What to do with one pod template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Inject,
    Leave(&'static str),
}

/// Whether a pod template gets the sidecar (Istio's opt-out annotation or label, host
/// networking, and an earlier injection leave it alone).
pub fn decide(template: &Value) -> Decision {
    let meta = &template["metadata"];
    if meta["annotations"].get(STATUS_ANNOTATION).is_some()
        || containers(template)
            .iter()
            .any(|c| c["name"] == PROXY_CONTAINER)
    {
        return Decision::Leave("injected already");
    }
    let off = |v: &Value| v.as_str().is_some_and(|t| t.eq_ignore_ascii_case("false"));
    if off(&meta["annotations"][INJECT_ANNOTATION]) || off(&meta["labels"][INJECT_ANNOTATION]) {
        return Decision::Leave("sidecar.istio.io/inject is false");
    }
    if template["spec"]["hostNetwork"] == Value::Bool(true) {
        return Decision::Leave("hostNetwork pods are not injected");
    }
    Decision::Inject
}

fn containers(template: &Value) -> Vec<Value> {
    template["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Where a kind keeps its pod template.
fn template_path(kind: &str) -> Option<FieldPath> {
    match kind {
        "Pod" => Some(FieldPath::root()),
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "ReplicationController"
        | "Job" => Some(FieldPath::keys(&["spec", "template"])),
        "CronJob" => Some(FieldPath::keys(&[
            "spec",
            "jobTemplate",
            "spec",
            "template",
        ])),
        _ => None,
    }
}

fn at<'a>(value: &'a Value, path: &FieldPath) -> &'a Value {
    use warden_config::field_path::Segment;
    let mut v = value;
    for seg in path.segments() {
        v = match seg {
            Segment::Key(k) => &v[k.as_str()],
            Segment::Index(i) => &v[*i],
        };
    }
    v
}

/// Lines to insert before a line of the input (1-based), in place of the `remove` lines that
/// start there.
struct Splice {
    line: usize,
    lines: Vec<String>,
    remove: usize,
}

impl Splice {
    fn insert(line: usize, lines: Vec<String>) -> Splice {
        Splice {
            line,
            lines,
            remove: 0,
        }
    }
}

/// Inject every workload of `text`.
pub fn inject(text: &str, settings: &SidecarSettings) -> Result<Injected, InjectError> {
    let docs = parse_documents(text).map_err(|e| InjectError::Yaml {
        line: e.line,
        message: e.message,
    })?;
    let source: Vec<&str> = text.split_inclusive('\n').collect();
    let mut splices = Vec::new();
    let mut out = Injected {
        text: String::new(),
        injected: Vec::new(),
        left: Vec::new(),
        notes: Vec::new(),
    };
    let mut expected = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let kind = doc.value["kind"].as_str().unwrap_or_default();
        let Some(path) = template_path(kind) else {
            continue;
        };
        let object = format!(
            "{kind}/{}",
            doc.value["metadata"]["name"].as_str().unwrap_or_default()
        );
        let template = at(&doc.value, &path);
        match decide(template) {
            Decision::Leave(why) => {
                out.left.push((object, why.to_string()));
                continue;
            }
            Decision::Inject => {}
        }
        let shape = |message: &str| InjectError::Shape {
            document: i + 1,
            object: object.clone(),
            message: message.to_string(),
        };
        let annotations: BTreeMap<String, String> = template["metadata"]["annotations"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let annotation_error = |source| InjectError::Annotation {
            document: i + 1,
            object: object.clone(),
            source,
        };
        let capture = capture_args(&annotations, settings.proxy_uid).map_err(annotation_error)?;
        let status_port = status_port(&annotations).map_err(annotation_error)?;
        let rewrite = probes::rewrite(template, &annotations, status_port);
        let pod = PodSidecar {
            status_port,
            app_probers: rewrite.probers,
            annotations: crate::pod_annotations::read(&annotations).map_err(annotation_error)?,
        };
        for name in warden_config::istio_annotations::unused(&annotations) {
            out.notes.push((
                object.clone(),
                format!("annotation {name} is not supported: ignored"),
            ));
        }
        let mut doc_splices = splices_for(
            &source,
            &doc.lines,
            template,
            &path,
            settings,
            &capture,
            &pod,
        )
        .ok_or_else(|| {
            shape("a pod template written in flow style ({...}) or with empty lists cannot be spliced; write it in block style")
        })?;
        for change in &rewrite.changes {
            doc_splices.push(probe_splice(&source, &doc.lines, &path, change).ok_or_else(
                || {
                    shape(&format!(
                        "the {} of container {} cannot be rewritten in place; write it in block style",
                        change.probe, change.container
                    ))
                },
            )?);
        }
        splices.append(&mut doc_splices);
        let mut want = doc.value.clone();
        if let Some(t) = at_mut(&mut want, &path) {
            probes::apply(t, &rewrite.changes);
        }
        expected.push((i, object.clone(), want));
        for note in rewrite.left {
            out.notes.push((object.clone(), note));
        }
        out.injected.push(object);
    }
    out.text = apply(&source, splices);
    // The spliced text must read back as the input plus the sidecar, nothing else.
    let again = parse_documents(&out.text).map_err(|e| InjectError::Yaml {
        line: e.line,
        message: format!("the injected output does not parse: {}", e.message),
    })?;
    for (i, object, original) in expected {
        let got = again.get(i).map(|d| without_injection(&d.value));
        if got.as_ref() != Some(&original) {
            return Err(InjectError::Shape {
                document: i + 1,
                object,
                message: "splicing changed more than the sidecar (unusual indentation?)".into(),
            });
        }
    }
    Ok(out)
}

fn at_mut<'a>(value: &'a mut Value, path: &FieldPath) -> Option<&'a mut Value> {
    use warden_config::field_path::Segment;
    let mut v = value;
    for seg in path.segments() {
        v = match seg {
            Segment::Key(k) => v.get_mut(k.as_str())?,
            Segment::Index(i) => v.get_mut(*i)?,
        };
    }
    Some(v)
}

/// The splice that replaces a probe's handler (`httpGet:` or `tcpSocket:` and everything under
/// it, block or one-line flow style) by the rewritten `httpGet`, at the handler key's indent.
fn probe_splice(
    source: &[&str],
    lines: &LineIndex,
    template: &FieldPath,
    change: &Change,
) -> Option<Splice> {
    let handler = template
        .key("spec")
        .key("containers")
        .index(change.container)
        .key(change.probe)
        .key(change.handler);
    let value_line = line_of(lines, &handler)?;
    let key = format!("{}:", change.handler);
    // The key's line: the value's own (flow style) or the nearest line above that starts with it.
    let key_line = (1..=value_line)
        .rev()
        .take_while(|l| *l == value_line || source.get(l - 1).is_some_and(|t| !t.trim().is_empty()))
        .find(|l| {
            source
                .get(l - 1)
                .is_some_and(|t| t.trim_start().starts_with(&key))
        })?;
    let indent = indent_of(source.get(key_line - 1)?);
    // The handler runs to its last line indented deeper than its key.
    let mut last = key_line;
    for (i, text) in source.iter().enumerate().skip(key_line) {
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if indent_of(text) <= indent {
            break;
        }
        last = i + 1;
    }
    if last < value_line {
        return None;
    }
    let new = emit::Y::Map(vec![
        ("path".to_string(), s(&change.path)),
        ("port".to_string(), emit::Y::Int(i64::from(change.port))),
    ]);
    Some(Splice {
        line: key_line,
        lines: emit::entry("httpGet", &new, indent),
        remove: last - key_line + 1,
    })
}

fn line_of(lines: &LineIndex, path: &FieldPath) -> Option<usize> {
    lines.line_of(path)
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// The line (1-based) and indent of the first key of the block mapping at `path`.
fn block_map_start(source: &[&str], lines: &LineIndex, path: &FieldPath) -> Option<(usize, usize)> {
    let line = line_of(lines, path)?;
    let text = source.get(line - 1)?;
    let trimmed = text.trim_start();
    if trimmed.starts_with(['{', '[', '-', '#']) {
        return None;
    }
    Some((line, indent_of(text)))
}

/// The line and dash column of the first item of the block sequence at `path`.
fn block_seq_start(source: &[&str], lines: &LineIndex, path: &FieldPath) -> Option<(usize, usize)> {
    let line = line_of(lines, &path.index(0))?;
    let text = source.get(line - 1)?;
    text.trim_start()
        .starts_with("- ")
        .then(|| (line, indent_of(text)))
}

fn splices_for(
    source: &[&str],
    lines: &LineIndex,
    template: &Value,
    path: &FieldPath,
    settings: &SidecarSettings,
    capture: &[String],
    pod: &PodSidecar,
) -> Option<Vec<Splice>> {
    let mut out = Vec::new();
    let spec = &template["spec"];
    let spec_path = path.key("spec");
    let first_app = containers(template)
        .first()
        .and_then(|c| c["name"].as_str().map(String::from))?;

    // Annotations: the status record, and kubectl's default container (the app, not ours).
    let meta = &template["metadata"];
    let mut entries = vec![(STATUS_ANNOTATION.to_string(), s(settings.status()))];
    if meta["annotations"]
        .get(DEFAULT_CONTAINER_ANNOTATION)
        .is_none()
    {
        entries.push((DEFAULT_CONTAINER_ANNOTATION.to_string(), s(first_app)));
    }
    let entries = Y::Map(entries);
    let meta_path = path.key("metadata");
    match (&meta["annotations"], meta) {
        (Value::Object(a), _) if !a.is_empty() => {
            let (line, indent) = block_map_start(source, lines, &meta_path.key("annotations"))?;
            out.push(Splice::insert(line, emit::lines(&entries, indent)));
        }
        (Value::Null, Value::Object(m)) if !m.is_empty() && !m.contains_key("annotations") => {
            let (line, indent) = block_map_start(source, lines, &meta_path)?;
            out.push(Splice::insert(
                line,
                emit::entry("annotations", &entries, indent),
            ));
        }
        (Value::Null, Value::Null) => {
            let (line, indent) = block_map_start(source, lines, path)?;
            let meta = Y::Map(vec![("annotations".to_string(), entries)]);
            out.push(Splice::insert(line, emit::entry("metadata", &meta, indent)));
        }
        _ => return None,
    }

    // The proxy first among the containers.
    let (line, dash) = block_seq_start(source, lines, &spec_path.key("containers"))?;
    out.push(Splice::insert(
        line,
        emit::item(&settings.proxy_container(pod), dash),
    ));

    // New keys go before the pod spec's first key; existing lists get a first item.
    let (spec_line, spec_indent) = block_map_start(source, lines, &spec_path)?;
    let mut new_keys = Vec::new();
    let init = settings.init_container(capture);
    match &spec["initContainers"] {
        Value::Null => new_keys.extend(emit::entry(
            "initContainers",
            &Y::Seq(vec![init]),
            spec_indent,
        )),
        Value::Array(items) if !items.is_empty() => {
            let (line, dash) = block_seq_start(source, lines, &spec_path.key("initContainers"))?;
            out.push(Splice::insert(line, emit::item(&init, dash)));
        }
        _ => return None,
    }
    let sa = spec["serviceAccountName"]
        .as_str()
        .or(spec["serviceAccount"].as_str())
        .unwrap_or("default");
    let volumes = settings.volumes(sa);
    match &spec["volumes"] {
        Value::Null => new_keys.extend(emit::entry("volumes", &Y::Seq(volumes), spec_indent)),
        Value::Array(items) if !items.is_empty() => {
            let (line, dash) = block_seq_start(source, lines, &spec_path.key("volumes"))?;
            out.push(Splice::insert(
                line,
                volumes.iter().flat_map(|v| emit::item(v, dash)).collect(),
            ));
        }
        _ => return None,
    }
    if !new_keys.is_empty() {
        out.push(Splice::insert(spec_line, new_keys));
    }
    Some(out)
}

/// `source` with the splices' lines inserted (several at one line in the order given).
fn apply(source: &[&str], mut splices: Vec<Splice>) -> String {
    splices.sort_by_key(|s| s.line);
    let mut out = String::new();
    let mut next = splices.into_iter().peekable();
    let mut skip = 0;
    for (i, line) in source.iter().enumerate() {
        while let Some(s) = next.next_if(|s| s.line == i + 1) {
            for l in s.lines {
                out.push_str(&l);
                out.push('\n');
            }
            skip = skip.max(s.remove);
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        out.push_str(line);
    }
    out
}

/// A document with what injection adds taken out again (the check that splicing changed
/// nothing else).
pub fn without_injection(doc: &Value) -> Value {
    let mut doc = doc.clone();
    let kind = doc["kind"].as_str().unwrap_or_default().to_string();
    let Some(path) = template_path(&kind) else {
        return doc;
    };
    use warden_config::field_path::Segment;
    let mut template = &mut doc;
    for seg in path.segments() {
        template = match seg {
            Segment::Key(k) => &mut template[k.as_str()],
            Segment::Index(i) => &mut template[*i],
        };
    }
    let status = template["metadata"]["annotations"][STATUS_ANNOTATION]
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok());
    let Some(status) = status else {
        return doc;
    };
    let added_default = status.get("injectedBy") == Some(&Value::from("warden"));
    if let Some(meta) = template["metadata"].as_object_mut() {
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(STATUS_ANNOTATION);
            if added_default {
                a.remove(DEFAULT_CONTAINER_ANNOTATION);
            }
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
        if meta.is_empty() {
            template.as_object_mut().map(|t| t.remove("metadata"));
        }
    }
    let spec = &mut template["spec"];
    for (key, names) in [
        ("initContainers", vec![INIT_CONTAINER]),
        ("containers", vec![PROXY_CONTAINER]),
        (
            "volumes",
            vec![CONFIG_VOLUME, PODINFO_VOLUME, CREDENTIALS_VOLUME],
        ),
    ] {
        if let Some(list) = spec.get_mut(key).and_then(Value::as_array_mut) {
            list.retain(|v| !names.iter().any(|n| v["name"] == *n));
            if list.is_empty() {
                spec.as_object_mut().map(|s| s.remove(key));
            }
        }
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn which_templates_are_injected() {
        let app = json!({"spec": {"containers": [{"name": "app"}]}});
        let cases = [
            (app.clone(), Decision::Inject),
            (
                json!({"metadata": {"annotations": {STATUS_ANNOTATION: "{}"}}, "spec": {"containers": [{"name": "app"}]}}),
                Decision::Leave("injected already"),
            ),
            (
                json!({"spec": {"containers": [{"name": "app"}, {"name": PROXY_CONTAINER}]}}),
                Decision::Leave("injected already"),
            ),
            (
                json!({"metadata": {"annotations": {INJECT_ANNOTATION: "false"}}, "spec": {"containers": [{"name": "app"}]}}),
                Decision::Leave("sidecar.istio.io/inject is false"),
            ),
            (
                json!({"metadata": {"labels": {INJECT_ANNOTATION: "False"}}, "spec": {"containers": [{"name": "app"}]}}),
                Decision::Leave("sidecar.istio.io/inject is false"),
            ),
            (
                json!({"metadata": {"labels": {INJECT_ANNOTATION: "true"}}, "spec": {"containers": [{"name": "app"}]}}),
                Decision::Inject,
            ),
            (
                json!({"spec": {"hostNetwork": true, "containers": [{"name": "app"}]}}),
                Decision::Leave("hostNetwork pods are not injected"),
            ),
        ];
        for (template, want) in cases {
            assert_eq!(decide(&template), want, "{template}");
        }
    }

    const DEPLOYMENT: &str = "# a comment that stays\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web   # the name\nspec:\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: web\n        image: \"nginx:1.25\"\n        ports:\n        - containerPort: 80\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}\n";

    #[test]
    fn the_sidecar_is_spliced_in_and_the_rest_kept_byte_for_byte() {
        let out = inject(DEPLOYMENT, &SidecarSettings::default()).unwrap();
        assert_eq!(out.injected, ["Deployment/web"]);
        // Every input line is still there, in order.
        let mut rest = out.text.lines();
        for line in DEPLOYMENT.lines() {
            assert!(rest.any(|l| l == line), "lost: {line}\n{}", out.text);
        }
        let docs = parse_documents(&out.text).unwrap();
        let spec = &docs[0].value["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["name"], PROXY_CONTAINER);
        assert_eq!(spec["containers"][1]["name"], "web");
        assert_eq!(spec["initContainers"][0]["name"], INIT_CONTAINER);
        assert_eq!(spec["initContainers"][0]["args"][0], "capture");
        assert_eq!(spec["volumes"].as_array().map(Vec::len), Some(3));
        assert_eq!(
            spec["volumes"][2]["secret"]["secretName"],
            "warden-mesh-default"
        );
        let annotations = &docs[0].value["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(annotations[DEFAULT_CONTAINER_ANNOTATION], "web");
        assert!(annotations[STATUS_ANNOTATION].is_string());
        assert_eq!(docs[1].value["kind"], "Service");
        // Twice is once.
        let again = inject(&out.text, &SidecarSettings::default()).unwrap();
        assert_eq!(again.text, out.text);
        assert_eq!(
            again.left,
            [("Deployment/web".to_string(), "injected already".to_string())]
        );
    }

    #[test]
    fn existing_lists_and_annotations_get_items_in_their_own_indentation() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n    name: p\n    annotations:\n        traffic.sidecar.istio.io/excludeOutboundPorts: \"6379\"\nspec:\n    serviceAccountName: reviews\n    initContainers:\n        -   name: setup\n            image: busybox\n    containers:\n        -   name: app\n            image: app\n    volumes:\n        -   name: data\n            emptyDir: {}\n";
        let out = inject(text, &SidecarSettings::default()).unwrap();
        let docs = parse_documents(&out.text).unwrap();
        let v = &docs[0].value;
        assert_eq!(v["spec"]["initContainers"][0]["name"], INIT_CONTAINER);
        assert_eq!(v["spec"]["initContainers"][1]["name"], "setup");
        assert_eq!(v["spec"]["volumes"][3]["name"], "data");
        assert_eq!(
            v["spec"]["volumes"][2]["secret"]["secretName"],
            "warden-mesh-reviews"
        );
        let args = v["spec"]["initContainers"][0]["args"].as_array().unwrap();
        assert!(
            args.contains(&json!("--exclude-outbound-ports=6379")),
            "{args:?}"
        );
        assert_eq!(
            without_injection(v),
            parse_documents(text).unwrap()[0].value
        );
    }

    #[test]
    fn probe_handlers_are_replaced_in_place_and_nothing_else_changes() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: web\n    ports:\n    - {name: http, containerPort: 8080}\n    livenessProbe:\n      httpGet:\n        path: /live   # the app's\n        port: http\n        httpHeaders:\n        - name: X\n          value: \"1\"\n\n      periodSeconds: 10\n    readinessProbe:\n      httpGet: {path: /ready, port: 8080}\n      timeoutSeconds: 2\n    startupProbe:\n      # kept\n      tcpSocket:\n        port: 8080\n    # after the probe\n    image: web\n";
        let out = inject(text, &SidecarSettings::default()).unwrap();
        let docs = parse_documents(&out.text).unwrap();
        let web = &docs[0].value["spec"]["containers"][1];
        for (probe, path) in [
            ("livenessProbe", "/app-health/web/livez"),
            ("readinessProbe", "/app-health/web/readyz"),
            ("startupProbe", "/app-health/web/startupz"),
        ] {
            assert_eq!(
                web[probe]["httpGet"],
                json!({"path": path, "port": 15020}),
                "{probe}:\n{}",
                out.text
            );
        }
        assert_eq!(web["livenessProbe"]["periodSeconds"], 10);
        assert_eq!(web["readinessProbe"]["timeoutSeconds"], 2);
        assert_eq!(web["image"], "web");
        for kept in [
            "      # kept\n",
            "    # after the probe\n",
            "    - {name: http, containerPort: 8080}\n",
        ] {
            assert!(out.text.contains(kept), "{kept:?} lost:\n{}", out.text);
        }
        let proxy = &docs[0].value["spec"]["containers"][0];
        let probers: Value = serde_json::from_str(
            proxy["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == "ISTIO_KUBE_APP_PROBERS")
                .and_then(|e| e["value"].as_str())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            probers["/app-health/web/livez"]["httpGet"],
            json!({"path": "/live", "port": 8080, "httpHeaders": [{"name": "X", "value": "1"}]})
        );
        assert_eq!(
            probers["/app-health/web/startupz"]["tcpSocket"],
            json!({"port": 8080})
        );
        // Twice is once.
        assert_eq!(
            inject(&out.text, &SidecarSettings::default()).unwrap().text,
            out.text
        );
    }

    #[test]
    fn a_flow_style_pod_template_is_refused_not_mangled() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: app, image: app}]}\n";
        assert!(matches!(
            inject(text, &SidecarSettings::default()),
            Err(InjectError::Shape { .. })
        ));
    }

    #[test]
    fn unsupported_capture_annotations_are_refused() {
        let text = DEPLOYMENT.replace(
            "      labels:\n",
            "      annotations:\n        sidecar.istio.io/interceptionMode: TPROXY\n      labels:\n",
        );
        assert!(matches!(
            inject(&text, &SidecarSettings::default()),
            Err(InjectError::Annotation { .. })
        ));
    }
}
