//! What `check()` tells the proxy: pass or 429, which headers to add where, who decided.

/// The limiter's decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No consulted bucket was empty (or no limiter applied).
    Allowed,
    /// A bucket was empty. `enforced: false` is shadow mode: count, add the
    /// not-enforced request headers, and pass the request on.
    Limited { enforced: bool },
}

/// Envoy's DRAFT_VERSION_03 `x-ratelimit-*` values, added to every response (upstream or 429)
/// of a request the limiter consulted, when the group enables them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// `x-ratelimit-limit`: the bucket's max tokens.
    pub limit: u64,
    /// `x-ratelimit-remaining`: whole tokens left.
    pub remaining: u64,
    /// `x-ratelimit-reset`: whole seconds until the next token.
    pub reset: u64,
}

// HeaderName constants, not &str: inserting by &str re-validates the name on every response.
pub const X_RATELIMIT_LIMIT: http::HeaderName =
    http::HeaderName::from_static(RateLimitHeaders::NAMES[0]);
pub const X_RATELIMIT_REMAINING: http::HeaderName =
    http::HeaderName::from_static(RateLimitHeaders::NAMES[1]);
pub const X_RATELIMIT_RESET: http::HeaderName =
    http::HeaderName::from_static(RateLimitHeaders::NAMES[2]);
const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: http::HeaderName = http::HeaderName::from_static("grpc-message");

impl RateLimitHeaders {
    /// The three names, in the order [`Self::values`] gives their values.
    pub const NAMES: [&'static str; 3] = [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ];

    /// The values of [`Self::NAMES`], for a writer that renders them itself.
    pub fn values(&self) -> [u64; 3] {
        [self.limit, self.remaining, self.reset]
    }

    /// Set the three headers on a response.
    pub fn apply(&self, headers: &mut http::HeaderMap) {
        headers.insert(X_RATELIMIT_LIMIT, repeated_value(&LAST_LIMIT, self.limit));
        headers.insert(
            X_RATELIMIT_REMAINING,
            repeated_value(&LAST_REMAINING, self.remaining),
        );
        headers.insert(X_RATELIMIT_RESET, number_value(self.reset));
    }
}

/// Values below this are rendered once and shared.
const SHARED_NUMBERS: u64 = 1024;

/// `n` as a header value. Limits, remaining tokens and seconds to reset are almost always
/// small; an attacker's every 429 carries three of them, and rendering each one allocates.
fn number_value(n: u64) -> http::HeaderValue {
    static SHARED: std::sync::OnceLock<Vec<http::HeaderValue>> = std::sync::OnceLock::new();
    let shared = SHARED.get_or_init(|| (0..SHARED_NUMBERS).map(http::HeaderValue::from).collect());
    usize::try_from(n)
        .ok()
        .and_then(|i| shared.get(i))
        .cloned()
        .unwrap_or_else(|| n.into())
}

type LastRendered = std::cell::RefCell<Option<(u64, http::HeaderValue)>>;

thread_local! {
    static LAST_LIMIT: LastRendered = const { std::cell::RefCell::new(None) };
    static LAST_REMAINING: LastRendered = const { std::cell::RefCell::new(None) };
}

/// A large number that tends to repeat, as a header value: the last one rendered on this
/// thread for that header is kept (shared, not re-rendered and allocated). A rule's limit is
/// the same on every response; under a policy that does not trigger, buckets stay full, so
/// `remaining` repeats too.
fn repeated_value(last: &'static std::thread::LocalKey<LastRendered>, n: u64) -> http::HeaderValue {
    if n < SHARED_NUMBERS {
        return number_value(n);
    }
    last.with_borrow_mut(|last| match last {
        Some((m, v)) if *m == n => v.clone(),
        _ => {
            let v = http::HeaderValue::from(n);
            *last = Some((n, v.clone()));
            v
        }
    })
}

/// Body of Envoy's local 429 (18 bytes).
pub const LIMITED_BODY: &str = "local_rate_limited";

/// The local reply for an enforced limit.
#[derive(Debug, Clone, Copy)]
pub struct LimitedResponse<'a> {
    /// 429 unless configured otherwise (values below 400 become 429, as in Envoy).
    pub status: http::StatusCode,
    /// gRPC status for gRPC requests: 14 (UNAVAILABLE) or 8 (RESOURCE_EXHAUSTED).
    pub grpc_status: u8,
    /// `response_headers_to_add`: only ever on the 429.
    pub headers: &'a [(http::HeaderName, http::HeaderValue)],
    /// `Retry-After` seconds: a banned client's remaining ban.
    pub retry_after: Option<u64>,
}

impl LimitedResponse<'_> {
    /// Build the reply: `text/plain` body `local_rate_limited`; for gRPC (`grpc = true`) a
    /// trailers-only 200 with `grpc-status`/`grpc-message`. `body` turns the text into the
    /// proxy's body type. `x-ratelimit-*` headers are added separately from the outcome.
    #[inline]
    pub fn build<B>(&self, grpc: bool, body: impl FnOnce(&'static str) -> B) -> http::Response<B> {
        let mut resp = if grpc {
            let mut r = http::Response::new(body(""));
            let h = r.headers_mut();
            h.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            h.insert(GRPC_STATUS, u64::from(self.grpc_status).into());
            h.insert(GRPC_MESSAGE, http::HeaderValue::from_static(LIMITED_BODY));
            r
        } else {
            let mut r = http::Response::new(body(LIMITED_BODY));
            *r.status_mut() = self.status;
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain"),
            );
            r
        };
        for (name, value) in self.headers {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(http::header::RETRY_AFTER, number_value(secs));
        }
        resp
    }
}

/// Which group and rule decided, for metrics and the access log (`RL` flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecidedBy<'a> {
    /// `RateLimitPolicy/<name>` or the EnvoyFilter's `stat_prefix`.
    pub group: &'a str,
    /// E.g. `RateLimitPolicy/per-ip spec.local.rules[0]`.
    pub rule: &'a str,
    /// The same, shared: kept past the request (`/ratelimit/top`) without a copy.
    pub label: &'a std::sync::Arc<str>,
}

#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    pub decision: Decision,
    /// Present when a consulted group enables x-ratelimit headers; the tightest one wins.
    pub rate_limit_headers: Option<RateLimitHeaders>,
    /// The limited request's group/rule (None when allowed).
    pub decided_by: Option<DecidedBy<'a>>,
    /// Set exactly when `decision` is `Limited { enforced: true }`.
    pub response: Option<LimitedResponse<'a>>,
    /// `request_headers_to_add_when_not_enforced`, for a shadow-limited request.
    pub request_headers_to_add: &'a [(http::HeaderName, http::HeaderValue)],
}

impl Outcome<'_> {
    pub const fn allowed() -> Self {
        Outcome {
            decision: Decision::Allowed,
            rate_limit_headers: None,
            decided_by: None,
            response: None,
            request_headers_to_add: &[],
        }
    }

    /// True when the proxy must answer with `response` instead of forwarding.
    pub fn is_rejected(&self) -> bool {
        self.response.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_render_the_same_shared_or_not() {
        for n in [
            0,
            1,
            300,
            SHARED_NUMBERS - 1,
            SHARED_NUMBERS,
            86_400,
            u64::MAX,
        ] {
            assert_eq!(number_value(n), http::HeaderValue::from(n), "{n}");
            // Twice: rendered, then from the per-thread cache.
            for last in [&LAST_LIMIT, &LAST_REMAINING] {
                assert_eq!(repeated_value(last, n), http::HeaderValue::from(n), "{n}");
                assert_eq!(repeated_value(last, n), http::HeaderValue::from(n), "{n}");
            }
        }
    }
}
