//! `security.istio.io` AuthorizationPolicy (v1, v1beta1), field names as in `istio/api`.
//!
//! This is only the serde shape. Every field Istio defines is modelled, including the ones warden
//! cannot enforce yet (principals, JWT, CUSTOM), so that `warden-authz` can reject them with a
//! clear error instead of the loader silently ignoring them.

use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationPolicy {
    #[serde(default)]
    pub selector: Option<WorkloadSelector>,
    /// Deprecated singular form of `targetRefs`.
    #[serde(default)]
    pub target_ref: Option<PolicyTargetReference>,
    #[serde(default)]
    pub target_refs: Vec<PolicyTargetReference>,
    /// Rules are ORed. No rules with `ALLOW` allows nothing (`spec: {}`).
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub action: Action,
    /// Only meaningful with `CUSTOM`.
    #[serde(default)]
    pub provider: Option<ExtensionProvider>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "UPPERCASE")]
pub enum Action {
    #[default]
    Allow,
    Deny,
    Audit,
    Custom,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTargetReference {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionProvider {
    #[serde(default)]
    pub name: String,
}

/// A rule matches iff any `from` AND any `to` AND all `when` match; absent parts match.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    #[serde(default)]
    pub from: Vec<From>,
    #[serde(default)]
    pub to: Vec<To>,
    #[serde(default)]
    pub when: Vec<Condition>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct From {
    #[serde(default)]
    pub source: Option<Source>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct To {
    #[serde(default)]
    pub operation: Option<Operation>,
}

/// Fields are ANDed, values within a field ORed; `notX` excludes.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    #[serde(default)]
    pub principals: Vec<String>,
    #[serde(default)]
    pub not_principals: Vec<String>,
    #[serde(default)]
    pub request_principals: Vec<String>,
    #[serde(default)]
    pub not_request_principals: Vec<String>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub not_namespaces: Vec<String>,
    #[serde(default)]
    pub service_accounts: Vec<String>,
    #[serde(default)]
    pub not_service_accounts: Vec<String>,
    /// Direct TCP peer.
    #[serde(default)]
    pub ip_blocks: Vec<String>,
    #[serde(default)]
    pub not_ip_blocks: Vec<String>,
    /// Trusted client address (X-Forwarded-For / PROXY protocol).
    #[serde(default)]
    pub remote_ip_blocks: Vec<String>,
    #[serde(default)]
    pub not_remote_ip_blocks: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub not_hosts: Vec<String>,
    /// Strings in Istio; bare YAML numbers are accepted too.
    #[serde(default, deserialize_with = "strings_or_numbers")]
    pub ports: Vec<String>,
    #[serde(default, deserialize_with = "strings_or_numbers")]
    pub not_ports: Vec<String>,
    #[serde(default)]
    pub methods: Vec<String>,
    #[serde(default)]
    pub not_methods: Vec<String>,
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub not_paths: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(default)]
    pub key: String,
    #[serde(default, deserialize_with = "strings_or_numbers")]
    pub values: Vec<String>,
    #[serde(default, deserialize_with = "strings_or_numbers")]
    pub not_values: Vec<String>,
}

/// A YAML list whose items may be written as strings or numbers (`ports: [8080]`).
fn strings_or_numbers<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Item {
        Text(String),
        Int(i64),
        Uint(u64),
    }
    let items: Vec<Item> = Vec::deserialize(de)?;
    Ok(items
        .into_iter()
        .map(|item| match item {
            Item::Text(s) => s,
            Item::Int(n) => n.to_string(),
            Item::Uint(n) => n.to_string(),
        })
        .collect())
}
