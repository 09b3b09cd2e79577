//! `security.istio.io` RequestAuthentication (v1, v1beta1): the JWT rules a workload verifies
//! end-user tokens with, field names as in `istio/api` (`security/v1beta1/request_authentication.proto`).
//! Which workloads a policy selects (`selector`, `targetRef(s)`) is the same as for
//! AuthorizationPolicy.

use crate::duration::parse_duration;
use crate::kinds::authorization_policy::{PolicyTargetReference, WorkloadSelector};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RequestAuthentication {
    #[serde(default)]
    pub selector: Option<WorkloadSelector>,
    /// Deprecated singular form of `targetRefs`.
    #[serde(default)]
    pub target_ref: Option<PolicyTargetReference>,
    #[serde(default)]
    pub target_refs: Vec<PolicyTargetReference>,
    #[serde(default)]
    pub jwt_rules: Vec<JwtRule>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JwtRule {
    #[serde(default)]
    pub issuer: String,
    #[serde(default)]
    pub audiences: Vec<String>,
    /// Istio also accepts the proto name `jwks_uri`.
    #[serde(default, alias = "jwks_uri")]
    pub jwks_uri: Option<String>,
    /// The JSON Web Key Set itself, as a JSON string.
    #[serde(default)]
    pub jwks: Option<String>,
    #[serde(default)]
    pub from_headers: Vec<JwtHeader>,
    #[serde(default)]
    pub from_params: Vec<String>,
    #[serde(default)]
    pub from_cookies: Vec<String>,
    #[serde(default)]
    pub output_payload_to_header: Option<String>,
    #[serde(default)]
    pub output_claim_to_headers: Vec<ClaimToHeader>,
    #[serde(default)]
    pub forward_original_token: bool,
    /// Claims whose space-delimited string values are also matched word by word (`scope`
    /// and `permission` always are).
    #[serde(default)]
    pub space_delimited_claims: Vec<String>,
    /// The jwksUri fetch timeout (Istio's default: 5s).
    #[serde(default)]
    pub timeout: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JwtHeader {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub prefix: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimToHeader {
    #[serde(default)]
    pub header: String,
    #[serde(default)]
    pub claim: String,
}

/// Istio's jwksUri fetch timeout when `timeout` is not set.
pub const DEFAULT_JWKS_TIMEOUT: Duration = Duration::from_secs(5);

impl JwtRule {
    /// The jwksUri fetch timeout; `None` for a value validation rejects.
    pub fn fetch_timeout(&self) -> Option<Duration> {
        match &self.timeout {
            None => Some(DEFAULT_JWKS_TIMEOUT),
            Some(t) => parse_duration(t).ok(),
        }
    }
}
