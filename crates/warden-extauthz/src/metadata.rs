//! `google.protobuf.Struct` (a provider's `dynamic_metadata`) as JSON, the form the proxy keeps
//! dynamic metadata in.

use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};

/// A Struct as a JSON object.
pub fn to_json(s: &Struct) -> serde_json::Map<String, serde_json::Value> {
    s.fields
        .iter()
        .map(|(k, v)| (k.clone(), value(v)))
        .collect()
}

fn value(v: &Value) -> serde_json::Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(to_json(s)),
        Some(Kind::ListValue(l)) => serde_json::Value::Array(l.values.iter().map(value).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::ListValue;

    fn v(kind: Kind) -> Value {
        Value { kind: Some(kind) }
    }

    #[test]
    fn every_kind_maps() {
        let inner = Struct {
            fields: [("plan".to_string(), v(Kind::StringValue("pro".into())))].into(),
        };
        let s = Struct {
            fields: [
                ("n".to_string(), v(Kind::NumberValue(2.5))),
                ("b".to_string(), v(Kind::BoolValue(true))),
                ("s".to_string(), v(Kind::StructValue(inner))),
                (
                    "l".to_string(),
                    v(Kind::ListValue(ListValue {
                        values: vec![v(Kind::NullValue(0)), v(Kind::NumberValue(f64::NAN))],
                    })),
                ),
            ]
            .into(),
        };
        let json = serde_json::Value::Object(to_json(&s));
        assert_eq!(
            json,
            serde_json::json!({"n": 2.5, "b": true, "s": {"plan": "pro"}, "l": [null, null]})
        );
    }
}
