//! A plain tonic server answering `grpc.health.v1/Check` and nothing else: the reference for
//! `bench/ratelimit.sh`'s latency floor, to tell `warden ratelimit`'s own HTTP/2 serving apart
//! from the load client and the machine.
//!
//! `cargo run --release -p warden-ratelimit --example plain_health_server -- 127.0.0.1:8090`

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8090".into())
        .parse()?;
    let reporter = tonic_health::server::HealthReporter::new();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    tonic::transport::Server::builder()
        .add_service(tonic_health::pb::health_server::HealthServer::new(
            tonic_health::server::HealthService::from_health_reporter(reporter),
        ))
        .serve(addr)
        .await?;
    Ok(())
}
