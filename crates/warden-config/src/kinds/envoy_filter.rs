//! networking.istio.io EnvoyFilter: only the rate limit patches of the seeds are understood.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EnvoyFilter {}
