//! RateLimitPolicy semantics with a controllable clock: the seed's effect, refill, Distinct
//! buckets, strictest rule, targets, reload adoption, eviction, L4, and config errors.

mod common;

use common::{clock, limiter_from_yaml, opts, repo_path, run, Req};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use warden_local_ratelimit::{Decision, LocalLimiter};

fn per_ip_example() -> String {
    std::fs::read_to_string(repo_path("examples/ratelimit-local/policy-per-ip.yaml"))
        .expect("example exists")
}

#[test]
fn seed_effect_300_per_minute_per_ip() {
    let c = clock();
    let limiter = limiter_from_yaml(&per_ip_example(), &c, 1000);
    let one = Req::from("127.0.0.1");
    let two = Req::from("127.0.0.2");
    let mut last_allowed = None;
    for i in 0..300 {
        let out = one.check(&limiter);
        assert_eq!(out.decision, Decision::Allowed, "request {}", i + 1);
        last_allowed = out.rate_limit_headers;
    }
    let h = last_allowed.expect("x-ratelimit on upstream responses");
    assert_eq!((h.limit, h.remaining), (300, 0));
    let out = one.check(&limiter);
    assert_eq!(out.decision, Decision::Limited { enforced: true });
    let resp = out.response.expect("429").build(false, |t| t);
    assert_eq!(resp.status(), 429);
    assert_eq!(*resp.body(), "local_rate_limited");
    let h = out.rate_limit_headers.expect("x-ratelimit on the 429");
    assert_eq!((h.limit, h.remaining, h.reset), (300, 0, 0));
    let by = out.decided_by.expect("decider");
    assert_eq!(by.group, "RateLimitPolicy/per-ip-300-per-minute");
    assert_eq!(
        by.rule,
        "RateLimitPolicy/per-ip-300-per-minute spec.local.rules[0]"
    );
    // Another client has its own bucket.
    assert_eq!(run(&limiter, &two, 90), (90, 0, 0));
    let s = &limiter.group_stats()[0];
    assert_eq!(
        (s.enabled, s.ok, s.rate_limited, s.enforced),
        (391, 390, 1, 1)
    );
    assert_eq!(limiter.table_stats().keys, 2);

    // A token every 200 ms; after a minute the bucket is full again, never more.
    c.advance(Duration::from_millis(199));
    assert_eq!(run(&limiter, &one, 1), (0, 1, 0));
    c.advance(Duration::from_millis(1));
    assert_eq!(run(&limiter, &one, 2), (1, 1, 0));
    c.advance(Duration::from_secs(3600));
    assert_eq!(run(&limiter, &one, 301), (300, 1, 0));
}

#[test]
fn ipv6_clients_have_their_own_rule_and_buckets() {
    let c = clock();
    let limiter = limiter_from_yaml(&per_ip_example(), &c, 1000);
    assert_eq!(run(&limiter, &Req::from("::1"), 301), (300, 1, 0));
    assert_eq!(run(&limiter, &Req::from("::2"), 5), (5, 0, 0));
    // IPv4-mapped addresses are the IPv4 client.
    assert_eq!(run(&limiter, &Req::from("127.0.0.7"), 300), (300, 0, 0));
    assert_eq!(run(&limiter, &Req::from("::ffff:127.0.0.7"), 1), (0, 1, 0));
}

#[test]
fn concurrent_checks_let_exactly_the_limit_through() {
    let c = clock();
    let limiter = limiter_from_yaml(&per_ip_example(), &c, 1000);
    let allowed = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                let r = Req::from("127.0.0.1");
                for _ in 0..500 {
                    if r.check(&limiter).decision == Decision::Allowed {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(allowed.load(Ordering::Relaxed), 300);
}

const SELECTORS: &str = r#"
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: mixed}
spec:
  targetRefs: [{kind: VirtualService, name: api}]
  local:
    rules:
    - limit: {requests: 100, unit: Second}
    - clientSelectors:
      - headers: [{name: x-user-id, type: Distinct}]
      limit: {requests: 5, unit: Minute}
    - clientSelectors:
      - headers: [{name: x-user-id, value: admin}]
      limit: {requests: 2, unit: Minute}
    - clientSelectors:
      - methods: [POST]
        path: {type: PathPrefix, value: /login}
      limit: {requests: 3, unit: Minute}
"#;

#[test]
fn distinct_headers_strictest_rule_and_targets() {
    let c = clock();
    let limiter = limiter_from_yaml(SELECTORS, &c, 1000);
    // Outside the target: never consulted.
    let other = Req::from("127.0.0.1").header("x-user-id", "admin");
    assert_eq!(run(&limiter, &other, 50), (50, 0, 0));
    assert!(other.check(&limiter).rate_limit_headers.is_none());

    // admin matches the Distinct rule (5/min) and the exact one (2/min): the strictest decides.
    let admin = Req::from("127.0.0.1")
        .header("x-user-id", "admin")
        .vs("api");
    let out = admin.check(&limiter);
    assert_eq!(
        out.rate_limit_headers.map(|h| (h.limit, h.remaining)),
        Some((2, 1))
    );
    assert_eq!(run(&limiter, &admin, 2), (1, 1, 0));
    let out = admin.check(&limiter);
    assert_eq!(
        out.decided_by.map(|d| d.rule),
        Some("RateLimitPolicy/mixed spec.local.rules[2]")
    );

    // Each distinct user has a 5/min bucket.
    let alice = Req::from("127.0.0.1")
        .header("x-user-id", "alice")
        .vs("api");
    let bob = Req::from("127.0.0.1").header("x-user-id", "bob").vs("api");
    assert_eq!(run(&limiter, &alice, 6), (5, 1, 0));
    assert_eq!(run(&limiter, &bob, 6), (5, 1, 0));

    // POST /login (and /login/x, not /loginx) shares one 3/min bucket.
    let login = Req::from("127.0.0.3")
        .method(http::Method::POST)
        .path("/login/form")
        .vs("api");
    assert_eq!(run(&limiter, &login, 4), (3, 1, 0));
    let loginx = Req::from("127.0.0.3")
        .method(http::Method::POST)
        .path("/loginx")
        .vs("api");
    assert_eq!(run(&limiter, &loginx, 4), (4, 0, 0));
    let get = Req::from("127.0.0.3").path("/login").vs("api");
    assert_eq!(run(&limiter, &get, 4), (4, 0, 0));
}

#[test]
fn default_rule_applies_only_when_nothing_matched() {
    let c = clock();
    let limiter = limiter_from_yaml(SELECTORS, &c, 1000);
    let anon = Req::from("127.0.0.1").vs("api");
    let out = anon.check(&limiter);
    assert_eq!(
        out.rate_limit_headers.map(|h| (h.limit, h.remaining)),
        Some((100, 99))
    );
    assert_eq!(run(&limiter, &anon, 100), (99, 1, 0));
    // A selected request does not consume the default bucket.
    let alice = Req::from("127.0.0.1")
        .header("x-user-id", "alice")
        .vs("api");
    assert_eq!(run(&limiter, &alice, 5), (5, 0, 0));
}

#[test]
fn reload_keeps_state_of_unchanged_rules_only() {
    let c = clock();
    let loaded = warden_config::load_str("a.yaml", SELECTORS).expect("loads");
    let first = LocalLimiter::from_config(&loaded.set, opts(&c, 1000), None).expect("compiles");
    let alice = Req::from("127.0.0.1")
        .header("x-user-id", "alice")
        .vs("api");
    let login = Req::from("127.0.0.3")
        .method(http::Method::POST)
        .path("/login")
        .vs("api");
    assert_eq!(run(&first, &alice, 5), (5, 0, 0));
    assert_eq!(run(&first, &login, 3), (3, 0, 0));

    // Same config: everything carries over, counters included.
    let second =
        LocalLimiter::from_config(&loaded.set, opts(&c, 1000), Some(&first)).expect("compiles");
    assert_eq!(run(&second, &alice, 1), (0, 1, 0));
    assert_eq!(run(&second, &login, 1), (0, 1, 0));
    assert_eq!(second.group_stats()[0].enabled, 10);

    // The login rule changes (3 -> 4 per minute): its bucket starts fresh; alice's does not.
    let changed = SELECTORS.replace("requests: 3, unit: Minute", "requests: 4, unit: Minute");
    let loaded = warden_config::load_str("a.yaml", &changed).expect("loads");
    let third =
        LocalLimiter::from_config(&loaded.set, opts(&c, 1000), Some(&second)).expect("compiles");
    assert_eq!(run(&third, &alice, 1), (0, 1, 0));
    assert_eq!(run(&third, &login, 5), (4, 1, 0));
}

#[test]
fn a_flood_of_distinct_clients_is_bounded_and_evictions_are_counted() {
    let c = clock();
    let limiter = limiter_from_yaml(&per_ip_example(), &c, 1000);
    for i in 0..20_000u32 {
        let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
        let r = Req::from(&ip.to_string());
        assert_eq!(r.check(&limiter).decision, Decision::Allowed);
        c.advance(Duration::from_micros(5)); // 100 ms in all: no bucket refills
    }
    let s = limiter.table_stats();
    assert!(s.keys <= 1000, "{s:?}");
    assert!(s.evictions >= 19_000, "{s:?}");
    assert_eq!(s.evictions, s.evictions_active, "every bucket was in use");
}

#[test]
fn busy_client_keeps_its_budget_through_a_flood() {
    let c = clock();
    let limiter = limiter_from_yaml(&per_ip_example(), &c, 1000);
    let attacker = Req::from("127.0.0.1");
    assert_eq!(run(&limiter, &attacker, 301), (300, 1, 0));
    let mut attacker_allowed = 0;
    for i in 0..5_000u32 {
        let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
        Req::from(&ip.to_string()).check(&limiter);
        // The attacker keeps hammering, so it is always among the most recently used.
        if attacker.check(&limiter).decision == Decision::Allowed {
            attacker_allowed += 1;
        }
        // 10k new clients per second, ~10 per LRU tick (~1 ms): recency is tracked per tick,
        // so keys used within the same tick are evicted in arbitrary order.
        c.advance(Duration::from_micros(100));
    }
    assert!(limiter.table_stats().evictions >= 4_000);
    // 0.5 s at one token per 200 ms: at most 3 more requests; an evicted (fresh) bucket
    // would have let 300 through.
    assert!(attacker_allowed <= 3, "attacker got {attacker_allowed}");
}

#[test]
fn connection_limit_per_client() {
    let yaml = r#"
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: conns}
spec:
  targetRefs: [{kind: Gateway, name: tcp-gw}]
  local:
    connections:
    - sourceCIDR: {type: Distinct, value: 127.0.0.0/8}
      limit: {requests: 2, unit: Second}
"#;
    let c = clock();
    let limiter = limiter_from_yaml(yaml, &c, 100);
    assert!(limiter.is_empty(), "no HTTP groups");
    let a = "127.0.0.1".parse().expect("ip");
    let b = "127.0.0.2".parse().expect("ip");
    assert!(limiter.check_connection("tcp-gw", a));
    assert!(limiter.check_connection("tcp-gw", a));
    assert!(!limiter.check_connection("tcp-gw", a));
    assert!(limiter.check_connection("tcp-gw", b));
    assert!(limiter.check_connection("other-gw", a), "not targeted");
    assert!(
        limiter.check_connection("tcp-gw", "10.0.0.1".parse().expect("ip")),
        "outside CIDR"
    );
    c.advance(Duration::from_millis(500));
    assert!(limiter.check_connection("tcp-gw", a));
    let s = &limiter.connection_stats()[0];
    assert_eq!((s.ok, s.rate_limited), (4, 1));
}

#[test]
fn config_errors_name_file_document_and_field() {
    let yaml = r#"
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: bad}
spec:
  targetRefs: [{kind: Service, name: x}]
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 10.0.0.300/8}
      limit: {requests: 1, unit: Minute}
    - clientSelectors:
      - headers: [{name: x-a, type: RegularExpression, value: "(unclosed"}]
      limit: {requests: 0, unit: Minute}
    - clientSelectors: [{}]
      limit: {requests: 1, unit: Second}
  global:
    rules:
    - clientSelectors:
      - headers: [{name: x-b}]
      limit: {requests: 1, unit: Hour}
      shadowMode: true
"#;
    let loaded = warden_config::load_str("bad.yaml", yaml).expect("shape is fine");
    let c = clock();
    let errs = LocalLimiter::from_config(&loaded.set, opts(&c, 10), None).expect_err("bad");
    let fields: Vec<&str> = errs.iter().map(|p| p.location.field.as_str()).collect();
    for want in [
        "spec.targetRefs[0].kind",
        "spec.local.rules[0].clientSelectors[0].sourceCIDR.value",
        "spec.local.rules[1].limit.requests",
        "spec.local.rules[2].clientSelectors[0]",
        "spec.global.rules[0].clientSelectors[0].headers[0].value",
    ] {
        assert!(fields.contains(&want), "missing {want} in {errs:#?}");
    }
    assert!(errs
        .iter()
        .all(|p| p.location.object == "RateLimitPolicy/bad"
            && p.location.file.to_str() == Some("bad.yaml")
            && p.location.document == 1));
    assert!(errs[0]
        .to_string()
        .starts_with("bad.yaml: document 1 (RateLimitPolicy/bad)"));

    // Shape errors come from the loader, with the path.
    let bad_unit = yaml.replace("unit: Hour", "unit: Fortnight");
    let err = warden_config::load_str("bad.yaml", &bad_unit).expect_err("bad unit");
    assert!(
        err.to_string().contains("spec.global.rules[0].limit.unit"),
        "{err}"
    );
}

#[test]
fn global_rules_are_compiled_for_the_rls_client() {
    let yaml = r#"
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: g}
spec:
  global:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        methods: [{value: POST}]
      limit: {requests: 100, unit: Minute}
      shadowMode: true
"#;
    let loaded = warden_config::load_str("g.yaml", yaml).expect("loads");
    let rules =
        warden_local_ratelimit::global::compile_global_rules(&loaded.set.rate_limit_policies)
            .expect("compiles");
    assert_eq!(rules.len(), 1);
    assert!(rules[0].shadow_mode);
    let post = Req::from("127.0.0.5").method(http::Method::POST);
    assert_eq!(
        rules[0].select(&post.attrs()),
        Some(warden_local_ratelimit::selector::DistinctKey::Ip(
            "127.0.0.5".parse().expect("ip")
        ))
    );
    assert_eq!(rules[0].select(&Req::from("127.0.0.5").attrs()), None);
    // A local limiter over the same config has nothing to do.
    let c = clock();
    assert!(LocalLimiter::from_config(&loaded.set, opts(&c, 10), None)
        .expect("compiles")
        .is_empty());
}

#[test]
fn composite_distinct_keys_separate_every_tuple() {
    let yaml = r#"
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: tuple}
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 127.0.0.0/8}
        headers:
        - {name: x-tenant, type: Distinct}
        - {name: x-user, type: Distinct}
        - {name: x-debug, value: "1", invert: true}
      limit: {requests: 2, unit: Hour}
"#;
    let c = clock();
    let limiter = limiter_from_yaml(yaml, &c, 100);
    let a = Req::from("127.0.0.1")
        .header("x-tenant", "t1")
        .header("x-user", "u1");
    let b = Req::from("127.0.0.1")
        .header("x-tenant", "t1")
        .header("x-user", "u2");
    let d = Req::from("127.0.0.2")
        .header("x-tenant", "t1")
        .header("x-user", "u1");
    // Values that would collide if joined naively ("t1u" + "1" vs "t1" + "u1").
    let e = Req::from("127.0.0.1")
        .header("x-tenant", "t1u")
        .header("x-user", "1");
    for r in [&a, &b, &d, &e] {
        assert_eq!(run(&limiter, r, 3), (2, 1, 0));
    }
    // Missing a Distinct header, or the inverted header present: not selected.
    let partial = Req::from("127.0.0.1").header("x-tenant", "t1");
    assert_eq!(run(&limiter, &partial, 5), (5, 0, 0));
    let debug = a.header("x-debug", "1");
    assert_eq!(run(&limiter, &debug, 5), (5, 0, 0));
    assert_eq!(limiter.table_stats().keys, 4);
}

#[test]
fn limiter_can_live_in_a_shared_snapshot() {
    fn shareable<T: Send + Sync + std::fmt::Debug + 'static>() {}
    shareable::<LocalLimiter>();
}

/// The proxy keeps a request's header lines out of a map unless a stage reads them: only
/// header selectors do here.
#[test]
fn only_header_selectors_read_request_headers() {
    let c = clock();
    assert!(!limiter_from_yaml(&per_ip_example(), &c, 1000).reads_request_headers());
    assert!(limiter_from_yaml(SELECTORS, &c, 1000).reads_request_headers());
}
