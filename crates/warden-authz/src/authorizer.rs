//! The compiled authorization of one proxy: Envoy's order of RBAC filters, evaluated at once.

use crate::attrs::{HttpAttrs, Request, TcpAttrs};
use crate::compile::{
    add_rules, check_targets, plain_location, set_kind, Locate, Problems, SetKind,
};
use crate::decision::{Decision, NONE_POLICY};
use crate::policy_set::{PolicySet, PolicySetBuilder};
use crate::scope::ProxyScope;
use std::sync::Arc;
use warden_config::{AuthorizationPolicy, ConfigSet, Doc, Problem};

/// Sizes of a compiled [`Authorizer`], for logs and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuthorizerStats {
    /// Policies that apply to this proxy.
    pub policies: usize,
    pub rules: usize,
    /// CIDR entries across all lists.
    pub cidrs: usize,
    /// Heap bytes of the CIDR indexes.
    pub index_bytes: usize,
}

/// All AuthorizationPolicies that apply to one proxy, compiled. Immutable; build a new one on
/// reload and swap it in.
#[derive(Debug)]
pub struct Authorizer {
    deny: PolicySet,
    allow: PolicySet,
    audit: PolicySet,
    shadow_deny: PolicySet,
    shadow_allow: PolicySet,
    stats: AuthorizerStats,
    none: Arc<str>,
    /// The CUSTOM policies in scope, for the ext_authz filter ([`Authorizer::take_custom`]).
    custom: Option<CustomRules>,
}

/// The CUSTOM policies that apply to one proxy: which requests go to the external authorizer
/// (Istio's shadow RBAC filter in front of ext_authz), and which provider they name.
#[derive(Debug)]
pub struct CustomRules {
    rules: PolicySet,
    /// `istio.io/dry-run` CUSTOM policies: matched and reported, never sent.
    shadow: PolicySet,
    /// The providers the enforced policies name, with the policy (`namespace/name`), in
    /// document order. Istio uses one provider per workload: more than one distinct name
    /// makes every request denied.
    pub providers: Vec<(String, String)>,
}

/// Whether a request is sent to the external authorizer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CustomMatch {
    /// The enforced CUSTOM rule that matched: send the request to the provider.
    pub rule: Option<Arc<str>>,
    /// A dry-run CUSTOM rule that matched (the request would have been sent).
    pub shadow: Option<Arc<str>>,
}

impl CustomRules {
    /// Which CUSTOM rules (enforced, dry-run) match an HTTP request.
    pub fn check_http(&self, attrs: &HttpAttrs<'_>) -> CustomMatch {
        let req = Request::from(attrs);
        CustomMatch {
            rule: self.rules.first_match(&req, false).map(|r| r.name.clone()),
            shadow: self.shadow.first_match(&req, false).map(|r| r.name.clone()),
        }
    }

    /// Which CUSTOM rules match a TCP connection (checked on its first byte). Istio builds
    /// CUSTOM's TCP rules as DENY ones: HTTP-only fields are ignored, so a rule matches by
    /// its other fields alone.
    pub fn check_tcp(&self, attrs: &TcpAttrs<'_>) -> CustomMatch {
        let req = Request::from(attrs);
        CustomMatch {
            rule: self.rules.first_match(&req, false).map(|r| r.name.clone()),
            shadow: self.shadow.first_match(&req, false).map(|r| r.name.clone()),
        }
    }

    /// The distinct provider names of the enforced policies, sorted.
    pub fn provider_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.providers.iter().map(|(p, _)| p.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Whether only dry-run CUSTOM policies apply (nothing is sent).
    pub fn is_dry_run_only(&self) -> bool {
        self.rules.policies == 0
    }
}

impl Default for Authorizer {
    fn default() -> Self {
        Authorizer::allow_all()
    }
}

impl Authorizer {
    /// No policies: everything is allowed.
    pub fn allow_all() -> Self {
        Authorizer {
            deny: PolicySet::default(),
            allow: PolicySet::default(),
            audit: PolicySet::default(),
            shadow_deny: PolicySet::default(),
            shadow_allow: PolicySet::default(),
            stats: AuthorizerStats::default(),
            none: Arc::from(NONE_POLICY),
            custom: None,
        }
    }

    /// Validate every policy (in scope or not) and compile the ones that apply to `scope`.
    /// All problems of all documents are returned together, located by file, document and
    /// field path (e.g. `spec.rules[0].from[0].source.ipBlocks[12]`).
    pub fn compile(
        policies: &[Doc<AuthorizationPolicy>],
        scope: &ProxyScope,
    ) -> Result<Authorizer, Vec<Problem>> {
        Self::compile_located(policies, scope, &plain_location)
    }

    /// [`Authorizer::compile`] of a loaded set's policies, with line numbers in the problems.
    pub fn compile_set(set: &ConfigSet, scope: &ProxyScope) -> Result<Authorizer, Vec<Problem>> {
        Self::compile_located(&set.authorization_policies, scope, &|doc, field| {
            set.locate(doc, field)
        })
    }

    fn compile_located(
        policies: &[Doc<AuthorizationPolicy>],
        scope: &ProxyScope,
        locate: Locate<'_>,
    ) -> Result<Authorizer, Vec<Problem>> {
        let mut sets: [PolicySetBuilder; 7] = Default::default();
        let mut providers = Vec::new();
        let mut discarded = PolicySetBuilder::default();
        let mut all_problems = Vec::new();
        let mut stats = AuthorizerStats::default();
        for doc in policies {
            let mut problems = Problems::new(doc, locate);
            let kind = set_kind(doc, &mut problems);
            check_targets(doc, &mut problems);
            let applies = problems.list.is_empty() && scope.selects(doc);
            let target = match kind {
                Some(k @ (SetKind::Custom | SetKind::ShadowCustom)) if applies => {
                    if k == SetKind::Custom {
                        let name = doc.spec.provider.as_ref().map(|p| p.name.clone());
                        let id = format!(
                            "{}/{}",
                            doc.metadata.namespace_or_default(),
                            doc.metadata.name
                        );
                        providers.push((name.unwrap_or_default(), id));
                    }
                    &mut sets[k as usize]
                }
                Some(k) if applies => {
                    stats.policies += 1;
                    stats.rules += doc.spec.rules.len();
                    stats.cidrs += cidr_count(&doc.spec);
                    &mut sets[k as usize]
                }
                // Still validated, so `warden check` reports errors in every policy.
                _ => {
                    discarded = PolicySetBuilder::default();
                    &mut discarded
                }
            };
            target.policies += 1;
            add_rules(doc, target, &mut problems);
            all_problems.extend(problems.list);
        }
        drop(discarded);
        if !all_problems.is_empty() {
            return Err(all_problems);
        }
        let [deny, allow, audit, shadow_deny, shadow_allow, custom, shadow_custom] =
            sets.map(PolicySetBuilder::build);
        let custom = (custom.policies + shadow_custom.policies > 0).then(|| CustomRules {
            rules: custom,
            shadow: shadow_custom,
            providers,
        });
        stats.index_bytes = [&deny, &allow, &audit, &shadow_deny, &shadow_allow]
            .iter()
            .map(|s| s.index_bytes())
            .sum();
        debug_assert_eq!(
            stats.rules,
            [&deny, &allow, &audit, &shadow_deny, &shadow_allow]
                .iter()
                .map(|s| s.rule_count())
                .sum::<usize>()
        );
        Ok(Authorizer {
            deny,
            allow,
            audit,
            shadow_deny,
            shadow_allow,
            stats,
            none: Arc::from(NONE_POLICY),
            custom,
        })
    }

    /// The CUSTOM policies in scope, taken out (the ext_authz filter holds them).
    pub fn take_custom(&mut self) -> Option<CustomRules> {
        self.custom.take()
    }

    /// True when no policy applies: every request is allowed and the check can be skipped.
    pub fn is_empty(&self) -> bool {
        self.stats.policies == 0
    }

    pub fn stats(&self) -> AuthorizerStats {
        self.stats
    }

    /// Decide an HTTP request.
    pub fn check_http(&self, attrs: &HttpAttrs<'_>) -> Decision {
        self.check(&Request::from(attrs), false)
    }

    /// Decide a TCP connection: ALLOW rules that use HTTP-only fields (hosts, methods, paths,
    /// request headers) are dropped; DENY and AUDIT rules ignore those fields.
    pub fn check_tcp(&self, attrs: &TcpAttrs<'_>) -> Decision {
        self.check(&Request::from(attrs), true)
    }

    fn check(&self, req: &Request<'_>, tcp: bool) -> Decision {
        let mut decision = Decision {
            allow: true,
            ..Decision::default()
        };
        if self.is_empty() {
            return decision;
        }
        decision.audit = self.audit.first_match(req, false).is_some();
        if let Some(rule) = self.shadow_deny.first_match(req, false) {
            decision.shadow_denied.push(rule.name.clone());
        }
        if self.shadow_allow.policies > 0 && self.shadow_allow.first_match(req, tcp).is_none() {
            decision.shadow_denied.push(self.none.clone());
        }
        if let Some(rule) = self.deny.first_match(req, false) {
            decision.allow = false;
            decision.policy = Some(rule.name.clone());
        } else if self.allow.policies > 0 && self.allow.first_match(req, tcp).is_none() {
            decision.allow = false;
        }
        decision
    }
}

fn cidr_count(spec: &AuthorizationPolicy) -> usize {
    spec.rules
        .iter()
        .map(|r| {
            let from: usize = r
                .from
                .iter()
                .filter_map(|f| f.source.as_ref())
                .map(|s| {
                    s.ip_blocks.len()
                        + s.not_ip_blocks.len()
                        + s.remote_ip_blocks.len()
                        + s.not_remote_ip_blocks.len()
                })
                .sum();
            let when: usize = r
                .when
                .iter()
                .filter(|c| matches!(c.key.as_str(), "source.ip" | "remote.ip" | "destination.ip"))
                .map(|c| c.values.len() + c.not_values.len())
                .sum();
            from + when
        })
        .sum()
}
