//! Smoke test of the loader contract: errors name file, document and field; unknown fields warn.

#[test]
fn reports_type_errors_unknown_kinds_and_unsupported_fields() {
    let yaml = r#"
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: vs1}
spec:
  hosts: ["*"]
  http:
  - directResponse: {status: "abc"}
    mirror: {host: x}
---
apiVersion: warden.dev/v1
kind: Bar
metadata: {name: b}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
"#;
    let err = warden_config::load_str("t.yaml", yaml).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(
            "t.yaml:8: document 1 (VirtualService/vs1), field spec.http[0].directResponse.status"
        ),
        "{text}"
    );
    assert!(
        text.contains("t.yaml:12: document 2 (Bar/b), field kind: unknown kind"),
        "{text}"
    );
    // Someone else's kind (a namespace dump's Deployment) is skipped with a warning, which
    // is printed next to the errors.
    assert!(
        !err.errors
            .iter()
            .any(|p| p.to_string().contains("Deployment")),
        "{text}"
    );
    assert!(
        err.warnings
            .iter()
            .any(|p| p.to_string().contains("Deployment")),
        "{text}"
    );

    let ok = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs1}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - directResponse: {status: 333, body: {string: test}}
  exportTo: ["."]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  servers: [{port: {number: 80, protocol: HTTP, name: http}, hosts: ["*"]}]
"#;
    let loaded = warden_config::load_str("t.yaml", ok).unwrap();
    assert_eq!(loaded.set.virtual_services.len(), 1);
    assert_eq!(loaded.warnings.len(), 1);
    assert_eq!(loaded.warnings[0].location.field, "spec.exportTo");
    assert_eq!(loaded.warnings[0].location.line, Some(10));
}

/// A namespace dump's other kinds are one warning per kind, at its first document, not one per
/// document.
#[test]
fn skipped_kinds_are_one_warning_each() {
    let dump = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: a}
spec: {}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: b}
spec: {}
"#;
    let loaded = warden_config::load_str("dump.yaml", dump).unwrap();
    let skipped: Vec<String> = loaded
        .warnings
        .iter()
        .filter(|w| w.message.contains("not used by warden"))
        .map(|w| w.to_string())
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(
        skipped.iter().any(|w| w.contains("document 1 (Deployment/a)")
            && w.contains("kind Deployment (apps/v1) is not used by warden; skipped (2 documents, this is the first)")),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|w| w.contains("document 2 (ConfigMap/c)")
                && w.ends_with("kind ConfigMap (v1) is not used by warden; skipped [WDN0003]")),
        "{skipped:?}"
    );
}
