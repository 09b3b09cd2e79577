//! Redis specifics against a real redis-server: the reference's key format and TTLs (so both
//! services can share one Redis), exact counting under concurrency, outage and recovery, the
//! over-limit local cache, and the per-second client.

mod common;

use common::*;
use redis::Commands;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use warden_ratelimit::ManualClock;
use warden_testkit::RedisServer;

const T0: u64 = 1_700_000_040_000; // a minute boundary

const LOGIN: &str = "domain: ratelimit
descriptors:
  - key: remote_address
    descriptors:
      - key: PATH
        rate_limit:
          unit: minute
          requests_per_unit: 5
";

fn redis_conn(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

#[tokio::test]
async fn keys_and_ttls_match_the_reference() {
    let redis = RedisServer::start().unwrap();
    let clock = ManualClock::new(T0 + 7_000);
    let mut h = start_with(
        &[("config.yaml", LOGIN)],
        Some(&redis),
        |s| s.limiter.cache_key_prefix = "pfx:".into(),
        Some(Arc::new(clock.clone())),
    )
    .await;
    let r = req(
        "ratelimit",
        vec![desc(&[("remote_address", "10.0.0.1"), ("PATH", "/login")])],
    );
    for _ in 0..3 {
        h.client.should_rate_limit(r.clone()).await.unwrap();
    }
    let mut conn = redis_conn(&redis);
    let key = "pfx:ratelimit_remote_address_10.0.0.1_PATH_/login_1700000040";
    let count: u64 = conn.get(key).unwrap();
    assert_eq!(count, 3);
    let ttl: i64 = conn.ttl(key).unwrap();
    assert!((55..=60 + 300).contains(&ttl), "ttl {ttl} = unit + jitter");
    let keys: Vec<String> = conn.keys("*").unwrap();
    assert_eq!(keys, vec![key.to_string()]);
}

#[tokio::test]
async fn counters_written_by_the_reference_are_honoured() {
    // During a migration both services share one Redis: a count the Go service wrote is seen.
    let redis = RedisServer::start().unwrap();
    let clock = ManualClock::new(T0 + 1_000);
    let mut conn = redis_conn(&redis);
    let _: () = conn
        .set(
            "ratelimit_remote_address_10.0.0.2_PATH_/login_1700000040",
            5,
        )
        .unwrap();
    let mut h = start_with(
        &[("config.yaml", LOGIN)],
        Some(&redis),
        |_| {},
        Some(Arc::new(clock)),
    )
    .await;
    let r = req(
        "ratelimit",
        vec![desc(&[("remote_address", "10.0.0.2"), ("PATH", "/login")])],
    );
    let resp = h.client.should_rate_limit(r).await.unwrap().into_inner();
    assert_eq!(resp.overall_code, OVER);
}

async fn concurrent_clients_get_exactly_the_limit(redis: Option<&RedisServer>) {
    const LIMIT: usize = 137;
    let yaml = format!(
        "domain: burst\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: {LIMIT}\n"
    );
    let clock = ManualClock::new(T0 + 1_000);
    let h = start_with(
        &[("config.yaml", &yaml)],
        redis,
        |_| {},
        Some(Arc::new(clock)),
    )
    .await;
    let r = req("burst", vec![desc(&[("k", "one")])]);
    let mut tasks = Vec::new();
    for _ in 0..20 {
        // Each client on its own HTTP/2 connection.
        let mut client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(
            format!("http://{}", h.server.grpc_addr()),
        )
        .await
        .unwrap();
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            for _ in 0..25 {
                let resp = client
                    .should_rate_limit(r.clone())
                    .await
                    .unwrap()
                    .into_inner();
                if resp.overall_code == OK {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, LIMIT, "500 requests, exactly the limit pass");
}

#[tokio::test]
async fn concurrent_clients_memory() {
    concurrent_clients_get_exactly_the_limit(None).await;
}

#[tokio::test]
async fn concurrent_clients_redis() {
    let redis = RedisServer::start().unwrap();
    concurrent_clients_get_exactly_the_limit(Some(&redis)).await;
}

#[tokio::test]
async fn redis_outage_fails_fast_then_recovers() {
    let mut redis = RedisServer::start().unwrap();
    let mut h = start(&[("config.yaml", LOGIN)], Some(&redis)).await;
    let r = req(
        "ratelimit",
        vec![desc(&[("remote_address", "10.0.0.3"), ("PATH", "/login")])],
    );
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", h.server.grpc_addr()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut health = HealthClient::new(channel);
    let grpc_health = |name: &str| HealthCheckRequest {
        service: name.to_string(),
    };
    eventually("healthy at start", Duration::from_secs(5), async || {
        reqwest::get(h.http("/healthcheck"))
            .await
            .map(|r| r.status() == 200)
            .unwrap_or(false)
    })
    .await;
    assert_eq!(
        health
            .check(grpc_health("ratelimit"))
            .await
            .unwrap()
            .into_inner()
            .status,
        ServingStatus::Serving as i32
    );
    assert_eq!(
        h.client
            .should_rate_limit(r.clone())
            .await
            .unwrap()
            .into_inner()
            .overall_code,
        OK
    );

    redis.stop();
    // Calls fail with UNKNOWN within REDIS_TIMEOUT (500 ms here), never hang.
    for _ in 0..3 {
        let started = Instant::now();
        let err = h.client.should_rate_limit(r.clone()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unknown);
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{:?}",
            started.elapsed()
        );
    }
    eventually("healthcheck 500", Duration::from_secs(5), async || {
        reqwest::get(h.http("/healthcheck"))
            .await
            .map(|r| r.status() == 500)
            .unwrap_or(false)
    })
    .await;
    eventually(
        "grpc health NOT_SERVING",
        Duration::from_secs(5),
        async || {
            health
                .check(grpc_health("ratelimit"))
                .await
                .map(|r| r.into_inner().status)
                .ok()
                == Some(ServingStatus::NotServing as i32)
        },
    )
    .await;
    // The config survives the outage.
    let rlconfig = reqwest::get(h.debug("/rlconfig"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        rlconfig.contains("ratelimit.remote_address.PATH"),
        "{rlconfig}"
    );

    redis.restart().unwrap();
    eventually("calls succeed again", Duration::from_secs(10), async || {
        h.client.should_rate_limit(r.clone()).await.is_ok()
    })
    .await;
    eventually("healthcheck 200", Duration::from_secs(5), async || {
        reqwest::get(h.http("/healthcheck"))
            .await
            .map(|r| r.status() == 200)
            .unwrap_or(false)
    })
    .await;
    let metrics = reqwest::get(h.debug("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"ratelimit_service_should_rate_limit_error{err_type="redis_error"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn local_cache_answers_over_limit_without_redis() {
    let mut redis = RedisServer::start().unwrap();
    let clock = ManualClock::new(T0 + 1_000);
    let mut h = start_with(
        &[("config.yaml", LOGIN)],
        Some(&redis),
        |s| s.limiter.local_cache_size_in_bytes = 1 << 20,
        Some(Arc::new(clock)),
    )
    .await;
    let r = req(
        "ratelimit",
        vec![desc(&[("remote_address", "10.0.0.4"), ("PATH", "/login")])],
    );
    for _ in 0..6 {
        h.client.should_rate_limit(r.clone()).await.unwrap();
    }
    redis.stop();
    // The 6th call went over: the key is cached, so Redis is not needed to say no.
    let resp = h
        .client
        .should_rate_limit(r.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.overall_code, OVER);
    let metrics = reqwest::get(h.debug("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // The reference's exporter has no mapping of its own for over_limit_with_local_cache:
    // from two levels on, its unanchored over_limit regex takes it, so the over_limit series
    // shows the 6th call (over in Redis) and the 7th twice (over, and over in the local cache).
    assert!(
        metrics.contains(r#"ratelimit_service_rate_limit_over_limit{domain="ratelimit",key1="remote_address",key2="PATH"} 3"#),
        "{metrics}"
    );
    // Another key still needs Redis, which is down.
    let other = req(
        "ratelimit",
        vec![desc(&[("remote_address", "10.0.0.5"), ("PATH", "/login")])],
    );
    assert!(h.client.should_rate_limit(other).await.is_err());
}

#[tokio::test]
async fn per_second_limits_go_to_the_per_second_redis() {
    let main = RedisServer::start().unwrap();
    let per_second = RedisServer::start().unwrap();
    let clock = ManualClock::new(T0);
    let ps_addr = per_second.addr();
    let mut h = start_with(
        &[(
            "config.yaml",
            "domain: split\ndescriptors:\n  - key: s\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: m\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
        )],
        Some(&main),
        move |s| {
            let mut ps = s.redis.clone();
            ps.url = ps_addr;
            s.redis_per_second = Some(ps);
        },
        Some(Arc::new(clock)),
    )
    .await;
    let r = req("split", vec![desc(&[("s", "x")]), desc(&[("m", "x")])]);
    let resp = h.client.should_rate_limit(r).await.unwrap().into_inner();
    assert_eq!(resp.statuses[0].limit_remaining, 4);
    assert_eq!(resp.statuses[1].limit_remaining, 4);
    let main_keys: Vec<String> = redis_conn(&main).keys("*").unwrap();
    let ps_keys: Vec<String> = redis_conn(&per_second).keys("*").unwrap();
    assert_eq!(main_keys, vec!["split_m_x_1700000040".to_string()]);
    assert_eq!(ps_keys, vec!["split_s_x_1700000040".to_string()]);
}

#[tokio::test]
async fn redis_cluster_counts_exactly_across_nodes() {
    let cluster = warden_testkit::RedisCluster::start(3).unwrap();
    let clock = ManualClock::new(T0 + 1_000);
    let urls = cluster.urls();
    let mut h = start_with(
        &[(
            "config.yaml",
            "domain: c\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 3}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 4}\n",
        )],
        None,
        move |s| {
            s.backend = warden_ratelimit::Backend::Redis;
            s.redis.socket_type = "tcp".into();
            s.redis.url = urls;
            s.redis.redis_type = warden_ratelimit::store::RedisType::Cluster;
            s.redis.timeout = Duration::from_secs(2);
        },
        Some(Arc::new(clock)),
    )
    .await;
    // Many values so keys land on different nodes (hash slots).
    for v in 0..20 {
        let value = format!("v{v}");
        let r = req("c", vec![desc(&[("a", &value)]), desc(&[("b", &value)])]);
        let mut ok_a = 0;
        let mut ok_b = 0;
        for _ in 0..5 {
            let resp = h
                .client
                .should_rate_limit(r.clone())
                .await
                .unwrap()
                .into_inner();
            ok_a += usize::from(resp.statuses[0].code == OK);
            ok_b += usize::from(resp.statuses[1].code == OK);
        }
        assert_eq!((ok_a, ok_b), (3, 4), "value {value}");
    }
    let mut total_keys = 0;
    for node in cluster.nodes() {
        let n: usize = redis_conn(node)
            .keys::<_, Vec<String>>("c_*")
            .unwrap()
            .len();
        total_keys += n;
    }
    assert_eq!(
        total_keys, 40,
        "reference key format, one key per descriptor value"
    );
}
