//! One limiter group = one Envoy `local_ratelimit` filter instance (or one RateLimitPolicy):
//! its buckets, how requests select them, and Envoy's consumption order.
//!
//! Matched buckets are consumed from the strictest (lowest fill rate) to the loosest; the first
//! empty one denies and tokens already taken are not refunded. The default bucket is consumed
//! when nothing matched, or always when `always_consume_default_token_bucket` is set.

use crate::ban_table::BanTable;
use crate::envoy::actions::CompiledEntry;
use crate::fraction::Fraction;
use crate::key_table::{KeyRef, KeyTable};
use crate::request::RequestAttrs;
use crate::selector::{CompiledSelector, DistinctKey};
use crate::stats::GroupCounters;
use crate::token_bucket::{BucketSpec, Consumed};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use warden_config::ban::{BanCheck, BanSchedule};

/// Which requests a group applies to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    /// All three empty = every request.
    pub gateways: Vec<String>,
    pub virtual_services: Vec<String>,
    /// Gateway API routes, as [`warden_config::gateway_api::route_source`] names them.
    pub source_routes: Vec<String>,
}

/// How an EnvoyFilter `local_ratelimit` group relates to the request's route (Envoy: a route's
/// `typed_per_filter_config` replaces the filter-level config for that route).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum RouteBinding {
    /// A RateLimitPolicy group: its `targetRefs` scope decides.
    #[default]
    Policy,
    /// A filter-level EnvoyFilter config: applies where no per-route config does.
    FilterLevel,
    /// Per-route config `i` of `route_local`: applies where the proxy resolved it.
    PerRoute(u32),
}

impl RouteBinding {
    #[inline]
    fn applies(self, route_local: &[u32]) -> bool {
        match self {
            Self::Policy => true,
            Self::FilterLevel => route_local.is_empty(),
            Self::PerRoute(i) => route_local.contains(&i),
        }
    }
}

impl Scope {
    fn everywhere(&self) -> bool {
        self.gateways.is_empty()
            && self.virtual_services.is_empty()
            && self.source_routes.is_empty()
    }

    /// A connection (before any request): only Gateways scope it.
    #[inline]
    pub(crate) fn applies_to_connection(&self, gateway: &str) -> bool {
        self.everywhere() || self.gateways.iter().any(|g| g == gateway)
    }

    #[inline]
    pub(crate) fn applies(&self, gateway: &str, req: &RequestAttrs<'_>) -> bool {
        self.everywhere()
            || self.gateways.iter().any(|g| g == gateway)
            || req
                .virtual_service
                .is_some_and(|vs| self.virtual_services.iter().any(|v| v == vs))
            || req
                .source_route
                .is_some_and(|r| self.source_routes.iter().any(|s| s == r))
    }
}

/// A bucket definition with its state: one shared atomic, plus per-key state in the table
/// (under `state_id`) for requests that carry distinct values.
#[derive(Debug)]
pub(crate) struct LimitBucket {
    pub spec: BucketSpec,
    pub shared: Arc<AtomicU64>,
    pub state_id: u32,
    /// Human-readable rule name for metrics and access logs.
    pub label: Arc<str>,
}

impl LimitBucket {
    #[inline]
    pub(crate) fn consume(&self, table: &KeyTable, key: &DistinctKey<'_>, now: u64) -> Consumed {
        let key = match key {
            DistinctKey::Shared => return self.spec.try_consume(&self.shared, now),
            DistinctKey::Ip(ip) => KeyRef::ip(*ip),
            DistinctKey::Header(h) => KeyRef::Bytes(h),
            DistinctKey::Composite(c) => KeyRef::Bytes(c),
        };
        table.with_bucket(self.state_id, key, now, |tat| {
            self.spec.try_consume(tat, now)
        })
    }
}

/// The client a ban names: its distinct value (or, for a bucket every client shares, the
/// shared bucket itself).
fn ban_key<'k>(key: &'k DistinctKey<'_>) -> KeyRef<'k> {
    match key {
        DistinctKey::Shared => KeyRef::Bytes(b""),
        DistinctKey::Ip(ip) => KeyRef::ip(*ip),
        DistinctKey::Header(h) => KeyRef::Bytes(h),
        DistinctKey::Composite(c) => KeyRef::Bytes(c),
    }
}

#[derive(Debug)]
pub(crate) struct SelectorRule {
    pub selectors: Vec<CompiledSelector>,
    pub bucket: LimitBucket,
    /// Escalating bans of the clients this rule counts (its bucket's `state_id` names them
    /// in the ban table).
    pub ban: Option<BanSchedule>,
}

impl SelectorRule {
    /// Consume for `key` under a ban `schedule`: refused without counting while the client is
    /// banned (`banned` gets the ban's remaining milliseconds); an empty bucket starts the
    /// client's next ban. Out of line: rules without a ban never come here.
    #[inline(never)]
    fn consume_banning(
        &self,
        schedule: &BanSchedule,
        table: &KeyTable,
        bans: &BanTable,
        key: &DistinctKey<'_>,
        now: u64,
        banned: &mut Option<u64>,
    ) -> Consumed {
        let now_ms = now / 1_000_000;
        let client = ban_key(key);
        let id = self.bucket.state_id;
        if let BanCheck::Banned { remaining_ms, .. } = bans.check(id, client, schedule, now_ms) {
            *banned = Some(remaining_ms);
            return refused_for(remaining_ms);
        }
        let c = self.bucket.consume(table, key, now);
        if c.allowed {
            return c;
        }
        let length_ms = bans.offend(id, client, schedule, now_ms);
        *banned = Some(length_ms);
        refused_for(length_ms)
    }
}

/// What a banned client is told: nothing left until the ban ends (seconds rounded up, as
/// `Retry-After` must not invite it back early).
fn refused_for(remaining_ms: u64) -> Consumed {
    Consumed {
        allowed: false,
        remaining: 0,
        reset_secs: remaining_ms.div_ceil(1000),
    }
}

/// A local_ratelimit descriptor: entries with `None` values are wildcards.
#[derive(Debug)]
pub(crate) struct DescriptorBucket {
    pub entries: Vec<(String, Option<String>)>,
    pub bucket: LimitBucket,
}

#[derive(Debug)]
pub(crate) enum Rules {
    /// RateLimitPolicy rules, pre-sorted from strictest to loosest.
    Selectors(Vec<SelectorRule>),
    /// Envoy descriptors matched against what the route's `rate_limits` actions produce.
    Descriptors {
        /// With the index of the route `rate_limits` patch they come from (None: the filter's
        /// own `rate_limits`), which the request's route must carry.
        entries: Vec<(Option<u32>, CompiledEntry)>,
        descriptors: Vec<DescriptorBucket>,
        source_cluster: String,
    },
}

#[derive(Debug)]
pub(crate) struct Group {
    pub name: Arc<str>,
    pub scope: Scope,
    pub binding: RouteBinding,
    pub enabled: Fraction,
    pub enforced: Fraction,
    pub status: http::StatusCode,
    pub grpc_status: u8,
    pub response_headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub request_headers_not_enforced: Vec<(http::HeaderName, http::HeaderValue)>,
    pub x_ratelimit_headers: bool,
    pub default: Option<LimitBucket>,
    pub always_consume_default: bool,
    pub rules: Rules,
    pub counters: Arc<GroupCounters>,
}

/// What a consulted group decided.
pub(crate) struct Verdict<'g> {
    pub limited: bool,
    pub enforced: bool,
    /// The client is banned for this many more milliseconds (it is then `limited`).
    pub banned_ms: Option<u64>,
    /// The bucket whose numbers go into x-ratelimit-* (the denying one, else the first matched,
    /// else the default) and what it said.
    pub context: Option<(&'g LimitBucket, Consumed)>,
}

impl Group {
    /// None when the group does not apply or is not enabled for this request (no stats).
    #[inline]
    pub(crate) fn check(
        &self,
        req: &RequestAttrs<'_>,
        table: &KeyTable,
        bans: &BanTable,
        now: u64,
    ) -> Option<Verdict<'_>> {
        if !self.binding.applies(req.route_local)
            || !self.scope.applies(req.gateway, req)
            || !self.enabled.sample()
        {
            return None;
        }
        let mut banned_ms = None;
        let (allowed, context) = self.consume(req, table, bans, now, &mut banned_ms);
        if allowed {
            GroupCounters::bump(&self.counters.ok);
            return Some(Verdict {
                limited: false,
                enforced: false,
                banned_ms: None,
                context,
            });
        }
        GroupCounters::bump(&self.counters.rate_limited);
        // A ban is enforcement: it is not sampled.
        let enforced = banned_ms.is_some() || self.enforced.sample();
        if enforced {
            GroupCounters::bump(&self.counters.enforced);
        }
        Some(Verdict {
            limited: true,
            enforced,
            banned_ms,
            context,
        })
    }

    /// Whether the request may pass and the bucket for `x-ratelimit-*`; a ban in force puts
    /// its remaining milliseconds in `banned`.
    fn consume(
        &self,
        req: &RequestAttrs<'_>,
        table: &KeyTable,
        bans: &BanTable,
        now: u64,
        banned: &mut Option<u64>,
    ) -> (bool, Option<(&LimitBucket, Consumed)>) {
        let mut first: Option<(&LimitBucket, Consumed)> = None;
        let mut matched_any = false;
        match &self.rules {
            Rules::Selectors(rules) => {
                for rule in rules {
                    let Some(key) = rule.selectors.iter().find_map(|s| s.matches(req)) else {
                        continue;
                    };
                    matched_any = true;
                    let c = match &rule.ban {
                        None => rule.bucket.consume(table, &key, now),
                        Some(s) => rule.consume_banning(s, table, bans, &key, now, banned),
                    };
                    if !c.allowed {
                        return (false, Some((&rule.bucket, c)));
                    }
                    first.get_or_insert((&rule.bucket, c));
                }
            }
            Rules::Descriptors {
                entries,
                descriptors,
                source_cluster,
            } => {
                let mut matched: Vec<(&DescriptorBucket, Option<Vec<u8>>)> = Vec::new();
                for (patch, entry) in entries {
                    let here = match (patch, req.route_rate_limits) {
                        (Some(p), Some(at_route)) => at_route.contains(p),
                        _ => true,
                    };
                    if !here {
                        continue;
                    }
                    let Some(desc) = entry.descriptor(req, source_cluster) else {
                        continue;
                    };
                    if let Some(m) = match_descriptor(descriptors, &desc) {
                        matched.push(m);
                    }
                }
                matched.sort_by(|a, b| {
                    a.0.bucket
                        .spec
                        .rate_per_sec()
                        .total_cmp(&b.0.bucket.spec.rate_per_sec())
                });
                for (d, key) in matched {
                    matched_any = true;
                    let key = match &key {
                        None => DistinctKey::Shared,
                        Some(bytes) => DistinctKey::Header(bytes),
                    };
                    let c = d.bucket.consume(table, &key, now);
                    if !c.allowed {
                        return (false, Some((&d.bucket, c)));
                    }
                    first.get_or_insert((&d.bucket, c));
                }
            }
        }
        if !matched_any || self.always_consume_default {
            if let Some(default) = &self.default {
                let c = default.consume(table, &DistinctKey::Shared, now);
                if !c.allowed {
                    return (false, Some((default, c)));
                }
                first.get_or_insert((default, c));
            }
        }
        (true, first)
    }
}

/// Exact match first (same keys and values, no wildcards), then a wildcard match (same keys,
/// non-wildcard values equal); a wildcard match keys its bucket by the wildcard values.
fn match_descriptor<'d>(
    descriptors: &'d [DescriptorBucket],
    desc: &[(String, String)],
) -> Option<(&'d DescriptorBucket, Option<Vec<u8>>)> {
    let same_keys = |d: &DescriptorBucket| {
        d.entries.len() == desc.len() && d.entries.iter().zip(desc).all(|(c, r)| c.0 == r.0)
    };
    let exact = descriptors.iter().find(|d| {
        same_keys(d)
            && d.entries
                .iter()
                .zip(desc)
                .all(|(c, r)| c.1.as_deref() == Some(r.1.as_str()))
    });
    if let Some(d) = exact {
        return Some((d, None));
    }
    let wild = descriptors.iter().find(|d| {
        same_keys(d)
            && d.entries.iter().any(|c| c.1.is_none())
            && d.entries
                .iter()
                .zip(desc)
                .all(|(c, r)| c.1.as_deref().is_none_or(|v| v == r.1))
    })?;
    let mut key = Vec::new();
    for (c, r) in wild.entries.iter().zip(desc) {
        if c.1.is_none() {
            key.extend_from_slice(&(r.1.len() as u32).to_le_bytes());
            key.extend_from_slice(r.1.as_bytes());
        }
    }
    Some((wild, Some(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (scope, gateway, virtual service, source route, applies).
    #[test]
    fn a_scope_takes_in_its_gateways_virtual_services_and_gateway_api_routes() {
        let scope = |g: &[&str], vs: &[&str], routes: &[&str]| Scope {
            gateways: g.iter().map(|s| s.to_string()).collect(),
            virtual_services: vs.iter().map(|s| s.to_string()).collect(),
            source_routes: routes.iter().map(|s| s.to_string()).collect(),
        };
        let headers = http::HeaderMap::new();
        let method = http::Method::GET;
        let applies = |s: &Scope, gateway: &str, vs: Option<&str>, route: Option<&str>| {
            s.applies(
                gateway,
                &RequestAttrs {
                    client_ip: std::net::Ipv4Addr::LOCALHOST.into(),
                    method: &method,
                    path: "/",
                    query: None,
                    authority: "a",
                    scheme: "http",
                    headers: &headers,
                    gateway,
                    virtual_service: vs,
                    source_route: route,
                    destination_cluster: None,
                    route_local: &[],
                    route_rate_limits: None,
                    dynamic_metadata: None,
                },
            )
        };
        let foo = "HTTPRoute/default/foo";
        let everywhere = scope(&[], &[], &[]);
        let gw = scope(&["gw"], &[], &[]);
        let vs = scope(&[], &["vs"], &[]);
        let route = scope(&[], &[], &[foo]);
        type Row<'a> = (&'a Scope, &'a str, Option<&'a str>, Option<&'a str>, bool);
        let rows: &[Row] = &[
            (&everywhere, "any", None, None, true),
            (&gw, "gw", None, None, true),
            (&gw, "other", Some("vs"), Some(foo), false),
            (&vs, "gw", Some("vs"), None, true),
            (&vs, "gw", Some("other"), None, false),
            (&route, "gw", Some("gw-80-host"), Some(foo), true),
            (
                &route,
                "gw",
                Some("gw-80-host"),
                Some("HTTPRoute/default/bar"),
                false,
            ),
            (
                &route,
                "gw",
                Some("gw-80-host"),
                Some("HTTPRoute/other/foo"),
                false,
            ),
            (&route, "gw", Some("HTTPRoute/default/foo"), None, false),
        ];
        for (s, gateway, v, r, want) in rows {
            assert_eq!(
                applies(s, gateway, *v, *r),
                *want,
                "{s:?} {gateway} {v:?} {r:?}"
            );
        }
        assert!(everywhere.applies_to_connection("any"));
        assert!(gw.applies_to_connection("gw") && !gw.applies_to_connection("other"));
        assert!(!route.applies_to_connection("gw"));
    }
}
