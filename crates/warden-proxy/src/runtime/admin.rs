//! The admin endpoint (Envoy's 15000): `/ready`, `/stats/prometheus`, `/config_dump`,
//! `/listeners`, `/ratelimit/bans` ([`super::admin_bans`]), `/ratelimit/top` (the clients each
//! limiter answers 429 most: `core::heavy_hitters`), `/stats`, `/clusters`, `/server_info`
//! ([`super::admin_pages`]). Served on its own small thread so it answers even when workers are busy.

use crate::core::metrics_exposition::Exposition;
use crate::runtime::state::Control;
use crate::runtime::{admin_bans, admin_pages};
use crate::upstream::cluster::{LbPolicy, UpstreamProtocol};
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

#[derive(serde::Serialize)]
struct ClusterDump<'a> {
    name: &'a str,
    endpoints: Vec<String>,
    lb: LbPolicy,
    protocol: UpstreamProtocol,
    max_requests: Option<u32>,
    max_requests_per_connection: Option<u32>,
    idle_timeout: Option<String>,
}

#[derive(serde::Serialize)]
struct RouteDump {
    port: u16,
    domains: Vec<String>,
    routes: Vec<String>,
}

fn config_dump(shared: &Control) -> serde_json::Value {
    let snap = shared.snapshot.load();
    let clusters: Vec<ClusterDump<'_>> = snap
        .clusters
        .values()
        .map(|c| ClusterDump {
            name: &c.name,
            endpoints: c
                .endpoints
                .iter()
                .map(|e| e.authority.to_string())
                .collect(),
            lb: c.lb,
            protocol: c.protocol,
            max_requests: (c.max_requests != u32::MAX).then_some(c.max_requests),
            max_requests_per_connection: c.reuse.max_requests.map(|n| n.get()),
            idle_timeout: c.reuse.idle_timeout.map(|t| format!("{t:?}")),
        })
        .collect();
    let mut vhosts = Vec::new();
    for (spec, routes) in snap.listeners.iter().zip(&snap.ports) {
        if let crate::snapshot::PortRoutes::Http(table) = routes {
            for vh in &table.vhosts {
                vhosts.push(RouteDump {
                    port: spec.port,
                    domains: vh.domains.clone(),
                    routes: vh.routes.iter().map(|r| r.name.to_string()).collect(),
                });
            }
        }
    }
    serde_json::json!({
        "identity": &shared.identity,
        "listeners": &shared.listeners,
        "virtual_hosts": vhosts,
        "clusters": clusters,
        "filters": snap.filters.stage_names(),
        "config": &snap.config,
        "warnings": snap.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
    })
}

/// When the admin endpoint started, with the proxy (`/server_info`'s uptime).
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// A query parameter's value, percent-decoded.
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn handle(req: &Request<Incoming>, shared: &Control) -> Response<Full<Bytes>> {
    let json = |v: serde_json::Value| {
        respond(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec_pretty(&v).unwrap_or_default(),
        )
    };
    let snapshot = shared.snapshot.load();
    let local = snapshot.filters.local_rate_limit.as_ref();
    if req.method() == Method::DELETE && req.uri().path() == "/ratelimit/bans" {
        return match admin_bans::lift(local, req.uri().query()) {
            Ok(n) => json(serde_json::json!({ "lifted": n })),
            Err(why) => respond(StatusCode::BAD_REQUEST, "text/plain", format!("{why}\n")),
        };
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return respond(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
    }
    match req.uri().path() {
        "/ratelimit/bans" => json(admin_bans::list(local)),
        "/ratelimit/bans/authorizationpolicy" => respond(
            StatusCode::OK,
            "application/yaml",
            admin_bans::authorization_policy(local),
        ),
        "/ratelimit/top" => json(shared.limited.top_json(
            warden_ratelimit::heavy_hitters::top_n(req.uri().query()),
        )),
        "/ready" => respond(StatusCode::OK, "text/plain", "LIVE\n"),
        "/stats/prometheus" => {
            let exposition = Exposition::negotiate(
                req.headers().get(header::ACCEPT).map(HeaderValue::as_bytes),
            );
            respond(
                StatusCode::OK,
                exposition.content_type(),
                shared.metrics.encode_as(exposition, |r| {
                    shared.snapshot.load().filters.register_metrics(r)
                }),
            )
        }
        "/stats" => {
            let filter = query_param(req.uri().query(), "filter")
                .map(|f| regex::Regex::new(&f))
                .transpose();
            match filter {
                Ok(filter) => respond(
                    StatusCode::OK,
                    "text/plain; charset=utf-8",
                    admin_pages::stats(
                        &shared
                            .metrics
                            .encode_with(|r| shared.snapshot.load().filters.register_metrics(r)),
                        filter.as_ref(),
                    ),
                ),
                Err(e) => respond(StatusCode::BAD_REQUEST, "text/plain", format!("filter: {e}\n")),
            }
        }
        "/clusters" => respond(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            admin_pages::clusters(
                snapshot.clusters.values().map(|c| &**c),
                std::time::Instant::now(),
            ),
        ),
        "/server_info" => json(admin_pages::server_info(
            "LIVE",
            STARTED.get().map_or(Duration::ZERO, |t| t.elapsed()),
            &std::env::args().collect::<Vec<_>>(),
            &shared.identity,
        )),
        "/config_dump" => json(config_dump(shared)),
        "/listeners" => json(serde_json::to_value(&shared.listeners).unwrap_or_default()),
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "admin: /ready /stats /stats/prometheus /clusters /server_info /config_dump /listeners \
             /ratelimit/bans /ratelimit/top\n",
        ),
    }
}

/// Serve until `stop` resolves.
pub async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Control>,
    stop: impl std::future::Future<Output = ()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot register admin listener");
            return;
        }
    };
    STARTED.get_or_init(std::time::Instant::now);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let resp = handle(&req, &shared);
                        async move { Ok::<_, Infallible>(resp) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            _ = &mut stop => break,
        }
    }
}
