//! A loosely typed YAML tree read as the reference's parser (Go `yaml.v2`) reads a config file,
//! so its key checks (non-string keys, list items that are not maps, float leaves) and its
//! typed decode can be replayed: every non-null scalar keeps the text it was written as (what
//! yaml.v2 stores in a `string` field: `value: yes` is `"yes"`, `value: 0x1F` is `"0x1F"`) and
//! what it resolves to (`yes` a bool, `0x1F` the int 31: what `bool`, `uint32` and free-form
//! fields get). Only the first document is read; anchors, aliases and `<<` merge keys work as
//! in yaml.v2.

use super::yaml_v2::{go_float, resolve_plain, Resolved};
use granit_parser::{Event, Parser, ScalarStyle, Tag};
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub enum YamlValue {
    Null,
    Scalar {
        text: String,
        resolved: Resolved,
    },
    Seq(Vec<YamlValue>),
    /// Keys in document order (merged keys where their `<<` was); not restricted to strings.
    Map(Vec<(YamlValue, YamlValue)>),
}

const CORE: &str = "tag:yaml.org,2002:";

impl YamlValue {
    /// The first document of `text` (`Null` when there is none).
    pub fn load(text: &str) -> Result<YamlValue, String> {
        let mut anchors: HashMap<usize, YamlValue> = HashMap::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut root = None;
        for event in Parser::new_from_str(text) {
            let (event, _) = event.map_err(|e| e.to_string())?;
            let (node, merge_key) = match event {
                Event::Scalar(value, style, anchor, tag) => {
                    let merge_key = style == ScalarStyle::Plain
                        && value == "<<"
                        && tag
                            .as_deref()
                            .is_none_or(|t| core_suffix(t) == Some("merge"));
                    let node = scalar(&value, style, tag.as_deref())?;
                    remember(&mut anchors, anchor, &node);
                    (node, merge_key)
                }
                Event::Alias(id) => (
                    anchors
                        .get(&id)
                        .cloned()
                        .ok_or_else(|| "unknown anchor referenced".to_owned())?,
                    false,
                ),
                Event::SequenceStart(_, anchor, _) => {
                    stack.push(Frame::Seq(anchor, Vec::new()));
                    continue;
                }
                Event::MappingStart(_, anchor, _) => {
                    stack.push(Frame::Map(anchor, Vec::new(), None));
                    continue;
                }
                Event::SequenceEnd => {
                    let Some(Frame::Seq(anchor, items)) = stack.pop() else {
                        return Err("unbalanced sequence".into());
                    };
                    let node = YamlValue::Seq(items);
                    remember(&mut anchors, anchor, &node);
                    (node, false)
                }
                Event::MappingEnd => {
                    let Some(Frame::Map(anchor, entries, None)) = stack.pop() else {
                        return Err("unbalanced mapping".into());
                    };
                    let node = YamlValue::Map(entries);
                    remember(&mut anchors, anchor, &node);
                    (node, false)
                }
                // yaml.v2's Unmarshal reads the first document only.
                Event::DocumentEnd if root.is_some() => break,
                Event::StreamEnd => break,
                _ => continue,
            };
            match stack.last_mut() {
                None => root = Some(node),
                Some(Frame::Seq(_, items)) => items.push(node),
                Some(Frame::Map(_, entries, pending)) => match pending.take() {
                    None => *pending = Some((node, merge_key)),
                    Some((_, true)) => merge(entries, node)?,
                    Some((key, false)) => entries.push((key, node)),
                },
            }
        }
        Ok(root.unwrap_or(YamlValue::Null))
    }

    /// The scalar's text, as a yaml.v2 `string` field gets it.
    pub fn text(&self) -> Option<&str> {
        match self {
            YamlValue::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// What a scalar resolved to (`Null` for null).
    #[cfg(test)]
    pub fn resolved(&self) -> Option<Resolved> {
        match self {
            YamlValue::Null => Some(Resolved::Null),
            YamlValue::Scalar { resolved, .. } => Some(*resolved),
            _ => None,
        }
    }

    /// Go's `%v` of what yaml.v2 decodes into `interface{}` (the reference's messages).
    pub fn display(&self) -> String {
        match self {
            YamlValue::Null => "<nil>".into(),
            YamlValue::Scalar { text, resolved } => match resolved {
                Resolved::Bool(b) => b.to_string(),
                Resolved::Int(i) => i.to_string(),
                Resolved::Uint(u) => u.to_string(),
                Resolved::Float(f) => go_float(*f),
                Resolved::Null | Resolved::Timestamp | Resolved::Str => text.clone(),
            },
            YamlValue::Seq(_) => "[...]".into(),
            YamlValue::Map(_) => "map[...]".into(),
        }
    }

    /// yaml.v2's short tag (`str`, `int`, `seq`, ...), as its type errors print it.
    pub fn kind(&self) -> &'static str {
        match self {
            YamlValue::Null => "null",
            YamlValue::Scalar { resolved, .. } => resolved.tag(),
            YamlValue::Seq(_) => "seq",
            YamlValue::Map(_) => "map",
        }
    }

    /// A free-form value (`metadata`) as the reference converts it for `structpb`: typed
    /// scalars, nested keys printed with `%v`; timestamps are refused as `structpb` refuses
    /// Go's `time.Time`.
    pub fn to_json(&self) -> Result<serde_json::Value, String> {
        use serde_json::Value as J;
        Ok(match self {
            YamlValue::Null => J::Null,
            YamlValue::Scalar { text, resolved } => match resolved {
                Resolved::Null => J::Null,
                Resolved::Bool(b) => J::Bool(*b),
                Resolved::Int(i) => J::from(*i),
                Resolved::Uint(u) => J::from(*u),
                Resolved::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
                Resolved::Str => J::String(text.clone()),
                Resolved::Timestamp => return Err("proto: invalid type: time.Time".into()),
            },
            YamlValue::Seq(items) => J::Array(
                items
                    .iter()
                    .map(YamlValue::to_json)
                    .collect::<Result<_, _>>()?,
            ),
            YamlValue::Map(entries) => {
                let mut map = serde_json::Map::new();
                for (k, v) in entries {
                    map.insert(k.display(), v.to_json()?);
                }
                J::Object(map)
            }
        })
    }
}

enum Frame {
    Seq(usize, Vec<YamlValue>),
    /// The pending key and whether it is a merge key (`<<`).
    Map(
        usize,
        Vec<(YamlValue, YamlValue)>,
        Option<(YamlValue, bool)>,
    ),
}

fn remember(anchors: &mut HashMap<usize, YamlValue>, anchor: usize, node: &YamlValue) {
    if anchor != 0 {
        anchors.insert(anchor, node.clone());
    }
}

/// The suffix of a `!!` (core schema) tag.
fn core_suffix(tag: &Tag) -> Option<&str> {
    (tag.handle() == CORE).then(|| tag.suffix())
}

/// yaml.v2's `resolve`: plain untagged scalars by their text, quoted ones as strings, a core
/// tag checked against what the text resolves to; other tags leave a string.
fn scalar(value: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<YamlValue, String> {
    let resolved = match tag.map(core_suffix) {
        None if style == ScalarStyle::Plain => resolve_plain(value),
        None | Some(None) | Some(Some("str" | "binary" | "merge")) => Resolved::Str,
        Some(Some(want)) => {
            let got = resolve_plain(value);
            match (want, got) {
                (_, r) if r.tag() == want => r,
                ("float", Resolved::Int(i)) => Resolved::Float(i as f64),
                ("null" | "bool" | "int" | "float" | "timestamp", r) => {
                    return Err(format!(
                        "cannot decode !!{} `{value}` as a !!{want}",
                        r.tag()
                    ))
                }
                _ => Resolved::Str,
            }
        }
    };
    Ok(match resolved {
        Resolved::Null => YamlValue::Null,
        resolved => YamlValue::Scalar {
            text: value.to_owned(),
            resolved,
        },
    })
}

/// `<<: value`: a map's entries, or those of a list of maps (the first one winning), go where
/// the `<<` was, so keys after it override them and they override keys before it.
fn merge(entries: &mut Vec<(YamlValue, YamlValue)>, value: YamlValue) -> Result<(), String> {
    let want_map = || "map merge requires map or sequence of maps as the value".to_owned();
    match value {
        YamlValue::Map(merged) => entries.extend(merged),
        YamlValue::Seq(maps) => {
            for m in maps.into_iter().rev() {
                let YamlValue::Map(merged) = m else {
                    return Err(want_map());
                };
                entries.extend(merged);
            }
        }
        _ => return Err(want_map()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(v: &'a YamlValue, key: &str) -> Option<&'a YamlValue> {
        let YamlValue::Map(entries) = v else {
            return None;
        };
        entries
            .iter()
            .rev()
            .find(|(k, _)| k.text() == Some(key))
            .map(|(_, v)| v)
    }

    #[test]
    fn scalars_keep_their_text_and_resolve_as_yaml_v2() {
        let doc = YamlValue::load(
            "a: yes\nb: 0x1F\nc: '0x1F'\nd: 0123\ne: ~\nf: !!str on\ng: \"on\"\nh: 1_000\n",
        )
        .unwrap();
        let cell = |k| get(&doc, k).map(|v| (v.text().map(str::to_owned), v.resolved()));
        assert_eq!(
            cell("a"),
            Some((Some("yes".into()), Some(Resolved::Bool(true))))
        );
        assert_eq!(
            cell("b"),
            Some((Some("0x1F".into()), Some(Resolved::Int(31))))
        );
        assert_eq!(cell("c"), Some((Some("0x1F".into()), Some(Resolved::Str))));
        assert_eq!(
            cell("d"),
            Some((Some("0123".into()), Some(Resolved::Int(83))))
        );
        assert_eq!(cell("e"), Some((None, Some(Resolved::Null))));
        assert_eq!(cell("f"), Some((Some("on".into()), Some(Resolved::Str))));
        assert_eq!(cell("g"), Some((Some("on".into()), Some(Resolved::Str))));
        assert_eq!(
            cell("h"),
            Some((Some("1_000".into()), Some(Resolved::Int(1000))))
        );
    }

    #[test]
    fn anchors_aliases_and_merge_keys() {
        let doc = YamlValue::load(
            "base: &b {unit: minute, requests_per_unit: 5}\n\
             over: {<<: *b, requests_per_unit: 9}\n\
             under: {requests_per_unit: 9, <<: *b}\n\
             many: {<<: [{x: 1}, {x: 2, y: 3}]}\n\
             copy: *b\n",
        )
        .unwrap();
        let rpu = |m| {
            get(get(&doc, m).unwrap(), "requests_per_unit")
                .unwrap()
                .display()
        };
        assert_eq!(rpu("over"), "9", "keys after << override it");
        assert_eq!(
            rpu("under"),
            "5",
            "<< overrides keys before it, as in yaml.v2"
        );
        assert_eq!(rpu("copy"), "5");
        let many = get(&doc, "many").unwrap();
        assert_eq!(
            get(many, "x").unwrap().display(),
            "1",
            "the first merged map wins"
        );
        assert_eq!(get(many, "y").unwrap().display(), "3");
        assert!(YamlValue::load("a: {<<: 1}").is_err());
    }

    #[test]
    fn only_the_first_document_is_read() {
        let doc = YamlValue::load("domain: one\n---\ndomain: two\n").unwrap();
        assert_eq!(get(&doc, "domain").and_then(YamlValue::text), Some("one"));
        assert_eq!(YamlValue::load("").unwrap(), YamlValue::Null);
        assert_eq!(YamlValue::load("# nothing\n").unwrap(), YamlValue::Null);
    }

    #[test]
    fn explicit_core_tags_are_checked() {
        let doc = YamlValue::load("a: !!int \"12\"\nb: !!float 3\n").unwrap();
        assert_eq!(get(&doc, "a").unwrap().resolved(), Some(Resolved::Int(12)));
        assert_eq!(
            get(&doc, "b").unwrap().resolved(),
            Some(Resolved::Float(3.0))
        );
        let err = YamlValue::load("a: !!int abc\n").unwrap_err();
        assert_eq!(err, "cannot decode !!str `abc` as a !!int");
    }
}
