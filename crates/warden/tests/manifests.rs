//! deploy/kubernetes: every manifest validates against Kubernetes' published OpenAPI schemas
//! (strict: an unknown field fails), and the kustomization lists what is there.

mod common;

use common::podman::repo_root;
use common::schema;

#[test]
fn every_manifest_validates_against_the_kubernetes_schemas() {
    if let Some(why) = schema::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = repo_root().join("deploy/kubernetes");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("deploy/kubernetes") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.ends_with(".yaml") || name == "kustomization.yaml" {
            continue;
        }
        if let Err(report) = schema::validate(&path) {
            panic!("{name}:\n{report}");
        }
        checked += 1;
    }
    assert!(checked >= 7, "{checked} manifests");
}

#[test]
fn the_kustomization_lists_manifests_that_exist() {
    let dir = repo_root().join("deploy/kubernetes");
    let text = std::fs::read_to_string(dir.join("kustomization.yaml")).expect("kustomization");
    let docs = warden_config::yaml_source::parse_documents(&text).expect("parses");
    let resources = docs[0].value["resources"].as_array().expect("resources");
    assert!(!resources.is_empty());
    for r in resources {
        let file = r.as_str().expect("a file name");
        assert!(dir.join(file).is_file(), "{file} is listed but missing");
    }
}
