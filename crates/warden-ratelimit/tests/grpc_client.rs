//! `grpc_client` (the proxy's RLS client) against the real service and against hand-made
//! HTTP/2 answers: decisions under 1000 concurrent calls on one connection, the health check,
//! error statuses in trailers and in trailers-only answers, and non-200 answers.

mod common;

use bytes::Bytes;
use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use h2::client::SendRequest;
use http::uri::Authority;
use tokio::net::{TcpListener, TcpStream};
use tonic::Code;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use warden_ratelimit::grpc_client::{self, HEALTH_CHECK, SHOULD_RATE_LIMIT};

const CONFIG: &str = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 600}
";

async fn connect(addr: std::net::SocketAddr) -> (SendRequest<Bytes>, Authority) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (send, connection) = grpc_client::handshake(stream).await.unwrap();
    tokio::spawn(connection);
    (send, addr.to_string().parse().unwrap())
}

#[tokio::test]
async fn a_thousand_concurrent_calls_on_one_connection_get_exact_decisions() {
    let h = start(&[("config.yaml", CONFIG)], None).await;
    let (send, authority) = connect(h.server.grpc_addr()).await;
    let uri = grpc_client::method_uri(&authority, SHOULD_RATE_LIMIT);
    let request = req("d", vec![desc(&[("k", "v")])]);
    // All calls in flight at once: their answers sit unread in h2's buffers together, which
    // h2's default 64 KiB window would answer with GOAWAY (ENHANCE_YOUR_CALM).
    let calls = (0..1000).map(|_| {
        let (send, uri, request) = (send.clone(), uri.clone(), request.clone());
        tokio::spawn(async move {
            grpc_client::unary::<_, RateLimitResponse>(send, &uri, &request).await
        })
    });
    let (mut ok, mut over) = (0, 0);
    for call in futures_util::future::join_all(calls).await {
        match call.unwrap().unwrap().overall_code {
            OK => ok += 1,
            OVER => over += 1,
            other => panic!("unexpected code {other}"),
        }
    }
    assert_eq!((ok, over), (600, 400));
}

#[tokio::test]
async fn health_check_and_error_statuses_from_the_service() {
    let h = start(&[("config.yaml", CONFIG)], None).await;
    let (send, authority) = connect(h.server.grpc_addr()).await;
    let health = grpc_client::unary::<_, HealthCheckResponse>(
        send.clone(),
        &grpc_client::method_uri(&authority, HEALTH_CHECK),
        &HealthCheckRequest::default(),
    )
    .await
    .unwrap();
    assert_eq!(health.status, 1, "SERVING");

    // The service's own error (empty domain): a status in the trailers.
    let uri = grpc_client::method_uri(&authority, SHOULD_RATE_LIMIT);
    let err = grpc_client::unary::<_, RateLimitResponse>(send.clone(), &uri, &req("", vec![]))
        .await
        .unwrap_err();
    assert_ne!(err.code(), Code::Ok);
    assert!(err.message().contains("domain must not be empty"), "{err}");

    // A method the service does not have: a trailers-only answer.
    let unknown = grpc_client::method_uri(&authority, "/no.Such/Method");
    let err = grpc_client::unary::<_, RateLimitResponse>(send, &unknown, &req("d", vec![]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err}");
}

/// An HTTP/2 server that answers every request with `status` and no gRPC status, like a
/// proxy in front of the service that cannot reach it.
async fn plain_h2_server(status: u16) -> std::net::SocketAddr {
    h2_server(move || http::Response::builder().status(status).body(()).unwrap()).await
}

/// An HTTP/2 server that answers every request with the head `response` makes, ending the
/// stream there.
async fn h2_server(
    response: impl Fn() -> http::Response<()> + Clone + Send + 'static,
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let response = response.clone();
            tokio::spawn(async move {
                let mut conn = h2::server::handshake(stream).await.unwrap();
                while let Some(Ok((_request, mut respond))) = conn.accept().await {
                    let _ = respond.send_response(response(), true);
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn non_200_answers_map_to_grpc_codes() {
    for (status, code) in [
        (503, Code::Unavailable),
        (404, Code::Unimplemented),
        (500, Code::Unknown),
    ] {
        let (send, authority) = connect(plain_h2_server(status).await).await;
        let uri = grpc_client::method_uri(&authority, SHOULD_RATE_LIMIT);
        let err = grpc_client::unary::<_, RateLimitResponse>(send, &uri, &req("d", vec![]))
            .await
            .unwrap_err();
        assert_eq!(err.code(), code, "HTTP {status}: {err}");
        assert!(err.message().contains(&status.to_string()), "{err}");
    }
}

#[tokio::test]
async fn a_trailers_only_error_keeps_its_code_and_decoded_message() {
    // grpc-status-details-bin that is not base64 made tonic's header parsing panic; the
    // client reads code and message itself.
    let addr = h2_server(|| {
        http::Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", "8")
            .header("grpc-message", "over%20quota")
            .header("grpc-status-details-bin", "!!not base64")
            .body(())
            .unwrap()
    })
    .await;
    let (send, authority) = connect(addr).await;
    let uri = grpc_client::method_uri(&authority, SHOULD_RATE_LIMIT);
    let err = grpc_client::unary::<_, RateLimitResponse>(send, &uri, &req("d", vec![]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert_eq!(err.message(), "over quota");
}
