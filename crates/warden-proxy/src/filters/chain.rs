//! The HTTP filter chain: one trait every HTTP filter implements, with a request phase (Envoy's
//! `decodeHeaders`) and a response phase (`encodeHeaders`, in reverse order), and the order
//! they run in. The built-in filters are named by [`Stage`] and dispatched with a `match`, so a
//! route pays for no filter it does not use and no request allocates for the chain; filters
//! added through [`ChainExtensions`] (a test's, an embedder's) are trait objects.
//!
//! Order (Istio's, see `DEFAULT_ORDER`): jwt_authn, ext_authz (CUSTOM policies), RBAC, local rate limit, CORS, global rate limit,
//! fault, then the router. EnvoyFilter-style positions ([`Position`]) place added filters
//! against these names.

pub use crate::core::dynamic_metadata::DynamicMetadata;
use crate::core::local_reply::{LocalReply, ResponseFlag, ResponseFlags};
use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::routing::Route;
use crate::upstream::body::ProxyBody;
use http::{HeaderMap, HeaderValue, Response};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use warden_local_ratelimit::request::{JWT_AUTHN_METADATA, JWT_PAYLOAD_FIELD};
use warden_local_ratelimit::RateLimitHeaders;

/// Envoy's names of the built-in filters and the router.
pub const JWT_AUTHN: &str = "envoy.filters.http.jwt_authn";
pub const EXT_AUTHZ: &str = "envoy.filters.http.ext_authz";
pub const RBAC: &str = "envoy.filters.http.rbac";
pub const LOCAL_RATE_LIMIT: &str = "envoy.filters.http.local_ratelimit";
pub const CORS: &str = "envoy.filters.http.cors";
pub const GLOBAL_RATE_LIMIT: &str = "envoy.filters.http.ratelimit";
pub const FAULT: &str = "envoy.filters.http.fault";
pub const ROUTER: &str = "envoy.filters.http.router";

/// A request phase's decision, taken without waiting.
pub enum Flow {
    Continue,
    /// Answer with this response; later filters and the router do not see the request.
    Reply(Response<ProxyBody>),
    /// The filter must wait (a remote call, a delay): the pipeline moves the request into its
    /// future and calls [`HttpFilter::on_request_waiting`].
    Wait,
    /// Continue once the pipeline has applied [`FilterState::request_edit`] to the request:
    /// the filters after this one see the edited request (a filter that does not wait; a
    /// waiting one's edit is applied when its waiting phase ends).
    Edited,
}

/// What a waiting request phase decided.
pub enum Verdict {
    Continue,
    /// Continue, adding these headers to the response (e.g. `x-ratelimit-*`).
    ContinueWithHeaders(HeaderMap),
    /// Continue, adding `request` to the upstream request and `response` to the response
    /// (the RLS's `request_headers_to_add` / `response_headers_to_add`).
    ContinueWithRequestHeaders {
        request: HeaderMap,
        response: HeaderMap,
    },
    Reply(LocalReply),
    /// A local reply carrying extra headers (`x-envoy-ratelimited`, `x-ratelimit-*`).
    ReplyWithHeaders(LocalReply, HeaderMap),
}

pub type VerdictFuture<'a> = Pin<Box<dyn Future<Output = Verdict> + Send + 'a>>;

/// A response phase that waits ([`HttpFilter::on_response_waiting`]).
pub type ResponseFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Why a request was answered as it was, for metrics, the access log and `/ratelimit/top`.
#[derive(Default)]
pub struct Notes {
    /// The flag of the reason the request was answered as it was.
    pub flag: Option<ResponseFlag>,
    /// Flags set on the way (a fault's `DI` before its abort, `URX` with the failure retries
    /// gave up on): Envoy writes them all.
    pub more_flags: ResponseFlags,
    /// The RBAC rule (`none` for an ALLOW miss) or rate limit rule that stopped the request.
    pub policy: Option<Arc<str>>,
    /// Envoy's response code details prefix for a policy denial.
    pub details: Option<&'static str>,
    /// A dry-run policy (or shadow-mode limit) that would have stopped it.
    pub shadow_policy: Option<Arc<str>>,
}

impl Notes {
    /// Every flag of the request, as `%RESPONSE_FLAGS%` writes them.
    pub fn flags(&self) -> ResponseFlags {
        self.more_flags.with(self.flag)
    }

    /// The proxy answers for `flag`'s reason; a flag set before (a fault's delay) stays.
    pub fn replied(&mut self, flag: Option<ResponseFlag>) {
        if let Some(before) = self.flag.take() {
            self.more_flags.set(before);
        }
        self.flag = flag;
    }

    /// Envoy's `%RESPONSE_CODE_DETAILS%`: what the deciding filter said (RBAC with the
    /// matched policy), else what the flag's reason is, else `via_upstream` (`answered` by
    /// the upstream) or `direct_response`.
    pub fn write_details(&self, answered_upstream: bool, out: &mut String) {
        match (self.details, &self.policy, self.flag) {
            (Some(d), Some(p), _) if d == crate::filters::authz::RBAC_DENIED => {
                out.push_str(d);
                out.push('[');
                out.push_str(p);
                out.push(']');
            }
            (Some(d), _, _) => out.push_str(d),
            (None, _, Some(f)) => out.push_str(f.details()),
            (None, _, None) if answered_upstream => out.push_str("via_upstream"),
            (None, _, None) => out.push_str("direct_response"),
        }
    }
}

/// What the filters of one request leave for the ones after them and for the answer.
#[derive(Default)]
pub struct FilterState {
    /// Whether the access log is on (filters then name the rule that decided).
    pub logging: bool,
    pub notes: Notes,
    /// `x-ratelimit-*` of the local limiter, applied straight to the response at the end: no
    /// header map on the hot path.
    pub local_limit_headers: Option<RateLimitHeaders>,
    /// For the upstream request. Boxed: rarely there, and inline it would be 96 bytes of every
    /// proxied request's future.
    pub request_headers: Option<Box<HeaderMap>>,
    /// For the response (a waiting filter's headers).
    pub response_headers: Option<Box<HeaderMap>>,
    /// An allowed cross-origin request's `origin`: its response gets the route's CORS headers.
    pub cors_origin: Option<Box<HeaderValue>>,
    /// A filter's change to the request, applied by the pipeline before the next filter runs.
    pub request_edit: Option<Box<RequestEdit>>,
    /// Envoy's dynamic metadata, written by filters, read by later ones and the access log.
    pub dynamic_metadata: Option<Box<DynamicMetadata>>,
    /// (filter key, choice) pairs an added filter's request phase leaves for its response
    /// phase (the Lua filter's per-route script).
    pub response_choices: Option<Box<Vec<(usize, usize)>>>,
    /// The request's body while the waiting phases of a chain with a filter that reads it
    /// run ([`HttpFilter::reads_request_body`]): such a filter may buffer it and put back
    /// what the upstream gets.
    pub request_body: Option<Box<ProxyBody>>,
    /// The verified end-user token (jwt_authn), for the filters after it: `requestPrincipals`
    /// and `request.auth.*` in RBAC.
    pub request_auth: Option<Arc<warden_jwt::Verified>>,
    /// `request_auth`'s payload is owed to `dynamic_metadata` ([`FilterState::settle_metadata`]).
    pub payload_pending: bool,
    /// A filter's response phase may wait (read the body, make a call): the pipeline runs
    /// the response phases through [`HttpFilter::on_response_waiting`].
    pub response_waits: bool,
    /// What the Lua filter's response phase tells a script of the stream (`streamInfo()`),
    /// kept from the request phase, which has the request.
    pub lua_stream_info: Option<Box<warden_lua::StreamInfo>>,
    /// A Lua request phase that ran without waiting and goes on in the filter's waiting
    /// phase (it made a call, or answered).
    pub lua_request: Option<crate::filters::lua::LuaRequest>,
}

/// A request as a filter changed it (Envoy filters edit the header map, pseudo-headers
/// included, in place).
#[derive(Debug, Default)]
pub struct RequestEdit {
    /// The request's headers as the filter left them, `host` included; None: unchanged.
    pub headers: Option<HeaderMap>,
    /// Headers the filter only removed (when `headers` is None), every value.
    pub remove: Vec<http::HeaderName>,
    /// Headers the filter only added (when `headers` is None): appended to the request's
    /// after `remove`.
    pub append: Vec<(http::HeaderName, HeaderValue)>,
    pub method: Option<http::Method>,
    /// A new `:path` (with its query).
    pub path_and_query: Option<String>,
    /// A new `:authority`.
    pub authority: Option<String>,
    /// `clearRouteCache()`: route the changed request again.
    pub reroute: bool,
}

impl FilterState {
    #[inline]
    pub fn new(logging: bool) -> Self {
        FilterState {
            logging,
            ..FilterState::default()
        }
    }

    /// Writes what is owed to the dynamic metadata; every reader of `dynamic_metadata` calls
    /// it first. jwt_authn's verified payload (Istio's `payload_in_metadata: payload`) is
    /// written only here, so a request whose metadata nothing reads does not copy its claims.
    pub fn settle_metadata(&mut self) {
        if !std::mem::take(&mut self.payload_pending) {
            return;
        }
        if let Some(verified) = &self.request_auth {
            let payload = serde_json::Value::Object(verified.claims().clone());
            self.dynamic_metadata
                .get_or_insert_with(Default::default)
                .insert(
                    JWT_AUTHN_METADATA.to_owned(),
                    serde_json::Map::from_iter([(JWT_PAYLOAD_FIELD.to_owned(), payload)]),
                );
        }
    }

    /// Headers for the upstream request.
    pub fn add_request_headers(&mut self) -> &mut HeaderMap {
        self.request_headers.get_or_insert_with(Box::default)
    }

    /// Headers for the response.
    pub fn add_response_headers(&mut self) -> &mut HeaderMap {
        self.response_headers.get_or_insert_with(Box::default)
    }
}

/// One HTTP filter. The per-route configuration comes from `route` (or from the filter's own
/// tables keyed by the route's site); state for later filters and the answer goes in
/// [`FilterState`].
pub trait HttpFilter: Send + Sync + fmt::Debug {
    /// Envoy's name, which EnvoyFilter positions refer to.
    fn name(&self) -> &str;

    /// The request phase, without waiting.
    fn on_request(
        &self,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
        metrics: &Metrics,
    ) -> Flow;

    /// The request phase of a filter whose [`HttpFilter::on_request`] said [`Flow::Wait`].
    fn on_request_waiting<'a>(
        &'a self,
        _req: &'a RequestAttrs<'a>,
        _route: &'a Route,
        _state: &'a mut FilterState,
        _metrics: &'a Metrics,
    ) -> VerdictFuture<'a> {
        Box::pin(std::future::ready(Verdict::Continue))
    }

    /// The response phase (local replies of later filters and the router's answer).
    fn on_response(
        &self,
        _route: &Route,
        _state: &mut FilterState,
        _response: &mut Response<ProxyBody>,
    ) {
    }

    /// The response phase of a request whose filters said [`FilterState::response_waits`]
    /// (a Lua script's `body()` or `httpCall()` in `envoy_on_response`).
    fn on_response_waiting<'a>(
        &'a self,
        route: &'a Route,
        state: &'a mut FilterState,
        response: &'a mut Response<ProxyBody>,
    ) -> ResponseFuture<'a> {
        self.on_response(route, state, response);
        Box::pin(std::future::ready(()))
    }

    /// Whether the request phase may read request headers other than `Host` (then a
    /// fast-path request's header lines are read into its map before the chain runs).
    fn reads_request_headers(&self) -> bool {
        true
    }

    /// Whether the waiting phase reads the request's body (from
    /// [`FilterState::request_body`]).
    fn reads_request_body(&self) -> bool {
        false
    }
}

/// Where an added filter goes, as EnvoyFilter's `HTTP_FILTER` patch operations say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// `INSERT_FIRST`.
    First,
    /// `INSERT_BEFORE` the named filter (the router: last).
    Before(String),
    /// `INSERT_AFTER` the named filter.
    After(String),
    /// `ADD`: appended, before the router.
    Last,
}

/// Where in `names` (the chain so far, router excluded) a filter at `position` goes; `None`
/// when it names a filter the chain does not have (Istio then does not apply the patch).
pub fn place(names: &[&str], position: &Position) -> Option<usize> {
    match position {
        Position::First => Some(0),
        Position::Last => Some(names.len()),
        Position::Before(n) if n == ROUTER => Some(names.len()),
        Position::Before(n) => names.iter().position(|x| x == n),
        Position::After(n) => names.iter().position(|x| x == n).map(|i| i + 1),
    }
}

/// Filters added to every chain of a proxy, each at its position.
#[derive(Debug, Clone, Default)]
pub struct ChainExtensions(pub Vec<(Position, Arc<dyn HttpFilter>)>);

/// One step of a chain: a built-in filter of the snapshot, or an added one.
#[derive(Debug, Clone)]
pub enum Stage {
    JwtAuthn,
    ExtAuthz,
    Rbac,
    LocalRateLimit,
    Cors,
    GlobalRateLimit,
    Fault,
    Added(Arc<dyn HttpFilter>),
}

impl Stage {
    pub fn name(&self) -> &str {
        match self {
            Stage::JwtAuthn => JWT_AUTHN,
            Stage::ExtAuthz => EXT_AUTHZ,
            Stage::Rbac => RBAC,
            Stage::LocalRateLimit => LOCAL_RATE_LIMIT,
            Stage::Cors => CORS,
            Stage::GlobalRateLimit => GLOBAL_RATE_LIMIT,
            Stage::Fault => FAULT,
            Stage::Added(f) => f.name(),
        }
    }
}

/// The chain's order: the built-ins this snapshot has, in Istio's order, then the added
/// filters at their positions (in the order given). Added filters whose position names a
/// filter the chain lacks are left out and named in the second list.
pub fn order(builtins: &[Stage], extensions: &ChainExtensions) -> (Vec<Stage>, Vec<String>) {
    let mut chain = builtins.to_vec();
    let mut skipped = Vec::new();
    for (position, filter) in &extensions.0 {
        let names: Vec<&str> = chain.iter().map(Stage::name).collect();
        match place(&names, position) {
            Some(i) => chain.insert(i, Stage::Added(filter.clone())),
            None => skipped.push(format!("{} ({position:?})", filter.name())),
        }
    }
    (chain, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUILTIN: [&str; 5] = [RBAC, LOCAL_RATE_LIMIT, CORS, GLOBAL_RATE_LIMIT, FAULT];

    #[test]
    fn positions_map_onto_the_chain() {
        let cases: &[(Position, Option<usize>)] = &[
            (Position::First, Some(0)),
            (Position::Last, Some(5)),
            (Position::Before(ROUTER.into()), Some(5)),
            (Position::Before(RBAC.into()), Some(0)),
            (Position::After(RBAC.into()), Some(1)),
            (Position::Before(GLOBAL_RATE_LIMIT.into()), Some(3)),
            (Position::After(GLOBAL_RATE_LIMIT.into()), Some(4)),
            (Position::After(FAULT.into()), Some(5)),
            (Position::Before("envoy.filters.http.lua".into()), None),
            (Position::After("envoy.filters.http.ext_authz".into()), None),
        ];
        for (position, want) in cases {
            assert_eq!(place(&BUILTIN, position), *want, "{position:?}");
        }
    }

    #[test]
    fn an_empty_chain_takes_first_last_and_before_router() {
        assert_eq!(place(&[], &Position::First), Some(0));
        assert_eq!(place(&[], &Position::Last), Some(0));
        assert_eq!(place(&[], &Position::Before(ROUTER.into())), Some(0));
        assert_eq!(place(&[], &Position::After(RBAC.into())), None);
    }

    #[derive(Debug)]
    struct Named(&'static str);

    impl HttpFilter for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn on_request(
            &self,
            _: &RequestAttrs<'_>,
            _: &Route,
            _: &mut FilterState,
            _: &Metrics,
        ) -> Flow {
            Flow::Continue
        }
    }

    #[test]
    fn added_filters_go_where_their_positions_say_in_turn() {
        let builtins = [Stage::Rbac, Stage::LocalRateLimit, Stage::Fault];
        let ext = ChainExtensions(vec![
            (Position::First, Arc::new(Named("a"))),
            (Position::After(RBAC.into()), Arc::new(Named("b"))),
            (Position::Before("a".into()), Arc::new(Named("c"))),
            (Position::Before(CORS.into()), Arc::new(Named("d"))),
            (Position::Last, Arc::new(Named("e"))),
        ]);
        let (chain, skipped) = order(&builtins, &ext);
        let names: Vec<&str> = chain.iter().map(Stage::name).collect();
        assert_eq!(
            names,
            ["c", "a", RBAC, "b", LOCAL_RATE_LIMIT, FAULT, "e"],
            "CORS is not in this chain, so d is skipped"
        );
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].starts_with("d "));
    }
}
