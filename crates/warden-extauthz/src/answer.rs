//! What a provider's answer does, as Envoy's ext_authz filter applies it: an OK status allows
//! the request with the `ok_response` edits (headers set, appended or removed upstream, headers
//! added to the response, `dynamic_metadata` for the filters after it); any other status denies
//! it with the `denied_response`'s status (403 when unset), headers and body. A check that
//! fails (connection, timeout, a malformed answer) continues when `failOpen`, and is otherwise
//! answered `statusOnError` with no body.

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::HeaderValueOption;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::CheckResponse;
use http::{HeaderMap, HeaderName, HeaderValue};

/// How one header of the answer is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditAction {
    /// Add a value, keeping the ones there.
    Append,
    /// Replace every value (or add).
    Set,
    /// Add only when the header is absent.
    AddIfAbsent,
    /// Replace only when the header is present.
    OverwriteIfExists,
}

/// One header the answer sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderEdit {
    pub name: HeaderName,
    pub value: HeaderValue,
    pub action: EditAction,
}

/// An allowed request's changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allowed {
    /// For the upstream request.
    pub request: Vec<HeaderEdit>,
    /// Removed from the upstream request (never pseudo-headers or `host`).
    pub remove: Vec<HeaderName>,
    /// Added to the response the client gets.
    pub response: Vec<HeaderEdit>,
    /// Query parameters set (replacing every one of the same key), then removed.
    pub query_set: Vec<(String, String)>,
    pub query_remove: Vec<String>,
    /// Dynamic metadata under the filter's namespace.
    pub dynamic_metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// A denied request's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub status: u16,
    pub headers: Vec<HeaderEdit>,
    pub body: Bytes,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Allowed(Allowed),
    Denied(Denied),
}

/// Envoy's default denial status.
pub const DENIED_STATUS: u16 = 403;

/// gRPC's OK.
const GRPC_OK: i32 = 0;

/// An edit from a HeaderValueOption: `append` when set says append (true) or set (false) —
/// Envoy's ext_authz reading of an unset `append` as false — else `append_action`. Options
/// whose name or value are not valid HTTP are skipped.
// `append` is deprecated in favour of `append_action`, but providers (Istio's sample among
// them) still set it, and Envoy still honours it first.
#[allow(deprecated)]
fn edit(option: &HeaderValueOption, default: EditAction) -> Option<HeaderEdit> {
    let header = option.header.as_ref()?;
    let name = HeaderName::from_bytes(header.key.as_bytes()).ok()?;
    let value = if header.raw_value.is_empty() {
        HeaderValue::from_str(&header.value).ok()?
    } else {
        HeaderValue::from_bytes(&header.raw_value).ok()?
    };
    let action = match option.append {
        Some(append) if append.value => EditAction::Append,
        Some(_) => EditAction::Set,
        None => match HeaderAppendAction::try_from(option.append_action) {
            Ok(HeaderAppendAction::AppendIfExistsOrAdd) => default,
            Ok(HeaderAppendAction::AddIfAbsent) => EditAction::AddIfAbsent,
            Ok(HeaderAppendAction::OverwriteIfExistsOrAdd) => EditAction::Set,
            Ok(HeaderAppendAction::OverwriteIfExists) => EditAction::OverwriteIfExists,
            Err(_) => default,
        },
    };
    Some(HeaderEdit {
        name,
        value,
        action,
    })
}

/// Apply edits to a header map.
pub fn apply(edits: &[HeaderEdit], headers: &mut HeaderMap) {
    for e in edits {
        match e.action {
            EditAction::Append => {
                headers.append(e.name.clone(), e.value.clone());
            }
            EditAction::Set => {
                headers.insert(e.name.clone(), e.value.clone());
            }
            EditAction::AddIfAbsent => {
                if !headers.contains_key(&e.name) {
                    headers.insert(e.name.clone(), e.value.clone());
                }
            }
            EditAction::OverwriteIfExists => {
                if headers.contains_key(&e.name) {
                    headers.insert(e.name.clone(), e.value.clone());
                }
            }
        }
    }
}

/// What a CheckResponse decides.
pub fn interpret(response: CheckResponse) -> Outcome {
    let code = response.status.as_ref().map_or(GRPC_OK, |s| s.code);
    let mut metadata = response
        .dynamic_metadata
        .as_ref()
        .map(crate::metadata::to_json);
    if code != GRPC_OK {
        let denied = match response.http_response {
            Some(HttpResponse::DeniedResponse(d)) => d,
            _ => Default::default(),
        };
        let status = denied
            .status
            .map(|s| s.code)
            .filter(|c| (100..=599).contains(c))
            .map_or(DENIED_STATUS, |c| c as u16);
        return Outcome::Denied(Denied {
            status,
            headers: denied
                .headers
                .iter()
                .filter_map(|o| edit(o, EditAction::Set))
                .collect(),
            body: Bytes::from(denied.body),
        });
    }
    let mut allowed = Allowed::default();
    if let Some(HttpResponse::OkResponse(ok)) = response.http_response {
        // Envoy's ext_authz: an unset `append` in `headers` sets the header.
        allowed.request = ok
            .headers
            .iter()
            .filter_map(|o| edit(o, EditAction::Set))
            .collect();
        allowed.remove = ok
            .headers_to_remove
            .iter()
            .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
            .filter(|n| *n != http::header::HOST)
            .collect();
        allowed.response = ok
            .response_headers_to_add
            .iter()
            .filter_map(|o| edit(o, EditAction::Append))
            .collect();
        allowed.query_set = ok
            .query_parameters_to_set
            .iter()
            .map(|q| (q.key.clone(), q.value.clone()))
            .collect();
        allowed.query_remove = ok.query_parameters_to_remove.clone();
        // The deprecated field, used when the response-level one is absent.
        #[allow(deprecated)]
        if metadata.is_none() {
            metadata = ok.dynamic_metadata.as_ref().map(crate::metadata::to_json);
        }
    }
    allowed.dynamic_metadata = metadata.filter(|m| !m.is_empty());
    Outcome::Allowed(allowed)
}

/// A query string with `set` applied (a key's parameters replaced by one, in the first one's
/// place, or appended) and then the `remove` keys dropped; `None` when nothing is left. Keys
/// compare as written (case-sensitive), as Envoy's do.
pub fn edit_query(
    query: Option<&str>,
    set: &[(String, String)],
    remove: &[String],
) -> Option<String> {
    let mut params: Vec<(String, Option<String>)> = query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
            None => (p.to_owned(), None),
        })
        .collect();
    for (key, value) in set {
        match params.iter().position(|(k, _)| k == key) {
            Some(first) => {
                params[first].1 = Some(value.clone());
                let mut i = 0;
                params.retain(|(k, _)| {
                    i += 1;
                    i - 1 == first || k != key
                });
            }
            None => params.push((key.clone(), Some(value.clone()))),
        }
    }
    params.retain(|(k, _)| !remove.contains(k));
    let text: Vec<String> = params
        .into_iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => k,
        })
        .collect();
    (!text.is_empty()).then(|| text.join("&"))
}

/// A failed check: `None` lets the request continue (`failOpen`), else the status to answer.
/// Whether Envoy's network ext_authz lets a TCP connection on: a CheckResponse whose status
/// is OK (unset counts as OK); any other closes it.
pub fn connection_allowed(response: &CheckResponse) -> bool {
    response.status.as_ref().map_or(GRPC_OK, |s| s.code) == GRPC_OK
}

pub fn on_error(fail_open: bool, status_on_error: u16) -> Option<u16> {
    (!fail_open).then_some(status_on_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::HeaderValue as PbHeader;
    use envoy_types::pb::envoy::r#type::v3::HttpStatus;
    use envoy_types::pb::envoy::service::auth::v3::{DeniedHttpResponse, OkHttpResponse};
    use envoy_types::pb::google::protobuf::{value::Kind, BoolValue, Struct, Value};
    use envoy_types::pb::google::rpc::Status;

    #[allow(deprecated)]
    fn opt(key: &str, value: &str, append: Option<bool>, action: i32) -> HeaderValueOption {
        HeaderValueOption {
            header: Some(PbHeader {
                key: key.into(),
                value: value.into(),
                ..PbHeader::default()
            }),
            append: append.map(|value| BoolValue { value }),
            append_action: action,
            ..HeaderValueOption::default()
        }
    }

    #[test]
    fn a_connection_goes_on_only_with_ok() {
        let status = |code| CheckResponse {
            status: Some(Status {
                code,
                ..Status::default()
            }),
            ..CheckResponse::default()
        };
        assert!(connection_allowed(&CheckResponse::default()));
        assert!(connection_allowed(&status(0)));
        assert!(!connection_allowed(&status(7)));
        assert!(!connection_allowed(&status(16)));
    }

    #[test]
    fn ok_answers_edit_the_request_and_the_response() {
        let plan = Struct {
            fields: [(
                "plan".to_string(),
                Value {
                    kind: Some(Kind::StringValue("pro".into())),
                },
            )]
            .into(),
        };
        let outcome = interpret(CheckResponse {
            status: Some(Status::default()),
            dynamic_metadata: Some(plan),
            http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
                headers: vec![
                    opt("x-plan", "pro", None, 0),
                    opt("x-multi", "b", Some(true), 0),
                    opt("x-new", "n", None, 1),
                    opt("x-only-if", "o", None, 3),
                    opt("bad name", "v", None, 0),
                ],
                headers_to_remove: vec!["x-secret".into(), "host".into()],
                response_headers_to_add: vec![opt("x-seen", "1", None, 0)],
                ..OkHttpResponse::default()
            })),
        });
        let Outcome::Allowed(a) = outcome else {
            panic!("{outcome:?}")
        };
        let mut headers = HeaderMap::new();
        headers.insert("x-plan", HeaderValue::from_static("free"));
        headers.insert("x-multi", HeaderValue::from_static("a"));
        headers.insert("x-new", HeaderValue::from_static("kept"));
        apply(&a.request, &mut headers);
        assert_eq!(headers["x-plan"], "pro");
        assert_eq!(headers.get_all("x-multi").iter().count(), 2);
        assert_eq!(headers["x-new"], "kept");
        assert!(!headers.contains_key("x-only-if"));
        assert_eq!(a.request.len(), 4);
        assert_eq!(a.remove, [HeaderName::from_static("x-secret")]);
        assert_eq!(a.response[0].action, EditAction::Append);
        assert_eq!(
            a.dynamic_metadata.unwrap()["plan"],
            serde_json::Value::from("pro")
        );
    }

    #[test]
    fn denials_carry_the_providers_status_headers_and_body() {
        let denied = |status: Option<i32>| CheckResponse {
            status: Some(Status {
                code: 7,
                ..Status::default()
            }),
            http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
                status: status.map(|code| HttpStatus { code }),
                headers: vec![opt("x-why", "no", None, 0)],
                body: "denied by ext_authz".into(),
            })),
            ..CheckResponse::default()
        };
        let cases = [(Some(401), 401), (None, 403), (Some(0), 403)];
        for (status, want) in cases {
            let Outcome::Denied(d) = interpret(denied(status)) else {
                panic!()
            };
            assert_eq!(d.status, want);
            assert_eq!(d.body, "denied by ext_authz");
            assert_eq!(d.headers[0].name, "x-why");
        }
        // A non-OK status without a denied response: 403, nothing else.
        let bare = CheckResponse {
            status: Some(Status {
                code: 16,
                ..Status::default()
            }),
            ..CheckResponse::default()
        };
        assert_eq!(
            interpret(bare),
            Outcome::Denied(Denied {
                status: 403,
                headers: vec![],
                body: Bytes::new()
            })
        );
        assert_eq!(on_error(true, 403), None);
        assert_eq!(on_error(false, 503), Some(503));
    }

    /// (query, set, remove, the query after).
    type QueryCase<'a> = (
        Option<&'a str>,
        &'a [(&'a str, &'a str)],
        &'a [&'a str],
        Option<&'a str>,
    );

    #[test]
    fn query_parameters_are_set_then_removed() {
        let cases: [QueryCase<'_>; 6] = [
            (Some("a=1&b=2&a=3"), &[("a", "9")], &[], Some("a=9&b=2")),
            (Some("a=1"), &[("c", "x")], &[], Some("a=1&c=x")),
            (None, &[("c", "x")], &[], Some("c=x")),
            (Some("a=1&flag&b=2"), &[], &["a", "flag"], Some("b=2")),
            (Some("a=1"), &[], &["a"], None),
            (Some("A=1"), &[], &["a"], Some("A=1")),
        ];
        for (query, set, remove, want) in cases {
            let set: Vec<(String, String)> = set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let remove: Vec<String> = remove.iter().map(|k| k.to_string()).collect();
            assert_eq!(
                edit_query(query, &set, &remove).as_deref(),
                want,
                "{query:?}"
            );
        }
    }
}
