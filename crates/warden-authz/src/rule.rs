//! A compiled rule and how it matches a request.
//!
//! CIDR lists are not stored here: each is a predicate id in the policy set's [`CidrIndex`]es,
//! and the rule only asks whether the request's lookup hit that id.
//!
//! [`CidrIndex`]: crate::cidr_index::CidrIndex

use crate::attrs::{HttpPart, Request};
use crate::cidr_index::Hits;
use crate::string_match::{any_match, any_match_ignore_case, Pattern};
use http::HeaderName;
use std::sync::Arc;

/// Which address a CIDR predicate is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddrKind {
    /// `ipBlocks`, `source.ip`: the TCP peer.
    Direct = 0,
    /// `remoteIpBlocks`, `remote.ip`: the trusted client address.
    Remote = 1,
    /// `destination.ip`.
    Dest = 2,
}

pub(crate) const ADDR_KINDS: usize = 3;

/// The lookups of one request in one policy set, one per [`AddrKind`].
pub(crate) type AddrHits<'a> = [Hits<'a>; ADDR_KINDS];

/// A positive and a negative CIDR predicate: `(none or any of values) and not any of notValues`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CidrPair {
    pub values: Option<u32>,
    pub not_values: Option<u32>,
}

impl CidrPair {
    fn matches(&self, hits: &Hits<'_>) -> bool {
        self.values.is_none_or(|p| hits.contains(p))
            && !self.not_values.is_some_and(|p| hits.contains(p))
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct SourceMatch {
    pub direct: CidrPair,
    pub remote: CidrPair,
    /// `principals` / `notPrincipals`: the mTLS peer's identity.
    pub principals: Pair<Pattern>,
    /// `namespaces` / `notNamespaces`: the namespace in the peer's identity.
    pub namespaces: Pair<Pattern>,
    /// `requestPrincipals` / `notRequestPrincipals`: the JWT's `iss/sub` (HTTP only).
    pub request_principals: Pair<Pattern>,
}

impl SourceMatch {
    pub(crate) fn uses_http(&self) -> bool {
        !self.request_principals.is_empty()
    }

    fn matches(&self, req: &Request<'_>, hits: &AddrHits<'_>) -> bool {
        self.direct.matches(&hits[AddrKind::Direct as usize])
            && self.remote.matches(&hits[AddrKind::Remote as usize])
            && principal_matches(&self.principals, req.principal)
            && principal_matches(&self.namespaces, req.principal.and_then(namespace_of))
            && match &req.http {
                Some(http) => {
                    principal_matches(&self.request_principals, http.auth.map(|a| a.principal))
                }
                None => true,
            }
    }
}

/// A JWT claim's value against patterns, as Envoy's metadata matcher sees it: a string is
/// matched, a list matches when one of its strings does; `split` also matches each
/// space-separated word of a string (Istio's space-delimited claims, `scope` and `permission`).
fn claim_hit(patterns: &[Pattern], value: &serde_json::Value, split: bool) -> bool {
    match value {
        serde_json::Value::String(s) => {
            any_match(patterns, s.as_bytes())
                || (split && s.split(' ').any(|w| any_match(patterns, w.as_bytes())))
        }
        serde_json::Value::Array(items) => items.iter().any(|v| {
            v.as_str()
                .is_some_and(|s| any_match(patterns, s.as_bytes()))
        }),
        _ => false,
    }
}

/// A claim by path in the payload.
fn claim_at<'a>(
    claims: &'a serde_json::Map<String, serde_json::Value>,
    path: &[Box<str>],
) -> Option<&'a serde_json::Value> {
    let (first, rest) = path.split_first()?;
    rest.iter()
        .try_fold(claims.get(&**first)?, |v, k| v.get(&**k))
}

/// As Envoy's `authenticated` matcher: no peer identity matches no value (so it satisfies a
/// `not` list).
fn principal_matches(pair: &Pair<Pattern>, value: Option<&str>) -> bool {
    pair.check(|ps| value.is_some_and(|v| any_match(ps, v.as_bytes())))
}

/// The `<ns>` of an Istio principal `<trust-domain>/ns/<ns>/sa/<sa>` (Istio matches
/// `namespaces` as `.*/ns/<ns>/.*` on the principal).
pub(crate) fn namespace_of(principal: &str) -> Option<&str> {
    let mut parts = principal.split('/');
    parts.next()?;
    if parts.next()? != "ns" {
        return None;
    }
    parts.next().filter(|ns| !ns.is_empty())
}

/// A list field with its `not` counterpart.
#[derive(Debug, Clone)]
pub(crate) struct Pair<T> {
    pub values: Vec<T>,
    pub not_values: Vec<T>,
}

impl<T> Default for Pair<T> {
    fn default() -> Self {
        Pair {
            values: Vec::new(),
            not_values: Vec::new(),
        }
    }
}

impl<T> Pair<T> {
    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty() && self.not_values.is_empty()
    }

    fn check(&self, hit: impl Fn(&[T]) -> bool) -> bool {
        (self.values.is_empty() || hit(&self.values))
            && (self.not_values.is_empty() || !hit(&self.not_values))
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct OperationMatch {
    pub hosts: Pair<Pattern>,
    pub ports: Pair<u16>,
    pub methods: Pair<Box<str>>,
    pub paths: Pair<Pattern>,
}

impl OperationMatch {
    pub(crate) fn uses_http(&self) -> bool {
        !(self.hosts.is_empty() && self.methods.is_empty() && self.paths.is_empty())
    }

    /// On TCP (`http` is None) the HTTP-only fields are ignored; ALLOW rules using them were
    /// dropped before getting here.
    fn matches(&self, req: &Request<'_>) -> bool {
        if !self.ports.check(|ps| ps.contains(&req.dest_port)) {
            return false;
        }
        let Some(http) = &req.http else {
            return true;
        };
        self.hosts
            .check(|ps| any_match_ignore_case(ps, http.host.as_bytes()))
            && self
                .methods
                .check(|ms| ms.iter().any(|m| &**m == http.method))
            && self.paths.check(|ps| any_match(ps, http.path.as_bytes()))
    }
}

#[derive(Debug, Clone)]
pub(crate) enum ConditionMatch {
    Cidr(AddrKind, CidrPair),
    Port(Pair<u16>),
    Header(HeaderName, Pair<Pattern>),
    Sni(Pair<Pattern>),
    /// `source.principal`.
    Principal(Pair<Pattern>),
    /// `source.namespace`.
    Namespace(Pair<Pattern>),
    /// `request.auth.principal`: the JWT's `iss/sub`.
    RequestPrincipal(Pair<Pattern>),
    /// `request.auth.audiences` (`aud`), `request.auth.presenter` (`azp`),
    /// `request.auth.claims[a][b]`: a claim by path; `split` for space-delimited claims.
    Claim {
        path: Box<[Box<str>]>,
        split: bool,
        pair: Pair<Pattern>,
    },
}

impl ConditionMatch {
    pub(crate) fn uses_http(&self) -> bool {
        matches!(
            self,
            ConditionMatch::Header(..)
                | ConditionMatch::RequestPrincipal(..)
                | ConditionMatch::Claim { .. }
        )
    }

    fn matches(&self, req: &Request<'_>, hits: &AddrHits<'_>) -> bool {
        match self {
            ConditionMatch::Cidr(kind, pair) => pair.matches(&hits[*kind as usize]),
            ConditionMatch::Port(pair) => pair.check(|ps| ps.contains(&req.dest_port)),
            ConditionMatch::Sni(pair) => {
                let sni = req.sni.unwrap_or("").as_bytes();
                pair.check(|ps| any_match(ps, sni))
            }
            ConditionMatch::Principal(pair) => principal_matches(pair, req.principal),
            ConditionMatch::Namespace(pair) => {
                principal_matches(pair, req.principal.and_then(namespace_of))
            }
            ConditionMatch::Header(name, pair) => match &req.http {
                Some(http) => header_matches(http, name, pair),
                None => true,
            },
            ConditionMatch::RequestPrincipal(pair) => match &req.http {
                Some(http) => principal_matches(pair, http.auth.map(|a| a.principal)),
                None => true,
            },
            ConditionMatch::Claim { path, split, pair } => match &req.http {
                Some(http) => {
                    let value = http.auth.and_then(|a| claim_at(a.claims, path));
                    pair.check(|ps| value.is_some_and(|v| claim_hit(ps, v, *split)))
                }
                None => true,
            },
        }
    }
}

/// Envoy's header matcher sees multiple values joined with `,`; an absent header matches no
/// value (so it satisfies `notValues`).
fn header_matches(http: &HttpPart<'_>, name: &HeaderName, pair: &Pair<Pattern>) -> bool {
    let mut values = http.headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return pair.values.is_empty();
    };
    match values.next() {
        None => pair.check(|ps| any_match(ps, first.as_bytes())),
        Some(second) => {
            let mut joined = Vec::with_capacity(first.len() + second.len() + 1);
            joined.extend_from_slice(first.as_bytes());
            for v in std::iter::once(second).chain(values) {
                joined.push(b',');
                joined.extend_from_slice(v.as_bytes());
            }
            pair.check(|ps| any_match(ps, &joined))
        }
    }
}

/// One rule of one policy: any source AND any operation AND every condition.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub name: Arc<str>,
    pub from: Vec<SourceMatch>,
    pub to: Vec<OperationMatch>,
    pub when: Vec<ConditionMatch>,
}

impl Rule {
    pub(crate) fn uses_http(&self) -> bool {
        self.from.iter().any(SourceMatch::uses_http)
            || self.to.iter().any(OperationMatch::uses_http)
            || self.when.iter().any(ConditionMatch::uses_http)
    }

    pub(crate) fn matches(&self, req: &Request<'_>, hits: &AddrHits<'_>) -> bool {
        (self.from.is_empty() || self.from.iter().any(|s| s.matches(req, hits)))
            && (self.to.is_empty() || self.to.iter().any(|o| o.matches(req)))
            && self.when.iter().all(|c| c.matches(req, hits))
    }
}
