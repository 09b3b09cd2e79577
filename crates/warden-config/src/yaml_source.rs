//! Multi-document YAML parsed into `serde_json::Value`s plus the line of every node.
//!
//! The typed kinds are decoded from the plain value (so serde_ignored and serde_path_to_error
//! work unchanged); the side table of lines lets every error and warning point at a line.

use crate::field_path::{FieldPath, Segment};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// One YAML document: its value, the line it starts on and the line of each node.
#[derive(Debug, Clone)]
pub struct SourceDoc {
    pub value: serde_json::Value,
    pub lines: LineIndex,
}

/// Line (1-based) of every node of a document, as a tree shaped like the document (cheaper
/// to build than a map of paths when a document holds 100k list items).
#[derive(Debug, Clone, Default)]
pub struct LineIndex(Option<LineNode>);

#[derive(Debug, Clone)]
struct LineNode {
    line: usize,
    children: LineChildren,
}

#[derive(Debug, Clone)]
enum LineChildren {
    None,
    Seq(Vec<LineNode>),
    Map(HashMap<String, LineNode>),
}

impl LineIndex {
    /// The line of `path`, or of its nearest ancestor that has one (a missing field points at
    /// the object that lacks it).
    pub fn line_of(&self, path: &FieldPath) -> Option<usize> {
        let mut node = self.0.as_ref()?;
        let mut line = None;
        for seg in path.segments() {
            if node.line > 0 {
                line = Some(node.line);
            }
            let next = match (&node.children, seg) {
                (LineChildren::Seq(items), Segment::Index(i)) => items.get(*i),
                (LineChildren::Map(map), Segment::Key(k)) => map.get(k),
                _ => None,
            };
            match next {
                Some(n) => node = n,
                None => return line,
            }
        }
        if node.line > 0 {
            Some(node.line)
        } else {
            line
        }
    }
}

impl LineIndex {
    /// The lines of the node at `path` as a document of its own (a `kind: List` item).
    pub fn subtree(&self, path: &FieldPath) -> LineIndex {
        let mut node = match self.0.as_ref() {
            Some(n) => n,
            None => return LineIndex(None),
        };
        for seg in path.segments() {
            let next = match (&node.children, seg) {
                (LineChildren::Seq(items), Segment::Index(i)) => items.get(*i),
                (LineChildren::Map(map), Segment::Key(k)) => map.get(k),
                _ => None,
            };
            match next {
                Some(n) => node = n,
                None => return LineIndex(None),
            }
        }
        LineIndex(Some(node.clone()))
    }
}

/// Line indexes of every loaded document, by file and 1-based document index.
#[derive(Debug, Clone, Default)]
pub struct SourceLines(HashMap<(PathBuf, usize), LineIndex>);

impl SourceLines {
    pub(crate) fn insert(&mut self, file: PathBuf, document: usize, lines: LineIndex) {
        self.0.insert((file, document), lines);
    }

    /// The line of `path` in document `document` of `file` (or of its nearest ancestor).
    pub fn line_of(&self, file: &Path, document: usize, path: &FieldPath) -> Option<usize> {
        self.0
            .get(&(file.to_path_buf(), document))
            .and_then(|l| l.line_of(path))
    }
}

/// A YAML syntax error with its position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub line: Option<usize>,
    pub message: String,
}

/// Parse every document of `text` (empty and null documents are skipped). Text whose aliases
/// would expand far beyond its size is refused first ([`crate::yaml_expansion`]).
pub fn parse_documents(text: &str) -> Result<Vec<SourceDoc>, YamlError> {
    crate::yaml_expansion::check(text).map_err(|r| YamlError {
        line: Some(r.line),
        message: r.message,
    })?;
    let options = serde_saphyr::options! { budget: None, with_snippet: false };
    let nodes: Vec<Spanned<Node>> = serde_saphyr::from_multiple_with_options(text, options)
        .map_err(|e| YamlError {
            line: e.location().map(|l| l.line() as usize).filter(|l| *l > 0),
            message: e.to_string(),
        })?;
    Ok(nodes
        .into_iter()
        .map(|node| {
            let (value, lines) = flatten(node);
            SourceDoc {
                value,
                lines: LineIndex(Some(lines)),
            }
        })
        .collect())
}

/// Split a spanned node into its plain value and its line tree.
fn flatten(node: Spanned<Node>) -> (serde_json::Value, LineNode) {
    let line = node.referenced.line() as usize;
    let (value, children) = match node.value {
        Node::Scalar(v) => (v, LineChildren::None),
        Node::Seq(items) => {
            let mut values = Vec::with_capacity(items.len());
            let mut lines = Vec::with_capacity(items.len());
            for item in items {
                let (v, l) = flatten(item);
                values.push(v);
                lines.push(l);
            }
            (serde_json::Value::Array(values), LineChildren::Seq(lines))
        }
        Node::Map(entries) => {
            let mut values = serde_json::Map::with_capacity(entries.len());
            let mut lines = HashMap::with_capacity(entries.len());
            for (k, n) in entries {
                let (v, l) = flatten(n);
                lines.insert(k.clone(), l);
                values.insert(k, v);
            }
            (serde_json::Value::Object(values), LineChildren::Map(lines))
        }
    };
    (value, LineNode { line, children })
}

/// A YAML node whose children carry their source position.
enum Node {
    Scalar(serde_json::Value),
    Seq(Vec<Spanned<Node>>),
    Map(Vec<(String, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        // NaN/inf have no JSON number; keep them as text so a typed field reports a type error.
        Ok(Node::Scalar(
            serde_json::Number::from_f64(v)
                .map(serde_json::Value::Number)
                .unwrap_or_else(|| serde_json::Value::String(v.to_string())),
        ))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Node, E> {
        Ok(Node::Scalar(String::from_utf8_lossy(v).into_owned().into()))
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar(serde_json::Value::Null))
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar(serde_json::Value::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<KeyText>()? {
            let value = map.next_value::<Spanned<Node>>()?;
            entries.push((key.0, value));
        }
        Ok(Node::Map(entries))
    }
}

/// Mapping keys as text (`80: x` becomes the key "80").
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_bool<E>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<KeyText, E> {
                Ok(KeyText(v))
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyText, E> {
                Ok(KeyText("null".into()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_lines_of_nested_nodes_across_documents() {
        let text = "a: 1\n---\n\nkind: X\nspec:\n  http:\n  - name: r\n    port: 80\n";
        let docs = parse_documents(text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].value["spec"]["http"][0]["port"], 80);
        let port = FieldPath::keys(&["spec", "http"]).index(0).key("port");
        assert_eq!(docs[1].lines.line_of(&port), Some(8));
        // A path that does not exist falls back to its nearest ancestor.
        let missing = FieldPath::keys(&["spec", "http"]).index(0).key("route");
        assert_eq!(docs[1].lines.line_of(&missing), Some(7));
        assert_eq!(docs[1].lines.line_of(&FieldPath::root()), Some(4));
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let err = parse_documents("a: 1\nb: [1, 2\nc: 3\n").unwrap_err();
        assert!(err.line.is_some(), "{err:?}");
    }
}
