//! warden.dev/v1alpha1 RateLimitPolicy (local and global rules). Filled in by the rate limit work.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitPolicy {}
