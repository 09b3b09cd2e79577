//! The app containers' probes, rewritten as Istio's injector rewrites them: an httpGet (HTTP)
//! or tcpSocket liveness, readiness or startup probe becomes `GET
//! /app-health/<container>/<livez|readyz|startupz>` on the sidecar's status port, and the
//! original goes to the sidecar in `ISTIO_KUBE_APP_PROBERS` (JSON: that path to the probe's
//! handler, its port a number, and `timeoutSeconds`), which the sidecar runs against the app.
//! The kubelet's probes thus reach the app through the sidecar even when the app's ports are
//! captured and its peers must speak mutual TLS. exec probes are left alone (they need no
//! network); HTTPS, gRPC and named ports the container does not declare are left alone and
//! said (`Rewrite::left`). `sidecar.istio.io/rewriteAppHTTPProbers: "false"` turns it off.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

pub const REWRITE_ANNOTATION: &str = "sidecar.istio.io/rewriteAppHTTPProbers";

/// The probe fields of a container and the suffix of their rewritten path.
pub const PROBES: [(&str, &str); 3] = [
    ("livenessProbe", "livez"),
    ("readinessProbe", "readyz"),
    ("startupProbe", "startupz"),
];

/// One probe to rewrite: the container's index, the probe's field, the handler's field
/// (`httpGet` or `tcpSocket`) and the handler that replaces it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub container: usize,
    pub probe: &'static str,
    pub handler: &'static str,
    pub path: String,
    pub port: u16,
}

impl Change {
    /// The new `httpGet` handler.
    pub fn http_get(&self) -> Value {
        json!({"path": self.path, "port": self.port})
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rewrite {
    pub changes: Vec<Change>,
    /// `ISTIO_KUBE_APP_PROBERS`: each rewritten path to the original probe.
    pub probers: Map<String, Value>,
    /// Probes left as they were, and why.
    pub left: Vec<String>,
}

/// The rewrite of `template`'s app containers' probes for a status port of `status_port`
/// (`None`: Istio's `status.sidecar.istio.io/port: "0"`, no rewrite).
pub fn rewrite(
    template: &Value,
    annotations: &BTreeMap<String, String>,
    status_port: Option<u16>,
) -> Rewrite {
    let mut out = Rewrite::default();
    let off = annotations
        .get(REWRITE_ANNOTATION)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"));
    let Some(status_port) = status_port.filter(|_| !off) else {
        return out;
    };
    let containers = template["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (index, c) in containers.iter().enumerate() {
        let name = c["name"].as_str().unwrap_or_default();
        for (field, suffix) in PROBES {
            let probe = &c[field];
            let (handler, original) = if probe.get("httpGet").is_some() {
                ("httpGet", &probe["httpGet"])
            } else if probe.get("tcpSocket").is_some() {
                ("tcpSocket", &probe["tcpSocket"])
            } else {
                if probe.get("grpc").is_some() {
                    out.left
                        .push(format!("{name} {field}: grpc probes are not rewritten"));
                }
                continue;
            };
            let scheme = original["scheme"].as_str().unwrap_or("HTTP");
            if !scheme.eq_ignore_ascii_case("HTTP") {
                out.left
                    .push(format!("{name} {field}: {scheme} probes are not rewritten"));
                continue;
            }
            let Some(port) = resolve_port(c, &original["port"]) else {
                out.left.push(format!(
                    "{name} {field}: port {} is not one of the container's ports",
                    original["port"]
                ));
                continue;
            };
            let path = format!("/app-health/{name}/{suffix}");
            let mut resolved = original.clone();
            resolved["port"] = json!(port);
            let mut prober = Map::new();
            prober.insert(handler.to_string(), resolved);
            prober.insert(
                "timeoutSeconds".into(),
                probe["timeoutSeconds"]
                    .as_u64()
                    .map_or(json!(1), |t| json!(t)),
            );
            out.probers.insert(path.clone(), Value::Object(prober));
            out.changes.push(Change {
                container: index,
                probe: field,
                handler,
                path,
                port: status_port,
            });
        }
    }
    out
}

/// A probe's port as a number: given as one, or the `containerPort` of the container's port
/// of that name.
fn resolve_port(container: &Value, port: &Value) -> Option<u16> {
    let n = match port {
        Value::Number(n) => n.as_u64(),
        Value::String(name) => name.parse::<u64>().ok().or_else(|| {
            container["ports"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == name.as_str())?["containerPort"]
                .as_u64()
        }),
        _ => None,
    }?;
    u16::try_from(n).ok().filter(|p| *p != 0)
}

/// `template` with `changes` made: each probe's handler replaced by its `httpGet`.
pub fn apply(template: &mut Value, changes: &[Change]) {
    for ch in changes {
        let probe = &mut template["spec"]["containers"][ch.container][ch.probe];
        if let Some(p) = probe.as_object_mut() {
            p.remove(ch.handler);
            p.insert("httpGet".into(), ch.http_get());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(containers: Value) -> Value {
        json!({"spec": {"containers": containers}})
    }

    #[test]
    fn which_probes_are_rewritten_and_how() {
        let t = template(json!([
            {"name": "web", "ports": [{"name": "http", "containerPort": 8080}],
             "livenessProbe": {"httpGet": {"path": "/live", "port": "http", "httpHeaders": [{"name": "A", "value": "b"}]}, "timeoutSeconds": 3},
             "readinessProbe": {"tcpSocket": {"port": 8080}},
             "startupProbe": {"exec": {"command": ["true"]}}},
            {"name": "db",
             "livenessProbe": {"httpGet": {"path": "/", "port": 443, "scheme": "HTTPS"}},
             "readinessProbe": {"grpc": {"port": 9000}},
             "startupProbe": {"httpGet": {"path": "/", "port": "missing"}}}
        ]));
        let r = rewrite(&t, &BTreeMap::new(), Some(15020));
        let paths: Vec<(usize, &str, &str, &str)> = r
            .changes
            .iter()
            .map(|c| (c.container, c.probe, c.handler, c.path.as_str()))
            .collect();
        assert_eq!(
            paths,
            [
                (0, "livenessProbe", "httpGet", "/app-health/web/livez"),
                (0, "readinessProbe", "tcpSocket", "/app-health/web/readyz"),
            ]
        );
        assert_eq!(
            Value::Object(r.probers.clone()),
            json!({
                "/app-health/web/livez": {"httpGet": {"path": "/live", "port": 8080, "httpHeaders": [{"name": "A", "value": "b"}]}, "timeoutSeconds": 3},
                "/app-health/web/readyz": {"tcpSocket": {"port": 8080}, "timeoutSeconds": 1}
            })
        );
        assert_eq!(r.left.len(), 3, "{:?}", r.left);
        assert!(r.left[0].contains("HTTPS"));
        assert!(r.left[1].contains("grpc"));
        assert!(r.left[2].contains("missing"));

        let mut t2 = t.clone();
        apply(&mut t2, &r.changes);
        assert_eq!(
            t2["spec"]["containers"][0]["readinessProbe"],
            json!({"httpGet": {"path": "/app-health/web/readyz", "port": 15020}})
        );
        assert_eq!(
            t2["spec"]["containers"][0]["livenessProbe"]["timeoutSeconds"],
            3
        );
    }

    #[test]
    fn turned_off_by_annotation_or_without_a_status_port() {
        let t = template(json!([{"name": "web", "livenessProbe": {"tcpSocket": {"port": 80}}}]));
        let off: BTreeMap<String, String> =
            [(REWRITE_ANNOTATION.to_string(), "false".to_string())].into();
        assert_eq!(rewrite(&t, &off, Some(15020)), Rewrite::default());
        assert_eq!(rewrite(&t, &BTreeMap::new(), None), Rewrite::default());
        assert_eq!(rewrite(&t, &BTreeMap::new(), Some(15020)).changes.len(), 1);
    }
}
