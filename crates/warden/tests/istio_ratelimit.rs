//! The rate-limit EnvoyFilters of the istio.io task "Enabling Rate Limits using Envoy" and of
//! istio/istio's `samples/ratelimit`, loaded unchanged (`tests/fixtures/istio-ratelimit/`,
//! see its NOTICE.md), plus a ServiceEntry for each service the docs reach in a cluster, run
//! on `warden proxy` + `warden ratelimit` + a real redis-server, with the documented outcome.
//!
//! The docs name Istio's ports (`*:8080` virtual hosts, the RLS on 8081), so each test runs in
//! a network namespace of its own (root; skipped with the reason where namespaces cannot be
//! made); everything in it is removed after, also on failure (the guards' drop).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use warden_testkit::{
    netns, spawn_listening, wait_until, KillOnDrop, NetNs, RedisServer, RunAs, TempDir,
};

const WARDEN: &str = env!("CARGO_BIN_EXE_warden");

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/istio-ratelimit")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What `kubectl apply` of these files leaves: one object per kind and name, the last one
/// applied winning (the docs' advanced case replaces the bookinfo VirtualService).
fn applied(files: &[&str]) -> String {
    let mut docs: Vec<(String, String)> = Vec::new();
    for f in files {
        for doc in fixture(f).split("\n---") {
            let field = |key: &str| {
                doc.lines()
                    .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
                    .unwrap_or_default()
            };
            if field("kind:").is_empty() {
                continue;
            }
            let id = format!("{}/{}", field("kind:"), field("  name:"));
            docs.retain(|(k, _)| *k != id);
            docs.push((id, doc.trim_start_matches('\n').to_string()));
        }
    }
    docs.into_iter()
        .map(|(_, d)| d)
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// What the tests add to the docs' YAML: the registry entries a cluster would have.
fn service_entry(name: &str, host: &str, port: u16, protocol: &str, address: &str) -> String {
    format!(
        r#"
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{host}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {port}, name: {protocol}-{port}, protocol: {protocol}}}]
  endpoints: [{{address: {address}}}]
"#
    )
}

/// The `config.yaml` of a ConfigMap fixture, as the Deployment mounts it.
fn configmap_data(yaml: &str) -> String {
    let mut out = String::new();
    let mut lines = yaml
        .lines()
        .skip_while(|l| !l.trim_end().ends_with("config.yaml: |"));
    lines.next();
    for l in lines {
        match l.strip_prefix("    ") {
            Some(rest) => out.push_str(rest),
            None if l.trim().is_empty() => {}
            None => break,
        }
        out.push('\n');
    }
    out
}

/// The sample Deployment's environment for `warden ratelimit`, REDIS_URL pointed at the
/// test's redis and RUNTIME_ROOT at `root`.
fn sample_env(redis: &str, root: &Path) -> Vec<(String, String)> {
    let yaml = fixture("samples-ratelimit-rate-limit-service.yaml");
    let mut env = Vec::new();
    let mut name = None;
    for l in yaml.lines().map(str::trim) {
        if let Some(n) = l.strip_prefix("- name: ") {
            name = Some(n.to_string());
        } else if let (Some(v), Some(n)) = (l.strip_prefix("value: "), name.take()) {
            let v = v.trim_matches('"').to_string();
            let v = match n.as_str() {
                "REDIS_URL" => redis.to_string(),
                "RUNTIME_ROOT" => root.display().to_string(),
                _ => v,
            };
            env.push((n, v));
        }
    }
    assert!(
        env.iter().any(|(n, _)| n == "RUNTIME_SUBDIRECTORY"),
        "{env:?}"
    );
    env
}

/// `curl -s URL -o /dev/null -w "%{http_code}"`, as the docs verify, from inside `ns`.
fn curl_code(ns: &NetNs, url: &str) -> u16 {
    let out = ns
        .command("curl")
        .args([
            "-s",
            "-m",
            "15",
            url,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

fn curl_body(ns: &NetNs, url: &str) -> String {
    let out = ns
        .command("curl")
        .args(["-s", "-m", "15", url])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for(ns: &NetNs, url: &str) {
    assert!(
        wait_until(Duration::from_secs(20), || curl_code(ns, url) == 200),
        "{url} did not answer 200 in time"
    );
}

/// A namespace, or the reason the test is skipped.
fn namespace(prefix: &str) -> Option<NetNs> {
    namespaces_can_run().then(|| NetNs::new(prefix).expect("netns"))
}

/// Whether namespaces can be made and curl runs in them; says why not when they cannot.
fn namespaces_can_run() -> bool {
    if let Some(why) = netns::unavailable() {
        eprintln!("skipped: {why}");
        return false;
    }
    if !netns::on_path("curl") {
        eprintln!("skipped: curl is not installed (apt-get install curl; test.sh does)");
        return false;
    }
    true
}

/// The docs' limits are per minute (the RLS's windows start on the minute): a test that counts
/// against them starts with at least 15 s of the window left, so its counts are not reset
/// halfway.
fn away_from_minute_edge() {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
        % 60.0;
    if secs >= 45.0 {
        std::thread::sleep(Duration::from_secs_f64(61.0 - secs));
    }
}

/// The gateway side of the docs: redis, `warden ratelimit` on 8081 with the sample's env and
/// the ConfigMaps' configs, productpage (`warden echo`) on 9080.
struct Cluster {
    ns: NetNs,
    dir: TempDir,
    _redis: RedisServer,
    ratelimit: Option<KillOnDrop>,
    _echo: KillOnDrop,
}

impl Cluster {
    fn start(configmaps: &[&str]) -> Option<Cluster> {
        let ns = namespace("rlgw")?;
        let dir = TempDir::new("istio-ratelimit").expect("tempdir");
        // The guard's own PING runs in the namespace too.
        let redis = ns
            .run_in(RedisServer::start)
            .expect("enter netns")
            .expect("redis-server");
        let root = dir.path().join("data");
        for (i, cm) in configmaps.iter().enumerate() {
            let config = configmap_data(&fixture(cm));
            let path = root.join(format!("ratelimit/config/config-{i}.yaml"));
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, config).expect("write config");
        }
        let mut rl = ns.command(WARDEN);
        rl.arg("ratelimit")
            .envs(sample_env(&redis.addr(), &root))
            // The gateway listens on 8080 in this namespace; the RLS's HTTP port moves.
            .env("PORT", "18080")
            .env("LOG_LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let ratelimit = KillOnDrop(rl.spawn().expect("warden ratelimit"));
        let mut echo = ns.command(WARDEN);
        echo.args(["echo", "--http", "127.0.0.1:9080"])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let echo = KillOnDrop(echo.spawn().expect("warden echo"));
        wait_for(&ns, "http://127.0.0.1:18080/healthcheck");
        wait_for(&ns, "http://127.0.0.1:9080/");
        away_from_minute_edge();
        Some(Cluster {
            ns,
            dir,
            _redis: redis,
            ratelimit: Some(ratelimit),
            _echo: echo,
        })
    }

    /// `config` written to its own directory, and `warden proxy` on it as the ingress gateway
    /// (`istio: ingressgateway`), its log in `proxy.log`.
    fn gateway(&self, name: &str, config: &str) -> (KillOnDrop, PathBuf, PathBuf) {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("config.yaml"), config).expect("write config");
        let log = self.dir.path().join(format!("{name}.log"));
        let mut c = self.ns.command(WARDEN);
        c.env("RUST_LOG", "warn")
            .args(["proxy", "-c"])
            .arg(&dir)
            .args([
                "--label",
                "istio=ingressgateway",
                "--admin",
                "127.0.0.1:15000",
            ])
            .args(["--concurrency", "1", "--no-watch"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        let proc = KillOnDrop(c.spawn().expect("warden proxy"));
        wait_for(&self.ns, "http://127.0.0.1:15000/ready");
        (proc, dir, log)
    }

    /// [`Self::gateway`] on the fixtures `files` applied, plus [`registry`]; `warden check` of
    /// the same config must pass, its output is returned with the proxy and its log.
    fn checked_gateway(&self, name: &str, files: &[&str]) -> (KillOnDrop, String, PathBuf) {
        let (proxy, dir, log) = self.gateway(name, &(applied(files) + &registry()));
        let (ok, out, err) = check(&dir);
        assert!(ok, "{err}");
        (proxy, out, log)
    }

    fn codes(&self, path: &str, n: usize) -> Vec<u16> {
        (0..n)
            .map(|_| curl_code(&self.ns, &format!("http://127.0.0.1:8080{path}")))
            .collect()
    }
}

/// The registry entries the docs' cluster has: the RLS and productpage, on loopback.
fn registry() -> String {
    service_entry(
        "ratelimit",
        "ratelimit.default.svc.cluster.local",
        8081,
        "GRPC",
        "127.0.0.1",
    ) + &service_entry(
        "productpage",
        "productpage.default.svc.cluster.local",
        9080,
        "HTTP",
        "127.0.0.1",
    )
}

fn check(dir: &Path) -> (bool, String, String) {
    let out = Command::new(WARDEN)
        .args(["check", "--label", "istio=ingressgateway", "-c"])
        .arg(dir)
        .output()
        .expect("warden check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn istio_io_global_rate_limit_task_as_documented() {
    let Some(mut cluster) = Cluster::start(&["istio-io-global-ratelimit-configmap.yaml"]) else {
        return;
    };

    // The task's first part: bookinfo's gateway, the global filter and the VIRTUAL_HOST
    // `:path` action. "200 429" for /productpage (1 per minute).
    let (proxy, out, _) = cluster.checked_gateway(
        "basic",
        &[
            "samples-bookinfo-gateway.yaml",
            "istio-io-filter-ratelimit.yaml",
            "istio-io-filter-ratelimit-svc.yaml",
        ],
    );
    assert!(
        out.contains(
            "rate limit service: outbound|8081||ratelimit.default.svc.cluster.local -> \
             127.0.0.1:8081 (ServiceEntry default/ratelimit)"
        ),
        "{out}"
    );
    assert_eq!(cluster.codes("/productpage", 2), [200, 429]);
    // Other paths have their own PATH descriptor (100 per minute).
    assert_eq!(cluster.codes("/static/x?v=1", 2), [200, 200]);
    drop(proxy);

    // The advanced case: the VirtualService with a route named `api`, and the HTTP_ROUTE patch
    // for `*:8080` / `api`. "200 200 429" for /api/v1/products/1..3 (PATH=api, 2 per minute).
    let (proxy, out, log) = cluster.checked_gateway(
        "advanced",
        &[
            "samples-bookinfo-gateway.yaml",
            "istio-io-filter-ratelimit.yaml",
            "istio-io-filter-ratelimit-svc.yaml",
            "istio-io-advanced-virtualservice.yaml",
            "istio-io-filter-ratelimit-svc-api.yaml",
        ],
    );
    assert!(
        out.contains(
            "EnvoyFilter/filter-ratelimit-svc-api spec.configPatches[0]: rate_limits -> vhost \
             *:8080 route default/bookinfo/api"
        ),
        "{out}"
    );
    let api: Vec<u16> = (1..=3)
        .map(|i| {
            curl_code(
                &cluster.ns,
                &format!("http://127.0.0.1:8080/api/v1/products/{i}"),
            )
        })
        .collect();
    assert_eq!(api, [200, 200, 429]);
    // The route limit is the api route's only: the first route keeps the virtual host's
    // PATH limits (/login: 100 per minute; /productpage is still over its 1 per minute).
    assert_eq!(cluster.codes("/login", 3), [200, 200, 200]);
    assert_eq!(cluster.codes("/productpage", 1), [429]);

    // A failing RLS: failure_mode_deny gives 500s, counted by reason, logged once at first
    // (with the address and the error), not per request.
    cluster.ratelimit.take();
    assert_eq!(cluster.codes("/logout", 5), [500; 5]);
    let stats = curl_body(&cluster.ns, "http://127.0.0.1:15000/stats/prometheus");
    let failures: u64 = stats
        .lines()
        .filter(|l| l.starts_with("warden_ratelimit_rls_failures_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(failures, 5, "{stats}");
    drop(proxy);
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("call failed"))
        .collect();
    assert_eq!(lines.len(), 1, "{logged}");
    assert!(lines[0].contains("127.0.0.1:8081"), "{logged}");
}

#[test]
fn rate_limit_cluster_patch_form_resolves_through_the_registry() {
    let Some(cluster) = Cluster::start(&["istio-io-zh-ratelimit-configmap.yaml"]) else {
        return;
    };
    // The earlier task's form: a CLUSTER patch ADDs `rate_limit_cluster` (STRICT_DNS on
    // ratelimit.default.svc.cluster.local:8081), the filter names it.
    let (_proxy, out, _) = cluster.checked_gateway(
        "cluster",
        &[
            "samples-bookinfo-gateway.yaml",
            "istio-io-zh-filter-ratelimit-cluster.yaml",
            "istio-io-filter-ratelimit-svc.yaml",
        ],
    );
    assert!(
        out.contains("rate limit service: rate_limit_cluster -> 127.0.0.1:8081 (cluster of EnvoyFilter/filter-ratelimit spec.configPatches[1], ServiceEntry default/ratelimit)"),
        "{out}"
    );
    assert_eq!(cluster.codes("/productpage", 2), [200, 429]);
}

/// `warden check` on patches warden cannot place: one that matches no route here is not applied
/// (as Istio ignores it) and warned about with file:line (WDN0011), once; one warden cannot
/// carry out is an error, once.
#[test]
fn unresolvable_patches_are_warned_or_refused_in_check() {
    let dir = TempDir::new("istio-ratelimit-check").expect("tempdir");
    let typo = applied(&[
        "samples-bookinfo-gateway.yaml",
        "istio-io-filter-ratelimit.yaml",
        "istio-io-advanced-virtualservice.yaml",
        "istio-io-filter-ratelimit-svc-api.yaml",
    ])
    .replace("name: \"*:8080\"", "name: \"*:80\"")
        + &registry();
    let path = dir.write("typo/config.yaml", &typo).expect("write");
    let (ok, out, err) = check(path.parent().expect("dir"));
    assert!(ok, "{out}{err}");
    let hits: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("matches nothing"))
        .collect();
    assert_eq!(hits.len(), 1, "{out}");
    assert!(hits[0].contains("config.yaml:"), "file:line: {out}");
    assert!(hits[0].contains("*:8080"), "names what exists: {out}");
    assert!(
        hits[0].contains("WDN0011") && hits[0].contains("not applied"),
        "{out}"
    );
    let strict = Command::new(WARDEN)
        .args(["check", "--strict", "--label", "istio=ingressgateway", "-c"])
        .arg(path.parent().expect("dir"))
        .output()
        .expect("warden check --strict");
    assert_eq!(
        strict.status.code(),
        Some(1),
        "--strict fails on the warning"
    );

    let bad_header = applied(&[
        "samples-bookinfo-gateway.yaml",
        "istio-io-filter-ratelimit.yaml",
        "istio-io-filter-ratelimit-svc.yaml",
    ])
    .replace("header_name: \":path\"", "header_name: \":pth\"")
        + &registry();
    let path = dir.write("header/config.yaml", &bad_header).expect("write");
    let (ok, _, err) = check(path.parent().expect("dir"));
    assert!(!ok);
    let hits: Vec<&str> = err.lines().filter(|l| l.contains(":pth")).collect();
    assert_eq!(hits.len(), 1, "once: {err}");
    assert!(hits[0].contains("config.yaml:"), "file:line: {err}");
}

const POD_IP: &str = "10.232.1.2";
const CLIENT_IP: &str = "10.232.1.1";

/// The productpage pod (its sidecar with `config`, an app on `ports`) and a client outside the
/// mesh on a veth; the client's requests to the pod IP are captured into the sidecar's inbound.
#[allow(clippy::type_complexity)]
fn pod(config: &str, ports: &[u16]) -> Option<(NetNs, NetNs, (Vec<KillOnDrop>, RunAs), TempDir)> {
    if !netns::on_path("iptables") {
        eprintln!("skipped: iptables is not installed (apt-get install iptables; test.sh does)");
        return None;
    }
    if !namespaces_can_run() {
        return None;
    }
    let (client, pod) = netns::pod_pair("rlcl", CLIENT_IP, "rlpod", POD_IP).expect("pods");
    let mut procs = Vec::new();
    for port in ports {
        let mut echo = pod.command(WARDEN);
        echo.args(["echo", "--http", &format!("0.0.0.0:{port}")]);
        procs.push(spawn_listening(&pod, echo, &[*port]));
    }
    let dir = TempDir::new("istio-ratelimit-pod").expect("tempdir");
    let path = dir.write("pod.yaml", config).expect("write");
    let out = pod
        .exec(WARDEN, &["capture", "--proxy-uid", "1337"])
        .expect("warden capture");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Kept with the processes: a staged binary (when the checkout is out of uid 1337's reach)
    // goes when the test ends.
    let proxy = RunAs::new(1337, 1337, WARDEN).expect("warden executable by uid 1337");
    let mut sidecar = pod.command_as(&proxy);
    sidecar
        .env("RUST_LOG", "warn")
        .args(["proxy", "--mode", "sidecar", "-c"])
        .arg(&path)
        .args([
            "--admin",
            "127.0.0.1:15000",
            "--concurrency",
            "1",
            "--no-watch",
        ])
        .args(["--pod-ip", POD_IP, "--label", "app=productpage"])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    procs.push(KillOnDrop(sidecar.spawn().expect("sidecar")));
    wait_for(&pod, "http://127.0.0.1:15000/ready");
    Some((client, pod, (procs, proxy), dir))
}

/// The productpage service as the registry has it: its pod IP on `ports`.
fn productpage(ports: &[u16]) -> String {
    let ports: Vec<String> = ports
        .iter()
        .map(|p| format!("{{number: {p}, name: http-{p}, protocol: HTTP}}"))
        .collect();
    format!(
        r#"
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: productpage, namespace: default}}
spec:
  hosts: [productpage.default.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{}]
  endpoints: [{{address: {POD_IP}}}]
"#,
        ports.join(", ")
    )
}

#[test]
fn istio_io_local_per_route_limit_in_the_sidecar() {
    // The docs' per-route local limit: 4 per minute on `inbound|http|9080`, "200 200 200 200
    // 429"; the filter-level config without a bucket limits nothing elsewhere (port 9081).
    let config =
        fixture("istio-io-filter-local-ratelimit-svc-per-route.yaml") + &productpage(&[9080, 9081]);
    let Some((client, _pod, _procs, _dir)) = pod(&config, &[9080, 9081]) else {
        return;
    };
    let url = format!("http://{POD_IP}:9080/productpage");
    let codes: Vec<u16> = (0..5).map(|_| curl_code(&client, &url)).collect();
    assert_eq!(codes, [200, 200, 200, 200, 429]);
    let other = format!("http://{POD_IP}:9081/productpage");
    let codes: Vec<u16> = (0..6).map(|_| curl_code(&client, &other)).collect();
    assert_eq!(codes, [200; 6]);
}

#[test]
fn istio_samples_local_rate_limit_service_in_the_sidecar() {
    // samples/ratelimit/local-rate-limit-service.yaml: on `inbound|http|8000`, /productpage
    // (any case) 10 per minute, everything else 100 per minute, x-ratelimit-* headers on.
    let config = fixture("samples-ratelimit-local-rate-limit-service.yaml") + &productpage(&[8000]);
    let Some((client, _pod, _procs, _dir)) = pod(&config, &[8000]) else {
        return;
    };
    let url = format!("http://{POD_IP}:8000/ProductPage");
    let codes: Vec<u16> = (0..11).map(|_| curl_code(&client, &url)).collect();
    assert_eq!(codes[..10], [200; 10], "{codes:?}");
    assert_eq!(codes[10], 429, "{codes:?}");
    let other = format!("http://{POD_IP}:8000/reviews");
    assert_eq!(curl_code(&client, &other), 200);
    let out = client
        .command("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", &url])
        .output()
        .expect("curl");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.contains("x-local-rate-limit: true"), "{head}");
    assert!(head.contains("x-ratelimit-limit"), "{head}");
}
