//! The HTTP/1.1 fast path (src/fast_h1.rs) answers exactly as hyper does, local replies and
//! proxied responses alike, and hands a connection to hyper mid-stream at the first request
//! with a body.

mod common;

use common::*;
use std::time::Duration;

/// Direct responses, a 404, an authz denial and a local limit of 1 per day on `/limited`.
fn local_replies_config(up: std::net::SocketAddr) -> String {
    http_config(
        up,
        r#"
  - match: [{uri: {prefix: /direct}}]
    headers: {response: {set: {x-route: direct}}}
    directResponse: {status: 333, body: {string: test}}
  - match: [{uri: {prefix: /limited}}]
    directResponse: {status: 200, body: {string: ok}}
  - match: [{uri: {prefix: /deny}}]
    directResponse: {status: 200, body: {string: never}}
  - match: [{uri: {prefix: /empty}}]
    directResponse: {status: 204}
  - match: [{uri: {prefix: /nothing}}]
    directResponse: {status: 404}"#,
        r#"---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-deny}
spec:
  action: DENY
  rules:
  - to: [{operation: {paths: ["/deny"]}}]
---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: one-a-day}
spec:
  local:
    rules:
    - clientSelectors:
      - path: {type: PathPrefix, value: /limited}
      limit: {requests: 1, unit: Day}
"#,
    )
}

/// Requests answered locally, pipelined in one write; the last one closes the connection.
const LOCAL_BATCH: &str = concat!(
    "GET /direct HTTP/1.1\r\nHost: a\r\n\r\n",
    "HEAD /direct HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /nothing?q=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
    "GET /deny HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n",
    "GET /limited HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /limited HTTP/1.1\r\nhost: a\r\n\r\n",
    "DELETE /empty HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /direct HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
    "GET /direct HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
);

/// Every status line in a stream of responses (bodies are not line-terminated, so a status
/// line may follow a body on the same line).
fn status_lines(text: &str) -> Vec<&str> {
    text.match_indices("HTTP/1.")
        .map(|(at, _)| {
            let line = &text[at..];
            &line[..line.find("\r\n").unwrap_or(line.len())]
        })
        .collect()
}

/// The text with every `date:` value blanked (the second may tick between responses).
fn without_dates(text: &str) -> String {
    text.split("\r\n")
        .map(|line| match line.strip_prefix("date: ") {
            Some(_) => "date: -",
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

async fn stop(proxy: warden_proxy::RunningProxy) {
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
}

#[tokio::test]
async fn local_replies_are_byte_identical_to_hypers() {
    let up = counting_echo().await;
    let config = local_replies_config(up.http_addr().unwrap());
    // One proxy per path, so each starts with a full bucket on `/limited`.
    let fast_proxy = start(&config);
    let hyper_proxy = start(&config);
    let wait = Duration::from_secs(5);

    let fast = raw(addr(&fast_proxy, 0), LOCAL_BATCH.as_bytes(), wait).await;
    // A request with a body goes to hyper, which then keeps the connection: the batch after it
    // is answered by hyper alone.
    let lead = "POST /direct HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx";
    let by_hyper = raw(
        addr(&hyper_proxy, 0),
        format!("{lead}{LOCAL_BATCH}").as_bytes(),
        wait,
    )
    .await;
    let first_end = by_hyper.find("\r\n\r\ntest").expect("lead answered") + "\r\n\r\ntest".len();
    let by_hyper = &by_hyper[first_end..];

    assert_eq!(without_dates(&fast), without_dates(by_hyper));
    // And the answers are the ones the config asks for.
    let statuses = status_lines(&fast);
    assert_eq!(
        statuses,
        [
            "HTTP/1.1 333 Unknown",
            "HTTP/1.1 333 Unknown",
            "HTTP/1.1 404 Not Found",
            "HTTP/1.1 403 Forbidden",
            "HTTP/1.1 200 OK",
            "HTTP/1.1 429 Too Many Requests",
            "HTTP/1.1 204 No Content",
            "HTTP/1.0 333 Unknown",
            "HTTP/1.1 333 Unknown",
        ]
    );
    assert!(fast.contains("x-route: direct\r\n"), "{fast}");
    assert!(fast.contains("RBAC: access denied"), "{fast}");
    assert!(fast.contains("local_rate_limited"), "{fast}");
    assert!(fast.contains("x-ratelimit-limit: 1\r\n"), "{fast}");
    assert!(fast.contains("connection: keep-alive\r\n"), "{fast}");
    assert!(
        without_dates(&fast)
            .ends_with("connection: close\r\ncontent-length: 4\r\ndate: -\r\n\r\ntest"),
        "{fast}"
    );
    assert_eq!(up.total(), 0, "nothing reached the upstream");

    // The fast path counts as hyper's path does (the hyper proxy also answered the lead).
    let fast_metrics = fast_proxy.metrics_text();
    for line in [
        "warden_http_requests_total{route=\"default/site/0\",code=\"333\"} 4",
        "warden_http_requests_total{route=\"default/site/1\",code=\"429\"} 1",
        "warden_http_requests_total{route=\"default/site/2\",code=\"403\"} 1",
        "warden_http_request_duration_seconds_count 9",
        "warden_authz_denied_total{policy=\"ns[default]-policy[no-deny]-rule[0]\"} 1",
        "warden_local_rate_limit_requests_total{group=\"RateLimitPolicy/one-a-day\",result=\"rate_limited\"} 1",
    ] {
        assert!(fast_metrics.contains(line), "missing {line:?} in\n{fast_metrics}");
    }
    stop(fast_proxy).await;
    stop(hyper_proxy).await;
}

#[tokio::test]
async fn a_connection_moves_to_hyper_at_the_first_request_with_a_body() {
    let up = counting_echo().await;
    let proxy = start(&local_replies_config(up.http_addr().unwrap()));
    // Local, upstream, local again, then a body (hyper from here on): answered in order.
    let batch = concat!(
        "GET /direct HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /to-upstream HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /direct HTTP/1.1\r\nHost: a\r\n\r\n",
        "POST /upstream-body HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        "GET /direct HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let text = raw(addr(&proxy, 0), batch.as_bytes(), Duration::from_secs(5)).await;
    let statuses = status_lines(&text);
    assert_eq!(
        statuses,
        [
            "HTTP/1.1 333 Unknown",
            "HTTP/1.1 200 OK",
            "HTTP/1.1 333 Unknown",
            "HTTP/1.1 200 OK",
            "HTTP/1.1 333 Unknown",
        ],
        "{text}"
    );
    assert_eq!(up.total(), 2, "{text}");
    stop(proxy).await;
}

#[tokio::test]
async fn a_head_split_over_many_reads_is_answered() {
    let up = counting_echo().await;
    let proxy = start(&local_replies_config(up.http_addr().unwrap()));
    let mut s = tokio::net::TcpStream::connect(addr(&proxy, 0))
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for piece in [
        "GET /dir",
        "ect HTTP/1.1\r\nHo",
        "st: a\r\nConnection: close\r\n",
        "\r\n",
    ] {
        s.write_all(piece.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 333 Unknown\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\ntest"), "{out}");
    stop(proxy).await;
}

/// An upstream answering every request head by path: `/chunked` with a chunked body (length
/// unknown to the proxy), `/sized` with `content-length` and its own `date`, anything else 204.
async fn raw_upstream() -> std::net::SocketAddr {
    common::raw_upstream(|head| {
        let reply: &[u8] = if head.contains(" /chunked") {
            b"HTTP/1.1 200 OK\r\nx-up: chunked\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        } else if head.contains(" /no-phrase") {
            b"HTTP/1.1 333 \r\ncontent-length: 0\r\n\r\n"
        } else if head.contains(" /own-phrase") {
            b"HTTP/1.1 333 Own Phrase\r\ncontent-length: 0\r\n\r\n"
        } else if head.contains(" /sized") {
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: Thu, 01 Jan 1970 00:00:00 GMT\r\nx-up: sized\r\n\r\nhello"
        } else {
            b"HTTP/1.1 204 No Content\r\nx-up: none\r\n\r\n"
        };
        if head.starts_with("HEAD") {
            // No body on HEAD; a chunked answer ends at its head.
            let end = reply.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            reply[..end].to_vec()
        } else {
            reply.to_vec()
        }
    })
    .await
}

#[tokio::test]
async fn proxied_responses_are_byte_identical_to_hypers() {
    let up = raw_upstream().await;
    let proxy = start(&http_config(up, "", ""));
    let batch = concat!(
        "GET /chunked HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /sized HTTP/1.1\r\nHost: a\r\n\r\n",
        "HEAD /sized HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /empty HTTP/1.1\r\nHost: a\r\n\r\n",
        // A code without a standard phrase: the upstream's own phrase is kept, none becomes
        // Envoy's `Unknown`.
        "GET /no-phrase HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /own-phrase HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /sized HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
        // Length unknown to an HTTP/1.0 client: the body ends with the connection.
        "GET /chunked HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
    );
    let wait = Duration::from_secs(5);
    let fast = raw(addr(&proxy, 0), batch.as_bytes(), wait).await;
    let lead = "POST /empty HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx";
    let by_hyper = raw(addr(&proxy, 0), format!("{lead}{batch}").as_bytes(), wait).await;
    let first_end = by_hyper.find("x-up: none\r\n").expect("lead answered");
    let first_end = first_end + by_hyper[first_end..].find("\r\n\r\n").unwrap() + 4;
    assert_eq!(without_dates(&fast), without_dates(&by_hyper[first_end..]));
    assert_eq!(
        status_lines(&fast),
        [
            "HTTP/1.1 200 OK",
            "HTTP/1.1 200 OK",
            "HTTP/1.1 200 OK",
            "HTTP/1.1 204 No Content",
            "HTTP/1.1 333 Unknown",
            "HTTP/1.1 333 Own Phrase",
            "HTTP/1.0 200 OK",
            "HTTP/1.0 200 OK",
        ]
    );
    assert!(fast.contains("transfer-encoding: chunked\r\n"), "{fast}");
    assert!(
        fast.contains("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
        "{fast}"
    );
    assert!(fast.ends_with("hello world"), "{fast}");
    stop(proxy).await;
}

#[tokio::test]
async fn a_streaming_upstream_body_reaches_the_client_before_it_ends() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The upstream sends its head and a first chunk, then holds the rest until the test has
    // seen that chunk arrive at the client through the proxy.
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel::<()>();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            head.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            .await
            .unwrap();
        let _ = seen_rx.await;
        s.write_all(b"4\r\nlast\r\n0\r\n\r\n").await.unwrap();
    });
    let proxy = start(&http_config(up, "", ""));
    let mut client = tokio::net::TcpStream::connect(addr(&proxy, 0))
        .await
        .unwrap();
    client
        .write_all(b"GET /stream HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let first = tokio::time::timeout(Duration::from_secs(5), async {
        while !String::from_utf8_lossy(&got).contains("first") {
            let n = client.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(
        first.is_ok(),
        "the first chunk was held back: {:?}",
        String::from_utf8_lossy(&got)
    );
    seen_tx.send(()).unwrap();
    client.read_to_end(&mut got).await.unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.ends_with("5\r\nfirst\r\n4\r\nlast\r\n0\r\n\r\n"),
        "{text}"
    );
    stop(proxy).await;
}

/// Hop-by-hop headers, and the ones `Connection` names, stop at the proxy in both directions.
#[tokio::test]
async fn hop_by_hop_headers_stop_at_the_proxy() {
    // The upstream answers with the request head it got as the body, and hop-by-hop headers
    // of its own.
    let up = common::raw_upstream(|head| {
        format!(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Up-Secret\r\nx-up-secret: 1\r\n\
             Keep-Alive: timeout=5\r\nx-up-kept: 1\r\ncontent-length: {}\r\n\r\n{head}",
            head.len()
        )
        .into_bytes()
    })
    .await;
    let proxy = start(&http_config(up, "", ""));
    // A `Connection` naming a header puts the request's lines into its map; one naming only
    // `close` leaves them as read (`RequestLines`), filtered by the upstream encoder.
    for request in [
        "GET /hop HTTP/1.1\r\nHost: a\r\nConnection: close, x-secret\r\nx-secret: 1\r\n\
         Keep-Alive: timeout=5\r\nTE: trailers\r\nx-kept: 1\r\n\r\n",
        "GET /hop HTTP/1.1\r\nHost: a\r\nConnection: close\r\nProxy-Connection: keep-alive\r\n\
         Keep-Alive: timeout=5\r\nTE: trailers\r\nx-kept: 1\r\n\r\n",
    ] {
        let text = raw(addr(&proxy, 0), request.as_bytes(), Duration::from_secs(5))
            .await
            .to_ascii_lowercase();
        let (response_head, upstream_saw) = text.split_once("\r\n\r\n").expect("a response");
        assert!(response_head.starts_with("http/1.1 200 ok"), "{text}");
        assert!(upstream_saw.contains("x-kept: 1"), "{upstream_saw}");
        for gone in ["x-secret", "keep-alive", "te: trailers", "connection"] {
            assert!(
                !upstream_saw.contains(gone),
                "{gone} reached the upstream: {upstream_saw}"
            );
        }
        assert!(response_head.contains("x-up-kept: 1"), "{response_head}");
        for gone in ["x-up-secret", "keep-alive: timeout"] {
            assert!(
                !response_head.contains(gone),
                "{gone} reached the client: {response_head}"
            );
        }
    }
    stop(proxy).await;
}

/// A request's header lines reach the upstream the same whether they stay as read (nothing
/// configured reads headers) or go through the header map (a route matches on a header):
/// names lowercased, repeated headers kept in order, hop-by-hop ones dropped, the forwarding
/// headers added, `Host` kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_header_lines_as_read_match_the_header_map_path() {
    // The upstream answers with the request head it got as the body.
    let up = common::raw_upstream(|head| {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{head}",
            head.len()
        )
        .into_bytes()
    })
    .await;
    let header_route = r#"
  - name: by-header
    match: [{headers: {x-never: {exact: "1"}}}]
    directResponse: {status: 204}"#;
    let as_read = start(&http_config(up, "", ""));
    let through_map = start(&http_config(up, header_route, ""));
    let request = "GET /fwd?q=1 HTTP/1.1\r\nHost: site.test:8080\r\nUser-Agent: UA/1\r\n\
                   X-Forwarded-For: 192.0.2.1\r\nAccept: */*\r\nX-Mixed-Case: Value Kept\r\n\
                   x-forwarded-for: 192.0.2.2, 192.0.2.3\r\naccept: text/plain\r\n\
                   X-Forwarded-Proto: https\r\nX-Envoy-External-Address: 192.0.2.9\r\n\
                   TE: trailers\r\nConnection: close\r\n\r\n";
    let mut seen = Vec::new();
    for proxy in [&as_read, &through_map] {
        let text = raw(addr(proxy, 0), request.as_bytes(), Duration::from_secs(5)).await;
        let (head, upstream_saw) = text.split_once("\r\n\r\n").expect("a response");
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{text}");
        let mut lines: Vec<String> = upstream_saw
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        // A generated id differs per request: its presence is what both must show.
        for line in &mut lines {
            if line.starts_with("x-request-id: ") {
                assert_eq!(line.len(), "x-request-id: ".len() + 36, "{line}");
                *line = "x-request-id: <generated>".into();
            }
        }
        seen.push(lines);
    }
    let expected_in_order = [
        "GET /fwd?q=1 HTTP/1.1",
        "host: site.test:8080",
        "user-agent: UA/1",
        "accept: */*",
        "x-mixed-case: Value Kept",
        "accept: text/plain",
        "x-forwarded-for: 192.0.2.1, 192.0.2.2, 192.0.2.3, 127.0.0.1",
        "x-forwarded-proto: http",
        "x-request-id: <generated>",
        "x-envoy-external-address: 127.0.0.1",
    ];
    assert_eq!(seen[0], expected_in_order, "lines as read");
    // The map groups repeated names; the lines, and the order of repeated ones, are the same.
    let sorted = |lines: &[String]| {
        let mut lines = lines.to_vec();
        lines.sort();
        lines
    };
    assert_eq!(sorted(&seen[0]), sorted(&seen[1]), "through the map");
    let accepts = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.starts_with("accept: "))
            .cloned()
            .collect()
    };
    assert_eq!(accepts(&seen[0]), accepts(&seen[1]));
    stop(as_read).await;
    stop(through_map).await;
}

/// An upstream response nothing edits is written from its header lines as read, in the
/// upstream's order; one a route edits goes through the header map. Both send the same lines:
/// names lowercased, repeated headers kept in order, hop-by-hop ones dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_header_lines_as_read_match_the_header_map_path() {
    let up = common::raw_upstream(|_| {
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
          X-Mixed-Case: Value Kept\r\nSet-Cookie: a=1\r\nProxy-Connection: keep-alive\r\n\
          Set-Cookie: b=2\r\nTE: trailers\r\nX-RateLimit-Limit: 999\r\nContent-Length: 2\r\n\r\nok"
            .to_vec()
    })
    .await;
    let edited = r#"
  - name: edited
    match: [{uri: {prefix: /edited}}]
    headers:
      response:
        set: {x-route: edited}
    route: [{destination: {host: echo.internal}}]"#;
    let proxy = start(&http_config(up, edited, ""));
    let lines = |text: &str| -> Vec<String> {
        let (head, body) = text.split_once("\r\n\r\n").expect("a response");
        assert_eq!(body, "ok");
        head.lines()
            .filter(|l| !l.starts_with("date: ") && !l.starts_with("x-route: "))
            .map(str::to_string)
            .collect()
    };
    let mut seen = Vec::new();
    for path in ["/as-read", "/edited"] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let text = raw(addr(&proxy, 0), request.as_bytes(), Duration::from_secs(5)).await;
        assert_eq!(
            text.contains("x-route: edited"),
            path == "/edited",
            "{text}"
        );
        seen.push(lines(&text));
    }
    assert_eq!(
        seen[0],
        [
            "HTTP/1.1 200 OK",
            "x-mixed-case: Value Kept",
            "set-cookie: a=1",
            "set-cookie: b=2",
            "x-ratelimit-limit: 999",
            "content-length: 2",
            "connection: close",
        ]
    );
    // The map path may reorder different names (removing from the map moves its last entry);
    // the lines themselves, and the order of repeated ones, are the same.
    let sorted = |lines: &[String]| {
        let mut lines = lines.to_vec();
        lines.sort();
        lines
    };
    assert_eq!(sorted(&seen[0]), sorted(&seen[1]));
    stop(proxy).await;

    // A limiter's x-ratelimit-* replace the upstream's, the other lines still as read.
    let limited = start(&http_config(
        up,
        "",
        "---\napiVersion: warden.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: l}\n\
         spec:\n  local:\n    rules:\n    - limit: {requests: 100, unit: Minute}\n",
    ));
    let request = "GET /limited HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let text = raw(
        addr(&limited, 0),
        request.as_bytes(),
        Duration::from_secs(5),
    )
    .await;
    let mut expected = seen[0].clone();
    expected.retain(|l| !l.starts_with("x-ratelimit-limit"));
    let mut got = lines(&text);
    for (name, value) in [
        ("x-ratelimit-limit", "100"),
        ("x-ratelimit-remaining", "99"),
    ] {
        let line = format!("{name}: {value}");
        assert!(got.contains(&line), "{line} missing: {text}");
        got.retain(|l| *l != line);
    }
    got.retain(|l| !l.starts_with("x-ratelimit-reset: "));
    assert_eq!(sorted(&got), sorted(&expected), "{text}");
    // A request with a body goes through hyper both ways: the same headers, from the map.
    let request = "POST /limited HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\
                   Connection: close\r\n\r\nhi";
    let text = raw(
        addr(&limited, 0),
        request.as_bytes(),
        Duration::from_secs(5),
    )
    .await;
    let limits: Vec<String> = lines(&text)
        .into_iter()
        .filter(|l| l.starts_with("x-ratelimit-limit"))
        .collect();
    assert_eq!(limits, ["x-ratelimit-limit: 100"], "{text}");
    stop(limited).await;
}

/// A local 429's headers, x-ratelimit-* included, are the same lines in the same order from
/// the fast path's encoder and from hyper's server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_429_is_written_the_same_by_both_servers() {
    let up =
        common::raw_upstream(|_| b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()).await;
    let proxy = start(&http_config(
        up,
        "",
        "---\napiVersion: warden.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: l}\n\
         spec:\n  local:\n    rules:\n    - limit: {requests: 1, unit: Hour}\n",
    ));
    let ask = |request: &'static str| async {
        let text = raw(addr(&proxy, 0), request.as_bytes(), Duration::from_secs(5)).await;
        let head = text
            .split_once("\r\n\r\n")
            .expect("a response")
            .0
            .to_string();
        head.lines()
            .filter(|l| !l.starts_with("date: "))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let first = ask("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await;
    assert_eq!(first[0], "HTTP/1.1 200 OK");
    let fast = ask("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await;
    let hyper =
        ask("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi").await;
    assert_eq!(
        fast[..4],
        [
            "HTTP/1.1 429 Too Many Requests",
            "content-type: text/plain",
            "x-ratelimit-limit: 1",
            "x-ratelimit-remaining: 0",
        ]
    );
    assert!(fast[4].starts_with("x-ratelimit-reset: "), "{fast:?}");
    assert_eq!(fast[5..], ["connection: close", "content-length: 18"]);
    assert_eq!(fast, hyper);
    stop(proxy).await;
}
