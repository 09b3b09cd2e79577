//! Quota leases: a client that asks for them (the [`LEASE_HEADER`] on its call) may be granted,
//! with an OK answer, a block of further requests for the same descriptor set, carried in
//! `RateLimitResponse.quota` (RLS v3's quota field, which Envoy does not implement). The client
//! admits those requests locally until the block is used up or `valid_until` (the end of the
//! shortest window) passes, then calls again. The pass-through cost of a global limit then falls
//! from one call per request to one per lease.
//!
//! Exactness: the block is reserved in the same `INCRBY` as the call's own hit (`1 + size`),
//! and only what fits under the limit is granted, so the requests admitted across all clients
//! never exceed the limit. A lease left unused when its window ends is lost (the limit admits
//! fewer, never more), so leases are a small fraction of the limit and only large limits get
//! them: with the defaults, 0.1% of the limit, at most 1000 requests, none below 1000 per unit.
//! Clients that do not ask (Envoy, `/json`) are answered exactly as the reference answers.
//!
//! `Quota.requests` counts the call's own request too: a client that receives `n` admits the
//! call's request and `n - 1` more.

use envoy_types::pb::google::protobuf::Timestamp;
use http::HeaderName;

/// Request metadata by which a client asks for leases (`warden-quota-lease: 1`).
pub const LEASE_HEADER: HeaderName = HeaderName::from_static("warden-quota-lease");

/// How large a lease may be (`QUOTA_LEASE_FRACTION`, `QUOTA_LEASE_MAX`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeasePolicy {
    /// Share of a limit's `requests_per_unit` one lease may hold; 0 turns leases off.
    pub fraction: f64,
    /// Cap on one lease's requests.
    pub max: u32,
}

impl LeasePolicy {
    /// The default (only calls that ask for leases get them; the embedded limiter never does).
    pub const SERVER_DEFAULT: LeasePolicy = LeasePolicy {
        fraction: 0.001,
        max: 1000,
    };

    /// Requests one lease may reserve under a limit of `requests_per_unit` (0: none).
    pub fn size_for(&self, requests_per_unit: u32) -> u32 {
        let share = (f64::from(requests_per_unit) * self.fraction).floor();
        (share.min(f64::from(self.max)).max(0.0)) as u32
    }
}

/// The end of the fixed window of `divider_secs` that holds `now_millis`, as a protobuf time.
pub fn window_end(now_millis: u64, divider_secs: u64) -> Timestamp {
    let window_ms = divider_secs.max(1) * 1000;
    let end_ms = (now_millis / window_ms + 1) * window_ms;
    Timestamp {
        seconds: i64::try_from(end_ms / 1000).unwrap_or(i64::MAX),
        nanos: ((end_ms % 1000) * 1_000_000) as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_size_is_a_capped_share_of_the_limit() {
        let p = LeasePolicy::SERVER_DEFAULT;
        assert_eq!(p.size_for(100), 0, "small limits stay exact");
        assert_eq!(p.size_for(999), 0);
        assert_eq!(p.size_for(1000), 1);
        assert_eq!(p.size_for(250_000), 250);
        assert_eq!(p.size_for(1_000_000_000), 1000, "capped");
        let off = LeasePolicy { fraction: 0.0, ..p };
        assert_eq!(off.size_for(u32::MAX), 0);
    }

    #[test]
    fn window_end_is_the_next_boundary() {
        let t = window_end(61_500, 60);
        assert_eq!((t.seconds, t.nanos), (120, 0));
        let t = window_end(5_999, 1);
        assert_eq!((t.seconds, t.nanos), (6, 0));
        let t = window_end(6_000, 1);
        assert_eq!((t.seconds, t.nanos), (7, 0), "a boundary starts a window");
    }
}
