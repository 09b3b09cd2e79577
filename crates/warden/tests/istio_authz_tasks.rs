//! The istio.io authorization tasks authz-http, authz-tcp and authz-deny, run as the tasks run
//! them: every workload a "pod" (a network namespace with its app, `warden capture` and a
//! sidecar with its mesh identity, auto mTLS between them), the tasks' policies applied one
//! step at a time (the config file rewritten, the sidecars reloaded by SIGHUP), and after each
//! step the requests the task makes, with the outcome it shows: 200, 403 `RBAC: access
//! denied`, or a TCP connection closed unanswered. The fixtures are written from the task
//! pages and Istio's samples (named above each); the policies are the tasks' YAML as
//! published. Runs as root (CI is); skips with the reason only where namespaces cannot be
//! made. Every namespace is removed after, also on failure.

mod common;

use common::pods::*;
use std::net::TcpListener;
use std::path::Path;

/// The path as a flag value.
fn arg(p: &Path) -> String {
    p.to_str().expect("utf-8 temp path").to_string()
}

/// Sidecar flags for a workload of `namespace` running as `service_account`, with the mesh
/// identity in `id`.
fn workload_args(namespace: &str, service_account: &str, id: &Path) -> Vec<String> {
    [
        "--namespace",
        namespace,
        "--service-account",
        service_account,
        "--mesh-credentials",
        &arg(id),
    ]
    .map(String::from)
    .to_vec()
}

fn start(pod: &mut Pod, config: &Path, ip: &str, labels: &str, args: &[String]) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    pod.start_sidecar(config, ip, labels, &args);
}

/// Write the next step's config and have each sidecar swap it in.
fn apply(config: &Path, yaml: &str, pods: &[&Pod]) {
    std::fs::write(config, yaml).expect("config written");
    for pod in pods {
        pod.reload_sidecar();
    }
}

/// The count of denials the sidecar attributed to `policy` (a rule name, or `none` when no
/// ALLOW rule matched).
fn denied_by(pod: &Pod, policy: &str) -> f64 {
    pod.metric(&format!("warden_authz_denied_total{{policy=\"{policy}\"}}"))
}

/// `warden check` of `config` as the tcp-echo workload's sidecar: its output.
fn check_as_tcp_echo(config: &Path) -> String {
    let out = std::process::Command::new(common::WARDEN)
        .args(["check", "-c", &arg(config), "--mode", "sidecar"])
        .args(["--namespace", "foo", "--label", "app=tcp-echo"])
        .args(["--pod-ip", SERVER_IP])
        .output()
        .expect("warden check runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---------------------------------------------------------------------------------------------
// authz-tcp: istio.io docs/tasks/security/authorization/authz-tcp

/// istio/istio samples/tcp-echo/tcp-echo.yaml and samples/sleep/sleep.yaml as applied with
/// `kubectl apply -n foo` (the namespace set, the clusterIPs a cluster would assign), and the
/// two pods as `kubectl get pods -o yaml` shows them after `istioctl kube-inject` (the
/// injector's `security.istio.io/tlsMode` label, which turns on auto mTLS). Then `policy`.
fn tcp_echo_namespace(policy: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: tcp-echo
  namespace: foo
  labels:
    app: tcp-echo
    service: tcp-echo
spec:
  clusterIP: {VIP}
  ports:
  - name: tcp
    port: 9000
  - name: tcp-other
    port: 9001
  # Port 9002 is omitted intentionally for testing the pass through filter chain.
  selector:
    app: tcp-echo
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: tcp-echo
  namespace: foo
spec:
  replicas: 1
  selector:
    matchLabels:
      app: tcp-echo
      version: v1
  template:
    metadata:
      labels:
        app: tcp-echo
        version: v1
    spec:
      containers:
      - name: tcp-echo
        image: registry.istio.io/release/tcp-echo-server:1.3
        args: [ "9000,9001,9002", "hello" ]
        ports:
        - containerPort: 9000
        - containerPort: 9001
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: sleep
  namespace: foo
---
apiVersion: v1
kind: Service
metadata:
  name: sleep
  namespace: foo
  labels:
    app: sleep
    service: sleep
spec:
  clusterIP: 10.96.0.11
  ports:
  - port: 80
    name: http
  selector:
    app: sleep
---
apiVersion: v1
kind: Pod
metadata:
  name: tcp-echo-7d5f8b9c4-x2x7q
  namespace: foo
  labels: {{app: tcp-echo, version: v1, security.istio.io/tlsMode: istio}}
spec: {{serviceAccountName: default, containers: [{{name: tcp-echo}}, {{name: istio-proxy}}]}}
status: {{podIP: {SERVER_IP}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: sleep-5c8d6f7b6-q9w2k
  namespace: foo
  labels: {{app: sleep, security.istio.io/tlsMode: istio}}
spec: {{serviceAccountName: sleep, containers: [{{name: sleep}}, {{name: istio-proxy}}]}}
status: {{podIP: {CLIENT_IP}}}
{policy}"#
    )
}

/// The task's first `tcp-policy`: ALLOW to ports 9000 and 9001.
const TCP_ALLOW_PORTS: &str = r#"---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: tcp-policy
  namespace: foo
spec:
  selector:
    matchLabels:
      app: tcp-echo
  action: ALLOW
  rules:
  - to:
    - operation:
        ports: ["9000", "9001"]
"#;

/// The update: the HTTP-only field `methods` added for port 9000.
const TCP_ALLOW_METHODS_PORT: &str = r#"---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: tcp-policy
  namespace: foo
spec:
  selector:
    matchLabels:
      app: tcp-echo
  action: ALLOW
  rules:
  - to:
    - operation:
        methods: ["GET"]
        ports: ["9000"]
"#;

/// A DENY policy with HTTP-only fields only.
const TCP_DENY_METHODS: &str = r#"---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: tcp-policy
  namespace: foo
spec:
  selector:
    matchLabels:
      app: tcp-echo
  action: DENY
  rules:
  - to:
    - operation:
        methods: ["GET"]
"#;

/// A DENY policy with both TCP and HTTP fields.
const TCP_DENY_METHODS_PORT: &str = r#"---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: tcp-policy
  namespace: foo
spec:
  selector:
    matchLabels:
      app: tcp-echo
  action: DENY
  rules:
  - to:
    - operation:
        methods: ["GET"]
        ports: ["9000"]
"#;

/// The tcp-echo server of samples/tcp-echo (`args: ["9000,9001,9002", "hello"]`): each line
/// read is answered with `hello <line>`, on all three ports of the pod.
fn serve_tcp_echo(pod: &Pod) {
    for port in [9000, 9001, 9002] {
        let listener = pod
            .ns
            .run_in(|| TcpListener::bind(("0.0.0.0", port)).unwrap())
            .unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    use std::io::{BufRead, BufReader, Write};
                    let mut out = stream.try_clone().unwrap();
                    let reader = BufReader::new(stream);
                    for line in reader.lines() {
                        let Ok(line) = line else { return };
                        if writeln!(out, "hello {line}").is_err() {
                            return;
                        }
                    }
                });
            }
        });
    }
}

/// `echo "port N" | nc ADDR N` from the sleep pod, as the task's check: `true` when the reply
/// has the `hello` prefix ("connection succeeded"), `false` when the connection was closed
/// unanswered ("connection rejected"); anything else fails the test.
fn nc(sleep: &Pod, host: &str, port: u16) -> bool {
    let line = format!("port {port}");
    let back = sleep
        .ns
        .run_in(|| tcp_exchange(&format!("{host}:{port}"), format!("{line}\n").as_bytes()))
        .unwrap()
        .unwrap_or_else(|e| panic!("nc {host} {port}: {e}"));
    let text = String::from_utf8_lossy(&back);
    match text.as_ref() {
        "" => false,
        t if t == format!("hello {line}\n") => true,
        other => panic!("nc {host} {port}: unexpected reply {other:?}"),
    }
}

#[test]
fn authz_tcp_task() {
    let Some((mut sleep, mut tcp_echo, _outsider, dir)) = topology() else {
        return;
    };
    serve_tcp_echo(&tcp_echo);
    let ca = dir.path().join("ca");
    warden(&["ca", "init", "--dir", &arg(&ca)]);
    let (echo_id, sleep_id) = (dir.path().join("echo-id"), dir.path().join("sleep-id"));
    mesh_identity_in(&ca, &echo_id, "foo", "default");
    mesh_identity_in(&ca, &sleep_id, "foo", "sleep");
    let config = dir.write("foo.yaml", &tcp_echo_namespace("")).unwrap();
    let mut echo_args = workload_args("foo", "default", &echo_id);
    echo_args.extend(["--label".to_string(), "version=v1".to_string()]);
    start(
        &mut tcp_echo,
        &config,
        SERVER_IP,
        "app=tcp-echo",
        &echo_args,
    );
    let sleep_args = workload_args("foo", "sleep", &sleep_id);
    start(&mut sleep, &config, CLIENT_IP, "app=sleep", &sleep_args);
    // `nc tcp-echo 9000`: the service VIP; 9002 is not a service port, so the task sends it to
    // the pod IP (the client's passthrough, the server's pass-through filter chain).
    let (service, pod) = (VIP, SERVER_IP);

    // Before any policy: all three ports answer (9000/9001 over auto mTLS, 9002 in plaintext).
    assert!(nc(&sleep, service, 9000));
    assert!(nc(&sleep, service, 9001));
    assert!(nc(&sleep, pod, 9002));
    let tls = tcp_echo.metric("warden_downstream_tls_handshakes_total");
    assert_eq!(tls, 2.0, "9000 and 9001 arrive over mTLS");

    // ALLOW ports 9000 and 9001: those pass; 9002 matches no ALLOW rule (the policy applies to
    // the pass-through chain too).
    apply(
        &config,
        &tcp_echo_namespace(TCP_ALLOW_PORTS),
        &[&tcp_echo, &sleep],
    );
    assert!(nc(&sleep, service, 9000), "ALLOW ports: 9000");
    assert!(nc(&sleep, service, 9001), "ALLOW ports: 9001");
    assert!(!nc(&sleep, pod, 9002), "ALLOW ports: 9002 rejected");
    assert_eq!(denied_by(&tcp_echo, "none"), 1.0);

    // ALLOW with `methods` (HTTP-only) for 9000: on TCP the rule is invalid and ignored, so no
    // ALLOW rule is left to match: 9000 and 9001 are both rejected.
    apply(
        &config,
        &tcp_echo_namespace(TCP_ALLOW_METHODS_PORT),
        &[&tcp_echo, &sleep],
    );
    // `warden check` says so (Istio only logs it at debug level).
    let said = check_as_tcp_echo(&config);
    assert!(
        said.contains(
            "field spec.rules[0]: uses HTTP-only fields (methods): on TCP connections (inbound \
             ports 9000, 9001) this ALLOW rule never matches"
        ),
        "{said}"
    );
    assert!(
        !nc(&sleep, service, 9000),
        "ALLOW methods+port: 9000 rejected"
    );
    assert!(
        !nc(&sleep, service, 9001),
        "ALLOW methods+port: 9001 rejected"
    );
    assert_eq!(denied_by(&tcp_echo, "none"), 3.0);

    // DENY with only `methods`: the HTTP-only field is dropped on TCP, which leaves a rule
    // that matches every connection: 9000 and 9001 are rejected.
    apply(
        &config,
        &tcp_echo_namespace(TCP_DENY_METHODS),
        &[&tcp_echo, &sleep],
    );
    let rule = "ns[foo]-policy[tcp-policy]-rule[0]";
    let said = check_as_tcp_echo(&config);
    assert!(
        said.contains("(methods): on TCP connections (inbound ports 9000, 9001) they are ignored"),
        "{said}"
    );
    assert!(
        said.contains("so this DENY rule matches every connection"),
        "{said}"
    );
    assert!(!nc(&sleep, service, 9000), "DENY methods: 9000 rejected");
    assert!(!nc(&sleep, service, 9001), "DENY methods: 9001 rejected");
    assert_eq!(denied_by(&tcp_echo, rule), 2.0);

    // DENY with `methods` and `ports: 9000`: the ports still count, so 9000 is rejected and
    // 9001 passes (and so does 9002, which no ALLOW policy restricts any more).
    apply(
        &config,
        &tcp_echo_namespace(TCP_DENY_METHODS_PORT),
        &[&tcp_echo, &sleep],
    );
    let said = check_as_tcp_echo(&config);
    assert!(
        said.contains("this DENY rule matches by ports alone"),
        "{said}"
    );
    assert!(
        !nc(&sleep, service, 9000),
        "DENY methods+port: 9000 rejected"
    );
    assert!(
        nc(&sleep, service, 9001),
        "DENY methods+port: 9001 succeeds"
    );
    assert!(nc(&sleep, pod, 9002), "DENY methods+port: 9002 succeeds");
    assert_eq!(denied_by(&tcp_echo, rule), 3.0);
}

// ---------------------------------------------------------------------------------------------
// authz-deny: istio.io docs/tasks/security/authorization/authz-deny

/// istio/istio samples/httpbin/httpbin.yaml and samples/sleep/sleep.yaml applied with
/// `kubectl apply -n foo` (clusterIPs assigned), the injected pods, then `policies`. The
/// httpbin pod's app is `warden echo` on 8080 (the sample's containerPort), 200 on every path.
fn httpbin_namespace(policies: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: httpbin
  namespace: foo
---
apiVersion: v1
kind: Service
metadata:
  name: httpbin
  namespace: foo
  labels:
    app: httpbin
    service: httpbin
spec:
  clusterIP: {VIP}
  ports:
  - name: http
    port: 8000
    targetPort: 8080
  selector:
    app: httpbin
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: httpbin
  namespace: foo
spec:
  replicas: 1
  selector:
    matchLabels:
      app: httpbin
      version: v1
  template:
    metadata:
      labels:
        app: httpbin
        version: v1
    spec:
      serviceAccountName: httpbin
      containers:
      - image: docker.io/mccutchen/go-httpbin:v2.15.0
        name: httpbin
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Pod
metadata:
  name: httpbin-6f4c8d5b7-m4k2p
  namespace: foo
  labels: {{app: httpbin, version: v1, security.istio.io/tlsMode: istio}}
spec: {{serviceAccountName: httpbin, containers: [{{name: httpbin}}, {{name: istio-proxy}}]}}
status: {{podIP: {SERVER_IP}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: sleep-5c8d6f7b6-q9w2k
  namespace: foo
  labels: {{app: sleep, security.istio.io/tlsMode: istio}}
spec: {{serviceAccountName: sleep, containers: [{{name: sleep}}, {{name: istio-proxy}}]}}
status: {{podIP: {CLIENT_IP}}}
{policies}"#
    )
}

/// `deny-method-get`: DENY GET.
const DENY_METHOD_GET: &str = r#"---
apiVersion: security.istio.io/v1beta1
kind: AuthorizationPolicy
metadata:
  name: deny-method-get
  namespace: foo
spec:
  selector:
    matchLabels:
      app: httpbin
  action: DENY
  rules:
  - to:
    - operation:
        methods: ["GET"]
"#;

/// `deny-method-get` updated: DENY GET unless `x-token: admin`.
const DENY_METHOD_GET_UNLESS_ADMIN: &str = r#"---
apiVersion: security.istio.io/v1beta1
kind: AuthorizationPolicy
metadata:
  name: deny-method-get
  namespace: foo
spec:
  selector:
    matchLabels:
      app: httpbin
  action: DENY
  rules:
  - to:
    - operation:
        methods: ["GET"]
    when:
    - key: request.headers[x-token]
      notValues: ["admin"]
"#;

/// `allow-path-ip`: ALLOW `/ip`.
const ALLOW_PATH_IP: &str = r#"---
apiVersion: security.istio.io/v1beta1
kind: AuthorizationPolicy
metadata:
  name: allow-path-ip
  namespace: foo
spec:
  selector:
    matchLabels:
      app: httpbin
  action: ALLOW
  rules:
  - to:
    - operation:
        paths: ["/ip"]
"#;

/// `curl http://httpbin.foo:8000{path} -X {method} [-H "x-token: {token}"]` from the sleep
/// pod: the status code (and a 403 must be Envoy's RBAC denial).
fn curl(sleep: &Pod, method: &str, path: &str, token: Option<&str>) -> u16 {
    let headers: Vec<(&str, &str)> = token.map(|t| ("x-token", t)).into_iter().collect();
    let r = sleep
        .ns
        .run_in(|| {
            request_with(
                &format!("{VIP}:8000"),
                method,
                path,
                "httpbin.foo:8000",
                &headers,
                b"",
            )
        })
        .unwrap()
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    if r.status == 403 {
        assert_eq!(r.body_text(), "RBAC: access denied", "{method} {path}");
    }
    r.status
}

#[test]
fn authz_deny_task() {
    let Some((mut sleep, mut httpbin, _outsider, dir)) = topology() else {
        return;
    };
    let ca = dir.path().join("ca");
    warden(&["ca", "init", "--dir", &arg(&ca)]);
    let (httpbin_id, sleep_id) = (dir.path().join("httpbin-id"), dir.path().join("sleep-id"));
    mesh_identity_in(&ca, &httpbin_id, "foo", "httpbin");
    mesh_identity_in(&ca, &sleep_id, "foo", "sleep");
    let config = dir.write("foo.yaml", &httpbin_namespace("")).unwrap();
    let mut httpbin_args = workload_args("foo", "httpbin", &httpbin_id);
    httpbin_args.extend(["--label".to_string(), "version=v1".to_string()]);
    start(
        &mut httpbin,
        &config,
        SERVER_IP,
        "app=httpbin",
        &httpbin_args,
    );
    let sleep_args = workload_args("foo", "sleep", &sleep_id);
    start(&mut sleep, &config, CLIENT_IP, "app=sleep", &sleep_args);
    let pods = [&httpbin, &sleep];

    // sleep talks to httpbin (over auto mTLS).
    assert_eq!(curl(&sleep, "GET", "/ip", None), 200);
    assert_eq!(
        httpbin.metric("warden_downstream_tls_handshakes_total"),
        1.0
    );

    // deny-method-get: GET is denied, POST allowed.
    apply(&config, &httpbin_namespace(DENY_METHOD_GET), &pods);
    assert_eq!(curl(&sleep, "GET", "/get", None), 403);
    assert_eq!(curl(&sleep, "POST", "/post", None), 200);

    // Denied unless `x-token: admin` (notValues).
    apply(
        &config,
        &httpbin_namespace(DENY_METHOD_GET_UNLESS_ADMIN),
        &pods,
    );
    assert_eq!(curl(&sleep, "GET", "/get", Some("admin")), 200);
    assert_eq!(curl(&sleep, "GET", "/get", Some("guest")), 403);
    // Not in the task: without the header the condition holds too (an absent header matches
    // no value, so it is "not admin"), as Envoy's inverted header matcher has it.
    assert_eq!(curl(&sleep, "GET", "/get", None), 403);

    // allow-path-ip beside it: DENY wins over ALLOW for guest at /ip; admin at /ip is allowed;
    // admin at /get matches no ALLOW rule.
    let both = format!("{DENY_METHOD_GET_UNLESS_ADMIN}{ALLOW_PATH_IP}");
    apply(&config, &httpbin_namespace(&both), &pods);
    let deny_rule = "ns[foo]-policy[deny-method-get]-rule[0]";
    let (denied_before, none_before) =
        (denied_by(&httpbin, deny_rule), denied_by(&httpbin, "none"));
    assert_eq!(curl(&sleep, "GET", "/ip", Some("guest")), 403);
    assert_eq!(denied_by(&httpbin, deny_rule), denied_before + 1.0);
    assert_eq!(curl(&sleep, "GET", "/ip", Some("admin")), 200);
    assert_eq!(curl(&sleep, "GET", "/get", Some("admin")), 403);
    assert_eq!(denied_by(&httpbin, "none"), none_before + 1.0);
}

// ---------------------------------------------------------------------------------------------
// authz-http: istio.io docs/tasks/security/authorization/authz-http

/// Bookinfo's pods and the caller of productpage, on one switch.
const INGRESS_IP: &str = "10.231.5.1";
const PRODUCTPAGE_IP: &str = "10.231.5.2";
const DETAILS_IP: &str = "10.231.5.3";
const REVIEWS_IP: &str = "10.231.5.4";
const RATINGS_IP: &str = "10.231.5.5";

/// istio/istio samples/bookinfo/platform/kube/bookinfo.yaml's Services and ServiceAccounts
/// (clusterIPs assigned, one pod per service, v1), the injected pods, the mesh-wide STRICT
/// PeerAuthentication the task asks for ("mutual TLS enabled"; istio.io
/// docs/tasks/security/authentication/mtls-migration's `default` in istio-system), then
/// `policies`.
fn bookinfo(policies: &str) -> String {
    let mut yaml = String::new();
    for (i, (app, ip)) in [
        ("details", DETAILS_IP),
        ("ratings", RATINGS_IP),
        ("reviews", REVIEWS_IP),
        ("productpage", PRODUCTPAGE_IP),
    ]
    .into_iter()
    .enumerate()
    {
        yaml.push_str(&format!(
            r#"apiVersion: v1
kind: Service
metadata:
  name: {app}
  namespace: default
  labels:
    app: {app}
    service: {app}
spec:
  clusterIP: 10.96.0.{vip}
  ports:
  - port: 9080
    name: http
  selector:
    app: {app}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: bookinfo-{app}
  namespace: default
  labels:
    account: {app}
---
apiVersion: v1
kind: Pod
metadata:
  name: {app}-v1-6b9f7d8c5-abcde
  namespace: default
  labels: {{app: {app}, version: v1, security.istio.io/tlsMode: istio}}
spec: {{serviceAccountName: bookinfo-{app}, containers: [{{name: {app}}}, {{name: istio-proxy}}]}}
status: {{podIP: {ip}}}
---
"#,
            vip = 20 + i
        ));
    }
    yaml.push_str(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: istio-ingressgateway-7c9d8b6f5-zxcvb
  namespace: istio-system
  labels: {{app: istio-ingressgateway, istio: ingressgateway, security.istio.io/tlsMode: istio}}
spec: {{serviceAccountName: istio-ingressgateway-service-account, containers: [{{name: istio-proxy}}]}}
status: {{podIP: {INGRESS_IP}}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: "default"
  namespace: "istio-system"
spec:
  mtls:
    mode: STRICT
{policies}"#
    ));
    yaml
}

const ALLOW_NOTHING: &str = r#"---
apiVersion: security.istio.io/v1beta1
kind: AuthorizationPolicy
metadata:
  name: allow-nothing
  namespace: default
spec:
  {}
"#;

const PRODUCTPAGE_VIEWER: &str = r#"---
apiVersion: "security.istio.io/v1beta1"
kind: "AuthorizationPolicy"
metadata:
  name: "productpage-viewer"
  namespace: default
spec:
  selector:
    matchLabels:
      app: productpage
  action: ALLOW
  rules:
  - to:
    - operation:
        methods: ["GET"]
"#;

const DETAILS_VIEWER: &str = r#"---
apiVersion: "security.istio.io/v1beta1"
kind: "AuthorizationPolicy"
metadata:
  name: "details-viewer"
  namespace: default
spec:
  selector:
    matchLabels:
      app: details
  action: ALLOW
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/bookinfo-productpage"]
    to:
    - operation:
        methods: ["GET"]
"#;

const REVIEWS_VIEWER: &str = r#"---
apiVersion: "security.istio.io/v1beta1"
kind: "AuthorizationPolicy"
metadata:
  name: "reviews-viewer"
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
  action: ALLOW
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/bookinfo-productpage"]
    to:
    - operation:
        methods: ["GET"]
"#;

const RATINGS_VIEWER: &str = r#"---
apiVersion: "security.istio.io/v1beta1"
kind: "AuthorizationPolicy"
metadata:
  name: "ratings-viewer"
  namespace: default
spec:
  selector:
    matchLabels:
      app: ratings
  action: ALLOW
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/bookinfo-reviews"]
    to:
    - operation:
        methods: ["GET"]
"#;

/// One call of the Bookinfo graph: who calls (the pod, whose sidecar adds its identity), the
/// service (VIP and Host), method and path.
struct Call<'a> {
    from: &'a Pod,
    caller: &'a str,
    service: &'a str,
    vip: &'a str,
    method: &'a str,
    path: &'a str,
}

fn call<'a>(
    from: &'a Pod,
    caller: &'a str,
    service: &'a str,
    vip: &'a str,
    method: &'a str,
    path: &'a str,
) -> Call<'a> {
    Call {
        from,
        caller,
        service,
        vip,
        method,
        path,
    }
}

impl Call<'_> {
    fn status(&self) -> u16 {
        let host = format!("{}.default.svc.cluster.local:9080", self.service);
        let r = self
            .from
            .ns
            .run_in(|| {
                request(
                    &format!("{}:9080", self.vip),
                    self.method,
                    self.path,
                    &host,
                    b"",
                )
            })
            .unwrap()
            .unwrap_or_else(|e| panic!("{}: {e}", self.label()));
        if r.status == 403 {
            assert_eq!(r.body_text(), "RBAC: access denied", "{}", self.label());
        }
        r.status
    }

    fn label(&self) -> String {
        format!(
            "{} -> {} {} {}",
            self.caller, self.service, self.method, self.path
        )
    }
}

#[test]
fn authz_http_task() {
    let ips = [
        INGRESS_IP,
        PRODUCTPAGE_IP,
        DETAILS_IP,
        REVIEWS_IP,
        RATINGS_IP,
    ];
    let Some((pods, _switch, dir)) = bridged_pods(&ips) else {
        return;
    };
    let [mut ingress, mut productpage, mut details, mut reviews, mut ratings]: [Pod; 5] =
        pods.try_into().ok().expect("five pods");
    let ca = dir.path().join("ca");
    warden(&["ca", "init", "--dir", &arg(&ca)]);
    let config = dir.write("bookinfo.yaml", &bookinfo("")).unwrap();
    // Each Bookinfo pod serves its app on 9080 and runs its sidecar as its service account.
    for (pod, app, ip) in [
        (&mut productpage, "productpage", PRODUCTPAGE_IP),
        (&mut details, "details", DETAILS_IP),
        (&mut reviews, "reviews", REVIEWS_IP),
        (&mut ratings, "ratings", RATINGS_IP),
    ] {
        pod.start_echo(9080, None);
        let id = dir.path().join(format!("{app}-id"));
        let sa = format!("bookinfo-{app}");
        mesh_identity_in(&ca, &id, "default", &sa);
        start(
            pod,
            &config,
            ip,
            &format!("app={app}"),
            &workload_args("default", &sa, &id),
        );
    }
    // The ingress gateway's hop to productpage: a meshed caller with the gateway's identity
    // (the browser's request reaches productpage from it).
    let gateway_id = dir.path().join("ingress-id");
    let gateway_sa = "istio-ingressgateway-service-account";
    mesh_identity_in(&ca, &gateway_id, "istio-system", gateway_sa);
    start(
        &mut ingress,
        &config,
        INGRESS_IP,
        "app=istio-ingressgateway",
        &workload_args("istio-system", gateway_sa, &gateway_id),
    );

    // Bookinfo's call graph (productpage -> details, reviews; reviews -> ratings), the page's
    // own request, and calls the policies must refuse: a POST, and callers with the wrong
    // service account.
    let calls = [
        call(
            &ingress,
            "ingress",
            "productpage",
            "10.96.0.23",
            "GET",
            "/productpage",
        ),
        call(
            &ingress,
            "ingress",
            "productpage",
            "10.96.0.23",
            "POST",
            "/productpage",
        ),
        call(
            &productpage,
            "productpage",
            "details",
            "10.96.0.20",
            "GET",
            "/details/0",
        ),
        call(
            &productpage,
            "productpage",
            "details",
            "10.96.0.20",
            "POST",
            "/details/0",
        ),
        call(
            &reviews,
            "reviews",
            "details",
            "10.96.0.20",
            "GET",
            "/details/0",
        ),
        call(
            &productpage,
            "productpage",
            "reviews",
            "10.96.0.22",
            "GET",
            "/reviews/0",
        ),
        call(
            &reviews,
            "reviews",
            "ratings",
            "10.96.0.21",
            "GET",
            "/ratings/0",
        ),
        call(
            &productpage,
            "productpage",
            "ratings",
            "10.96.0.21",
            "GET",
            "/ratings/0",
        ),
    ];
    let statuses = || -> Vec<u16> { calls.iter().map(Call::status).collect() };
    let bookinfo_pods = [&productpage, &details, &reviews, &ratings];
    let check = |step: &str, want: [u16; 8]| {
        let got = statuses();
        let labels: Vec<String> = calls.iter().map(Call::label).collect();
        assert_eq!(got, want, "{step}: {labels:#?}");
    };

    // Before any policy: the whole page renders.
    check("no policy", [200; 8]);

    // allow-nothing: every workload of `default` denies everything ("RBAC: access denied").
    let mut policies = ALLOW_NOTHING.to_string();
    apply(&config, &bookinfo(&policies), &bookinfo_pods);
    check("allow-nothing", [403; 8]);

    // productpage-viewer: GET on productpage from anyone; details and reviews still refuse
    // ("Error fetching product details / reviews").
    policies.push_str(PRODUCTPAGE_VIEWER);
    apply(&config, &bookinfo(&policies), &bookinfo_pods);
    check(
        "productpage-viewer",
        [200, 403, 403, 403, 403, 403, 403, 403],
    );

    // details-viewer and reviews-viewer: GET from productpage's service account; ratings
    // still refuses reviews ("Ratings service currently unavailable").
    policies.push_str(DETAILS_VIEWER);
    policies.push_str(REVIEWS_VIEWER);
    apply(&config, &bookinfo(&policies), &bookinfo_pods);
    check(
        "details-viewer + reviews-viewer",
        [200, 403, 200, 403, 403, 200, 403, 403],
    );

    // ratings-viewer: GET from reviews' service account: the page shows its ratings.
    policies.push_str(RATINGS_VIEWER);
    apply(&config, &bookinfo(&policies), &bookinfo_pods);
    check("ratings-viewer", [200, 403, 200, 403, 403, 200, 200, 403]);
    // The refusals are the ALLOW policies' (no rule matched), not a failed call.
    assert!(denied_by(&ratings, "none") > 0.0);
    assert!(denied_by(&details, "none") > 0.0);
}
