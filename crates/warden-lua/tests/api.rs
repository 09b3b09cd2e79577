//! Envoy's Lua API over plain data: the seed article's script and its edits, the Envoy docs'
//! examples, and the limits.

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use warden_lua::{ErrorKind, HeaderList, HttpReply, Limits, Phase, Program, Run, Script, Stream};

/// Source article 000's script, as written there.
const SEED: &str = r#"function envoy_on_request(request_handle)
  local path = request_handle:headers():get(":path")
  local method = request_handle:headers():get(":method")
  local params_start = string.find(path, "?")
  if params_start then
    path = string.sub(path, 1, params_start - 1)
  end
  request_handle:headers():add("x-envoy-original-limit-rate-path", method .. path)
end
"#;

fn program(src: &str) -> Program {
    Program::new(
        vec![Script::compile("test.lua", src).expect("compiles")],
        Limits::default(),
    )
}

fn request(method: &str, path: &str, extra: &[(&str, &str)]) -> Stream {
    let mut headers = HeaderList::new();
    headers.add(":method", method.as_bytes());
    headers.add(":path", path.as_bytes());
    headers.add(":authority", b"example.com".to_vec());
    headers.add(":scheme", b"http".to_vec());
    for (n, v) in extra {
        headers.add(n, v.as_bytes());
    }
    Stream {
        headers,
        ..Stream::default()
    }
}

fn text(v: Option<Vec<u8>>) -> Option<String> {
    v.map(|v| String::from_utf8(v).unwrap())
}

fn continued(run: Run) -> Stream {
    match run {
        Run::Continue(s) => s,
        other => panic!("expected Continue, got {other:?}"),
    }
}

#[test]
fn the_seed_script_and_its_three_edits() {
    let lower = SEED.replace("method .. path", "method .. string.lower(path)");
    let second = SEED.replace(
        "  request_handle:headers():add(\"x-envoy-original-limit-rate-path\", method .. path)\n",
        "  request_handle:headers():add(\"x-envoy-original-limit-rate-path\", method .. path)\n  \
         request_handle:headers():add(\"x-limit-method\", method)\n",
    );
    let replaced = SEED.replace("headers():add(", "headers():replace(");
    // (what, script, request headers, expected header values)
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a [(&'a str, &'a str)],
        &'a [(&'a str, &'a [&'a str])],
    );
    let cases: &[Case] = &[
        (
            "seed",
            SEED,
            &[],
            &[("x-envoy-original-limit-rate-path", &["GET/API/Healthz"])],
        ),
        (
            "lower",
            &lower,
            &[],
            &[("x-envoy-original-limit-rate-path", &["GET/api/healthz"])],
        ),
        (
            "second header",
            &second,
            &[],
            &[
                ("x-envoy-original-limit-rate-path", &["GET/API/Healthz"]),
                ("x-limit-method", &["GET"]),
            ],
        ),
        (
            "add keeps a client's value too",
            SEED,
            &[("x-envoy-original-limit-rate-path", "forged")],
            &[(
                "x-envoy-original-limit-rate-path",
                &["forged", "GET/API/Healthz"],
            )],
        ),
        (
            "replace drops a client's value",
            &replaced,
            &[("x-envoy-original-limit-rate-path", "forged")],
            &[("x-envoy-original-limit-rate-path", &["GET/API/Healthz"])],
        ),
    ];
    for (what, src, extra, want) in cases {
        let p = program(src);
        let out = continued(p.run(0, Phase::Request, request("GET", "/API/Healthz?i=1", extra)));
        assert!(out.headers_changed, "{what}");
        for (name, values) in *want {
            let got: Vec<String> = (0..out.headers.num_values(name))
                .map(|i| {
                    String::from_utf8(out.headers.get_at_index(name, i).unwrap().to_vec()).unwrap()
                })
                .collect();
            assert_eq!(got, *values, "{what}: {name}");
        }
    }
}

#[test]
fn header_api_reads_iterates_and_edits() {
    let p = program(
        r#"function envoy_on_request(h)
  local hs = h:headers()
  local seen = {}
  for k, v in pairs(hs) do seen[#seen + 1] = k .. "=" .. v end
  hs:add("x-seen", table.concat(seen, ";"))
  hs:add("x-n", tostring(hs:getNumValues("x-multi")))
  hs:add("x-second", hs:getAtIndex("x-multi", 1))
  hs:add("x-missing", tostring(hs:getAtIndex("x-multi", 5)))
  hs:add("x-joined", hs:get("X-Multi"))
  hs:remove("x-drop")
  hs:replace(":path", "/rewritten")
end"#,
    );
    let out = continued(p.run(
        0,
        Phase::Request,
        request(
            "POST",
            "/p",
            &[("x-multi", "a"), ("x-multi", "b"), ("x-drop", "1")],
        ),
    ));
    assert_eq!(
        text(out.headers.get("x-seen")).unwrap(),
        ":method=POST;:path=/p;:authority=example.com;:scheme=http;x-multi=a;x-multi=b;x-drop=1"
    );
    assert_eq!(text(out.headers.get("x-n")).unwrap(), "2");
    assert_eq!(text(out.headers.get("x-second")).unwrap(), "b");
    assert_eq!(text(out.headers.get("x-missing")).unwrap(), "nil");
    assert_eq!(text(out.headers.get("x-joined")).unwrap(), "a,b");
    assert_eq!(out.headers.get("x-drop"), None);
    assert_eq!(text(out.headers.get(":path")).unwrap(), "/rewritten");
}

/// Envoy's documentation: `respond()` with a body from a request script.
#[test]
fn respond_answers_with_status_headers_and_body() {
    let p = program(
        r#"function envoy_on_request(request_handle)
  if request_handle:headers():get("user-agent") == "badbot" then
    request_handle:respond({[":status"] = "403", ["x-why"] = "bot"}, "nope")
  end
  request_handle:headers():add("x-after", "reached")
end"#,
    );
    match p.run(
        0,
        Phase::Request,
        request("GET", "/", &[("user-agent", "badbot")]),
    ) {
        Run::Respond(_, r) => {
            assert_eq!(r.status, 403);
            assert_eq!(text(r.headers.get("x-why")).unwrap(), "bot");
            assert_eq!(r.body, b"nope");
        }
        other => panic!("{other:?}"),
    }
    let out = continued(p.run(
        0,
        Phase::Request,
        request("GET", "/", &[("user-agent", "curl")]),
    ));
    assert_eq!(text(out.headers.get("x-after")).unwrap(), "reached");
}

#[test]
fn dynamic_metadata_set_and_read_back() {
    let p = program(
        r#"function envoy_on_request(h)
  local meta = h:streamInfo():dynamicMetadata()
  meta:set("envoy.filters.http.lua", "tier", "gold")
  meta:set("envoy.filters.http.lua", "n", 3)
  meta:set("envoy.filters.http.lua", "list", {"a", "b"})
  h:headers():add("x-tier", meta:get("envoy.filters.http.lua")["tier"])
end"#,
    );
    let out = continued(p.run(0, Phase::Request, request("GET", "/", &[])));
    let ns = &out.dynamic_metadata["envoy.filters.http.lua"];
    assert_eq!(ns["tier"], "gold");
    assert_eq!(ns["n"], 3);
    assert_eq!(ns["list"], serde_json::json!(["a", "b"]));
    assert_eq!(text(out.headers.get("x-tier")).unwrap(), "gold");
    assert!(out.dynamic_metadata_changed);
}

#[test]
fn stream_info_connection_and_helpers() {
    fn clock() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
    }
    let p = Program::with_clock(
        vec![Script::compile(
            "info.lua",
            r#"function envoy_on_request(h)
  local i = h:streamInfo()
  local hs = h:headers()
  hs:add("x-proto", i:protocol())
  hs:add("x-local", i:downstreamLocalAddress())
  hs:add("x-direct", i:downstreamDirectRemoteAddress())
  hs:add("x-remote", i:downstreamRemoteAddress())
  hs:add("x-sni", i:requestedServerName())
  hs:add("x-route", i:routeName())
  hs:add("x-ssl", tostring(h:connection():ssl()))
  hs:add("x-ts", tostring(h:timestamp()))
  hs:add("x-ts-us", h:timestampString(EnvoyTimestampResolution.MICROSECOND))
  hs:add("x-b64", h:base64Escape("foobar"))
  hs:add("x-ctx", tostring(h:filterContext()["k"]))
  hs:add("x-meta", tostring(h:metadata():get("m")))
end"#,
        )
        .unwrap()],
        Limits::default(),
        clock,
    );
    let mut s = request("GET", "/", &[]);
    s.info.downstream_local_address = "10.0.0.1:8080".parse().unwrap();
    s.info.downstream_direct_remote_address = "10.0.0.2:5555".parse().unwrap();
    s.info.downstream_remote_address = "192.0.2.7:0".parse().unwrap();
    s.info.route_name = "api".into();
    s.filter_context.insert("k".into(), "v".into());
    s.route_metadata.insert("m".into(), "route-value".into());
    let out = continued(p.run(0, Phase::Request, s));
    let get = |n: &str| text(out.headers.get(n)).unwrap();
    assert_eq!(get("x-proto"), "HTTP/1.1");
    assert_eq!(get("x-local"), "10.0.0.1:8080");
    assert_eq!(get("x-direct"), "10.0.0.2:5555");
    assert_eq!(get("x-remote"), "192.0.2.7:0");
    assert_eq!(get("x-sni"), "");
    assert_eq!(get("x-route"), "api");
    assert_eq!(get("x-ssl"), "nil");
    assert_eq!(get("x-ts"), "1700000000123");
    assert_eq!(get("x-ts-us"), "1700000000123000");
    assert_eq!(get("x-b64"), "Zm9vYmFy");
    assert_eq!(get("x-ctx"), "v");
    assert_eq!(get("x-meta"), "route-value");
}

/// Envoy's documentation: a synchronous `httpCall` whose answer becomes a header, and an
/// asynchronous one that is only sent.
#[test]
fn http_call_suspends_and_resumes_with_the_answer() {
    let p = program(
        r#"function envoy_on_request(request_handle)
  local headers, body = request_handle:httpCall(
    "lua_cluster",
    {[":method"] = "POST", [":path"] = "/", [":authority"] = "lua_cluster"},
    "hello world",
    5000)
  request_handle:headers():add("upstream_foo", headers["foo"])
  request_handle:headers():add("upstream_body_size", #body)
  request_handle:httpCall("log_cluster",
    {[":method"] = "GET", [":path"] = "/log", [":authority"] = "log"}, "", 100, true)
end"#,
    );
    let pending = match p.run(0, Phase::Request, request("GET", "/", &[])) {
        Run::Call(pending) => pending,
        other => panic!("{other:?}"),
    };
    assert_eq!(pending.call.cluster, "lua_cluster");
    assert_eq!(pending.call.body, b"hello world");
    assert_eq!(pending.call.timeout_ms, 5000);
    assert_eq!(text(pending.call.headers.get(":method")).unwrap(), "POST");
    let mut reply = HttpReply::default();
    reply.headers.add(":status", b"200".to_vec());
    reply.headers.add("foo", b"bar".to_vec());
    reply.body = Some(b"12345".to_vec());
    let out = continued(pending.resume(reply));
    assert_eq!(text(out.headers.get("upstream_foo")).unwrap(), "bar");
    assert_eq!(text(out.headers.get("upstream_body_size")).unwrap(), "5");
    assert_eq!(out.async_calls.len(), 1);
    assert_eq!(out.async_calls[0].cluster, "log_cluster");
    assert!(out.async_calls[0].asynchronous);
}

#[test]
fn a_dropped_pending_call_frees_its_coroutine() {
    let p = program(
        r#"function envoy_on_request(h)
  h:httpCall("c", {[":method"] = "GET", [":path"] = "/", [":authority"] = "c"}, "", 10)
end"#,
    );
    for _ in 0..3 {
        match p.run(0, Phase::Request, request("GET", "/", &[])) {
            Run::Call(pending) => drop(pending),
            other => panic!("{other:?}"),
        }
    }
}

/// Envoy's documentation: the body API on a buffered body.
#[test]
fn body_reads_and_replaces_the_buffered_body() {
    let p = program(
        r#"function envoy_on_request(request_handle)
  local body = request_handle:body()
  local size = body:length()
  request_handle:headers():add("request_body_size", size)
  request_handle:headers():add("first_bytes", body:getBytes(0, 5))
  for chunk in request_handle:bodyChunks() do
    request_handle:headers():add("chunk_size", chunk:length())
  end
  body:setBytes("replaced")
end"#,
    );
    let mut s = request("POST", "/", &[]);
    s.body = Some(b"hello world".to_vec());
    let out = continued(p.run(0, Phase::Request, s));
    assert_eq!(text(out.headers.get("request_body_size")).unwrap(), "11");
    assert_eq!(text(out.headers.get("first_bytes")).unwrap(), "hello");
    assert_eq!(text(out.headers.get("chunk_size")).unwrap(), "11");
    assert_eq!(out.body.as_deref(), Some(&b"replaced"[..]));
    assert!(out.body_changed);
    let no_body =
        program("function envoy_on_request(h) h:headers():add('b', tostring(h:body())) end");
    let out = continued(no_body.run(0, Phase::Request, request("GET", "/", &[])));
    assert_eq!(text(out.headers.get("b")).unwrap(), "nil");
}

#[test]
fn response_phase_edits_response_headers() {
    let p = program(
        r#"function envoy_on_response(response_handle)
  if response_handle:headers():get(":status") == "429" then
    response_handle:headers():add("retry-after", "60")
  end
  response_handle:headers():remove("server")
end"#,
    );
    assert!(!p.has(0, Phase::Request));
    assert!(p.has(0, Phase::Response));
    let mut headers = HeaderList::new();
    headers.add(":status", b"429".to_vec());
    headers.add("server", b"upstream".to_vec());
    let out = continued(p.run(
        0,
        Phase::Response,
        Stream {
            headers,
            ..Stream::default()
        },
    ));
    assert_eq!(text(out.headers.get("retry-after")).unwrap(), "60");
    assert_eq!(out.headers.get("server"), None);
}

#[test]
fn a_runtime_error_is_reported_with_its_line_and_keeps_earlier_edits() {
    let p = program(
        "function envoy_on_request(h)\n  h:headers():add('x-before', '1')\n  local t = nil\n  \
         return t.field\nend\n",
    );
    match p.run(0, Phase::Request, request("GET", "/", &[])) {
        Run::Failed(s, e) => {
            assert_eq!(e.kind, ErrorKind::Runtime);
            assert!(e.message.starts_with("test.lua:4:"), "{}", e.message);
            assert_eq!(text(s.headers.get("x-before")).unwrap(), "1");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.errors(), 1);
}

#[test]
fn error_values_are_logged_as_their_text_first_line() {
    // (what the script raises, the message) as mlua's resume made them: the value's text
    // (`tostring`'s, `__tostring` included), first line, with Lua's position when a string.
    let cases: &[(&str, &str)] = &[
        ("error('two\\nlines')", "test.lua:1: two"),
        ("error('plain', 0)", "plain"),
        ("error(nil)", "nil"),
        (
            "error(setmetatable({}, {__tostring = function() return 'mine' end}))",
            "mine",
        ),
        ("error(42)", "42"),
        ("h:headers():get()", "bad argument"),
    ];
    for (raise, want) in cases {
        let p = program(&format!("function envoy_on_request(h) {raise} end"));
        // Twice: the second phase starts on the coroutine the first one left.
        for _ in 0..2 {
            match p.run(0, Phase::Request, request("GET", "/", &[])) {
                Run::Failed(_, e) => {
                    assert_eq!(e.kind, ErrorKind::Runtime, "{raise}");
                    assert!(e.message.contains(want), "{raise}: {}", e.message);
                    assert!(!e.message.contains('\n'), "{raise}: {}", e.message);
                }
                other => panic!("{raise}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_kept_handle_is_dead_after_its_phase() {
    let p = program(
        r#"function envoy_on_request(h)
  if kept then kept:headers():get(":path") end
  kept = h
end"#,
    );
    continued(p.run(0, Phase::Request, request("GET", "/", &[])));
    match p.run(0, Phase::Request, request("GET", "/", &[])) {
        Run::Failed(_, e) => assert!(e.message.contains("object used outside of proper scope")),
        other => panic!("{other:?}"),
    }
}

/// A runaway and a memory-hungry script are stopped; the same state then serves the next
/// request (on this thread, as a worker would).
#[test]
fn runaway_and_memory_hungry_scripts_are_stopped_and_the_next_request_runs() {
    let limits = Limits {
        instructions: 200_000,
        memory_bytes: 4 << 20,
    };
    let p = Program::new(
        vec![Script::compile(
            "bad.lua",
            r#"function envoy_on_request(h)
  local mode = h:headers():get("x-mode")
  if mode == "loop" then
    while true do end
  elseif mode == "eat" then
    local t = {}
    for i = 1, 1e9 do t[i] = string.rep("x", 1024) .. i end
  end
  h:headers():add("x-ok", "1")
end"#,
        )
        .unwrap()],
        limits,
    );
    let cases = [
        ("loop", Some(ErrorKind::InstructionLimit)),
        ("none", None),
        ("eat", Some(ErrorKind::MemoryLimit)),
        ("none", None),
        ("loop", Some(ErrorKind::InstructionLimit)),
        ("none", None),
    ];
    for (mode, want) in cases {
        match (
            p.run(0, Phase::Request, request("GET", "/", &[("x-mode", mode)])),
            want,
        ) {
            (Run::Failed(_, e), Some(kind)) => assert_eq!(e.kind, kind, "{mode}: {e}"),
            (Run::Continue(s), None) => assert_eq!(text(s.headers.get("x-ok")).unwrap(), "1"),
            (other, _) => panic!("{mode}: {other:?}"),
        }
    }
    assert_eq!(p.errors(), 3);
}

/// A runaway loop in a coroutine the script made, at its top level or in a phase, is
/// stopped too, and a coroutine's bad argument is Lua's error naming the function.
#[test]
fn runaway_coroutines_are_stopped() {
    let limits = Limits {
        instructions: 200_000,
        memory_bytes: 4 << 20,
    };
    let top_level = Program::new(
        vec![Script::compile(
            "top.lua",
            "coroutine.wrap(function() while true do end end)()\n\
             function envoy_on_request(h) h:headers():add('x-ok', '1') end",
        )
        .unwrap()],
        limits,
    );
    // The chunk failed: the state has no entry points, the request goes on untouched.
    let s = continued(top_level.run(0, Phase::Request, request("GET", "/", &[])));
    assert_eq!(s.headers.get("x-ok"), None);
    assert_eq!(top_level.errors(), 1);
    let p = Program::new(
        vec![Script::compile(
            "co.lua",
            r#"function envoy_on_request(h)
  local mode = h:headers():get("x-mode")
  if mode == "wrap" then
    coroutine.wrap(function() while true do end end)()
  elseif mode == "create" then
    local co = coroutine.create(function() while true do end end)
    local ok, err = coroutine.resume(co)
    error(err, 0)
  elseif mode == "bad" then
    coroutine.create(42)
  end
  h:headers():add("x-ok", "1")
end"#,
        )
        .unwrap()],
        limits,
    );
    for (mode, want) in [
        ("wrap", "instruction limit reached"),
        ("none", ""),
        ("create", "instruction limit reached"),
        ("bad", "bad argument #1 to 'create' (function expected"),
    ] {
        match p.run(0, Phase::Request, request("GET", "/", &[("x-mode", mode)])) {
            Run::Failed(_, e) => assert!(e.message.contains(want), "{mode}: {e}"),
            Run::Continue(s) if want.is_empty() => {
                assert_eq!(text(s.headers.get("x-ok")).unwrap(), "1")
            }
            other => panic!("{mode}: {other:?}"),
        }
    }
}

#[test]
fn globals_are_per_script_state() {
    let counter = "n = 0\nfunction envoy_on_request(h) n = n + 1 h:headers():add('n', n) end";
    let p = Program::new(
        vec![
            Script::compile("a", counter).unwrap(),
            Script::compile("b", counter).unwrap(),
        ],
        Limits::default(),
    );
    let n = |i: usize| {
        let out = continued(p.run(i, Phase::Request, request("GET", "/", &[])));
        text(out.headers.get("n")).unwrap()
    };
    assert_eq!([n(0), n(0), n(1)], ["1", "2", "1"]);
}

fn response(status: &str) -> Stream {
    let mut headers = HeaderList::new();
    headers.add(":status", status.as_bytes());
    headers.add("foo", b"1".to_vec());
    Stream {
        headers,
        body_pending: true,
        ..Stream::default()
    }
}

/// Envoy's documentation ("Script examples"): the response script waits for the whole body
/// (`body()` suspends the phase until the proxy has read it) and removes `foo`; a script that
/// never asks for the body runs without waiting.
#[test]
fn response_body_is_read_only_when_a_script_asks() {
    let p = program(
        r#"function envoy_on_response(response_handle)
  -- Wait for the entire response body and add a response header with the body size.
  response_handle:headers():add("response_body_size", response_handle:body():length())
  -- Remove a response header named 'foo'
  response_handle:headers():remove("foo")
end"#,
    );
    let wait = match p.run(0, Phase::Response, response("200")) {
        Run::Body(wait) => wait,
        other => panic!("{other:?}"),
    };
    let mut trailers = HeaderList::new();
    trailers.add("grpc-status", b"0".to_vec());
    let out = continued(wait.resume(Some(b"hello".to_vec()), Some(trailers)));
    assert_eq!(text(out.headers.get("response_body_size")).unwrap(), "5");
    assert!(out.headers.get("foo").is_none());
    assert_eq!(out.body.as_deref(), Some(&b"hello"[..]));
    assert!(out.trailers.is_some());

    let headers_only =
        program(r#"function envoy_on_response(h) h:headers():add("x-seen", "1") end"#);
    let out = continued(headers_only.run(0, Phase::Response, response("200")));
    assert!(out.body.is_none() && out.body_pending, "nothing was read");
}

/// Envoy's documentation: `setBytes` on the response body (its new length is answered), and
/// `bodyChunks()` over an empty body yields nothing; `trailers()` is nil without trailers
/// and edits them when there are.
#[test]
fn response_set_bytes_chunks_and_trailers() {
    let p = program(
        r#"function envoy_on_response(response_handle)
  local n = response_handle:body():setBytes("<html><b>Not Found<b></html>")
  response_handle:headers():replace("content-type", "text/html")
  response_handle:headers():add("x-len", n)
  local chunks = 0
  for chunk in response_handle:bodyChunks() do chunks = chunks + chunk:length() end
  response_handle:headers():add("x-chunks", chunks)
  local t = response_handle:trailers()
  if t == nil then
    response_handle:headers():add("x-trailers", "none")
  else
    response_handle:headers():add("x-trailers", t:get("grpc-status"))
    t:replace("grpc-message", "from lua")
  end
end"#,
    );
    for trailers in [false, true] {
        let wait = match p.run(0, Phase::Response, response("404")) {
            Run::Body(wait) => wait,
            other => panic!("{other:?}"),
        };
        let t = trailers.then(|| {
            let mut t = HeaderList::new();
            t.add("grpc-status", b"5".to_vec());
            t
        });
        let out = continued(wait.resume(Some(b"{\"error\":1}".to_vec()), t));
        assert_eq!(
            out.body.as_deref(),
            Some(&b"<html><b>Not Found<b></html>"[..])
        );
        assert!(out.body_changed);
        assert_eq!(text(out.headers.get("x-len")).unwrap(), "28");
        assert_eq!(text(out.headers.get("x-chunks")).unwrap(), "28");
        assert_eq!(text(out.headers.get("content-type")).unwrap(), "text/html");
        if trailers {
            assert_eq!(text(out.headers.get("x-trailers")).unwrap(), "5");
            let t = out.trailers.unwrap();
            assert_eq!(text(t.get("grpc-message")).unwrap(), "from lua");
        } else {
            assert_eq!(text(out.headers.get("x-trailers")).unwrap(), "none");
        }
    }
}

/// Envoy's docs: `respond()` is only valid in the request flow; in the response flow it is a
/// script error (Envoy's encoder callbacks refuse it) and the response goes on.
#[test]
fn respond_in_the_response_flow_is_a_script_error() {
    let p = program(
        r#"function envoy_on_response(h)
  h:headers():add("x-before", "1")
  h:respond({[":status"] = "403"}, "nope")
end"#,
    );
    let mut s = response("200");
    s.body_pending = false;
    match p.run(0, Phase::Response, s) {
        Run::Failed(s, e) => {
            assert!(e.message.contains("respond not currently supported"), "{e}");
            assert_eq!(text(s.headers.get("x-before")).unwrap(), "1");
        }
        other => panic!("{other:?}"),
    }
}

/// Envoy's docs: an answer's repeated headers are one string (the last value) unless the
/// options table asks for `return_duplicate_headers`, which gives a list.
#[test]
fn http_call_answers_repeated_headers_as_envoy_does() {
    let p = program(
        r#"function envoy_on_request(h)
  local mode = h:headers():get("x-mode")
  local options = {["timeout_ms"] = 100}
  if mode == "dup" then options["return_duplicate_headers"] = true end
  local headers = h:httpCall("c", {[":method"] = "GET", [":path"] = "/", [":authority"] = "c"}, "", options)
  local key = headers["key"]
  if type(key) == "table" then key = table.concat(key, "|") end
  h:headers():add("x-key", key)
  h:headers():add("x-foo", headers["foo"])
end"#,
    );
    for (mode, want) in [("last", "value_2"), ("dup", "value_0|value_1|value_2")] {
        let pending = match p.run(0, Phase::Request, request("GET", "/", &[("x-mode", mode)])) {
            Run::Call(pending) => pending,
            other => panic!("{other:?}"),
        };
        let mut reply = HttpReply::default();
        for (n, v) in [
            (":status", "200"),
            ("foo", "bar"),
            ("key", "value_0"),
            ("key", "value_1"),
            ("key", "value_2"),
        ] {
            reply.headers.add(n, v.as_bytes());
        }
        let out = continued(pending.resume(reply));
        assert_eq!(text(out.headers.get("x-key")).unwrap(), want, "{mode}");
        assert_eq!(text(out.headers.get("x-foo")).unwrap(), "bar", "{mode}");
    }
}

/// Envoy's docs: `bodyChunks()` streams a body not read yet, chunk by chunk, without
/// buffering it: the headers go on first, each chunk as the script left it, and after the
/// loop the last chunk is still the script's (the docs' example replaces the whole body).
#[test]
fn body_chunks_stream_a_body_not_read_yet() {
    let p = program(
        r#"function envoy_on_response(response_handle)

  -- Sets the content-type.
  response_handle:headers():replace("content-type", "text/html")

  local last
  for chunk in response_handle:bodyChunks() do
    -- Clears each received chunk.
    chunk:setBytes("")
    last = chunk
  end

  last:setBytes("<html><b>Not Found<b></html>")
end"#,
    );
    let mut wait = match p.run(0, Phase::Response, response("404")) {
        Run::Chunk(w) => w,
        other => panic!("{other:?}"),
    };
    let head = wait.stream().unwrap();
    assert_eq!(text(head.headers.get("content-type")).unwrap(), "text/html");
    assert_eq!(wait.take_chunk(), None, "no chunk yet");
    wait = match wait.resume(Some(b"{\"error\":".to_vec()), None) {
        Run::Chunk(w) => w,
        other => panic!("{other:?}"),
    };
    // The next chunk came: the held one goes on as the script left it (cleared).
    assert_eq!(wait.take_chunk().as_deref(), Some(&b""[..]));
    wait = match wait.resume(Some(b"\"absent\"}".to_vec()), None) {
        Run::Chunk(w) => w,
        other => panic!("{other:?}"),
    };
    // The body ended: the last chunk stays the script's, which replaces it after the loop.
    let out = continued(wait.resume(None, None));
    assert_eq!(
        out.body.as_deref(),
        Some(&b"<html><b>Not Found<b></html>"[..])
    );
}

/// Envoy: `body()` after the body started streaming through `bodyChunks()` is an error.
#[test]
fn body_after_streaming_chunks_is_an_error() {
    let p = program(
        r#"function envoy_on_response(h)
  for chunk in h:bodyChunks() do end
  h:body()
end"#,
    );
    let wait = match p.run(0, Phase::Response, response("200")) {
        Run::Chunk(w) => w,
        other => panic!("{other:?}"),
    };
    match wait.resume(None, None) {
        Run::Failed(_, e) => assert!(e.message.contains("after body streaming"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// Envoy: once `bodyChunks()` streams, the headers went on and can no longer be modified.
#[test]
fn headers_are_fixed_once_chunks_stream() {
    let p = program(
        r#"function envoy_on_response(h)
  for chunk in h:bodyChunks() do end
  h:headers():add("x-late", "1")
end"#,
    );
    let wait = match p.run(0, Phase::Response, response("200")) {
        Run::Chunk(w) => w,
        other => panic!("{other:?}"),
    };
    match wait.resume(None, None) {
        Run::Failed(_, e) => assert!(e.message.contains("can no longer be modified"), "{e}"),
        other => panic!("{other:?}"),
    }
}
