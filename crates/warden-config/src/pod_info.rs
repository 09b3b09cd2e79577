//! Who a pod is, from the files of a Kubernetes downward-API volume (Istio mounts one at
//! `/etc/istio/pod`): `labels` and `annotations` hold one `key="value"` line per entry, the
//! value quoted as Go's `%q` writes it (kubernetes pkg/fieldpath `FormatMap`); `namespace` and
//! `name` hold the bare value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a downward-API folder says; a file that is absent leaves its field empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// A file of the folder that could not be read as the kubelet writes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: line {line}: {message}", file.display())]
pub struct PodInfoError {
    pub file: PathBuf,
    pub line: usize,
    pub message: String,
}

impl PodInfo {
    /// Read `dir`'s `labels`, `annotations`, `namespace` and `name` (each optional).
    pub fn read(dir: &Path) -> Result<PodInfo, PodInfoError> {
        let text = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        let map = |name: &str| -> Result<Option<BTreeMap<String, String>>, PodInfoError> {
            text(name)
                .map(|t| {
                    parse_map(&t).map_err(|(line, message)| PodInfoError {
                        file: dir.join(name),
                        line,
                        message,
                    })
                })
                .transpose()
        };
        let value = |name: &str| {
            text(name)
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
        };
        Ok(PodInfo {
            labels: map("labels")?,
            annotations: map("annotations")?,
            namespace: value("namespace"),
            name: value("name"),
        })
    }
}

/// The namespace a proxy is in when neither a flag nor `POD_NAMESPACE` names one and no
/// downward-API file does.
pub const DEFAULT_NAMESPACE: &str = "default";

impl PodInfo {
    /// A proxy's namespace and labels: the flags (or `POD_NAMESPACE`) when given, else this
    /// folder's files, else `default` and no labels. Labels are taken whole from one source,
    /// never merged, so a flag can leave out a label the pod has.
    pub fn identity(
        &self,
        namespace: Option<String>,
        labels: Vec<(String, String)>,
    ) -> (String, BTreeMap<String, String>) {
        let namespace = namespace
            .or_else(|| self.namespace.clone())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let labels = if labels.is_empty() {
            self.labels.clone().unwrap_or_default()
        } else {
            labels.into_iter().collect()
        };
        (namespace, labels)
    }
}

/// `key="value"` lines (blank lines skipped); the 1-based line and why on an error.
pub fn parse_map(text: &str) -> Result<BTreeMap<String, String>, (usize, String)> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (key, quoted) = line
            .split_once('=')
            .ok_or_else(|| (i + 1, "expected key=\"value\"".to_string()))?;
        let value = unquote(quoted.trim()).map_err(|m| (i + 1, m))?;
        out.insert(key.trim().to_string(), value);
    }
    Ok(out)
}

/// A Go double-quoted string literal (`strconv.Quote`'s output) to its text.
fn unquote(quoted: &str) -> Result<String, String> {
    let inner = quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .ok_or_else(|| format!("value {quoted} is not a quoted string"))?;
    let mut bytes: Vec<u8> = Vec::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let escape = chars.next().ok_or("a value ends in a backslash")?;
        let simple = match escape {
            'a' => Some(0x07),
            'b' => Some(0x08),
            'f' => Some(0x0c),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0b),
            '\\' => Some(b'\\'),
            '"' => Some(b'"'),
            '\'' => Some(b'\''),
            _ => None,
        };
        if let Some(b) = simple {
            bytes.push(b);
            continue;
        }
        let digits = match escape {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            other => return Err(format!("unknown escape \\{other}")),
        };
        let hex: String = chars.by_ref().take(digits).collect();
        let code = u32::from_str_radix(&hex, 16)
            .ok()
            .filter(|_| hex.len() == digits)
            .ok_or_else(|| format!("bad escape \\{escape}{hex}"))?;
        if escape == 'x' {
            // A byte of a UTF-8 sequence that Go escaped because the text is not valid UTF-8.
            bytes.push(code as u8);
        } else {
            let ch = char::from_u32(code).ok_or_else(|| format!("bad code point {code:#x}"))?;
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_the_kubelet_writes_them() {
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("", &[]),
            (
                "app=\"productpage\"\nversion=\"v1\"\n",
                &[("app", "productpage"), ("version", "v1")],
            ),
            (
                "istio=\"ingressgateway\"\npod-template-hash=\"5c8d\"",
                &[("istio", "ingressgateway"), ("pod-template-hash", "5c8d")],
            ),
            (
                "traffic.sidecar.istio.io/excludeOutboundPorts=\"6379,9000\"\n",
                &[("traffic.sidecar.istio.io/excludeOutboundPorts", "6379,9000")],
            ),
            // An annotation holding JSON or several lines, as %q escapes it.
            (
                "proxy.istio.io/config=\"{\\\"gatewayTopology\\\":{\\\"numTrustedProxies\\\":1}}\\n\"\n",
                &[(
                    "proxy.istio.io/config",
                    "{\"gatewayTopology\":{\"numTrustedProxies\":1}}\n",
                )],
            ),
            ("a=\"tab\\there\"\n", &[("a", "tab\there")]),
            ("a=\"\"\n", &[("a", "")]),
            ("a=\"caf\\u00e9 \\xe2\\x82\\xac\"\n", &[("a", "café €")]),
            ("a=\"x=y\"\n\n", &[("a", "x=y")]),
        ];
        for (text, want) in cases {
            let got = parse_map(text).unwrap_or_else(|e| panic!("{text:?}: {e:?}"));
            let want: BTreeMap<String, String> = want
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn lines_that_are_not_the_kubelets_are_refused_with_their_line() {
        for (text, line) in [
            ("a=\"1\"\nno equals sign\n", 2),
            ("a=unquoted\n", 1),
            ("a=\"1\"\nb=\"bad \\q escape\"\n", 2),
            ("a=\"ends in \\\"\n", 1),
            ("a=\"\\u12\"\n", 1),
        ] {
            assert_eq!(parse_map(text).map_err(|e| e.0), Err(line), "{text:?}");
        }
    }

    #[test]
    fn flags_win_over_the_files_and_the_files_over_the_defaults() {
        let files = PodInfo {
            labels: Some([("app".to_string(), "reviews".to_string())].into()),
            namespace: Some("bookinfo".into()),
            ..PodInfo::default()
        };
        let flag = || vec![("istio".to_string(), "ingressgateway".to_string())];
        let cases = [
            (PodInfo::default(), None, vec![], "default", vec![]),
            (
                files.clone(),
                None,
                vec![],
                "bookinfo",
                vec![("app", "reviews")],
            ),
            (
                files.clone(),
                Some("prod"),
                vec![],
                "prod",
                vec![("app", "reviews")],
            ),
            (
                files.clone(),
                None,
                flag(),
                "bookinfo",
                vec![("istio", "ingressgateway")],
            ),
            (
                PodInfo::default(),
                Some("prod"),
                flag(),
                "prod",
                vec![("istio", "ingressgateway")],
            ),
        ];
        for (info, ns, labels, want_ns, want_labels) in cases {
            let (got_ns, got_labels) = info.identity(ns.map(String::from), labels);
            assert_eq!(got_ns, want_ns);
            let want: BTreeMap<String, String> = want_labels
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(got_labels, want);
        }
    }

    #[test]
    fn a_folder_with_some_files() {
        let dir = std::env::temp_dir().join(format!("warden-podinfo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("labels"), "app=\"reviews\"\nversion=\"v2\"\n").unwrap();
        std::fs::write(dir.join("namespace"), "bookinfo").unwrap();
        let info = PodInfo::read(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(info.namespace.as_deref(), Some("bookinfo"));
        assert_eq!(info.name, None);
        assert_eq!(info.annotations, None);
        assert_eq!(
            info.labels.unwrap().get("version").map(String::as_str),
            Some("v2")
        );
    }
}
