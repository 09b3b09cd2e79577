//! `protocol: TCP` servers: bytes both ways and half-close propagation.

mod common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_copies_both_ways_with_half_close() {
    let echo = echo_tcp().await;
    let yaml = format!(
        r#"{gw}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: tcp
spec:
  hosts: ["*"]
  gateways: [gw]
  tcp:
  - route: [{{destination: {{host: echo.tcp, port: {{number: 80}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: echo-tcp
spec:
  hosts: [echo.tcp]
  resolution: STATIC
  ports: [{{number: 80, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1, ports: {{tcp: {port}}}}}]
"#,
        gw = gateway(&[(0, "TCP")]),
        port = echo.port(),
    );
    let proxy = start(&yaml);
    let mut s = tokio::net::TcpStream::connect(addr(&proxy, 0))
        .await
        .unwrap();
    s.write_all(b"hello ").await.unwrap();
    let mut buf = [0u8; 6];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"hello ");
    s.write_all(b"world").await.unwrap();
    // Half-close: our EOF must reach the upstream, whose final bytes must still reach us.
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut rest))
        .await
        .expect("upstream closes after our EOF")
        .unwrap();
    assert_eq!(rest, b"worldbye");
    assert!(proxy
        .metrics_text()
        .contains("warden_tcp_connections_total 1"));
}
