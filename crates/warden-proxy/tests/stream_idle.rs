//! The stream idle timeout: a request whose body stops arriving (HTTP/1 and an HTTP/2 stream)
//! is answered 408 `stream timeout` and the upstream never sees it complete; next to nginx's
//! `client_body_timeout` on the same probe.

mod common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_proxy::{Proxy, ProxyOptions, Timeouts};
use warden_testkit::Nginx;

/// A POST announcing 10 body bytes that sends 3 and stalls.
const STALLED: &[u8] = b"POST /upload HTTP/1.1\r\nHost: a.example\r\nContent-Length: 10\r\n\r\nabc";

fn proxy_with_stream_idle(up: std::net::SocketAddr) -> warden_proxy::RunningProxy {
    let mut opts = ProxyOptions::loopback(inline(&http_config(up, "", "")));
    opts.timeouts = Timeouts {
        stream_idle: Some(Duration::from_secs(1)),
        ..Timeouts::default()
    };
    Proxy::start(opts).expect("proxy starts")
}

/// Send `STALLED` and read until the server closes or 5 s pass: what came back, how long.
async fn stalled_upload(addr: std::net::SocketAddr) -> (String, Duration) {
    let started = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(STALLED).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    (
        String::from_utf8_lossy(&out).into_owned(),
        started.elapsed(),
    )
}

fn complete_uploads(seen: &Recording) -> usize {
    let r = seen.lock().unwrap();
    r.requests.iter().filter(|q| q.contains("/upload")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_http1_body_gets_408_and_never_completes_upstream() {
    let (up, seen) = recording_upstream().await;
    let proxy = proxy_with_stream_idle(up);
    let (text, took) = stalled_upload(addr(&proxy, 0)).await;
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.ends_with("stream timeout"), "{text}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert_eq!(
        complete_uploads(&seen),
        0,
        "the upstream saw the upload complete"
    );
    assert!(proxy
        .metrics_text()
        .contains("warden_downstream_cx_timeout_total{reason=\"stream_idle\"} 1"));
    // A body that keeps coming, slower than the timeout in total but never idle for it, passes.
    let mut s = tokio::net::TcpStream::connect(addr(&proxy, 0))
        .await
        .unwrap();
    s.write_all(b"POST /upload HTTP/1.1\r\nHost: a.example\r\nContent-Length: 4\r\n\r\n")
        .await
        .unwrap();
    for b in [b"a", b"b", b"c", b"d"] {
        tokio::time::sleep(Duration::from_millis(400)).await;
        s.write_all(b).await.unwrap();
    }
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_http2_stream_gets_408_and_never_completes_upstream() {
    let (up, seen) = recording_upstream().await;
    let proxy = proxy_with_stream_idle(up);
    let tcp = tokio::net::TcpStream::connect(addr(&proxy, 0))
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post("http://a.example/upload")
        .header("content-length", "10")
        .body(())
        .unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    body.send_data(bytes::Bytes::from_static(b"abc"), false)
        .unwrap();
    let started = Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("an answer within 5 s")
        .unwrap();
    assert_eq!(response.status(), 408);
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(
        complete_uploads(&seen),
        0,
        "the upstream saw the upload complete"
    );
    // The connection goes on serving other streams.
    let mut client = client.ready().await.unwrap();
    let (response, _) = client
        .send_request(
            http::Request::get("http://a.example/x").body(()).unwrap(),
            true,
        )
        .unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
}

/// nginx (`client_body_timeout 1s`, request buffering on as by default) on the same probe:
/// it too ends the request with 408 and the upstream sees nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_ends_the_same_stalled_body() {
    let (up, seen) = recording_upstream().await;
    let nginx = Nginx::start(&format!(
        "  server {{ listen {{listen}}; client_body_timeout 1s; location / {{ proxy_pass http://{up}; proxy_http_version 1.1; }} }}"
    ))
    .expect("nginx starts");
    let (text, took) = stalled_upload(nginx.addr()).await;
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "nginx: {text}"
    );
    assert!(took < Duration::from_secs(4), "nginx took {took:?}");
    assert!(
        seen.lock().unwrap().connections.is_empty(),
        "nginx forwarded"
    );
}
