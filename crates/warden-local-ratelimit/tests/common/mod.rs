//! Shared helpers for the limiter's tests: config loading and request building.

#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use warden_local_ratelimit::{LimiterOptions, LocalLimiter, ManualClock, Outcome, RequestAttrs};

pub fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

pub fn opts(clock: &ManualClock, max_keys: usize) -> LimiterOptions {
    LimiterOptions {
        max_keys,
        clock: Arc::new(clock.clone()),
        ..LimiterOptions::default()
    }
}

/// A clock well past zero, so "starts full" is not an artefact of time 0.
pub fn clock() -> ManualClock {
    let c = ManualClock::new();
    c.set_nanos(1_000 * 1_000_000_000);
    c
}

pub fn limiter_from_yaml(yaml: &str, clock: &ManualClock, max_keys: usize) -> LocalLimiter {
    let loaded = warden_config::load_str("test.yaml", yaml).expect("config loads");
    LocalLimiter::from_config(&loaded.set, opts(clock, max_keys), None).expect("limiter compiles")
}

pub struct Req {
    pub ip: IpAddr,
    pub method: http::Method,
    pub path: String,
    pub headers: http::HeaderMap,
    pub gateway: String,
    pub vs: Option<String>,
}

impl Req {
    pub fn from(ip: &str) -> Self {
        Self {
            ip: ip.parse().expect("ip"),
            method: http::Method::GET,
            path: "/api/healthz".into(),
            headers: http::HeaderMap::new(),
            gateway: "ingress".into(),
            vs: None,
        }
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers
            .insert(name, value.parse().expect("header value"));
        self
    }

    pub fn method(mut self, m: http::Method) -> Self {
        self.method = m;
        self
    }

    pub fn path(mut self, p: &str) -> Self {
        self.path = p.into();
        self
    }

    pub fn vs(mut self, vs: &str) -> Self {
        self.vs = Some(vs.into());
        self
    }

    pub fn attrs(&self) -> RequestAttrs<'_> {
        RequestAttrs {
            client_ip: self.ip,
            method: &self.method,
            path: &self.path,
            headers: &self.headers,
            gateway: &self.gateway,
            virtual_service: self.vs.as_deref(),
            source_route: None,
            destination_cluster: None,
            query: None,
            authority: "",
            scheme: "http",
            route_local: &[],
            route_rate_limits: None,
            dynamic_metadata: None,
        }
    }

    pub fn check<'l>(&self, limiter: &'l LocalLimiter) -> Outcome<'l> {
        limiter.check(&self.attrs())
    }
}

/// (allowed, enforced-limited, shadow-limited) over `n` requests.
pub fn run(limiter: &LocalLimiter, req: &Req, n: usize) -> (usize, usize, usize) {
    let mut counts = (0, 0, 0);
    for _ in 0..n {
        match req.check(limiter).decision {
            warden_local_ratelimit::Decision::Allowed => counts.0 += 1,
            warden_local_ratelimit::Decision::Limited { enforced: true } => counts.1 += 1,
            warden_local_ratelimit::Decision::Limited { enforced: false } => counts.2 += 1,
        }
    }
    counts
}
