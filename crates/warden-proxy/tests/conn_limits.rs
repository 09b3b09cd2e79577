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
