//! warden's container image as users run it: built with buildah from the repository's
//! Containerfile (deploy/build-image.sh, with this test build's binary), run with podman.
//! Needs root, buildah, podman, runc and slirp4netns (test.sh installs them); without them each
//! test prints `skipped: <why>` and passes.

mod common;

use common::atomic_writer::AtomicWriterDir;
use common::kube_play::{self, KubeCluster};
use common::podman::{self, Podman};
use std::time::Duration;
use warden_testkit::{free_port, wait_until};

const GATEWAY: &str = r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  servers:
  - port: {number: 8080, protocol: HTTP, name: http}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - directResponse: {status: 200, body: {string: "hello from the image"}}
"#;

/// `curl -s URL`: status and body, or `None` when nothing answered.
fn curl(url: &str) -> Option<(u16, String)> {
    let out = std::process::Command::new("curl")
        .args(["-s", "-m", "3", "-w", "\n%{http_code}", url])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    let code: u16 = code.trim().parse().ok()?;
    (code != 0).then(|| (code, body.to_string()))
}

#[test]
fn the_image_runs_warden_the_gateway_and_the_ratelimit_service() {
    if let Some(why) = podman::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let podman = Podman::new();
    let (image, size) = podman.build_image("warden");
    eprintln!("{size}");
    let (redis, _) = podman.build_image("redis");

    // warden --version, as the image's default user.
    let version = podman.ok(&["run", "--rm", &image, "--version"]);
    assert_eq!(
        version.trim(),
        format!("warden {}", env!("CARGO_PKG_VERSION"))
    );
    let user = podman.ok(&["image", "inspect", "--format", "{{.Config.User}}", &image]);
    assert_eq!(user.trim(), "1337:1337", "the image runs as a non-root uid");
    let id = podman.ok(&[
        "run",
        "--rm",
        "--entrypoint",
        "/bin/ratelimit",
        &image,
        "--help",
    ]);
    assert!(
        id.contains("--config") || id.contains("Usage: ratelimit"),
        "/bin/ratelimit is `warden ratelimit`: {id}"
    );

    // The gateway from a folder laid out as a mounted ConfigMap, on a published port.
    let config = AtomicWriterDir::new(
        &podman.dir().join("gateway-config"),
        &[("gateway.yaml", GATEWAY)],
    );
    let port = free_port().expect("a free port");
    let mount = format!("{}:/etc/warden:ro", config.path().display());
    let publish = format!("127.0.0.1:{port}:8080");
    podman.ok(&[
        "run",
        "-d",
        "--name",
        "gateway",
        "--network",
        "slirp4netns:port_handler=slirp4netns",
        "-p",
        &publish,
        "-v",
        &mount,
        &image,
        "proxy",
        "-c",
        "/etc/warden",
        "--admin",
        "0.0.0.0:15000",
    ]);
    let url = format!("http://127.0.0.1:{port}/");
    let mut last = None;
    let answered = wait_until(Duration::from_secs(30), || {
        last = curl(&url);
        last.is_some()
    });
    assert!(answered, "no answer on {url}: {}", podman.logs("gateway"));
    assert_eq!(
        last,
        Some((200, "hello from the image".to_string())),
        "{}",
        podman.logs("gateway")
    );

    // `warden ratelimit` started as Istio's samples/ratelimit/rate-limit-service.yaml starts
    // envoyproxy/ratelimit: its command, environment, ConfigMap mount and Redis at `redis:6379`
    // (here a Redis container in the same pod, the name given to 127.0.0.1).
    let sample = std::fs::read_to_string(podman::repo_root().join(
        "crates/warden/tests/fixtures/istio-ratelimit/samples-ratelimit-rate-limit-service.yaml",
    ))
    .expect("the Istio sample");
    let rls = ratelimit_container(&sample);
    let config = AtomicWriterDir::new(
        &podman.dir().join("ratelimit-config"),
        &[(
            "config.yaml",
            "domain: echo-ratelimit\ndescriptors:\n  - key: PATH\n    value: \"/\"\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n  - key: PATH\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n",
        )],
    );
    let grpc_port = free_port().expect("a free port");
    let publish = format!("127.0.0.1:{grpc_port}:8081");
    podman.ok(&[
        "pod",
        "create",
        "--name",
        "ratelimit",
        "--network",
        "slirp4netns:port_handler=slirp4netns",
        "-p",
        &publish,
        "--add-host",
        "redis:127.0.0.1",
    ]);
    podman.ok(&["run", "-d", "--pod", "ratelimit", "--name", "redis", &redis]);
    let mut args: Vec<String> = ["run", "-d", "--pod", "ratelimit", "--name", "rls"]
        .map(String::from)
        .to_vec();
    for (name, value) in &rls.env {
        args.push("-e".into());
        args.push(format!("{name}={value}"));
    }
    args.push("-v".into());
    args.push(format!("{}:{}:ro", config.path().display(), rls.mount_path));
    args.push("--entrypoint".into());
    args.push(rls.command.clone());
    args.push(image.clone());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    podman.ok(&args);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], grpc_port));
    let mut first = None;
    let answered = wait_until(Duration::from_secs(30), || {
        first = rt.block_on(should_rate_limit(addr, "/"));
        first.is_some()
    });
    assert!(
        answered,
        "no ShouldRateLimit answer: {}",
        podman.logs("rls")
    );
    use warden_ratelimit::RateLimitResponse;
    let ok = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code::Ok as i32;
    let over =
        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code::OverLimit as i32;
    assert_eq!(first.map(|r: RateLimitResponse| r.overall_code), Some(ok));
    let second = rt.block_on(should_rate_limit(addr, "/"));
    assert_eq!(
        second.map(|r| r.overall_code),
        Some(over),
        "the second call in the minute is over the limit of 1 (counted in Redis): {}",
        podman.logs("rls")
    );
    let other = rt.block_on(should_rate_limit(addr, "/other"));
    assert_eq!(other.map(|r| r.overall_code), Some(ok));
    let logs = podman.logs("rls");
    assert!(
        logs.contains("redis") || logs.contains("Redis"),
        "the service said it uses Redis: {logs}"
    );
}

/// The ratelimit container of Istio's sample: its command, environment and config mount.
struct RlsContainer {
    command: String,
    env: Vec<(String, String)>,
    mount_path: String,
}

fn ratelimit_container(sample: &str) -> RlsContainer {
    let docs = warden_config::yaml_source::parse_documents(sample).expect("the sample parses");
    let container = docs
        .iter()
        .filter(|d| d.value["kind"] == "Deployment" && d.value["metadata"]["name"] == "ratelimit")
        .map(|d| d.value["spec"]["template"]["spec"]["containers"][0].clone())
        .next()
        .expect("the ratelimit Deployment");
    RlsContainer {
        command: container["command"][0]
            .as_str()
            .expect("a command")
            .to_string(),
        env: container["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or_default().to_string(),
                    e["value"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
        mount_path: container["volumeMounts"][0]["mountPath"]
            .as_str()
            .expect("a mount")
            .to_string(),
    }
}

/// One ShouldRateLimit call for domain `echo-ratelimit` with the descriptor PATH=`path`.
async fn should_rate_limit(
    addr: std::net::SocketAddr,
    path: &str,
) -> Option<warden_ratelimit::RateLimitResponse> {
    use warden_ratelimit::grpc_client;
    use warden_ratelimit::limiter::{Entry, RateLimitDescriptor};
    let stream = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let (send, conn) = grpc_client::handshake(stream).await.ok()?;
    tokio::spawn(conn);
    let authority: http::uri::Authority = addr.to_string().parse().ok()?;
    let uri = grpc_client::method_uri(&authority, grpc_client::SHOULD_RATE_LIMIT);
    let request = warden_ratelimit::RateLimitRequest {
        domain: "echo-ratelimit".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "PATH".into(),
                value: path.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    tokio::time::timeout(
        Duration::from_secs(3),
        grpc_client::unary(send, &uri, &request),
    )
    .await
    .ok()?
    .ok()
}

/// Seed 000 on the manifests of deploy/kubernetes as they are committed, under `podman kube
/// play`: each Deployment a pod in a network namespace of its own, routed through a hub
/// namespace where the client runs (`common::kube_play`); the manifests' images are the ones
/// this test builds.
#[test]
fn the_manifests_serve_seed_000_under_podman_kube_play() {
    if let Some(why) = podman::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let pods = ["redis", "ratelimit", "echo", "warden-ingressgateway"];
    let cluster = KubeCluster::new(&pods.map(|p| (p, &[][..])));
    let podman = cluster.podman();
    let (image, _) = podman.build_image("warden");
    let (redis, _) = podman.build_image("redis");
    assert_eq!(image, "localhost/warden:0.1.0", "the manifests' image");
    // The manifests' Redis image, served from this storage: nothing is pulled.
    podman.ok(&["tag", &redis, "docker.io/library/redis:alpine"]);

    let docs = kube_play::manifests(&[
        "gateway.yaml",
        "gateway-config.yaml",
        "ratelimit.yaml",
        "ratelimit-config.yaml",
        "redis.yaml",
        "echo.yaml",
    ]);
    let config_maps: Vec<&serde_json::Value> =
        docs.iter().filter(|d| d["kind"] == "ConfigMap").collect();
    let mut probes = Vec::new();
    for name in pods {
        probes.extend(cluster.play(
            name,
            &config_maps,
            kube_play::find(&docs, "Deployment", name),
        ));
    }

    let gateway = format!("http://{}:8080", cluster.addr("warden-ingressgateway"));
    // Ready once a request goes through the gateway, the rate limit service and Redis to the
    // echo backend (another path: a limit key of its own).
    let ready = wait_until(Duration::from_secs(60), || {
        cluster.curl(&[
            "-s",
            "-m",
            "2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("{gateway}/ready"),
        ]) == "200"
    });
    assert!(ready, "the gateway never answered 200:\n{}", cluster.logs());
    // The manifests' httpGet probes answer as the kubelet wants once everything is up.
    assert!(
        probes.iter().any(|p| p.ends_with(":15021/healthz/ready")),
        "{probes:?}"
    );
    for url in &probes {
        let code = cluster.curl(&[
            "-s",
            "-m",
            "2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            url,
        ]);
        assert_eq!(code, "200", "probe {url}\n{}", cluster.logs());
    }

    // 301 requests of one client in one minute: 300 answered by the backend, the 301st 429.
    let codes = cluster.statuses_in_one_minute(&format!("{gateway}/login"), 301);
    assert_eq!(codes.len(), 301, "{codes:?}");
    let ok = codes.iter().filter(|c| *c == "200").count();
    assert_eq!(ok, 300, "{codes:?}\n{}", cluster.logs());
    assert_eq!(codes[300], "429", "the 301st request is refused");
}
