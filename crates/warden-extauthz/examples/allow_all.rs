//! A minimal ext_authz gRPC provider that allows every request (OK, no edits): the provider
//! `bench/extauthz.sh` measures the proxy against, so the bench sees the proxy's cost rather
//! than a slow provider's (a Python grpcio one answers ~430 checks/s).
//!
//! `cargo run --release -p warden-extauthz --example allow_all -- 127.0.0.1:9191`

use envoy_types::ext_authz::v3::pb::{Authorization, AuthorizationServer};
use envoy_types::ext_authz::v3::CheckResponseExt;
use warden_extauthz::{CheckRequest, CheckResponse};

struct AllowAll;

#[tonic::async_trait]
impl Authorization for AllowAll {
    async fn check(
        &self,
        _request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        Ok(tonic::Response::new(CheckResponse::with_status(
            tonic::Status::ok(""),
        )))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9191".into())
        .parse()?;
    eprintln!("allow-all ext_authz provider on {addr}");
    tonic::transport::Server::builder()
        .add_service(AuthorizationServer::new(AllowAll))
        .serve(addr)
        .await?;
    Ok(())
}
