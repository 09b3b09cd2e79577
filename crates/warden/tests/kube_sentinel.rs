//! deploy/kubernetes with Redis Sentinel under `podman kube play`: redis-sentinel.yaml's three
//! pods (a Redis and a sentinel each), `warden ratelimit` with the environment ratelimit.yaml
//! gives for them (envoyproxy/ratelimit's `REDIS_TYPE=sentinel`), the gateway and the echo
//! backend. Seed 000's 301st request gets 429; then the master's pod is killed, the sentinels
//! promote a replica, and the limiter carries on with it: 301 requests again, the 301st 429.
//! Needs what container.rs needs, and busybox (the redis image's shell).

mod common;

use common::kube_play::{self, KubeCluster};
use common::podman;
use std::time::Duration;
use warden_testkit::wait_until;

/// ratelimit.yaml's REDIS_URL for redis-sentinel.yaml, as its comment gives it.
const SENTINEL_URL: &str = "mymaster,redis-sentinel-0.redis-sentinel:26379,redis-sentinel-1.redis-sentinel:26379,redis-sentinel-2.redis-sentinel:26379";

#[test]
fn seed_000_on_redis_sentinel_carries_on_after_the_master_is_killed() {
    if let Some(why) = podman::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    if !warden_testkit::netns::on_path("busybox") {
        eprintln!("skipped: busybox is not installed (apt-get install busybox-static)");
        return;
    }
    let rls_yaml =
        std::fs::read_to_string(podman::repo_root().join("deploy/kubernetes/ratelimit.yaml"))
            .expect("ratelimit.yaml");
    assert!(
        rls_yaml.contains(SENTINEL_URL),
        "ratelimit.yaml tells users the REDIS_URL this test uses"
    );

    let cluster = KubeCluster::new(&[
        ("redis-sentinel-0", &["redis-sentinel-0.redis-sentinel"]),
        ("redis-sentinel-1", &["redis-sentinel-1.redis-sentinel"]),
        ("redis-sentinel-2", &["redis-sentinel-2.redis-sentinel"]),
        ("ratelimit", &[]),
        ("echo", &[]),
        ("warden-ingressgateway", &[]),
    ]);
    let podman = cluster.podman();
    podman.build_image("warden");
    let (redis, _) = podman.build_image("redis");
    podman.ok(&["tag", &redis, "docker.io/library/redis:alpine"]);

    let docs = kube_play::manifests(&[
        "gateway.yaml",
        "gateway-config.yaml",
        "ratelimit.yaml",
        "ratelimit-config.yaml",
        "redis-sentinel.yaml",
        "echo.yaml",
    ]);
    let config_maps: Vec<&serde_json::Value> =
        docs.iter().filter(|d| d["kind"] == "ConfigMap").collect();

    // The StatefulSet's pods in order, as its controller starts them.
    let set = kube_play::find(&docs, "StatefulSet", "redis-sentinel");
    for pod in kube_play::stateful_pods(&set) {
        let name = pod["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_string();
        cluster.play(&name, &[], pod);
    }
    let sentinel_master = |pod: &str| -> String {
        let out = cluster
            .hub()
            .exec(
                "redis-cli",
                &[
                    "-h",
                    cluster.addr(pod),
                    "-p",
                    "26379",
                    "sentinel",
                    "get-master-addr-by-name",
                    "mymaster",
                ],
            )
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.lines().next().unwrap_or_default().to_string()
    };
    let replicas_known = |pod: &str| -> bool {
        cluster
            .hub()
            .exec(
                "redis-cli",
                &[
                    "-h",
                    cluster.addr(pod),
                    "-p",
                    "26379",
                    "sentinel",
                    "replicas",
                    "mymaster",
                ],
            )
            .map(|o| String::from_utf8_lossy(&o.stdout).matches("slave").count() >= 2)
            .unwrap_or(false)
    };
    // A failover needs the replicas and the other sentinels known to the sentinels that vote.
    let formed = wait_until(Duration::from_secs(60), || {
        ["redis-sentinel-1", "redis-sentinel-2"]
            .iter()
            .all(|p| sentinel_master(p) == "redis-sentinel-0.redis-sentinel" && replicas_known(p))
    });
    assert!(
        formed,
        "the sentinels never saw both replicas:\n{}",
        cluster.logs()
    );

    let mut rls = kube_play::find(&docs, "Deployment", "ratelimit");
    let container = &mut rls["spec"]["template"]["spec"]["containers"][0];
    kube_play::set_env(container, "REDIS_TYPE", "sentinel");
    kube_play::set_env(container, "REDIS_URL", SENTINEL_URL);
    let mut probes = cluster.play("ratelimit", &config_maps, rls);
    for name in ["echo", "warden-ingressgateway"] {
        probes.extend(cluster.play(
            name,
            &config_maps,
            kube_play::find(&docs, "Deployment", name),
        ));
    }

    let gateway = format!("http://{}:8080", cluster.addr("warden-ingressgateway"));
    // failure_mode_deny: a 200 means the rate limit service answered with Redis behind it.
    // Each probe asks for a path of its own (a limit key of its own).
    let mut probe = 0;
    let mut answers_through_redis = |phase: &str| {
        wait_until(Duration::from_secs(90), || {
            probe += 1;
            let url = format!("{gateway}/{phase}-probe-{probe}");
            cluster.curl(&[
                "-s",
                "-m",
                "2",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &url,
            ]) == "200"
        })
    };
    assert!(
        answers_through_redis("start"),
        "the gateway never answered 200:\n{}",
        cluster.logs()
    );
    // The rate limit service's readiness (/healthcheck) says Redis is reachable through the
    // sentinels; the gateway's is 15021.
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
    let codes = cluster.statuses_in_one_minute(&format!("{gateway}/login"), 301);
    assert_eq!(codes.len(), 301, "{codes:?}");
    assert_eq!(
        codes.iter().filter(|c| *c == "200").count(),
        300,
        "{codes:?}\n{}",
        cluster.logs()
    );
    assert_eq!(codes[300], "429", "the 301st request is refused");

    // The master's pod goes (its Redis and its sentinel); the two sentinels left are a quorum
    // and a majority, so they promote a replica.
    podman.ok(&["pod", "kill", "redis-sentinel-0"]);
    let promoted = wait_until(Duration::from_secs(90), || {
        let m = sentinel_master("redis-sentinel-1");
        m.starts_with("redis-sentinel-") && m != "redis-sentinel-0.redis-sentinel"
    });
    assert!(promoted, "no replica was promoted:\n{}", cluster.logs());
    let new_master = sentinel_master("redis-sentinel-1");
    eprintln!("promoted: {new_master}");

    assert!(
        answers_through_redis("failover"),
        "the limiter did not come back after the failover:\n{}",
        cluster.logs()
    );
    let codes = cluster.statuses_in_one_minute(&format!("{gateway}/after-failover"), 301);
    assert_eq!(codes.len(), 301, "{codes:?}");
    assert_eq!(
        codes.iter().filter(|c| *c == "200").count(),
        300,
        "{codes:?}\n{}",
        cluster.logs()
    );
    assert_eq!(
        codes[300], "429",
        "the 301st request is refused, counted on the new master"
    );
    // The counts are on the promoted Redis.
    let pod = new_master.trim_end_matches(".redis-sentinel");
    let keys = cluster
        .hub()
        .exec(
            "redis-cli",
            &[
                "-h",
                cluster.addr(pod),
                "--scan",
                "--pattern",
                "*after-failover*",
            ],
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(!keys.trim().is_empty(), "no count on {new_master}");
}
