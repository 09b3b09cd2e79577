//! The objects a script gets (handle, headers, ...) as Envoy's behave: the same headers object
//! for the whole phase, alive while their phase runs or waits, dead after it, whichever
//! coroutine uses them.

use warden_lua::{HeaderList, HttpReply, Limits, Phase, Program, Run, Script, Stream};

fn program(src: &str) -> Program {
    Program::new(
        vec![Script::compile("objects.lua", src).expect("compiles")],
        Limits::default(),
    )
}

fn request(path: &str, mode: &str) -> Stream {
    let mut headers = HeaderList::new();
    headers.add(":method", "GET");
    headers.add(":path", path);
    headers.add("x-mode", mode);
    Stream {
        headers,
        ..Stream::default()
    }
}

fn header(s: &Stream, name: &str) -> Option<String> {
    s.headers
        .get(name)
        .map(|v| String::from_utf8(v).expect("utf-8"))
}

fn continued(run: Run) -> Stream {
    match run {
        Run::Continue(s) => s,
        other => panic!("expected Continue, got {other:?}"),
    }
}

fn failed(run: Run) -> String {
    match run {
        Run::Failed(_, e) => e.message,
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[test]
fn headers_is_one_object_per_phase_and_dies_with_it() {
    let p = program(
        r#"function envoy_on_request(h)
  local mode = h:headers():get("x-mode")
  if mode == "keep" then
    kept_handle, kept_headers = h, h:headers()
    h:headers():add("x-same", tostring(h:headers() == h:headers()))
    h:headers():add("x-type", type(h:headers()))
  elseif mode == "handle" then
    local unused = kept_handle:headers()
  elseif mode == "headers" then
    kept_headers:get(":path")
  end
end"#,
    );
    let out = continued(p.run(0, Phase::Request, request("/", "keep")));
    assert_eq!(header(&out, "x-same").as_deref(), Some("true"));
    assert_eq!(header(&out, "x-type").as_deref(), Some("userdata"));
    for mode in ["handle", "headers"] {
        let message = failed(p.run(0, Phase::Request, request("/", mode)));
        assert!(
            message.contains("object used outside of proper scope"),
            "{mode}: {message}"
        );
    }
}

#[test]
fn a_waiting_phase_s_objects_serve_other_requests_until_it_ends() {
    let p = program(
        r#"function envoy_on_request(h)
  local mode = h:headers():get("x-mode")
  if mode == "wait" then
    waiting = h
    h:httpCall("c", {[":method"] = "GET", [":path"] = "/", [":authority"] = "c"}, "", 10)
    h:headers():add("x-resumed", "1")
  elseif mode == "read" then
    h:headers():add("x-other-path", waiting:headers():get(":path"))
  end
end"#,
    );
    let pending = match p.run(0, Phase::Request, request("/waiting", "wait")) {
        Run::Call(pending) => pending,
        other => panic!("{other:?}"),
    };
    let out = continued(p.run(0, Phase::Request, request("/other", "read")));
    assert_eq!(header(&out, "x-other-path").as_deref(), Some("/waiting"));
    let mut reply = HttpReply::default();
    reply.headers.add(":status", "200");
    let out = continued(pending.resume(reply));
    assert_eq!(header(&out, "x-resumed").as_deref(), Some("1"));
    assert_eq!(header(&out, ":path").as_deref(), Some("/waiting"));
    let message = failed(p.run(0, Phase::Request, request("/late", "read")));
    assert!(
        message.contains("object used outside of proper scope"),
        "{message}"
    );
}

#[test]
fn objects_answer_only_their_own_methods() {
    let p = program(
        r#"function envoy_on_request(h)
  local mode = h:headers():get("x-mode")
  if mode == "body-on-headers" then h:headers():length() end
  if mode == "get-on-handle" then h:get(":path") end
end"#,
    );
    for (mode, method) in [("body-on-headers", "length"), ("get-on-handle", "get")] {
        let message = failed(p.run(0, Phase::Request, request("/", mode)));
        assert!(
            message.contains(&format!("method '{method}'")),
            "{mode}: {message}"
        );
    }
    continued(p.run(0, Phase::Request, request("/", "none")));
}

/// A phase's coroutine is kept for the next phases: a script that ended, one that answered
/// with `respond()` and one that failed leave the next request a clean run.
#[test]
fn coroutines_are_reused_after_every_kind_of_end() {
    let p = program(
        r#"n = 0
function envoy_on_request(h)
  n = n + 1
  local mode = h:headers():get("x-mode")
  if mode == "respond" then h:respond({[":status"] = "403"}, "no") end
  if mode == "fail" then error("boom") end
  h:headers():add("x-n", tostring(n))
end"#,
    );
    for (i, mode) in [
        "ok", "respond", "ok", "fail", "ok", "respond", "respond", "ok",
    ]
    .iter()
    .enumerate()
    {
        let run = p.run(0, Phase::Request, request("/", mode));
        match (*mode, run) {
            ("ok", Run::Continue(s)) => {
                assert_eq!(header(&s, "x-n"), Some((i + 1).to_string()), "{i}")
            }
            ("respond", Run::Respond(_, r)) => assert_eq!(r.status, 403),
            ("fail", Run::Failed(_, e)) => assert!(e.message.contains("boom"), "{e}"),
            (mode, other) => panic!("{i} {mode}: {other:?}"),
        }
    }
}

/// Header values read again are the same strings whatever else was read between (the state
/// keeps the strings of values read lately): many distinct values, long ones, repeated.
#[test]
fn header_values_read_back_right_however_many_were_read() {
    let p = program(
        r#"function envoy_on_request(h)
  local hs = h:headers()
  local out = {}
  for round = 1, 3 do
    for i = 1, 40 do out[#out + 1] = hs:get("x-" .. i) end
    out[#out + 1] = hs:get("x-long")
  end
  hs:add("x-all", table.concat(out, ","))
end"#,
    );
    let long = "y".repeat(300);
    for request in 0..3 {
        let mut s = request_with(&[]);
        for i in 1..=40 {
            s.headers
                .add(&format!("x-{i}"), format!("v{request}-{}", i % 7));
        }
        s.headers.add("x-long", long.as_str());
        let out = continued(p.run(0, Phase::Request, s));
        let one: Vec<String> = (1..=40)
            .map(|i| format!("v{request}-{}", i % 7))
            .chain([long.clone()])
            .collect();
        assert_eq!(
            header(&out, "x-all"),
            Some([one.join(","), one.join(","), one.join(",")].join(",")),
            "{request}"
        );
    }
}

fn request_with(extra: &[(&str, &str)]) -> Stream {
    let mut s = request("/", "none");
    for (n, v) in extra {
        s.headers.add(n, *v);
    }
    s
}
