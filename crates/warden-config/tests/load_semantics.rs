//! What a load does with typos, kinds, re-applied documents and the way configs are delivered
//! (symbolic links, ConfigMap volumes): each finding located, with its code.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use warden_config::{
    config_files, load_paths, load_str, load_str_with, Code, ConfigErrors, LoadOptions, Loaded,
    Problem,
};

const SE: &str = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: backend}
spec:
  hosts: [backend.local]
  ports: [{number: 8081, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1}]
";

/// A VirtualService `vs` with `http` as its http routes (indented two spaces).
fn vs(http: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs}}\n\
         spec:\n  hosts: ['*']\n  http:\n{http}"
    )
}

fn find<'a>(problems: &'a [Problem], field: &str) -> Option<&'a Problem> {
    problems.iter().find(|p| p.location.field == field)
}

#[test]
fn typos_are_unknown_fields_with_the_closest_name() {
    let route = "  - route: [{destination: {host: backend.local}}]\n";
    // (yaml, field, line, message)
    let cases = [
        (
            vs("  - rout: [{destination: {host: backend.local}}]\n"),
            "spec.http[0].rout",
            7,
            "unknown field `rout`, did you mean `route`?",
        ),
        (
            vs(&format!(
                "  - match: [{{uri: {{prefx: /a}}}}]\n  {}",
                &route[2..]
            )),
            "spec.http[0].match[0].uri.prefx",
            7,
            "unknown field `prefx`, did you mean `prefix`?",
        ),
        (
            vs("  - route: [{destnation: {host: backend.local}}]\n"),
            "spec.http[0].route[0].destnation",
            7,
            "unknown field `destnation`, did you mean `destination`?",
        ),
        (
            vs(route).replace("  hosts:", "  hots:"),
            "spec.hots",
            5,
            "unknown field `hots`, did you mean `hosts`?",
        ),
        (
            vs(&format!(
                "  - matchs: [{{uri: {{prefix: /a}}}}]\n  {}",
                &route[2..]
            )),
            "spec.http[0].matchs",
            7,
            "unknown field `matchs`, did you mean `match`?",
        ),
        (
            SE.replace(
                "resolution: STATIC",
                "resolution: STATIC\n  locaton: MESH_EXTERNAL",
            ),
            "spec.locaton",
            8,
            "unknown field `locaton`, did you mean `location`?",
        ),
    ];
    for (yaml, field, line, message) in cases {
        // The VirtualServices come after the ServiceEntry they route to (9 lines).
        let (text, offset) = match yaml.contains("kind: ServiceEntry") {
            true => (yaml.clone(), 0),
            false => (format!("{SE}---\n{yaml}"), 9),
        };
        let err = load_str("t.yaml", &text).expect_err(field);
        assert_eq!(err.errors.len(), 1, "{err}");
        let p = find(&err.errors, field).unwrap_or_else(|| panic!("{field}: {err}"));
        assert_eq!(p.location.line, Some(line + offset), "{p}");
        assert_eq!(p.message, message, "{p}");
        assert_eq!(p.code, Some(Code::UnknownField), "{p}");
    }
}

#[test]
fn istio_fields_warden_lacks_keep_their_message() {
    let text = format!(
        "{SE}---\n{}",
        vs("  - delegate: {name: other}\n    route: [{destination: {host: backend.local}}]\n")
    );
    let err = load_str("t.yaml", &text).unwrap_err();
    let p = find(&err.errors, "spec.http[0].delegate").unwrap_or_else(|| panic!("{err}"));
    assert!(p.message.starts_with("not supported by warden yet"), "{p}");
    assert_eq!(p.code, Some(Code::FieldNotSupported));
}

/// The outcome of loading `yaml` as `t.yaml`: `Ok(warnings)` or `Err(errors)`, each as
/// `LINE field: message [CODE]`.
fn outcome(yaml: &str, options: &LoadOptions) -> Result<Vec<String>, Vec<String>> {
    let show = |ps: &[Problem]| -> Vec<String> {
        ps.iter()
            .map(|p| {
                format!(
                    "{} {}: {} [{}]",
                    p.location.line.unwrap_or(0),
                    p.location.field,
                    p.message,
                    p.code.map(|c| c.id()).unwrap_or("-")
                )
            })
            .collect()
    };
    match load_str_with("t.yaml", yaml, options) {
        Ok(Loaded { warnings, .. }) => Ok(show(&warnings)),
        Err(ConfigErrors { errors, .. }) => Err(show(&errors)),
    }
}

const REQUEST_AUTHN: &str = "\
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt-example, namespace: foo}
spec:
  selector: {matchLabels: {app: httpbin}}
  jwtRules:
  - issuer: testing@secure.istio.io
    jwksUri: https://example.com/jwks.json
";

const WASM: &str = "\
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: basic-auth}
spec:
  url: oci://example.com/basic-auth:latest
";

/// A Gateway API kind warden does not implement (HTTPRoute and the others it reads are
/// tested in gateway_api.rs).
const UDP_ROUTE: &str = "\
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: dns}
spec:
  parentRefs: [{name: gw}]
";

#[test]
fn request_authentication_is_read() {
    let loaded = load_str_with("t.yaml", REQUEST_AUTHN, &LoadOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let docs = &loaded.set.request_authentications;
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].spec.jwt_rules[0].issuer, "testing@secure.istio.io");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn kinds_that_change_requests_are_refused_unless_skipped() {
    let none = LoadOptions::default();
    let cases = [
        (WASM, "2 kind: kind WasmPlugin (extensions.istio.io/v1alpha1) is not supported: Wasm plugins"),
        (UDP_ROUTE, "2 kind: kind UDPRoute (gateway.networking.k8s.io/v1alpha2) is not supported: UDPRoute of the Kubernetes Gateway API"),
    ];
    for (yaml, want) in cases {
        let errors = outcome(yaml, &none).expect_err(want);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with(want), "{errors:?}");
        assert!(errors[0].ends_with("[WDN0004]"), "{errors:?}");
        let kind = yaml
            .lines()
            .nth(1)
            .and_then(|l| l.strip_prefix("kind: "))
            .unwrap_or("");
        let skip = LoadOptions {
            skip_kinds: vec![kind.to_owned()],
        };
        let warnings = outcome(yaml, &skip).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with(&format!("2 kind: kind {kind} ("))
                && warnings[0].ends_with("[WDN0005]"),
            "{warnings:?}"
        );
    }
}

#[test]
fn kind_names_are_case_sensitive_with_a_did_you_mean() {
    let none = LoadOptions::default();
    let lower = vs("  - directResponse: {status: 204}\n")
        .replace("kind: VirtualService", "kind: virtualservice");
    assert_eq!(
        outcome(&lower, &none),
        Err(vec![
            "2 kind: unknown kind \"virtualservice\"; kinds are case-sensitive: did you mean VirtualService? [WDN0006]".to_owned()
        ])
    );
    let typo = lower.replace("virtualservice", "VirtualSevice");
    assert_eq!(
        outcome(&typo, &none),
        Err(vec![
            "2 kind: unknown kind \"VirtualSevice\" in networking.istio.io; did you mean VirtualService? [WDN0006]".to_owned()
        ])
    );
    // Kinds that cannot change a request: one warning per kind, however many documents.
    let dump = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n---\n\
                apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b}\n---\n\
                apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: c}\n";
    let warnings = outcome(dump, &none).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings.iter().all(|w| w.ends_with("[WDN0003]")),
        "{warnings:?}"
    );
}

#[test]
fn the_skip_list_is_checked_for_typos() {
    assert_eq!(warden_config::check_skip_kind("WasmPlugin"), Ok(()));
    let err = warden_config::check_skip_kind("WasmPlugn").unwrap_err();
    assert!(err.ends_with("did you mean WasmPlugin?"), "{err}");
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "warden-config-semantics-{}-{}",
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

    fn link(&self, name: &str, target: &str) -> PathBuf {
        let path = self.0.join(name);
        std::os::unix::fs::symlink(target, &path).unwrap();
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

fn gateway_names(loaded: &Loaded) -> Vec<(String, u16)> {
    loaded
        .set
        .gateways
        .iter()
        .map(|g| (g.metadata.name.clone(), g.spec.servers[0].port.number))
        .collect()
}

#[test]
fn a_later_file_replaces_a_document_and_one_file_may_not_repeat_it() {
    let dir = TempDir::new();
    let a = dir.write(
        "a.yaml",
        &format!("{}---\n{}", gateway("one", 80), gateway("two", 81)),
    );
    let b = dir.write("b.yaml", &gateway("one", 90));
    let loaded = load_paths(&[a.clone(), b.clone()]).unwrap_or_else(|e| panic!("{e}"));
    // Replaced in place, as a re-applied object keeps its place.
    assert_eq!(
        gateway_names(&loaded),
        [("one".to_owned(), 90), ("two".to_owned(), 81)]
    );
    let w = &loaded.warnings[0];
    assert_eq!(
        (w.location.file.as_path(), w.location.line),
        (b.as_path(), Some(3))
    );
    assert_eq!(
        w.to_string(),
        format!(
            "{}:3: document 1 (Gateway/one), field metadata.name: Gateway default/one replaces \
             the one at {}:1 (document 1), as `kubectl apply` of the files in order would \
             [WDN0001]",
            b.display(),
            a.display()
        )
    );

    let same = dir.write(
        "same.yaml",
        &format!("{}---\n{}", gateway("one", 80), gateway("one", 81)),
    );
    let err = load_paths(&[same]).unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].code, Some(Code::DuplicateInFile));
    assert_eq!(err.errors[0].location.line, Some(9));
}

#[test]
fn folders_follow_symlinks_and_warn_about_dangling_ones() {
    let dir = TempDir::new();
    let elsewhere = TempDir::new();
    let target = elsewhere.write("real.yaml", &gateway("linked", 82));
    dir.write("a.yaml", &gateway("a", 80));
    dir.link("b.yaml", &target.display().to_string());
    let dangling = dir.link("c.yaml", "/nonexistent/warden-test/c.yaml");
    let loaded = load_paths(std::slice::from_ref(&dir.0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        gateway_names(&loaded),
        [("a".to_owned(), 80), ("linked".to_owned(), 82)]
    );
    assert_eq!(loaded.warnings.len(), 1, "{:#?}", loaded.warnings);
    let w = &loaded.warnings[0];
    assert_eq!(w.location.file, dangling);
    assert_eq!(w.code, Some(Code::DanglingSymlink));
    assert_eq!(
        w.message,
        "symbolic link to \"/nonexistent/warden-test/c.yaml\", which does not exist; skipped"
    );
    // Named on the command line, a dangling link is an error that says so.
    let err = load_paths(std::slice::from_ref(&dangling)).unwrap_err();
    assert_eq!(
        err.errors[0].message,
        "cannot read file: symbolic link to \"/nonexistent/warden-test/c.yaml\", which does not exist"
    );
}

#[test]
fn a_missing_file_names_the_os_error_once() {
    let err = load_paths(&[PathBuf::from("/nonexistent/warden-test/x.yaml")]).unwrap_err();
    let text = err.to_string();
    assert_eq!(text.matches("os error 2").count(), 1, "{text}");
    assert!(
        text.ends_with("/nonexistent/warden-test/x.yaml: cannot read file: No such file or directory (os error 2)"),
        "{text}"
    );
}

/// A folder as the kubelet's atomic writer lays out a ConfigMap volume: the data in a
/// timestamped folder, `..data` a link to it, and one link per key through `..data`.
fn configmap_volume(dir: &Path, stamp: &str, keys: &[(&str, String)]) {
    let data = dir.join(stamp);
    std::fs::create_dir_all(&data).unwrap();
    for (key, text) in keys {
        std::fs::write(data.join(key), text).unwrap();
    }
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(stamp, &tmp).unwrap();
    // The swap is a rename over the old link, as the kubelet does it.
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for (key, _) in keys {
        let link = dir.join(key);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{key}"), &link).unwrap();
        }
    }
}

#[test]
fn a_configmap_volume_loads_each_key_once_before_and_after_an_update() {
    let dir = TempDir::new();
    configmap_volume(
        &dir.0,
        "..2026_12_07_04_00_00.000000001",
        &[
            ("gw.yaml", gateway("gw", 80)),
            ("more.yaml", gateway("more", 81)),
        ],
    );
    let loaded = load_paths(std::slice::from_ref(&dir.0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        gateway_names(&loaded),
        [("gw".to_owned(), 80), ("more".to_owned(), 81)]
    );
    assert!(loaded.warnings.is_empty(), "{:#?}", loaded.warnings);
    assert_eq!(
        config_files(std::slice::from_ref(&dir.0)),
        [dir.0.join("gw.yaml"), dir.0.join("more.yaml")]
    );

    // An update writes a new timestamped folder and swaps `..data`.
    configmap_volume(
        &dir.0,
        "..2026_12_07_04_05_00.000000002",
        &[
            ("gw.yaml", gateway("gw", 8080)),
            ("more.yaml", gateway("more", 8081)),
        ],
    );
    let loaded = load_paths(std::slice::from_ref(&dir.0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        gateway_names(&loaded),
        [("gw".to_owned(), 8080), ("more".to_owned(), 8081)]
    );
}
