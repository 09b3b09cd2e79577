//! RateLimitPolicy `spec.global.rules[]` as RLS descriptors, and the envoyproxy/ratelimit config
//! that enforces them (served by the embedded limiter, or written by `warden ratelimit-config`
//! for an external `warden ratelimit`).
//!
//! Every rule gets its own descriptor tree rooted at `("warden_rule", "<Kind/name>#<index>")`;
//! a rule's `Distinct` conditions add one entry per distinct value (the client IP as
//! `remote_address`, one header as `header`, several values as `distinct_0..n`), which the
//! config declares without a value so the RLS keeps one counter per value.

use warden_config::kinds::rate_limit_policy::{
    ClientSelector, HeaderMatchType, RateLimitUnit, RateLimitValue, SourceMatchType,
};
use warden_config::{ConfigSet, Problem, RateLimitPolicy};
use warden_local_ratelimit::global::{compile_global_rules, GlobalRule};
use warden_local_ratelimit::selector::DistinctKey;
use warden_local_ratelimit::RequestAttrs;
use warden_ratelimit::config::{DescriptorConfig, RateLimitConfig, Unit};
use warden_ratelimit::limiter::{Entry, RateLimitDescriptor};

/// Root descriptor key of a policy rule.
pub const RULE_KEY: &str = "warden_rule";

/// The compiled global rules of every RateLimitPolicy.
#[derive(Debug)]
pub struct PolicyRules {
    rules: Vec<(GlobalRule, String)>,
}

impl PolicyRules {
    /// Compile `set.rate_limit_policies`; None when no policy has global rules.
    pub fn compile(set: &ConfigSet) -> Result<Option<PolicyRules>, Vec<Problem>> {
        let mut problems = Vec::new();
        let rules = compile_global_rules(&set.rate_limit_policies)?;
        for doc in &set.rate_limit_policies {
            let Some(global) = &doc.spec.global else {
                continue;
            };
            for (i, rule) in global.rules.iter().enumerate() {
                if u32::try_from(rule.limit.requests).is_err() {
                    problems.push(Problem {
                        code: None,
                        location: set
                            .locate(doc, &format!("spec.global.rules[{i}].limit.requests")),
                        message: format!(
                            "{} is more than a rate limit service can count (at most {})",
                            rule.limit.requests,
                            u32::MAX
                        ),
                    });
                }
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        if rules.is_empty() {
            return Ok(None);
        }
        let rules = rules
            .into_iter()
            .map(|r| {
                let id = rule_id(&r.policy, r.index);
                (r, id)
            })
            .collect();
        Ok(Some(PolicyRules { rules }))
    }

    /// Append the descriptors of every rule that selects the request.
    pub fn descriptors(
        &self,
        req: &RequestAttrs<'_>,
        gateways: &[String],
        out: &mut Vec<RateLimitDescriptor>,
    ) {
        for (rule, id) in &self.rules {
            let in_scope = if gateways.is_empty() {
                rule.applies("", req)
            } else {
                gateways.iter().any(|g| rule.applies(g, req))
            };
            if !in_scope {
                continue;
            }
            let Some(key) = rule.select(req) else {
                continue;
            };
            let mut entries = vec![entry(RULE_KEY, id)];
            match key {
                DistinctKey::Shared => {}
                DistinctKey::Ip(ip) => entries.push(entry(
                    "remote_address",
                    &warden_local_ratelimit::envoy::actions::remote_address_value(ip),
                )),
                DistinctKey::Header(v) => {
                    entries.push(entry("header", &String::from_utf8_lossy(v)))
                }
                DistinctKey::Composite(buf) => {
                    for (n, part) in composite_parts(&buf).enumerate() {
                        entries.push(entry(
                            &format!("distinct_{n}"),
                            &String::from_utf8_lossy(part),
                        ));
                    }
                }
            }
            out.push(RateLimitDescriptor {
                entries,
                limit: None,
                hits_addend: None,
                is_negative_hits: false,
            });
        }
    }
}

fn entry(key: &str, value: &str) -> Entry {
    Entry {
        key: key.to_string(),
        value: value.to_string(),
    }
}

/// `RateLimitPolicy/name#2` for the third global rule.
pub fn rule_id(policy: &str, index: usize) -> String {
    format!("{policy}#{index}")
}

/// The length-prefixed parts of a [`DistinctKey::Composite`].
fn composite_parts(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let part = tail.get(..len)?;
        rest = &tail[len..];
        Some(part)
    })
}

/// How many distinct values a selector contributes (mirrors [`DistinctKey`]'s shapes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    Shared,
    Ip,
    Header,
    Composite(usize),
}

fn shape_of(sel: &ClientSelector) -> Shape {
    let ip = sel
        .source_cidr
        .as_ref()
        .is_some_and(|s| s.match_type == SourceMatchType::Distinct);
    let headers = sel
        .headers
        .iter()
        .filter(|h| h.match_type == HeaderMatchType::Distinct)
        .count();
    match (ip, headers) {
        (false, 0) => Shape::Shared,
        (true, 0) => Shape::Ip,
        (false, 1) => Shape::Header,
        (ip, n) => Shape::Composite(n + usize::from(ip)),
    }
}

fn unit(u: RateLimitUnit) -> Unit {
    match u {
        RateLimitUnit::Second => Unit::Second,
        RateLimitUnit::Minute => Unit::Minute,
        RateLimitUnit::Hour => Unit::Hour,
        RateLimitUnit::Day => Unit::Day,
        RateLimitUnit::Month => Unit::Month,
        RateLimitUnit::Year => Unit::Year,
    }
}

fn limited(
    key: &str,
    value: Option<&str>,
    limit: &RateLimitValue,
    shadow: bool,
    ban: Option<&warden_config::ban::BanSchedule>,
) -> DescriptorConfig {
    DescriptorConfig {
        key: key.to_string(),
        value: value.map(str::to_string),
        rate_limit: Some(RateLimitConfig {
            unit: Some(unit(limit.unit)),
            requests_per_unit: u32::try_from(limit.requests).unwrap_or(u32::MAX),
            ..RateLimitConfig::default()
        }),
        shadow_mode: shadow,
        ban: ban.cloned(),
        ..DescriptorConfig::default()
    }
}

/// The reference-format descriptors enforcing every policy's global rules.
pub fn rls_descriptors(policies: &[warden_config::Doc<RateLimitPolicy>]) -> Vec<DescriptorConfig> {
    let mut out = Vec::new();
    for doc in policies {
        let Some(global) = &doc.spec.global else {
            continue;
        };
        for (i, rule) in global.rules.iter().enumerate() {
            let id = rule_id(&doc.id(), i);
            let mut shapes: Vec<Shape> = if rule.client_selectors.is_empty() {
                vec![Shape::Shared]
            } else {
                rule.client_selectors.iter().map(shape_of).collect()
            };
            shapes.sort();
            shapes.dedup();
            let mut root = DescriptorConfig {
                key: RULE_KEY.to_string(),
                value: Some(id),
                ..DescriptorConfig::default()
            };
            // Validated with the rules (`PolicyRules::compile`).
            let ban = rule.ban.as_ref().and_then(|b| b.schedule().ok());
            for shape in shapes {
                let leaf =
                    |key: &str| limited(key, None, &rule.limit, rule.shadow_mode, ban.as_ref());
                match shape {
                    Shape::Shared => {
                        let l =
                            limited(RULE_KEY, None, &rule.limit, rule.shadow_mode, ban.as_ref());
                        root.rate_limit = l.rate_limit;
                        root.shadow_mode = l.shadow_mode;
                        root.ban = l.ban;
                    }
                    Shape::Ip => root.descriptors.push(leaf("remote_address")),
                    Shape::Header => root.descriptors.push(leaf("header")),
                    Shape::Composite(n) => {
                        // distinct_0 -> distinct_1 -> ... -> distinct_{n-1} (limited)
                        let mut node = leaf(&format!("distinct_{}", n - 1));
                        for k in (0..n - 1).rev() {
                            node = DescriptorConfig {
                                key: format!("distinct_{k}"),
                                descriptors: vec![node],
                                ..DescriptorConfig::default()
                            };
                        }
                        root.descriptors.push(node);
                    }
                }
            }
            out.push(root);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composite_parts_round_trip() {
        let mut buf = Vec::new();
        for p in [&b"10.0.0.1"[..], b"", b"user"] {
            buf.extend_from_slice(&(p.len() as u32).to_le_bytes());
            buf.extend_from_slice(p);
        }
        let parts: Vec<&[u8]> = composite_parts(&buf).collect();
        assert_eq!(parts, vec![&b"10.0.0.1"[..], b"", b"user"]);
        assert_eq!(
            composite_parts(&buf[..3]).count(),
            0,
            "truncated input yields nothing"
        );
    }
}

#[cfg(test)]
mod config_agreement_tests {
    //! The descriptors a request produces must hit the limits of the generated RLS config.
    use super::*;
    use warden_ratelimit::config::ConfigSet as RlsConfigSet;
    use warden_ratelimit::{RateLimitRequest, RateLimiter};

    const POLICY: &str = r#"apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: shapes}
spec:
  global:
    rules:
    - limit: {requests: 2, unit: Minute}
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
      limit: {requests: 3, unit: Minute}
    - clientSelectors:
      - headers: [{name: x-user, type: Distinct}]
      limit: {requests: 4, unit: Hour}
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        headers: [{name: x-user, type: Distinct}, {name: x-app, type: Distinct}]
      limit: {requests: 5, unit: Day}
      shadowMode: true
"#;

    #[tokio::test]
    async fn every_shape_is_counted_by_the_generated_config() {
        let loaded = warden_config::load_str("p.yaml", POLICY).unwrap();
        let rules = PolicyRules::compile(&loaded.set).unwrap().unwrap();
        let config = crate::filters::global_rate_limit::rls_config(&loaded.set).unwrap();
        // The generated YAML is valid reference config.
        let yaml = warden_ratelimit::to_yaml(&config);
        let parsed = warden_ratelimit::parse_config("gen.yaml", &yaml).unwrap();
        let mut domains = std::collections::BTreeMap::new();
        domains.insert(parsed.domain.clone(), parsed);
        let limiter = RateLimiter::in_memory(RlsConfigSet { domains });

        let mut headers = http::HeaderMap::new();
        headers.insert("x-user", "ann".parse().unwrap());
        headers.insert("x-app", "web".parse().unwrap());
        let method = http::Method::GET;
        let req = RequestAttrs {
            client_ip: "10.0.0.7".parse().unwrap(),
            method: &method,
            path: "/",
            headers: &headers,
            gateway: "",
            virtual_service: None,
            source_route: None,
            destination_cluster: None,
            query: None,
            authority: "",
            scheme: "http",
            route_local: &[],
            route_rate_limits: None,
            dynamic_metadata: None,
        };
        let mut descriptors = Vec::new();
        rules.descriptors(&req, &[], &mut descriptors);
        assert_eq!(descriptors.len(), 4);
        let resp = limiter
            .decide(&RateLimitRequest {
                domain: config.domain.clone(),
                descriptors,
                hits_addend: 1,
            })
            .await
            .unwrap();
        let limits: Vec<u32> = resp
            .statuses
            .iter()
            .map(|s| s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit))
            .collect();
        assert_eq!(
            limits,
            vec![2, 3, 4, 5],
            "each descriptor found its rule's limit"
        );
        assert_eq!(resp.statuses[0].limit_remaining, 1);
    }
}
