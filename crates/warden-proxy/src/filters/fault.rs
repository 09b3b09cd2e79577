//! Envoy's `fault` filter with the route's `fault`: a delay (the request waits, flag DI) and an
//! abort (answered with its status, flag FI), each for its share of requests. Istio puts it
//! after the policies, just before the router.

use crate::core::local_reply::{LocalReply, ResponseFlag};
use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::core::share::draws;
use crate::filters::chain::{FilterState, Flow, HttpFilter, Verdict, VerdictFuture, FAULT};
use crate::routing::Route;

/// Stateless: the fault is the route's.
#[derive(Debug, Default)]
pub struct FaultFilter;

impl HttpFilter for FaultFilter {
    fn name(&self) -> &str {
        FAULT
    }

    #[inline]
    fn on_request(
        &self,
        _req: &RequestAttrs<'_>,
        route: &Route,
        _state: &mut FilterState,
        _metrics: &Metrics,
    ) -> Flow {
        if route.fault.is_some() {
            Flow::Wait
        } else {
            Flow::Continue
        }
    }

    fn on_request_waiting<'a>(
        &'a self,
        _req: &'a RequestAttrs<'a>,
        route: &'a Route,
        state: &'a mut FilterState,
        _metrics: &'a Metrics,
    ) -> VerdictFuture<'a> {
        Box::pin(async move {
            let Some(fault) = &route.fault else {
                return Verdict::Continue;
            };
            if let Some((delay, share)) = fault.delay {
                if draws(share) {
                    state.notes.flag = Some(ResponseFlag::DelayInjected);
                    tokio::time::sleep(delay).await;
                }
            }
            match fault.abort {
                Some((status, share)) if draws(share) => {
                    Verdict::Reply(LocalReply::fault_abort(status))
                }
                _ => Verdict::Continue,
            }
        })
    }

    fn reads_request_headers(&self) -> bool {
        false
    }
}
