//! Envoy's dynamic metadata: per request, namespace -> fields (a `Struct` per filter
//! namespace), written by filters (Lua's `dynamicMetadata():set`) and read by later filters
//! (the rate limit `metadata` action) and the access log. The same shape as warden-lua's, so
//! a script's map moves without conversion.

pub type DynamicMetadata =
    std::collections::BTreeMap<String, serde_json::Map<String, serde_json::Value>>;
