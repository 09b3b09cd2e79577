//! Hot-path cost of `LocalLimiter::check()`:
//! * attack: one client over its 300/min limit, every request rejected (the seed's attack);
//! * non-triggering: a per-IP policy whose limit is never reached, vs no policy at all;
//! * distinct: a new client on every request (insert + eviction path at the cap).
//!
//! Before the criterion groups it prints the memory of 10M distinct keys at the default cap.
//!
//! Run: cargo bench -p warden-local-ratelimit --bench check

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;
use warden_local_ratelimit::{
    Decision, LimiterOptions, LocalLimiter, RequestAttrs, DEFAULT_MAX_KEYS,
};

fn policy(requests: u64, unit: &str) -> String {
    format!(
        r#"
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {{name: per-ip}}
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {{type: Distinct, value: 0.0.0.0/0}}
      limit: {{requests: {requests}, unit: {unit}}}
"#
    )
}

fn limiter(yaml: &str, max_keys: usize) -> LocalLimiter {
    let set = if yaml.is_empty() {
        warden_config::ConfigSet::default()
    } else {
        warden_config::load_str("bench.yaml", yaml)
            .expect("bench config loads")
            .set
    };
    let opts = LimiterOptions {
        max_keys,
        ..LimiterOptions::default()
    };
    LocalLimiter::from_config(&set, opts, None).expect("bench config compiles")
}

fn attrs<'a>(ip: IpAddr, headers: &'a http::HeaderMap) -> RequestAttrs<'a> {
    RequestAttrs {
        client_ip: ip,
        method: &http::Method::GET,
        path: "/api/healthz",
        headers,
        gateway: "ingress",
        virtual_service: Some("api"),
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

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// 10M distinct client keys through a limiter capped at the default 1M keys.
fn memory_report() {
    let headers = http::HeaderMap::new();
    let l = limiter(&policy(300, "Minute"), DEFAULT_MAX_KEYS);
    let rss_before = rss_bytes();
    let start = Instant::now();
    let n: u32 = 10_000_000;
    for i in 0..n {
        let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000u32.wrapping_add(i)));
        black_box(l.check(&attrs(ip, &headers)));
    }
    let elapsed = start.elapsed();
    let s = l.table_stats();
    let rss_after = rss_bytes();
    println!(
        "distinct keys: {n} inserted in {elapsed:.2?} ({:.0} ns/key)",
        elapsed.as_nanos() as f64 / f64::from(n)
    );
    println!(
        "distinct keys: cap {} | held {} | evictions {} | table {:.1} MiB = {:.1} B/key held, {:.1} B/key at cap | RSS growth {:.1} MiB",
        s.max_keys,
        s.keys,
        s.evictions,
        s.table_bytes as f64 / 1048576.0,
        s.table_bytes as f64 / s.keys.max(1) as f64,
        s.table_bytes as f64 / s.max_keys as f64,
        rss_after.saturating_sub(rss_before) as f64 / 1048576.0,
    );
    assert!(s.keys <= s.max_keys);
}

fn benches(c: &mut Criterion) {
    memory_report();
    let headers = http::HeaderMap::new();
    let attacker = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));

    let attack = limiter(&policy(300, "Minute"), DEFAULT_MAX_KEYS);
    for _ in 0..300 {
        attack.check(&attrs(attacker, &headers));
    }
    assert!(matches!(
        attack.check(&attrs(attacker, &headers)).decision,
        Decision::Limited { enforced: true }
    ));
    let mut g = c.benchmark_group("check");
    g.bench_function("attack_one_key_rejected", |b| {
        b.iter(|| black_box(attack.check(black_box(&attrs(attacker, &headers)))))
    });

    let loose = limiter(&policy(1_000_000_000, "Second"), DEFAULT_MAX_KEYS);
    g.bench_function("non_triggering_policy_allowed", |b| {
        b.iter(|| black_box(loose.check(black_box(&attrs(attacker, &headers)))))
    });

    let none = limiter("", DEFAULT_MAX_KEYS);
    g.bench_function("no_policy", |b| {
        b.iter(|| black_box(none.check(black_box(&attrs(attacker, &headers)))))
    });

    let flood = limiter(&policy(300, "Minute"), DEFAULT_MAX_KEYS);
    let mut i: u32 = 0;
    g.bench_function("distinct_key_every_request_at_cap", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000u32.wrapping_add(i)));
            black_box(flood.check(&attrs(ip, &headers)))
        })
    });
    g.finish();
}

criterion_group! {
    name = check;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
        .sample_size(30);
    targets = benches
}
criterion_main!(check);
