//! The field names warden's types accept at each place of a document, read from their serde
//! `Deserialize` impls (so the list cannot drift from the code): for "did you mean" on an
//! unknown field, and for the test that keeps docs/config.md true.
//!
//! A type's shape is found by deserializing it from a made-up input that leads down one path
//! and reports what the type asks for there (`deserialize_struct` with its field names, a
//! sequence, a map, a scalar). One pass per node of the schema; results are cached per kind.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use std::collections::BTreeMap;
use std::fmt;

/// A node of a type's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schema {
    /// A struct and its fields' schemas (serde names, after renames).
    Struct(BTreeMap<String, Schema>),
    /// A list of the inner schema.
    Seq(Box<Schema>),
    /// A map with free keys (labels, headers by name) of the inner schema; also a struct with
    /// `#[serde(flatten)]`, whose other keys are checked by the code that reads them.
    Map(Box<Schema>),
    /// A string, number or bool (or an enum of names).
    Scalar,
    /// A type that decides on its own (untagged enums, custom deserializers).
    Opaque,
}

/// One step of a schema path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Item,
    Value,
}

/// What the type asked for at the end of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    Struct(Vec<String>),
    Seq,
    Map,
    Scalar,
    Opaque,
}

/// Bounds the exploration of recursive types (none of warden's kinds nests this deep).
const MAX_DEPTH: usize = 16;

impl Schema {
    /// The schema of `T`.
    pub fn of<T: DeserializeOwned>() -> Schema {
        explore::<T>(&mut Vec::new())
    }

    /// The fields of a struct node (empty for other nodes).
    pub fn fields(&self) -> Vec<&str> {
        match self {
            Schema::Struct(f) => f.keys().map(String::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// The node at a document path (`http`, `0`, `route`... as [`crate::FieldPath`] segments):
    /// list indexes step into a list, keys into a struct's field or a map's value.
    pub fn at(&self, path: &crate::FieldPath) -> Option<&Schema> {
        use crate::field_path::Segment;
        let mut node = self;
        for seg in path.segments() {
            node = match (node, seg) {
                (Schema::Seq(inner), Segment::Index(_)) => inner,
                (Schema::Struct(fields), Segment::Key(k)) => fields.get(k)?,
                (Schema::Map(inner), Segment::Key(_)) => inner,
                _ => return None,
            };
        }
        Some(node)
    }

    /// Every field path of the schema, rendered as docs write them: `http[].route[].weight`
    /// (lists as `[]`, free map keys as `{}`).
    pub fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_paths(String::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: String, out: &mut Vec<String>) {
        match self {
            Schema::Struct(fields) => {
                for (name, node) in fields {
                    let path = if prefix.is_empty() {
                        name.clone()
                    } else {
                        format!("{prefix}.{name}")
                    };
                    out.push(path.clone());
                    node.collect_paths(path, out);
                }
            }
            Schema::Seq(inner) => inner.collect_paths(format!("{prefix}[]"), out),
            Schema::Map(inner) => inner.collect_paths(format!("{prefix}{{}}"), out),
            Schema::Scalar | Schema::Opaque => {}
        }
    }
}

fn explore<T: DeserializeOwned>(path: &mut Vec<Step>) -> Schema {
    let shape = probe::<T>(path);
    if path.len() >= MAX_DEPTH {
        return Schema::Opaque;
    }
    let child = |path: &mut Vec<Step>, step: Step| {
        path.push(step);
        let s = explore::<T>(path);
        path.pop();
        s
    };
    match shape {
        Shape::Struct(fields) => Schema::Struct(
            fields
                .into_iter()
                .map(|f| {
                    let s = child(path, Step::Field(f.clone()));
                    (f, s)
                })
                .collect(),
        ),
        Shape::Seq => Schema::Seq(Box::new(child(path, Step::Item))),
        Shape::Map => Schema::Map(Box::new(child(path, Step::Value))),
        Shape::Scalar => Schema::Scalar,
        Shape::Opaque => Schema::Opaque,
    }
}

/// Deserialize `T` from input that follows `path`, and report the shape found at its end.
fn probe<T: DeserializeOwned>(path: &[Step]) -> Shape {
    let mut found = None;
    // The value is made up, so the result (usually "missing field") does not matter.
    let _ = T::deserialize(Explorer {
        path,
        found: &mut found,
    });
    found.unwrap_or(Shape::Opaque)
}

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("schema probe")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Stop
    }
}

/// A deserializer that leads down `path`, then records what is asked for there.
struct Explorer<'a> {
    path: &'a [Step],
    found: &'a mut Option<Shape>,
}

impl Explorer<'_> {
    fn at_end(&self) -> bool {
        self.path.is_empty()
    }

    /// Note `shape` if this is the end of the path; the error ends the made-up input.
    fn record(self, shape: Shape) -> Stop {
        if self.at_end() && self.found.is_none() {
            *self.found = Some(shape);
        }
        Stop
    }
}

macro_rules! scalar {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(self.record(Shape::Scalar))
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Explorer<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(self.record(Shape::Opaque))
    }

    scalar! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32
        deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_unit deserialize_identifier
    }

    fn deserialize_i128<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(self.record(Shape::Scalar))
    }

    fn deserialize_u128<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(self.record(Shape::Scalar))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_some(self)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: V,
    ) -> Result<V::Value, Stop> {
        Err(self.record(Shape::Scalar))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        match self.path.split_first() {
            None => Err(self.record(Shape::Seq)),
            Some((Step::Item, rest)) => visitor.visit_seq(OneItem {
                next: Some(Explorer {
                    path: rest,
                    found: self.found,
                }),
            }),
            Some(_) => Err(Stop),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Stop> {
        Err(self.record(Shape::Opaque))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        _: V,
    ) -> Result<V::Value, Stop> {
        Err(self.record(Shape::Opaque))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        match self.path.split_first() {
            None => Err(self.record(Shape::Map)),
            Some((Step::Value, rest)) => visitor.visit_map(OneEntry {
                key: Some("*".into()),
                value: Some(Explorer {
                    path: rest,
                    found: self.found,
                }),
            }),
            Some(_) => Err(Stop),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        match self.path.split_first() {
            None => {
                let fields = fields.iter().map(|f| (*f).to_owned()).collect();
                Err(self.record(Shape::Struct(fields)))
            }
            Some((Step::Field(name), rest)) => visitor.visit_map(OneEntry {
                key: Some(name.clone()),
                value: Some(Explorer {
                    path: rest,
                    found: self.found,
                }),
            }),
            Some(_) => Err(Stop),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        Err(self.record(Shape::Scalar))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }
}

/// A sequence of one made-up item.
struct OneItem<'a> {
    next: Option<Explorer<'a>>,
}

impl<'de> de::SeqAccess<'de> for OneItem<'_> {
    type Error = Stop;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Stop> {
        match self.next.take() {
            Some(e) => seed.deserialize(e).map(Some),
            None => Ok(None),
        }
    }
}

/// A map of one made-up entry.
struct OneEntry<'a> {
    key: Option<String>,
    value: Option<Explorer<'a>>,
}

impl<'de> de::MapAccess<'de> for OneEntry<'_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        match self.key.take() {
            Some(k) => seed.deserialize(k.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Stop> {
        match self.value.take() {
            Some(e) => seed.deserialize(e),
            None => Err(Stop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::HashMap;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        #[serde(default)]
        items: Vec<Inner>,
        #[serde(default, rename = "match")]
        matches: Option<Inner>,
        #[serde(default)]
        labels: HashMap<String, String>,
        by_name: HashMap<String, Inner>,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        port: u16,
        host: Option<String>,
    }

    #[test]
    fn finds_fields_lists_and_maps_at_every_level() {
        let schema = Schema::of::<Outer>();
        assert_eq!(
            schema.fields(),
            ["byName", "items", "labels", "match", "name"]
        );
        let at = |p: &str| schema.at(&crate::FieldPath::parse(p)).map(Schema::fields);
        assert_eq!(at("items[3]"), Some(vec!["host", "port"]));
        assert_eq!(at("match"), Some(vec!["host", "port"]));
        assert_eq!(at("byName.anything"), Some(vec!["host", "port"]));
        assert_eq!(
            schema.at(&crate::FieldPath::parse("labels.app")),
            Some(&Schema::Scalar)
        );
        assert_eq!(at("items[0].nope"), None);
        assert!(schema.paths().contains(&"items[].port".to_owned()));
        assert!(schema.paths().contains(&"byName{}.host".to_owned()));
    }
}
