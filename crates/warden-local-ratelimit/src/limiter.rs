//! The compiled local limiter: immutable groups plus shared, bounded bucket state.

use crate::ban_table::{BanTable, LocalBan};
use crate::clock::{Clock, MonotonicClock};
use crate::compile::{Compiler, StateRegistry};
use crate::connection::ConnGroup;
use crate::envoy;
use crate::group::{Group, Rules};
use crate::key_table::{KeyTable, TableStats, DEFAULT_MAX_KEYS};
use crate::outcome::{DecidedBy, Decision, LimitedResponse, Outcome, RateLimitHeaders};
use crate::request::RequestAttrs;
use crate::stats::GroupStats;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use warden_config::{ConfigSet, Doc, EnvoyFilter, Problem, RateLimitPolicy};

#[derive(Clone)]
pub struct LimiterOptions {
    /// Hard cap on per-client (Distinct / wildcard) keys across all rules.
    pub max_keys: usize,
    /// Time source; keep the same clock across reloads (the default one always is).
    pub clock: Arc<dyn Clock>,
    /// This proxy's workload labels; EnvoyFilters whose `workloadSelector` does not match are
    /// skipped. None applies every EnvoyFilter.
    pub proxy_labels: Option<BTreeMap<String, String>>,
    /// Whether this proxy is a sidecar (`Some(false)`: a gateway): EnvoyFilter patches whose
    /// `match.context` is for the other role are skipped. None applies every context.
    pub proxy_is_sidecar: Option<bool>,
    /// Value of Envoy's `source_cluster` descriptor action.
    pub source_cluster: String,
}

impl Default for LimiterOptions {
    fn default() -> Self {
        Self {
            max_keys: DEFAULT_MAX_KEYS,
            clock: Arc::new(MonotonicClock::new()),
            proxy_labels: None,
            proxy_is_sidecar: None,
            source_cluster: String::new(),
        }
    }
}

impl std::fmt::Debug for LimiterOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimiterOptions")
            .field("max_keys", &self.max_keys)
            .field("proxy_labels", &self.proxy_labels)
            .field("proxy_is_sidecar", &self.proxy_is_sidecar)
            .field("source_cluster", &self.source_cluster)
            .finish()
    }
}

pub struct LocalLimiter {
    groups: Vec<Group>,
    conn_groups: Vec<ConnGroup>,
    table: Arc<KeyTable>,
    /// Clients banned by rules with a `ban` (kept across reloads, as the buckets are).
    bans: Arc<BanTable>,
    clock: Arc<dyn Clock>,
    registry: StateRegistry,
    warnings: Vec<Problem>,
}

impl std::fmt::Debug for LocalLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLimiter")
            .field("groups", &self.groups.len())
            .field("conn_groups", &self.conn_groups.len())
            .field("table", &self.table)
            .finish()
    }
}

impl LocalLimiter {
    /// Compile the local rules of `policies` and the rate-limit patches of `filters`.
    /// With `previous`, unchanged rules keep their bucket state (and groups their counters),
    /// and the per-key table is shared if `max_keys` is unchanged. All problems are returned
    /// together; warnings (unsupported patches, ignored fields) are in [`Self::warnings`].
    pub fn compile(
        policies: &[Doc<RateLimitPolicy>],
        filters: &[Doc<EnvoyFilter>],
        opts: LimiterOptions,
        previous: Option<&LocalLimiter>,
    ) -> Result<LocalLimiter, Vec<Problem>> {
        let mut compiler = Compiler::new(
            previous.map(|p| &p.registry),
            opts.proxy_labels.as_ref(),
            opts.proxy_is_sidecar,
            &opts.source_cluster,
        );
        for doc in policies {
            compiler.policy(doc);
        }
        match envoy::interpret(filters) {
            Ok(patches) => {
                compiler.warnings.extend(patches.warnings.iter().cloned());
                compiler.envoy(&patches);
            }
            Err(problems) => compiler.problems.extend(problems),
        }
        // Global rules are not enforced here, but bad ones must fail the load all the same.
        if let Err(problems) = crate::global::compile_global_rules(policies) {
            compiler.problems.extend(problems);
        }
        if !compiler.problems.is_empty() {
            return Err(compiler.problems);
        }
        let table = match previous {
            Some(p) if p.table.max_keys() == KeyTable::new(opts.max_keys).max_keys() => {
                let live = compiler.registry.live_states();
                p.table.retain_states(|id| live.contains(&id));
                p.table.clone()
            }
            _ => Arc::new(KeyTable::new(opts.max_keys)),
        };
        let clock = match previous {
            // Stored timestamps are only meaningful on the clock that wrote them.
            Some(p) => p.clock.clone(),
            None => opts.clock,
        };
        let bans = match previous {
            Some(p) => p.bans.clone(),
            None => Arc::new(BanTable::new((opts.max_keys / 8).max(1024))),
        };
        Ok(LocalLimiter {
            groups: compiler.groups,
            conn_groups: compiler.conn_groups,
            table,
            bans,
            clock,
            registry: compiler.registry,
            warnings: compiler.warnings,
        })
    }

    /// [`Self::compile`] over a whole loaded config.
    pub fn from_config(
        set: &ConfigSet,
        opts: LimiterOptions,
        previous: Option<&LocalLimiter>,
    ) -> Result<LocalLimiter, Vec<Problem>> {
        Self::compile(&set.rate_limit_policies, &set.envoy_filters, opts, previous)
    }

    /// Unsupported EnvoyFilter patches and ignored fields found while compiling.
    pub fn warnings(&self) -> &[Problem] {
        &self.warnings
    }

    /// True when no HTTP group exists, so the proxy can skip `check()` entirely.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Whether deciding a request looks at its headers (header selectors, `request_headers`
    /// and `header_value_match` actions): a proxy that has not read them into a map must.
    pub fn reads_request_headers(&self) -> bool {
        self.groups.iter().any(|g| match &g.rules {
            Rules::Selectors(rules) => rules
                .iter()
                .any(|r| r.selectors.iter().any(|s| s.reads_headers())),
            Rules::Descriptors { entries, .. } => entries.iter().any(|(_, e)| e.reads_headers()),
        })
    }

    pub fn has_connection_limits(&self) -> bool {
        !self.conn_groups.is_empty()
    }

    /// Decide one HTTP request. Groups are consulted in order (policies, then EnvoyFilters);
    /// the first enforced limit answers 429, a shadow limit is reported and passes.
    #[inline]
    pub fn check(&self, req: &RequestAttrs<'_>) -> Outcome<'_> {
        if self.groups.is_empty() {
            return Outcome::allowed();
        }
        let now = self.clock.now_nanos();
        let mut outcome = Outcome::allowed();
        for group in &self.groups {
            let Some(verdict) = group.check(req, &self.table, &self.bans, now) else {
                continue;
            };
            if group.x_ratelimit_headers {
                if let Some((bucket, c)) = verdict.context {
                    let h = RateLimitHeaders {
                        limit: bucket.spec.max_tokens,
                        remaining: c.remaining,
                        reset: c.reset_secs,
                    };
                    let tighter = outcome
                        .rate_limit_headers
                        .is_none_or(|old| h.remaining < old.remaining);
                    if tighter {
                        outcome.rate_limit_headers = Some(h);
                    }
                }
            }
            if !verdict.limited {
                continue;
            }
            let decided_by = verdict.context.map(|(b, _)| DecidedBy {
                group: &group.name,
                rule: &b.label,
                label: &b.label,
            });
            if verdict.enforced {
                outcome.decision = Decision::Limited { enforced: true };
                outcome.decided_by = decided_by;
                outcome.response = Some(LimitedResponse {
                    status: group.status,
                    grpc_status: group.grpc_status,
                    headers: &group.response_headers,
                    retry_after: verdict.banned_ms.map(|ms| ms.div_ceil(1000)),
                });
                outcome.request_headers_to_add = &[];
                return outcome;
            }
            if outcome.decision == Decision::Allowed {
                outcome.decision = Decision::Limited { enforced: false };
                outcome.decided_by = decided_by;
                outcome.request_headers_to_add = &group.request_headers_not_enforced;
            }
        }
        outcome
    }

    /// L4: may a new connection from `client_ip` on `gateway`'s listener proceed? When false,
    /// close it without writing anything.
    #[inline]
    pub fn check_connection(&self, gateway: &str, client_ip: IpAddr) -> bool {
        if self.conn_groups.is_empty() {
            return true;
        }
        let now = self.clock.now_nanos();
        self.conn_groups
            .iter()
            .all(|g| g.admit(gateway, client_ip, &self.table, now) != Some(false))
    }

    /// The bans in force, with the rule that banned (its label, e.g. `RateLimitPolicy/login
    /// spec.local.rules[0]`), soonest ending first.
    pub fn bans(&self) -> Vec<(Arc<str>, LocalBan)> {
        let now_ms = self.clock.now_nanos() / 1_000_000;
        self.bans
            .list(now_ms)
            .into_iter()
            .filter_map(|b| self.ban_rule(b.rule).map(|label| (label, b)))
            .collect()
    }

    /// Lift the bans of `client` (an address, or the distinct value as text) under every
    /// rule; how many there were.
    pub fn lift_bans(&self, client: &str) -> usize {
        let ip = client.parse::<IpAddr>().ok();
        let mut lifted = 0;
        for rule in self.ban_rule_ids() {
            let key = match ip {
                Some(ip) => crate::key_table::KeyRef::ip(ip),
                None => crate::key_table::KeyRef::Bytes(client.as_bytes()),
            };
            lifted += usize::from(self.bans.lift(rule, key));
        }
        lifted
    }

    fn ban_rule_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.groups.iter().flat_map(|g| match &g.rules {
            Rules::Selectors(rules) => rules
                .iter()
                .filter(|r| r.ban.is_some())
                .map(|r| r.bucket.state_id)
                .collect::<Vec<_>>(),
            Rules::Descriptors { .. } => Vec::new(),
        })
    }

    fn ban_rule(&self, id: u32) -> Option<Arc<str>> {
        self.groups.iter().find_map(|g| match &g.rules {
            Rules::Selectors(rules) => rules
                .iter()
                .find(|r| r.ban.is_some() && r.bucket.state_id == id)
                .map(|r| r.bucket.label.clone()),
            Rules::Descriptors { .. } => None,
        })
    }

    /// Whether some rule bans.
    pub fn has_bans(&self) -> bool {
        self.ban_rule_ids().next().is_some()
    }

    /// Counters of every HTTP group (Envoy's `http_local_rate_limit.*`).
    pub fn group_stats(&self) -> Vec<GroupStats> {
        self.groups
            .iter()
            .map(|g| g.counters.snapshot(&g.name))
            .collect()
    }

    /// Counters of every connection group (`ok` = accepted, `rate_limited` = closed).
    pub fn connection_stats(&self) -> Vec<GroupStats> {
        self.conn_groups
            .iter()
            .map(|g| g.counters.snapshot(&g.name))
            .collect()
    }

    /// Size of the per-key table and its evictions.
    pub fn table_stats(&self) -> TableStats {
        self.table.stats()
    }
}
