//! Envoy route `rate_limits[].actions[]` and the descriptors they produce for a request.
//!
//! One entry yields zero or one descriptor: its actions append entries in order and the first
//! action that cannot produce its entry drops the whole descriptor (except `request_headers`
//! with `skip_if_absent`, which only omits its own entry). Both the local limiter (descriptor
//! buckets) and the global one (RLS descriptors) use these.

use super::proto_json::Uint;
use crate::request::RequestAttrs;
use crate::selector::canonical;
use ipnet::IpNet;
use regex::Regex;
use serde::Deserialize;
use std::net::IpAddr;

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RateLimitEntry {
    #[serde(default)]
    pub stage: u32,
    #[serde(default, alias = "disableKey")]
    pub disable_key: Option<String>,
    pub actions: Vec<Action>,
    /// Dynamic-metadata limit override; kept for the global limiter.
    #[serde(default)]
    pub limit: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    SourceCluster {},
    DestinationCluster {},
    RequestHeaders {
        #[serde(alias = "headerName")]
        header_name: String,
        #[serde(alias = "descriptorKey")]
        descriptor_key: String,
        #[serde(default, alias = "skipIfAbsent")]
        skip_if_absent: bool,
    },
    RemoteAddress {},
    GenericKey {
        #[serde(alias = "descriptorValue")]
        descriptor_value: String,
        #[serde(default, alias = "descriptorKey")]
        descriptor_key: Option<String>,
    },
    HeaderValueMatch {
        #[serde(alias = "descriptorValue")]
        descriptor_value: String,
        #[serde(default, alias = "descriptorKey")]
        descriptor_key: Option<String>,
        #[serde(default, alias = "expectMatch")]
        expect_match: Option<bool>,
        headers: Vec<HeaderMatcher>,
    },
    /// warden extension: `(descriptor_key or "method", request method)`.
    Method {
        #[serde(default, alias = "descriptorKey")]
        descriptor_key: Option<String>,
    },
    /// warden extension: `(descriptor_key or "path", path without the query string)`; replaces
    /// the seed's Lua filter that stripped the query into a header.
    Path {
        #[serde(default, alias = "descriptorKey")]
        descriptor_key: Option<String>,
    },
    /// Envoy's `metadata` action: a string at `metadata_key` in the dynamic metadata
    /// (`source: DYNAMIC`, the default; `ROUTE_ENTRY` metadata is not kept by warden).
    Metadata(MetadataAction),
    /// The deprecated `dynamic_metadata` action (the same, without `source`).
    DynamicMetadata(MetadataAction),
    MaskedRemoteAddress {
        #[serde(default, alias = "v4PrefixMaskLen")]
        v4_prefix_mask_len: Option<Uint>,
        #[serde(default, alias = "v6PrefixMaskLen")]
        v6_prefix_mask_len: Option<Uint>,
    },
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct MetadataAction {
    #[serde(alias = "descriptorKey")]
    pub descriptor_key: String,
    #[serde(alias = "metadataKey")]
    pub metadata_key: MetadataKey,
    #[serde(default, alias = "defaultValue")]
    pub default_value: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default, alias = "skipIfAbsent")]
    pub skip_if_absent: bool,
}

/// `envoy.type.metadata.v3.MetadataKey`: a namespace and a path of keys into it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct MetadataKey {
    pub key: String,
    #[serde(default)]
    pub path: Vec<PathSegment>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct PathSegment {
    pub key: String,
}

/// `envoy.config.route.v3.HeaderMatcher` (the common forms).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct HeaderMatcher {
    pub name: String,
    #[serde(default, alias = "exactMatch")]
    pub exact_match: Option<String>,
    #[serde(default, alias = "prefixMatch")]
    pub prefix_match: Option<String>,
    #[serde(default, alias = "suffixMatch")]
    pub suffix_match: Option<String>,
    #[serde(default, alias = "containsMatch")]
    pub contains_match: Option<String>,
    #[serde(default, alias = "presentMatch")]
    pub present_match: Option<bool>,
    #[serde(default, alias = "safeRegexMatch")]
    pub safe_regex_match: Option<RegexMatcher>,
    #[serde(default, alias = "stringMatch")]
    pub string_match: Option<StringMatcher>,
    #[serde(default, alias = "invertMatch")]
    pub invert_match: bool,
    #[serde(default, alias = "treatMissingHeaderAsEmpty")]
    pub treat_missing_header_as_empty: bool,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RegexMatcher {
    pub regex: String,
    /// Deprecated engine choice (RE2 is the only one); accepted and meaningless.
    #[serde(default, alias = "googleRe2")]
    pub google_re2: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct StringMatcher {
    #[serde(default)]
    pub exact: Option<String>,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub contains: Option<String>,
    #[serde(default, alias = "safeRegex")]
    pub safe_regex: Option<RegexMatcher>,
    #[serde(default, alias = "ignoreCase")]
    pub ignore_case: bool,
}

/// A descriptor: ordered (key, value) entries.
pub type Descriptor = Vec<(String, String)>;

#[derive(Debug, Clone)]
enum ValueTest {
    Present,
    Exact(String, bool),
    Prefix(String, bool),
    Suffix(String, bool),
    Contains(String, bool),
    Regex(Regex),
}

/// Where a header matcher or a `request_headers` action reads its value: a request header, or
/// one of the pseudo-headers Envoy keeps in the same map (with Envoy's values: `:path` with
/// its query string, `:authority` as received, `:scheme` of the listener).
#[derive(Debug, Clone)]
enum HeaderSource {
    Header(http::HeaderName),
    Path,
    Method,
    Authority,
    Scheme,
}

impl HeaderSource {
    fn parse(name: &str) -> Result<Self, String> {
        let lower = name.to_ascii_lowercase();
        Ok(match lower.as_str() {
            ":path" => Self::Path,
            ":method" => Self::Method,
            ":authority" => Self::Authority,
            ":scheme" => Self::Scheme,
            p if p.starts_with(':') => {
                return Err(format!(
                    "{name:?} is not a pseudo-header warden knows (:path, :method, :authority, \
                     :scheme)"
                ))
            }
            _ => Self::Header(
                http::HeaderName::from_bytes(lower.as_bytes())
                    .map_err(|_| format!("{name:?} is not a valid header name"))?,
            ),
        })
    }

    fn is_header(&self) -> bool {
        matches!(self, Self::Header(_))
    }

    /// The value Envoy would find under this name; None when absent.
    fn value<'r>(&self, req: &RequestAttrs<'r>) -> Option<std::borrow::Cow<'r, str>> {
        use std::borrow::Cow;
        match self {
            Self::Header(name) => req
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(Cow::Borrowed),
            Self::Path => Some(match req.query {
                Some(q) => Cow::Owned(format!("{}?{q}", req.path)),
                None => Cow::Borrowed(req.path),
            }),
            Self::Method => Some(Cow::Owned(req.method.as_str().to_string())),
            Self::Authority => (!req.authority.is_empty()).then_some(Cow::Borrowed(req.authority)),
            Self::Scheme => Some(Cow::Borrowed(req.scheme)),
        }
    }
}

#[derive(Debug, Clone)]
struct CompiledHeaderMatcher {
    name: HeaderSource,
    test: ValueTest,
    invert: bool,
    missing_as_empty: bool,
}

impl CompiledHeaderMatcher {
    fn compile(m: &HeaderMatcher) -> Result<Self, String> {
        let name = HeaderSource::parse(&m.name)?;
        let regex =
            |r: &str| Regex::new(&format!("^(?:{r})$")).map_err(|e| format!("invalid regex: {e}"));
        let test = if let Some(v) = &m.exact_match {
            ValueTest::Exact(v.clone(), false)
        } else if let Some(v) = &m.prefix_match {
            ValueTest::Prefix(v.clone(), false)
        } else if let Some(v) = &m.suffix_match {
            ValueTest::Suffix(v.clone(), false)
        } else if let Some(v) = &m.contains_match {
            ValueTest::Contains(v.clone(), false)
        } else if let Some(r) = &m.safe_regex_match {
            ValueTest::Regex(regex(&r.regex)?)
        } else if let Some(s) = &m.string_match {
            let ic = s.ignore_case;
            let fold = |v: &String| if ic { v.to_lowercase() } else { v.clone() };
            if let Some(v) = &s.exact {
                ValueTest::Exact(fold(v), ic)
            } else if let Some(v) = &s.prefix {
                ValueTest::Prefix(fold(v), ic)
            } else if let Some(v) = &s.suffix {
                ValueTest::Suffix(fold(v), ic)
            } else if let Some(v) = &s.contains {
                ValueTest::Contains(fold(v), ic)
            } else if let Some(r) = &s.safe_regex {
                ValueTest::Regex(regex(&r.regex)?)
            } else {
                return Err(
                    "string_match needs one of exact, prefix, suffix, contains, safe_regex".into(),
                );
            }
        } else {
            // present_match, or no matcher at all: Envoy treats both as "header present".
            ValueTest::Present
        };
        let invert = m.invert_match ^ (m.present_match == Some(false));
        Ok(Self {
            name,
            test,
            invert,
            missing_as_empty: m.treat_missing_header_as_empty,
        })
    }

    fn matches(&self, req: &RequestAttrs<'_>) -> bool {
        let found = self.name.value(req);
        let value = match (found.as_deref(), self.missing_as_empty) {
            (Some(v), _) => v,
            (None, true) => "",
            // Envoy: a missing header only matches an (inverted) presence test.
            (None, false) => return matches!(self.test, ValueTest::Present) && self.invert,
        };
        let fold = |ic: bool| {
            if ic {
                std::borrow::Cow::Owned(value.to_lowercase())
            } else {
                std::borrow::Cow::Borrowed(value)
            }
        };
        let hit = match &self.test {
            ValueTest::Present => true,
            ValueTest::Exact(v, ic) => fold(*ic) == v.as_str(),
            ValueTest::Prefix(v, ic) => fold(*ic).starts_with(v.as_str()),
            ValueTest::Suffix(v, ic) => fold(*ic).ends_with(v.as_str()),
            ValueTest::Contains(v, ic) => fold(*ic).contains(v.as_str()),
            ValueTest::Regex(r) => r.is_match(value),
        };
        hit != self.invert
    }
}

#[derive(Debug, Clone)]
enum CompiledAction {
    SourceCluster,
    DestinationCluster,
    RequestHeader {
        name: HeaderSource,
        key: String,
        skip_if_absent: bool,
    },
    RemoteAddress,
    Generic {
        key: String,
        value: String,
    },
    HeaderValueMatch {
        key: String,
        value: String,
        expect: bool,
        headers: Vec<CompiledHeaderMatcher>,
    },
    Masked {
        v4: u8,
        v6: u8,
    },
    Method {
        key: String,
    },
    Path {
        key: String,
    },
    Metadata {
        key: String,
        namespace: String,
        path: Vec<String>,
        default_value: Option<String>,
        skip_if_absent: bool,
    },
}

/// The string at `path` in `namespace` of the dynamic metadata (Envoy reads only string
/// values; anything else counts as absent).
fn metadata_string<'r>(
    req: &RequestAttrs<'r>,
    namespace: &str,
    path: &[String],
) -> Option<&'r str> {
    let fields = req.dynamic_metadata?.get(namespace)?;
    let (first, rest) = path.split_first()?;
    let mut value = fields.get(first)?;
    for key in rest {
        value = value.as_object()?.get(key)?;
    }
    value.as_str().filter(|s| !s.is_empty())
}

/// A `rate_limits` entry ready to evaluate.
#[derive(Debug, Clone)]
pub struct CompiledEntry {
    pub stage: u32,
    actions: Vec<CompiledAction>,
}

impl CompiledEntry {
    /// Whether producing the entry looks at request headers.
    pub fn reads_headers(&self) -> bool {
        self.actions.iter().any(|a| match a {
            CompiledAction::RequestHeader { name, .. } => name.is_header(),
            CompiledAction::HeaderValueMatch { headers, .. } => {
                headers.iter().any(|h| h.name.is_header())
            }
            _ => false,
        })
    }

    /// Compile; errors are `(field path relative to the entry, message)`.
    pub fn compile(entry: &RateLimitEntry) -> Result<Self, (String, String)> {
        let mut actions = Vec::with_capacity(entry.actions.len());
        for (i, a) in entry.actions.iter().enumerate() {
            let at = |f: &str, m: String| (format!("actions[{i}]{f}"), m);
            actions.push(match a {
                Action::SourceCluster {} => CompiledAction::SourceCluster,
                Action::DestinationCluster {} => CompiledAction::DestinationCluster,
                Action::RemoteAddress {} => CompiledAction::RemoteAddress,
                Action::RequestHeaders {
                    header_name,
                    descriptor_key,
                    skip_if_absent,
                } => CompiledAction::RequestHeader {
                    name: HeaderSource::parse(header_name)
                        .map_err(|m| at(".request_headers.header_name", m))?,
                    key: descriptor_key.clone(),
                    skip_if_absent: *skip_if_absent,
                },
                Action::GenericKey {
                    descriptor_value,
                    descriptor_key,
                } => CompiledAction::Generic {
                    key: descriptor_key
                        .clone()
                        .unwrap_or_else(|| "generic_key".into()),
                    value: descriptor_value.clone(),
                },
                Action::HeaderValueMatch {
                    descriptor_value,
                    descriptor_key,
                    expect_match,
                    headers,
                } => CompiledAction::HeaderValueMatch {
                    key: descriptor_key
                        .clone()
                        .unwrap_or_else(|| "header_match".into()),
                    value: descriptor_value.clone(),
                    expect: expect_match.unwrap_or(true),
                    headers: headers
                        .iter()
                        .enumerate()
                        .map(|(j, h)| {
                            CompiledHeaderMatcher::compile(h)
                                .map_err(|m| at(&format!(".header_value_match.headers[{j}]"), m))
                        })
                        .collect::<Result<_, _>>()?,
                },
                Action::Method { descriptor_key } => CompiledAction::Method {
                    key: descriptor_key.clone().unwrap_or_else(|| "method".into()),
                },
                Action::Path { descriptor_key } => CompiledAction::Path {
                    key: descriptor_key.clone().unwrap_or_else(|| "path".into()),
                },
                Action::Metadata(m) | Action::DynamicMetadata(m) => {
                    let field = if matches!(a, Action::Metadata(_)) {
                        ".metadata"
                    } else {
                        ".dynamic_metadata"
                    };
                    match m.source.as_deref() {
                        None | Some("DYNAMIC") => {}
                        Some(other) => {
                            return Err(at(
                                &format!("{field}.source"),
                                format!("source {other} is not supported; warden keeps DYNAMIC metadata only"),
                            ))
                        }
                    }
                    if m.metadata_key.path.is_empty() {
                        return Err(at(
                            &format!("{field}.metadata_key.path"),
                            "must name at least one key".into(),
                        ));
                    }
                    CompiledAction::Metadata {
                        key: m.descriptor_key.clone(),
                        namespace: m.metadata_key.key.clone(),
                        path: m.metadata_key.path.iter().map(|p| p.key.clone()).collect(),
                        default_value: m.default_value.clone().filter(|d| !d.is_empty()),
                        skip_if_absent: m.skip_if_absent,
                    }
                }
                Action::MaskedRemoteAddress {
                    v4_prefix_mask_len,
                    v6_prefix_mask_len,
                } => {
                    let v4 = v4_prefix_mask_len.map_or(32, |u| u.0);
                    let v6 = v6_prefix_mask_len.map_or(128, |u| u.0);
                    if v4 > 32 {
                        return Err(at(
                            ".masked_remote_address.v4_prefix_mask_len",
                            "must be at most 32".into(),
                        ));
                    }
                    if v6 > 128 {
                        return Err(at(
                            ".masked_remote_address.v6_prefix_mask_len",
                            "must be at most 128".into(),
                        ));
                    }
                    CompiledAction::Masked {
                        v4: v4 as u8,
                        v6: v6 as u8,
                    }
                }
            });
        }
        Ok(Self {
            stage: entry.stage,
            actions,
        })
    }

    /// The descriptor this entry produces for the request, or None if an action dropped it.
    /// `source_cluster` is the local service cluster name.
    pub fn descriptor(&self, req: &RequestAttrs<'_>, source_cluster: &str) -> Option<Descriptor> {
        let mut out = Vec::with_capacity(self.actions.len());
        for a in &self.actions {
            match a {
                CompiledAction::SourceCluster => {
                    out.push(("source_cluster".into(), source_cluster.into()))
                }
                CompiledAction::DestinationCluster => out.push((
                    "destination_cluster".into(),
                    req.destination_cluster?.to_string(),
                )),
                CompiledAction::RequestHeader {
                    name,
                    key,
                    skip_if_absent,
                } => match name.value(req) {
                    Some(v) => out.push((key.clone(), v.into_owned())),
                    None if *skip_if_absent => {}
                    None => return None,
                },
                CompiledAction::RemoteAddress => out.push((
                    "remote_address".into(),
                    canonical(req.client_ip).to_string(),
                )),
                CompiledAction::Generic { key, value } => out.push((key.clone(), value.clone())),
                CompiledAction::HeaderValueMatch {
                    key,
                    value,
                    expect,
                    headers,
                } => {
                    let all = headers.iter().all(|h| h.matches(req));
                    if all != *expect {
                        return None;
                    }
                    out.push((key.clone(), value.clone()))
                }
                CompiledAction::Masked { v4, v6 } => {
                    let ip = canonical(req.client_ip);
                    let len = if ip.is_ipv4() { *v4 } else { *v6 };
                    let net = IpNet::new(ip, len).ok()?.trunc();
                    out.push(("masked_remote_address".into(), net.to_string()))
                }
                CompiledAction::Method { key } => {
                    out.push((key.clone(), req.method.as_str().to_string()))
                }
                CompiledAction::Path { key } => {
                    let path = req.path.split('?').next().unwrap_or(req.path);
                    out.push((key.clone(), path.to_string()))
                }
                CompiledAction::Metadata {
                    key,
                    namespace,
                    path,
                    default_value,
                    skip_if_absent,
                } => match metadata_string(req, namespace, path).or(default_value.as_deref()) {
                    Some(v) => out.push((key.clone(), v.to_string())),
                    None if *skip_if_absent => {}
                    None => return None,
                },
            }
        }
        (!out.is_empty()).then_some(out)
    }
}

/// Convenience for callers holding a plain address.
pub fn remote_address_value(ip: IpAddr) -> String {
    canonical(ip).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(yaml_json: serde_json::Value) -> CompiledEntry {
        let e: RateLimitEntry = serde_json::from_value(yaml_json).unwrap();
        CompiledEntry::compile(&e).unwrap()
    }

    #[test]
    fn native_method_and_path_actions_replace_the_lua_header() {
        let e = entry(serde_json::json!({"actions": [
            {"remote_address": {}},
            {"method": {}},
            {"path": {"descriptor_key": "PATH"}}
        ]}));
        let headers = http::HeaderMap::new();
        let method = http::Method::POST;
        let req = RequestAttrs {
            client_ip: "127.0.0.1".parse().unwrap(),
            method: &method,
            path: "/api/login?user=x",
            headers: &headers,
            gateway: "gw",
            virtual_service: None,
            source_route: None,
            destination_cluster: None,
            query: None,
            authority: "",
            scheme: "http",
            route_local: &[],
            route_rate_limits: None,
            dynamic_metadata: None,
        };
        assert_eq!(
            e.descriptor(&req, "local"),
            Some(vec![
                ("remote_address".into(), "127.0.0.1".into()),
                ("method".into(), "POST".into()),
                ("PATH".into(), "/api/login".into())
            ])
        );
    }

    #[test]
    fn seed_actions_produce_remote_address_and_path() {
        let e = entry(serde_json::json!({"actions": [
            {"remote_address": {}},
            {"request_headers": {"header_name": "x-envoy-original-limit-rate-path", "descriptor_key": "PATH"}}
        ]}));
        let empty = http::HeaderMap::new();
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "x-envoy-original-limit-rate-path",
            "GET/api/healthz".parse().unwrap(),
        );
        let method = http::Method::GET;
        let mut req = RequestAttrs {
            client_ip: "127.0.0.2".parse().unwrap(),
            method: &method,
            path: "/api/healthz",
            headers: &empty,
            gateway: "gw",
            virtual_service: None,
            source_route: None,
            destination_cluster: None,
            query: None,
            authority: "",
            scheme: "http",
            route_local: &[],
            route_rate_limits: None,
            dynamic_metadata: None,
        };
        assert_eq!(e.descriptor(&req, "local"), None, "absent header drops it");
        req.headers = &headers;
        assert_eq!(
            e.descriptor(&req, "local"),
            Some(vec![
                ("remote_address".into(), "127.0.0.2".into()),
                ("PATH".into(), "GET/api/healthz".into())
            ])
        );
    }

    #[test]
    fn masked_and_header_value_match() {
        let e = entry(serde_json::json!({"actions": [
            {"masked_remote_address": {"v4_prefix_mask_len": 24}},
            {"header_value_match": {"descriptor_value": "admin", "expect_match": false,
                "headers": [{"name": "x-user", "exact_match": "admin"}]}}
        ]}));
        let headers = http::HeaderMap::new();
        let method = http::Method::GET;
        let req = RequestAttrs {
            client_ip: "10.1.2.3".parse().unwrap(),
            method: &method,
            path: "/",
            headers: &headers,
            gateway: "gw",
            virtual_service: None,
            source_route: None,
            destination_cluster: None,
            query: None,
            authority: "",
            scheme: "http",
            route_local: &[],
            route_rate_limits: None,
            dynamic_metadata: None,
        };
        assert_eq!(
            e.descriptor(&req, ""),
            Some(vec![
                ("masked_remote_address".into(), "10.1.2.0/24".into()),
                ("header_match".into(), "admin".into())
            ])
        );
    }

    #[test]
    fn pseudo_headers_read_what_envoy_sees() {
        let e = entry(serde_json::json!({"actions": [
            {"request_headers": {"header_name": ":path", "descriptor_key": "PATH"}},
            {"request_headers": {"header_name": ":method", "descriptor_key": "M"}},
            {"request_headers": {"header_name": ":authority", "descriptor_key": "A"}},
            {"request_headers": {"header_name": ":scheme", "descriptor_key": "S"}},
            {"header_value_match": {"descriptor_value": "api", "headers": [
                {"name": ":path", "safe_regex_match": {"google_re2": {}, "regex": "/api/v1/products/[1-9]{1,2}"}}
            ]}}
        ]}));
        let headers = http::HeaderMap::new();
        let method = http::Method::GET;
        let mut req = RequestAttrs {
            client_ip: "127.0.0.1".parse().unwrap(),
            method: &method,
            path: "/api/v1/products/7",
            headers: &headers,
            gateway: "gw",
            virtual_service: None,
            source_route: None,
            destination_cluster: None,
            query: Some("x=1"),
            authority: "shop.example:8080",
            scheme: "http",
            route_local: &[],
            route_rate_limits: None,
            dynamic_metadata: None,
        };
        // `:path` carries the query, so the full-match regex no longer matches it.
        let d = e.descriptor(&req, "");
        assert_eq!(d, None, "header_value_match fails on the query");
        req.query = None;
        assert_eq!(
            e.descriptor(&req, ""),
            Some(vec![
                ("PATH".into(), "/api/v1/products/7".into()),
                ("M".into(), "GET".into()),
                ("A".into(), "shop.example:8080".into()),
                ("S".into(), "http".into()),
                ("header_match".into(), "api".into()),
            ])
        );
        assert!(!e.reads_headers(), "pseudo-headers need no header map");
        let bad: RateLimitEntry = serde_json::from_value(serde_json::json!({"actions": [
            {"request_headers": {"header_name": ":protocol", "descriptor_key": "P"}}
        ]}))
        .unwrap();
        let (field, message) = CompiledEntry::compile(&bad).unwrap_err();
        assert_eq!(field, "actions[0].request_headers.header_name");
        assert!(message.contains(":protocol"), "{message}");
    }

    #[test]
    fn metadata_actions_read_dynamic_metadata() {
        let mut meta = crate::request::DynamicMetadata::new();
        meta.entry("envoy.filters.http.lua".into())
            .or_default()
            .extend([
                ("tier".to_string(), serde_json::json!("gold")),
                ("n".to_string(), serde_json::json!(3)),
                ("nested".to_string(), serde_json::json!({"plan": "pro"})),
            ]);
        let action = |path: serde_json::Value, extra: serde_json::Value| {
            let mut m = serde_json::json!({
                "descriptor_key": "k",
                "metadata_key": {"key": "envoy.filters.http.lua", "path": path}
            });
            m.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            entry(
                serde_json::json!({"actions": [{"generic_key": {"descriptor_value": "g"}}, {"metadata": m}]}),
            )
        };
        let headers = http::HeaderMap::new();
        let method = http::Method::GET;
        let req = RequestAttrs {
            client_ip: "127.0.0.1".parse().unwrap(),
            method: &method,
            path: "/",
            headers: &headers,
            gateway: "gw",
            virtual_service: None,
            source_route: None,
            destination_cluster: None,
            query: None,
            authority: "",
            scheme: "http",
            route_local: &[],
            route_rate_limits: None,
            dynamic_metadata: Some(&meta),
        };
        let g = ("generic_key".to_string(), "g".to_string());
        let k = |v: &str| ("k".to_string(), v.to_string());
        let cases: Vec<(serde_json::Value, serde_json::Value, Option<Descriptor>)> = vec![
            (
                serde_json::json!([{"key": "tier"}]),
                serde_json::json!({}),
                Some(vec![g.clone(), k("gold")]),
            ),
            (
                serde_json::json!([{"key": "nested"}, {"key": "plan"}]),
                serde_json::json!({}),
                Some(vec![g.clone(), k("pro")]),
            ),
            // Only strings count: a number is absent.
            (
                serde_json::json!([{"key": "n"}]),
                serde_json::json!({}),
                None,
            ),
            (
                serde_json::json!([{"key": "missing"}]),
                serde_json::json!({"default_value": "d"}),
                Some(vec![g.clone(), k("d")]),
            ),
            (
                serde_json::json!([{"key": "missing"}]),
                serde_json::json!({"skip_if_absent": true}),
                Some(vec![g.clone()]),
            ),
            (
                serde_json::json!([{"key": "missing"}]),
                serde_json::json!({}),
                None,
            ),
        ];
        for (path, extra, want) in cases {
            assert_eq!(
                action(path.clone(), extra.clone()).descriptor(&req, ""),
                want,
                "{path} {extra}"
            );
        }
        let no_meta = RequestAttrs {
            dynamic_metadata: None,
            ..req
        };
        assert_eq!(
            action(serde_json::json!([{"key": "tier"}]), serde_json::json!({}))
                .descriptor(&no_meta, ""),
            None
        );
    }
}
