//! Stage 4, local rate limit: [`warden_local_ratelimit::LocalLimiter`] per request after authz,
//! and its L4 connection limit when a TCP listener accepts.

use crate::core::dynamic_metadata::DynamicMetadata;
use crate::core::identity::ProxyIdentity;
use crate::core::local_reply::ResponseFlag;
use crate::core::metrics::{GroupResultLabels, Metrics};
use crate::core::request_attrs::RequestAttrs;
use crate::filters::chain::{FilterState, Flow, HttpFilter, LOCAL_RATE_LIMIT};
use crate::filters::route_sites::{rate_limits_at, RouteCatalog, SiteTable};
use crate::routing::{Route, RouteAction};
use crate::upstream::body::ProxyBody;
use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Response};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::net::IpAddr;
use std::sync::Arc;
use warden_config::{ConfigSet, Problem};
use warden_local_ratelimit::{
    GroupStats, LimiterOptions, LocalLimiter, RateLimitHeaders, TableStats,
};

/// The local limiter of a snapshot plus what it needs to know about listeners.
#[derive(Debug)]
pub struct LocalRateLimitFilter {
    limiter: Arc<LocalLimiter>,
    /// Configured port -> the Gateway declaring it (first one wins), for `targetRefs` to a
    /// Gateway.
    gateways_by_port: Vec<(u16, Arc<str>)>,
    /// The per-route `local_ratelimit` configs (indices into the EnvoyFilters'
    /// `route_local`) at each route.
    per_route: SiteTable<Vec<u32>>,
    /// The route `rate_limits` patches (indices into the EnvoyFilters' `route_rate_limits`)
    /// whose actions feed descriptors at each route.
    rate_limits_at: SiteTable<Vec<u32>>,
    /// `EnvoyFilter/name spec.configPatches[i] -> vhost ... route ...`, for `warden check`.
    pub landings: Vec<String>,
}

/// What the pipeline does with a request after the limiter looked at it.
/// Envoy's response code details of a local 429.
pub const LOCAL_RATE_LIMITED: &str = "local_rate_limited";

pub enum LimitVerdict<'a> {
    /// Forward; add `response_headers` (x-ratelimit-*) to the response and `request_headers`
    /// (shadow mode's `request_headers_to_add_when_not_enforced`) to the upstream request.
    Pass {
        response_headers: Option<RateLimitHeaders>,
        request_headers: &'a [(HeaderName, HeaderValue)],
        /// The rule that would have limited a shadow-mode request.
        shadow_rule: Option<&'a str>,
    },
    /// Answer this 429 (never reaches the upstream) with `response_headers` (x-ratelimit-*)
    /// added last; `rule` decided.
    Limited {
        response: Response<ProxyBody>,
        response_headers: Option<RateLimitHeaders>,
        rule: Option<&'a Arc<str>>,
    },
}

impl LocalRateLimitFilter {
    /// Compile the local limits of `set`; `None` when there are none. `previous` hands over
    /// bucket state of unchanged rules (and the per-key table).
    pub fn build(
        set: &ConfigSet,
        identity: &ProxyIdentity,
        routes: &RouteCatalog,
        previous: Option<&LocalRateLimitFilter>,
    ) -> Result<Option<LocalRateLimitFilter>, Vec<Problem>> {
        let opts = LimiterOptions {
            proxy_labels: Some(identity.labels.clone()),
            proxy_is_sidecar: Some(identity.sidecar.is_some()),
            ..LimiterOptions::default()
        };
        let limiter = LocalLimiter::from_config(set, opts, previous.map(|p| p.limiter.as_ref()))?;
        for w in limiter.warnings() {
            tracing::warn!("{w}");
        }
        if limiter.is_empty() && !limiter.has_connection_limits() {
            return Ok(None);
        }
        // Where its per-route configs and route actions land is known here, not to the limiter.
        let patches = warden_local_ratelimit::envoy::interpret(&set.envoy_filters)?;
        let mut problems = Vec::new();
        let mut landings = Vec::new();
        let selected = |o: &warden_local_ratelimit::envoy::PatchOrigin| {
            super::global_rate_limit::selects(o.workload_labels.as_ref(), identity)
        };
        let mut landed = Vec::new();
        for (i, p) in (0u32..).zip(&patches.route_local) {
            if !selected(&p.origin) {
                continue;
            }
            let what = format!("local_ratelimit {}", p.config.stat_prefix);
            if let Some(l) = routes.land(&p.origin, &what, &mut landings, &mut problems) {
                landed.push((i, l));
            }
        }
        let rate_limits =
            routes.land_rate_limits(&patches, selected, &mut Vec::new(), &mut problems);
        if !problems.is_empty() {
            return Err(problems);
        }
        let keys = routes.keys();
        // The most specific per-route config wins, as in Envoy: a route's over its vhost's.
        let on_route = |i: u32| {
            patches
                .route_local
                .get(i as usize)
                .is_some_and(|p| p.origin.apply_to == "HTTP_ROUTE")
        };
        let per_route = SiteTable::build(&keys, |site| {
            let here: Vec<u32> = landed
                .iter()
                .filter(|(_, l)| l.covers(site))
                .map(|(i, _)| *i)
                .collect();
            if here.iter().any(|i| on_route(*i)) {
                here.into_iter().filter(|i| on_route(*i)).collect()
            } else {
                here
            }
        });
        let rate_limits_at = SiteTable::build(&keys, |site| rate_limits_at(&rate_limits, site));
        let mut gateways_by_port: Vec<(u16, Arc<str>)> = Vec::new();
        for gw in &set.gateways {
            for server in &gw.spec.servers {
                let port = server.port.number;
                if !gateways_by_port.iter().any(|(p, _)| *p == port) {
                    gateways_by_port.push((port, Arc::from(gw.metadata.name.as_str())));
                }
            }
        }
        Ok(Some(LocalRateLimitFilter {
            limiter: Arc::new(limiter),
            gateways_by_port,
            per_route,
            rate_limits_at,
            landings,
        }))
    }

    fn gateway(&self, port: u16) -> &str {
        self.gateways_by_port
            .iter()
            .find(|(p, _)| *p == port)
            .map_or("", |(_, g)| g)
    }

    /// Whether deciding looks at request headers beyond `content-type` (which
    /// [`RequestAttrs::header`] reads for any request).
    pub fn reads_request_headers(&self) -> bool {
        self.limiter.reads_request_headers()
    }

    /// Decide one routed request (after authz), with the dynamic metadata filters before it
    /// wrote (jwt_authn's payload for `claims` selectors, Lua's for `metadata` actions).
    pub fn check_http(
        &self,
        req: &RequestAttrs<'_>,
        route: &Route,
        metadata: Option<&DynamicMetadata>,
    ) -> LimitVerdict<'_> {
        if self.limiter.is_empty() {
            return LimitVerdict::Pass {
                response_headers: None,
                request_headers: &[],
                shadow_rule: None,
            };
        }
        let virtual_service = route.virtual_service();
        let destination_cluster = match &route.action {
            RouteAction::Forward { clusters, .. } if clusters.len() == 1 => {
                clusters.first().map(|c| c.cluster.name.as_str())
            }
            _ => None,
        };
        let outcome = self.limiter.check(&warden_local_ratelimit::RequestAttrs {
            client_ip: req.client_ip,
            method: req.method,
            path: req.path,
            query: req.query,
            authority: req.authority,
            scheme: "http",
            headers: req.headers,
            gateway: self.gateway(req.port),
            virtual_service,
            source_route: route.source_route.as_deref(),
            destination_cluster,
            route_local: self.per_route.get(req, route),
            route_rate_limits: Some(self.rate_limits_at.get(req, route)),
            dynamic_metadata: metadata,
        });
        let rule = outcome.decided_by.map(|d| d.rule);
        let label = outcome.decided_by.map(|d| d.label);
        match outcome.response {
            Some(reply) => {
                let grpc = req
                    .header(&header::CONTENT_TYPE)
                    .is_some_and(|v| v.starts_with(b"application/grpc"));
                // The x-ratelimit-* go out with the 429 the way they go out with a passed
                // request's response (`pipeline::Answer`): no header map holds them.
                let response = reply.build(grpc, |text| {
                    ProxyBody::full(Bytes::from_static(text.as_bytes()))
                });
                LimitVerdict::Limited {
                    response,
                    response_headers: outcome.rate_limit_headers,
                    rule: label,
                }
            }
            None => LimitVerdict::Pass {
                response_headers: outcome.rate_limit_headers,
                request_headers: outcome.request_headers_to_add,
                shadow_rule: rule,
            },
        }
    }

    /// L4: may a new connection from `client_ip` on the listener of config port `port` proceed?
    pub fn admit_connection(&self, port: u16, client_ip: IpAddr) -> bool {
        self.limiter.check_connection(self.gateway(port), client_ip)
    }

    pub fn group_stats(&self) -> Vec<GroupStats> {
        self.limiter.group_stats()
    }

    /// The bans in force, with the rule that banned.
    pub fn bans(&self) -> Vec<(Arc<str>, warden_local_ratelimit::LocalBan)> {
        self.limiter.bans()
    }

    /// Lift every ban of `client` (an address or a distinct value); how many there were.
    pub fn lift_bans(&self, client: &str) -> usize {
        self.limiter.lift_bans(client)
    }

    pub fn connection_stats(&self) -> Vec<GroupStats> {
        self.limiter.connection_stats()
    }

    pub fn table_stats(&self) -> TableStats {
        self.limiter.table_stats()
    }
}
/// Envoy's `local_ratelimit` filter: token buckets per route site (and per client for
/// distinct descriptors); a limited request is answered 429 here.
impl HttpFilter for LocalRateLimitFilter {
    fn name(&self) -> &str {
        LOCAL_RATE_LIMIT
    }

    #[inline]
    fn on_request(
        &self,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
        _metrics: &Metrics,
    ) -> Flow {
        state.settle_metadata();
        match self.check_http(req, route, state.dynamic_metadata.as_deref()) {
            LimitVerdict::Pass {
                response_headers,
                request_headers,
                shadow_rule,
            } => {
                state.local_limit_headers = response_headers;
                if !request_headers.is_empty() {
                    let add = state.add_request_headers();
                    for (name, value) in request_headers {
                        add.insert(name.clone(), value.clone());
                    }
                }
                if let (true, Some(rule)) = (state.logging, shadow_rule) {
                    state.notes.shadow_policy = Some(Arc::from(rule));
                }
                Flow::Continue
            }
            LimitVerdict::Limited {
                response,
                response_headers,
                rule,
            } => {
                state.notes.flag = Some(ResponseFlag::RateLimited);
                state.notes.details = Some(LOCAL_RATE_LIMITED);
                // Named whether or not the log is on: `/ratelimit/top` keeps the last rule
                // (shared, not copied).
                state.notes.policy = rule.cloned();
                state.local_limit_headers = response_headers;
                Flow::Reply(response)
            }
        }
    }

    fn reads_request_headers(&self) -> bool {
        LocalRateLimitFilter::reads_request_headers(self)
    }
}

/// Envoy's `http_local_rate_limit.{enabled,ok,rate_limited,enforced}` per group, the L4
/// `ok`/`rate_limited` per connection group, and the per-key table.
pub fn register_metrics(registry: &mut Registry, local: &LocalRateLimitFilter) {
    let requests = Family::<GroupResultLabels, Counter>::default();
    for g in local.group_stats() {
        for (result, n) in [
            ("enabled", g.enabled),
            ("ok", g.ok),
            ("rate_limited", g.rate_limited),
            ("enforced", g.enforced),
        ] {
            requests
                .get_or_create(&GroupResultLabels {
                    group: g.name.clone(),
                    result,
                })
                .inc_by(n);
        }
    }
    let connections = Family::<GroupResultLabels, Counter>::default();
    for g in local.connection_stats() {
        for (result, n) in [("ok", g.ok), ("rate_limited", g.rate_limited)] {
            connections
                .get_or_create(&GroupResultLabels {
                    group: g.name.clone(),
                    result,
                })
                .inc_by(n);
        }
    }
    let table = local.table_stats();
    let gauge = |v: usize| {
        let g = Gauge::<i64>::default();
        g.set(i64::try_from(v).unwrap_or(i64::MAX));
        g
    };
    let counter = |v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        c
    };
    let sub = registry.sub_registry_with_prefix("local_rate_limit");
    sub.register(
        "requests",
        "Local rate limit decisions by group and result (enabled, ok, rate_limited, enforced)",
        requests,
    );
    sub.register(
        "connections",
        "L4 connection limit decisions by group (ok = accepted, rate_limited = closed)",
        connections,
    );
    sub.register("keys", "Per-client keys held", gauge(table.keys));
    if local.limiter.has_bans() {
        sub.register(
            "bans",
            "Clients banned now by rules with a ban (listed on the admin port's /ratelimit/bans)",
            gauge(local.bans().len()),
        );
    }
    sub.register("max_keys", "Cap on per-client keys", gauge(table.max_keys));
    sub.register(
        "evictions",
        "Per-client keys evicted to stay under the cap",
        counter(table.evictions),
    );
    sub.register(
        "evictions_active",
        "Evicted keys whose bucket had not refilled (their clients got a fresh budget)",
        counter(table.evictions_active),
    );
}
