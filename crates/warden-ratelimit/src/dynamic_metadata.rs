//! `RESPONSE_DYNAMIC_METADATA=true`: the response's `dynamic_metadata`, as the reference's
//! `ratelimitToMetadata` (`src/service/ratelimit.go`) builds it:
//! `{domain, descriptors: [{entries: ["k=v"], limit: "<prototext>", hitsAddend}], hitsAddend,
//! metadata}`, where `metadata` merges the config `metadata` of the limits whose descriptors
//! passed (not over limit; unlimited ones are not counted), first value wins, maps merged.

use crate::limiter::{RateLimitDescriptor, RateLimitOverride};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use serde_json::{Map, Value as Json};

/// The metadata of one response. `passed` are the config `metadata` of the passed limits, in
/// descriptor order.
pub fn build<'a>(request: &RateLimitRequest, passed: impl Iterator<Item = &'a Json>) -> Struct {
    let mut fields = std::collections::HashMap::new();
    fields.insert("domain".to_owned(), string(&request.domain));
    let descriptors = request.descriptors.iter().map(descriptor).collect();
    fields.insert("descriptors".to_owned(), list(descriptors));
    if request.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_owned(),
            number(f64::from(request.hits_addend)),
        );
    }
    let mut merged = Map::new();
    for metadata in passed {
        if let Json::Object(src) = metadata {
            merge(&mut merged, src);
        }
    }
    if !merged.is_empty() {
        fields.insert("metadata".to_owned(), from_json(&Json::Object(merged)));
    }
    Struct { fields }
}

fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut fields = std::collections::HashMap::new();
    let entries = d
        .entries
        .iter()
        .map(|e| string(&format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert("entries".to_owned(), list(entries));
    if let Some(limit) = &d.limit {
        fields.insert("limit".to_owned(), string(&prototext(limit)));
    }
    if let Some(h) = &d.hits_addend {
        fields.insert("hitsAddend".to_owned(), number(h.value as f64));
    }
    kind(Kind::StructValue(Struct { fields }))
}

/// Go's `RateLimitOverride.String()`: prototext with zero fields left out. (protobuf-go
/// randomly doubles some spaces of this output to keep people from parsing it; one space here.)
fn prototext(limit: &RateLimitOverride) -> String {
    let mut parts = Vec::new();
    if limit.requests_per_unit != 0 {
        parts.push(format!("requests_per_unit:{}", limit.requests_per_unit));
    }
    if limit.unit != 0 {
        let unit = RateLimitUnit::try_from(limit.unit)
            .map(|u| u.as_str_name().to_owned())
            .unwrap_or_else(|_| limit.unit.to_string());
        parts.push(format!("unit:{unit}"));
    }
    parts.join(" ")
}

/// The reference's `mergeMetadata`: keys `dest` lacks are added; two maps under one key are
/// merged; otherwise the value already there stays.
fn merge(dest: &mut Map<String, Json>, src: &Map<String, Json>) {
    for (k, v) in src {
        match (dest.get_mut(k), v) {
            (Some(Json::Object(d)), Json::Object(s)) => merge(d, s),
            (Some(_), _) => {}
            (None, _) => {
                dest.insert(k.clone(), v.clone());
            }
        }
    }
}

fn kind(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn string(s: &str) -> Value {
    kind(Kind::StringValue(s.to_owned()))
}

fn number(n: f64) -> Value {
    kind(Kind::NumberValue(n))
}

fn list(values: Vec<Value>) -> Value {
    kind(Kind::ListValue(ListValue { values }))
}

/// JSON (config metadata) as a protobuf `Value`: numbers become doubles, as `structpb` does.
pub fn from_json(json: &Json) -> Value {
    match json {
        Json::Null => kind(Kind::NullValue(0)),
        Json::Bool(b) => kind(Kind::BoolValue(*b)),
        Json::Number(n) => number(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => string(s),
        Json::Array(items) => list(items.iter().map(from_json).collect()),
        Json::Object(map) => kind(Kind::StructValue(Struct {
            fields: map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect(),
        })),
    }
}

/// A protobuf `Value` as protojson renders it: whole numbers without a fraction, keys sorted.
pub fn to_json(value: &Value) -> Json {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::NumberValue(n)) => {
            // Exactly representable whole numbers print as integers, as Go's protojson does.
            if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
                Json::from(*n as i64)
            } else {
                serde_json::Number::from_f64(*n).map_or(Json::Null, Json::Number)
            }
        }
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(l)) => Json::Array(l.values.iter().map(to_json).collect()),
        Some(Kind::StructValue(s)) => struct_to_json(s),
    }
}

pub fn struct_to_json(s: &Struct) -> Json {
    let mut keys: Vec<&String> = s.fields.keys().collect();
    keys.sort();
    Json::Object(
        keys.into_iter()
            .filter_map(|k| s.fields.get(k).map(|v| (k.clone(), to_json(v))))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_value_wins_and_maps_merge() {
        let mut dest = Map::new();
        let a = json!({"team": "a", "nested": {"x": 1}, "list": [1]});
        let b = json!({"team": "b", "nested": {"x": 2, "y": 3}, "list": [2], "extra": true});
        for m in [&a, &b] {
            merge(&mut dest, m.as_object().unwrap());
        }
        assert_eq!(
            Json::Object(dest),
            json!({"team": "a", "nested": {"x": 1, "y": 3}, "list": [1], "extra": true})
        );
    }

    #[test]
    fn overrides_print_as_prototext() {
        let o = |requests_per_unit, unit| RateLimitOverride {
            requests_per_unit,
            unit,
        };
        assert_eq!(prototext(&o(10, 2)), "requests_per_unit:10 unit:MINUTE");
        assert_eq!(prototext(&o(0, 1)), "unit:SECOND");
        assert_eq!(prototext(&o(3, 0)), "requests_per_unit:3");
        assert_eq!(prototext(&o(3, 42)), "requests_per_unit:3 unit:42");
    }
}
