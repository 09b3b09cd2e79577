//! A client's chunked-body framing errors (a bad chunk size, an oversized chunk extension, bad
//! trailers, a chunk without its CRLF) are a 400, and the upstream never sees the request
//! complete: hyper's client aborts it without the last chunk. Next to the same probes against
//! nginx.

mod common;

use common::*;
use std::net::SocketAddr;
use std::time::Duration;
use warden_testkit::Nginx;

const HEAD: &str = "POST /upload HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n";

/// (what, body after the head, whether nginx is compared).
fn probes() -> Vec<(&'static str, String, bool)> {
    vec![
        (
            "bad chunk size",
            "5\r\nhello\r\nzz\r\nmore\r\n0\r\n\r\n".into(),
            true,
        ),
        (
            "negative chunk size",
            "5\r\nhello\r\n-1\r\nx\r\n0\r\n\r\n".into(),
            true,
        ),
        (
            "chunk size overflow",
            "5\r\nhello\r\nfffffffffffffffff1\r\nx\r\n0\r\n\r\n".into(),
            true,
        ),
        (
            "chunk data without its CRLF",
            "5\r\nhelloXX0\r\n\r\n".into(),
            true,
        ),
        (
            // hyper allows 16 KiB of chunk extensions per body.
            "oversized chunk extensions",
            format!(
                "5\r\nhello\r\n1;ext={}\r\nx\r\n0\r\n\r\n",
                "e".repeat(20 * 1024)
            ),
            false,
        ),
        (
            "bad trailer line",
            "5\r\nhello\r\n0\r\nno colon here\r\n\r\n".into(),
            false,
        ),
    ]
}

async fn status_and_wait(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let text = raw(addr, request, Duration::from_secs(3)).await;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn config(up: SocketAddr) -> String {
    http_config(up, "", "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_errors_are_400_and_never_complete_upstream() {
    let (up, seen) = recording_upstream().await;
    let proxy = start(&config(up));
    let addr = addr(&proxy, 0);
    // A good chunked body goes through whole.
    let good = format!("{HEAD}5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    assert_eq!(status_and_wait(addr, good.as_bytes()).await.0, 200);
    assert_eq!(seen.lock().unwrap().requests.len(), 1);

    for (what, body, _) in probes() {
        let connections = seen.lock().unwrap().connections.len();
        let request = format!("{HEAD}{body}");
        let (status, text) = status_and_wait(addr, request.as_bytes()).await;
        assert_eq!(status, 400, "{what}: {text}");
        // Give a forwarded remainder time to arrive, if any would.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = seen.lock().unwrap();
        assert_eq!(r.requests.len(), 1, "{what}: a request completed upstream");
        for conn in &r.connections[connections.min(r.connections.len())..] {
            let wire = String::from_utf8_lossy(conn);
            assert!(
                !wire.contains("0\r\n\r\n"),
                "{what}: the body was ended upstream: {wire:?}"
            );
        }
    }
    assert!(proxy
        .metrics_text()
        .contains("warden_downstream_rq_rejected_total{reason=\"body_framing\"}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_answers_the_same_probes_400() {
    let (up, seen) = recording_upstream().await;
    let nginx = Nginx::start(&format!(
        "  server {{ listen {{listen}}; location / {{ proxy_pass http://{up}; proxy_http_version 1.1; }} }}"
    ))
    .expect("nginx starts");
    for (what, body, compared) in probes() {
        if !compared {
            continue;
        }
        let request = format!("{HEAD}{body}");
        let (status, text) = status_and_wait(nginx.addr(), request.as_bytes()).await;
        assert_eq!(status, 400, "nginx {what}: {text}");
    }
    assert!(seen.lock().unwrap().requests.is_empty());
}

/// An upstream's reason phrase that is not UTF-8 (obs-text, which RFC 9112 allows) is relayed
/// like any other; found by fuzzing the response reader, where it used to be read out of bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_reason_phrase_that_is_not_utf8_is_relayed() {
    let up = raw_upstream(|_| b"HTTP/1.1 200 Fine\xca\xfe\r\ncontent-length: 2\r\n\r\nok".to_vec())
        .await;
    let proxy = start(&config(up));
    let text = raw(
        addr(&proxy, 0),
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Duration::from_secs(3),
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.ends_with("ok"), "{text}");
}
