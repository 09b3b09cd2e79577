//! A filter added to the chain from outside the product, through `ProxyOptions::http_filters`:
//! one file (this one) is all a new HTTP filter needs. It answers some requests itself, adds a
//! header for the upstream on others, and marks every response it saw on the way back; its
//! position in the chain decides whether RBAC sees a request before it.

mod common;

use common::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use warden_proxy::core::metrics::Metrics;
use warden_proxy::core::request_attrs::RequestAttrs;
use warden_proxy::filters::chain::{
    ChainExtensions, FilterState, Flow, HttpFilter, Position, RBAC,
};
use warden_proxy::routing::Route;
use warden_proxy::upstream::body::ProxyBody;
use warden_proxy::{Proxy, ProxyOptions};

/// Blocks `x-api-key: bad` with 401, passes the key upstream as `x-key-checked`, and counts
/// the requests it saw.
#[derive(Debug, Default)]
struct ApiKey {
    seen: AtomicU64,
}

impl HttpFilter for ApiKey {
    fn name(&self) -> &str {
        "test.api_key"
    }

    fn on_request(
        &self,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
        _metrics: &Metrics,
    ) -> Flow {
        self.seen.fetch_add(1, Ordering::Relaxed);
        match req.header(&http::HeaderName::from_static("x-api-key")) {
            Some(b"bad") => {
                let mut response = http::Response::new(ProxyBody::full("bad key\n".into()));
                *response.status_mut() = http::StatusCode::UNAUTHORIZED;
                Flow::Reply(response)
            }
            Some(key) => {
                if let Ok(v) = http::HeaderValue::from_bytes(key) {
                    state.add_request_headers().insert("x-key-checked", v);
                }
                let _ = route;
                Flow::Continue
            }
            None => Flow::Continue,
        }
    }

    fn on_response(
        &self,
        _route: &Route,
        _state: &mut FilterState,
        response: &mut http::Response<ProxyBody>,
    ) {
        response
            .headers_mut()
            .insert("x-api-key-filter", http::HeaderValue::from_static("saw it"));
    }
}

const DENY_ADMIN: &str = r#"
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-admin}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin"]}}]}]
"#;

fn start_with(yaml: &str, position: Position, filter: Arc<ApiKey>) -> warden_proxy::RunningProxy {
    let mut opts = ProxyOptions::loopback(inline(yaml));
    opts.http_filters = ChainExtensions(vec![(position, filter)]);
    Proxy::start(opts).expect("proxy starts")
}

#[tokio::test]
async fn an_added_filter_answers_edits_and_sees_responses_where_it_is_placed() {
    let up = echo_http("up").await;
    let yaml = http_config(up.addr, "", DENY_ADMIN);
    let filter = Arc::new(ApiKey::default());
    let proxy = start_with(&yaml, Position::After(RBAC.into()), filter.clone());
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();

    // Answered by the filter, with its own response phase skipped (it answered) but the
    // request counted.
    let r = c
        .get(format!("{base}/x"))
        .header("x-api-key", "bad")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.text().await.unwrap(), "bad key\n");

    // Passed on with a header for the upstream; the response marked on the way back.
    let r = c
        .get(format!("{base}/x"))
        .header("x-api-key", "good")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-api-key-filter"], "saw it");
    assert_eq!(
        r.headers()["x-echo-h-x-key-checked"],
        "good",
        "{:?}",
        r.headers()
    );

    // After RBAC: a denied request never reaches the filter.
    let before = filter.seen.load(Ordering::Relaxed);
    let r = c
        .get(format!("{base}/admin"))
        .header("x-api-key", "bad")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(filter.seen.load(Ordering::Relaxed), before);
    drop(proxy);

    // First in the chain: it answers before RBAC would have denied.
    let first = Arc::new(ApiKey::default());
    let proxy = start_with(&yaml, Position::First, first.clone());
    let base = format!("http://{}", addr(&proxy, 0));
    let r = c
        .get(format!("{base}/admin"))
        .header("x-api-key", "bad")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(first.seen.load(Ordering::Relaxed), 1);
    drop(proxy);
}
