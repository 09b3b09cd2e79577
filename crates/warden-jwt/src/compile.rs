//! From the RequestAuthentication documents that select a workload to its [`Authenticator`]:
//! every jwtRule of every selected policy, ordered by issuer as Istio orders them
//! (`newPolicyApplier`). An inline `jwks` that is not a key set is an error, as Istio's webhook
//! refuses it; keys in it that Envoy would skip are warnings.

use crate::authn::{Authenticator, Keys, RemoteKeys, Rule, CACHE_PER_RULE};
use crate::clock::Clock;
use crate::extract::RulePlaces;
use crate::jwks::Jwks;
use http::header::HeaderName;
use std::sync::Arc;
use warden_authz::ProxyScope;
use warden_config::kinds::request_authentication::{JwtRule, RequestAuthentication};
use warden_config::{ConfigSet, Doc, Location, Problem};

/// What compiling found: errors refuse the config, warnings are reported.
#[derive(Debug, Default)]
pub struct Compiled {
    pub authenticator: Option<Authenticator>,
    pub errors: Vec<Problem>,
    pub warnings: Vec<Problem>,
    /// The documents that apply, by `Kind/namespace/name`.
    pub policies: Vec<String>,
}

/// The RequestAuthentication documents that apply to this workload.
pub fn selected<'a>(set: &'a ConfigSet, scope: &ProxyScope) -> Vec<&'a Doc<RequestAuthentication>> {
    set.request_authentications
        .iter()
        .filter(|d| {
            let s = &d.spec;
            scope.selects_parts(
                d.metadata.namespace_or_default(),
                s.selector.as_ref(),
                s.target_ref.iter().chain(s.target_refs.iter()),
            )
        })
        .collect()
}

fn location(doc: &Doc<RequestAuthentication>, field: String) -> Location {
    Location {
        file: doc.file.clone(),
        document: doc.index,
        object: doc.id(),
        field,
        ..Default::default()
    }
}

/// Compile the rules of the policies that select this workload; no authenticator when none
/// does (or they have no rules).
pub fn compile(set: &ConfigSet, scope: &ProxyScope, clock: Arc<dyn Clock>) -> Compiled {
    let mut out = Compiled::default();
    let mut rules: Vec<(&Doc<RequestAuthentication>, usize, &JwtRule)> = Vec::new();
    for doc in selected(set, scope) {
        out.policies.push(doc.id());
        for (i, r) in doc.spec.jwt_rules.iter().enumerate() {
            rules.push((doc, i, r));
        }
    }
    rules.sort_by(|a, b| a.2.issuer.cmp(&b.2.issuer));
    let mut compiled = Vec::with_capacity(rules.len());
    for (doc, i, r) in rules {
        let at = format!("spec.jwtRules[{i}]");
        compiled.push(rule(doc, &at, r, &mut out));
    }
    if !compiled.is_empty() && out.errors.is_empty() {
        out.authenticator = Some(Authenticator::new(compiled, clock));
    }
    out
}

fn rule(doc: &Doc<RequestAuthentication>, at: &str, r: &JwtRule, out: &mut Compiled) -> Rule {
    let keys = match (&r.jwks, &r.jwks_uri) {
        (Some(text), _) => {
            let parsed = Jwks::parse(text);
            match &parsed {
                Ok(jwks) => {
                    for (k, status) in &jwks.skipped {
                        out.warnings.push(Problem::new(
                            location(doc, format!("{at}.jwks")),
                            format!(
                                "key {k} of the JWKS is skipped: {}; tokens signed with it are \
                                 refused",
                                status.message()
                            ),
                        ));
                    }
                }
                Err(status) => out.errors.push(Problem::new(
                    location(doc, format!("{at}.jwks")),
                    format!("jwks parse error: {}", status.message()),
                )),
            }
            Keys::Inline(parsed.map(Arc::new))
        }
        (None, Some(uri)) => Keys::Remote(Arc::new(RemoteKeys::new(
            uri.clone(),
            r.fetch_timeout()
                .unwrap_or(warden_config::kinds::request_authentication::DEFAULT_JWKS_TIMEOUT),
        ))),
        (None, None) => {
            // Istio resolves neither to a key set no token can match.
            out.warnings.push(Problem::new(
                location(doc, at.to_owned()),
                format!(
                    "issuer {:?} has neither jwks nor jwksUri: its tokens are refused (\"{}\")",
                    r.issuer,
                    crate::Status::JwksNoValidKeys.message()
                ),
            ));
            Keys::Inline(Err(crate::Status::JwksNoValidKeys))
        }
    };
    let header = |name: &str| HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).ok();
    let places = RulePlaces {
        headers: r
            .from_headers
            .iter()
            .filter_map(|h| Some((header(&h.name)?, h.prefix.clone())))
            .collect(),
        params: r.from_params.clone(),
        cookies: r.from_cookies.clone(),
    };
    Rule::new(
        r.issuer.clone(),
        &r.audiences,
        keys,
        &places,
        r.forward_original_token,
        r.output_payload_to_header.as_deref().and_then(header),
        r.output_claim_to_headers
            .iter()
            .filter_map(|c| Some((c.claim.clone(), header(&c.header)?)))
            .collect(),
        CACHE_PER_RULE,
    )
}
