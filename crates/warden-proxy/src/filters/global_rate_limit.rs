//! Envoy's `ratelimit` filter: descriptors from RateLimitPolicy `spec.global.rules` and
//! from the EnvoyFilter `rate_limits` actions, one `ShouldRateLimit` per request to the RLS
//! (remote over one HTTP/2 channel, or embedded in process), and a cache of its answers.
//!
//! Behaviour follows Envoy's `envoy.filters.http.ratelimit`:
//! * no descriptor -> no call; OK -> continue with the RLS's request/response headers; an OK
//!   carrying a quota lease (`warden ratelimit` grants them) admits that many more requests
//!   of the same descriptor set without a call;
//! * OVER_LIMIT -> 429 (`rate_limited_status`), `x-envoy-ratelimited: true`; remembered until
//!   `duration_until_reset` so repeats cost no RPC;
//! * error or timeout (default 20 ms) -> fail open, or `status_on_error` (500) with
//!   `failure_mode_deny`.
//!
//! The RLS address comes from the EnvoyFilter's `rate_limit_service` (an Istio
//! `outbound|PORT||HOST` cluster name, a CLUSTER patch's static cluster, or `HOST:PORT`),
//! resolved through the registry before DNS ([`rls_address`]). Route `rate_limits` land on
//! the virtual hosts and routes their patches name ([`super::route_sites`]); a route's own
//! replace its virtual host's, as in Envoy. Failed calls are counted by reason and logged
//! without flooding ([`rls_failures`]). RateLimitPolicy rules without such a filter run on the
//! embedded limiter, configured with [`rls_config`].

pub mod answer_cache;
mod limited_rule;
pub mod policy_rules;
pub mod response_headers;
pub mod rls_address;
pub(crate) mod rls_connection;
pub mod rls_failures;
pub mod service;

use super::route_sites::{rate_limits_at, RouteCatalog, SiteTable};
use crate::core::identity::ProxyIdentity;
use crate::core::local_reply::{LocalReply, ResponseFlag};
use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::filters::chain::{
    FilterState, Flow, HttpFilter, Notes, Verdict, VerdictFuture, GLOBAL_RATE_LIMIT,
};
use crate::routing::{Route, RouteAction};
use answer_cache::{Admitted, AnswerCache, AnswerMemory, Hit};
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use policy_rules::PolicyRules;
use rls_failures::{FailureLog, FailureReason};
use service::{RlsBackend, RlsCallError};
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;
use warden_config::{ConfigSet, Problem};
use warden_local_ratelimit::envoy::actions::CompiledEntry;
use warden_local_ratelimit::envoy::global_config::HttpRateLimit;
use warden_local_ratelimit::envoy::patches::Patched;
use warden_ratelimit::config::{ConfigSet as RlsConfigSet, RlsConfig};
use warden_ratelimit::limiter::{Entry, RateLimitDescriptor};
use warden_ratelimit::{RateLimitRequest, RateLimitResponse, RateLimiter};

/// Domain of the embedded limiter when no EnvoyFilter names one.
pub const DEFAULT_DOMAIN: &str = "warden";
/// Over-limit cache bound.
const CACHE_ENTRIES: usize = 100_000;

const CODE_OK: i32 = 1;
const CODE_OVER_LIMIT: i32 = 2;

/// The compiled global rate limit stage.
#[derive(Debug)]
pub struct GlobalRateLimit {
    domain: String,
    policy: Option<PolicyRules>,
    envoy_entries: Vec<CompiledEntry>,
    /// Which of `envoy_entries` apply at each route, in Envoy's order.
    entries_at: SiteTable<Vec<usize>>,
    /// Where the RLS is, for `warden check`; None for the embedded limiter.
    pub rls_target: Option<rls_address::RlsTarget>,
    /// `EnvoyFilter/name spec.configPatches[i]: rate_limits -> vhost ... route ...`.
    pub landings: Vec<String>,
    failures: Option<FailureLog>,
    /// Gateway names serving each configured port (RateLimitPolicy `targetRefs`).
    gateways_by_port: HashMap<u16, Vec<String>>,
    backend: RlsBackend,
    failure_mode_deny: bool,
    status_on_error: StatusCode,
    rate_limited_status: StatusCode,
    /// 429 headers and the cache of OVER_LIMIT answers and quota leases.
    answers: Arc<AnswerMemory>,
}

fn problem_at(origin_doc: &warden_config::Location, field: String, message: String) -> Problem {
    Problem {
        code: None,
        location: warden_config::Location {
            field,
            ..origin_doc.clone()
        },
        message,
    }
}

/// `true` when a patch's `match.context` fits this proxy: `GATEWAY` patches apply to gateways,
/// `SIDECAR_INBOUND` / `SIDECAR_OUTBOUND` to sidecars, `ANY` (or none) to both, as Istio
/// applies them (a sidecar's policy stages run on its inbound side; a rate-limit filter patched
/// into its outbound side is refused where routes are resolved).
pub(crate) fn fits_context(context: Option<&str>, id: &ProxyIdentity) -> bool {
    match context.unwrap_or("ANY") {
        "GATEWAY" => id.sidecar.is_none(),
        "SIDECAR_INBOUND" | "SIDECAR_OUTBOUND" => id.sidecar.is_some(),
        _ => true,
    }
}

/// `true` when a patch's workload selector admits this proxy (no labels known: all apply).
pub(crate) fn selects(
    labels: Option<&std::collections::BTreeMap<String, String>>,
    id: &ProxyIdentity,
) -> bool {
    match labels {
        None => true,
        Some(_) if id.labels.is_empty() => true,
        Some(want) => want.iter().all(|(k, v)| id.labels.get(k) == Some(v)),
    }
}

/// The envoyproxy/ratelimit config enforcing the RateLimitPolicies' global rules (domain of the
/// global EnvoyFilter if there is one, else [`DEFAULT_DOMAIN`]).
pub fn rls_config(set: &ConfigSet) -> Result<RlsConfig, Vec<Problem>> {
    PolicyRules::compile(set)?;
    let domain = warden_local_ratelimit::envoy::interpret(&set.envoy_filters)
        .ok()
        .and_then(|p| p.http_global.first().map(|g| g.config.domain.clone()))
        .unwrap_or_else(|| DEFAULT_DOMAIN.to_string());
    Ok(RlsConfig {
        domain,
        descriptors: policy_rules::rls_descriptors(&set.rate_limit_policies),
    })
}

impl GlobalRateLimit {
    /// Compile the stage; `Ok(None)` when nothing asks for a global limit. `previous` hands
    /// over the embedded limiter's counters and the answer cache across reloads.
    pub fn build(
        set: &ConfigSet,
        identity: &ProxyIdentity,
        routes: &RouteCatalog,
        previous: Option<&GlobalRateLimit>,
    ) -> Result<Option<GlobalRateLimit>, Vec<Problem>> {
        let mut problems = Vec::new();
        let policy = PolicyRules::compile(set).unwrap_or_else(|mut p| {
            problems.append(&mut p);
            None
        });
        let patches =
            warden_local_ratelimit::envoy::interpret(&set.envoy_filters).unwrap_or_else(|mut p| {
                problems.append(&mut p);
                Default::default()
            });
        let filters: Vec<&Patched<HttpRateLimit>> = patches
            .http_global
            .iter()
            .filter(|p| {
                selects(p.origin.workload_labels.as_ref(), identity)
                    && fits_context(p.origin.context.as_deref(), identity)
            })
            .collect();
        let filter = filters.first().map(|p| &p.config);
        if filters.len() > 1 {
            tracing::warn!(
                "several global ratelimit filters apply; using {}",
                filters[0].origin.filter
            );
        }
        let stage = filter.map_or(0, |f| f.stage);
        // Each `rate_limits` patch's compiled entries (indices into `envoy_entries`).
        let mut envoy_entries = Vec::new();
        let mut entries_of: Vec<Vec<usize>> = Vec::new();
        for patch in &patches.route_rate_limits {
            let mut indices = Vec::new();
            for (i, e) in patch.config.entries.iter().enumerate() {
                match CompiledEntry::compile(e) {
                    // Envoy's filter only reads the entries of its own stage.
                    Ok(c) if c.stage == stage => {
                        indices.push(envoy_entries.len());
                        envoy_entries.push(c);
                    }
                    Ok(_) => {}
                    Err((field, message)) => problems.push(problem_at(
                        &patch.origin.document,
                        format!("{}[{i}].{field}", patch.origin.config_field),
                        message,
                    )),
                }
            }
            entries_of.push(indices);
        }
        let mut landings = Vec::new();
        let landed = routes.land_rate_limits(
            &patches,
            |o| selects(o.workload_labels.as_ref(), identity),
            &mut landings,
            &mut problems,
        );
        let entries_at = SiteTable::build(&routes.keys(), |site| {
            rate_limits_at(&landed, site)
                .into_iter()
                .filter_map(|p| entries_of.get(p as usize))
                .flatten()
                .copied()
                .collect()
        });
        let clusters: Vec<_> = patches
            .clusters
            .iter()
            .filter(|c| {
                selects(c.origin.workload_labels.as_ref(), identity)
                    && fits_context(c.origin.context.as_deref(), identity)
            })
            .collect();
        let rls_target = match filter {
            Some(f) => {
                let origin = &filters[0].origin;
                let grpc = f.rate_limit_service.grpc_service.envoy_grpc.as_ref();
                match grpc.map(|g| rls_address::resolve(set, g, &clusters)) {
                    Some(Ok(t)) => Some(t),
                    Some(Err(message)) => {
                        problems.push(problem_at(
                            &origin.document,
                            format!(
                                "{}.rate_limit_service.grpc_service.envoy_grpc.cluster_name",
                                origin.config_field
                            ),
                            message,
                        ));
                        None
                    }
                    None => None,
                }
            }
            None => None,
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        // EnvoyFilter actions need the global filter (without it they feed the local one).
        if filter.is_none() {
            envoy_entries.clear();
        }
        if policy.is_none() && envoy_entries.is_empty() {
            return Ok(None);
        }
        let domain = filter.map_or_else(|| DEFAULT_DOMAIN.to_string(), |f| f.domain.clone());
        let backend = match rls_target.as_ref().map(|t| t.address.as_str()) {
            Some(addr) => {
                let timeout = filter.map_or(
                    warden_local_ratelimit::envoy::global_config::DEFAULT_TIMEOUT,
                    HttpRateLimit::timeout,
                );
                RlsBackend::remote(addr, timeout).map_err(|e| {
                    let origin = &filters[0].origin;
                    vec![problem_at(
                        &origin.document,
                        format!("{}.rate_limit_service", origin.config_field),
                        e.to_string(),
                    )]
                })?
            }
            None => {
                let config = rls_config(set)?;
                let mut domains = std::collections::BTreeMap::new();
                domains.insert(config.domain.clone(), config);
                let set = RlsConfigSet { domains };
                match previous.map(|p| &p.backend) {
                    Some(RlsBackend::Embedded(limiter)) => {
                        limiter.set_config(set);
                        RlsBackend::Embedded(limiter.clone())
                    }
                    _ => RlsBackend::Embedded(Arc::new(RateLimiter::in_memory(set))),
                }
            }
        };
        let mut gateways_by_port: HashMap<u16, Vec<String>> = HashMap::new();
        for gw in &set.gateways {
            for server in &gw.spec.servers {
                gateways_by_port
                    .entry(server.port.number)
                    .or_default()
                    .push(gw.metadata.name.clone());
            }
        }
        let limited_headers = match filter {
            Some(f) => warden_local_ratelimit::envoy::proto_json::header_pairs(
                &f.response_headers_to_add,
                "response_headers_to_add",
            )
            .map_err(|(field, message)| {
                let origin = &filters[0].origin;
                vec![problem_at(
                    &origin.document,
                    format!("{}.{field}", origin.config_field),
                    message,
                )]
            })?,
            None => Vec::new(),
        };
        let status = |s: Option<&warden_local_ratelimit::envoy::proto_json::HttpStatus>,
                      default: StatusCode| {
            s.and_then(|s| u16::try_from(s.code.0).ok())
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(default)
        };
        let failures = rls_target.as_ref().map(|t| {
            FailureLog::new(
                format!("{} ({})", t.address, t.reference),
                rls_failures::SUMMARY_INTERVAL,
                Arc::new(warden_local_ratelimit::MonotonicClock::new()),
            )
        });
        Ok(Some(GlobalRateLimit {
            domain,
            policy,
            envoy_entries,
            entries_at,
            rls_target,
            landings,
            failures,
            gateways_by_port,
            backend,
            failure_mode_deny: filter.is_some_and(|f| f.failure_mode_deny),
            status_on_error: status(
                filter.and_then(|f| f.status_on_error.as_ref()),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            rate_limited_status: warden_local_ratelimit::envoy::proto_json::limited_status(
                filter.and_then(|f| f.rate_limited_status.as_ref()),
            ),
            answers: Arc::new(AnswerMemory {
                x_envoy_ratelimited: !filter.is_some_and(|f| f.disable_x_envoy_ratelimited_header),
                // Envoy Gateway turns DRAFT_03 headers on for policies; an EnvoyFilter opts in.
                x_ratelimit_headers: match filter {
                    Some(f) => f.enable_x_ratelimit_headers.as_deref() == Some("DRAFT_VERSION_03"),
                    None => true,
                },
                limited_headers,
                cache: previous.map_or_else(
                    || Arc::new(AnswerCache::new(CACHE_ENTRIES)),
                    |p| p.answers.cache.clone(),
                ),
            }),
        }))
    }

    /// The embedded limiter, when no RLS address is configured.
    pub fn embedded_limiter(&self) -> Option<&Arc<RateLimiter>> {
        match &self.backend {
            RlsBackend::Embedded(l) => Some(l),
            RlsBackend::Remote { .. } => None,
        }
    }

    /// The descriptors of a request, in Envoy's order (route actions, then policy rules).
    pub fn descriptors(
        &self,
        req: &RequestAttrs<'_>,
        route: &Route,
        dynamic_metadata: Option<&crate::core::dynamic_metadata::DynamicMetadata>,
    ) -> Vec<RateLimitDescriptor> {
        let vs = route.virtual_service();
        let cluster = match &route.action {
            RouteAction::Forward { clusters, .. } => clusters.first().map(|c| &*c.cluster.name),
            RouteAction::Direct { .. } | RouteAction::Redirect(_) => None,
        };
        let gateways = self
            .gateways_by_port
            .get(&req.port)
            .map_or(&[][..], |g| g.as_slice());
        let headers = req.headers;
        let attrs = warden_local_ratelimit::RequestAttrs {
            client_ip: req.client_ip,
            method: req.method,
            path: req.path,
            query: req.query,
            authority: req.authority,
            scheme: "http",
            headers,
            gateway: gateways.first().map_or("", String::as_str),
            virtual_service: vs,
            source_route: route.source_route.as_deref(),
            destination_cluster: cluster,
            route_local: &[],
            route_rate_limits: None,
            dynamic_metadata,
        };
        let mut out = Vec::new();
        let entries = self.entries_at.get(req, route);
        for e in entries.iter().filter_map(|&i| self.envoy_entries.get(i)) {
            if let Some(d) = e.descriptor(&attrs, "") {
                out.push(RateLimitDescriptor {
                    entries: d
                        .into_iter()
                        .map(|(key, value)| Entry { key, value })
                        .collect(),
                    limit: None,
                    hits_addend: None,
                    is_negative_hits: false,
                });
            }
        }
        if let Some(p) = &self.policy {
            p.descriptors(&attrs, gateways, &mut out);
        }
        out
    }

    fn limited_reply(&self) -> LocalReply {
        LocalReply {
            status: self.rate_limited_status,
            body: Bytes::new(),
            flag: Some(ResponseFlag::RateLimited),
        }
    }

    fn over_limit(
        &self,
        resp: &RateLimitResponse,
        key: String,
        now: Instant,
        notes: &mut Notes,
    ) -> Verdict {
        let headers = self.answers.headers(resp);
        let rule: Arc<str> = Arc::from(limited_rule::limited_rule(&key, resp));
        notes.policy = Some(rule.clone());
        self.answers.remember(resp, key, &headers, now, rule);
        let mut reply = self.limited_reply();
        if !resp.raw_body.is_empty() {
            reply.body = Bytes::from(resp.raw_body.clone());
        }
        Verdict::ReplyWithHeaders(reply, headers)
    }

    /// The 429 of a remembered OVER_LIMIT, its `x-ratelimit-reset` and a ban's `retry-after`
    /// counted down.
    fn remembered_denial(
        &self,
        denial: answer_cache::Denial,
        now: Instant,
        notes: &mut Notes,
    ) -> Verdict {
        notes.policy = Some(denial.rule);
        let mut headers = denial.headers;
        let left = denial
            .until
            .saturating_duration_since(now)
            .as_secs_f64()
            .ceil() as u64;
        for name in [
            response_headers::X_RATELIMIT_RESET,
            http::header::RETRY_AFTER,
        ] {
            if headers.contains_key(&name) {
                headers.insert(name, HeaderValue::from(left));
            }
        }
        Verdict::ReplyWithHeaders(self.limited_reply(), headers)
    }

    async fn decide(
        &self,
        req: &RequestAttrs<'_>,
        route: &Route,
        dynamic_metadata: Option<&crate::core::dynamic_metadata::DynamicMetadata>,
        metrics: &Metrics,
        notes: &mut Notes,
    ) -> Verdict {
        let descriptors = self.descriptors(req, route, dynamic_metadata);
        if descriptors.is_empty() {
            return Verdict::Continue;
        }
        let key = cache_key(&descriptors);
        let now = Instant::now();
        let leases = matches!(self.backend, RlsBackend::Remote { .. });
        // Waiting for another call's lease is bounded like a call of our own.
        let deadline = tokio::time::Instant::from_std(now) + self.backend.timeout();
        let mut looked_at = now;
        let asking = loop {
            match self.answers.cache.take(&key, looked_at, leases) {
                Hit::Leased(admitted) => {
                    metrics.global_rate_limit.lease_hits.inc();
                    return admitted.map_or(Verdict::Continue, admit);
                }
                Hit::Denied(denial) => {
                    metrics.global_rate_limit.over_limit_cache_hits.inc();
                    return self.remembered_denial(denial, now, notes);
                }
                Hit::Call(asking) => break asking,
                Hit::Wait(mut ends) => {
                    let waited = tokio::time::timeout_at(deadline, ends.changed()).await;
                    if waited.is_err() {
                        let timeout = RlsCallError::Timeout(self.backend.timeout());
                        return self.failed(&timeout, metrics);
                    }
                    looked_at = Instant::now();
                }
            }
        };
        let request = RateLimitRequest {
            domain: self.domain.clone(),
            descriptors,
            hits_addend: 1,
        };
        // Only a call that times out needs its own copy of the key and the cache.
        let late = || {
            let answers = self.answers.clone();
            let key = key.clone();
            move |resp: &RateLimitResponse| answers.remember_late(resp, key)
        };
        let result = self
            .backend
            .should_rate_limit(request, asking.is_some(), late)
            .await;
        // The asking call's lease (if any) is remembered before the waiters are woken.
        let asked = asking.map(|a| (a, key.clone()));
        let verdict = match result {
            Ok(resp) if resp.overall_code == CODE_OVER_LIMIT => {
                metrics.global_rate_limit.over_limit.inc();
                self.over_limit(&resp, key, now, notes)
            }
            Ok(resp) if resp.overall_code == CODE_OK => {
                metrics.global_rate_limit.ok.inc();
                let admitted = self.answers.admitted(&resp);
                if resp.quota.is_some() {
                    self.answers.remember_lease(&resp, key, &admitted, now);
                }
                admit(admitted)
            }
            Ok(_) => self.failed(&RlsCallError::UnknownCode, metrics),
            Err(e) => self.failed(&e, metrics),
        };
        if let Some((asking, key)) = asked {
            self.answers.cache.done_asking(&key, asking);
        }
        verdict
    }

    /// The verdict when no decision came: fail open, or `status_on_error` with
    /// `failure_mode_deny`.
    fn failed(&self, error: &RlsCallError, metrics: &Metrics) -> Verdict {
        metrics.global_rate_limit.error.inc();
        let reason = match error {
            RlsCallError::Timeout(_) => FailureReason::Timeout,
            RlsCallError::Unavailable(_) => FailureReason::Unavailable,
            RlsCallError::Status(_) => FailureReason::Status,
            RlsCallError::UnknownCode => FailureReason::UnknownCode,
            RlsCallError::Embedded(_) => FailureReason::Embedded,
        };
        metrics.global_rate_limit.rls_failure(reason.label());
        match self.failures.as_ref().and_then(|f| f.record(reason, error)) {
            Some(line) => tracing::warn!("{line}"),
            None => tracing::debug!(%error, "rate limit service call failed"),
        }
        if self.failure_mode_deny {
            Verdict::Reply(LocalReply {
                status: self.status_on_error,
                body: Bytes::new(),
                flag: Some(ResponseFlag::RateLimitServiceError),
            })
        } else {
            metrics.global_rate_limit.failure_mode_allowed.inc();
            Verdict::Continue
        }
    }
}

/// The verdict admitting a request with `admitted`'s headers.
fn admit(admitted: Admitted) -> Verdict {
    match (admitted.request.is_empty(), admitted.response.is_empty()) {
        (true, true) => Verdict::Continue,
        (true, false) => Verdict::ContinueWithHeaders(admitted.response),
        (false, _) => Verdict::ContinueWithRequestHeaders {
            request: admitted.request,
            response: admitted.response,
        },
    }
}

/// One string naming a descriptor set (length-prefixed, so no two sets collide).
fn cache_key(descriptors: &[RateLimitDescriptor]) -> String {
    let mut key = String::with_capacity(64);
    for d in descriptors {
        key.push('|');
        for e in &d.entries {
            let _ = write!(
                key,
                "{}:{}{}:{}",
                e.key.len(),
                e.key,
                e.value.len(),
                e.value
            );
        }
    }
    key
}

/// Envoy's `ratelimit` filter: every request waits for its descriptors' answer (the answer
/// cache may give it at once, inside the future).
impl HttpFilter for GlobalRateLimit {
    fn name(&self) -> &str {
        GLOBAL_RATE_LIMIT
    }

    fn on_request(
        &self,
        _req: &RequestAttrs<'_>,
        _route: &Route,
        _state: &mut FilterState,
        _metrics: &Metrics,
    ) -> Flow {
        Flow::Wait
    }

    fn on_request_waiting<'a>(
        &'a self,
        req: &'a RequestAttrs<'a>,
        route: &'a Route,
        state: &'a mut FilterState,
        metrics: &'a Metrics,
    ) -> VerdictFuture<'a> {
        // What earlier filters (Lua) wrote feeds the `metadata` actions; the notes get the
        // rule that limited.
        state.settle_metadata();
        let metadata = state.dynamic_metadata.as_deref();
        let notes = &mut state.notes;
        Box::pin(self.decide(req, route, metadata, metrics, notes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keys_do_not_collide() {
        let d = |pairs: &[(&str, &str)]| RateLimitDescriptor {
            entries: pairs
                .iter()
                .map(|(k, v)| Entry {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            limit: None,
            hits_addend: None,
            is_negative_hits: false,
        };
        assert_ne!(
            cache_key(&[d(&[("a", "b:c")])]),
            cache_key(&[d(&[("a", "b"), ("c", "")])])
        );
        assert_ne!(
            cache_key(&[d(&[("a", "1")]), d(&[])]),
            cache_key(&[d(&[("a", "1")])])
        );
    }
}
