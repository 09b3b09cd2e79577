//! `warden inject` on Istio's Bookinfo sample, unchanged (tests/fixtures/istio-bookinfo):
//! every Deployment gets the sidecar and the capture init container, the rest of the file stays
//! as it was, the output validates against Kubernetes' schemas, a second injection changes
//! nothing, and Istio's `traffic.sidecar.istio.io/*` annotations change the init container's
//! capture rules as they change istio-iptables' (compared with `warden capture --dry-run`).

mod common;

use common::schema;
use common::WARDEN;
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};
use warden_config::yaml_source::parse_documents;
use warden_testkit::TempDir;

const BOOKINFO: &str = include_str!("fixtures/istio-bookinfo/samples-bookinfo-platform.yaml");

/// `warden inject` with `input` on stdin; its stdout.
fn inject(input: &str) -> String {
    let mut child = Command::new(WARDEN)
        .args(["inject", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("warden inject runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("input written");
    let out = child.wait_with_output().expect("warden inject ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn docs(text: &str) -> Vec<Value> {
    parse_documents(text)
        .expect("YAML")
        .into_iter()
        .map(|d| d.value)
        .collect()
}

#[test]
fn bookinfo_gets_sidecars_and_keeps_everything_else() {
    let out = inject(BOOKINFO);
    // Every line of the sample is still there, in its order: only lines were added.
    let mut rest = out.lines();
    for line in BOOKINFO.lines() {
        assert!(rest.any(|l| l == line), "lost or moved: {line:?}");
    }
    let before = docs(BOOKINFO);
    let after = docs(&out);
    assert_eq!(before.len(), after.len());
    let mut deployments = 0;
    for (b, a) in before.iter().zip(&after) {
        if b["kind"] != "Deployment" {
            assert_eq!(a, b, "{} is untouched", b["kind"]);
            continue;
        }
        deployments += 1;
        let spec = &a["spec"]["template"]["spec"];
        let names = |key: &str| -> Vec<String> {
            spec[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str().map(String::from))
                .collect()
        };
        assert_eq!(names("initContainers"), ["warden-init"]);
        assert!(names("containers").contains(&"warden-proxy".to_string()));
        let proxy = &spec["containers"][0];
        assert_eq!(proxy["securityContext"]["runAsUser"], 1337);
        let sa = spec["serviceAccountName"]
            .as_str()
            .expect("bookinfo names one");
        assert!(
            spec["volumes"]
                .as_array()
                .expect("volumes")
                .iter()
                .any(|v| v["secret"]["secretName"] == format!("warden-mesh-{sa}").as_str()),
            "the mesh credentials of {sa}"
        );
        let env: Vec<&str> = proxy["env"]
            .as_array()
            .expect("env")
            .iter()
            .filter_map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].as_str())
            .collect();
        assert_eq!(
            env,
            [
                "metadata.name",
                "metadata.namespace",
                "status.podIP",
                "spec.serviceAccountName"
            ]
        );
    }
    assert_eq!(deployments, 6);

    // Twice is once.
    assert_eq!(inject(&out), out, "a second injection changes nothing");

    // The pods validate as Kubernetes would take them.
    if let Some(why) = schema::unavailable() {
        eprintln!("schema validation skipped: {why}");
        return;
    }
    let dir = TempDir::new("inject").expect("temp dir");
    let file = dir.write("bookinfo-injected.yaml", &out).expect("written");
    if let Err(report) = schema::validate(&file) {
        panic!("the injected Bookinfo does not validate:\n{report}");
    }
}

/// `warden capture ARGS --dry-run`: the rules it would install.
fn dry_run(args: &[String]) -> String {
    let out = Command::new(WARDEN)
        .args(args)
        .arg("--dry-run")
        .output()
        .expect("warden capture runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The init container's args for reviews-v1 with `annotations` on its pod template.
fn init_args(annotations: &str) -> Vec<String> {
    let text = BOOKINFO.replace(
        "  template:\n    metadata:\n      labels:\n        app: reviews\n        version: v1\n",
        &format!(
            "  template:\n    metadata:\n      annotations:\n{annotations}      labels:\n        app: reviews\n        version: v1\n"
        ),
    );
    assert_ne!(text, BOOKINFO, "the template was found");
    let out = inject(&text);
    let reviews = docs(&out)
        .into_iter()
        .find(|d| d["metadata"]["name"] == "reviews-v1")
        .expect("reviews-v1");
    reviews["spec"]["template"]["spec"]["initContainers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string").to_string())
        .collect()
}

#[test]
fn istio_annotations_change_the_capture_rules_as_in_istio() {
    let plain = init_args("        sidecar.istio.io/rewriteAppHTTPProbers: \"true\"\n");
    let capture = |flags: &[&str]| -> Vec<String> {
        std::iter::once("capture")
            .chain(flags.iter().copied())
            .map(String::from)
            .collect()
    };
    // No traffic annotation: istio-init's defaults (all inbound ports but Istio's own, every
    // outbound destination), which are `warden capture`'s.
    assert_eq!(dry_run(&plain), dry_run(&capture(&[])));

    // Each annotation as istio-iptables' flag it sets (-b, -d, -o, -x, -i), and the status
    // port annotation moving the always-excluded 15020.
    let annotated = init_args(
        "        traffic.sidecar.istio.io/includeInboundPorts: \"9080\"\n        traffic.sidecar.istio.io/excludeOutboundPorts: \"6379,9000\"\n        traffic.sidecar.istio.io/excludeOutboundIPRanges: \"10.96.0.1/32\"\n        traffic.sidecar.istio.io/includeOutboundIPRanges: \"10.0.0.0/8\"\n",
    );
    let rules = dry_run(&annotated);
    assert_eq!(
        rules,
        dry_run(&capture(&[
            "--inbound-ports=9080",
            "--exclude-outbound-ports=6379,9000",
            "--exclude-outbound-cidrs=10.96.0.1/32",
            "--include-outbound-cidrs=10.0.0.0/8",
        ]))
    );
    assert_ne!(rules, dry_run(&plain));
    for rule in [
        "-A ISTIO_INBOUND -p tcp -m tcp --dport 9080 -j ISTIO_IN_REDIRECT",
        "-A ISTIO_OUTPUT -p tcp -m tcp --dport 6379 -j RETURN",
        "-A ISTIO_OUTPUT -d 10.96.0.1/32 -j RETURN",
        "-A ISTIO_OUTPUT -d 10.0.0.0/8 -j ISTIO_REDIRECT",
    ] {
        assert!(rules.contains(rule), "missing {rule}:\n{rules}");
    }

    let excluded = init_args(
        "        traffic.sidecar.istio.io/excludeInboundPorts: \"8080\"\n        status.sidecar.istio.io/port: \"15999\"\n",
    );
    let rules = dry_run(&excluded);
    assert_eq!(
        rules,
        dry_run(&capture(&[
            "--exclude-inbound-ports=15090,15021,15999,8080"
        ]))
    );
    // (`warden capture` keeps 15020 excluded whatever the status port is.)
    assert!(rules.contains("--dport 15999 -j RETURN"), "{rules}");
    assert!(rules.contains("--dport 8080 -j RETURN"), "{rules}");
}

/// `warden inject` with `args` and `input` on stdin: stdout and stderr.
fn inject_with(args: &[&str], input: &str) -> (String, String) {
    let mut child = Command::new(WARDEN)
        .args(["inject", "-f", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("warden inject runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("input written");
    let out = child.wait_with_output().expect("warden inject ends");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8(out.stdout).expect("UTF-8"), stderr)
}

#[test]
fn probes_and_sidecar_annotations_are_injected_as_istio_does() {
    let app = include_str!("fixtures/probes/web.yaml").replace(
        "    metadata:\n      labels:\n        app: web\n",
        "    metadata:\n      annotations:\n        sidecar.istio.io/proxyCPU: 250m\n        sidecar.istio.io/proxyMemoryLimit: 512Mi\n        readiness.status.sidecar.istio.io/periodSeconds: \"5\"\n        proxy.istio.io/config: |\n          concurrency: 4\n          terminationDrainDuration: 45s\n          holdApplicationUntilProxyStarts: true\n        sidecar.istio.io/statsInclusionPrefixes: cluster.outbound\n      labels:\n        app: web\n",
    );
    let (out, stderr) = inject_with(&[], &app);
    assert!(
        stderr.contains("annotation sidecar.istio.io/statsInclusionPrefixes is not supported"),
        "{stderr}"
    );
    let spec = docs(&out)[0]["spec"]["template"]["spec"].clone();
    let proxy = &spec["containers"][0];
    assert_eq!(proxy["resources"]["requests"]["cpu"], "250m");
    assert_eq!(proxy["resources"]["limits"]["memory"], "512Mi");
    assert_eq!(proxy["readinessProbe"]["periodSeconds"], 5);
    assert_eq!(
        proxy["readinessProbe"]["httpGet"],
        serde_json::json!({"path": "/healthz/ready", "port": 15021})
    );
    let args: Vec<&str> = proxy["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(args.contains(&"--concurrency=4"), "{args:?}");
    assert_eq!(
        proxy["lifecycle"]["postStart"]["exec"]["command"],
        serde_json::json!(["/usr/local/bin/warden", "wait"]),
        "holdApplicationUntilProxyStarts"
    );
    assert_eq!(
        spec["containers"][0]["name"], "warden-proxy",
        "the sidecar starts first"
    );
    let web = &spec["containers"][1];
    assert_eq!(
        web["livenessProbe"]["httpGet"],
        serde_json::json!({"path": "/app-health/web/livez", "port": 15020})
    );
    assert_eq!(inject(&out), out, "a second injection changes nothing");

    // Off: the probes stay as written.
    let off = app.replace(
        "      annotations:\n",
        "      annotations:\n        sidecar.istio.io/rewriteAppHTTPProbers: \"false\"\n",
    );
    let (out_off, _) = inject_with(&[], &off);
    assert_eq!(
        docs(&out_off)[0]["spec"]["template"]["spec"]["containers"][1]["livenessProbe"],
        docs(&off)[0]["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    );

    // A value the annotation does not take stops injection, naming it.
    let bad = Command::new(WARDEN)
        .args(["inject", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin
                .take()
                .expect("stdin")
                .write_all(app.replace("250m", "a lot").as_bytes())?;
            c.wait_with_output()
        })
        .expect("warden inject");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("sidecar.istio.io/proxyCPU"));

    if let Some(why) = schema::unavailable() {
        eprintln!("schema validation skipped: {why}");
        return;
    }
    let dir = TempDir::new("inject-probes").expect("temp dir");
    let file = dir.write("web-injected.yaml", &out).expect("written");
    if let Err(report) = schema::validate(&file) {
        panic!("the injected app does not validate:\n{report}");
    }
}
