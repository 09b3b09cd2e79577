//! A loosely typed YAML tree, so the reference's key checks (non-string keys, list items that are
//! not maps, float leaves) can run before the typed conversion, as the Go service does.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum YamlValue {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<YamlValue>),
    /// Keys in document order; not restricted to strings.
    Map(Vec<(YamlValue, YamlValue)>),
}

impl YamlValue {
    /// How the Go service prints a scalar in its messages (`%v`).
    pub fn display(&self) -> String {
        match self {
            YamlValue::Null => "<nil>".into(),
            YamlValue::Bool(b) => b.to_string(),
            YamlValue::Int(i) => i.to_string(),
            YamlValue::Float(f) => f.to_string(),
            YamlValue::Str(s) => s.clone(),
            YamlValue::Seq(_) => "[...]".into(),
            YamlValue::Map(_) => "map[...]".into(),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            YamlValue::Null => "null",
            YamlValue::Bool(_) => "bool",
            YamlValue::Int(_) => "int",
            YamlValue::Float(_) => "float",
            YamlValue::Str(_) => "string",
            YamlValue::Seq(_) => "list",
            YamlValue::Map(_) => "map",
        }
    }

    /// Converts to JSON (for `metadata`); non-string keys are stringified.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            YamlValue::Null => J::Null,
            YamlValue::Bool(b) => J::Bool(*b),
            YamlValue::Int(i) => i64::try_from(*i)
                .map(J::from)
                .unwrap_or_else(|_| J::String(i.to_string())),
            YamlValue::Float(f) => serde_json::Number::from_f64(*f)
                .map(J::Number)
                .unwrap_or(J::Null),
            YamlValue::Str(s) => J::String(s.clone()),
            YamlValue::Seq(items) => J::Array(items.iter().map(YamlValue::to_json).collect()),
            YamlValue::Map(entries) => J::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.display(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

impl<'de> Deserialize<'de> for YamlValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = YamlValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<YamlValue, E> {
        Ok(YamlValue::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<YamlValue, E> {
        Ok(YamlValue::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<YamlValue, E> {
        Ok(YamlValue::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<YamlValue, E> {
        Ok(YamlValue::Int(v.into()))
    }
    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<YamlValue, E> {
        i128::try_from(v)
            .map(YamlValue::Int)
            .map_err(|_| E::custom("integer out of range"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<YamlValue, E> {
        Ok(YamlValue::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(v))
    }
    fn visit_unit<E>(self) -> Result<YamlValue, E> {
        Ok(YamlValue::Null)
    }
    fn visit_none<E>(self) -> Result<YamlValue, E> {
        Ok(YamlValue::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<YamlValue, D::Error> {
        YamlValue::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<YamlValue, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(YamlValue::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<YamlValue, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry()? {
            entries.push((k, v));
        }
        Ok(YamlValue::Map(entries))
    }
}
