//! The `spec.global.rules[]` of RateLimitPolicy, validated and compiled (selectors, limits,
//! shadow mode) for the global limiter (warden-proxy's `pipeline/filters/global_rate_limit`).
//! No engine here.

use crate::group::Scope;
use crate::problem::DocSite;
use crate::request::RequestAttrs;
use crate::selector::{CompiledSelector, DistinctKey};
use warden_config::kinds::rate_limit_policy::RateLimitValue;
use warden_config::{Doc, Problem, RateLimitPolicy};

#[derive(Debug, Clone)]
pub struct GlobalRule {
    /// `RateLimitPolicy/<name>`.
    pub policy: String,
    /// Index in `spec.global.rules`.
    pub index: usize,
    /// Empty = the rule applies to every request in scope.
    pub selectors: Vec<CompiledSelector>,
    pub limit: RateLimitValue,
    pub shadow_mode: bool,
    pub shared: bool,
    /// Escalating bans, enforced by the rate limit service with the counter.
    pub ban: Option<warden_config::ban::BanSchedule>,
    scope: Scope,
}

impl GlobalRule {
    /// Whether the rule's `targetRefs` take in `req` arriving through Gateway `gateway`.
    pub fn applies(&self, gateway: &str, req: &RequestAttrs<'_>) -> bool {
        self.scope.applies(gateway, req)
    }

    /// The distinct values the request contributes, or None if the rule does not select it.
    pub fn select<'r>(&self, req: &RequestAttrs<'r>) -> Option<DistinctKey<'r>> {
        if self.selectors.is_empty() {
            return Some(DistinctKey::Shared);
        }
        self.selectors.iter().find_map(|s| s.matches(req))
    }
}

/// Compile every policy's global rules; all problems are reported together.
pub fn compile_global_rules(
    policies: &[Doc<RateLimitPolicy>],
) -> Result<Vec<GlobalRule>, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for doc in policies {
        let Some(global) = &doc.spec.global else {
            continue;
        };
        let site = DocSite::of(doc);
        let scope = crate::compile::scope_of(doc, &site, &mut problems);
        for (i, rule) in global.rules.iter().enumerate() {
            let field = format!("spec.global.rules[{i}]");
            crate::compile::check_limit(&rule.limit, &site, &field, &mut problems);
            let selectors =
                CompiledSelector::compile_all(&rule.client_selectors, &site, &field, &mut problems)
                    .unwrap_or_default();
            let ban = match rule.ban.as_ref().map(|b| b.schedule()).transpose() {
                Ok(ban) => ban,
                Err((at, message)) => {
                    problems.push(site.problem(format!("{field}.ban.{at}"), message));
                    None
                }
            };
            if ban.is_some() && rule.shadow_mode {
                problems.push(site.problem(
                    format!("{field}.ban"),
                    "a shadowMode rule never refuses a request, so it cannot ban",
                ));
            }
            out.push(GlobalRule {
                policy: doc.id(),
                index: i,
                selectors,
                limit: rule.limit,
                shadow_mode: rule.shadow_mode,
                shared: rule.shared,
                ban,
                scope: scope.clone(),
            });
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}
