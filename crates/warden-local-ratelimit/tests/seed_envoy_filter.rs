//! The seed's EnvoyFilters load unchanged and behave as Envoy does.

mod common;

use common::{clock, opts, repo_path, run, Req};
use std::time::Duration;
use warden_local_ratelimit::envoy::actions::Action;
use warden_local_ratelimit::{Decision, LocalLimiter, LIMITED_BODY};

fn seed_local() -> String {
    std::fs::read_to_string(repo_path(
        "examples/ratelimit-local/seed-envoyfilter-local.yaml",
    ))
    .expect("example exists")
}

#[test]
fn seed_local_filter_is_the_article_text_unchanged() {
    let seed = std::fs::read_to_string("/work/shared/seeds/000_4160c84b83481aea.txt");
    // The seed directory is only present on the development machine; the copy is what ships.
    if let Ok(seed) = seed {
        assert!(
            seed.contains(&seed_local()),
            "example must be a verbatim copy"
        );
    }
}

#[test]
fn seed_local_filter_limits_to_10_per_minute_with_its_header() {
    let loaded = warden_config::load_str("seed-envoyfilter-local.yaml", &seed_local())
        .expect("the seed YAML loads");
    assert_eq!(loaded.set.envoy_filters.len(), 1);
    let c = clock();
    let limiter = LocalLimiter::from_config(&loaded.set, opts(&c, 1000), None).expect("compiles");
    assert!(limiter.warnings().is_empty(), "{:?}", limiter.warnings());

    // One bucket shared by all clients (no descriptors): 10 per minute, starting full.
    let a = Req::from("127.0.0.1");
    let b = Req::from("127.0.0.2");
    assert_eq!(run(&limiter, &a, 6), (6, 0, 0));
    assert_eq!(run(&limiter, &b, 4), (4, 0, 0));
    let out = b.check(&limiter);
    assert_eq!(out.decision, Decision::Limited { enforced: true });
    let reply = out.response.expect("enforced limit has a reply");
    let resp = reply.build(false, |t| t.to_string());
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.body(), LIMITED_BODY);
    assert_eq!(resp.body().len(), 18);
    assert_eq!(resp.headers()["content-type"], "text/plain");
    assert_eq!(resp.headers()["x-local-rate-limit"], "true");
    assert!(resp.headers().get("x-envoy-ratelimited").is_none());
    // enable_x_ratelimit_headers is OFF in the seed.
    assert!(out.rate_limit_headers.is_none());
    assert_eq!(
        out.decided_by.map(|d| d.group),
        Some("http_local_rate_limiter")
    );

    // Continuous refill: one token every 6 s.
    c.advance(Duration::from_secs(6));
    assert_eq!(run(&limiter, &a, 2), (1, 1, 0));

    let stats = &limiter.group_stats()[0];
    assert_eq!(stats.name, "http_local_rate_limiter");
    assert_eq!(
        (stats.enabled, stats.ok, stats.rate_limited, stats.enforced),
        (13, 11, 2, 2)
    );
}

#[test]
fn grpc_requests_get_trailers_only_unavailable() {
    let loaded = warden_config::load_str("s.yaml", &seed_local()).expect("loads");
    let c = clock();
    let limiter = LocalLimiter::from_config(&loaded.set, opts(&c, 1000), None).expect("compiles");
    let r = Req::from("127.0.0.1");
    run(&limiter, &r, 10);
    let out = r.check(&limiter);
    let resp = out.response.expect("limited").build(true, |_| ());
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["grpc-status"], "14");
    assert_eq!(resp.headers()["grpc-message"], "local_rate_limited");
}

#[test]
fn seed_global_filters_parse_and_the_lua_patch_is_left_to_the_lua_filter() {
    let text = std::fs::read_to_string(repo_path(
        "crates/warden-local-ratelimit/tests/fixtures/seed-envoyfilter-global.yaml",
    ))
    .expect("fixture");
    let loaded = warden_config::load_str("seed-envoyfilter-global.yaml", &text).expect("loads");
    assert_eq!(loaded.set.envoy_filters.len(), 2);
    let patches =
        warden_local_ratelimit::envoy::interpret(&loaded.set.envoy_filters).expect("interprets");
    // The proxy's Lua filter reads the Lua patch: no warning here.
    assert!(patches.warnings.is_empty(), "{:?}", patches.warnings);

    assert_eq!(patches.http_global.len(), 1);
    let g = &patches.http_global[0].config;
    assert_eq!(g.domain, "ratelimit");
    assert!(g.failure_mode_deny);
    assert_eq!(g.timeout(), Duration::from_secs(10));
    let grpc = g
        .rate_limit_service
        .grpc_service
        .envoy_grpc
        .as_ref()
        .expect("envoy_grpc");
    assert_eq!(
        grpc.istio_host_port(),
        Some(("ratelimit.default.svc.cluster.local", 8081))
    );
    assert_eq!(
        g.rate_limit_service.transport_api_version.as_deref(),
        Some("V3")
    );

    assert_eq!(patches.route_rate_limits.len(), 1);
    let entries = &patches.route_rate_limits[0].config.entries;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].actions[0], Action::RemoteAddress {});
    assert_eq!(
        entries[0].actions[1],
        Action::RequestHeaders {
            header_name: "x-envoy-original-limit-rate-path".into(),
            descriptor_key: "PATH".into(),
            skip_if_absent: false
        }
    );
    assert_eq!(
        patches.route_rate_limits[0]
            .origin
            .route_match
            .vhost
            .as_ref()
            .and_then(|v| v.name.as_deref()),
        Some("")
    );

    // The same documents compile into a local limiter with no local groups and no warning.
    let c = clock();
    let limiter = LocalLimiter::from_config(&loaded.set, opts(&c, 100), None).expect("compiles");
    assert!(limiter.is_empty());
    assert!(limiter.warnings().is_empty(), "{:?}", limiter.warnings());
}

const TYPED_CONFIG_FORM: &str = r#"
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: per-ip-local}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match: {context: GATEWAY}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.local_ratelimit
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
          stat_prefix: per_ip
          enable_x_ratelimit_headers: DRAFT_VERSION_03
          token_bucket: {max_tokens: 1000, tokens_per_fill: 1000, fill_interval: 1s}
          filter_enabled: {default_value: {numerator: 100, denominator: HUNDRED}}
          filter_enforced: {default_value: {numerator: 100}}
          descriptors:
          - entries: [{key: remote_address}]
            token_bucket: {max_tokens: 3, tokens_per_fill: 3, fill_interval: 60s}
          - entries: [{key: remote_address, value: 127.0.0.9}]
            token_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 60s}
  - applyTo: VIRTUAL_HOST
    match: {context: GATEWAY, routeConfiguration: {vhost: {name: ""}}}
    patch:
      operation: MERGE
      value:
        rate_limits:
        - actions: [{remote_address: {}}]
"#;

#[test]
fn typed_config_form_with_wildcard_descriptor_gives_per_ip_buckets() {
    let c = clock();
    let limiter = common::limiter_from_yaml(TYPED_CONFIG_FORM, &c, 1000);
    let a = Req::from("127.0.0.1");
    let b = Req::from("127.0.0.2");
    let first = a.check(&limiter);
    assert_eq!(first.decision, Decision::Allowed);
    let h = first.rate_limit_headers.expect("DRAFT_VERSION_03 on");
    assert_eq!((h.limit, h.remaining), (3, 2));
    assert_eq!(run(&limiter, &a, 3), (2, 1, 0));
    assert_eq!(run(&limiter, &b, 3), (3, 0, 0));
    // The exact descriptor beats the wildcard one.
    let special = Req::from("127.0.0.9");
    assert_eq!(run(&limiter, &special, 2), (1, 1, 0));
    let limited = a.check(&limiter);
    let h = limited.rate_limit_headers.expect("headers on the 429 too");
    assert_eq!((h.limit, h.remaining, h.reset), (3, 0, 20));
    // Wildcard keys live in the bounded table.
    assert_eq!(limiter.table_stats().keys, 2);
}

#[test]
fn shadow_mode_counts_but_passes() {
    let yaml = TYPED_CONFIG_FORM.replace(
        "filter_enforced: {default_value: {numerator: 100}}",
        "filter_enforced: {default_value: {numerator: 0}}
          request_headers_to_add_when_not_enforced:
          - header: {key: x-would-limit, value: 'yes'}",
    );
    let c = clock();
    let limiter = common::limiter_from_yaml(&yaml, &c, 1000);
    let a = Req::from("127.0.0.1");
    assert_eq!(run(&limiter, &a, 5), (3, 0, 2));
    let out = a.check(&limiter);
    assert!(out.response.is_none());
    assert_eq!(out.request_headers_to_add.len(), 1);
    assert_eq!(out.request_headers_to_add[0].0, "x-would-limit");
    let s = &limiter.group_stats()[0];
    assert_eq!((s.enabled, s.ok, s.rate_limited, s.enforced), (6, 3, 3, 0));
}

#[test]
fn filter_enabled_absent_means_disabled() {
    let yaml = TYPED_CONFIG_FORM.replace(
        "filter_enabled: {default_value: {numerator: 100, denominator: HUNDRED}}",
        "",
    );
    let c = clock();
    let limiter = common::limiter_from_yaml(&yaml, &c, 1000);
    let a = Req::from("127.0.0.1");
    assert_eq!(run(&limiter, &a, 10), (10, 0, 0));
    assert!(
        a.check(&limiter).rate_limit_headers.is_none(),
        "not consulted"
    );
    assert_eq!(limiter.group_stats()[0].enabled, 0);
}

#[test]
fn bad_envoy_configs_name_the_field() {
    let yaml = TYPED_CONFIG_FORM
        .replace("fill_interval: 1s}", "fill_interval: 10ms}")
        .replace("max_tokens: 3,", "max_tokens: three,");
    let loaded = warden_config::load_str("bad.yaml", &yaml).expect("envelope loads");
    let c = clock();
    let errs = LocalLimiter::from_config(&loaded.set, opts(&c, 10), None).expect_err("rejected");
    let text: Vec<String> = errs.iter().map(|p| p.to_string()).collect();
    assert!(
        text.iter().any(|t| t.contains("EnvoyFilter/per-ip-local")
            && t.contains("spec.configPatches[0].patch.value.typed_config.descriptors[0].token_bucket.max_tokens")),
        "{text:#?}"
    );

    let yaml = TYPED_CONFIG_FORM.replace("fill_interval: 1s}", "fill_interval: 10ms}");
    let loaded = warden_config::load_str("bad.yaml", &yaml).expect("envelope loads");
    let errs = LocalLimiter::from_config(&loaded.set, opts(&c, 10), None).expect_err("rejected");
    assert!(
        errs.iter().any(|p| p.location.field
            == "spec.configPatches[0].patch.value.typed_config.token_bucket.fill_interval"
            && p.message.contains("50ms")),
        "{errs:#?}"
    );
}

#[test]
fn other_patches_are_unsupported_warnings() {
    let yaml = r#"
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: misc}
spec:
  configPatches:
  - applyTo: CLUSTER
    patch: {operation: MERGE, value: {connect_timeout: 1s}}
  - applyTo: NETWORK_FILTER
    patch:
      operation: INSERT_FIRST
      value:
        name: envoy.filters.network.local_ratelimit
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit
          stat_prefix: tcp_conn
          token_bucket: {max_tokens: 2, tokens_per_fill: 2, fill_interval: 1s}
"#;
    let c = clock();
    let limiter = common::limiter_from_yaml(yaml, &c, 10);
    let w = limiter.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].location.field, "spec.configPatches[0].applyTo");
    assert!(w[0].message.contains("unsupported EnvoyFilter patch"));

    // The network filter limits connections: 2 per second, shared.
    let ip = "127.0.0.1".parse().expect("ip");
    assert!(limiter.check_connection("any", ip));
    assert!(limiter.check_connection("any", "127.0.0.2".parse().expect("ip")));
    assert!(!limiter.check_connection("any", ip));
    c.advance(Duration::from_millis(500));
    assert!(limiter.check_connection("any", ip));
    let s = &limiter.connection_stats()[0];
    assert_eq!((s.ok, s.rate_limited), (3, 1));
}

/// Descriptor actions that look at headers make the limiter a reader of request headers;
/// `remote_address` and the seed's plain bucket do not.
#[test]
fn header_actions_read_request_headers() {
    let c = clock();
    assert!(!common::limiter_from_yaml(&seed_local(), &c, 1000).reads_request_headers());
    assert!(!common::limiter_from_yaml(TYPED_CONFIG_FORM, &c, 1000).reads_request_headers());
    for action in [
        "{request_headers: {header_name: x-user, descriptor_key: user}}",
        "{header_value_match: {descriptor_value: v, headers: [{name: x-a, exact_match: b}]}}",
    ] {
        let yaml = TYPED_CONFIG_FORM.replace("[{remote_address: {}}]", &format!("[{action}]"));
        let limiter = common::limiter_from_yaml(&yaml, &c, 1000);
        assert!(limiter.reads_request_headers(), "{action}");
    }
}
