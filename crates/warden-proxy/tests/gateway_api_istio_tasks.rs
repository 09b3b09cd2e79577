//! istio.io's mirroring, secure-ingress (TLS termination, several hosts, mutual TLS) and
//! SNI-passthrough tasks, each step in its "Istio APIs" and "Gateway API" forms side by side:
//! the YAML as istio.io publishes it (tests/fixtures/istio-tasks, NOTICE.md there), two
//! proxies, the task's requests sent to both with real clients (reqwest, curl), the same
//! answers from both and the answer the task states. Changes to what is loaded are said where
//! they are made: ports made 0 (a free one), mesh routes bound to an ingress (an in-process
//! proxy has no captured traffic).

mod common;

use common::kube_dump::{endpoint_slice, fixture, pod, service};
use common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use warden_proxy::{ConfigSource, Proxy, ProxyOptions, RunningProxy};
use warden_testkit::pki::Pki;
use warden_testkit::TempDir;

fn task(name: &str) -> String {
    fixture("istio-tasks", name)
}

/// The documents of `yaml` whose `kind:` line is `kind`.
fn documents(yaml: &str, kind: &str) -> String {
    yaml.split("\n---\n")
        .filter(|d| d.lines().any(|l| l == format!("kind: {kind}")))
        .map(|d| format!("{}\n---\n", d.trim_end()))
        .collect()
}

/// The task's requests' answers from the Istio API proxy and the Gateway API proxy, which
/// must be equal; returns them.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, istio: T, gateway_api: T) -> T {
    assert_eq!(istio, gateway_api, "{what}: Istio APIs vs Gateway API");
    istio
}

mod mirroring {
    use super::*;

    /// A mesh VirtualService bound to the ingress Gateway `gw` of [`gateway`].
    fn at_ingress_vs(vs: &str) -> String {
        let bound = vs.replace("\n  http:\n", "\n  gateways: [gw]\n  http:\n");
        assert!(bound.contains("gateways: [gw]"), "{vs}");
        bound
    }

    /// An HTTPRoute whose parent is Service httpbin (GAMMA) bound to Gateway `ingress` of
    /// [`GATEWAY_API_INGRESS`].
    fn at_ingress_route(route: &str) -> String {
        const SERVICE_PARENT: &str =
            "  parentRefs:\n  - group: \"\"\n    kind: Service\n    name: httpbin\n    port: 8000\n";
        assert!(route.contains(SERVICE_PARENT), "{route}");
        route.replace(SERVICE_PARENT, "  parentRefs:\n  - name: ingress\n")
    }

    const GATEWAY_API_INGRESS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ingress}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 0, protocol: HTTP}]
";

    /// The task's httpbin Service and its two Deployments' pods (v1 at `v1`, v2 at `v2`), with
    /// EndpointSlices for Service httpbin and for the Gateway API tab's httpbin-v1/-v2.
    fn cluster(v1: SocketAddr, v2: SocketAddr) -> String {
        let mut y = task("mirroring-httpbin-service.yaml");
        for (version, at) in [("v1", v1), ("v2", v2)] {
            let pod_name = format!("httpbin-{version}-7d8f9c-abcde");
            y.push_str(&pod(
                "default",
                &pod_name,
                &[("app", "httpbin"), ("version", version)],
                at,
            ));
            y.push_str(&endpoint_slice(
                "default",
                "httpbin",
                &format!("httpbin-{version}"),
                Some("http"),
                at,
                Some(&pod_name),
            ));
            y.push_str(&endpoint_slice(
                "default",
                &format!("httpbin-{version}"),
                &format!("httpbin-{version}-x1"),
                Some("http"),
                at,
                Some(&pod_name),
            ));
        }
        y
    }

    /// What the task looks at after each step: the answers to `curl http://httpbin:8000/headers`
    /// (5 of them), and the requests v1's and v2's access logs show (their Host headers).
    #[derive(Debug, PartialEq)]
    struct Seen {
        answers: Vec<u16>,
        v1_hosts: Vec<Vec<String>>,
        v2_hosts: Vec<Vec<String>>,
    }

    /// Both steps of the task in one form, applied as the task applies them: the cluster and
    /// `ingress`, then `default_route`, then `mirror` (a later file's object replaces an
    /// earlier one of the same kind and name, as `kubectl apply`); each step's routes bound to
    /// the ingress by `bind`.
    async fn run_task(
        ingress: &str,
        default_route: &str,
        mirror: &str,
        bind: fn(&str) -> String,
    ) -> [Seen; 2] {
        let (v1, v1_log) = recording_upstream().await;
        let (v2, v2_log) = recording_upstream().await;
        let dir = TempDir::new("mirroring").unwrap();
        let mut files = vec![dir
            .write(
                "0-cluster.yaml",
                &format!("{ingress}---\n{}", cluster(v1, v2)),
            )
            .unwrap()];
        let c = client();
        let mut out = Vec::new();
        for (n, step) in [default_route, mirror].into_iter().enumerate() {
            files.push(
                dir.write(&format!("{}-step.yaml", n + 1), &bind(step))
                    .unwrap(),
            );
            let proxy = Proxy::start(ProxyOptions::loopback(ConfigSource::Paths(files.clone())))
                .expect("proxy starts");
            let at = addr(&proxy, 0);
            let mut answers = Vec::new();
            for _ in 0..5 {
                let resp = c
                    .get(format!("http://{at}/headers"))
                    .header("host", "httpbin:8000")
                    .send()
                    .await
                    .expect("request");
                answers.push(resp.status().as_u16());
            }
            // Shadows are fire and forget: wait (bounded) until v2 has what it will get.
            let expected_copies = if step == mirror { 5 } else { 0 };
            let copies = || v2_log.lock().unwrap().requests.len();
            for _ in 0..100 {
                if copies() >= expected_copies {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let hosts = |log: &Recording| {
                let mut log = log.lock().unwrap();
                let hosts = log.requests.iter().map(|r| host_lines(r)).collect();
                log.requests.clear();
                hosts
            };
            out.push(Seen {
                answers,
                v1_hosts: hosts(&v1_log),
                v2_hosts: hosts(&v2_log),
            });
        }
        out.try_into().expect("two steps")
    }

    /// tasks/traffic-management/mirroring: first all traffic goes to v1 and v2's log stays
    /// empty; with the mirror rule v1 still answers every request and v2's log shows a copy of
    /// each, its Host with Envoy's `-shadow` suffix.
    #[tokio::test]
    async fn mirroring_in_both_forms() {
        let istio = run_task(
            &gateway(&[(0, "HTTP")]),
            &task("mirroring-default-route-istio-apis.yaml"),
            &task("mirroring-mirror-istio-apis.yaml"),
            at_ingress_vs,
        )
        .await;
        let gateway_api = run_task(
            GATEWAY_API_INGRESS,
            &task("mirroring-default-route-gateway-api.yaml"),
            &task("mirroring-mirror-gateway-api.yaml"),
            at_ingress_route,
        )
        .await;
        let [default_route, mirror] = same("mirroring", istio, gateway_api);
        let direct = vec![vec!["httpbin:8000".to_string()]; 5];
        assert_eq!(
            default_route,
            Seen {
                answers: vec![200; 5],
                v1_hosts: direct.clone(),
                v2_hosts: Vec::new(),
            }
        );
        assert_eq!(
            mirror,
            Seen {
                answers: vec![200; 5],
                v1_hosts: direct,
                v2_hosts: vec![vec!["httpbin-shadow:8000".to_string()]; 5],
            }
        );
    }
}

/// `curl https://HOST:PORT{path}` through `at` as the tasks run it (`--resolve`, `--cacert`,
/// a client certificate for mutual TLS): "HTTP/VERSION CODE", or "failed" when curl fails
/// (handshake refused, certificate not trusted, connection closed).
async fn curl(at: SocketAddr, host: &str, path: &str, ca: &Path, client: Option<&Path>) -> String {
    let mut args: Vec<String> = vec![
        "-sS".into(),
        "--max-time".into(),
        "5".into(),
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "HTTP/%{http_version} %{http_code}".into(),
        "-H".into(),
        format!("Host:{host}"),
        "--resolve".into(),
        format!("{host}:{}:{}", at.port(), at.ip()),
        "--cacert".into(),
        ca.display().to_string(),
    ];
    if let Some(dir) = client {
        args.extend([
            "--cert".into(),
            dir.join("client.crt").display().to_string(),
            "--key".into(),
            dir.join("client.key").display().to_string(),
        ]);
    }
    args.push(format!("https://{host}:{}{path}", at.port()));
    let (ok, out) = run("curl", args).await;
    match ok {
        true => out,
        false => "failed".into(),
    }
}

mod secure_ingress {
    use super::*;

    /// Write `name/tls.crt` and `name/tls.key` (a certificate of `host` signed by `ca`), each
    /// renamed into place as a Secret volume update does.
    fn credential(creds: &TempDir, ca: &Pki, name: &str, host: &str) {
        let (cert, key) = ca.issue_pem(&leaf(host));
        for (file, text) in [("tls.key", key), ("tls.crt", cert)] {
            let tmp = creds.write(&format!("{name}/.{file}.new"), &text).unwrap();
            std::fs::rename(&tmp, creds.path().join(name).join(file)).unwrap();
        }
    }

    /// Two proxies reading the same credentials folder, watching it for changes.
    fn start_pair(istio: &str, gateway_api: &str, creds: &Path) -> [RunningProxy; 2] {
        [istio, gateway_api].map(|yaml| {
            let mut opts = ProxyOptions::loopback(inline(yaml));
            opts.credentials_dir = Some(creds.to_path_buf());
            opts.watch_config = true;
            Proxy::start(opts).expect("proxy starts")
        })
    }

    /// Both proxies' answers to one request.
    async fn both(
        proxies: &[RunningProxy; 2],
        host: &str,
        path: &str,
        ca: &Path,
        client: Option<&Path>,
    ) -> String {
        let mut answers = Vec::new();
        for p in proxies {
            answers.push(curl(addr(p, 0), host, path, ca, client).await);
        }
        let [istio, gateway_api]: [String; 2] = answers.try_into().expect("two");
        same(&format!("{host}{path}"), istio, gateway_api)
    }

    /// The Istio Gateway's port 443 and the Gateway API listener's made 0.
    fn on_a_free_port(yaml: &str) -> String {
        yaml.replace("number: 443\n", "number: 0\n")
            .replace("port: 443\n", "port: 0\n")
    }

    /// Both forms of secure-ingress step `step` (`secure-ingress-{step}-*.yaml`, on a free
    /// port), next to the httpbin route the single-host step applied before it, and `be`.
    fn after_single_host(step: &str, be: &str) -> [String; 2] {
        [
            ("istio-apis", "VirtualService"),
            ("gateway-api", "HTTPRoute"),
        ]
        .map(|(form, route)| {
            format!(
                "{}\n---\n{}{be}",
                on_a_free_port(&task(&format!("secure-ingress-{step}-{form}.yaml"))),
                documents(
                    &task(&format!("secure-ingress-single-host-{form}.yaml")),
                    route
                ),
            )
        })
    }

    async fn backends() -> String {
        // samples/httpbin (port 8000) and samples/helloworld (port 5000), as a dump has them.
        let httpbin = echo_http("httpbin").await;
        let helloworld = echo_http("helloworld").await;
        format!(
            "{}{}",
            service("default", "httpbin", 8000, httpbin.addr),
            service("default", "helloworld", 5000, helloworld.addr)
        )
    }

    /// ingress/secure-ingress, "a single host": httpbin.example.com over HTTPS answers 418 to
    /// /status/418; after the Secret is replaced by one of a second CA, the new chain is
    /// trusted and the old one fails, in both forms.
    #[tokio::test]
    async fn a_single_host_and_its_certificate_rotated() {
        let (certs1, certs2) = (Pki::new("example-certs1"), Pki::new("example-certs2"));
        let creds = TempDir::new("credentials").unwrap();
        credential(&creds, &certs1, "httpbin-credential", "httpbin.example.com");
        let be = backends().await;
        let proxies = start_pair(
            &format!(
                "{}\n---\n{be}",
                on_a_free_port(&task("secure-ingress-single-host-istio-apis.yaml"))
            ),
            &format!(
                "{}\n---\n{be}",
                on_a_free_port(&task("secure-ingress-single-host-gateway-api.yaml"))
            ),
            creds.path(),
        );
        let host = "httpbin.example.com";
        assert_eq!(
            both(&proxies, host, "/status/418", &certs1.ca_path, None).await,
            "HTTP/2 418"
        );
        assert_eq!(
            both(&proxies, host, "/headers", &certs1.ca_path, None).await,
            "HTTP/2 404"
        );

        credential(&creds, &certs2, "httpbin-credential", "httpbin.example.com");
        // The proxies pick up the new files on their own; poll (bounded) until both do.
        for _ in 0..100 {
            let mut rotated = true;
            for p in &proxies {
                rotated &= curl(addr(p, 0), host, "/status/418", &certs2.ca_path, None).await
                    == "HTTP/2 418";
            }
            if rotated {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            both(&proxies, host, "/status/418", &certs2.ca_path, None).await,
            "HTTP/2 418"
        );
        assert_eq!(
            both(&proxies, host, "/status/418", &certs1.ca_path, None).await,
            "failed"
        );
    }

    /// ingress/secure-ingress, "multiple hosts": one port, a certificate per host chosen by
    /// SNI; helloworld.example.com/hello answers 200 and httpbin.example.com still 418.
    #[tokio::test]
    async fn two_hosts_on_one_port() {
        let certs1 = Pki::new("example-certs1");
        let creds = TempDir::new("credentials").unwrap();
        credential(&creds, &certs1, "httpbin-credential", "httpbin.example.com");
        credential(
            &creds,
            &certs1,
            "helloworld-credential",
            "helloworld.example.com",
        );
        // The step applies the two-host Gateway and the helloworld route.
        let [istio, gateway_api] = after_single_host("multiple-hosts", &backends().await);
        let proxies = start_pair(&istio, &gateway_api, creds.path());
        let ca = &certs1.ca_path;
        let cases = [
            ("helloworld.example.com", "/hello", "HTTP/2 200"),
            ("httpbin.example.com", "/status/418", "HTTP/2 418"),
            // Exact /hello only; and each host's routes stay on its own listener.
            ("helloworld.example.com", "/hello/x", "HTTP/2 404"),
            ("helloworld.example.com", "/status/418", "HTTP/2 404"),
        ];
        for (host, path, want) in cases {
            assert_eq!(
                both(&proxies, host, path, ca, None).await,
                want,
                "{host}{path}"
            );
        }
    }

    /// ingress/secure-ingress, "mutual TLS": the Gateway API form's
    /// `gateway.istio.io/tls-terminate-mode: MUTUAL` option does what the Istio form's
    /// `mode: MUTUAL` does: no client certificate, no answer; with one, 418.
    #[tokio::test]
    async fn mutual_tls() {
        let certs1 = Pki::new("example-certs1");
        let creds = TempDir::new("credentials").unwrap();
        credential(&creds, &certs1, "httpbin-credential", "httpbin.example.com");
        std::fs::copy(
            &certs1.ca_path,
            creds.path().join("httpbin-credential/ca.crt"),
        )
        .unwrap();
        let client = TempDir::new("client").unwrap();
        let (cert, key) = certs1.issue_pem(&leaf("client.example.com"));
        client.write("client.crt", &cert).unwrap();
        client.write("client.key", &key).unwrap();
        let [istio, gateway_api] = after_single_host("mutual", &backends().await);
        let proxies = start_pair(&istio, &gateway_api, creds.path());
        let (host, ca) = ("httpbin.example.com", &certs1.ca_path);
        assert_eq!(
            both(&proxies, host, "/status/418", ca, None).await,
            "failed"
        );
        assert_eq!(
            both(&proxies, host, "/status/418", ca, Some(client.path())).await,
            "HTTP/2 418"
        );
    }
}

/// ingress/ingress-sni-passthrough: the task's NGINX server (its nginx.conf's server block,
/// listening on a free port with a certificate of `nginx.example.com` from the test's CA)
/// behind both forms: curl verifies nginx's own certificate through the gateway and gets its
/// welcome page; another SNI name gets nothing.
#[tokio::test]
async fn sni_passthrough_in_both_forms() {
    let ca = Pki::new("example-com");
    let (cert, key) = ca.issue("nginx.example.com", &leaf("nginx.example.com"));
    let conf = task("sni-passthrough-nginx.conf");
    let server = &conf
        [conf.find("  server {").expect("a server block")..conf.rfind("  }").expect("its end") + 3];
    let server = server
        .replace("listen 443 ssl;", "listen {listen} ssl;")
        .replace(
            "/etc/nginx-server-certs/tls.crt",
            &cert.display().to_string(),
        )
        .replace(
            "/etc/nginx-server-certs/tls.key",
            &key.display().to_string(),
        );
    let nginx = match warden_testkit::Nginx::start(&server) {
        Ok(n) => n,
        Err(e) => panic!("the task's nginx: {e}"),
    };
    let cluster = format!(
        "{}{}",
        task("sni-passthrough-nginx-service.yaml"),
        endpoint_slice(
            "default",
            "my-nginx",
            "my-nginx-abcde",
            None,
            nginx.addr(),
            None
        )
    );
    // Port 443 made a free one; in the Istio form the VirtualService's `port: 443` match names
    // the Gateway's port, so it follows (a match on port 0 is refused, as Istio refuses it).
    let (istio_port, gateway_api_port) = (
        warden_testkit::free_port().unwrap(),
        warden_testkit::free_port().unwrap(),
    );
    let istio_yaml = task("sni-passthrough-istio-apis.yaml")
        .replace(
            "      number: 443\n      name: https\n",
            &format!("      number: {istio_port}\n      name: https\n"),
        )
        .replace("    - port: 443\n", &format!("    - port: {istio_port}\n"));
    let istio = start(&format!("{istio_yaml}\n---\n{cluster}"));
    let gateway_api = start(&format!(
        "{}\n---\n{cluster}",
        task("sni-passthrough-gateway-api.yaml").replace(
            "    port: 443\n    protocol",
            &format!("    port: {gateway_api_port}\n    protocol")
        )
    ));
    let mut pages = Vec::new();
    for (p, port) in [(&istio, istio_port), (&gateway_api, gateway_api_port)] {
        let at = addr(p, port);
        let (ok, out) = run(
            "curl",
            vec![
                "-sS".into(),
                "-v".into(),
                "--max-time".into(),
                "5".into(),
                "--resolve".into(),
                format!("nginx.example.com:{}:127.0.0.1", at.port()),
                "--cacert".into(),
                ca.ca_path.display().to_string(),
                format!("https://nginx.example.com:{}", at.port()),
            ],
        )
        .await;
        assert!(ok, "{out}");
        let facts: Vec<&str> = out
            .lines()
            .map(str::trim)
            .filter(|l| {
                l.contains("subject: CN=nginx.example.com")
                    || l.contains("SSL certificate verify ok")
                    || l.starts_with("< HTTP/1.1 200")
                    || l.contains("<title>Welcome to nginx!</title>")
            })
            .map(|l| l.trim_start_matches("* "))
            .collect();
        assert_eq!(facts.len(), 4, "{out}");
        pages.push(facts.join("\n"));
        let other = curl(at, "other.example.com", "/", &ca.ca_path, None).await;
        assert_eq!(other, "failed", "no route for another SNI name");
    }
    let [a, b]: [String; 2] = pages.try_into().expect("two");
    same("nginx.example.com", a, b);
}
