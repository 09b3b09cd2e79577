//! Compiled HTTP routing of one listener port: virtual hosts by domain, then routes in order,
//! first match wins (Envoy/Istio semantics). Nothing on this path allocates for exact/prefix.

pub mod authority;
pub mod cors;
pub mod header_ops;
pub mod matcher;
pub mod ports;
pub mod sidecar_tables;
pub mod tls_tables;

use crate::routing::header_ops::HeaderOps;
use crate::routing::matcher::StringMatcher;
use crate::upstream::cluster::Cluster;
pub use crate::upstream::mirror::Mirror;
pub use crate::upstream::retry_on::RetryPolicy;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// What routing looks at in a request.
pub struct RouteInput<'a> {
    pub method: &'a Method,
    /// Host without port, as received.
    pub host: &'a str,
    /// `:authority`/Host as received (with port if any), for `authority` matches.
    pub authority: &'a str,
    /// Path without the query string.
    pub path: &'a str,
    /// The query string (after `?`), for `queryParams`.
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub port: u16,
}

#[derive(Debug)]
pub struct RequestMatch {
    pub uri: Option<StringMatcher>,
    pub ignore_uri_case: bool,
    pub method: Option<StringMatcher>,
    pub authority: Option<StringMatcher>,
    pub headers: Vec<(http::HeaderName, StringMatcher)>,
    /// `withoutHeaders`: none of these may hold.
    pub without_headers: Vec<(http::HeaderName, StringMatcher)>,
    pub query_params: Vec<(String, StringMatcher)>,
    /// Matched against `http` (plain listeners; TLS ones will say `https`).
    pub scheme: Option<StringMatcher>,
    pub port: Option<u16>,
}

impl RequestMatch {
    fn matches(&self, input: &RouteInput<'_>) -> bool {
        if let Some(p) = self.port {
            if p != input.port {
                return false;
            }
        }
        if let Some(m) = &self.uri {
            let ok = if self.ignore_uri_case {
                m.matches(&input.path.to_ascii_lowercase())
            } else {
                m.matches(input.path)
            };
            if !ok {
                return false;
            }
        }
        if let Some(m) = &self.method {
            if !m.matches(input.method.as_str()) {
                return false;
            }
        }
        if let Some(m) = &self.authority {
            if !m.matches(input.authority) {
                return false;
            }
        }
        if let Some(m) = &self.scheme {
            if !m.matches("http") {
                return false;
            }
        }
        let header_holds = |name: &http::HeaderName, m: &StringMatcher| {
            input
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| m.matches(v))
        };
        self.headers.iter().all(|(name, m)| header_holds(name, m))
            && !self
                .without_headers
                .iter()
                .any(|(name, m)| header_holds(name, m))
            && self
                .query_params
                .iter()
                .all(|(name, m)| query_param(input.query, name).is_some_and(|v| m.matches(v)))
    }

    /// Whether matching reads request headers.
    fn reads_headers(&self) -> bool {
        !self.headers.is_empty() || !self.without_headers.is_empty()
    }
}

#[derive(Debug)]
pub struct WeightedCluster {
    pub cluster: Arc<Cluster>,
    pub weight: u32,
    pub request_headers: HeaderOps,
    pub response_headers: HeaderOps,
}

#[derive(Debug)]
pub enum RouteAction {
    Direct {
        status: StatusCode,
        body: Bytes,
        content_type: Option<HeaderValue>,
    },
    /// `redirect`: answered here, the `location` built from the request.
    Redirect(Redirect),
    Forward {
        clusters: Vec<WeightedCluster>,
        total_weight: u32,
        timeout: Option<Duration>,
        retries: RetryPolicy,
        mirrors: Box<[Mirror]>,
    },
}

/// Per-route request counters by status code, created on first use and shared with the
/// metrics registry (so reloads keep counting into the same series).
#[derive(Debug)]
pub struct RouteCounters {
    by_code: Box<[OnceLock<prometheus_client::metrics::counter::Counter>]>,
}

impl Default for RouteCounters {
    fn default() -> Self {
        RouteCounters {
            by_code: (0..600).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl RouteCounters {
    pub fn get(
        &self,
        code: u16,
        create: impl FnOnce() -> prometheus_client::metrics::counter::Counter,
    ) -> Option<&prometheus_client::metrics::counter::Counter> {
        self.by_code
            .get(code as usize)
            .map(|c| c.get_or_init(create))
    }
}

#[derive(Debug)]
pub struct Route {
    /// `namespace/virtualservice/route-name-or-index`, the `route` label in metrics and logs.
    pub name: Arc<str>,
    pub matches: Vec<RequestMatch>,
    pub action: RouteAction,
    pub request_headers: HeaderOps,
    pub response_headers: HeaderOps,
    pub counters: RouteCounters,
    /// `fault`: injected before the action (after the policy stages, as Istio's filter order).
    pub fault: Option<Fault>,
    /// `rewrite`: the upstream request's path and Host.
    pub rewrite: Option<Box<Rewrite>>,
    /// `corsPolicy`, applied after the policy stages (Istio's filter order: RBAC first).
    pub cors: Option<Box<crate::routing::cors::Cors>>,
    /// The names Istio gives the Envoy routes this route becomes (one per match: the
    /// VirtualService `http[].name`, `.` and the match's `name` when it has one), which
    /// EnvoyFilter HTTP_ROUTE patches match on.
    pub envoy_names: Box<[Box<str>]>,
    /// The Gateway API route it was translated from (`HTTPRoute/namespace/name`), for
    /// policies whose `targetRefs` name that route.
    pub source_route: Option<Arc<str>>,
}

/// Where a `redirect` sends the client.
#[derive(Debug)]
pub struct Redirect {
    pub status: StatusCode,
    pub scheme: Option<Box<str>>,
    /// Replaces the request's authority (as given, port included).
    pub authority: Option<Box<str>>,
    pub port: Option<u16>,
    pub port_rule: DerivePort,
    pub uri: Option<Box<str>>,
    /// (prefix, replacement): a Gateway API `ReplacePrefixMatch` redirect, Envoy's
    /// `prefix_rewrite` (the path's `prefix` replaced, the rest kept).
    pub prefix_rewrite: Option<(Box<str>, Box<str>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DerivePort {
    /// Keep the authority's port as it is.
    Keep,
    /// No port: the scheme's default.
    ProtocolDefault,
    /// The port the request was sent to.
    RequestPort,
}

impl Redirect {
    /// The `location`: scheme, authority (the redirect's, else the request's) with the port
    /// rule applied, and the redirect's path (else the request's), the query kept unless the
    /// redirect's path has one.
    pub fn location(&self, authority: &str, path: &str, query: Option<&str>) -> String {
        let scheme = self.scheme.as_deref().unwrap_or("http");
        let base = self.authority.as_deref().unwrap_or(authority);
        let host = host_of(base);
        let request_port = authority
            .strip_prefix(host_of(authority))
            .and_then(|rest| rest.strip_prefix(':'));
        let own_port = base
            .strip_prefix(host)
            .and_then(|rest| rest.strip_prefix(':'));
        let port: Option<String> = match (self.port, self.port_rule) {
            (Some(p), _) => Some(p.to_string()),
            (None, DerivePort::ProtocolDefault) => None,
            (None, DerivePort::RequestPort) => request_port.map(str::to_owned),
            (None, DerivePort::Keep) => own_port.map(str::to_owned),
        };
        let mut out = format!("{scheme}://{host}");
        if let Some(p) = port {
            out.push(':');
            out.push_str(&p);
        }
        match &self.uri {
            Some(uri) => {
                out.push_str(uri);
                if !uri.contains('?') {
                    if let Some(q) = query {
                        out.push('?');
                        out.push_str(q);
                    }
                }
            }
            None => {
                match &self.prefix_rewrite {
                    Some((prefix, with)) if path.starts_with(&**prefix) => {
                        out.push_str(with);
                        out.push_str(&path[prefix.len()..]);
                    }
                    _ => out.push_str(path),
                }
                if let Some(q) = query {
                    out.push('?');
                    out.push_str(q);
                }
            }
        }
        out
    }
}

/// `rewrite` of a route's upstream requests.
#[derive(Debug)]
pub struct Rewrite {
    /// Replaces the matched prefix (a prefix `uri` match), else the whole path.
    pub uri: Option<Box<str>>,
    pub authority: Option<HeaderValue>,
    /// `uriRegexRewrite`: every match of the regex replaced (`$1`-style groups).
    pub regex: Option<(regex::Regex, String)>,
}

impl Rewrite {
    /// The upstream path for `path`, when it changes.
    pub fn path(&self, route: &Route, path: &str) -> Option<String> {
        if let Some((re, with)) = &self.regex {
            return Some(re.replace_all(path, with.as_str()).into_owned());
        }
        let uri = self.uri.as_deref()?;
        let prefix = route.matches.iter().find_map(|m| match &m.uri {
            Some(StringMatcher::Prefix(p)) if path.starts_with(&**p) => Some(p.len()),
            _ => None,
        });
        Some(match prefix {
            Some(n) => format!("{uri}{}", &path[n..]),
            None => uri.to_owned(),
        })
    }
}

/// Envoy's fault filter on a route: each part applies to its share (0..=100) of requests.
#[derive(Debug, Clone, Copy)]
pub struct Fault {
    pub delay: Option<(Duration, f64)>,
    pub abort: Option<(StatusCode, f64)>,
}

impl Route {
    /// The VirtualService part of [`Route::name`] (the rate limits' `virtual_service` key).
    /// A byte loop: `split('/')` searched with `memchr` on every limited request.
    pub fn virtual_service(&self) -> Option<&str> {
        let rest = &self.name[self.name.bytes().position(|b| b == b'/')? + 1..];
        Some(match rest.bytes().position(|b| b == b'/') {
            Some(end) => &rest[..end],
            None => rest,
        })
    }

    fn matches(&self, input: &RouteInput<'_>) -> bool {
        self.matches.is_empty() || self.matches.iter().any(|m| m.matches(input))
    }

    /// Weighted choice among the route's clusters.
    pub fn pick_cluster(&self) -> Option<&WeightedCluster> {
        let RouteAction::Forward {
            clusters,
            total_weight,
            ..
        } = &self.action
        else {
            return None;
        };
        if clusters.len() <= 1 || *total_weight == 0 {
            return clusters.first();
        }
        let mut ticket = fastrand::u32(..*total_weight);
        for c in clusters {
            if ticket < c.weight {
                return Some(c);
            }
            ticket -= c.weight;
        }
        clusters.last()
    }
}

#[derive(Debug, Default)]
pub struct VirtualHost {
    pub domains: Vec<String>,
    pub routes: Vec<Arc<Route>>,
}

/// All virtual hosts of one listener port.
#[derive(Debug, Default)]
pub struct RouteTable {
    pub vhosts: Vec<VirtualHost>,
    exact: HashMap<Box<str>, usize>,
    /// `*.example.com` stored as `.example.com`, longest first.
    suffixes: Vec<(Box<str>, usize)>,
    any: Option<usize>,
}

impl RouteTable {
    /// Whether any route matches on request headers (or reads `origin` for CORS).
    pub fn matches_headers(&self) -> bool {
        self.vhosts
            .iter()
            .flat_map(|v| &v.routes)
            .any(|r| r.cors.is_some() || r.matches.iter().any(RequestMatch::reads_headers))
    }

    /// Add routes for a domain (lowercase); routes for an existing domain are appended, as Istio
    /// merges VirtualServices bound to a gateway for the same host.
    pub fn add(&mut self, domain: &str, routes: &[Arc<Route>]) {
        let domain = domain.to_ascii_lowercase();
        let existing = if domain == "*" {
            self.any
        } else if let Some(suffix) = domain.strip_prefix('*') {
            self.suffixes
                .iter()
                .find(|(s, _)| &**s == suffix)
                .map(|(_, i)| *i)
        } else {
            self.exact.get(domain.as_str()).copied()
        };
        let index = match existing {
            Some(i) => i,
            None => {
                let i = self.vhosts.len();
                self.vhosts.push(VirtualHost {
                    domains: vec![domain.clone()],
                    routes: Vec::new(),
                });
                if domain == "*" {
                    self.any = Some(i);
                } else if let Some(suffix) = domain.strip_prefix('*') {
                    self.suffixes.push((suffix.into(), i));
                    self.suffixes.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
                } else {
                    self.exact.insert(domain.into(), i);
                }
                i
            }
        };
        self.vhosts[index].routes.extend(routes.iter().cloned());
    }

    fn vhost_index(&self, host: &str) -> Option<usize> {
        let lowered;
        let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            lowered = host.to_ascii_lowercase();
            lowered.as_str()
        } else {
            host
        };
        let index = self
            .exact
            .get(host)
            .copied()
            .or_else(|| {
                self.suffixes
                    .iter()
                    .find(|(s, _)| host.len() > s.len() && host.ends_with(&**s))
                    .map(|(_, i)| *i)
            })
            .or(self.any)?;
        Some(index)
    }

    /// First matching route of the virtual host for `input.host`; `None` is a 404 (`NR`).
    pub fn find(&self, input: &RouteInput<'_>) -> Option<&Arc<Route>> {
        self.find_in_vhost(input).map(|(_, r)| r)
    }

    /// [`Self::find`], with the index of the virtual host it was found in (in `vhosts`): the
    /// same route may serve several hosts, and EnvoyFilter patches can name one of them.
    pub fn find_in_vhost(&self, input: &RouteInput<'_>) -> Option<(u32, &Arc<Route>)> {
        let index = self.vhost_index(input.host)?;
        let route = self
            .vhosts
            .get(index)?
            .routes
            .iter()
            .find(|r| r.matches(input))?;
        Some((index as u32, route))
    }

    pub fn route_count(&self) -> usize {
        self.vhosts.iter().map(|v| v.routes.len()).sum()
    }
}

/// The first value of query parameter `name` (as sent, not percent-decoded, as Envoy's
/// `query_parameters` match); `""` for a parameter without `=`.
fn query_param<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some((k, v)) if k == name => Some(v),
            None if pair == name => Some(""),
            _ => None,
        })
}

/// Split `host[:port]` (including `[v6]:port`) and return the host part.
pub fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return match rest.find(']') {
            Some(end) => &authority[..end + 2],
            None => authority,
        };
    }
    // The digits at the end, then the colon before them: a byte loop, as `rfind` costs more
    // than the rest of the route lookup for a short authority.
    let bytes = authority.as_bytes();
    let digits = bytes
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_digit())
        .count();
    match (bytes.len() - digits).checked_sub(1) {
        Some(colon) if bytes[colon] == b':' => &authority[..colon],
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct(name: &str, prefix: &str) -> Arc<Route> {
        Arc::new(Route {
            name: name.into(),
            matches: vec![RequestMatch {
                uri: Some(StringMatcher::Prefix(prefix.into())),
                ignore_uri_case: false,
                method: None,
                authority: None,
                headers: vec![],
                without_headers: vec![],
                query_params: vec![],
                scheme: None,
                port: None,
            }],
            action: RouteAction::Direct {
                status: StatusCode::OK,
                body: Bytes::new(),
                content_type: None,
            },
            request_headers: HeaderOps::default(),
            response_headers: HeaderOps::default(),
            counters: RouteCounters::default(),
            fault: None,
            rewrite: None,
            cors: None,
            envoy_names: Box::new([]),
            source_route: None,
        })
    }

    fn find<'a>(t: &'a RouteTable, host: &str, path: &str) -> Option<&'a str> {
        let headers = HeaderMap::new();
        let input = RouteInput {
            method: &Method::GET,
            host: host_of(host),
            authority: host,
            path,
            query: None,
            headers: &headers,
            port: 80,
        };
        t.find(&input).map(|r| &*r.name)
    }

    #[test]
    fn redirect_locations_follow_istio() {
        let r = |authority: Option<&str>, port, rule, uri: Option<&str>| Redirect {
            status: StatusCode::MOVED_PERMANENTLY,
            scheme: Some("https".into()),
            authority: authority.map(Into::into),
            port,
            port_rule: rule,
            uri: uri.map(Into::into),
            prefix_rewrite: None,
        };
        let plain = r(None, None, DerivePort::Keep, None);
        assert_eq!(
            plain.location("a.test", "/x", Some("q=1")),
            "https://a.test/x?q=1"
        );
        assert_eq!(
            plain.location("a.test:8080", "/x", None),
            "https://a.test:8080/x"
        );
        let moved = r(Some("b.test"), Some(8443), DerivePort::Keep, Some("/new"));
        assert_eq!(
            moved.location("a.test:80", "/x", Some("q=1")),
            "https://b.test:8443/new?q=1"
        );
        let default = r(None, None, DerivePort::ProtocolDefault, Some("/n?k=v"));
        assert_eq!(
            default.location("a.test:80", "/x", Some("q=1")),
            "https://a.test/n?k=v"
        );
        let same = r(Some("b.test"), None, DerivePort::RequestPort, None);
        assert_eq!(
            same.location("a.test:8080", "/x", None),
            "https://b.test:8080/x"
        );
        let prefixed = Redirect {
            prefix_rewrite: Some(("/cayenne/".into(), "/paprika/".into())),
            ..r(None, None, DerivePort::RequestPort, None)
        };
        assert_eq!(
            prefixed.location("a.test:8080", "/cayenne/pepper", Some("q=1")),
            "https://a.test:8080/paprika/pepper?q=1"
        );
    }

    #[test]
    fn query_parameters_are_read_as_sent() {
        assert_eq!(query_param(Some("a=1&b=2"), "b"), Some("2"));
        assert_eq!(query_param(Some("a=1&flag"), "flag"), Some(""));
        assert_eq!(query_param(Some("ab=1"), "a"), None);
        assert_eq!(query_param(None, "a"), None);
    }

    #[test]
    fn exact_then_suffix_then_any() {
        let mut t = RouteTable::default();
        t.add("*", &[direct("any", "/")]);
        t.add("*.example.com", &[direct("wild", "/")]);
        t.add("*.api.example.com", &[direct("wild-long", "/")]);
        t.add("www.example.com", &[direct("exact", "/")]);
        assert_eq!(find(&t, "www.example.com:8080", "/"), Some("exact"));
        assert_eq!(find(&t, "WWW.Example.com", "/"), Some("exact"));
        assert_eq!(find(&t, "x.example.com", "/"), Some("wild"));
        assert_eq!(find(&t, "v1.api.example.com", "/"), Some("wild-long"));
        assert_eq!(find(&t, "other.org", "/"), Some("any"));
    }

    #[test]
    fn first_match_wins_and_no_route_is_none() {
        let mut t = RouteTable::default();
        t.add("a.com", &[direct("api", "/api"), direct("root", "/")]);
        t.add("a.com", &[direct("late", "/api/v2")]);
        assert_eq!(find(&t, "a.com", "/api/v2"), Some("api"));
        assert_eq!(find(&t, "a.com", "/x"), Some("root"));
        assert_eq!(find(&t, "b.com", "/x"), None);
    }

    #[test]
    fn virtual_service_is_the_middle_of_the_name() {
        assert_eq!(direct("ns/vs/0", "/").virtual_service(), Some("vs"));
        assert_eq!(direct("ns/vs", "/").virtual_service(), Some("vs"));
        assert_eq!(direct("ns", "/").virtual_service(), None);
    }

    #[test]
    fn host_of_strips_ports() {
        assert_eq!(host_of("a.com:80"), "a.com");
        assert_eq!(host_of("a.com"), "a.com");
        assert_eq!(host_of("[::1]:80"), "[::1]");
        assert_eq!(host_of("10.0.0.1:8080"), "10.0.0.1");
        assert_eq!(host_of("a.com:"), "a.com");
        assert_eq!(host_of("a.com:8x"), "a.com:8x");
        assert_eq!(host_of("8080"), "8080");
        assert_eq!(host_of(""), "");
        assert_eq!(host_of("ä:1"), "ä");
    }
}
