//! `REDIS_TYPE=sentinel` against real redis-server and redis-sentinel processes: the master is
//! found through the sentinels named in `REDIS_URL` (`master,host:port,...`, in order), and
//! after the master is killed and a replica promoted, calls resume within 5 s with no count
//! lost or doubled.

mod common;

use common::*;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_ratelimit::{ManualClock, Server, Settings};
use warden_testkit::RedisSentinel;

const T0: u64 = 1_700_000_040_000;
const LIMIT: u32 = 1_000_000;
const CONFIG: &str = "domain: s
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000000}
";

/// The environment the reference reads, with loopback listeners on free ports.
fn env(dir: &warden_testkit::TempDir, redis_url: &str) -> Settings {
    let vars = [
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", redis_url),
        ("REDIS_TIMEOUT", "500ms"),
        ("RUNTIME_ROOT", &dir.path().display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "srv"),
        ("HOST", "127.0.0.1"),
        ("GRPC_HOST", "127.0.0.1"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_PORT", "0"),
        ("DEBUG_PORT", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Settings::from_env_map(&vars).expect("settings")
}

async fn call(
    client: &mut envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>,
) -> Result<u32, tonic::Status> {
    let resp = client
        .should_rate_limit(req("s", vec![desc(&[("k", "v")])]))
        .await?
        .into_inner();
    let status = resp
        .statuses
        .first()
        .ok_or_else(|| tonic::Status::internal("no status"))?;
    Ok(LIMIT - status.limit_remaining)
}

fn redis(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_within_5_s_and_counts_stay_exact() {
    let mut cluster = tokio::task::spawn_blocking(|| RedisSentinel::start(1, 3))
        .await
        .unwrap()
        .expect("sentinels");
    let dir = warden_testkit::TempDir::new("sentinel").unwrap();
    dir.write("srv/config/s.yaml", CONFIG).unwrap();
    // A sentinel that is down comes first: the next one is asked.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let url = cluster
        .url()
        .replacen(',', &format!(",127.0.0.1:{dead_port},"), 1);
    let clock = ManualClock::new(T0 + 1_000);
    let server = Server::start_with_clock(env(&dir, &url), Arc::new(clock))
        .await
        .unwrap();
    let mut client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(
        format!("http://{}", server.grpc_addr()),
    )
    .await
    .unwrap();

    let mut counts = Vec::new();
    for _ in 0..50 {
        counts.push(call(&mut client).await.expect("before the failover"));
    }
    let master = cluster.servers()[0].port();
    let replicated: i64 = tokio::task::spawn_blocking(move || {
        // Everything written so far is on the replica before the master goes.
        let mut conn = redis(master);
        let _: () = redis::cmd("SET")
            .arg("marker")
            .arg(1)
            .query(&mut conn)
            .unwrap();
        redis::cmd("WAIT")
            .arg(1)
            .arg(2000)
            .query(&mut conn)
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(replicated, 1);

    let killed_at = Instant::now();
    let mut cluster = tokio::task::spawn_blocking(move || {
        cluster.kill_master().unwrap();
        cluster
    })
    .await
    .unwrap();
    let mut failed = 0;
    let resumed = loop {
        match call(&mut client).await {
            Ok(count) => {
                counts.push(count);
                break killed_at.elapsed();
            }
            Err(_) => failed += 1,
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(10),
            "no call succeeded within 10 s of the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(failed > 0, "the kill was noticed");
    assert!(
        resumed < Duration::from_secs(5),
        "calls resumed after {resumed:?}"
    );
    for _ in 0..50 {
        counts.push(call(&mut client).await.expect("after the failover"));
    }

    let n = counts.len() as u32;
    assert!(
        counts.iter().copied().eq(1..=n),
        "every successful call counted once, in order: {counts:?}"
    );
    let new_master = tokio::task::spawn_blocking(move || {
        let port = cluster.master_port().unwrap();
        (cluster, port)
    })
    .await
    .unwrap();
    cluster = new_master.0;
    assert_eq!(
        new_master.1,
        cluster.servers()[1].port(),
        "the replica was promoted"
    );
    let stored: u64 = redis::cmd("GET")
        .arg("s_k_v_1700000040")
        .query(&mut redis(new_master.1))
        .unwrap();
    assert_eq!(stored, u64::from(n), "the new master holds every count");
    server.shutdown().await;
}

#[tokio::test]
async fn a_sentinel_url_without_sentinels_is_refused_as_the_reference_does() {
    let dir = warden_testkit::TempDir::new("sentinel").unwrap();
    dir.write("srv/config/s.yaml", CONFIG).unwrap();
    let err = Server::start(env(&dir, "mymaster")).await.unwrap_err();
    // The reason is the error's source, as `warden ratelimit` prints it ("redis settings: ...").
    let chain = format!("{:#}", anyhow::Error::new(err));
    assert!(
        chain.contains("Expected master name and a list of urls for the sentinels"),
        "{chain}"
    );
}
