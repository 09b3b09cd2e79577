//! The Telemetry API's `accessLogging` (telemetry.istio.io/v1): which providers log, whether
//! logging is `disabled`, and a `filter.expression` on the response code. Istio's filter is a
//! CEL expression; warden reads the part of CEL that compares `response.code` with a number
//! (`response.code >= 400`, `400 <= response.code`, `==`, `!=`, `<`, `<=`, `>`, `>=`). Any
//! other expression or a `match` warden cannot honour is an error naming the field: logging
//! something else than asked is not something a log pipeline would notice. A provider other
//! than Istio's built-in `envoy` file logger (an OpenTelemetry or gRPC log service) is a
//! warning: the entry logs nothing, and no request gets anything else for it.

use crate::field_path::FieldPath;
use serde_json::Value;
use std::collections::BTreeMap;

/// What a Telemetry says about access logging, and to which workloads.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TelemetryAccessLogging {
    /// `selector.matchLabels`; empty: every workload of the Telemetry's namespace (the root
    /// namespace's: the whole mesh).
    pub match_labels: BTreeMap<String, String>,
    pub entries: Vec<AccessLogging>,
}

/// Problems at a field: (path, message).
pub type Problems = Vec<(FieldPath, String)>;

/// A Telemetry `spec`'s access logging (`None` without `accessLogging`) and its warnings.
pub fn parse_telemetry(
    spec: &Value,
) -> Result<Option<(TelemetryAccessLogging, Problems)>, Problems> {
    if spec.get("accessLogging").is_none() {
        return Ok(None);
    }
    let mut problems = Vec::new();
    if spec.get("targetRefs").is_some() || spec.get("targetRef").is_some() {
        problems.push((
            FieldPath::keys(&["spec", "targetRefs"]),
            "`targetRefs` with `accessLogging` is not implemented by warden (use `selector`)"
                .to_string(),
        ));
    }
    let match_labels = spec
        .get("selector")
        .and_then(|s| s.get("matchLabels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    match parse(spec) {
        Ok((entries, warnings)) if problems.is_empty() => Ok(Some((
            TelemetryAccessLogging {
                match_labels,
                entries,
            },
            warnings,
        ))),
        Ok(_) => Err(problems),
        Err(mut more) => {
            problems.append(&mut more);
            Err(problems)
        }
    }
}

/// One `accessLogging` entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AccessLogging {
    /// `providers[].name`; empty: the mesh's default providers.
    pub providers: Vec<String>,
    pub disabled: bool,
    pub filter: Option<CodeExpression>,
}

/// `response.code OP N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CodeExpression {
    pub op: Comparison,
    pub code: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Comparison {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CodeExpression {
    pub fn admits(self, code: u16) -> bool {
        match self.op {
            Comparison::Eq => code == self.code,
            Comparison::Ne => code != self.code,
            Comparison::Lt => code < self.code,
            Comparison::Le => code <= self.code,
            Comparison::Gt => code > self.code,
            Comparison::Ge => code >= self.code,
        }
    }
}

/// Istio's built-in file access log provider (`envoy`), which writes where the mesh config's
/// `accessLogFile` says, as it says.
pub const ENVOY_PROVIDER: &str = "envoy";

/// A Telemetry `spec`'s `accessLogging` entries and warnings, or the errors.
pub fn parse(spec: &Value) -> Result<(Vec<AccessLogging>, Problems), Problems> {
    let Some(list) = spec.get("accessLogging") else {
        return Ok((Vec::new(), Vec::new()));
    };
    let base = FieldPath::keys(&["spec", "accessLogging"]);
    let Some(list) = list.as_array() else {
        return Err(vec![(base, "must be a list".into())]);
    };
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let at = base.index(i);
        match entry_of(entry, &at, &mut warnings) {
            Ok(e) => out.push(e),
            Err(mut p) => problems.append(&mut p),
        }
    }
    if problems.is_empty() {
        Ok((out, warnings))
    } else {
        Err(problems)
    }
}

fn entry_of(
    entry: &Value,
    at: &FieldPath,
    warnings: &mut Problems,
) -> Result<AccessLogging, Problems> {
    let mut problems = Vec::new();
    let Some(map) = entry.as_object() else {
        return Err(vec![(at.clone(), "must be a map".into())]);
    };
    let mut logging = AccessLogging {
        providers: Vec::new(),
        disabled: false,
        filter: None,
    };
    for (key, value) in map {
        let field = at.key(key.as_str());
        match key.as_str() {
            "providers" => match value.as_array() {
                Some(list) => {
                    for (j, p) in list.iter().enumerate() {
                        let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
                        if name != ENVOY_PROVIDER {
                            warnings.push((
                                field.index(j).key("name"),
                                format!(
                                    "access log provider `{name}` is not implemented by warden \
                                     (only Istio's built-in `{ENVOY_PROVIDER}` file logger): it \
                                     logs nothing"
                                ),
                            ));
                        }
                        logging.providers.push(name.to_string());
                    }
                }
                None => problems.push((field, "must be a list".into())),
            },
            "disabled" => match value.as_bool() {
                Some(b) => logging.disabled = b,
                None => problems.push((field, "must be true or false".into())),
            },
            "filter" => match value.get("expression").and_then(Value::as_str) {
                Some(text) => match parse_expression(text) {
                    Ok(e) => logging.filter = Some(e),
                    Err(why) => problems.push((field.key("expression"), why)),
                },
                None => problems.push((field.key("expression"), "missing".into())),
            },
            // Every request through a gateway or either side of a sidecar is logged by the
            // proxy that serves it: CLIENT_AND_SERVER is what warden does.
            "match" => {
                let mode = value.get("mode").and_then(Value::as_str);
                if !matches!(mode, None | Some("CLIENT_AND_SERVER")) {
                    problems.push((
                        field.key("mode"),
                        format!(
                            "`{}` is not implemented by warden (every side is logged: \
                             CLIENT_AND_SERVER)",
                            mode.unwrap_or_default()
                        ),
                    ));
                }
            }
            other => problems.push((field, format!("`{other}` is not implemented by warden"))),
        }
    }
    if problems.is_empty() {
        Ok(logging)
    } else {
        Err(problems)
    }
}

/// `response.code OP N` or `N OP response.code`, spaces optional.
pub fn parse_expression(text: &str) -> Result<CodeExpression, String> {
    const OPS: [(&str, Comparison, Comparison); 6] = [
        (">=", Comparison::Ge, Comparison::Le),
        ("<=", Comparison::Le, Comparison::Ge),
        ("==", Comparison::Eq, Comparison::Eq),
        ("!=", Comparison::Ne, Comparison::Ne),
        (">", Comparison::Gt, Comparison::Lt),
        ("<", Comparison::Lt, Comparison::Gt),
    ];
    let unsupported = || {
        format!(
            "`{text}`: warden reads filter expressions that compare `response.code` with a \
             number (`response.code >= 400`), not other CEL"
        )
    };
    let (sym, op, flipped) = OPS
        .iter()
        .find(|(sym, _, _)| text.contains(sym))
        .ok_or_else(unsupported)?;
    let (left, right) = text.split_once(sym).ok_or_else(unsupported)?;
    let (left, right) = (left.trim(), right.trim());
    let number = |s: &str| s.parse::<u16>().ok();
    match (left, right) {
        ("response.code", n) => Ok(CodeExpression {
            op: *op,
            code: number(n).ok_or_else(unsupported)?,
        }),
        (n, "response.code") => Ok(CodeExpression {
            op: *flipped,
            code: number(n).ok_or_else(unsupported)?,
        }),
        _ => Err(unsupported()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expressions_on_the_response_code() {
        let cases = [
            ("response.code >= 400", Some((Comparison::Ge, 400))),
            ("response.code>=500", Some((Comparison::Ge, 500))),
            ("400 <= response.code", Some((Comparison::Ge, 400))),
            ("response.code == 429", Some((Comparison::Eq, 429))),
            ("response.code != 200", Some((Comparison::Ne, 200))),
            ("response.code < 300", Some((Comparison::Lt, 300))),
            ("500 > response.code", Some((Comparison::Lt, 500))),
            ("response.code >= 400 && request.path != '/x'", None),
            ("request.path == '/x'", None),
            ("response.code >= 4xx", None),
            ("true", None),
        ];
        for (text, want) in cases {
            let got = parse_expression(text).ok().map(|e| (e.op, e.code));
            assert_eq!(got, want, "{text}");
        }
        let ge = parse_expression("response.code >= 400").unwrap();
        assert!(ge.admits(404) && ge.admits(400) && !ge.admits(399));
    }

    #[test]
    fn entries_and_their_problems() {
        let spec = json!({"accessLogging": [
            {"providers": [{"name": "envoy"}], "filter": {"expression": "response.code >= 400"}},
            {"disabled": true},
        ]});
        let (got, warnings) = parse(&spec).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(got[0].providers, ["envoy"]);
        assert_eq!(
            got[0].filter,
            Some(CodeExpression {
                op: Comparison::Ge,
                code: 400
            })
        );
        assert!(got[1].disabled);
        assert_eq!(parse(&json!({"metrics": []})).unwrap(), (vec![], vec![]));
        let (got, warnings) =
            parse(&json!({"accessLogging": [{"providers": [{"name": "otel"}]}]})).unwrap();
        assert_eq!(got[0].providers, ["otel"]);
        assert_eq!(
            warnings[0].0.to_string(),
            "spec.accessLogging[0].providers[0].name"
        );

        let spec = json!({"accessLogging": [
            {"disabled": "yes", "filter": {"expression": "request.path == '/'"},
             "match": {"mode": "CLIENT"}},
        ]});
        let mut fields: Vec<String> = parse(&spec)
            .unwrap_err()
            .into_iter()
            .map(|(f, _)| f.to_string())
            .collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "spec.accessLogging[0].disabled",
                "spec.accessLogging[0].filter.expression",
                "spec.accessLogging[0].match.mode",
            ]
        );
    }
}
