//! Envoy's `cors` filter with the route's `corsPolicy`: a preflight from an allowed origin is
//! answered here; an allowed cross-origin request goes on, and its answer (the upstream's or a
//! later filter's local reply) gets the allow headers. Istio puts it after RBAC and the local
//! limit, so a preflight an AuthorizationPolicy denies is denied.

use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::filters::chain::{FilterState, Flow, HttpFilter, CORS};
use crate::routing::cors::CorsVerdict;
use crate::routing::Route;
use crate::upstream::body::ProxyBody;
use http::Response;

/// Stateless: the policy is the route's.
#[derive(Debug, Default)]
pub struct CorsFilter;

impl HttpFilter for CorsFilter {
    fn name(&self) -> &str {
        CORS
    }

    #[inline]
    fn on_request(
        &self,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
        _metrics: &Metrics,
    ) -> Flow {
        let Some(cors) = &route.cors else {
            return Flow::Continue;
        };
        match cors.check(req.method, req.headers) {
            CorsVerdict::Pass => Flow::Continue,
            CorsVerdict::Answer(response) => Flow::Reply(response),
            CorsVerdict::Allowed(origin) => {
                state.cors_origin = Some(Box::new(origin));
                Flow::Continue
            }
        }
    }

    fn on_response(
        &self,
        route: &Route,
        state: &mut FilterState,
        response: &mut Response<ProxyBody>,
    ) {
        if let (Some(cors), Some(origin)) = (&route.cors, state.cors_origin.take()) {
            cors.decorate(*origin, response);
        }
    }

    fn reads_request_headers(&self) -> bool {
        false
    }
}
