//! `networking.istio.io` VirtualService.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualService {
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub gateways: Vec<String>,
    #[serde(default)]
    pub http: Vec<HttpRoute>,
    #[serde(default)]
    pub tcp: Vec<TcpRoute>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    #[serde(default)]
    pub name: Option<String>,
    /// Match conditions are ORed; fields inside one condition are ANDed. Empty matches everything.
    #[serde(default, rename = "match")]
    pub matches: Vec<HttpMatchRequest>,
    #[serde(default)]
    pub route: Vec<HttpRouteDestination>,
    #[serde(default)]
    pub direct_response: Option<DirectResponse>,
    #[serde(default)]
    pub headers: Option<Headers>,
    /// Duration string such as `5s`, `250ms`.
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub retries: Option<Retries>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpMatchRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub uri: Option<StringMatch>,
    #[serde(default)]
    pub method: Option<StringMatch>,
    #[serde(default)]
    pub authority: Option<StringMatch>,
    #[serde(default)]
    pub headers: BTreeMap<String, StringMatch>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub gateways: Vec<String>,
    #[serde(default)]
    pub ignore_uri_case: bool,
}

/// Istio StringMatch: exactly one of exact / prefix / regex.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StringMatch {
    #[serde(default)]
    pub exact: Option<String>,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub regex: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteDestination {
    pub destination: Destination,
    #[serde(default)]
    pub weight: Option<u32>,
    #[serde(default)]
    pub headers: Option<Headers>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    pub host: String,
    #[serde(default)]
    pub subset: Option<String>,
    #[serde(default)]
    pub port: Option<PortSelector>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PortSelector {
    pub number: u16,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DirectResponse {
    pub status: u16,
    #[serde(default)]
    pub body: Option<HttpBody>,
}

/// Exactly one of `string` or `bytes` (base64).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpBody {
    #[serde(default)]
    pub string: Option<String>,
    #[serde(default)]
    pub bytes: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Headers {
    #[serde(default)]
    pub request: Option<HeaderOperations>,
    #[serde(default)]
    pub response: Option<HeaderOperations>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HeaderOperations {
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub add: BTreeMap<String, String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Retries {
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub per_try_timeout: Option<String>,
    #[serde(default)]
    pub retry_on: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TcpRoute {
    #[serde(default, rename = "match")]
    pub matches: Vec<L4MatchAttributes>,
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct L4MatchAttributes {
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub gateways: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteDestination {
    pub destination: Destination,
    #[serde(default)]
    pub weight: Option<u32>,
}
