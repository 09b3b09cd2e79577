//! `warden.dev/v1alpha1` RateLimitPolicy: local (per-proxy token buckets) and global (RLS) rules.
//!
//! The rule shape follows Envoy Gateway's BackendTrafficPolicy `rateLimit` so users can copy
//! their rules over. Semantic checks (regexes, selector combinations, limits > 0) are done by the
//! compiler in `warden-local-ratelimit`, which reports them with the same file/document/field.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitPolicy {
    /// Gateways, VirtualServices or Gateway API routes the policy applies to; empty means
    /// every route.
    #[serde(default)]
    pub target_refs: Vec<TargetRef>,
    #[serde(default)]
    pub local: Option<LocalRateLimit>,
    #[serde(default)]
    pub global: Option<GlobalRateLimit>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    #[serde(default)]
    pub group: Option<String>,
    /// `Gateway`, `VirtualService`, or a Gateway API `HTTPRoute` / `GRPCRoute`.
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LocalRateLimit {
    #[serde(default)]
    pub rules: Vec<RateLimitRule>,
    /// L4: new TCP connections per interval on the targeted Gateways' listeners; over-limit
    /// connections are closed without a byte written.
    #[serde(default)]
    pub connections: Vec<ConnectionRule>,
}

/// A connection-rate limit, optionally restricted to (or per client in) a source CIDR.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionRule {
    #[serde(default, rename = "sourceCIDR")]
    pub source_cidr: Option<SourceCidrMatch>,
    pub limit: RateLimitValue,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GlobalRateLimit {
    #[serde(default)]
    pub rules: Vec<RateLimitRule>,
}

/// One rule: the clients it selects (selectors ORed, conditions inside one selector ANDed)
/// and their limit. A rule without selectors is the route default.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitRule {
    #[serde(default)]
    pub client_selectors: Vec<ClientSelector>,
    pub limit: RateLimitValue,
    /// Global only: count and report but never reject.
    #[serde(default)]
    pub shadow_mode: bool,
    /// Global only: one counter across all targets instead of one per route.
    #[serde(default)]
    pub shared: bool,
    /// Escalating bans: a client that goes over this rule's limit is refused entirely for the
    /// next period of the schedule (warden extension, see `docs/ratelimit-bans.md`).
    #[serde(default)]
    pub ban: Option<RuleBan>,
}

/// A rule's ban schedule as written: `{durations: [2m, 5m, 10m], forgetAfter: 1h}`; the
/// durations are Istio's (`90s`, `2m`, `1h30m`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuleBan {
    pub durations: Vec<String>,
    pub forget_after: String,
}

impl RuleBan {
    /// The schedule, or (field under `ban`, message) for the first bad value: no durations,
    /// a zero or unreadable one.
    pub fn schedule(&self) -> Result<crate::ban::BanSchedule, (String, String)> {
        let ms = |field: String, text: &str| -> Result<u64, (String, String)> {
            match crate::duration::parse_duration(text) {
                Ok(d) if d.is_zero() => {
                    Err((field, format!("must be longer than 0, not {text:?}")))
                }
                Ok(d) => Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                Err(e) => Err((field, e)),
            }
        };
        if self.durations.is_empty() {
            return Err(("durations".into(), "needs at least one duration".into()));
        }
        let durations_ms = self
            .durations
            .iter()
            .enumerate()
            .map(|(i, d)| ms(format!("durations[{i}]"), d))
            .collect::<Result<Vec<_>, _>>()?;
        let forget_after_ms = ms("forgetAfter".into(), &self.forget_after)?;
        Ok(crate::ban::BanSchedule {
            durations_ms,
            forget_after_ms,
        })
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClientSelector {
    #[serde(default, rename = "sourceCIDR")]
    pub source_cidr: Option<SourceCidrMatch>,
    #[serde(default)]
    pub headers: Vec<HeaderMatch>,
    #[serde(default)]
    pub methods: Vec<MethodMatch>,
    #[serde(default)]
    pub path: Option<PathMatch>,
    /// warden extension: claims of the request's verified JWT (RequestAuthentication), matched
    /// like headers; `name` is the claim, nested ones by dots (`org.id`). A request without a
    /// token has none of them.
    #[serde(default)]
    pub claims: Vec<HeaderMatch>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
pub enum SourceMatchType {
    /// One bucket shared by every address in the CIDR.
    #[default]
    Exact,
    /// One bucket per distinct client address in the CIDR.
    Distinct,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SourceCidrMatch {
    #[serde(default, rename = "type")]
    pub match_type: SourceMatchType,
    /// A CIDR such as `0.0.0.0/0` or `10.0.0.0/8`; a bare address means /32 or /128.
    pub value: String,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
pub enum HeaderMatchType {
    #[default]
    Exact,
    RegularExpression,
    /// One bucket per distinct value of the header (requests without it do not match).
    Distinct,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatch {
    pub name: String,
    #[serde(default, rename = "type")]
    pub match_type: HeaderMatchType,
    /// Required for Exact and RegularExpression, not allowed for Distinct.
    #[serde(default)]
    pub value: Option<String>,
    /// Select the requests that do NOT match (a missing header counts as not matching).
    #[serde(default)]
    pub invert: bool,
}

/// An HTTP method, written either as `POST` or (Envoy Gateway style) `{value: POST}`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MethodMatch {
    pub value: String,
    #[serde(default)]
    pub invert: bool,
}

impl<'de> Deserialize<'de> for MethodMatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MethodVisitor;
        impl<'de> Visitor<'de> for MethodVisitor {
            type Value = MethodMatch;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a method name such as POST, or {value: POST}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MethodMatch, E> {
                Ok(MethodMatch {
                    value: v.to_owned(),
                    invert: false,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MethodMatch, A::Error> {
                let mut value = None;
                let mut invert = false;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "value" => value = Some(map.next_value::<String>()?),
                        "invert" => invert = map.next_value::<bool>()?,
                        other => {
                            return Err(de::Error::unknown_field(other, &["value", "invert"]));
                        }
                    }
                }
                let value = value.ok_or_else(|| de::Error::missing_field("value"))?;
                Ok(MethodMatch { value, invert })
            }
        }
        deserializer.deserialize_any(MethodVisitor)
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
pub enum PathMatchType {
    Exact,
    #[default]
    PathPrefix,
    RegularExpression,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PathMatch {
    #[serde(default, rename = "type")]
    pub match_type: PathMatchType,
    pub value: String,
    #[serde(default)]
    pub invert: bool,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
pub enum RateLimitUnit {
    #[default]
    Second,
    Minute,
    Hour,
    Day,
    /// 30 days, as Envoy's rate limit service counts it.
    Month,
    /// 365 days.
    Year,
}

impl RateLimitUnit {
    pub fn seconds(self) -> u64 {
        match self {
            RateLimitUnit::Second => 1,
            RateLimitUnit::Minute => 60,
            RateLimitUnit::Hour => 3_600,
            RateLimitUnit::Day => 86_400,
            RateLimitUnit::Month => 30 * 86_400,
            RateLimitUnit::Year => 365 * 86_400,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitValue {
    pub requests: u64,
    pub unit: RateLimitUnit,
}

#[cfg(test)]
mod ban_tests {
    use super::RuleBan;

    fn ban(durations: &[&str], forget: &str) -> RuleBan {
        RuleBan {
            durations: durations.iter().map(|d| d.to_string()).collect(),
            forget_after: forget.into(),
        }
    }

    #[test]
    fn schedules_as_written() {
        let ok = [
            (
                ban(&["2m", "5m", "10m"], "1h"),
                vec![120_000, 300_000, 600_000],
                3_600_000,
            ),
            (ban(&["90s"], "1h30m"), vec![90_000], 5_400_000),
            (ban(&["500ms"], "1s"), vec![500], 1_000),
        ];
        for (b, durations, forget) in ok {
            let s = b.schedule().expect("valid");
            assert_eq!((s.durations_ms, s.forget_after_ms), (durations, forget));
        }
        let bad = [
            (ban(&[], "1h"), "durations"),
            (ban(&["2m", "0s"], "1h"), "durations[1]"),
            (ban(&["2 minutes"], "1h"), "durations[0]"),
            (ban(&["2m"], "soon"), "forgetAfter"),
            (ban(&["2m"], "0s"), "forgetAfter"),
        ];
        for (b, field) in bad {
            assert_eq!(b.schedule().expect_err("invalid").0, field, "{b:?}");
        }
    }
}
