//! Helpers shared by the integration tests: start the service on loopback with config files in
//! a temp dir, talk to it with a real tonic client, build requests.
#![allow(dead_code)]

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;
use warden_ratelimit::config::ConfigSource;
use warden_ratelimit::limiter::{Entry, RateLimitDescriptor};
use warden_ratelimit::store::RedisType;
use warden_ratelimit::{Backend, Clock, RateLimitRequest, RunningServer, Server, Settings};
use warden_testkit::{RedisServer, TempDir};

pub const OK: i32 = 1;
pub const OVER: i32 = 2;

pub struct Harness {
    pub server: RunningServer,
    pub dir: TempDir,
    pub client: RateLimitServiceClient<Channel>,
}

impl Harness {
    pub fn http(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.http_addr())
    }
    pub fn debug(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.debug_addr())
    }
}

/// Settings for `files` (relative path, YAML) under a temp `--config` dir; memory backend,
/// or Redis when `redis` is given.
pub fn settings(dir: &TempDir, redis: Option<&RedisServer>) -> Settings {
    let mut s = Settings::loopback_for_tests(ConfigSource::Paths(vec![dir.path().to_path_buf()]));
    if let Some(r) = redis {
        s.backend = Backend::Redis;
        s.redis.socket_type = "tcp".into();
        s.redis.url = r.addr();
        s.redis.redis_type = RedisType::Single;
        s.redis.pool_size = 4;
        s.redis.timeout = Duration::from_millis(500);
    }
    s
}

pub async fn start(files: &[(&str, &str)], redis: Option<&RedisServer>) -> Harness {
    start_with(files, redis, |_| {}, None).await
}

pub async fn start_with(
    files: &[(&str, &str)],
    redis: Option<&RedisServer>,
    tweak: impl FnOnce(&mut Settings),
    clock: Option<Arc<dyn Clock>>,
) -> Harness {
    let dir = TempDir::new("rls").expect("temp dir");
    for (name, yaml) in files {
        dir.write(name, yaml).expect("write config");
    }
    let mut s = settings(&dir, redis);
    tweak(&mut s);
    let server = match clock {
        Some(c) => Server::start_with_clock(s, c).await,
        None => Server::start(s).await,
    }
    .expect("start server");
    let client = RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr()))
        .await
        .expect("connect");
    Harness {
        server,
        dir,
        client,
    }
}

/// One descriptor from `(key, value)` entries.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// Waits (bounded) until `check` holds.
pub async fn eventually(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
