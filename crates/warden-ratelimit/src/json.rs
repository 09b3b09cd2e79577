//! protojson for the HTTP `/json` endpoint: `RateLimitRequest` in (camelCase or the proto's
//! snake_case names), `RateLimitResponse` out (camelCase, enum names, `"12s"` durations, zero
//! values omitted), as the reference's `protojson` does.

use crate::limiter::{Entry, RateLimitDescriptor, RateLimitOverride};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{json, Map, Value};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid RateLimitRequest JSON: {0}")]
pub struct JsonError(pub String);

fn field<'a>(obj: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    obj.get(camel)
        .or_else(|| obj.get(snake))
        .filter(|v| !v.is_null())
}

fn as_u64(v: &Value, name: &str) -> Result<u64, JsonError> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| JsonError(format!("{name}: not an unsigned integer"))),
        // protojson writes 64-bit integers as strings.
        Value::String(s) => s
            .parse()
            .map_err(|_| JsonError(format!("{name}: not an unsigned integer"))),
        _ => Err(JsonError(format!("{name}: not an unsigned integer"))),
    }
}

fn as_u32(v: &Value, name: &str) -> Result<u32, JsonError> {
    u32::try_from(as_u64(v, name)?).map_err(|_| JsonError(format!("{name}: out of range")))
}

fn as_str<'a>(v: &'a Value, name: &str) -> Result<&'a str, JsonError> {
    v.as_str()
        .ok_or_else(|| JsonError(format!("{name}: not a string")))
}

fn as_obj<'a>(v: &'a Value, name: &str) -> Result<&'a Map<String, Value>, JsonError> {
    v.as_object()
        .ok_or_else(|| JsonError(format!("{name}: not an object")))
}

fn as_arr<'a>(v: &'a Value, name: &str) -> Result<&'a Vec<Value>, JsonError> {
    v.as_array()
        .ok_or_else(|| JsonError(format!("{name}: not an array")))
}

/// Parses a protojson `RateLimitRequest`.
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, JsonError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| JsonError(e.to_string()))?;
    let obj = as_obj(&value, "request")?;
    let mut request = RateLimitRequest::default();
    if let Some(d) = field(obj, "domain", "domain") {
        request.domain = as_str(d, "domain")?.to_owned();
    }
    if let Some(h) = field(obj, "hitsAddend", "hits_addend") {
        request.hits_addend = as_u32(h, "hitsAddend")?;
    }
    if let Some(list) = field(obj, "descriptors", "descriptors") {
        for d in as_arr(list, "descriptors")? {
            request
                .descriptors
                .push(parse_descriptor(as_obj(d, "descriptors[]")?)?);
        }
    }
    Ok(request)
}

fn parse_descriptor(obj: &Map<String, Value>) -> Result<RateLimitDescriptor, JsonError> {
    let mut descriptor = RateLimitDescriptor::default();
    if let Some(entries) = field(obj, "entries", "entries") {
        for e in as_arr(entries, "entries")? {
            let e = as_obj(e, "entries[]")?;
            descriptor.entries.push(Entry {
                key: field(e, "key", "key")
                    .map(|v| as_str(v, "key"))
                    .transpose()?
                    .unwrap_or_default()
                    .to_owned(),
                value: field(e, "value", "value")
                    .map(|v| as_str(v, "value"))
                    .transpose()?
                    .unwrap_or_default()
                    .to_owned(),
            });
        }
    }
    if let Some(limit) = field(obj, "limit", "limit") {
        let limit = as_obj(limit, "limit")?;
        let requests_per_unit = field(limit, "requestsPerUnit", "requests_per_unit")
            .map(|v| as_u32(v, "requestsPerUnit"))
            .transpose()?
            .unwrap_or(0);
        let unit = match field(limit, "unit", "unit") {
            None => 0,
            Some(Value::String(s)) => RateLimitUnit::from_str_name(s)
                .ok_or_else(|| JsonError(format!("unit: unknown value '{s}'")))?
                as i32,
            Some(v) => as_u32(v, "unit")? as i32,
        };
        descriptor.limit = Some(RateLimitOverride {
            requests_per_unit,
            unit,
        });
    }
    if let Some(h) = field(obj, "hitsAddend", "hits_addend") {
        // google.protobuf.UInt64Value is a bare number (or string) in protojson.
        descriptor.hits_addend = Some(UInt64Value {
            value: as_u64(h, "hitsAddend")?,
        });
    }
    if let Some(v) = field(obj, "isNegativeHits", "is_negative_hits") {
        descriptor.is_negative_hits = v.as_bool().unwrap_or(false);
    }
    Ok(descriptor)
}

fn code_name(code: i32) -> &'static str {
    Code::try_from(code).map_or("UNKNOWN", |c| c.as_str_name())
}

/// Renders a protojson `RateLimitResponse`.
pub fn response_to_json(response: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if response.overall_code != 0 {
        out.insert(
            "overallCode".into(),
            json!(code_name(response.overall_code)),
        );
    }
    if !response.statuses.is_empty() {
        let statuses: Vec<Value> = response
            .statuses
            .iter()
            .map(|s| {
                let mut o = Map::new();
                if s.code != 0 {
                    o.insert("code".into(), json!(code_name(s.code)));
                }
                if let Some(l) = &s.current_limit {
                    let mut lim = Map::new();
                    if !l.name.is_empty() {
                        lim.insert("name".into(), json!(l.name));
                    }
                    if l.requests_per_unit != 0 {
                        lim.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                    }
                    if l.unit != 0 {
                        let unit = Unit::try_from(l.unit).map_or("UNKNOWN", |u| u.as_str_name());
                        lim.insert("unit".into(), json!(unit));
                    }
                    o.insert("currentLimit".into(), Value::Object(lim));
                }
                if s.limit_remaining != 0 {
                    o.insert("limitRemaining".into(), json!(s.limit_remaining));
                }
                if let Some(d) = &s.duration_until_reset {
                    o.insert(
                        "durationUntilReset".into(),
                        json!(format!("{}s", d.seconds)),
                    );
                }
                Value::Object(o)
            })
            .collect();
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if let Some(metadata) = &response.dynamic_metadata {
        out.insert(
            "dynamicMetadata".into(),
            crate::dynamic_metadata::struct_to_json(metadata),
        );
    }
    if !response.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = response
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_reference_example() {
        let r = parse_request(
            br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"0"}],"hitsAddend":2}"#,
        )
        .expect("parse");
        assert_eq!(r.domain, "d");
        assert_eq!(r.hits_addend, 2);
        assert_eq!(r.descriptors[0].entries[0].value, "v");
        assert_eq!(r.descriptors[0].hits_addend.map(|h| h.value), Some(0));
    }

    #[test]
    fn rejects_bad_json() {
        assert!(parse_request(b"{").is_err());
        assert!(parse_request(br#"{"domain": 5}"#).is_err());
    }
}
