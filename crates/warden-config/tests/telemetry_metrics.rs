//! Telemetry's `metrics`: overrides decoded with Istio's enums (a wrong name is an error at
//! its line), UPSERT a warning, `tracing` and `accessLogging` read beside them.

use warden_config::kinds::telemetry::{IstioMetric, TagOperation, WorkloadMode};

const MESH_WIDE: &str = r#"apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  metrics:
  - providers: [{name: prometheus}]
    overrides:
    - match: {metric: REQUEST_SIZE, mode: CLIENT}
      disabled: true
    - match: {metric: ALL_METRICS}
      tagOverrides:
        source_principal: {operation: REMOVE}
        request_protocol:
          value: "request.headers['x-proto']"
"#;

#[test]
fn metrics_overrides_are_read() {
    let loaded = warden_config::load_str("telemetry.yaml", MESH_WIDE).expect("loads");
    let t = &loaded.set.telemetries[0];
    assert_eq!(t.metadata.namespace.as_deref(), Some("istio-system"));
    let o = &t.spec.metrics[0].overrides;
    let m = o[0].selector.as_ref().unwrap();
    assert_eq!(
        (m.metric, m.mode, o[0].disabled),
        (
            Some(IstioMetric::RequestSize),
            Some(WorkloadMode::Client),
            Some(true)
        )
    );
    assert_eq!(
        o[1].tag_overrides["source_principal"].operation,
        Some(TagOperation::Remove)
    );
    let warnings: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        warnings.iter().any(|w| w.contains("telemetry.yaml:14")
            && w.contains("tagOverrides.request_protocol")
            && w.contains("UPSERT is not implemented")),
        "{warnings:?}"
    );
    // Nothing else in it: not also reported as a kind passed by.
    assert!(
        !warnings
            .iter()
            .any(|w| w.contains("Telemetry") && !w.contains("UPSERT")),
        "{warnings:?}"
    );
}

#[test]
fn a_wrong_metric_name_is_an_error_at_its_line() {
    let yaml = MESH_WIDE.replace("REQUEST_SIZE", "REQUEST_SIZES");
    let err = warden_config::load_str("telemetry.yaml", &yaml)
        .expect_err("refused")
        .to_string();
    assert!(err.contains("telemetry.yaml:8"), "{err}");
    assert!(err.contains("REQUEST_SIZES"), "{err}");
}

#[test]
fn tracing_and_access_logging_are_read_too() {
    let tracing = MESH_WIDE.replace(
        "spec:\n",
        "spec:\n  tracing: [{randomSamplingPercentage: 10}]\n",
    );
    let loaded = warden_config::load_str("t.yaml", &tracing).expect("loads");
    assert_eq!(loaded.set.telemetries.len(), 1);
    assert_eq!(
        loaded.set.telemetry_tracing[0]
            .spec
            .tracing
            .random_sampling_percentage,
        Some(10.0)
    );
    // A tracing field warden does not implement is an error naming it.
    let by_id = MESH_WIDE.replace(
        "spec:\n",
        "spec:\n  tracing: [{useRequestIdForTraceSampling: true}]\n",
    );
    let err = warden_config::load_str("t.yaml", &by_id)
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("spec.tracing[0].useRequestIdForTraceSampling"),
        "{err}"
    );
    // With `accessLogging` too, both are read: no "passed by" warning.
    let logging = MESH_WIDE.replace("spec:\n", "spec:\n  accessLogging: [{}]\n");
    let loaded = warden_config::load_str("t.yaml", &logging).expect("loads");
    assert_eq!(loaded.set.telemetries.len(), 1);
    assert_eq!(loaded.set.telemetry_access_logging.len(), 1);
    assert!(
        !loaded
            .warnings
            .iter()
            .any(|w| w.to_string().contains("Telemetry") && !w.to_string().contains("UPSERT")),
        "{:?}",
        loaded.warnings
    );
}
