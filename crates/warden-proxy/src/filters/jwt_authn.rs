//! Envoy's `jwt_authn` filter as Istio configures it from RequestAuthentication
//! ([`warden_jwt::authn`]): first in the chain; a request without a token passes with no
//! principal, one with an invalid token is answered 401 (403 for a disallowed audience) with
//! Envoy's body and `www-authenticate`, and a verified token's identity goes to the filters
//! after it (`RequestAttrs::request_auth`) with the request's edits (token removed, claim and
//! payload headers added) applied by the pipeline. CORS preflights pass, as Istio's
//! `bypass_cors_preflight` says.

use crate::core::identity::ProxyIdentity;
use crate::core::local_reply::LocalReply;
use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::filters::authz::proxy_scope;
use crate::filters::chain::{FilterState, Flow, HttpFilter, RequestEdits, JWT_AUTHN};
use crate::routing::Route;
use http::header::{ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, StatusCode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use warden_config::{ConfigSet, Problem};
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
        match self.authn.authenticate(req.headers, req.query) {
            Outcome::Pass { identity, edits } => {
                state.request_auth = identity;
                if edits.is_empty() {
                    return Flow::Continue;
                }
                state.request_edits = Some(Box::new(RequestEdits {
                    remove_headers: edits.remove_headers,
                    add_headers: edits.add_headers,
                    remove_params: edits.remove_params,
                }));
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
