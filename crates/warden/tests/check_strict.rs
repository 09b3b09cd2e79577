//! `warden check --strict` (warnings fail, as `istioctl analyze --failure-threshold Warning`)
//! and `--skip-kind` on `warden check` and `warden proxy` (a refused kind accepted by the
//! operator, reported as skipped at every load), run as the binary.

mod common;

use common::{get, run_proxy_to_exit, write_config, Warden, WARDEN};
use warden_testkit::TempDir;

const DIRECT_200: &str = "  - directResponse: {status: 200, body: {string: ok}}\n";

/// A route to a host nothing defines: Istio accepts it and `istioctl analyze` warns IST0101.
const DANGLING: &str = "  - match: [{uri: {prefix: /missing}}]\n    route: [{destination: {host: nowhere.example.svc.cluster.local}}]\n";

/// A kind warden refuses: requests would not get what the plugin does to them.
const WASM: &str = "---\napiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: auth, namespace: default}\nspec:\n  url: oci://registry.example/auth:1\n  phase: AUTHN\n";

/// `warden check` with `args`: (exit code, stdout + stderr).
fn check(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(WARDEN)
        .args(["check", "-c"])
        .arg(config)
        .args(args)
        .output()
        .expect("warden check runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn strict_fails_on_a_dangling_reference_that_plain_check_accepts() {
    let dir = TempDir::new("check-strict").unwrap();
    let (config, _) = write_config(&dir, "", &format!("{DANGLING}{DIRECT_200}"));
    let (code, text) = check(&config, &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("IST0101") && text.contains("config OK"),
        "{text}"
    );
    let (code, text) = check(&config, &["--strict"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("IST0101"), "{text}");
    assert!(text.contains("fail --strict"), "{text}");
    assert!(!text.contains("config OK"), "{text}");

    // Without warnings, --strict passes.
    let (clean, _) = write_config(&dir, "", DIRECT_200);
    let (code, text) = check(&clean, &["--strict"]);
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn a_refused_kind_fails_check_until_skipped_explicitly() {
    let dir = TempDir::new("check-skip").unwrap();
    let (config, _) = write_config(&dir, WASM, DIRECT_200);
    let (code, text) = check(&config, &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("kind WasmPlugin")
            && text.contains("--skip-kind WasmPlugin")
            && text.contains("WDN0004"),
        "{text}"
    );
    for skip in ["WasmPlugin", "WasmPlugin.extensions.istio.io"] {
        let (code, text) = check(&config, &["--skip-kind", skip]);
        assert_eq!(code, Some(0), "--skip-kind {skip}: {text}");
        assert!(
            text.contains("skipped as --skip-kind asks") && text.contains("WDN0005"),
            "{text}"
        );
    }
    // The operator's choice is not a finding: --strict accepts it.
    let (code, text) = check(&config, &["--strict", "--skip-kind", "WasmPlugin"]);
    assert_eq!(code, Some(0), "{text}");
    // Only refused kinds can be skipped, spelt as Kubernetes spells them.
    let (code, text) = check(&config, &["--skip-kind", "VirtualService"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("not a kind warden refuses"), "{text}");
    let (code, text) = check(&config, &["--skip-kind", "wasmplugin"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("did you mean WasmPlugin"), "{text}");
}

#[test]
fn proxy_starts_with_a_refused_kind_only_when_skipped() {
    let dir = TempDir::new("proxy-skip").unwrap();
    let (config, _) = write_config(&dir, WASM, DIRECT_200);
    let refused = run_proxy_to_exit(&config, &[]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--skip-kind WasmPlugin"), "{stderr}");

    let w = Warden::start(WASM, DIRECT_200, &["--skip-kind", "WasmPlugin"]);
    let answer = get(w.listener, "/").expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
