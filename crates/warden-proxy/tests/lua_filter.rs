//! Envoy's Lua filter end to end: EnvoyFilters with the scripts of Envoy's and Istio's docs on
//! a gateway in front of the echo upstream, per-route overrides, script errors, and scripts
//! that would stall a worker.

mod common;

use common::{addr, client, counting_echo, echo_http, http_config, inline, raw_upstream};
use std::time::Duration;
use warden_proxy::{Proxy, ProxyOptions, RunningProxy};

/// An EnvoyFilter inserting a Lua filter before the router, with `code` as `inlineCode`.
fn lua_filter(code: &str) -> String {
    lua_filter_with(&format!("inlineCode: |\n{}", indent(code, 14)))
}

/// An EnvoyFilter inserting a Lua filter whose `typed_config` has `fields` (YAML at column 12).
fn lua_filter_with(fields: &str) -> String {
    format!(
        r#"---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: lua, namespace: istio-system}}
spec:
  configPatches:
    - applyTo: HTTP_FILTER
      match:
        context: GATEWAY
        listener:
          filterChain:
            filter:
              name: envoy.filters.network.http_connection_manager
              subFilter: {{name: envoy.filters.http.router}}
      patch:
        operation: INSERT_BEFORE
        value:
          name: envoy.filters.http.lua
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
{}
"#,
        indent(fields, 12)
    )
}

fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect::<String>()
        .trim_end()
        .to_string()
}

fn start(yaml: &str) -> RunningProxy {
    Proxy::start(ProxyOptions::loopback(inline(yaml))).expect("proxy starts")
}

fn lua_errors(p: &RunningProxy) -> u64 {
    p.metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix("warden_lua_errors_total "))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Envoy's docs: headers added on the request reach the upstream, and the response script
/// edits the response's headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_manipulation_on_request_and_response() {
    let up = echo_http("up").await;
    let proxy = start(&format!(
        "{}{}",
        http_config(up.addr, "", ""),
        lua_filter(
            r#"function envoy_on_request(request_handle)
  request_handle:headers():add("foo", "bar")
  request_handle:headers():replace("user-agent", "lua")
  request_handle:headers():remove("x-drop")
end
function envoy_on_response(response_handle)
  response_handle:headers():add("response-foo", "bar")
  response_handle:headers():add("status-seen", response_handle:headers():get(":status"))
end"#
        )
    ));
    let r = client()
        .get(format!("http://{}/hello?x=1", addr(&proxy, 0)))
        .header("user-agent", "curl")
        .header("x-drop", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-echo-h-foo"],
        "bar",
        "request header reached upstream"
    );
    assert_eq!(r.headers()["x-echo-h-user-agent"], "lua");
    assert!(r.headers().get("x-echo-h-x-drop").is_none());
    assert_eq!(r.headers()["response-foo"], "bar");
    assert_eq!(r.headers()["status-seen"], "200");
    proxy.shutdown(Duration::from_secs(1));
}

/// Envoy's docs: `respond()` with headers and a body answers before the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_with_a_body_answers_without_the_upstream() {
    let up = counting_echo().await;
    let proxy = start(&format!(
        "{}{}",
        http_config(up.http_addr().unwrap(), "", ""),
        lua_filter(
            r#"function envoy_on_request(request_handle)
  if request_handle:headers():get("user-agent") == "badbot" then
    request_handle:respond({[":status"] = "403", ["upstream_foo"] = "bar"}, "nope")
  end
end"#
        )
    ));
    let url = format!("http://{}/", addr(&proxy, 0));
    let r = client()
        .get(&url)
        .header("user-agent", "badbot")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.headers()["upstream_foo"], "bar");
    assert_eq!(r.text().await.unwrap(), "nope");
    assert_eq!(up.total(), 0);
    let r = client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.total(), 1);
    proxy.shutdown(Duration::from_secs(1));
}

/// `LuaPerRoute` through HTTP_ROUTE patches: disabled on one route, another script by name
/// (`source_codes`) on a second, inline `source_code` on a third, the default elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_route_disable_and_override() {
    let up = echo_http("up").await;
    let routes = r#"
  - name: admin
    match: [{uri: {prefix: /admin}}]
    route: [{destination: {host: echo.internal}}]
  - name: named
    match: [{uri: {prefix: /named}}]
    route: [{destination: {host: echo.internal}}]
  - name: inline
    match: [{uri: {prefix: /inline}}]
    route: [{destination: {host: echo.internal}}]"#;
    let per_route = |route: &str, config: &str| {
        format!(
            r#"    - applyTo: HTTP_ROUTE
      match:
        context: GATEWAY
        routeConfiguration: {{vhost: {{route: {{name: {route}}}}}}}
      patch:
        operation: MERGE
        value:
          typed_per_filter_config:
            envoy.filters.http.lua:
              "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute
              {config}
"#
        )
    };
    let filter = lua_filter_with(
        r#"default_source_code:
  inline_string: |
    function envoy_on_request(h) h:headers():add("x-lua", "default") end
source_codes:
  special:
    inline_string: |
      function envoy_on_request(h) h:headers():add("x-lua", "special") end"#,
    );
    let yaml = format!(
        "{}{}{}{}{}",
        http_config(up.addr, routes, ""),
        filter,
        per_route("admin", "disabled: true"),
        per_route("named", "name: special"),
        per_route(
            "inline",
            r#"source_code: {inline_string: "function envoy_on_request(h) h:headers():add('x-lua', 'inline') end"}"#
        ),
    );
    let proxy = start(&yaml);
    for (path, want) in [
        ("/admin", None),
        ("/named", Some("special")),
        ("/inline", Some("inline")),
        ("/other", Some("default")),
    ] {
        let r = client()
            .get(format!("http://{}{path}", addr(&proxy, 0)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(
            r.headers()
                .get("x-echo-h-x-lua")
                .map(|v| v.to_str().unwrap()),
            want,
            "{path}"
        );
    }
    proxy.shutdown(Duration::from_secs(1));
}

/// Envoy's answer to a script error: logged, counted, and the request goes on as the script
/// left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_error_is_counted_and_the_request_goes_on() {
    let up = echo_http("up").await;
    let proxy = start(&format!(
        "{}{}",
        http_config(up.addr, "", ""),
        lua_filter(
            r#"function envoy_on_request(h)
  h:headers():add("x-before", "1")
  error("boom")
end"#
        )
    ));
    let r = client()
        .get(format!("http://{}/", addr(&proxy, 0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-echo-h-x-before"], "1");
    assert_eq!(lua_errors(&proxy), 1);
    proxy.shutdown(Duration::from_secs(1));
}

/// `while true do end` and a script that eats memory are stopped by the instruction and
/// memory limits; the proxy's one worker keeps serving other requests, during and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_and_memory_hungry_scripts_are_stopped_and_the_worker_keeps_serving() {
    let up = echo_http("up").await;
    let proxy = start(&format!(
        "{}{}",
        http_config(up.addr, "", ""),
        lua_filter(
            r#"function envoy_on_request(h)
  local mode = h:headers():get("x-mode")
  if mode == "loop" then
    while true do end
  elseif mode == "eat" then
    local t = {}
    for i = 1, 1e9 do t[i] = string.rep("x", 4096) .. i end
  end
  h:headers():add("x-lua", "ran")
end"#
        )
    ));
    let url = format!("http://{}/", addr(&proxy, 0));
    let send = |mode: &'static str| {
        let url = url.clone();
        async move {
            let r = client()
                .get(url)
                .header("x-mode", mode)
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.headers().contains_key("x-echo-h-x-lua"),
            )
        }
    };
    let (looped, normal, ate, normal2) =
        tokio::join!(send("loop"), send("none"), send("eat"), send("none"));
    // Stopped scripts: the request goes on without the script's header (Envoy's answer to
    // a script error); the others ran.
    assert_eq!(looped, (200, false));
    assert_eq!(ate, (200, false));
    assert_eq!(normal, (200, true));
    assert_eq!(normal2, (200, true));
    assert_eq!(lua_errors(&proxy), 2);
    for _ in 0..5 {
        assert_eq!(send("none").await, (200, true), "the state serves on");
    }
    proxy.shutdown(Duration::from_secs(1));
}

/// `warden check` (and start-up) compiles every script: a syntax error names the
/// EnvoyFilter's file and line and the script's line.
#[test]
fn syntax_errors_name_the_file_line_and_the_script_line() {
    let yaml = format!(
        "{}{}",
        http_config("127.0.0.1:1".parse().unwrap(), "", ""),
        lua_filter("function envoy_on_request(h)\n  local x = = 1\nend")
    );
    let err = Proxy::start(ProxyOptions::loopback(inline(&yaml)))
        .err()
        .expect("refused")
        .to_string();
    let key_line = yaml
        .lines()
        .position(|l| l.trim_start().starts_with("inlineCode:"))
        .unwrap()
        + 1;
    assert!(err.contains("EnvoyFilter/lua"), "{err}");
    // The field's line is the block's first line, the one after its key.
    assert!(
        err.contains(&format!("test.yaml:{}", key_line + 1)),
        "{err}"
    );
    assert!(err.contains("script line 2"), "{err}");
    assert!(
        err.contains(&format!("file line {}", key_line + 2)),
        "{err}"
    );
}

/// Envoy's docs: dynamic metadata a script sets feeds a rate limit `metadata` action. The
/// script maps an API key to a tenant; `warden ratelimit` (in process, memory) allows 3 a
/// minute per tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_metadata_from_lua_keys_a_global_rate_limit() {
    use std::sync::Arc;
    use warden_ratelimit::{ConfigSource, ManualClock, Server, Settings};
    let dir = warden_testkit::TempDir::new("lua-rls").unwrap();
    dir.write(
        "config.yaml",
        "domain: ratelimit\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
    )
    .unwrap();
    let settings =
        Settings::loopback_for_tests(ConfigSource::Paths(vec![dir.path().to_path_buf()]));
    let rls = Server::start_with_clock(settings, Arc::new(ManualClock::new(1_700_000_010_000)))
        .await
        .expect("rls starts");
    let up = echo_http("up").await;
    let lua = lua_filter(
        r#"function envoy_on_request(request_handle)
  local key = request_handle:headers():get("x-api-key")
  if key then
    request_handle:streamInfo():dynamicMetadata():set("envoy.filters.http.lua", "tenant", "t-" .. key)
  end
end"#,
    );
    let limits = format!(
        r#"    - applyTo: HTTP_FILTER
      match:
        context: GATEWAY
        listener:
          filterChain:
            filter:
              name: envoy.filters.network.http_connection_manager
              subFilter: {{name: envoy.filters.http.router}}
      patch:
        operation: INSERT_BEFORE
        value:
          name: envoy.filters.http.ratelimit
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
            domain: ratelimit
            failure_mode_deny: true
            timeout: 1s
            rate_limit_service:
              grpc_service:
                envoy_grpc: {{cluster_name: "outbound|{port}||127.0.0.1"}}
              transport_api_version: V3
    - applyTo: VIRTUAL_HOST
      match:
        context: GATEWAY
        routeConfiguration: {{vhost: {{name: "", route: {{action: ANY}}}}}}
      patch:
        operation: MERGE
        value:
          rate_limits:
            - actions:
                - metadata:
                    descriptor_key: tenant
                    metadata_key:
                      key: envoy.filters.http.lua
                      path: [{{key: tenant}}]
"#,
        port = rls.grpc_addr().port()
    );
    let proxy = start(&format!("{}{lua}\n{limits}", http_config(up.addr, "", "")));
    let url = format!("http://{}/", addr(&proxy, 0));
    let mut got = Vec::new();
    for key in ["a", "a", "a", "a", "b", "b", "b", "b"] {
        let r = client()
            .get(&url)
            .header("x-api-key", key)
            .send()
            .await
            .unwrap();
        got.push(r.status().as_u16());
    }
    assert_eq!(got, [200, 200, 200, 429, 200, 200, 200, 429]);
    // No API key: no metadata, so the action drops the descriptor and nothing is limited.
    for _ in 0..5 {
        let r = client().get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    proxy.shutdown(Duration::from_secs(1));
    rls.shutdown().await;
}

/// Dynamic metadata a script sets is in the request's access log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_metadata_reaches_the_access_log() {
    let dir = warden_testkit::TempDir::new("lua-log").unwrap();
    let log = dir.path().join("access.log");
    let up = echo_http("up").await;
    let yaml = format!(
        "{}{}",
        http_config(up.addr, "", ""),
        lua_filter(
            r#"function envoy_on_request(h)
  h:streamInfo():dynamicMetadata():set("envoy.filters.http.lua", "tier", "gold")
end"#
        )
    );
    let mut options = ProxyOptions::loopback(inline(&yaml));
    options.access_log = Some(warden_proxy::AccessLogTarget::File(log.clone()));
    let proxy = Proxy::start(options).expect("proxy starts");
    let r = client()
        .get(format!("http://{}/", addr(&proxy, 0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(warden_testkit::wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&log).is_ok_and(|t| !t.is_empty())
    }));
    let line = std::fs::read_to_string(&log).unwrap();
    let entry: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(
        entry["dynamic_metadata"]["envoy.filters.http.lua"]["tier"], "gold",
        "{line}"
    );
    proxy.shutdown(Duration::from_secs(1));
}

/// Istio's EnvoyFilter docs: a script calls `lua_cluster` (added by a CLUSTER patch) and
/// waits for its answer; here the answer's status and body become request headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_call_to_a_cluster_added_by_a_cluster_patch() {
    let up = echo_http("up").await;
    let acl = echo_http("acl").await;
    let lua = lua_filter(
        r#"function envoy_on_request(request_handle)
  -- Make an HTTP call to an upstream host with the following headers, body, and timeout.
  local headers, body = request_handle:httpCall(
   "lua_cluster",
   {
    [":method"] = "POST",
    [":path"] = "/acl",
    [":authority"] = "internal.org.net"
   },
  "authorize call",
  5000)
  request_handle:headers():add("x-acl-status", headers[":status"])
  request_handle:headers():add("x-acl-body", body)
  request_handle:headers():add("x-acl-name", headers["x-upstream"])
  request_handle:headers():add("x-acl-host", headers["x-echo-h-host"])
  local h2 = request_handle:httpCall("missing_cluster",
    {[":method"] = "GET", [":path"] = "/", [":authority"] = "x"}, "", 100)
  request_handle:headers():add("x-missing-status", h2[":status"])
end"#,
    );
    let cluster = cluster_patch("lua_cluster", acl.addr.port());
    let proxy = start(&format!("{}{lua}\n{cluster}", http_config(up.addr, "", "")));
    let r = client()
        .get(format!("http://{}/", addr(&proxy, 0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-echo-h-x-acl-status"], "200");
    assert_eq!(r.headers()["x-echo-h-x-acl-body"], "authorize call");
    assert_eq!(r.headers()["x-echo-h-x-acl-name"], "acl");
    assert_eq!(r.headers()["x-echo-h-x-acl-host"], "internal.org.net");
    assert_eq!(r.headers()["x-echo-h-x-missing-status"], "503");
    proxy.shutdown(Duration::from_secs(1));
}

/// Envoy's docs: `body()` buffers the request body; its size becomes a header, and
/// `setBytes` replaces what the upstream gets (with its length). A body over the buffer
/// limit is answered 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_buffering_reads_and_replaces_the_request_body() {
    let up = echo_http("up").await;
    let proxy = start(&format!(
        "{}{}",
        http_config(up.addr, "", ""),
        lua_filter(
            r#"function envoy_on_request(request_handle)
  local body = request_handle:body()
  if body == nil then return end
  local size = body:length()
  request_handle:headers():add("request_body_size", size)
  if request_handle:headers():get("x-rewrite") then
    body:setBytes(string.upper(body:getBytes(0, size)) .. "!")
  end
end"#
        )
    ));
    let url = format!("http://{}/upload", addr(&proxy, 0));
    let r = client()
        .post(&url)
        .body("hello world")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-echo-h-request_body_size"], "11");
    assert_eq!(r.text().await.unwrap(), "hello world");
    let r = client()
        .post(&url)
        .header("x-rewrite", "1")
        .body("hello world")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-echo-h-content-length"], "12");
    assert_eq!(r.text().await.unwrap(), "HELLO WORLD!");
    let r = client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200, "a body-less request passes");
    let r = client()
        .post(&url)
        .body(vec![b'x'; (1 << 20) + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    proxy.shutdown(Duration::from_secs(1));
}

/// Envoy's docs ("Script examples"), the first script unchanged: the request script waits for
/// the request body, the response script for the response body, each adding its size; `foo`
/// is removed from the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_and_response_body_sizes_from_envoy_docs() {
    let up = echo_http("up").await;
    let proxy = start(&format!(
        "{}{}",
        http_config(up.addr, "", ""),
        lua_filter(
            r#"-- Called on the request path.
function envoy_on_request(request_handle)
  -- Wait for the entire request body and add a request header with the body size.
  request_handle:headers():add("request_body_size", request_handle:body():length())
end

-- Called on the response path.
function envoy_on_response(response_handle)
  -- Wait for the entire response body and add a response header with the body size.
  response_handle:headers():add("response_body_size", response_handle:body():length())
  -- Remove a response header named 'foo'
  response_handle:headers():remove("foo")
end"#
        )
    ));
    let r = client()
        .post(format!("http://{}/echo", addr(&proxy, 0)))
        .header("foo", "kept upstream")
        .body("hello world")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-echo-h-request_body_size"], "11");
    assert_eq!(r.headers()["response_body_size"], "11");
    assert_eq!(r.headers()["x-echo-h-foo"], "kept upstream");
    assert_eq!(r.text().await.unwrap(), "hello world");
    assert_eq!(lua_errors(&proxy), 0);
    proxy.shutdown(Duration::from_secs(1));
}

/// An HTTP/1.1 upstream's 404 with a JSON body (read by the proxy's own exchange: its header
/// lines are kept as read until a script reads them).
fn json_404(_head: &str) -> Vec<u8> {
    b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\nx-raw: 1\r\ncontent-length: 18\r\n\r\n{\"error\":\"absent\"}".to_vec()
}

/// Envoy's docs: rewriting an upstream's non-2xx JSON answer as HTML, through `body()` (the
/// body is buffered, `content-length` follows the new body) and through `bodyChunks()` (the
/// body streams, chunk by chunk, without its length).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_body_rewritten_with_body_and_body_chunks_from_envoy_docs() {
    let up = raw_upstream(json_404).await;
    let with_body = r#"function envoy_on_response(response_handle)
  response_handle:body():setBytes("<html><b>Not Found<b></html>")
  response_handle:headers():replace("content-type", "text/html")
end"#;
    let with_chunks = r#"function envoy_on_response(response_handle)

  -- Sets the content-type.
  response_handle:headers():replace("content-type", "text/html")

  local last
  for chunk in response_handle:bodyChunks() do
    -- Clears each received chunk.
    chunk:setBytes("")
    last = chunk
  end

  last:setBytes("<html><b>Not Found<b></html>")
end"#;
    for (script, length) in [(with_body, Some("28")), (with_chunks, None)] {
        let proxy = start(&format!(
            "{}{}",
            http_config(up, "", ""),
            lua_filter(script)
        ));
        let r = client()
            .get(format!("http://{}/missing", addr(&proxy, 0)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()["content-type"], "text/html");
        assert_eq!(
            r.headers()
                .get("content-length")
                .map(|v| v.to_str().unwrap()),
            length
        );
        assert_eq!(
            r.headers()["x-raw"],
            "1",
            "the upstream's other headers stay"
        );
        assert_eq!(r.text().await.unwrap(), "<html><b>Not Found<b></html>");
        assert_eq!(lua_errors(&proxy), 0);
        proxy.shutdown(Duration::from_secs(1));
    }
}

/// A response body over the buffer limit (Envoy's default 1 MiB) that a script waits for is
/// answered 500, as Envoy answers it; a script that never asks for the body leaves the same
/// response streaming through whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_body_over_the_limit_is_answered_500_only_when_a_script_reads_it() {
    let up = echo_http("up").await;
    let big = vec![b'x'; (1 << 20) + 1];
    let reads = r#"function envoy_on_response(h)
  h:headers():add("x-size", h:body():length())
end"#;
    let headers_only = r#"function envoy_on_response(h)
  h:headers():add("x-size", "unread")
end"#;
    for (script, want) in [(reads, 500), (headers_only, 200)] {
        let proxy = start(&format!(
            "{}{}",
            http_config(up.addr, "", ""),
            lua_filter(script)
        ));
        let url = format!("http://{}/echo", addr(&proxy, 0));
        let r = client().post(&url).body(big.clone()).send().await.unwrap();
        assert_eq!(r.status(), want, "{script}");
        if want == 200 {
            assert_eq!(r.headers()["x-size"], "unread");
            assert_eq!(r.bytes().await.unwrap().len(), big.len());
        } else {
            assert_eq!(r.text().await.unwrap(), "Internal Server Error");
        }
        // A body within the limit is read and passed on.
        let r = client().post(&url).body("small").send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["x-size"],
            if want == 500 { "5" } else { "unread" }
        );
        assert_eq!(r.text().await.unwrap(), "small");
        proxy.shutdown(Duration::from_secs(1));
    }
}

/// A CLUSTER ADD patch (Istio's EnvoyFilter docs' shape) naming `name` at 127.0.0.1:`port`.
fn cluster_patch(name: &str, port: u16) -> String {
    format!(
        r#"    - applyTo: CLUSTER
      match:
        context: GATEWAY
      patch:
        operation: ADD
        value:
          name: "{name}"
          type: STRICT_DNS
          connect_timeout: 0.5s
          lb_policy: ROUND_ROBIN
          load_assignment:
            cluster_name: {name}
            endpoints:
            - lb_endpoints:
              - endpoint:
                  address:
                    socket_address:
                      protocol: TCP
                      address: "127.0.0.1"
                      port_value: {port}
"#
    )
}

/// `httpCall()` in the response flow, as Envoy allows it: a synchronous call whose answer
/// becomes a response header (the response waits for it), and an asynchronous one that is
/// sent while the response goes on (Envoy's `options` table form).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_call_in_the_response_flow_sync_and_async() {
    let up = echo_http("up").await;
    let acl = echo_http("acl").await;
    let audit = counting_echo().await;
    let lua = lua_filter(
        r#"function envoy_on_response(response_handle)
  local headers, body = response_handle:httpCall(
    "lua_cluster",
    {[":method"] = "POST", [":path"] = "/stamp", [":authority"] = "lua_cluster"},
    response_handle:headers():get(":status"),
    5000)
  response_handle:headers():add("x-stamp-status", headers[":status"])
  response_handle:headers():add("x-stamp-body", body)
  response_handle:httpCall("audit_cluster",
    {[":method"] = "GET", [":path"] = "/audit", [":authority"] = "audit"}, "",
    {["asynchronous"] = true, ["timeout_ms"] = 1000})
end"#,
    );
    let yaml = format!(
        "{}{lua}\n{}{}",
        http_config(up.addr, "", ""),
        cluster_patch("lua_cluster", acl.addr.port()),
        cluster_patch("audit_cluster", audit.http_addr().unwrap().port()),
    );
    let proxy = start(&yaml);
    let r = client()
        .get(format!("http://{}/status/201", addr(&proxy, 0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["x-stamp-status"], "200");
    assert_eq!(
        r.headers()["x-stamp-body"],
        "201",
        "the call carried the status"
    );
    assert_eq!(r.headers()["x-upstream"], "up");
    assert!(
        warden_testkit::wait_until(Duration::from_secs(5), || audit.total() == 1),
        "the asynchronous call was sent"
    );
    assert_eq!(lua_errors(&proxy), 0);
    proxy.shutdown(Duration::from_secs(1));
}

/// Runs tests/lua/h2_trailers_client.py (python-h2, Debian's python3-h2) against `at`.
async fn h2_post(
    at: std::net::SocketAddr,
    path: &str,
    body: &str,
    trailers: &[&str],
) -> serde_json::Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/lua/h2_trailers_client.py"
    );
    let mut args = vec![
        script.to_string(),
        at.ip().to_string(),
        at.port().to_string(),
        path.to_string(),
        body.to_string(),
    ];
    args.extend(trailers.iter().map(|t| t.to_string()));
    let out = tokio::process::Command::new("/usr/bin/python3")
        .args(&args)
        .output()
        .await
        .expect("python3 runs (Debian's python3-h2: apt-get install python3-h2)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `trailers()` in both flows over HTTP/2: python-h2 sends a body with trailers, the request
/// script reads them (after `body()`, as Envoy asks) into a header and adds one; the upstream
/// (h2c, an HTTP2 port) echoes body and trailers back, and the response script edits the
/// response's trailers. Without trailers `trailers()` is nil in both flows. An HTTP/1.1
/// chunked request's trailers reach the request script too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_in_the_request_and_response_flows() {
    let up = echo_http("up").await;
    let lua = lua_filter(
        r#"function envoy_on_request(request_handle)
  request_handle:headers():add("x-protocol", request_handle:streamInfo():protocol())
  request_handle:body()
  local trailers = request_handle:trailers()
  if trailers == nil then
    request_handle:headers():add("x-request-trailers", "none")
  else
    request_handle:headers():add("x-request-checksum", trailers:get("x-checksum"))
    trailers:add("x-lua-request", "added")
  end
end
function envoy_on_response(response_handle)
  response_handle:body()
  local trailers = response_handle:trailers()
  if trailers == nil then
    response_handle:headers():add("x-response-trailers", "none")
  else
    response_handle:headers():add("x-response-trailers", trailers:getNumValues("x-checksum"))
    trailers:replace("x-checksum", "lua:" .. trailers:get("x-checksum"))
  end
end"#,
    );
    let yaml = format!("{}{lua}", http_config(up.addr, "", ""))
        .replace("protocol: HTTP}", "protocol: HTTP2}");
    let proxy = start(&yaml);
    let at = addr(&proxy, 0);

    let r = h2_post(at, "/echo", "hello", &["x-checksum=abc"]).await;
    assert_eq!(r["reset"], serde_json::Value::Null, "{r}");
    assert_eq!(r["headers"][":status"], "200", "{r}");
    assert_eq!(r["headers"]["x-echo-h-x-request-checksum"], "abc", "{r}");
    assert_eq!(r["headers"]["x-echo-h-x-protocol"], "HTTP/2", "{r}");
    assert_eq!(r["headers"]["x-response-trailers"], "1", "{r}");
    assert_eq!(r["body"], "hello", "{r}");
    assert_eq!(r["trailers"]["x-checksum"], "lua:abc", "{r}");
    assert_eq!(r["trailers"]["x-lua-request"], "added", "{r}");

    let r = h2_post(at, "/echo", "hello", &[]).await;
    assert_eq!(r["headers"]["x-echo-h-x-request-trailers"], "none", "{r}");
    assert_eq!(r["headers"]["x-response-trailers"], "none", "{r}");
    assert_eq!(r["body"], "hello", "{r}");
    assert_eq!(r["trailers"], serde_json::Value::Null, "{r}");

    // HTTP/1.1: a chunked body with a trailer line.
    let text = common::raw(
        at,
        b"POST /echo HTTP/1.1\r\nhost: lua.test\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n5\r\nhello\r\n0\r\nx-checksum: h1\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("x-echo-h-x-request-checksum: h1"), "{text}");
    assert!(text.contains("x-echo-h-x-protocol: HTTP/1.1"), "{text}");
    assert_eq!(lua_errors(&proxy), 0);
    proxy.shutdown(Duration::from_secs(1));
}

/// `streamInfo()` in both flows and `connection():ssl()` on a MUTUAL TLS gateway with curl
/// presenting a SPIFFE client certificate; the response script's `setHttp1ReasonPhrase`
/// is the status line's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_info_ssl_connection_and_reason_phrase_over_mutual_tls() {
    use warden_testkit::pki::{Leaf, Pki};
    let up = echo_http("up").await;
    let pki = Pki::new("lua-gw");
    let (cert, key) = pki.issue("gw", &common::leaf("lua.example.com"));
    let (client_cert, client_key) = pki.issue(
        "client",
        &Leaf {
            common_name: "client".into(),
            uris: vec!["spiffe://cluster.local/ns/default/sa/client".into()],
            dns: vec!["client.example.com".into()],
            ..Leaf::default()
        },
    );
    let yaml = format!(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  servers:
  - port: {{number: 0, protocol: HTTPS, name: https}}
    hosts: ["*"]
    tls: {{mode: MUTUAL, serverCertificate: {cert}, privateKey: {key}, caCertificates: {ca}}}
{se}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: site}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - name: all
    route: [{{destination: {{host: echo.internal}}}}]
{lua}"#,
        cert = cert.display(),
        key = key.display(),
        ca = pki.ca_path.display(),
        se = common::service_entry("echo.internal", &[up.addr]),
        lua = lua_filter(
            r#"function envoy_on_request(request_handle)
  local info = request_handle:streamInfo()
  local h = request_handle:headers()
  h:add("x-protocol", info:protocol())
  h:add("x-route", info:routeName())
  h:add("x-sni", info:requestedServerName())
  h:add("x-local", info:downstreamLocalAddress())
  h:add("x-direct-remote", info:downstreamDirectRemoteAddress())
  h:add("x-remote", info:downstreamRemoteAddress())
  h:add("x-virtual-cluster", "[" .. info:virtualClusterName() .. "]")
  local ssl = request_handle:connection():ssl()
  if ssl == nil then
    h:add("x-ssl", "plain")
  else
    h:add("x-ssl", "secure")
    h:add("x-peer-presented", tostring(ssl:peerCertificatePresented()))
    h:add("x-peer-uri", table.concat(ssl:uriSanPeerCertificate(), ","))
    h:add("x-peer-dns", table.concat(ssl:dnsSansPeerCertificate(), ","))
    h:add("x-peer-subject", ssl:subjectPeerCertificate())
    h:add("x-tls", ssl:tlsVersion())
  end
  h:add("x-stream-ssl", tostring(info:downstreamSslConnection() ~= nil))
end
function envoy_on_response(response_handle)
  local info = response_handle:streamInfo()
  response_handle:headers():add("x-response-protocol", info:protocol())
  response_handle:headers():add("x-response-route", info:routeName())
  response_handle:headers():setHttp1ReasonPhrase("Lua Says OK")
end"#
        ),
    );
    let proxy = start(&yaml);
    let at = addr(&proxy, 0);
    let args: Vec<String> = [
        "-sS",
        "--http1.1",
        "--max-time",
        "10",
        "--cacert",
        &pki.ca_path.display().to_string(),
        "--cert",
        &client_cert.display().to_string(),
        "--key",
        &client_key.display().to_string(),
        "--resolve",
        &format!("lua.example.com:{}:127.0.0.1", at.port()),
        "-o",
        "/dev/null",
        "-D",
        "-",
        &format!("https://lua.example.com:{}/info", at.port()),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let (ok, out) = common::run("curl", args).await;
    assert!(ok, "{out}");
    let header = |name: &str| {
        out.lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no {name} in {out}"))
    };
    assert!(out.starts_with("HTTP/1.1 200 Lua Says OK\r\n"), "{out}");
    assert_eq!(header("x-echo-h-x-protocol"), "HTTP/1.1");
    assert_eq!(header("x-echo-h-x-route"), "all");
    assert_eq!(header("x-echo-h-x-sni"), "lua.example.com");
    assert_eq!(header("x-echo-h-x-local"), at.to_string());
    let direct = header("x-echo-h-x-direct-remote");
    assert!(
        direct.starts_with("127.0.0.1:") && !direct.ends_with(":0"),
        "{direct}"
    );
    assert_eq!(
        header("x-echo-h-x-remote"),
        direct,
        "no x-forwarded-for: the peer"
    );
    assert_eq!(header("x-echo-h-x-virtual-cluster"), "[]");
    assert_eq!(header("x-echo-h-x-ssl"), "secure");
    assert_eq!(header("x-echo-h-x-peer-presented"), "true");
    assert_eq!(
        header("x-echo-h-x-peer-uri"),
        "spiffe://cluster.local/ns/default/sa/client"
    );
    assert_eq!(header("x-echo-h-x-peer-dns"), "client.example.com");
    assert_eq!(header("x-echo-h-x-peer-subject"), "CN=client");
    assert_eq!(header("x-echo-h-x-tls"), "TLSv1.3");
    assert_eq!(header("x-echo-h-x-stream-ssl"), "true");
    assert_eq!(header("x-response-protocol"), "HTTP/1.1");
    assert_eq!(header("x-response-route"), "all");
    assert_eq!(lua_errors(&proxy), 0);
    proxy.shutdown(Duration::from_secs(1));
}

/// Envoy's docs: `filterContext()` answers the route's `LuaPerRoute.filter_context` (here
/// with a script by name; the default script's routes get an empty table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_context_comes_from_the_routes_lua_per_route() {
    let up = echo_http("up").await;
    let routes = r#"
  - name: ctx
    match: [{uri: {prefix: /ctx}}]
    route: [{destination: {host: echo.internal}}]"#;
    let filter = lua_filter_with(
        r#"default_source_code:
  inline_string: |
    function envoy_on_request(request_handle)
      local value = request_handle:filterContext()["key"]
      request_handle:headers():add("x-ctx", tostring(value))
    end
source_codes:
  with_context:
    inline_string: |
      function envoy_on_request(request_handle)
        -- Get the filter context
        local filter_context = request_handle:filterContext()

        -- Access the filter context data
        local value = filter_context["key"]
        request_handle:headers():add("x-ctx", value)
      end
      function envoy_on_response(response_handle)
        response_handle:headers():add("x-ctx-response", response_handle:filterContext()["key"])
      end"#,
    );
    let per_route = r#"    - applyTo: HTTP_ROUTE
      match:
        context: GATEWAY
        routeConfiguration: {vhost: {route: {name: ctx}}}
      patch:
        operation: MERGE
        value:
          typed_per_filter_config:
            envoy.filters.http.lua:
              "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute
              name: with_context
              filter_context:
                key: xxxxxx
"#;
    let proxy = start(&format!(
        "{}{filter}\n{per_route}",
        http_config(up.addr, routes, "")
    ));
    let get = |path: &'static str| {
        let url = format!("http://{}{path}", addr(&proxy, 0));
        async move { client().get(url).send().await.unwrap() }
    };
    let r = get("/ctx").await;
    assert_eq!(r.headers()["x-echo-h-x-ctx"], "xxxxxx");
    assert_eq!(r.headers()["x-ctx-response"], "xxxxxx");
    let r = get("/other").await;
    assert_eq!(r.headers()["x-echo-h-x-ctx"], "nil");
    assert_eq!(lua_errors(&proxy), 0);
    proxy.shutdown(Duration::from_secs(1));
}

/// Envoy's docs: after a script changes what routing reads, `clearRouteCache()` routes the
/// request again; without it the request keeps the route it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_route_cache_routes_the_changed_request_again() {
    let up = echo_http("up").await;
    let routes = r#"
  - name: moved
    match: [{uri: {prefix: /new}}]
    directResponse: {status: 200, body: {string: "the new route"}}"#;
    let proxy = start(&format!(
        "{}{}",
        http_config(up.addr, routes, ""),
        lua_filter(
            r#"function envoy_on_request(request_handle)
  request_handle:headers():replace(":path", "/new/place")
  if request_handle:headers():get("x-clear") then
    -- Clear the route cache
    request_handle:clearRouteCache()
  end
end"#
        )
    ));
    let url = format!("http://{}/old", addr(&proxy, 0));
    let r = client()
        .get(&url)
        .header("x-clear", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-upstream").is_none());
    assert_eq!(r.text().await.unwrap(), "the new route");
    let r = client().get(&url).send().await.unwrap();
    assert_eq!(r.headers()["x-upstream"], "up", "the route it had");
    assert_eq!(r.headers()["x-echo-path"], "/new/place");
    proxy.shutdown(Duration::from_secs(1));
}

/// The request body is read only when the script calls `body()`: a script that could but
/// does not leaves an upload over the buffer limit streaming to the upstream whole; when it
/// does, the same upload is answered 413, as Envoy answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_body_is_read_only_when_the_script_asks() {
    let up = echo_http("up").await;
    let proxy = start(&format!(
        "{}{}",
        http_config(up.addr, "", ""),
        lua_filter(
            r#"function envoy_on_request(h)
  if h:headers():get("x-read") then
    h:headers():add("x-size", h:body():length())
  end
  h:headers():add("x-lua", "ran")
end"#
        )
    ));
    let url = format!("http://{}/upload", addr(&proxy, 0));
    let big = vec![b'x'; (1 << 20) + 1];
    let r = client().post(&url).body(big.clone()).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-echo-h-x-lua"], "ran");
    assert_eq!(r.bytes().await.unwrap().len(), big.len());
    let r = client()
        .post(&url)
        .header("x-read", "1")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = client()
        .post(&url)
        .header("x-read", "1")
        .body("12345")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-echo-h-x-size"], "5");
    assert_eq!(r.text().await.unwrap(), "12345");
    proxy.shutdown(Duration::from_secs(1));
}

/// `bodyChunks()` streams: bodies over the buffer limit go through a chunk loop in both flows
/// (Envoy does not buffer them), each chunk changed as the script leaves it; headers the script
/// set before its loop go on first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_chunks_stream_bodies_over_the_buffer_limit() {
    let up = echo_http("up").await;
    let proxy = start(&format!(
        "{}{}",
        http_config(up.addr, "", ""),
        lua_filter(
            r#"function envoy_on_request(request_handle)
  request_handle:headers():add("x-request-streamed", "yes")
  for chunk in request_handle:bodyChunks() do
    chunk:setBytes(string.upper(chunk:getBytes(0, chunk:length())))
  end
end
function envoy_on_response(response_handle)
  response_handle:headers():add("x-response-streamed", "yes")
  local n = 0
  for chunk in response_handle:bodyChunks() do
    n = n + chunk:length()
    chunk:setBytes((string.gsub(chunk:getBytes(0, chunk:length()), "X", "y")))
  end
  response_handle:logInfo("streamed " .. n .. " bytes")
end"#
        )
    ));
    let big = vec![b'x'; 3 << 20];
    let r = client()
        .post(format!("http://{}/echo", addr(&proxy, 0)))
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-echo-h-x-request-streamed"], "yes");
    assert_eq!(r.headers()["x-response-streamed"], "yes");
    let body = r.bytes().await.unwrap();
    assert_eq!(body.len(), big.len());
    assert!(
        body.iter().all(|b| *b == b'y'),
        "upper-cased, then replaced"
    );
    assert_eq!(lua_errors(&proxy), 0);
    proxy.shutdown(Duration::from_secs(1));
}

/// Envoy's docs: `metadata()` answers the route's metadata under the filter's name (or, with
/// none there, under `envoy.filters.http.lua`), here merged into routes by HTTP_ROUTE patches
/// (one for every route, one for a named route); later merges override earlier fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_metadata_from_merge_patches() {
    let up = echo_http("up").await;
    let routes = r#"
  - name: tagged
    match: [{uri: {prefix: /tagged}}]
    route: [{destination: {host: echo.internal}}]"#;
    let lua = lua_filter(
        r#"function envoy_on_request(request_handle)
  local metadata = request_handle:metadata()
  request_handle:headers():add("x-foo", tostring(metadata:get("foo")))
  request_handle:headers():add("x-tier", tostring(metadata:get("tier")))
  local n = 0
  for key, value in pairs(metadata) do n = n + 1 end
  request_handle:headers():add("x-keys", n)
end
function envoy_on_response(response_handle)
  response_handle:headers():add("x-foo", tostring(response_handle:metadata():get("foo")))
end"#,
    );
    let patches = r#"    - applyTo: HTTP_ROUTE
      match:
        context: GATEWAY
      patch:
        operation: MERGE
        value:
          metadata:
            filter_metadata:
              envoy.filters.http.lua:
                foo: every-route
                tier: bronze
    - applyTo: HTTP_ROUTE
      match:
        context: GATEWAY
        routeConfiguration: {vhost: {route: {name: tagged}}}
      patch:
        operation: MERGE
        value:
          metadata:
            filter_metadata:
              envoy.filters.http.lua:
                foo: bar
                list: [1, 2]
              envoy.filters.http.other:
                foo: not ours
"#;
    let proxy = start(&format!(
        "{}{lua}\n{patches}",
        http_config(up.addr, routes, "")
    ));
    for (path, foo, tier, keys) in [
        ("/tagged", "bar", "bronze", "3"),
        ("/other", "every-route", "bronze", "2"),
    ] {
        let r = client()
            .get(format!("http://{}{path}", addr(&proxy, 0)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["x-echo-h-x-foo"], foo, "{path}");
        assert_eq!(r.headers()["x-echo-h-x-tier"], tier, "{path}");
        assert_eq!(r.headers()["x-echo-h-x-keys"], keys, "{path}");
        assert_eq!(r.headers()["x-foo"], foo, "{path}: the response flow too");
    }
    assert_eq!(lua_errors(&proxy), 0);
    proxy.shutdown(Duration::from_secs(1));
}
