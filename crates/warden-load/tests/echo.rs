//! The echo server through real clients (reqwest over h1 and h2c, raw TCP).

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_load::echo::{EchoConfig, EchoServer};

fn url(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

async fn start() -> (EchoServer, SocketAddr) {
    let echo = EchoServer::start(EchoConfig::loopback()).await.unwrap();
    let addr = echo.http_addr().unwrap();
    (echo, addr)
}

#[tokio::test]
async fn size_status_and_header_parameters() {
    let (echo, addr) = start().await;
    let client = reqwest::Client::new();
    let r = client
        .get(url(
            addr,
            "/any/path?size=100000&status=418&header=X-Test:%20yes",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 418);
    assert_eq!(r.headers()["x-test"], "yes");
    assert_eq!(r.bytes().await.unwrap().len(), 100_000);
    let plain = client.get(url(addr, "/")).send().await.unwrap();
    assert_eq!(plain.status(), 200);
    assert!(plain.bytes().await.unwrap().is_empty());
    assert_eq!(echo.total(), 2);
}

#[tokio::test]
async fn weighted_status_list_splits_traffic() {
    let (_echo, addr) = start().await;
    let client = reqwest::Client::new();
    let (mut s503, mut s200, mut other) = (0, 0, 0);
    for _ in 0..400 {
        let r = client
            .get(url(addr, "/?status=503:50"))
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            503 => s503 += 1,
            200 => s200 += 1,
            _ => other += 1,
        }
    }
    assert_eq!(other, 0);
    // 400 fair coin flips: 50% +- 10% fails with probability < 1e-4.
    assert!((160..=240).contains(&s503), "503: {s503}, 200: {s200}");
}

#[tokio::test]
async fn bad_parameters_get_400_with_a_reason() {
    let (echo, addr) = start().await;
    let client = reqwest::Client::new();
    for query in ["status=42", "size=x", "delay=5", "status=503:90,429:20"] {
        let r = client
            .get(url(addr, &format!("/?{query}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{query}");
        let text = r.text().await.unwrap();
        assert!(text.contains("bad echo parameter"), "{query}: {text}");
    }
    assert_eq!(echo.total(), 4);
}

#[tokio::test]
async fn delay_parameter_delays_the_response() {
    let (_echo, addr) = start().await;
    let client = reqwest::Client::new();
    let start = Instant::now();
    let r = client.get(url(addr, "/?delay=200ms")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(start.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn post_body_is_streamed_back() {
    let (_echo, addr) = start().await;
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let r = reqwest::Client::new()
        .post(url(addr, "/echo"))
        .header("content-type", "application/octet-stream")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    assert_eq!(r.bytes().await.unwrap().as_ref(), body.as_slice());
}

#[tokio::test]
async fn h2c_prior_knowledge_is_served() {
    let (echo, addr) = start().await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let r = client.get(url(addr, "/?size=1024")).send().await.unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.bytes().await.unwrap().len(), 1024);
    assert_eq!(echo.total(), 1);
}

#[tokio::test]
async fn count_endpoint_reports_per_ip_and_is_not_counted() {
    let (echo, addr) = start().await;
    let client = reqwest::Client::new();
    for _ in 0..3 {
        client.get(url(addr, "/x")).send().await.unwrap();
    }
    let counts: serde_json::Value = client
        .get(url(addr, "/count"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(counts["total"], 3);
    assert_eq!(counts["by_ip"]["127.0.0.1"], 3);
    let before_reset: serde_json::Value = client
        .delete(url(addr, "/count"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(before_reset["total"], 3);
    assert_eq!(echo.total(), 0);
    assert!(echo.counts().is_empty());
    let r = client.post(url(addr, "/count")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(echo.total(), 0);
}

#[tokio::test]
async fn tcp_echo_writes_back_what_it_reads() {
    let echo = EchoServer::start(EchoConfig::loopback()).await.unwrap();
    let mut stream = tokio::net::TcpStream::connect(echo.tcp_addr().unwrap())
        .await
        .unwrap();
    let payload: Vec<u8> = (0..50_000u32).map(|i| (i % 253) as u8).collect();
    let (mut reader, mut writer) = stream.split();
    let write = async {
        writer.write_all(&payload).await.unwrap();
    };
    let mut back = vec![0u8; payload.len()];
    let read = reader.read_exact(&mut back);
    let (_, read) = tokio::join!(write, read);
    read.unwrap();
    assert_eq!(back, payload);
}

#[tokio::test]
async fn shutdown_closes_the_listener() {
    let (echo, addr) = start().await;
    echo.shutdown().await;
    let err = reqwest::Client::new().get(url(addr, "/")).send().await;
    assert!(err.is_err());
}
