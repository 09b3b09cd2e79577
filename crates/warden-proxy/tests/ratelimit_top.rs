//! `/ratelimit/top` on the admin port during a seed 000-style attack: 50 attacking source
//! addresses (127.0.0.10-59, each bound by its own client) and 10 well-behaved ones hit a
//! gateway with a local per-client limit and the seed's global per-client limit (embedded
//! limiter); the admin page lists the attackers first, heaviest first, with their exact
//! counts and the rule, and none of the well-behaved clients.

mod common;

use common::*;
use futures_util::StreamExt;
use std::net::IpAddr;
use std::time::Duration;
use warden_proxy::{Proxy, ProxyOptions};

const LIMITS: &str = r#"---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: local-per-ip}
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        path: {type: Exact, value: /local}
      limit: {requests: 5, unit: Day}
---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: global-per-ip}
spec:
  global:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        path: {type: Exact, value: /api/healthz}
      limit: {requests: 5, unit: Day}
"#;

fn client_from(ip: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(ip)
        .build()
        .unwrap()
}

/// `n` GETs of `url` from `source`; how many were 429.
async fn send(source: IpAddr, url: String, n: usize) -> usize {
    let c = client_from(source);
    futures_util::stream::iter(0..n)
        .map(|_| {
            let c = c.clone();
            let url = url.clone();
            async move { c.get(url).send().await.map_or(0, |r| r.status().as_u16()) }
        })
        .buffer_unordered(4)
        .filter(|s| std::future::ready(*s == 429))
        .count()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_lists_the_attackers_first_with_their_counts() {
    let up = counting_echo().await;
    let proxy = Proxy::start(ProxyOptions::loopback(inline(&http_config(
        up.http_addr().unwrap(),
        "",
        LIMITS,
    ))))
    .unwrap();
    let base = format!("http://{}", addr(&proxy, 0));
    let attacker = |k: u8| IpAddr::from([127, 0, 0, 10 + k]);
    let calm = |k: u8| IpAddr::from([127, 0, 0, 200 + k]);
    // Attacker k sends 5 allowed and 10 + k limited requests to each limited path; the calm
    // clients stay within the limits.
    let mut sends = Vec::new();
    for k in 0..50u8 {
        for path in ["/local", "/api/healthz"] {
            sends.push((attacker(k), format!("{base}{path}"), 15 + usize::from(k)));
        }
    }
    for k in 0..10u8 {
        for path in ["/local", "/api/healthz", "/other"] {
            sends.push((calm(k), format!("{base}{path}"), 3));
        }
    }
    let limited: usize = futures_util::stream::iter(sends)
        .map(|(source, url, n)| send(source, url, n))
        .buffer_unordered(8)
        .collect::<Vec<usize>>()
        .await
        .into_iter()
        .sum();
    let per_limiter: usize = (0..50).map(|k| 10 + k).sum();
    assert_eq!(limited, 2 * per_limiter);

    let admin = proxy.admin_addr().unwrap();
    let top: serde_json::Value = client()
        .get(format!("http://{admin}/ratelimit/top?n=60"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for (limiter, rule_part) in [("local", "local-per-ip"), ("global", "127.0.0.")] {
        let section = &top[limiter];
        assert_eq!(section["limited_total"], per_limiter as u64, "{limiter}");
        let clients = section["clients"].as_array().unwrap();
        assert_eq!(
            clients.len(),
            50,
            "{limiter}: only the attackers: {section}"
        );
        for (i, c) in clients.iter().enumerate() {
            // Heaviest first: attacker 49 (10 + 49 limited requests) down to attacker 0.
            let k = 49 - i as u8;
            assert_eq!(c["client"], attacker(k).to_string(), "{limiter} #{i}");
            assert_eq!(c["count"], 10 + u64::from(k), "{limiter} #{i}");
            assert_eq!(c["error"], 0);
            let rule = c["last_rule"].as_str().unwrap_or_default();
            assert!(rule.contains(rule_part), "{limiter}: {rule}");
            assert!(c["last_seen"].as_str().unwrap().ends_with('Z'));
        }
    }
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
}
