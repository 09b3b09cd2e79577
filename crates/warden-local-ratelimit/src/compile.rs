//! Turning RateLimitPolicies and EnvoyFilter patches into limiter groups, adopting the bucket
//! state and counters of unchanged rules from the previous limiter.

use crate::connection::ConnGroup;
use crate::envoy::actions::CompiledEntry;
use crate::envoy::local_config::{HttpLocalRateLimit, TokenBucket};
use crate::envoy::patches::{EnvoyRateLimitPatches, Patched};
use crate::envoy::proto_json::{header_pairs, limited_status, RuntimeFractionalPercent};
use crate::fraction::Fraction;
use crate::group::{
    DescriptorBucket, Group, LimitBucket, RouteBinding, Rules, Scope, SelectorRule,
};
use crate::problem::DocSite;
use crate::selector::{parse_cidr, CompiledSelector};
use crate::stats::GroupCounters;
use crate::token_bucket::BucketSpec;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use warden_config::kinds::rate_limit_policy::{RateLimitValue, SourceMatchType};
use warden_config::{Doc, Location, Problem, RateLimitPolicy};

/// A route `rate_limits` entry: its stage, the patch it came from (index in
/// `route_rate_limits`), and the entry compiled (errors are the interpreter's to report).
type RouteEntry = (u32, u32, Result<CompiledEntry, ()>);

/// Bucket state and counters by identity, handed from one limiter generation to the next.
#[derive(Debug, Default)]
pub(crate) struct StateRegistry {
    buckets: HashMap<String, (u32, Arc<AtomicU64>)>,
    counters: HashMap<String, Arc<GroupCounters>>,
    next_id: u32,
}

impl StateRegistry {
    pub(crate) fn live_states(&self) -> std::collections::HashSet<u32> {
        self.buckets.values().map(|(s, _)| *s).collect()
    }
}

pub(crate) struct Compiler<'p> {
    previous: Option<&'p StateRegistry>,
    pub(crate) registry: StateRegistry,
    pub(crate) problems: Vec<Problem>,
    pub(crate) warnings: Vec<Problem>,
    pub(crate) groups: Vec<Group>,
    pub(crate) conn_groups: Vec<ConnGroup>,
    proxy_labels: Option<&'p BTreeMap<String, String>>,
    proxy_is_sidecar: Option<bool>,
    source_cluster: &'p str,
}

impl<'p> Compiler<'p> {
    pub(crate) fn new(
        previous: Option<&'p StateRegistry>,
        proxy_labels: Option<&'p BTreeMap<String, String>>,
        proxy_is_sidecar: Option<bool>,
        source_cluster: &'p str,
    ) -> Self {
        Self {
            previous,
            registry: StateRegistry {
                next_id: previous.map_or(0, |p| p.next_id),
                ..Default::default()
            },
            problems: Vec::new(),
            warnings: Vec::new(),
            groups: Vec::new(),
            conn_groups: Vec::new(),
            proxy_labels,
            proxy_is_sidecar,
            source_cluster,
        }
    }

    /// A bucket for `identity`: the previous generation's state if the identity (which
    /// includes the bucket's shape) is unchanged, else a fresh, full one. `shared` identities
    /// (Envoy `share_key`) return the same state to every caller in this generation.
    fn bucket(
        &mut self,
        identity: String,
        spec: BucketSpec,
        label: String,
        shared: bool,
    ) -> LimitBucket {
        let mut key = format!("{identity}|{spec:?}");
        if !shared {
            let base = key.clone();
            let mut n = 1;
            while self.registry.buckets.contains_key(&key) {
                n += 1;
                key = format!("{base}#{n}");
            }
        }
        let (state_id, state) = match self.registry.buckets.get(&key) {
            Some(found) => found.clone(),
            None => {
                let adopted = self.previous.and_then(|p| p.buckets.get(&key)).cloned();
                let entry = adopted.unwrap_or_else(|| {
                    let id = self.registry.next_id;
                    self.registry.next_id = self.registry.next_id.wrapping_add(1);
                    (id, Arc::new(AtomicU64::new(0)))
                });
                self.registry.buckets.insert(key, entry.clone());
                entry
            }
        };
        LimitBucket {
            spec,
            shared: state,
            state_id,
            label: label.into(),
        }
    }

    fn counters(&mut self, name: &str) -> Arc<GroupCounters> {
        if let Some(c) = self.registry.counters.get(name) {
            return c.clone();
        }
        let c = self
            .previous
            .and_then(|p| p.counters.get(name).cloned())
            .unwrap_or_default();
        self.registry.counters.insert(name.to_string(), c.clone());
        c
    }

    fn selected(&self, origin: &crate::envoy::PatchOrigin) -> bool {
        let labels_fit = match (self.proxy_labels, origin.workload_labels.as_ref()) {
            (Some(proxy), Some(want)) => want.iter().all(|(k, v)| proxy.get(k) == Some(v)),
            _ => true,
        };
        // `match.context`: GATEWAY patches are for gateways, SIDECAR_* for sidecars.
        let context_fits = match (self.proxy_is_sidecar, origin.context.as_deref()) {
            (Some(sidecar), Some("GATEWAY")) => !sidecar,
            (Some(sidecar), Some("SIDECAR_INBOUND" | "SIDECAR_OUTBOUND")) => sidecar,
            _ => true,
        };
        labels_fit && context_fits
    }

    pub(crate) fn policy(&mut self, doc: &Doc<RateLimitPolicy>) {
        let site = DocSite::of(doc);
        let scope = scope_of(doc, &site, &mut self.problems);
        let Some(local) = &doc.spec.local else {
            return;
        };
        let identity_base = format!(
            "policy|{}|{}|{}",
            doc.id(),
            doc.metadata.namespace_or_default(),
            serde_json::to_string(&doc.spec.target_refs).unwrap_or_default()
        );
        let mut default = None;
        let mut rules = Vec::new();
        let mut default_unit = None;
        for (i, rule) in local.rules.iter().enumerate() {
            let field = format!("spec.local.rules[{i}]");
            if rule.shadow_mode || rule.shared {
                self.warnings.push(site.problem(
                    field.clone(),
                    "shadowMode and shared apply to global rules only; ignored for local rules",
                ));
            }
            if !check_limit(&rule.limit, &site, &field, &mut self.problems) {
                continue;
            }
            let ban = match rule.ban.as_ref().map(|b| b.schedule()).transpose() {
                Ok(ban) => ban,
                Err((at, message)) => {
                    self.problems
                        .push(site.problem(format!("{field}.ban.{at}"), message));
                    continue;
                }
            };
            let spec = spec_of(&rule.limit);
            let identity = format!(
                "{identity_base}|local|{}",
                serde_json::to_string(rule).unwrap_or_default()
            );
            let label = format!("{} {field}", doc.id());
            if rule.client_selectors.is_empty() {
                if ban.is_some() {
                    self.problems.push(site.problem(
                        format!("{field}.ban"),
                        "a ban needs clientSelectors: a rule without them counts every client \
                         together, so its ban would refuse them all",
                    ));
                    continue;
                }
                if default.is_some() {
                    self.problems.push(site.problem(
                        field,
                        "only one rule without clientSelectors (the route default) is allowed",
                    ));
                    continue;
                }
                default_unit = Some(rule.limit.unit.seconds());
                default = Some(self.bucket(identity, spec, label, false));
                continue;
            }
            let Some(selectors) = CompiledSelector::compile_all(
                &rule.client_selectors,
                &site,
                &field,
                &mut self.problems,
            ) else {
                continue;
            };
            let bucket = self.bucket(identity, spec, label, false);
            rules.push((
                i,
                SelectorRule {
                    selectors,
                    bucket,
                    ban,
                },
            ));
        }
        if let Some(d) = default_unit {
            for (i, r) in &rules {
                let secs = r.bucket.spec.fill_interval.as_secs();
                if secs % d != 0 {
                    self.problems.push(site.problem(
                        format!("spec.local.rules[{i}].limit.unit"),
                        "the unit must be a multiple of the default rule's unit (as Envoy requires)",
                    ));
                }
            }
        }
        // Strictest first, so consuming in order is Envoy's "sort by fill rate".
        let mut rules: Vec<SelectorRule> = rules.into_iter().map(|(_, r)| r).collect();
        rules.sort_by(|a, b| {
            a.bucket
                .spec
                .rate_per_sec()
                .total_cmp(&b.bucket.spec.rate_per_sec())
        });
        let name = doc.id();
        if default.is_some() || !rules.is_empty() {
            let counters = self.counters(&name);
            self.groups.push(Group {
                name: name.clone().into(),
                scope: scope.clone(),
                binding: RouteBinding::Policy,
                enabled: Fraction::always(),
                enforced: Fraction::always(),
                status: http::StatusCode::TOO_MANY_REQUESTS,
                grpc_status: 14,
                response_headers: Vec::new(),
                request_headers_not_enforced: Vec::new(),
                x_ratelimit_headers: true,
                default,
                always_consume_default: false,
                rules: Rules::Selectors(rules),
                counters,
            });
        }
        for (i, c) in local.connections.iter().enumerate() {
            let field = format!("spec.local.connections[{i}]");
            if !check_limit(&c.limit, &site, &field, &mut self.problems) {
                continue;
            }
            let (source, distinct) = match &c.source_cidr {
                None => (None, false),
                Some(s) => match parse_cidr(&s.value) {
                    Ok(net) => (Some(net), s.match_type == SourceMatchType::Distinct),
                    Err(e) => {
                        self.problems
                            .push(site.problem(format!("{field}.sourceCIDR.value"), e));
                        continue;
                    }
                },
            };
            let identity = format!(
                "{identity_base}|conn|{}",
                serde_json::to_string(c).unwrap_or_default()
            );
            let label = format!("{} {field}", doc.id());
            let bucket = self.bucket(identity, spec_of(&c.limit), label, false);
            let cname = format!("{name} connections");
            let counters = self.counters(&cname);
            self.conn_groups.push(ConnGroup {
                name: cname.into(),
                scope: Scope {
                    gateways: scope.gateways.clone(),
                    ..Scope::default()
                },
                source,
                distinct,
                bucket,
                counters,
            });
        }
    }

    pub(crate) fn envoy(&mut self, patches: &EnvoyRateLimitPatches) {
        let route_entries: Vec<RouteEntry> = (0u32..)
            .zip(&patches.route_rate_limits)
            .flat_map(|(i, p)| p.config.entries.iter().map(move |e| (i, e)))
            .map(|(i, e)| (e.stage, i, CompiledEntry::compile(e).map_err(|_| ())))
            .collect();
        let has_route_configs = !patches.route_local.is_empty();
        let filter_level = patches.http_local.iter().map(|p| (None, p));
        let per_route = (0u32..)
            .zip(&patches.route_local)
            .map(|(i, p)| (Some(i), p));
        for (route_index, p) in filter_level.chain(per_route) {
            let per_route = route_index.is_some();
            if !self.selected(&p.origin) {
                continue;
            }
            let inert = p.config.token_bucket.is_none() && p.config.descriptors.is_empty();
            if inert && has_route_configs && !per_route {
                // Only carries the filter into the chain; the per-route configs do the limiting.
                continue;
            }
            self.http_local(p, &route_entries, route_index);
        }
        for p in &patches.network_local {
            if !self.selected(&p.origin) {
                continue;
            }
            let c = &p.config;
            let spec = spec_of_bucket(&c.token_bucket);
            let (identity, shared) = match &c.share_key {
                Some(k) => (format!("envoy-share|{k}"), true),
                None => (
                    format!("envoy|{}|{}|net", p.origin.filter, p.origin.field),
                    false,
                ),
            };
            let label = format!("{} {}", p.origin.filter, p.origin.field);
            let bucket = self.bucket(identity, spec, label, shared);
            let counters = self.counters(&format!("local_rate_limit.{}", c.stat_prefix));
            self.conn_groups.push(ConnGroup {
                name: c.stat_prefix.clone().into(),
                scope: Scope::default(),
                source: None,
                distinct: false,
                bucket,
                counters,
            });
        }
    }

    fn http_local(
        &mut self,
        p: &Patched<HttpLocalRateLimit>,
        route_entries: &[RouteEntry],
        route_index: Option<u32>,
    ) {
        let c = &p.config;
        let problem = |field: String, message: String| Problem {
            code: None,
            location: Location {
                field: format!("{}{field}", p.origin.config_field),
                ..p.origin.document.clone()
            },
            message,
        };
        let base = "";
        let start = self.problems.len();
        // A located problem is large; this runs once per filter at compile time.
        #[allow(clippy::result_large_err)]
        let fraction = |f: &Option<RuntimeFractionalPercent>,
                        name: &str|
         -> Result<Fraction, Problem> {
            match f {
                // Absent means 0%: the local filter is disabled / shadow-only by default.
                None => Ok(Fraction::never()),
                Some(r) => r
                    .default_value
                    .ratio()
                    .map(|(n, d)| Fraction::new(n, d))
                    .map_err(|e| problem(format!("{base}.{name}.default_value.denominator"), e)),
            }
        };
        let enabled = fraction(&c.filter_enabled, "filter_enabled");
        let enforced = fraction(&c.filter_enforced, "filter_enforced");
        let response_headers = header_pairs(&c.response_headers_to_add, "response_headers_to_add");
        let request_headers = header_pairs(
            &c.request_headers_to_add_when_not_enforced,
            "request_headers_to_add_when_not_enforced",
        );
        let x_ratelimit = match c.enable_x_ratelimit_headers.as_deref() {
            None | Some("OFF") => Ok(false),
            Some("DRAFT_VERSION_03") => Ok(true),
            Some(other) => Err(problem(
                format!("{base}.enable_x_ratelimit_headers"),
                format!("{other:?} is not OFF or DRAFT_VERSION_03"),
            )),
        };
        for (list, max) in [
            (&c.response_headers_to_add, 10),
            (&c.request_headers_to_add_when_not_enforced, 10),
        ] {
            if list.len() > max {
                self.problems
                    .push(problem(String::new(), "at most 10 headers to add".into()));
            }
        }
        let (enabled, enforced, x_ratelimit) = match (enabled, enforced, x_ratelimit) {
            (Ok(a), Ok(b), Ok(x)) => (a, b, x),
            (a, b, x) => {
                self.problems
                    .extend([a.err(), b.err(), x.err()].into_iter().flatten());
                return;
            }
        };
        let (response_headers, request_headers) = match (response_headers, request_headers) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                for (f, m) in [a.err(), b.err()].into_iter().flatten() {
                    self.problems.push(problem(format!("{base}.{f}"), m));
                }
                return;
            }
        };
        let identity = format!("envoy|{}|{}", p.origin.filter, p.origin.field);
        let default = c.token_bucket.as_ref().map(|tb| {
            let label = format!("{} {} token_bucket", p.origin.filter, p.origin.field);
            self.bucket(
                format!("{identity}|default"),
                spec_of_bucket(tb),
                label,
                false,
            )
        });
        let mut descriptors = Vec::new();
        let mut seen = Vec::new();
        for (i, d) in c.descriptors.iter().enumerate() {
            let field = format!("{base}.descriptors[{i}]");
            if let Err((f, m)) = crate::envoy::patches::check_bucket(&d.token_bucket) {
                self.problems
                    .push(problem(format!("{field}.token_bucket{f}"), m));
                continue;
            }
            if let Some(tb) = &c.token_bucket {
                let di = d.token_bucket.fill_interval.0.as_nanos();
                let base_i = tb.fill_interval.0.as_nanos();
                if base_i > 0 && di % base_i != 0 {
                    self.problems.push(problem(
                        format!("{field}.token_bucket.fill_interval"),
                        "must be a multiple of the default token_bucket's fill_interval".into(),
                    ));
                    continue;
                }
            }
            let entries: Vec<(String, Option<String>)> = d
                .entries
                .iter()
                .map(|e| {
                    (
                        e.key.clone(),
                        (!e.value.is_empty()).then(|| e.value.clone()),
                    )
                })
                .collect();
            if seen.contains(&entries) {
                self.problems
                    .push(problem(field, "duplicate descriptor".into()));
                continue;
            }
            seen.push(entries.clone());
            let label = format!("{} {} descriptors[{i}]", p.origin.filter, p.origin.field);
            let bucket = self.bucket(
                format!("{identity}|desc|{entries:?}"),
                spec_of_bucket(&d.token_bucket),
                label,
                false,
            );
            descriptors.push(DescriptorBucket { entries, bucket });
        }
        if self.problems.len() != start {
            return;
        }
        let rules = if descriptors.is_empty() {
            Rules::Selectors(Vec::new())
        } else {
            let entries = if c.rate_limits.is_empty() {
                route_entries
                    .iter()
                    .filter(|(stage, _, _)| *stage == c.stage)
                    .filter_map(|(_, patch, e)| Some((Some(*patch), e.as_ref().ok()?.clone())))
                    .collect()
            } else {
                let mut out = Vec::new();
                for (i, e) in c.rate_limits.iter().enumerate() {
                    match CompiledEntry::compile(e) {
                        Ok(ce) => out.push((None, ce)),
                        Err((f, m)) => self
                            .problems
                            .push(problem(format!("{base}.rate_limits[{i}].{f}"), m)),
                    }
                }
                out
            };
            if entries.is_empty() {
                self.warnings.push(problem(
                    format!("{base}.descriptors"),
                    "descriptors are configured but no rate_limits actions produce descriptors; \
                     only the default token_bucket applies"
                        .into(),
                ));
            }
            Rules::Descriptors {
                entries,
                descriptors,
                source_cluster: self.source_cluster.to_string(),
            }
        };
        // Which routes a per-route config lands on is the proxy's to resolve (it knows the
        // virtual hosts and routes): it passes the indices in `RequestAttrs::route_local`.
        let binding = route_index.map_or(RouteBinding::FilterLevel, RouteBinding::PerRoute);
        let counters = self.counters(&format!("{}.http_local_rate_limit", c.stat_prefix));
        self.groups.push(Group {
            name: c.stat_prefix.clone().into(),
            scope: Scope::default(),
            binding,
            enabled,
            enforced,
            status: limited_status(c.status.as_ref()),
            grpc_status: if c.rate_limited_as_resource_exhausted {
                8
            } else {
                14
            },
            response_headers,
            request_headers_not_enforced: request_headers,
            x_ratelimit_headers: x_ratelimit,
            default,
            always_consume_default: c.always_consume_default_token_bucket.unwrap_or(true),
            rules,
            counters,
        });
    }
}

fn spec_of(limit: &RateLimitValue) -> BucketSpec {
    BucketSpec::new(
        limit.requests,
        limit.requests,
        Duration::from_secs(limit.unit.seconds()),
    )
}

fn spec_of_bucket(tb: &TokenBucket) -> BucketSpec {
    BucketSpec::new(
        tb.max_tokens.0,
        tb.tokens_per_fill.map_or(1, |t| t.0),
        tb.fill_interval.0,
    )
}

/// `limit.requests` must be positive.
pub(crate) fn check_limit(
    limit: &RateLimitValue,
    site: &DocSite,
    field: &str,
    problems: &mut Vec<Problem>,
) -> bool {
    if limit.requests == 0 {
        problems.push(site.problem(
            format!("{field}.limit.requests"),
            "requests must be greater than 0",
        ));
        return false;
    }
    true
}

/// targetRefs → scope: Gateways (Istio's, or the Gateway API's by their own name),
/// VirtualServices, and Gateway API HTTPRoutes and GRPCRoutes (in the policy's namespace unless
/// the ref names one), whose rules only it then applies to.
pub(crate) fn scope_of(
    doc: &Doc<RateLimitPolicy>,
    site: &DocSite,
    problems: &mut Vec<Problem>,
) -> Scope {
    let mut scope = Scope::default();
    for (i, t) in doc.spec.target_refs.iter().enumerate() {
        match t.kind.as_str() {
            "Gateway" => {
                scope.gateways.push(t.name.clone());
                // A Gateway API Gateway is served as the Istio Gateway generated for it.
                scope
                    .gateways
                    .push(warden_config::gateway_api::translate::generated_gateway_name(&t.name));
            }
            "VirtualService" => scope.virtual_services.push(t.name.clone()),
            kind @ ("HTTPRoute" | "GRPCRoute") => {
                let ns = t
                    .namespace
                    .as_deref()
                    .unwrap_or_else(|| doc.metadata.namespace_or_default());
                scope
                    .source_routes
                    .push(warden_config::gateway_api::route_source(kind, ns, &t.name));
            }
            other => problems.push(site.problem(
                format!("spec.targetRefs[{i}].kind"),
                format!(
                    "{other:?} is not a supported target (Gateway, VirtualService, HTTPRoute, \
                     GRPCRoute)"
                ),
            )),
        }
        if t.name.is_empty() {
            problems.push(site.problem(format!("spec.targetRefs[{i}].name"), "name is required"));
        }
    }
    scope
}
