//! The service end to end: the seed's Kubernetes layout and env block, reload while serving
//! (including `..data` symlink swaps and bad configs), HTTP endpoints, and the extensions.

mod common;

use common::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use warden_ratelimit::config::Algorithm;
use warden_ratelimit::limiter::ResponseHeaderNames;
use warden_ratelimit::{ManualClock, Server, Settings};
use warden_testkit::{RedisServer, TempDir};

const T0: u64 = 1_700_000_040_000;

/// The seed's ConfigMap, as written.
const SEED_CONFIG: &str = "domain: ratelimit
descriptors:

#   可以按照路径进行匹配
#  - key: PATH
#    value: \"/productpage\"
#    rate_limit:
#      unit: minute
#      requests_per_unit: 1

  - key: remote_address
    descriptors:
      - key: PATH
        rate_limit:
          unit: minute
          requests_per_unit: 100
";

/// Lays out a ConfigMap volume like the kubelet: `<dir>/..<stamp>/<files>`, `..data` symlink,
/// and one symlink per file through `..data`. Re-running swaps `..data` atomically.
fn configmap(mount: &std::path::Path, stamp: &str, files: &[(&str, &str)]) {
    let real = mount.join(format!("..{stamp}"));
    std::fs::create_dir_all(&real).unwrap();
    for (name, text) in files {
        std::fs::write(real.join(name), text).unwrap();
    }
    let tmp = mount.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..{stamp}"), &tmp).unwrap();
    std::fs::rename(&tmp, mount.join("..data")).unwrap();
    for (name, _) in files {
        let link = mount.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &link).unwrap();
        }
    }
}

fn seed_env(root: &std::path::Path, redis: &RedisServer) -> HashMap<String, String> {
    [
        ("LOG_LEVEL", "debug".to_string()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", redis.addr()),
        ("USE_STATSD", "false".into()),
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_WATCH_ROOT", "false".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        // The seed binds "::"; tests stay on loopback with free ports.
        ("HOST", "::1".into()),
        ("GRPC_HOST", "::1".into()),
        ("DEBUG_HOST", "::1".into()),
        ("PORT", "0".into()),
        ("GRPC_PORT", "0".into()),
        ("DEBUG_PORT", "0".into()),
        ("RUNTIME_POLL_INTERVAL", "50ms".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[tokio::test]
async fn the_seed_deployment_serves_and_reloads_configmap_swaps() {
    let redis = RedisServer::start().unwrap();
    let root = TempDir::new("seed").unwrap();
    let mount = root.path().join("ratelimit/config");
    std::fs::create_dir_all(&mount).unwrap();
    configmap(&mount, "2024_01_01", &[("config.yaml", SEED_CONFIG)]);
    let settings = Settings::from_env_map(&seed_env(root.path(), &redis)).expect("seed env");
    let clock = ManualClock::new(T0 + 1_000);
    let server = Server::start_with_clock(settings, Arc::new(clock.clone()))
        .await
        .unwrap();
    assert_eq!(server.initial_config_error(), None);
    let mut client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(
        format!("http://{}", server.grpc_addr()),
    )
    .await
    .unwrap();
    // What Envoy sends for the seed's actions: remote_address + PATH (method+path from Lua).
    let r = req(
        "ratelimit",
        vec![desc(&[
            ("remote_address", "203.0.113.9"),
            ("PATH", "/login"),
        ])],
    );
    let mut ok = 0;
    for _ in 0..101 {
        if client
            .should_rate_limit(r.clone())
            .await
            .unwrap()
            .into_inner()
            .overall_code
            == OK
        {
            ok += 1;
        }
    }
    assert_eq!(ok, 100, "the 101st request of the minute is rejected");

    // kubelet swaps ..data to a new version with a lower limit: picked up while serving.
    let lower = SEED_CONFIG.replace("requests_per_unit: 100", "requests_per_unit: 2");
    configmap(&mount, "2024_01_02", &[("config.yaml", &lower)]);
    let rlconfig = format!("http://{}/rlconfig", server.debug_addr());
    eventually(
        "reload picks up the swap",
        Duration::from_secs(5),
        async || {
            reqwest::get(&rlconfig)
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
                .contains("requests_per_unit=2")
        },
    )
    .await;
    let fresh = req(
        "ratelimit",
        vec![desc(&[
            ("remote_address", "203.0.113.10"),
            ("PATH", "/login"),
        ])],
    );
    let mut ok = 0;
    for _ in 0..4 {
        if client
            .should_rate_limit(fresh.clone())
            .await
            .unwrap()
            .into_inner()
            .overall_code
            == OK
        {
            ok += 1;
        }
    }
    assert_eq!(ok, 2);

    // A broken version is rejected, counted, and the previous config keeps serving.
    configmap(
        &mount,
        "2024_01_03",
        &[(
            "config.yaml",
            "domain: ratelimit\ndescriptors:\n  - key: x\n    rate_limit: {unit: fortnight}\n",
        )],
    );
    let metrics = format!("http://{}/metrics", server.debug_addr());
    eventually(
        "config_load_error counted",
        Duration::from_secs(5),
        async || {
            reqwest::get(&metrics)
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
                .contains("ratelimit_service_config_load_error 1\n")
        },
    )
    .await;
    let text = reqwest::get(&rlconfig).await.unwrap().text().await.unwrap();
    assert_eq!(
        text,
        "ratelimit.remote_address.PATH: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn reload_while_serving_under_load() {
    let h = start(
        &[("a.yaml", "domain: live\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n")],
        None,
    )
    .await;
    let r = req("live", vec![desc(&[("k", "v")])]);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let mut client = h.client.clone();
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let mut errors = 0;
            for _ in 0..300 {
                if client.should_rate_limit(r.clone()).await.is_err() {
                    errors += 1;
                }
            }
            errors
        }));
    }
    for i in 0..5 {
        h.dir
            .write(
                "a.yaml",
                &format!("domain: live\ndescriptors:\n  - key: k\n    rate_limit: {{unit: hour, requests_per_unit: {}}}\n", 2_000_000 + i),
            )
            .unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 0, "no request fails during reloads");
    }
    let text = reqwest::get(h.debug("/rlconfig"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("requests_per_unit=2000004"), "{text}");
}

#[tokio::test]
async fn http_json_healthcheck_and_debug_endpoints() {
    let h = start(
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")],
        None,
    )
    .await;
    let http = reqwest::Client::new();
    let body = r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let first = http.post(h.http("/json")).body(body).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let json: serde_json::Value = first.json().await.unwrap();
    assert_eq!(json["overallCode"], "OK");
    assert_eq!(json["statuses"][0]["currentLimit"]["unit"], "MINUTE");
    assert_eq!(json["statuses"][0]["currentLimit"]["requestsPerUnit"], 1);
    assert!(
        json["statuses"][0].get("limitRemaining").is_none(),
        "zero omitted: {json}"
    );
    assert!(json["statuses"][0]["durationUntilReset"]
        .as_str()
        .unwrap()
        .ends_with('s'));
    let second = http.get(h.http("/json")).body(body).send().await.unwrap();
    assert_eq!(second.status(), 429);
    let bad = http
        .post(h.http("/json"))
        .body("{nope")
        .send()
        .await
        .unwrap();
    // Every failure is Go's `http.Error(w, http.StatusText(400), 400)`, as the reference's
    // handler writes it: the reason is only logged.
    let go_error = |r: &reqwest::Response| {
        assert_eq!(r.status(), 400);
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    };
    go_error(&bad);
    assert_eq!(bad.text().await.unwrap(), "Bad Request\n");
    let service_error = http
        .post(h.http("/json"))
        .body(r#"{"domain":"","descriptors":[]}"#)
        .send()
        .await
        .unwrap();
    go_error(&service_error);
    assert_eq!(service_error.text().await.unwrap(), "Bad Request\n");
    let too_big = http
        .post(h.http("/json"))
        .body(vec![b' '; (1 << 20) + 1])
        .send()
        .await
        .unwrap();
    go_error(&too_big);
    assert_eq!(too_big.text().await.unwrap(), "Bad Request\n");

    let health = http.get(h.http("/healthcheck")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "OK");
    let index = http
        .get(h.debug("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(index.contains("/rlconfig"));
    let metrics = http
        .get(h.debug("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"ratelimit_service_rate_limit_total_hits{domain="d",key1="k"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"ratelimit_service_rate_limit_over_limit{domain="d",key1="k"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("ratelimit_service_config_load_success 1\n"),
        "{metrics}"
    );
    assert_eq!(
        http.get(h.http("/nope")).send().await.unwrap().status(),
        404
    );
    h.server.shutdown().await;
}

#[tokio::test]
async fn an_invalid_first_config_answers_no_configuration_loaded() {
    let mut h = start(&[("c.yaml", "domain: d\nbogus: 1\n")], None).await;
    assert_eq!(
        h.server.initial_config_error(),
        Some(
            format!(
                "{}: config error, unknown key 'bogus'",
                h.dir.path().join("c.yaml").display()
            )
            .as_str()
        )
    );
    let e = h
        .client
        .should_rate_limit(req("d", vec![desc(&[("k", "v")])]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unknown);
    assert_eq!(e.message(), "no rate limit configuration loaded");
    // Fixing the file recovers without a restart.
    h.dir.write("c.yaml", "domain: d\n").unwrap();
    eventually("fixed config loads", Duration::from_secs(5), async || {
        h.client
            .should_rate_limit(req("d", vec![desc(&[("k", "v")])]))
            .await
            .is_ok()
    })
    .await;
}

#[tokio::test]
async fn response_headers_and_global_shadow_mode() {
    let clock = ManualClock::new(T0 + 20_000);
    let mut h = start_with(
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")],
        None,
        |s| {
            s.limiter.response_headers = Some(ResponseHeaderNames::default());
            s.limiter.shadow_mode = true;
        },
        Some(Arc::new(clock)),
    )
    .await;
    let r = req("d", vec![desc(&[("a", "1")]), desc(&[("b", "1")])]);
    let first = h
        .client
        .should_rate_limit(r.clone())
        .await
        .unwrap()
        .into_inner();
    let headers: Vec<(String, String)> = first
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        headers,
        vec![
            ("RateLimit-Limit".into(), "2".into()),
            ("RateLimit-Remaining".into(), "1".into()),
            ("RateLimit-Reset".into(), "40".into()),
        ],
        "the descriptor with the lowest remaining"
    );
    h.client.should_rate_limit(r.clone()).await.unwrap();
    let third = h.client.should_rate_limit(r).await.unwrap().into_inner();
    assert_eq!(third.statuses[1].code, OVER, "statuses keep OVER_LIMIT");
    assert_eq!(
        third.overall_code, OK,
        "SHADOW_MODE forces the overall code"
    );
}

/// Extension: the sliding window has no 2x burst at a window edge.
#[tokio::test]
async fn sliding_window_blocks_the_edge_burst() {
    for (algorithm, redis) in [
        (Algorithm::FixedWindow, None),
        (Algorithm::SlidingWindow, None),
        (
            Algorithm::SlidingWindow,
            Some(RedisServer::start().unwrap()),
        ),
    ] {
        let clock = ManualClock::new(T0 + 59_000); // one second before the minute ends
        let mut h = start_with(
            &[("c.yaml", "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")],
            redis.as_ref(),
            |s| s.limiter.default_algorithm = algorithm,
            Some(Arc::new(clock.clone())),
        )
        .await;
        let r = req("d", vec![desc(&[("ip", "1.2.3.4")])]);
        let mut ok = 0;
        for _ in 0..10 {
            ok += usize::from(
                h.client
                    .should_rate_limit(r.clone())
                    .await
                    .unwrap()
                    .into_inner()
                    .overall_code
                    == OK,
            );
        }
        assert_eq!(ok, 10);
        clock.set_millis(T0 + 61_000); // two seconds later, in the next fixed window
        let mut after_edge = 0;
        for _ in 0..10 {
            after_edge += usize::from(
                h.client
                    .should_rate_limit(r.clone())
                    .await
                    .unwrap()
                    .into_inner()
                    .overall_code
                    == OK,
            );
        }
        match algorithm {
            Algorithm::FixedWindow => assert_eq!(after_edge, 10, "fixed: 20 in two seconds"),
            // prev window weighs 59/60 of 10 (9.83 -> 9): one more fits.
            Algorithm::SlidingWindow => assert_eq!(after_edge, 1, "sliding: no edge burst"),
        }
        // Half a window later the previous window has half the weight.
        clock.set_millis(T0 + 90_000);
        let resp = h
            .client
            .should_rate_limit(r.clone())
            .await
            .unwrap()
            .into_inner();
        if algorithm == Algorithm::SlidingWindow {
            // current 11 (incl. rejected) + 10 * 0.5 = 16 > 10
            assert_eq!(resp.overall_code, OVER);
        }
        h.server.shutdown().await;
    }
}

/// Extension (per descriptor): `algorithm: sliding_window` in the rate_limit block.
#[tokio::test]
async fn sliding_window_per_descriptor() {
    let clock = ManualClock::new(T0 + 59_000);
    let mut h = start_with(
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: s\n    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_window}\n  - key: f\n    rate_limit: {unit: minute, requests_per_unit: 4}\n")],
        None,
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    let r = req("d", vec![desc(&[("s", "x")]), desc(&[("f", "x")])]);
    for _ in 0..4 {
        h.client.should_rate_limit(r.clone()).await.unwrap();
    }
    clock.set_millis(T0 + 60_500);
    // Sliding estimate: 1 + floor(4 * 59.5/60) = 4 (fits), then 5 (over).
    let first = h
        .client
        .should_rate_limit(r.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.statuses[0].code, OK);
    let resp = h.client.should_rate_limit(r).await.unwrap().into_inner();
    assert_eq!(
        resp.statuses[0].code, OVER,
        "sliding remembers the previous window"
    );
    assert_eq!(resp.statuses[1].code, OK, "fixed starts over");
}

/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a rejected request does not use up the quota of
/// its other descriptors.
#[tokio::test]
async fn rejected_requests_do_not_charge_other_descriptors() {
    for (stop, redis) in [
        (false, None),
        (true, None),
        (true, Some(RedisServer::start().unwrap())),
    ] {
        let clock = ManualClock::new(T0 + 1_000);
        let mut h = start_with(
            &[("c.yaml", "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")],
            redis.as_ref(),
            |s| s.limiter.stop_increment_when_overlimit = stop,
            Some(Arc::new(clock)),
        )
        .await;
        let r = req("d", vec![desc(&[("user", "u")]), desc(&[("tenant", "t")])]);
        for _ in 0..4 {
            h.client.should_rate_limit(r.clone()).await.unwrap();
        }
        let other_user = req("d", vec![desc(&[("user", "w")]), desc(&[("tenant", "t")])]);
        let resp = h
            .client
            .should_rate_limit(other_user)
            .await
            .unwrap()
            .into_inner();
        let remaining = resp.statuses[1].limit_remaining;
        if stop {
            assert_eq!(
                remaining, 3,
                "only the accepted request and this one were charged"
            );
        } else {
            assert_eq!(
                remaining, 0,
                "reference default: rejected requests still charge"
            );
        }
    }
}

/// README "detailed_metric" / "value_to_metric" examples: stats keys carry request values.
#[tokio::test]
async fn detailed_metric_and_value_to_metric_stats_keys() {
    let mut h = start(
        &[(
            "c.yaml",
            "domain: m
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value: \"/api/*\"
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
",
        )],
        None,
    )
    .await;
    let r = req(
        "m",
        vec![
            desc(&[("plain", "a")]),
            desc(&[("detailed", "b")]),
            desc(&[("route", "/api/users")]),
        ],
    );
    h.client.should_rate_limit(r).await.unwrap();
    let metrics = reqwest::get(h.debug("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"ratelimit_service_rate_limit_total_hits{domain="m",key1="plain"} 1"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="m",key1="detailed_b"} 1"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="m",key1="route_/api/users"} 1"#,
    ] {
        assert!(metrics.contains(series), "missing {series} in\n{metrics}");
    }
}

/// A plain h2 client connection to the gRPC listener (its driver spawned), ready to send.
async fn raw_h2(h: &Harness) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(h.server.grpc_addr())
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    client.ready().await.unwrap()
}

/// The head of a gRPC call to `path`, as gRPC clients send it.
fn grpc_post(path: &str) -> http::Request<()> {
    http::Request::post(path)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// grpc-go (the reference) sets no limit on concurrent streams per connection, and an Envoy
/// worker sends all its decisions over one connection: the server must not advertise a small
/// SETTINGS_MAX_CONCURRENT_STREAMS (hyper's own server builder defaults to 200).
#[tokio::test]
async fn one_connection_may_carry_more_than_200_concurrent_calls() {
    let h = start(
        &[("config.yaml", "domain: d\ndescriptors:\n  - key: k\n")],
        None,
    )
    .await;
    let mut client = raw_h2(&h).await;
    // The server's SETTINGS arrive with its first frames; an answer means they did.
    let (response, _) = client
        .send_request(grpc_post("/grpc.health.v1.Health/Check"), true)
        .unwrap();
    let _ = response.await;
    assert!(
        client.current_max_send_streams() > 200,
        "server allows {} concurrent streams",
        client.current_max_send_streams()
    );
    h.server.shutdown().await;
}

/// An OK answer is framed as grpc-go frames it: `content-type` and no `date` or
/// `content-length` (headers every client would only decode), the message, then
/// `grpc-status: 0` in the trailers.
#[tokio::test]
async fn an_ok_answer_carries_only_the_headers_grpc_go_sends() {
    let h = start(
        &[(
            "config.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
        )],
        None,
    )
    .await;
    let mut client = raw_h2(&h).await;
    let (response, mut stream) = client
        .send_request(
            grpc_post(warden_ratelimit::grpc_client::SHOULD_RATE_LIMIT),
            false,
        )
        .unwrap();
    let message = warden_ratelimit::grpc_frame::encode(&req("d", vec![desc(&[("k", "v")])]));
    stream.send_data(message, true).unwrap();
    let (head, mut body) = response.await.unwrap().into_parts();
    assert_eq!(head.status, 200);
    let names: Vec<_> = head.headers.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["content-type"]);
    assert_eq!(head.headers["content-type"], "application/grpc");
    let mut answer = warden_ratelimit::grpc_frame::MessageBuf::default();
    while let Some(chunk) = body.data().await {
        answer.push(chunk.unwrap()).unwrap();
    }
    let answer: warden_ratelimit::RateLimitResponse = answer.decode().unwrap();
    assert_eq!(answer.overall_code, 1, "OK");
    assert_eq!(answer.statuses[0].limit_remaining, 4);
    let trailers = body.trailers().await.unwrap().unwrap();
    assert_eq!(trailers["grpc-status"], "0");
    h.server.shutdown().await;
}

/// gRPC calls are served on several threads (one runtime each): connections spread over them
/// share one limiter, and shutdown stops them all: the port closes and `shutdown` returns only
/// after every serving thread has ended.
#[tokio::test]
async fn serving_threads_share_limits_and_stop_on_shutdown() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n";
    let clock = Arc::new(ManualClock::new(T0));
    let h = start_with(
        &[("config.yaml", yaml)],
        None,
        |s| s.grpc_threads = 3,
        Some(clock),
    )
    .await;
    let addr = h.server.grpc_addr();
    let r = req("d", vec![desc(&[("k", "v")])]);
    let mut ok = 0;
    for _ in 0..6 {
        // A new connection each time: handed to the thread with the fewest open ones.
        let mut client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(
            format!("http://{addr}"),
        )
        .await
        .unwrap();
        for _ in 0..3 {
            let resp = client.should_rate_limit(r.clone()).await.unwrap();
            ok += usize::from(resp.into_inner().overall_code == OK);
        }
    }
    assert_eq!(
        ok, 10,
        "18 calls over 6 connections, exactly the limit pass"
    );

    let server_threads = || {
        std::fs::read_dir("/proc/self/task")
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                    .filter(|name| name.starts_with("rls-grpc-"))
                    .count()
            })
            .unwrap_or(0)
    };
    if cfg!(target_os = "linux") {
        assert!(
            server_threads() >= 3,
            "{} serving threads",
            server_threads()
        );
    }
    drop(h.client);
    h.server.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// `GRPC_MAX_CONNECTION_AGE`: the server sends GOAWAY once a connection is that old, and closes
/// it (at the latest after `_GRACE`), so clients reconnect and spread over servers.
#[tokio::test]
async fn connections_end_after_their_max_age() {
    let h = start_with(
        &[("config.yaml", "domain: d\ndescriptors:\n  - key: k\n")],
        None,
        |s| {
            s.grpc_max_connection_age = Duration::from_millis(300);
            s.grpc_max_connection_age_grace = Duration::from_millis(300);
        },
        None,
    )
    .await;
    let tcp = tokio::net::TcpStream::connect(h.server.grpc_addr())
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let (_client, connection) = h2::client::handshake(tcp).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), connection).await;
    assert!(ended.is_ok(), "connection still open after 5 s");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "closed after {:?}",
        started.elapsed()
    );
    h.server.shutdown().await;
}

/// The debug port's `/ratelimit/top` during a seed 000-style attack from 50 source addresses:
/// three attackers over a per-address limit and 47 clients under it; the attackers come first
/// with the calls answered OVER_LIMIT (their count beyond the limit), each with the limit that
/// answered; a client never limited is not listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimit_top_lists_the_attackers_first() {
    const T0: u64 = 1_700_000_040_000;
    let config = "domain: edge
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: minute, requests_per_unit: 5}
";
    let clock = ManualClock::new(T0);
    let mut h = start_with(
        &[("edge.yaml", config)],
        None,
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    let attackers = [
        ("203.0.113.7", 25),
        ("203.0.113.8", 15),
        ("203.0.113.9", 10),
    ];
    for (ip, calls) in attackers {
        for _ in 0..calls {
            h.client
                .should_rate_limit(req("edge", vec![desc(&[("remote_address", ip)])]))
                .await
                .unwrap();
        }
    }
    for n in 0..47 {
        let ip = format!("198.51.100.{n}");
        let r = h
            .client
            .should_rate_limit(req("edge", vec![desc(&[("remote_address", &ip)])]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.overall_code, OK);
    }
    let top: serde_json::Value = reqwest::get(h.debug("/ratelimit/top?n=5"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let edge = &top["domains"]["edge"];
    assert_eq!(edge["limited_total"], 20 + 10 + 5, "{top}");
    assert_eq!(edge["capacity"], 128, "{top}");
    let clients: Vec<(String, u64, String)> = edge["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["client"].as_str().unwrap().to_string(),
                c["count"].as_u64().unwrap(),
                c["last_rule"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, u64, String)> = [
        ("remote_address=203.0.113.7", 20),
        ("remote_address=203.0.113.8", 10),
        ("remote_address=203.0.113.9", 5),
    ]
    .into_iter()
    .map(|(c, n)| (c.to_string(), n, "per-ip".to_string()))
    .collect();
    assert_eq!(clients, want, "{top}");
    assert_eq!(
        edge["clients"][0]["last_seen"],
        humantime_like(T0),
        "the test clock's time: {top}"
    );
}

/// RFC 3339 with milliseconds, UTC, of `millis` since the epoch.
fn humantime_like(millis: u64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(millis);
    humantime::format_rfc3339_millis(t).to_string()
}
