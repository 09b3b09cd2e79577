//! The Gateway API's order among HTTPRoute matches that could all take a request: an exact
//! path, then the longest prefix (then regular expressions, longest first: Istio's choice,
//! the spec leaves them to the implementation), then a method match, more header matches,
//! more query matches; ties go to the oldest route (`creationTimestamp`), then
//! `namespace/name` alphabetically, then rule and match order. warden sorts the generated
//! routes by it, so the first match of Istio's routing gives the spec's answer.

use super::kinds::HttpRouteMatch;
use std::cmp::Ordering;

/// What ranks one match: computed from the match itself and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchRank {
    /// 3 Exact, 2 PathPrefix, 1 RegularExpression.
    pub path_kind: u8,
    pub path_len: usize,
    pub method: bool,
    pub headers: usize,
    pub query_params: usize,
    /// `metadata.creationTimestamp` (RFC 3339, so text order is time order); objects
    /// without one (files never applied) tie on it.
    pub created: Option<String>,
    /// `namespace/name` of the route.
    pub route: String,
    pub rule: usize,
    pub index: usize,
}

impl MatchRank {
    pub fn of(
        m: &HttpRouteMatch,
        created: Option<&str>,
        route: &str,
        rule: usize,
        index: usize,
    ) -> Self {
        let (kind, value) = path_of(m);
        let path_kind = match kind {
            "Exact" => 3,
            "RegularExpression" => 1,
            _ => 2,
        };
        MatchRank {
            path_kind,
            path_len: value.len(),
            method: m.method.is_some(),
            headers: m.headers.len(),
            query_params: m.query_params.len(),
            created: created.map(str::to_owned),
            route: route.to_owned(),
            rule,
            index,
        }
    }
}

/// A match's path type and value with the spec's defaults (PathPrefix, `/`); a prefix's
/// trailing `/` is ignored.
pub fn path_of(m: &HttpRouteMatch) -> (&str, &str) {
    let kind = m
        .path
        .as_ref()
        .and_then(|p| p.kind.as_deref())
        .unwrap_or("PathPrefix");
    let value = m
        .path
        .as_ref()
        .and_then(|p| p.value.as_deref())
        .unwrap_or("/");
    let value = match kind {
        "PathPrefix" if value.len() > 1 => value.strip_suffix('/').unwrap_or(value),
        _ => value,
    };
    (kind, value)
}

/// `a` before `b` when `a` takes precedence.
pub fn order(a: &MatchRank, b: &MatchRank) -> Ordering {
    b.path_kind
        .cmp(&a.path_kind)
        .then(b.path_len.cmp(&a.path_len))
        .then(b.method.cmp(&a.method))
        .then(b.headers.cmp(&a.headers))
        .then(b.query_params.cmp(&a.query_params))
        .then_with(|| match (&a.created, &b.created) {
            (Some(x), Some(y)) => x.cmp(y),
            _ => Ordering::Equal,
        })
        .then_with(|| a.route.cmp(&b.route))
        .then(a.rule.cmp(&b.rule))
        .then(a.index.cmp(&b.index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway_api::kinds::{HttpPathMatch, NameValueMatch};

    fn m(path: Option<(&str, &str)>, method: bool, headers: usize, query: usize) -> HttpRouteMatch {
        let nv = |n: usize| {
            (0..n)
                .map(|i| NameValueMatch {
                    kind: None,
                    name: format!("h{i}"),
                    value: "v".into(),
                })
                .collect()
        };
        HttpRouteMatch {
            path: path.map(|(k, v)| HttpPathMatch {
                kind: Some(k.into()),
                value: Some(v.into()),
            }),
            headers: nv(headers),
            query_params: nv(query),
            method: method.then(|| "GET".into()),
        }
    }

    fn rank(m: &HttpRouteMatch, created: Option<&str>, route: &str, rule: usize) -> MatchRank {
        MatchRank::of(m, created, route, rule, 0)
    }

    /// Each pair: the first takes precedence over the second.
    #[test]
    fn the_specs_precedence_holds_pairwise() {
        let d = |m: &HttpRouteMatch| rank(m, None, "default/r", 0);
        let cases = [
            (
                "exact over a longer prefix",
                d(&m(Some(("Exact", "/a")), false, 0, 0)),
                d(&m(Some(("PathPrefix", "/a/b/c")), false, 0, 0)),
            ),
            (
                "longest prefix",
                d(&m(Some(("PathPrefix", "/a/b")), false, 0, 0)),
                d(&m(Some(("PathPrefix", "/a")), true, 3, 3)),
            ),
            (
                "a trailing / of a prefix does not count",
                d(&m(Some(("PathPrefix", "/ab")), false, 0, 0)),
                d(&m(Some(("PathPrefix", "/a/")), false, 0, 0)),
            ),
            (
                "prefix over regular expression",
                d(&m(Some(("PathPrefix", "/")), false, 0, 0)),
                d(&m(Some(("RegularExpression", "/a/.*/long")), false, 0, 0)),
            ),
            (
                "method over headers",
                d(&m(None, true, 0, 0)),
                d(&m(None, false, 2, 0)),
            ),
            (
                "more headers",
                d(&m(None, false, 2, 0)),
                d(&m(None, false, 1, 5)),
            ),
            (
                "more query params",
                d(&m(None, false, 1, 2)),
                d(&m(None, false, 1, 1)),
            ),
            (
                "the older route",
                rank(
                    &m(None, false, 0, 0),
                    Some("2024-01-01T00:00:00Z"),
                    "z/z",
                    0,
                ),
                rank(
                    &m(None, false, 0, 0),
                    Some("2025-01-01T00:00:00Z"),
                    "a/a",
                    0,
                ),
            ),
            (
                "namespace/name alphabetically",
                rank(&m(None, false, 0, 0), None, "a/z", 3),
                rank(&m(None, false, 0, 0), None, "b/a", 0),
            ),
            (
                "rule order within a route",
                rank(&m(None, false, 0, 0), None, "a/a", 0),
                rank(&m(None, false, 0, 0), None, "a/a", 1),
            ),
        ];
        for (why, first, second) in cases {
            assert_eq!(order(&first, &second), Ordering::Less, "{why}");
            assert_eq!(order(&second, &first), Ordering::Greater, "{why}");
        }
    }

    #[test]
    fn defaults_are_prefix_slash() {
        assert_eq!(path_of(&HttpRouteMatch::default()), ("PathPrefix", "/"));
        let only_value = HttpRouteMatch {
            path: Some(HttpPathMatch {
                kind: None,
                value: Some("/login/".into()),
            }),
            ..HttpRouteMatch::default()
        };
        assert_eq!(path_of(&only_value), ("PathPrefix", "/login"));
    }
}
