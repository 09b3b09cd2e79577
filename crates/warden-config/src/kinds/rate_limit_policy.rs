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
    /// Gateways or VirtualServices the policy applies to; empty means every route.
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
    /// `Gateway` or `VirtualService`.
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
