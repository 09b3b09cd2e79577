//! Envoy's `jwt_authn` filter as Istio configures it from RequestAuthentication
//! ([`warden_jwt::authn`]): first in the chain; a request without a token passes with no
//! principal, one with an invalid token is answered 401 (403 for a disallowed audience) with
//! Envoy's body and `www-authenticate`, and a verified token's identity goes to the filters
//! after it (`FilterState::request_auth`, the payload in dynamic metadata) with the request's
//! edits (token removed, claim and payload headers added) applied by the pipeline. CORS preflights pass, as Istio's
//! `bypass_cors_preflight` says.

use crate::core::identity::ProxyIdentity;
use crate::core::local_reply::LocalReply;
use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::filters::authz::proxy_scope;
use crate::filters::chain::{FilterState, Flow, HttpFilter, RequestEdit, JWT_AUTHN};
use crate::routing::Route;
use http::header::{ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, StatusCode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use warden_config::{ConfigSet, Problem};
use warden_jwt::authn::Edits;
use warden_jwt::authn::Keys;
use warden_jwt::stats::Stats;
use warden_jwt::{Authenticator, Outcome, RemoteKeys, Status, SystemClock};

#[derive(Debug)]
pub struct JwtAuthnFilter {
    pub authn: Authenticator,
    /// The RequestAuthentication documents that apply (`Kind/namespace/name`).
    pub policies: Vec<String>,
}

impl JwtAuthnFilter {
    /// Compile the RequestAuthentication rules that select this proxy; `None` when none do.
    /// Warnings (skipped keys, rules without keys) go to `warnings`.
    /// jwksUri key sets already fetched by `previous` carry over (a reload does not refuse
    /// tokens while the new snapshot's are fetched).
    pub fn build(
        set: &ConfigSet,
        identity: &ProxyIdentity,
        previous: Option<&JwtAuthnFilter>,
        warnings: &mut Vec<Problem>,
    ) -> Result<Option<JwtAuthnFilter>, Vec<Problem>> {
        let compiled =
            warden_jwt::compile::compile(set, &proxy_scope(set, identity), Arc::new(SystemClock));
        warnings.extend(compiled.warnings);
        if !compiled.errors.is_empty() {
            return Err(compiled.errors);
        }
        let filter = compiled.authenticator.map(|authn| JwtAuthnFilter {
            authn,
            policies: compiled.policies,
        });
        if let (Some(f), Some(prev)) = (&filter, previous) {
            for remote in f.remote_keys() {
                let old = prev.remote_keys().find(|r| r.uri == remote.uri);
                if let Some(keys) = old.and_then(|r| r.keys.load_full()) {
                    remote.keys.store(Some(keys));
                }
            }
        }
        Ok(filter)
    }

    /// The jwksUri key sets this filter reads, to be fetched.
    pub fn remote_keys(&self) -> impl Iterator<Item = &Arc<RemoteKeys>> {
        self.authn.rules.iter().filter_map(|r| match &r.keys {
            Keys::Remote(remote) => Some(remote),
            Keys::Inline(_) => None,
        })
    }
}

fn is_cors_preflight(req: &RequestAttrs<'_>) -> bool {
    *req.method == Method::OPTIONS
        && req.header(&ORIGIN).is_some_and(|v| !v.is_empty())
        && req
            .header(&ACCESS_CONTROL_REQUEST_METHOD)
            .is_some_and(|v| !v.is_empty())
}

/// Envoy's response code details for a status (a bounded set: one string per status).
fn details(status: Status) -> &'static str {
    static ALL: OnceLock<Mutex<HashMap<Status, &'static str>>> = OnceLock::new();
    let mut all = ALL
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    all.entry(status)
        .or_insert_with(|| Box::leak(status.rc_details().into_boxed_str()))
}

/// The request as the upstream and the filters after jwt_authn get it: the token's header
/// removed, claim and payload headers added, the token's query parameter removed.
/// Lines kept as read lose the token's header where they are, and the filters after this one
/// see the request without it with no edit pass (`Host` excepted: the request's authority is
/// read from it once). `false`: the pipeline applies `edits`.
fn removed_in_place(req: &RequestAttrs<'_>, edits: &Edits) -> bool {
    let Some(lines) = req.lines else {
        return false;
    };
    edits.add_headers.is_empty()
        && edits.remove_params.is_empty()
        && !edits.remove_headers.contains(&http::header::HOST)
        && edits
            .remove_headers
            .iter()
            .all(|h| lines.remove_shared(h.as_str().as_bytes()))
}

fn request_edit(req: &RequestAttrs<'_>, edits: Edits) -> RequestEdit {
    let path_and_query = (!edits.remove_params.is_empty()).then(|| {
        let query = edits
            .remove_params
            .iter()
            .try_fold(req.query.unwrap_or_default().to_owned(), |q, p| {
                warden_jwt::extract::remove_param(&q, p)
            });
        match query.filter(|q| !q.is_empty()) {
            Some(q) => format!("{}?{q}", req.path),
            None => req.path.to_owned(),
        }
    });
    RequestEdit {
        remove: edits.remove_headers.into_vec(),
        append: edits.add_headers,
        path_and_query,
        ..RequestEdit::default()
    }
}

impl HttpFilter for JwtAuthnFilter {
    fn name(&self) -> &str {
        JWT_AUTHN
    }

    fn on_request(
        &self,
        req: &RequestAttrs<'_>,
        _route: &Route,
        state: &mut FilterState,
        _metrics: &Metrics,
    ) -> Flow {
        if is_cors_preflight(req) {
            return Flow::Continue;
        }
        match self.authn.authenticate(req, req.query) {
            Outcome::Pass { identity, edits } => {
                // Istio's `payload_in_metadata: payload`, read by the rate limits' `metadata`
                // action and `claims` selectors, Lua and the access log: written when first
                // read (`FilterState::settle_metadata`).
                state.payload_pending = identity.is_some();
                state.request_auth = identity;
                if edits.is_empty() || removed_in_place(req, &edits) {
                    return Flow::Continue;
                }
                state.request_edit = Some(Box::new(request_edit(req, edits)));
                Flow::Edited
            }
            Outcome::Deny(status) => {
                let code =
                    StatusCode::from_u16(status.http_status()).unwrap_or(StatusCode::UNAUTHORIZED);
                let reply = LocalReply::new(code, status.message(), None);
                let scheme = if req.tls.is_some() { "https" } else { "http" };
                let realm = warden_jwt::status::realm(scheme, req.authority, req.path);
                let mut response = reply.into_response();
                if let Ok(v) = HeaderValue::from_str(&status.www_authenticate(&realm)) {
                    response.headers_mut().insert(WWW_AUTHENTICATE, v);
                }
                state.notes.details = Some(details(status));
                Flow::Reply(response)
            }
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// `jwt_authn_*`: signature verifications, cache hits, allowed requests, requests without a
/// token, denials by reason.
pub fn register_metrics(registry: &mut Registry, f: &JwtAuthnFilter) {
    let stats = &f.authn.stats;
    let counter = |v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        c
    };
    let denied = Family::<ReasonLabels, Counter>::default();
    for (reason, n) in stats.denied() {
        denied.get_or_create(&ReasonLabels { reason }).inc_by(n);
    }
    let sub = registry.sub_registry_with_prefix("jwt_authn");
    sub.register(
        "verifications",
        "Token signatures checked (verified-token cache misses)",
        counter(Stats::get(&stats.verifications)),
    );
    sub.register(
        "cache_hits",
        "Tokens accepted from the verified-token cache",
        counter(Stats::get(&stats.cache_hits)),
    );
    sub.register(
        "allowed",
        "Requests whose tokens were all valid",
        counter(Stats::get(&stats.allowed)),
    );
    sub.register(
        "no_token",
        "Requests without a token (passed without a principal)",
        counter(Stats::get(&stats.no_token)),
    );
    sub.register("denied", "Requests refused, by reason", denied);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::destination::Side;
    use http::header::HeaderName;

    #[test]
    fn the_token_parameter_leaves_the_query_and_headers_are_swapped() {
        let headers = http::HeaderMap::new();
        let method = Method::GET;
        let attrs = |query: Option<&'static str>| RequestAttrs {
            peer_ip: [127, 0, 0, 1].into(),
            peer_port: 40000,
            version: http::Version::HTTP_11,
            client_ip: [127, 0, 0, 1].into(),
            method: &method,
            authority: "example.com",
            path: "/api",
            query,
            headers: &headers,
            lines: None,
            port: 80,
            local_addr: ([127, 0, 0, 1], 80).into(),
            side: Side::Inbound,
            vhost: 0,
            tls: None,
        };
        let params = |p: &[&str]| Edits {
            remove_params: p.iter().map(|s| s.to_string()).collect(),
            ..Edits::default()
        };
        let cases: [(Option<&str>, &[&str], Option<&str>); 5] = [
            (
                Some("access_token=x&a=1"),
                &["access_token"],
                Some("/api?a=1"),
            ),
            (Some("access_token=x"), &["access_token"], Some("/api")),
            (Some("a=1&t=x&t=y"), &["t"], Some("/api?a=1")),
            (None, &["t"], Some("/api")),
            (Some("a=1"), &[], None),
        ];
        for (query, removed, want) in cases {
            let edit = request_edit(&attrs(query), params(removed));
            assert_eq!(
                edit.path_and_query.as_deref(),
                want,
                "{query:?} {removed:?}"
            );
        }
        let auth = HeaderName::from_static("authorization");
        let sub = HeaderName::from_static("x-sub");
        let edit = request_edit(
            &attrs(None),
            Edits {
                remove_headers: [auth.clone()].into_iter().collect(),
                add_headers: vec![(sub.clone(), HeaderValue::from_static("alice"))],
                remove_params: vec![],
            },
        );
        assert_eq!(edit.remove, vec![auth]);
        assert_eq!(edit.append, vec![(sub, HeaderValue::from_static("alice"))]);
        assert!(edit.headers.is_none() && !edit.reroute);
    }
}
