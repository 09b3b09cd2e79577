//! Local (per-proxy) rate limiting with Envoy `local_ratelimit` semantics. Pure, no I/O.
//!
//! # Using it from the proxy
//!
//! ```ignore
//! // On (re)load, off the hot path; keep it in the snapshot behind the ArcSwap.
//! let limiter = LocalLimiter::from_config(&loaded.set, LimiterOptions::default(), old.as_deref())?;
//! for w in limiter.warnings() { tracing::warn!("{w}") }
//!
//! // Per accepted TCP connection (L4 limit): close without writing when false.
//! if !limiter.check_connection(gateway, peer_ip) { return; }
//!
//! // Per request, after routing and authorization, before the global limiter:
//! let outcome = limiter.check(&RequestAttrs { client_ip, method, path, headers, gateway,
//!                                             virtual_service, destination_cluster });
//! if let Some(reply) = outcome.response {          // enforced: 429 "local_rate_limited"
//!     let mut resp = reply.build(is_grpc, |text| Full::new(Bytes::from_static(text.as_bytes())));
//!     if let Some(h) = outcome.rate_limit_headers { h.apply(resp.headers_mut()) }
//!     return resp;                                  // never reaches the upstream
//! }
//! for (n, v) in outcome.request_headers_to_add { req.headers_mut().insert(n.clone(), v.clone()); }
//! // ... forward; then on the upstream response:
//! if let Some(h) = outcome.rate_limit_headers { h.apply(resp.headers_mut()) }
//! ```
//!
//! # Semantics
//! * Token buckets are Envoy's atomic bucket ([`token_bucket`]): start full, refill
//!   continuously, one CAS per allowed request, a plain load per rejected one.
//! * A [`warden_config::RateLimitPolicy`] is one group (like one Envoy filter with
//!   Envoy Gateway's translation): its selector-less rule is the default bucket (unlimited if
//!   absent), other rules are descriptors; matched buckets are consumed strictest first and the
//!   first empty one denies; enabled and enforced 100%, `x-ratelimit-*` headers on.
//!   Buckets are per rule (shared by every route the policy targets).
//! * An EnvoyFilter `local_ratelimit` patch is one group with Envoy's own defaults
//!   (filter_enabled/enforced absent = 0%, `always_consume_default_token_bucket` true,
//!   x-ratelimit headers off unless `DRAFT_VERSION_03`); descriptors come from
//!   `rate_limits` actions ([`envoy::actions`]). Wildcard descriptors are bounded by the
//!   limiter-wide key cap rather than `max_dynamic_descriptors`.
//! * `Distinct` keys live in a bounded [`key_table::KeyTable`] (default 1M keys) with batch
//!   eviction of idle, then least recently used, keys; evictions are counted.
//! * On reload, rules whose definition is unchanged keep their bucket state.
//! * Escalating bans ([`ban_table`]): a bounded per-client table beside the buckets; the
//!   caller asks it before the buckets and records an offence when a bucket refuses
//!   (not wired to a config field yet).
//! * `spec.global` rules and the global `ratelimit` EnvoyFilter patches are parsed and
//!   validated only: [`global::compile_global_rules`], [`envoy::interpret`].

#![forbid(unsafe_code)]

pub mod ban_table;
pub mod clock;
mod compile;
mod connection;
pub mod envoy;
pub mod fraction;
pub mod global;
mod group;
pub mod key_table;
mod limiter;
pub mod outcome;
mod problem;
pub mod request;
pub mod selector;
pub mod stats;
pub mod token_bucket;

pub use ban_table::{BanTable, LocalBan};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use key_table::{TableStats, DEFAULT_MAX_KEYS};
pub use limiter::{LimiterOptions, LocalLimiter};
pub use outcome::{
    DecidedBy, Decision, LimitedResponse, Outcome, RateLimitHeaders, LIMITED_BODY,
    X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
pub use request::RequestAttrs;
pub use stats::GroupStats;
