//! Upstream clusters built from ServiceEntry (+ DestinationRule): endpoints, load balancing,
//! the connection-pool limit (Envoy's circuit breaker on in-flight requests) and how long
//! HTTP/1.1 connections are reused.

use crate::upstream::h1_pool::ReuseLimits;
use crate::upstream::outlier::{Outcome, OutlierDetector, OutlierPolicy};
use http::uri::Authority;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LbPolicy {
    RoundRobin,
    LeastRequest,
    Random,
}

impl LbPolicy {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "ROUND_ROBIN" => Ok(LbPolicy::RoundRobin),
            "LEAST_REQUEST" | "LEAST_CONN" => Ok(LbPolicy::LeastRequest),
            "RANDOM" => Ok(LbPolicy::Random),
            other => Err(format!(
                "unsupported load balancer {other:?} (ROUND_ROBIN, LEAST_REQUEST, RANDOM)"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum UpstreamProtocol {
    Http1,
    /// HTTP/2 with prior knowledge (h2c).
    Http2,
    /// Envoy's USE_DOWNSTREAM_PROTOCOL (Istio's inbound clusters): HTTP/2 for an HTTP/2
    /// request (gRPC), HTTP/1.1 otherwise.
    Downstream,
}

impl UpstreamProtocol {
    /// What a request of `version` is sent upstream in: never [`UpstreamProtocol::Downstream`].
    pub fn for_request(self, version: http::Version) -> UpstreamProtocol {
        match self {
            UpstreamProtocol::Downstream if version == http::Version::HTTP_2 => {
                UpstreamProtocol::Http2
            }
            UpstreamProtocol::Downstream => UpstreamProtocol::Http1,
            p => p,
        }
    }
}

#[derive(Debug)]
pub struct Endpoint {
    /// `ip:port` or `dns-name:port`, pre-parsed for building upstream URIs without parsing.
    pub authority: Authority,
    active: AtomicU32,
}

impl Endpoint {
    pub fn new(authority: Authority) -> Self {
        Endpoint {
            authority,
            active: AtomicU32::new(0),
        }
    }

    /// Requests in flight to this endpoint now (the admin `/clusters`' `rq_active`).
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
pub struct Cluster {
    /// Envoy-style `outbound|port||host`.
    pub name: String,
    pub endpoints: Vec<Endpoint>,
    pub lb: LbPolicy,
    pub protocol: UpstreamProtocol,
    /// Maximum in-flight requests; `u32::MAX` means unlimited.
    pub max_requests: u32,
    /// `maxRequestsPerConnection` / `idleTimeout`, applied by the HTTP/1.1 pool.
    pub reuse: ReuseLimits,
    /// Envoy's ORIGINAL_DST: no endpoints of its own, each request goes where its captured
    /// connection was headed (a sidecar's passthrough and inbound clusters).
    pub original_dst: bool,
    /// The local address upstream connections are made from (`127.0.0.6` for a sidecar's
    /// inbound passthrough, which capture rules let through).
    pub source: Option<std::net::IpAddr>,
    /// `outlierDetection`: endpoints ejected after consecutive errors.
    pub outlier: Option<Box<OutlierDetector>>,
    /// DestinationRule `tls`: connections to the endpoints are TLS.
    pub tls: Option<Arc<crate::upstream::tls_origination::UpstreamTls>>,
    /// A cluster Envoy would not have: the route's destination (host, port or subset) is
    /// defined by nothing in the config, so requests get 503 with the `NC` flag (see
    /// `warden_config::dangling`).
    pub missing: bool,
    /// The Istio metrics edge of requests and connections to this cluster from a gateway or a
    /// sidecar's outbound side, resolved at the first one.
    pub istio: std::sync::OnceLock<crate::core::istio_metrics::Edge>,
    rr: AtomicUsize,
    in_flight: AtomicU32,
}

/// Held for the duration of one upstream request; releases the counters it took.
pub struct Lease<'a> {
    cluster: &'a Cluster,
    endpoint: &'a Endpoint,
}

impl Lease<'_> {
    pub fn endpoint(&self) -> &Endpoint {
        self.endpoint
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.cluster.lb == LbPolicy::LeastRequest {
            self.endpoint.active.fetch_sub(1, Ordering::Relaxed);
        }
        if self.cluster.max_requests != u32::MAX {
            self.cluster.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum PickError {
    NoHealthyUpstream,
    Overflow,
}

impl Cluster {
    pub fn new(
        name: String,
        endpoints: Vec<Endpoint>,
        lb: LbPolicy,
        protocol: UpstreamProtocol,
        max_requests: u32,
    ) -> Self {
        Cluster {
            name,
            endpoints,
            lb,
            protocol,
            max_requests,
            reuse: ReuseLimits::default(),
            original_dst: false,
            source: None,
            outlier: None,
            tls: None,
            missing: false,
            istio: std::sync::OnceLock::new(),
            rr: AtomicUsize::new(0),
            in_flight: AtomicU32::new(0),
        }
    }

    /// The stand-in for a cluster nothing defines ([`Cluster::missing`]).
    pub fn missing(name: String) -> Self {
        Cluster {
            missing: true,
            ..Cluster::new(
                name,
                Vec::new(),
                LbPolicy::RoundRobin,
                UpstreamProtocol::Http1,
                u32::MAX,
            )
        }
    }

    pub fn with_tls(
        mut self,
        tls: Option<Arc<crate::upstream::tls_origination::UpstreamTls>>,
    ) -> Self {
        self.tls = tls;
        self
    }

    pub fn with_reuse(mut self, reuse: ReuseLimits) -> Self {
        self.reuse = reuse;
        self
    }

    pub fn with_outlier(mut self, policy: OutlierPolicy) -> Self {
        let n = self.endpoints.len();
        self.outlier = Some(Box::new(OutlierDetector::new(policy, n, Instant::now())));
        self
    }

    /// What an attempt to endpoint `index` came to, for outlier detection.
    pub fn record(&self, index: usize, outcome: Outcome) {
        if let Some(d) = &self.outlier {
            d.record(index, outcome, Instant::now());
        }
    }

    /// An ORIGINAL_DST cluster, connecting from `source` when given.
    pub fn original_dst(name: String, source: Option<std::net::IpAddr>) -> Self {
        let mut c = Cluster::new(
            name,
            Vec::new(),
            LbPolicy::RoundRobin,
            UpstreamProtocol::Http1,
            u32::MAX,
        );
        c.original_dst = true;
        c.source = source;
        c
    }

    /// Choose an endpoint; `exclude` (an endpoint index) is avoided on retries when possible.
    pub fn pick(&self, exclude: Option<usize>) -> Result<(usize, Lease<'_>), PickError> {
        let n = self.endpoints.len();
        if n == 0 {
            return Err(PickError::NoHealthyUpstream);
        }
        if self.max_requests != u32::MAX
            && self.in_flight.fetch_add(1, Ordering::Relaxed) >= self.max_requests
        {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            return Err(PickError::Overflow);
        }
        let mut index = match self.lb {
            _ if n == 1 => 0,
            LbPolicy::RoundRobin => self.rr.fetch_add(1, Ordering::Relaxed) % n,
            LbPolicy::Random => fastrand::usize(..n),
            LbPolicy::LeastRequest => {
                // Power of two choices, as Envoy's default.
                let a = fastrand::usize(..n);
                let b = fastrand::usize(..n);
                let load = |i: usize| self.endpoints[i].active.load(Ordering::Relaxed);
                if load(b) < load(a) {
                    b
                } else {
                    a
                }
            }
        };
        if exclude == Some(index) && n > 1 {
            index = (index + 1) % n;
        }
        if let Some(d) = &self.outlier {
            let now = Instant::now();
            match (0..n).map(|k| (index + k) % n).find(|&i| !d.skips(i, now)) {
                Some(i) => index = i,
                None => {
                    if self.max_requests != u32::MAX {
                        self.in_flight.fetch_sub(1, Ordering::Relaxed);
                    }
                    return Err(PickError::NoHealthyUpstream);
                }
            }
        }
        let endpoint = &self.endpoints[index];
        if self.lb == LbPolicy::LeastRequest {
            endpoint.active.fetch_add(1, Ordering::Relaxed);
        }
        Ok((
            index,
            Lease {
                cluster: self,
                endpoint,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(n: usize, lb: LbPolicy, max: u32) -> Cluster {
        let eps = (0..n)
            .map(|i| Endpoint::new(format!("127.0.0.1:{}", 1000 + i).parse().unwrap()))
            .collect();
        Cluster::new("c".into(), eps, lb, UpstreamProtocol::Http1, max)
    }

    #[test]
    fn round_robin_cycles() {
        let c = cluster(3, LbPolicy::RoundRobin, u32::MAX);
        let picks: Vec<usize> = (0..6).map(|_| c.pick(None).unwrap().0).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn empty_cluster_has_no_healthy_upstream() {
        let c = cluster(0, LbPolicy::RoundRobin, u32::MAX);
        assert_eq!(c.pick(None).err(), Some(PickError::NoHealthyUpstream));
    }

    #[test]
    fn overflow_when_limit_reached_and_released_on_drop() {
        let c = cluster(1, LbPolicy::Random, 1);
        let lease = c.pick(None).unwrap();
        assert_eq!(c.pick(None).err(), Some(PickError::Overflow));
        drop(lease);
        assert!(c.pick(None).is_ok());
    }

    #[test]
    fn least_request_prefers_idle_endpoint() {
        let c = cluster(2, LbPolicy::LeastRequest, u32::MAX);
        let (first, _held) = c.pick(None).unwrap();
        // With one endpoint busy, every pick that sees both must choose the idle one.
        for _ in 0..50 {
            let (i, _) = c.pick(None).unwrap();
            let _ = i;
        }
        let busy = &c.endpoints[first];
        assert_eq!(busy.active.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn retry_avoids_excluded_endpoint() {
        let c = cluster(2, LbPolicy::Random, u32::MAX);
        for _ in 0..20 {
            assert_eq!(c.pick(Some(0)).unwrap().0, 1);
        }
    }
}
