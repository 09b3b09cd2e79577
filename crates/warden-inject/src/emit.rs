//! Block-style YAML for the parts inject adds, with keys in the order written (the config
//! crate's JSON values sort their keys).

/// A YAML node to write.
#[derive(Debug, Clone, PartialEq)]
pub enum Y {
    Str(String),
    Int(i64),
    Bool(bool),
    Seq(Vec<Y>),
    Map(Vec<(String, Y)>),
}

pub fn s(text: impl Into<String>) -> Y {
    Y::Str(text.into())
}

pub fn map(entries: Vec<(&str, Y)>) -> Y {
    Y::Map(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

pub fn seq(items: Vec<Y>) -> Y {
    Y::Seq(items)
}

/// A scalar as YAML: plain when that reads back as the same string, else double-quoted
/// (JSON's quoting is valid YAML).
fn scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && !text.starts_with(['-', '.'])
        && text.parse::<f64>().is_err()
        && !matches!(
            text.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n" | "~"
        );
    if plain {
        text.to_string()
    } else {
        serde_json::Value::String(text.to_string()).to_string()
    }
}

fn key(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if plain {
        text.to_string()
    } else {
        serde_json::Value::String(text.to_string()).to_string()
    }
}

/// `node` as lines indented by `indent` spaces; a map or a sequence item starts on the line.
pub fn lines(node: &Y, indent: usize) -> Vec<String> {
    let pad = " ".repeat(indent);
    match node {
        Y::Str(t) => vec![format!("{pad}{}", scalar(t))],
        Y::Int(i) => vec![format!("{pad}{i}")],
        Y::Bool(b) => vec![format!("{pad}{b}")],
        Y::Seq(items) => items.iter().flat_map(|i| item(i, indent)).collect(),
        Y::Map(entries) => entries
            .iter()
            .flat_map(|(k, v)| entry(k, v, indent))
            .collect(),
    }
}

/// `key: value` at `indent`.
pub fn entry(k: &str, v: &Y, indent: usize) -> Vec<String> {
    let pad = " ".repeat(indent);
    match v {
        Y::Seq(items) if items.is_empty() => vec![format!("{pad}{}: []", key(k))],
        Y::Map(entries) if entries.is_empty() => vec![format!("{pad}{}: {{}}", key(k))],
        Y::Seq(_) => {
            let mut out = vec![format!("{pad}{}:", key(k))];
            out.extend(lines(v, indent));
            out
        }
        Y::Map(_) => {
            let mut out = vec![format!("{pad}{}:", key(k))];
            out.extend(lines(v, indent + 2));
            out
        }
        scalar_node => {
            let text = lines(scalar_node, 0).join("");
            vec![format!("{pad}{}: {text}", key(k))]
        }
    }
}

/// `- item` with the dash at `indent`.
pub fn item(v: &Y, indent: usize) -> Vec<String> {
    let pad = " ".repeat(indent);
    let body = match v {
        Y::Seq(items) if items.is_empty() => return vec![format!("{pad}- []")],
        Y::Map(entries) if entries.is_empty() => return vec![format!("{pad}- {{}}")],
        _ => lines(v, indent + 2),
    };
    body.into_iter()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("{pad}- {}", &l[indent + 2..])
            } else {
                l
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_read_back_as_the_strings_they_are() {
        for (text, want) in [
            ("warden-proxy", "warden-proxy"),
            ("1337", "\"1337\""),
            ("true", "\"true\""),
            ("no", "\"no\""),
            ("", "\"\""),
            ("*", "\"*\""),
            ("a b", "\"a b\""),
            ("$(POD_NAMESPACE)", "\"$(POD_NAMESPACE)\""),
            ("--pod-info=/etc/istio/pod", "\"--pod-info=/etc/istio/pod\""),
            ("/etc/istio/pod", "/etc/istio/pod"),
            ("1.5", "\"1.5\""),
        ] {
            assert_eq!(scalar(text), want, "{text}");
        }
    }

    #[test]
    fn nested_blocks() {
        let node = map(vec![
            ("name", s("warden-proxy")),
            ("args", seq(vec![s("proxy"), s("--mode=sidecar")])),
            (
                "securityContext",
                map(vec![
                    ("runAsUser", Y::Int(1337)),
                    ("privileged", Y::Bool(false)),
                ]),
            ),
            (
                "env",
                seq(vec![map(vec![("name", s("A")), ("value", s("1"))])]),
            ),
            ("ports", seq(vec![])),
        ]);
        assert_eq!(
            item(&node, 4).join("\n"),
            [
                "    - name: warden-proxy",
                "      args:",
                "      - proxy",
                "      - \"--mode=sidecar\"",
                "      securityContext:",
                "        runAsUser: 1337",
                "        privileged: false",
                "      env:",
                "      - name: A",
                "        value: \"1\"",
                "      ports: []",
            ]
            .join("\n")
        );
    }
}
