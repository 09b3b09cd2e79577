//! The load generator against the in-process echo server (and two purpose-built servers).

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use warden_load::echo::{EchoConfig, EchoServer};
use warden_load::load::{run, LoadConfig};

async fn echo() -> EchoServer {
    EchoServer::start(EchoConfig::loopback()).await.unwrap()
}

fn http(echo: &EchoServer, path: &str) -> String {
    format!("http://{}{path}", echo.http_addr().unwrap())
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_count_reaches_the_server_exactly() {
    let echo = echo().await;
    let report = run(LoadConfig {
        target: http(&echo, "/?size=128"),
        connections: 8,
        requests: Some(1000),
        duration: None,
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(report.requests(), 1000);
    assert_eq!(report.status_codes, BTreeMap::from([(200, 1000)]));
    assert_eq!(report.bytes_received, 128 * 1000);
    assert_eq!(echo.total(), 1000);
    assert_eq!(report.sockets, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_rate_is_met_within_two_percent() {
    let echo = echo().await;
    let report = run(LoadConfig {
        target: http(&echo, "/"),
        connections: 4,
        qps: 200.0,
        duration: Some(Duration::from_secs(5)),
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    let rate = report.achieved_rps();
    assert!((rate - 200.0).abs() / 200.0 < 0.02, "achieved {rate}");
    assert_eq!(report.requests(), 1000);
    assert_eq!(echo.total(), 1000);
    assert!(report.latency_corrected);
    assert!(report.to_text().contains("requested 200 req/s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_parameter_shows_as_median_latency() {
    let echo = echo().await;
    let report = run(LoadConfig {
        target: http(&echo, "/?delay=10ms"),
        connections: 4,
        requests: Some(100),
        duration: None,
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    let p50 = report.percentile(50.0);
    assert!(
        p50 >= Duration::from_millis(10) && p50 < Duration::from_millis(14),
        "p50 {p50:?}"
    );
}

/// A test server on a free loopback port: `serve` runs once per accepted connection.
async fn spawn_server<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    addr
}

/// An HTTP/1 server that answers at once, except that everything arriving between 1 s and 2 s
/// after it started is held until 2 s: a one-second stall.
async fn stalling_server() -> SocketAddr {
    let stall_from = Instant::now() + Duration::from_secs(1);
    let stall_until = stall_from + Duration::from_secs(1);
    spawn_server(move |stream| async move {
        let service = service_fn(move |_req| async move {
            let now = Instant::now();
            if now >= stall_from && now < stall_until {
                tokio::time::sleep_until(stall_until).await;
            }
            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::new())))
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stall_shows_in_p99_at_fixed_rate() {
    let addr = stalling_server().await;
    let report = run(LoadConfig {
        target: format!("http://{addr}/"),
        connections: 4,
        qps: 100.0,
        duration: Some(Duration::from_secs(3)),
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(report.requests(), 300);
    // Only ~4 requests were in flight when the stall began; without the correction p99 would be
    // a fraction of a millisecond. With it, the ~100 requests due during the stall count.
    let p99 = report.percentile(99.0);
    assert!(p99 >= Duration::from_millis(800), "p99 {p99:?}");
    let p50 = report.percentile(50.0);
    assert!(p50 < Duration::from_millis(100), "p50 {p50:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_ip_is_the_peer_the_server_sees() {
    let echo = echo().await;
    run(LoadConfig {
        target: http(&echo, "/"),
        connections: 2,
        requests: Some(20),
        duration: None,
        source_ips: vec![ip("127.0.0.2")],
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(echo.counts(), BTreeMap::from([(ip("127.0.0.2"), 20)]));
    echo.reset_counts();
    // A list spreads connections over the addresses: connection i uses address i % len.
    run(LoadConfig {
        target: http(&echo, "/"),
        connections: 2,
        qps: 200.0,
        requests: Some(20),
        duration: None,
        source_ips: vec![ip("127.0.0.3"), ip("127.0.0.4")],
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    let counts = echo.counts();
    assert_eq!(
        counts.keys().copied().collect::<Vec<_>>(),
        [ip("127.0.0.3"), ip("127.0.0.4")]
    );
    assert_eq!(counts.values().sum::<u64>(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_round_trips_carry_the_payload() {
    let echo = echo().await;
    let report = run(LoadConfig {
        target: format!("tcp://{}", echo.tcp_addr().unwrap()),
        connections: 3,
        requests: Some(60),
        duration: None,
        body: Bytes::from(vec![7u8; 4096]),
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(report.completed(), 60);
    assert_eq!(report.failed(), 0);
    assert_eq!(report.bytes_sent, 60 * 4096);
    assert_eq!(report.bytes_received, 60 * 4096);
    assert_eq!(report.to_fortio().ret_codes["OK"], 60);
}

/// A server that speaks only HTTP/2: an HTTP/1 client would fail every request.
async fn h2_only_server() -> SocketAddr {
    spawn_server(|stream| async move {
        let service = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
            let version = format!("{:?}", req.version());
            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(version))))
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), service)
            .await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_works_with_h2c_and_the_flag() {
    let addr = h2_only_server().await;
    for (target, http2) in [
        (format!("h2c://{addr}/"), false),
        (format!("http://{addr}/"), true),
    ] {
        let report = run(LoadConfig {
            target,
            http2,
            connections: 2,
            requests: Some(50),
            duration: None,
            ..LoadConfig::default()
        })
        .await
        .unwrap();
        assert_eq!(
            report.status_codes,
            BTreeMap::from([(200, 50)]),
            "{}",
            report.to_text()
        );
        assert_eq!(report.bytes_received, 50 * "HTTP/2.0".len() as u64);
    }
    let echo = echo().await;
    let report = run(LoadConfig {
        target: format!("h2c://{}/?size=1024", echo.http_addr().unwrap()),
        connections: 2,
        requests: Some(40),
        duration: None,
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(report.bytes_received, 40 * 1024);
    assert_eq!(echo.total(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_payload_and_no_keepalive() {
    let echo = echo().await;
    let report = run(LoadConfig {
        target: http(&echo, "/"),
        connections: 2,
        requests: Some(30),
        duration: None,
        method: http::Method::POST,
        body: Bytes::from(vec![b'a'; 1000]),
        keepalive: false,
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(report.status_codes, BTreeMap::from([(200, 30)]));
    assert_eq!(report.bytes_received, 30 * 1000);
    assert_eq!(report.sockets, 30);
    assert_eq!(echo.total(), 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_errors_and_all_failed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let report = run(LoadConfig {
        target: format!("http://{addr}/"),
        connections: 2,
        requests: Some(10),
        duration: None,
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    assert!(report.all_failed());
    assert_eq!(report.errors.get("connection refused"), Some(&10));
    assert_eq!(report.to_fortio().ret_codes["-1"], 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_are_counted_as_errors() {
    let echo = echo().await;
    let report = run(LoadConfig {
        target: http(&echo, "/?delay=2s"),
        connections: 2,
        requests: Some(2),
        duration: None,
        timeout: Duration::from_millis(100),
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(report.errors.get("timeout"), Some(&2));
    assert!(report.all_failed());
}

#[tokio::test]
async fn bad_settings_are_rejected() {
    for (config, expect) in [
        (
            LoadConfig {
                target: "ftp://x/".into(),
                ..LoadConfig::default()
            },
            "scheme",
        ),
        (
            LoadConfig {
                target: "http://127.0.0.1:1/".into(),
                connections: 0,
                ..LoadConfig::default()
            },
            "connections",
        ),
        (
            LoadConfig {
                target: "http://127.0.0.1:1/".into(),
                qps: -1.0,
                ..LoadConfig::default()
            },
            "qps",
        ),
        (
            LoadConfig {
                target: "http://127.0.0.1:1/".into(),
                source_ips: vec![ip("::1")],
                ..LoadConfig::default()
            },
            "families",
        ),
    ] {
        let err = run(config).await.unwrap_err().to_string();
        assert!(err.contains(expect), "{err}");
    }
}

/// An HTTP/1.1 server whose bodies have no length, so hyper sends them chunked.
async fn chunked_server() -> SocketAddr {
    use http_body_util::StreamBody;
    spawn_server(|stream| async move {
        let service = service_fn(|_req| async {
            let chunks = ["abc", "defgh", "ij"].map(|c| {
                Ok::<_, Infallible>(hyper::body::Frame::data(Bytes::from_static(c.as_bytes())))
            });
            let body = StreamBody::new(futures_util::stream::iter(chunks));
            Ok::<_, Infallible>(hyper::Response::new(body))
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_responses_are_read_whole_on_kept_alive_connections() {
    let addr = chunked_server().await;
    let report = run(LoadConfig {
        target: format!("http://{addr}/"),
        connections: 2,
        requests: Some(50),
        duration: None,
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(
        report.status_codes,
        BTreeMap::from([(200, 50)]),
        "{}",
        report.to_text()
    );
    assert_eq!(report.bytes_received, 50 * 10);
    // Kept alive: no socket per request. A connection opens lazily, so when the other one
    // has already taken all 50 requests it never opens (seen once in CI-like load).
    assert!((1..=2).contains(&report.sockets), "{}", report.sockets);
}
