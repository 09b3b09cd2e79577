//! Loading from files and directories, and the shipped examples under examples/gateway/.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use warden_config::load_paths;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "warden-config-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn gateway(name: &str, port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: {name}}}\nspec:\n  \
         servers: [{{port: {{number: {port}, protocol: HTTP, name: http}}, hosts: ['*']}}]\n"
    )
}

#[test]
fn directories_load_yaml_files_in_name_order_skipping_dotfiles_and_subdirectories() {
    let dir = TempDir::new();
    dir.write("b.yaml", &gateway("b", 81));
    dir.write("a.yml", &gateway("a", 80));
    dir.write(
        "c.yaml",
        &format!("{}---\n{}", gateway("c1", 82), gateway("c2", 83)),
    );
    dir.write(".hidden.yaml", &gateway("hidden", 84));
    dir.write("notes.txt", "not yaml: [");
    dir.write("sub/d.yaml", &gateway("nested", 85));
    let loaded = load_paths(std::slice::from_ref(&dir.0)).unwrap();
    let names: Vec<&str> = loaded
        .set
        .gateways
        .iter()
        .map(|g| g.metadata.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b", "c1", "c2"]);
    let c2 = &loaded.set.gateways[3];
    assert_eq!(c2.index, 2);
    assert!(c2.file.ends_with("c.yaml"), "{:?}", c2.file);
}

#[test]
fn errors_from_several_files_are_reported_together_in_the_order_given() {
    let dir = TempDir::new();
    let second = dir.write("second.yaml", "kind: Gateway\nspec: [\n");
    let first = dir.write(
        "first.yaml",
        &gateway("g", 80).replace("protocol: HTTP", "protocol: TLZ"),
    );
    let missing = dir.0.join("missing.yaml");
    let err = load_paths(&[first.clone(), second.clone(), missing.clone()]).unwrap_err();
    assert_eq!(err.errors.len(), 3, "{err}");
    assert_eq!(err.errors[0].location.file, first);
    assert_eq!(
        err.errors[0].location.field,
        "spec.servers[0].port.protocol"
    );
    assert_eq!(err.errors[1].location.file, second);
    assert!(err.errors[1].message.starts_with("invalid YAML"), "{err}");
    assert!(err.errors[1].location.line.is_some(), "{err}");
    assert_eq!(err.errors[2].location.file, missing);
    assert!(
        err.errors[2].message.starts_with("cannot read file"),
        "{err}"
    );
}

#[test]
fn documents_in_different_files_reference_each_other() {
    let dir = TempDir::new();
    let gw = dir.write("gw.yaml", &gateway("gw", 80));
    let vs = dir.write(
        "vs.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs}\n\
         spec:\n  hosts: ['*']\n  gateways: [gw]\n  http:\n  - directResponse: {status: 204}\n",
    );
    // Alone, the Gateway is missing: Istio's IST0101 warning, and nothing binds.
    let alone = load_paths(std::slice::from_ref(&vs)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        alone
            .warnings
            .iter()
            .any(|w| w.code.map(|c| c.id()) == Some("IST0101")
                && w.message
                    .starts_with("Referenced gateway not found: \"gw\"")),
        "{:#?}",
        alone.warnings
    );
    assert!(alone
        .set
        .gateways_of(&alone.set.virtual_services[0])
        .is_empty());
    let loaded = load_paths(&[vs, gw]).unwrap();
    let set = &loaded.set;
    let bound = set.gateways_of(&set.virtual_services[0]);
    assert_eq!(bound.len(), 1);
    assert_eq!(set.virtual_services_for_gateway(bound[0]).len(), 1);
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway")
}

#[test]
fn gateway_examples_load_without_errors_or_warnings() {
    let loaded = load_paths(&[examples_dir()]).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.warnings.is_empty(), "{:#?}", loaded.warnings);
    assert!(loaded.set.gateways.len() >= 2);
}

#[test]
fn seed_001_example_answers_333_test_on_port_80() {
    let loaded = load_paths(&[examples_dir().join("seed-001-direct-response.yaml")]).unwrap();
    let set = &loaded.set;
    let gw = &set.gateways[0];
    assert_eq!(gw.metadata.namespace.as_deref(), Some("istio-system"));
    assert_eq!(gw.spec.servers[0].port.number, 80);
    let vs = set.virtual_services_for_gateway(gw);
    assert_eq!(vs.len(), 1);
    let route = &vs[0].spec.http[0];
    let dr = route.direct_response.as_ref().unwrap();
    assert_eq!(dr.status, 333);
    assert_eq!(dr.body.as_ref().unwrap().string.as_deref(), Some("test"));
}

#[test]
fn reverse_proxy_example_routes_to_a_static_endpoint() {
    let loaded = load_paths(&[examples_dir().join("reverse-proxy.yaml")]).unwrap();
    let set = &loaded.set;
    assert_eq!(set.gateways[0].spec.servers[0].port.number, 8080);
    let dest = &set.virtual_services[0].spec.http[0].route[0].destination;
    let se = set.service_entry_for_host(&dest.host).unwrap();
    let port = se.spec.port(dest.port.as_ref().map(|p| p.number)).unwrap();
    let ep = &se.spec.endpoints[0];
    assert_eq!(
        (ep.address.as_str(), ep.port_for(port)),
        ("127.0.0.1", 8081)
    );
    assert_eq!(
        set.lb_policy_for_host(&dest.host),
        warden_config::LbPolicy::RoundRobin
    );
}

/// A Gateway API object applied again by a later file replaces the earlier one, as
/// `kubectl apply` does: one route (the later one's), and a warning located at the later
/// document naming the earlier one. Twice in one file is an error.
#[test]
fn gateway_api_objects_applied_again_by_a_later_file_replace_the_earlier() {
    let dir = TempDir::new();
    let route = |backend: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r}}\n\
             spec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - backendRefs: [{{name: {backend}, port: 80}}]\n"
        )
    };
    let service = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\n\
             spec:\n  ports: [{{name: http, port: 80}}]\n"
        )
    };
    let first = dir.write(
        "a.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\n\
             spec:\n  gatewayClassName: istio\n  listeners: [{{name: http, port: 80, protocol: HTTP}}]\n\
             ---\n{}---\n{}---\n{}",
            route("first"),
            service("first"),
            service("second")
        ),
    );
    let second = dir.write("b.yaml", &route("second"));
    let loaded = load_paths(&[first.clone(), second]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.set.gateway_api.http_routes.len(), 1);
    let hosts: Vec<&str> = loaded
        .set
        .virtual_services
        .iter()
        .flat_map(|vs| &vs.spec.http)
        .flat_map(|r| &r.route)
        .map(|d| d.destination.host.as_str())
        .collect();
    assert_eq!(hosts, ["second.default.svc.cluster.local"]);
    let replaced: Vec<String> = loaded
        .warnings
        .iter()
        .filter(|w| w.message.contains("replaces"))
        .map(|w| {
            format!(
                "{}:{} {}",
                w.location.file.display(),
                w.location.line.unwrap_or(0),
                w.message
            )
        })
        .collect();
    assert_eq!(replaced.len(), 1, "{:?}", loaded.warnings);
    assert!(
        replaced[0].contains("b.yaml:3 HTTPRoute default/r replaces the one at")
            && replaced[0].contains("a.yaml:8 (document 2)"),
        "{replaced:?}"
    );

    let twice = dir.write("twice.yaml", &format!("{}---\n{}", route("a"), route("b")));
    let err = load_paths(&[twice]).expect_err("one file defines an object once");
    assert!(
        err.to_string().contains("duplicate HTTPRoute default/r"),
        "{err}"
    );
}
