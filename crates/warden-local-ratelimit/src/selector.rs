//! Compiled client selectors of RateLimitPolicy rules (Envoy Gateway's `clientSelectors`).
//!
//! A rule matches when any of its selectors matches; the conditions inside one selector are
//! ANDed. `Distinct` conditions contribute their value to the bucket key, so each client IP or
//! header value gets its own bucket.

use crate::problem::DocSite;
use crate::request::{jwt_payload, RequestAttrs};
use ipnet::IpNet;
use regex::Regex;
use std::net::IpAddr;
use warden_config::kinds::rate_limit_policy::{
    ClientSelector, HeaderMatchType, PathMatchType, SourceMatchType,
};
use warden_config::Problem;

#[derive(Debug, Clone)]
pub struct CompiledSelector {
    source: Option<SourceCondition>,
    headers: Vec<HeaderCondition>,
    /// JWT claims, by path; matched as headers are.
    claims: Vec<(Vec<String>, HeaderKind, bool)>,
    /// ORed; empty = any method.
    methods: Vec<http::Method>,
    methods_invert: bool,
    path: Option<PathCondition>,
}

#[derive(Debug, Clone)]
struct SourceCondition {
    net: IpNet,
    distinct: bool,
}

#[derive(Debug, Clone)]
struct HeaderCondition {
    name: http::HeaderName,
    kind: HeaderKind,
    invert: bool,
}

#[derive(Debug, Clone)]
enum HeaderKind {
    Exact(String),
    Regex(Regex),
    Distinct,
}

#[derive(Debug, Clone)]
struct PathCondition {
    kind: PathKind,
    invert: bool,
}

#[derive(Debug, Clone)]
enum PathKind {
    Exact(String),
    Prefix(String),
    Regex(Regex),
}

/// The distinct values a matching selector contributes to the bucket key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DistinctKey<'r> {
    /// No Distinct condition: one bucket shared by everything the rule selects.
    Shared,
    /// Only a Distinct source CIDR: one bucket per client address.
    Ip(IpAddr),
    /// One Distinct header (and no Distinct source): its raw bytes.
    Header(&'r [u8]),
    /// Several distinct values, joined with length prefixes so tuples cannot collide.
    Composite(Vec<u8>),
}

/// A string claim of the request's JWT by path; `None` without a token or such a claim.
fn claim_bytes<'r>(req: &RequestAttrs<'r>, path: &[String]) -> Option<&'r [u8]> {
    let (first, rest) = path.split_first()?;
    let v = rest
        .iter()
        .try_fold(jwt_payload(req.dynamic_metadata?)?.get(first)?, |v, k| {
            v.get(k)
        })?;
    v.as_str().map(str::as_bytes)
}

/// An Exact or RegularExpression match of a header or claim (`what`) on its value; the error
/// is the problem at the match's `value`.
fn value_kind(
    match_type: HeaderMatchType,
    value: Option<&str>,
    what: &str,
) -> Result<HeaderKind, String> {
    match (match_type, value) {
        (HeaderMatchType::Exact, Some(v)) => Ok(HeaderKind::Exact(v.to_owned())),
        (HeaderMatchType::RegularExpression, Some(v)) => full_regex(v)
            .map(HeaderKind::Regex)
            .map_err(|e| format!("invalid regex: {e}")),
        _ => Err(format!(
            "value is required for Exact and RegularExpression {what} matches"
        )),
    }
}

/// Regexes are anchored: Envoy Gateway matches the whole value (RE2 full match).
fn full_regex(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{pattern})$"))
}

impl CompiledSelector {
    /// Whether matching looks at request headers.
    pub(crate) fn reads_headers(&self) -> bool {
        !self.headers.is_empty()
    }

    /// Compile a rule's `clientSelectors` (at `{field}.clientSelectors[j]`); None if any failed.
    pub(crate) fn compile_all(
        selectors: &[ClientSelector],
        site: &DocSite,
        field: &str,
        problems: &mut Vec<Problem>,
    ) -> Option<Vec<Self>> {
        let compiled: Vec<Self> = selectors
            .iter()
            .enumerate()
            .filter_map(|(j, s)| {
                Self::compile(s, site, &format!("{field}.clientSelectors[{j}]"), problems)
            })
            .collect();
        (compiled.len() == selectors.len()).then_some(compiled)
    }

    pub(crate) fn compile(
        sel: &ClientSelector,
        site: &DocSite,
        field: &str,
        problems: &mut Vec<Problem>,
    ) -> Option<Self> {
        let start = problems.len();
        let source = sel.source_cidr.as_ref().and_then(|s| {
            let net = parse_cidr(&s.value).map_err(|e| {
                problems.push(site.problem(format!("{field}.sourceCIDR.value"), e));
            });
            net.ok().map(|net| SourceCondition {
                net,
                distinct: s.match_type == SourceMatchType::Distinct,
            })
        });
        let mut headers = Vec::new();
        for (i, h) in sel.headers.iter().enumerate() {
            let hf = format!("{field}.headers[{i}]");
            let name = match http::HeaderName::from_bytes(h.name.to_ascii_lowercase().as_bytes()) {
                Ok(n) => n,
                Err(_) => {
                    problems.push(site.problem(
                        format!("{hf}.name"),
                        format!("{:?} is not a valid header name", h.name),
                    ));
                    continue;
                }
            };
            let kind = match (h.match_type, &h.value) {
                (HeaderMatchType::Distinct, None) => HeaderKind::Distinct,
                (HeaderMatchType::Distinct, Some(_)) => {
                    problems.push(site.problem(
                        format!("{hf}.value"),
                        "a Distinct header match takes no value",
                    ));
                    continue;
                }
                (t, v) => match value_kind(t, v.as_deref(), "header") {
                    Ok(kind) => kind,
                    Err(message) => {
                        problems.push(site.problem(format!("{hf}.value"), message));
                        continue;
                    }
                },
            };
            if h.invert && matches!(kind, HeaderKind::Distinct) {
                problems.push(site.problem(
                    format!("{hf}.invert"),
                    "invert cannot be combined with a Distinct header match",
                ));
                continue;
            }
            headers.push(HeaderCondition {
                name,
                kind,
                invert: h.invert,
            });
        }
        let mut claims = Vec::new();
        for (i, c) in sel.claims.iter().enumerate() {
            let cf = format!("{field}.claims[{i}]");
            if c.name.is_empty() || c.name.split('.').any(str::is_empty) {
                problems.push(site.problem(format!("{cf}.name"), "a claim name is required"));
                continue;
            }
            let kind = match (c.match_type, &c.value) {
                (HeaderMatchType::Distinct, None) if !c.invert => HeaderKind::Distinct,
                (HeaderMatchType::Distinct, _) => {
                    problems.push(
                        site.problem(cf, "a Distinct claim match takes no value and no invert"),
                    );
                    continue;
                }
                (t, v) => match value_kind(t, v.as_deref(), "claim") {
                    Ok(kind) => kind,
                    Err(message) => {
                        problems.push(site.problem(format!("{cf}.value"), message));
                        continue;
                    }
                },
            };
            claims.push((
                c.name.split('.').map(str::to_owned).collect(),
                kind,
                c.invert,
            ));
        }
        let mut methods = Vec::new();
        let mut methods_invert = false;
        for (i, m) in sel.methods.iter().enumerate() {
            match http::Method::from_bytes(m.value.to_ascii_uppercase().as_bytes()) {
                Ok(method) => methods.push(method),
                Err(_) => problems.push(site.problem(
                    format!("{field}.methods[{i}]"),
                    format!("{:?} is not a valid HTTP method", m.value),
                )),
            }
            if i > 0 && m.invert != methods_invert {
                problems.push(site.problem(
                    format!("{field}.methods[{i}].invert"),
                    "all methods of one selector must share the same invert",
                ));
            }
            methods_invert = m.invert;
        }
        let path = sel.path.as_ref().and_then(|p| {
            let kind =
                match p.match_type {
                    PathMatchType::Exact => PathKind::Exact(p.value.clone()),
                    PathMatchType::PathPrefix => PathKind::Prefix(p.value.clone()),
                    PathMatchType::RegularExpression => match full_regex(&p.value) {
                        Ok(r) => PathKind::Regex(r),
                        Err(e) => {
                            problems.push(site.problem(
                                format!("{field}.path.value"),
                                format!("invalid regex: {e}"),
                            ));
                            return None;
                        }
                    },
                };
            if !matches!(kind, PathKind::Regex(_)) && !p.value.starts_with('/') {
                problems.push(site.problem(
                    format!("{field}.path.value"),
                    format!("path {:?} must start with '/'", p.value),
                ));
                return None;
            }
            Some(PathCondition {
                kind,
                invert: p.invert,
            })
        });
        if source.is_none()
            && headers.is_empty()
            && claims.is_empty()
            && methods.is_empty()
            && path.is_none()
        {
            if problems.len() == start {
                problems.push(site.problem(
                    field.to_string(),
                    "a client selector needs at least one of sourceCIDR, headers, claims, \
                     methods, path",
                ));
            }
            return None;
        }
        (problems.len() == start).then_some(Self {
            source,
            headers,
            claims,
            methods,
            methods_invert,
            path,
        })
    }

    /// Whether the request is selected, and if so the distinct values of its bucket key.
    #[inline]
    pub fn matches<'r>(&self, req: &RequestAttrs<'r>) -> Option<DistinctKey<'r>> {
        if let Some(m) = &self.path {
            let hit = match &m.kind {
                PathKind::Exact(v) => req.path == v,
                PathKind::Prefix(v) => path_has_prefix(req.path, v),
                PathKind::Regex(r) => r.is_match(req.path),
            };
            if hit == m.invert {
                return None;
            }
        }
        if !self.methods.is_empty() {
            let hit = self.methods.iter().any(|m| m == req.method);
            if hit == self.methods_invert {
                return None;
            }
        }
        let mut distinct_ip = None;
        if let Some(src) = &self.source {
            if !src.net.contains(&canonical(req.client_ip)) {
                return None;
            }
            if src.distinct {
                distinct_ip = Some(req.client_ip);
            }
        }
        // Distinct header values without allocating in the common one-value case.
        let mut first_header: Option<&'r [u8]> = None;
        let mut composite: Option<Vec<u8>> = None;
        let headers = self.headers.iter().map(|h| {
            (
                req.headers.get(&h.name).map(|v| v.as_bytes()),
                &h.kind,
                h.invert,
            )
        });
        let claims = self
            .claims
            .iter()
            .map(|(path, kind, invert)| (claim_bytes(req, path), kind, *invert));
        for (value, kind, invert) in headers.chain(claims) {
            match kind {
                HeaderKind::Distinct => {
                    let v = value?;
                    match (&mut composite, first_header) {
                        (Some(buf), _) => push_part(buf, v),
                        (None, None) => first_header = Some(v),
                        (None, Some(first)) => {
                            let mut buf = Vec::with_capacity(64);
                            push_part(&mut buf, first);
                            push_part(&mut buf, v);
                            composite = Some(buf);
                        }
                    }
                }
                HeaderKind::Exact(want) => {
                    let hit = value.is_some_and(|v| v == want.as_bytes());
                    if hit == invert {
                        return None;
                    }
                }
                HeaderKind::Regex(r) => {
                    let hit = value
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .is_some_and(|v| r.is_match(v));
                    if hit == invert {
                        return None;
                    }
                }
            }
        }
        Some(match (distinct_ip, first_header, composite) {
            (None, None, _) => DistinctKey::Shared,
            (Some(ip), None, _) => DistinctKey::Ip(ip),
            (None, Some(one), None) => DistinctKey::Header(one),
            (None, Some(_), Some(buf)) => DistinctKey::Composite(buf),
            (Some(ip), Some(one), buf) => {
                let mut out = Vec::with_capacity(64);
                push_part(&mut out, ip.to_string().as_bytes());
                match buf {
                    Some(rest) => out.extend_from_slice(&rest),
                    None => push_part(&mut out, one),
                }
                DistinctKey::Composite(out)
            }
        })
    }
}

fn push_part(buf: &mut Vec<u8>, part: &[u8]) {
    buf.extend_from_slice(&(part.len() as u32).to_le_bytes());
    buf.extend_from_slice(part);
}

/// `PathPrefix` matches whole segments, as Gateway API does: `/api` matches `/api` and
/// `/api/x` but not `/apix`.
fn path_has_prefix(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return true;
    }
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// IPv4-mapped IPv6 clients are matched against IPv4 CIDRs.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// A CIDR, or a bare address meaning a single host.
pub(crate) fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let t = text.trim();
    if let Ok(net) = t.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    t.parse::<IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("{text:?} is not a CIDR (such as 10.0.0.0/8) or an IP address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_prefix_matches_segments() {
        assert!(path_has_prefix("/api", "/api"));
        assert!(path_has_prefix("/api/x", "/api/"));
        assert!(!path_has_prefix("/apix", "/api"));
        assert!(path_has_prefix("/anything", "/"));
    }
}
