//! Connection maxima and timeouts over real sockets: slowloris heads get 408 and are closed,
//! idle keep-alive connections are closed, connections over a listener's maximum are closed at
//! accept, and a well-behaved client keeps getting 200 meanwhile.

mod common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warden_proxy::{Proxy, ProxyOptions, RunningProxy, Timeouts};

fn direct_config() -> String {
    format!(
        "{}  - directResponse: {{status: 200, body: {{string: ok}}}}\n",
        gateway_and_route_head()
    )
}

fn start_with(adjust: impl FnOnce(&mut ProxyOptions)) -> RunningProxy {
    let mut opts = ProxyOptions::loopback(inline(&direct_config()));
    adjust(&mut opts);
    Proxy::start(opts).expect("proxy starts")
}

/// Read until the peer closes (or `within` passes); what was read, and whether it closed.
async fn read_until_closed(s: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut out = Vec::new();
    let closed = tokio::time::timeout(within, s.read_to_end(&mut out))
        .await
        .is_ok();
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

/// `n` sequential requests on one keep-alive client: how many got 200.
async fn good_client(addr: std::net::SocketAddr, n: u32) -> u32 {
    let c = client();
    let mut ok = 0;
    for _ in 0..n {
        if let Ok(r) = c.get(format!("http://{addr}/")).send().await {
            if r.status() == 200 && r.bytes().await.is_ok() {
                ok += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_heads_get_408_while_a_good_client_is_served() {
    const SLOW: usize = 200;
    let proxy = start_with(|o| {
        o.timeouts = Timeouts {
            request_headers: Some(Duration::from_secs(1)),
            ..Timeouts::default()
        }
    });
    let addr = addr(&proxy, 0);
    let good = tokio::spawn(good_client(addr, 100));
    let mut slow = Vec::new();
    for _ in 0..SLOW {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n").await.unwrap();
        slow.push(s);
    }
    // Trickle one header byte per connection every 200 ms, for at most 3 s.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        for s in &mut slow {
            let _ = s.write_all(b"X").await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut timed_out = 0;
    for s in &mut slow {
        let (text, closed) = read_until_closed(s, Duration::from_secs(3)).await;
        if closed && text.starts_with("HTTP/1.1 408") {
            timed_out += 1;
        }
    }
    assert_eq!(timed_out, SLOW, "every slow head got 408 and was closed");
    assert_eq!(good.await.unwrap(), 100, "the good client got every answer");
    assert!(proxy.metrics_text().contains(&format!(
        "warden_downstream_cx_timeout_total{{reason=\"request_headers\"}} {SLOW}"
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed() {
    const IDLE: usize = 100;
    let proxy = start_with(|o| {
        o.timeouts = Timeouts {
            idle: Some(Duration::from_secs(1)),
            ..Timeouts::default()
        }
    });
    let addr = addr(&proxy, 0);
    let mut conns = Vec::new();
    for _ in 0..IDLE {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        conns.push(s);
    }
    let mut closed = 0;
    for s in &mut conns {
        if read_until_closed(s, Duration::from_secs(4)).await.1 {
            closed += 1;
        }
    }
    assert_eq!(closed, IDLE);
    assert!(proxy.metrics_text().contains(&format!(
        "warden_downstream_cx_timeout_total{{reason=\"idle\"}} {IDLE}"
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_listener_maximum_are_closed_at_accept() {
    const MAX: usize = 20;
    let proxy = start_with(|o| o.max_connections_per_listener = Some(MAX));
    let addr = addr(&proxy, 0);
    let mut held = Vec::new();
    for _ in 0..MAX {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // Let the accept loop take them all before the one too many.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = TcpStream::connect(addr).await.unwrap();
    let _ = over.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let (text, closed) = read_until_closed(&mut over, Duration::from_secs(3)).await;
    assert!(closed && text.is_empty(), "{text:?}");
    assert!(proxy
        .metrics_text()
        .contains("warden_downstream_cx_overflow_total 1"));
    // Room again once some are gone.
    held.truncate(MAX - 5);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(good_client(addr, 5).await, 5);
}

/// A connection from `source` (a 127.0.0.x address) to `to`.
async fn connect_from(source: [u8; 4], to: std::net::SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind((std::net::Ipv4Addr::from(source), 0).into())
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// `PER_IP` connections from 127.0.0.2 each with a request in flight (an upstream that waits
/// 3 s), then one more request from the same address and one from 127.0.0.3: (what the one
/// too many got, whether it was closed; the other address's status).
async fn per_ip_probe(to: std::net::SocketAddr) -> ((String, bool), u16) {
    let mut held = Vec::new();
    for i in 0..PER_IP {
        let mut s = connect_from([127, 0, 0, 2], to).await;
        let request = format!("GET /delay/3000/{i} HTTP/1.1\r\nHost: a\r\n\r\n");
        s.write_all(request.as_bytes()).await.unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut over = connect_from([127, 0, 0, 2], to).await;
    let _ = over.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let refused = read_until_closed(&mut over, Duration::from_secs(2)).await;
    let mut other = connect_from([127, 0, 0, 3], to).await;
    other
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (text, _) = read_until_closed(&mut other, Duration::from_secs(3)).await;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (refused, status)
}

const PER_IP: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_per_ip_cap_are_closed_at_accept() {
    let up = echo_http("slow").await;
    let mut opts = ProxyOptions::loopback(inline(&http_config(up.addr, "", "")));
    opts.max_connections_per_ip = Some(PER_IP);
    let proxy = Proxy::start(opts).expect("proxy starts");
    let ((text, closed), other) = per_ip_probe(addr(&proxy, 0)).await;
    assert!(closed && text.is_empty(), "the one too many got {text:?}");
    assert_eq!(other, 200, "another address is served");
    let metrics = proxy.metrics_text();
    assert!(
        metrics.contains("warden_downstream_cx_overflow_per_ip_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains("warden_downstream_cx_overflow_total 1"));
}

/// nginx's `limit_conn $binary_remote_addr` on the same probe: it counts connections with a
/// request in progress and answers the one too many 503 (warden closes it at accept, before
/// reading anything); another address is served by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_limit_conn_refuses_the_same_connection() {
    let up = echo_http("slow").await;
    let nginx = warden_testkit::Nginx::start(&format!(
        "  limit_conn_zone $binary_remote_addr zone=per_ip:1m;\n  server {{ listen {{listen}}; limit_conn per_ip {PER_IP}; location / {{ proxy_pass http://{}; proxy_http_version 1.1; }} }}",
        up.addr
    ))
    .expect("nginx starts");
    let ((text, _), other) = per_ip_probe(nginx.addr()).await;
    assert!(text.starts_with("HTTP/1.1 503"), "nginx: {text:?}");
    assert_eq!(other, 200, "nginx serves another address");
}
