//! security.istio.io AuthorizationPolicy (v1, v1beta1). Filled in by the authz work.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationPolicy {}
