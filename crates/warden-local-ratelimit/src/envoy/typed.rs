//! Unwrapping `typed_config`: either `{"@type": T, ...fields}` or a TypedStruct
//! `{"@type": ".../TypedStruct", type_url: T, value: {...fields}}`.

use serde_json::{Map, Value};

const TYPED_STRUCT: [&str; 2] = [
    "type.googleapis.com/udpa.type.v1.TypedStruct",
    "type.googleapis.com/xds.type.v3.TypedStruct",
];

/// The message type URL, its fields, and the field path of those fields relative to the input.
pub(crate) fn unwrap(typed: &Value) -> Result<(String, Value, &'static str), String> {
    let obj = typed
        .as_object()
        .ok_or_else(|| "typed_config must be an object".to_string())?;
    let at_type = obj
        .get("@type")
        .and_then(Value::as_str)
        .ok_or_else(|| "typed_config needs an \"@type\"".to_string())?;
    if TYPED_STRUCT.contains(&at_type) {
        let type_url = obj
            .get("type_url")
            .or_else(|| obj.get("typeUrl"))
            .and_then(Value::as_str)
            .ok_or_else(|| "a TypedStruct needs a type_url".to_string())?;
        let value = obj
            .get("value")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        return Ok((type_url.to_string(), value, ".value"));
    }
    let mut fields = obj.clone();
    fields.remove("@type");
    Ok((at_type.to_string(), Value::Object(fields), ""))
}
