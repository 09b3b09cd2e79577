//! The Kubernetes Gateway API (`gateway.networking.k8s.io`): GatewayClass, Gateway,
//! HTTPRoute, GRPCRoute, TCPRoute, TLSRoute and ReferenceGrant, read as Istio reads them and
//! translated into the Istio Gateway and VirtualService model the proxy serves
//! (`translate`), with the status conditions a controller would set (`status`).
//!
//! The pure decisions have their own modules and table tests: `precedence` (which match wins),
//! `hostnames` (listener and route hostnames), `attach` (which listeners a route attaches to),
//! `reference_grant` (cross-namespace references), `listener_tls` (a listener's
//! termination mode from Istio's `tls.options`). docs/gateway-api.md is the user's guide.

pub mod attach;
pub mod hostnames;
pub mod kinds;
pub mod listener_tls;
pub mod precedence;
pub mod reference_grant;
pub mod selection;
pub mod status;
pub mod translate;

use crate::document::Doc;
use kinds::*;
use std::collections::BTreeMap;

/// The Gateway API documents of a load, and what translating them found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GatewayApiSet {
    pub gateway_classes: Vec<Doc<GatewayClassSpec>>,
    pub gateways: Vec<Doc<GatewaySpec>>,
    pub http_routes: Vec<Doc<HttpRouteSpec>>,
    pub grpc_routes: Vec<Doc<GrpcRouteSpec>>,
    pub tcp_routes: Vec<Doc<L4RouteSpec>>,
    pub tls_routes: Vec<Doc<L4RouteSpec>>,
    pub reference_grants: Vec<Doc<ReferenceGrantSpec>>,
    /// Labels of the `Namespace` objects of the load, for `allowedRoutes` selectors.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Every GatewayClass, Gateway and route's conditions, Gateways first (`warden check`).
    pub status: Vec<status::ObjectStatus>,
}

impl GatewayApiSet {
    pub fn is_empty(&self) -> bool {
        self.gateway_classes.is_empty()
            && self.gateways.is_empty()
            && self.http_routes.is_empty()
            && self.grpc_routes.is_empty()
            && self.tcp_routes.is_empty()
            && self.tls_routes.is_empty()
    }

    /// The conditions as `warden check` prints them.
    pub fn describe_status(&self) -> String {
        self.status
            .iter()
            .map(status::ObjectStatus::describe)
            .collect()
    }
}

/// How a route translated from a Gateway API route names where it came from (and how a policy's
/// `targetRefs` name that route): `HTTPRoute/namespace/name`.
pub fn route_source(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// The Gateway API's groups (standard and experimental channels).
pub const GROUPS: &[&str] = &["gateway.networking.k8s.io", "gateway.networking.x-k8s.io"];

/// The kinds warden reads from [`GROUPS`], with the versions each is served in.
pub const READ_KINDS: &[(&str, &[&str])] = &[
    ("GatewayClass", &["v1", "v1beta1"]),
    ("Gateway", &["v1", "v1beta1"]),
    ("HTTPRoute", &["v1", "v1beta1"]),
    ("GRPCRoute", &["v1", "v1alpha2"]),
    ("TCPRoute", &["v1", "v1alpha2"]),
    ("TLSRoute", &["v1", "v1alpha2", "v1alpha3"]),
    ("ReferenceGrant", &["v1", "v1beta1", "v1alpha2"]),
];
