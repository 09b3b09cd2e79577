//! The HTTP filters and their chain (`chain`: the trait, the order, EnvoyFilter positions), one
//! file per filter: `jwt_authn` (RequestAuthentication), `ext_authz` (CUSTOM policies'
//! external authorizer), `authz` (RBAC), `local_rate_limit`,
//! `cors`, `global_rate_limit/`, `fault`, `lua` (Envoy's Lua filter, from EnvoyFilter patches);
//! `l4` holds what the TCP path applies to a connection (CUSTOM's network ext_authz and RBAC
//! on the first byte, connection limits). `route_sites` names every route the way EnvoyFilter patches do.
//!
//! A snapshot compiles one [`Filters`] per side (gateway and sidecar inbound; a sidecar's
//! outbound side has none, as in Istio).

pub mod authz;
pub mod chain;
pub mod cors;
pub mod ext_authz;
pub mod fault;
pub mod global_rate_limit;
pub mod jwt_authn;
pub mod l4;
pub mod local_rate_limit;
pub mod lua;
pub mod route_sites;

use crate::core::identity::ProxyIdentity;
use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::routing::Route;
use crate::upstream::body::ProxyBody;
use authz::AuthzFilter;
use chain::{ChainExtensions, FilterState, Flow, HttpFilter, Stage, VerdictFuture};
use cors::CorsFilter;
use ext_authz::ExtAuthzFilter;
use fault::FaultFilter;
use global_rate_limit::GlobalRateLimit;
use http::Response;
use jwt_authn::JwtAuthnFilter;
use local_rate_limit::LocalRateLimitFilter;
use warden_config::{ConfigSet, Problem};

/// The compiled filters of one side of a snapshot and the order they run in.
#[derive(Debug, Default)]
pub struct Filters {
    pub jwt_authn: Option<JwtAuthnFilter>,
    pub ext_authz: Option<ExtAuthzFilter>,
    pub authz: Option<AuthzFilter>,
    pub local_rate_limit: Option<LocalRateLimitFilter>,
    pub global_rate_limit: Option<GlobalRateLimit>,
    /// The Lua filters of the chain (also in `chain`), for their counters.
    pub lua: Vec<std::sync::Arc<lua::LuaFilter>>,
    chain: Box<[Stage]>,
    /// Some filter of the chain reads the request body.
    reads_body: bool,
    /// What building found that does not stop the config (a JWKS key skipped...).
    pub warnings: Vec<Problem>,
}

/// What a chain's request phases decided, up to the first that did not just continue.
pub enum ChainFlow {
    /// Every filter let the request through.
    Passed,
    /// The filter at this index answered.
    Reply(Response<ProxyBody>, usize),
    /// The filter at this index waits: resume there with [`Filters::on_request_waiting`].
    Wait(usize),
    /// The filter at this index edited the request ([`chain::Flow::Edited`]): apply the edits,
    /// then resume after it.
    Edited(usize),
}

impl Filters {
    /// Compile the policy kinds (`authorization_policies`, `rate_limit_policies`,
    /// `envoy_filters`) that apply to this proxy; `previous` hands over state (limiter buckets)
    /// across reloads; `extensions` are added to the chain at their positions. All problems of
    /// all filters are reported together.
    pub fn build(
        set: &ConfigSet,
        identity: &ProxyIdentity,
        routes: &route_sites::RouteCatalog,
        previous: Option<&Filters>,
        extensions: &ChainExtensions,
    ) -> Result<Filters, Vec<Problem>> {
        let mut problems = Vec::new();
        let mut warnings = Vec::new();
        let jwt_authn = JwtAuthnFilter::build(
            set,
            identity,
            previous.and_then(|p| p.jwt_authn.as_ref()),
            &mut warnings,
        )
        .unwrap_or_else(|p| {
            problems.extend(p);
            None
        });
        let (authz, custom) = AuthzFilter::build(set, identity).unwrap_or_else(|p| {
            problems.extend(p);
            (None, None)
        });
        let ext_authz = ExtAuthzFilter::build(set, identity, custom, &mut warnings);
        let local_rate_limit = LocalRateLimitFilter::build(
            set,
            identity,
            routes,
            previous.and_then(|p| p.local_rate_limit.as_ref()),
        )
        .unwrap_or_else(|p| {
            problems.extend(p);
            None
        });
        let global_rate_limit = GlobalRateLimit::build(
            set,
            identity,
            routes,
            previous.and_then(|p| p.global_rate_limit.as_ref()),
        )
        .unwrap_or_else(|p| {
            problems.extend(p);
            None
        });
        if !problems.is_empty() {
            // The limiters read the same EnvoyFilters: a bad patch is reported once, at its line.
            let mut seen = std::collections::HashSet::new();
            problems.retain(|p| seen.insert(p.to_string()));
            return Err(problems.into_iter().map(|p| set.with_line(p)).collect());
        }
        let mut builtins = Vec::with_capacity(6);
        if jwt_authn.is_some() {
            builtins.push(Stage::JwtAuthn);
        }
        if ext_authz.is_some() {
            builtins.push(Stage::ExtAuthz);
        }
        if authz.is_some() {
            builtins.push(Stage::Rbac);
        }
        if local_rate_limit.is_some() {
            builtins.push(Stage::LocalRateLimit);
        }
        builtins.push(Stage::Cors);
        if global_rate_limit.is_some() {
            builtins.push(Stage::GlobalRateLimit);
        }
        builtins.push(Stage::Fault);
        let names: Vec<&str> = builtins.iter().map(Stage::name).collect();
        let lua = lua::build(set, identity, routes, &names, &mut problems);
        if !problems.is_empty() {
            return Err(problems.into_iter().map(|p| set.with_line(p)).collect());
        }
        let lua_filters: Vec<_> = lua.iter().map(|l| l.filter.clone()).collect();
        let with_lua;
        let extensions = if lua.is_empty() {
            extensions
        } else {
            let mut all: Vec<_> = lua
                .into_iter()
                .map(|l| (l.position, l.filter as std::sync::Arc<dyn HttpFilter>))
                .collect();
            all.extend(extensions.0.iter().cloned());
            with_lua = ChainExtensions(all);
            &with_lua
        };
        let (chain, skipped) = chain::order(&builtins, extensions);
        for s in skipped {
            tracing::warn!("HTTP filter {s} not added: its position names no filter of the chain");
        }
        let reads_body =
            reads_body(&chain) || ext_authz.as_ref().is_some_and(|f| f.reads_request_body());
        Ok(Filters {
            jwt_authn,
            ext_authz,
            authz,
            local_rate_limit,
            global_rate_limit,
            lua: lua_filters,
            reads_body,
            chain: chain.into(),
            warnings: warnings.into_iter().map(|p| set.with_line(p)).collect(),
        })
    }

    /// The filters a sidecar's outbound side runs: CORS and fault of its routes, and the
    /// added ones.
    pub fn outbound(extensions: &ChainExtensions) -> Filters {
        let (chain, _) = chain::order(&[Stage::Cors, Stage::Fault], extensions);
        Filters {
            reads_body: reads_body(&chain),
            chain: chain.into(),
            ..Filters::default()
        }
    }

    /// Whether a filter reads the request body in its waiting phase (the pipeline then hands
    /// it over in [`FilterState::request_body`]).
    pub fn reads_request_body(&self) -> bool {
        self.reads_body
    }

    /// Whether a filter may read request headers (see
    /// [`crate::snapshot::Snapshot::reads_request_headers`]). Authz and the global limit are
    /// counted as readers whatever their rules say.
    pub fn reads_request_headers(&self) -> bool {
        self.chain.iter().any(|s| match s {
            // jwt_authn reads its headers from the lines too (`RequestAttrs` as
            // `RequestHeaders`), and the pipeline applies its edit to them.
            Stage::JwtAuthn => false,
            // ext_authz copies the headers into its check and its edit replaces the map.
            Stage::ExtAuthz | Stage::Rbac | Stage::GlobalRateLimit => true,
            Stage::LocalRateLimit => self
                .local_rate_limit
                .as_ref()
                .is_some_and(|l| l.reads_request_headers()),
            Stage::Cors | Stage::Fault => false,
            Stage::Added(f) => f.reads_request_headers(),
        })
    }

    /// The policy filters configured (for `warden check` and the start-up log).
    pub fn stage_names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.jwt_authn.is_some() {
            v.push("jwt_authn");
        }
        if self.ext_authz.is_some() {
            v.push("ext_authz");
        }
        if self.authz.is_some() {
            v.push("authz");
        }
        if self.local_rate_limit.is_some() {
            v.push("local_rate_limit");
        }
        if self.global_rate_limit.is_some() {
            v.push("global_rate_limit");
        }
        v
    }

    /// Envoy's names of the chain's filters, in order.
    pub fn chain_names(&self) -> Vec<&str> {
        self.chain.iter().map(Stage::name).collect()
    }

    /// Whether some filter of the chain waits for every request (then no request is answered
    /// before a future exists).
    pub fn always_waits(&self) -> bool {
        self.global_rate_limit.is_some()
    }

    /// The request phases from the filter at `from` on, until one answers or waits.
    #[inline]
    pub fn on_request(
        &self,
        from: usize,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
        metrics: &Metrics,
    ) -> ChainFlow {
        for (i, stage) in self.chain.iter().enumerate().skip(from) {
            match self.stage_request(stage, req, route, state, metrics) {
                Flow::Continue => {}
                Flow::Reply(response) => return ChainFlow::Reply(response, i),
                Flow::Wait => return ChainFlow::Wait(i),
                Flow::Edited => return ChainFlow::Edited(i),
            }
        }
        ChainFlow::Passed
    }

    #[inline]
    fn stage_request(
        &self,
        stage: &Stage,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
        metrics: &Metrics,
    ) -> Flow {
        match stage {
            Stage::JwtAuthn => match &self.jwt_authn {
                Some(f) => f.on_request(req, route, state, metrics),
                None => Flow::Continue,
            },
            Stage::ExtAuthz => match &self.ext_authz {
                Some(f) => f.on_request(req, route, state, metrics),
                None => Flow::Continue,
            },
            Stage::Rbac => match &self.authz {
                Some(f) => f.on_request(req, route, state, metrics),
                None => Flow::Continue,
            },
            Stage::LocalRateLimit => match &self.local_rate_limit {
                Some(f) => f.on_request(req, route, state, metrics),
                None => Flow::Continue,
            },
            Stage::Cors => CorsFilter.on_request(req, route, state, metrics),
            Stage::GlobalRateLimit => match &self.global_rate_limit {
                Some(f) => f.on_request(req, route, state, metrics),
                None => Flow::Continue,
            },
            Stage::Fault => FaultFilter.on_request(req, route, state, metrics),
            Stage::Added(f) => f.on_request(req, route, state, metrics),
        }
    }

    /// The waiting request phase of the filter at `at` (it said [`Flow::Wait`]).
    pub fn on_request_waiting<'a>(
        &'a self,
        at: usize,
        req: &'a RequestAttrs<'a>,
        route: &'a Route,
        state: &'a mut FilterState,
        metrics: &'a Metrics,
    ) -> VerdictFuture<'a> {
        match self.chain.get(at) {
            Some(Stage::GlobalRateLimit) => match &self.global_rate_limit {
                Some(f) => f.on_request_waiting(req, route, state, metrics),
                None => Box::pin(std::future::ready(chain::Verdict::Continue)),
            },
            Some(Stage::ExtAuthz) => match &self.ext_authz {
                Some(f) => f.on_request_waiting(req, route, state, metrics),
                None => Box::pin(std::future::ready(chain::Verdict::Continue)),
            },
            Some(Stage::Fault) => FaultFilter.on_request_waiting(req, route, state, metrics),
            Some(Stage::Added(f)) => f.on_request_waiting(req, route, state, metrics),
            _ => Box::pin(std::future::ready(chain::Verdict::Continue)),
        }
    }

    /// The response phases, in reverse order, of the filters whose request phase ran (the
    /// first `reached` of the chain).
    #[inline]
    pub fn on_response(
        &self,
        reached: usize,
        route: &Route,
        state: &mut FilterState,
        response: &mut Response<ProxyBody>,
    ) {
        for stage in self.chain[..reached.min(self.chain.len())].iter().rev() {
            match stage {
                Stage::Cors => CorsFilter.on_response(route, state, response),
                Stage::Added(f) => f.on_response(route, state, response),
                Stage::JwtAuthn
                | Stage::ExtAuthz
                | Stage::Rbac
                | Stage::LocalRateLimit
                | Stage::GlobalRateLimit
                | Stage::Fault => {}
            }
        }
    }

    /// [`Filters::on_response`] for a request whose filters' response phases may wait
    /// ([`FilterState::response_waits`]); boxed, so a request that does not pays nothing
    /// for its room.
    pub fn on_response_waiting<'a>(
        &'a self,
        reached: usize,
        route: &'a Route,
        state: &'a mut FilterState,
        response: &'a mut Response<ProxyBody>,
    ) -> chain::ResponseFuture<'a> {
        Box::pin(async move {
            for stage in self.chain[..reached.min(self.chain.len())].iter().rev() {
                match stage {
                    Stage::Cors => CorsFilter.on_response(route, state, response),
                    Stage::Added(f) => f.on_response_waiting(route, state, response).await,
                    Stage::JwtAuthn
                    | Stage::ExtAuthz
                    | Stage::Rbac
                    | Stage::LocalRateLimit
                    | Stage::GlobalRateLimit
                    | Stage::Fault => {}
                }
            }
        })
    }

    /// Register the counters the engines keep themselves, read at scrape time.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        if let Some(local) = &self.local_rate_limit {
            local_rate_limit::register_metrics(registry, local);
        }
        if !self.lua.is_empty() {
            lua::register_metrics(registry, &self.lua);
        }
        if let Some(jwt) = &self.jwt_authn {
            jwt_authn::register_metrics(registry, jwt);
        }
        if let Some(f) = &self.ext_authz {
            ext_authz::register_metrics(registry, f);
        }
    }

    /// How many filters the chain has (the `reached` of a request that passed them all).
    pub fn len(&self) -> usize {
        self.chain.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chain.is_empty()
    }
}

fn reads_body(chain: &[Stage]) -> bool {
    chain.iter().any(|s| match s {
        Stage::Added(f) => f.reads_request_body(),
        _ => false,
    })
}
