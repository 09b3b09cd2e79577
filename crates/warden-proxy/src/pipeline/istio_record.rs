//! Istio's standard metrics of one answered request ([`crate::core::istio_metrics`]): the
//! request's edge, cached on its cluster (a gateway, a sidecar's outbound side) or on its
//! connection (a sidecar's inbound side: the peer), then atomic adds. Labels are resolved
//! only the first time an edge is met.

use super::Shared;
use crate::core::conn::ConnCtx;
use crate::core::destination::Side;
use crate::core::grpc_messages::ReportMessages;
use crate::core::istio_metrics::Edge;
use crate::core::local_reply::ResponseFlag;
use crate::routing::{Route, RouteAction};
use crate::upstream::body::ProxyBody;
use crate::upstream::cluster::Cluster;
use http::Response;
use http_body::Body as _;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// What the request itself leaves for its series.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct RequestSide {
    /// The index of the route's cluster the request went to.
    pub picked: Option<usize>,
    /// The body's declared size (content-length).
    pub bytes: u64,
    pub grpc: bool,
}

/// The route's cluster the request went to; a request answered before one was picked
/// counts toward the route's first (as Envoy's route entry names it).
fn cluster_of(route: Option<&Route>, picked: Option<usize>) -> Option<&Cluster> {
    let RouteAction::Forward { clusters, .. } = &route?.action else {
        return None;
    };
    clusters.get(picked.unwrap_or(0)).map(|w| &*w.cluster)
}

fn edge<'a>(shared: &'a Shared, conn: &'a ConnCtx, cluster: Option<&'a Cluster>) -> &'a Edge {
    if conn.side == Side::Inbound {
        return conn.istio.get_or_init(|| {
            let principal = conn
                .tls
                .as_ref()
                .and_then(|t| t.peer.as_ref())
                .and_then(|p| p.principal.as_deref());
            shared.snapshot.load().inbound_edge(principal, conn.port)
        });
    }
    match cluster {
        Some(c) => c
            .istio
            .get_or_init(|| shared.snapshot.load().outbound_edge(Some(c))),
        None => shared
            .metrics
            .istio
            .unrouted
            .get_or_init(|| shared.snapshot.load().outbound_edge(None)),
    }
}

fn grpc_status(response: &Response<ProxyBody>) -> &'static str {
    response
        .headers()
        .get("grpc-status")
        .and_then(|v| crate::core::grpc_messages::status_label(v.as_bytes()))
        .unwrap_or("")
}

/// Count one answered request in Istio's metrics; a gRPC request's messages are counted as
/// its bodies pass (`grpc_requests`: the request's, counted as it went upstream), and added to
/// its series when the response body ends.
#[allow(clippy::too_many_arguments)]
pub(super) fn record(
    shared: &Shared,
    conn: &ConnCtx,
    elapsed: Duration,
    response: &mut Response<ProxyBody>,
    route: Option<&Route>,
    request: RequestSide,
    flag: Option<ResponseFlag>,
    grpc_requests: Option<&Arc<AtomicU64>>,
) {
    let edge = edge(shared, conn, cluster_of(route, request.picked));
    let grpc = request.grpc.then(|| grpc_status(response));
    if let Some(status) = grpc {
        count_messages(shared, edge, response, flag, status, grpc_requests);
    }
    let response_bytes = response.body().size_hint().exact().unwrap_or(0);
    shared.metrics.istio.record_http(
        edge,
        response.status().as_u16(),
        flag,
        grpc,
        elapsed.as_micros() as u64,
        request.bytes,
        response_bytes,
    );
}

/// The response body of a gRPC request, wrapped to count its messages and report both
/// directions' when it ends.
#[cold]
fn count_messages(
    shared: &Shared,
    edge: &Edge,
    response: &mut Response<ProxyBody>,
    flag: Option<ResponseFlag>,
    status: &'static str,
    grpc_requests: Option<&Arc<AtomicU64>>,
) {
    let series = shared
        .metrics
        .istio
        .grpc_series(edge, response.status().as_u16(), flag, status);
    let requests = grpc_requests.cloned().unwrap_or_default();
    let body = std::mem::replace(response.body_mut(), ProxyBody::Empty);
    *response.body_mut() = ProxyBody::Boxed(Box::pin(ReportMessages::new(body, requests, series)));
}

/// Count a request that got no answer: the client went away first (Envoy's code `0` with
/// `DC`).
pub(super) fn record_unanswered(
    shared: &Shared,
    conn: &ConnCtx,
    elapsed: Duration,
    route: Option<&Route>,
    request: RequestSide,
    flag: ResponseFlag,
) {
    let edge = edge(shared, conn, cluster_of(route, request.picked));
    shared.metrics.istio.record_http(
        edge,
        0,
        Some(flag),
        request.grpc.then_some(""),
        elapsed.as_micros() as u64,
        request.bytes,
        0,
    );
}

/// The index of `target` among `route`'s clusters, when it has several.
pub(super) fn picked(route: &Route, target: &crate::routing::WeightedCluster) -> Option<usize> {
    match &route.action {
        RouteAction::Forward { clusters, .. } if clusters.len() > 1 => {
            clusters.iter().position(|c| std::ptr::eq(c, target))
        }
        _ => None,
    }
}

/// What the request's head says of its side: the declared body size and whether it is gRPC
/// (HTTP/2 only: the fast path's HTTP/1.1 requests are never gRPC, and pay no lookup).
pub(super) fn request_side(parts: &http::request::Parts, body: &ProxyBody) -> RequestSide {
    let grpc = parts.version == http::Version::HTTP_2
        && parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    RequestSide {
        picked: None,
        bytes: body.size_hint().exact().unwrap_or(0),
        grpc,
    }
}
