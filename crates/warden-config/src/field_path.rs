//! Field paths such as `spec.http[0].route[1].weight`, one format for every error and warning.
//!
//! serde_ignored prints `http.0.mirror` and serde_path_to_error prints `http[0].mirror`; both are
//! converted into [`FieldPath`] so users see a single style, and the same value keys the line
//! index of a document.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A path into a document, rendered with dots for keys and brackets for indexes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath(Vec<Segment>);

impl FieldPath {
    pub fn root() -> Self {
        Self::default()
    }

    /// A path of plain keys, e.g. `FieldPath::keys(&["spec", "hosts"])`.
    pub fn keys(keys: &[&str]) -> Self {
        Self(keys.iter().map(|k| Segment::Key((*k).to_owned())).collect())
    }

    pub fn key(&self, key: impl Into<String>) -> Self {
        let mut next = self.clone();
        next.0.push(Segment::Key(key.into()));
        next
    }

    pub fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.0.push(Segment::Index(index));
        next
    }

    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path without its last segment (root stays root).
    pub fn parent(&self) -> Self {
        let mut p = self.clone();
        p.0.pop();
        p
    }

    /// Append every segment of `rest`.
    pub fn join(&self, rest: &FieldPath) -> Self {
        let mut next = self.clone();
        next.0.extend(rest.0.iter().cloned());
        next
    }

    /// Parse the rendered form back: `spec.http[0]["a.b"].x`. Unparseable text becomes a
    /// single key, so lookups fall back to the document.
    pub fn parse(text: &str) -> Self {
        let mut segments = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("[\"") {
                let Some(end) = after.find("\"]") else { break };
                segments.push(Segment::Key(after[..end].to_owned()));
                rest = &after[end + 2..];
            } else if let Some(after) = rest.strip_prefix('[') {
                let Some(end) = after.find(']') else { break };
                match after[..end].parse() {
                    Ok(i) => segments.push(Segment::Index(i)),
                    Err(_) => segments.push(Segment::Key(after[..end].to_owned())),
                }
                rest = &after[end + 1..];
            } else {
                let body = rest.strip_prefix('.').unwrap_or(rest);
                let end = body.find(['.', '[']).unwrap_or(body.len());
                if end > 0 {
                    segments.push(Segment::Key(body[..end].to_owned()));
                }
                rest = &body[end..];
            }
        }
        Self(segments)
    }

    /// Convert a serde_ignored path (which prints `a.0.b`).
    pub fn from_ignored(path: &serde_ignored::Path<'_>) -> Self {
        let mut segments = Vec::new();
        collect_ignored(path, &mut segments);
        Self(segments)
    }

    /// Convert a serde_path_to_error path.
    pub fn from_path_to_error(path: &serde_path_to_error::Path) -> Self {
        let segments = path
            .iter()
            .filter_map(|s| match s {
                serde_path_to_error::Segment::Seq { index } => Some(Segment::Index(*index)),
                serde_path_to_error::Segment::Map { key } => Some(Segment::Key(key.clone())),
                serde_path_to_error::Segment::Enum { variant } => {
                    Some(Segment::Key(variant.clone()))
                }
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        Self(segments)
    }
}

fn collect_ignored(path: &serde_ignored::Path<'_>, out: &mut Vec<Segment>) {
    use serde_ignored::Path;
    match path {
        Path::Root => {}
        Path::Seq { parent, index } => {
            collect_ignored(parent, out);
            out.push(Segment::Index(*index));
        }
        Path::Map { parent, key } => {
            collect_ignored(parent, out);
            out.push(Segment::Key(key.clone()));
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => collect_ignored(parent, out),
    }
}

/// Keys that read unambiguously after a dot; anything else is quoted in brackets.
fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Index(n) => write!(f, "[{n}]")?,
                Segment::Key(k) if is_plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => write!(f, "[{k:?}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_keys_with_dots_and_indexes_with_brackets() {
        let p = FieldPath::keys(&["spec", "http"])
            .index(0)
            .key("route")
            .index(1)
            .key("weight");
        assert_eq!(p.to_string(), "spec.http[0].route[1].weight");
        let h = FieldPath::keys(&["headers"]).key(":authority");
        assert_eq!(h.to_string(), "headers[\":authority\"]");
        assert_eq!(FieldPath::root().to_string(), "");
        assert_eq!(p.parent().to_string(), "spec.http[0].route[1]");
        for text in [
            "spec.http[0].route[1].weight",
            "headers[\":authority\"].x",
            "a",
        ] {
            assert_eq!(FieldPath::parse(text).to_string(), text);
        }
        assert_eq!(
            FieldPath::parse("spec.http[0]"),
            FieldPath::keys(&["spec", "http"]).index(0)
        );
    }
}
