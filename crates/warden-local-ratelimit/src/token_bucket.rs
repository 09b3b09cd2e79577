//! Envoy's atomic token bucket: one atomic timestamp per bucket, continuous refill, starts full.
//!
//! Envoy keeps `T` with `tokens = min(max, (now - T) * rate)`. We store the equivalent
//! "theoretical arrival time" `tat = T + capacity` (GCRA form) so that a never-used bucket is
//! simply `tat = 0` (full) and no negative times are needed. A rejection only reads the atomic,
//! so a flood against an empty bucket does not bounce its cache line between cores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Envoy rejects fill intervals shorter than this.
pub const MIN_FILL_INTERVAL: Duration = Duration::from_millis(50);

/// The shape of a bucket: capacity and refill rate, in integer nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketSpec {
    pub max_tokens: u64,
    pub tokens_per_fill: u64,
    pub fill_interval: Duration,
    /// Nanoseconds per token (0 = unlimited: rate above one token per nanosecond).
    interval_ns: u64,
    /// `max_tokens * interval_ns`: how far ahead of `now` the arrival time may run.
    capacity_ns: u64,
}

/// What one consumption attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consumed {
    pub allowed: bool,
    /// Whole tokens left after this request.
    pub remaining: u64,
    /// Whole seconds until the next token (0 when one is available), as Envoy's
    /// `x-ratelimit-reset` computes it (integer division, i.e. floor).
    pub reset_secs: u64,
}

impl BucketSpec {
    /// A bucket holding `max_tokens`, refilled by `tokens_per_fill` every `fill_interval`
    /// (continuously, at that average rate). All inputs must be non-zero.
    pub fn new(max_tokens: u64, tokens_per_fill: u64, fill_interval: Duration) -> Self {
        let fill_ns = u64::try_from(fill_interval.as_nanos()).unwrap_or(u64::MAX);
        let interval_ns = fill_ns / tokens_per_fill.max(1);
        let capacity_ns = max_tokens.saturating_mul(interval_ns);
        Self {
            max_tokens,
            tokens_per_fill,
            fill_interval,
            interval_ns,
            capacity_ns,
        }
    }

    /// Tokens per second, for ordering buckets from strictest to loosest.
    pub fn rate_per_sec(&self) -> f64 {
        self.tokens_per_fill as f64 / self.fill_interval.as_secs_f64().max(1e-9)
    }

    pub fn is_unlimited(&self) -> bool {
        self.interval_ns == 0
    }

    /// Take one token from the bucket whose state is `tat`.
    #[inline]
    pub fn try_consume(&self, tat: &AtomicU64, now: u64) -> Consumed {
        if self.interval_ns == 0 {
            return Consumed {
                allowed: true,
                remaining: self.max_tokens,
                reset_secs: 0,
            };
        }
        let mut current = tat.load(Ordering::Acquire);
        loop {
            let base = current.max(now);
            let next = base.saturating_add(self.interval_ns);
            if next - now > self.capacity_ns {
                return Consumed {
                    allowed: false,
                    remaining: 0,
                    reset_secs: self.reset_secs(base, now),
                };
            }
            match tat.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return Consumed {
                        allowed: true,
                        remaining: (self.capacity_ns - (next - now)) / self.interval_ns,
                        reset_secs: self.reset_secs(next, now),
                    }
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Whole tokens available now, without consuming.
    pub fn available(&self, tat: &AtomicU64, now: u64) -> u64 {
        if self.interval_ns == 0 {
            return self.max_tokens;
        }
        let debt = tat.load(Ordering::Acquire).max(now) - now;
        self.capacity_ns.saturating_sub(debt) / self.interval_ns
    }

    /// True when the bucket is full again, so forgetting it loses nothing.
    pub fn is_idle(tat: &AtomicU64, now: u64) -> bool {
        tat.load(Ordering::Relaxed) <= now
    }

    fn reset_secs(&self, tat: u64, now: u64) -> u64 {
        // Tokens available (scaled to ns) = capacity - debt; a whole token is available when
        // that is >= interval. Otherwise wait for the missing part of the next token.
        let debt = tat.max(now) - now;
        let avail_ns = self.capacity_ns.saturating_sub(debt);
        if avail_ns >= self.interval_ns {
            return 0;
        }
        let wait_ns = self.interval_ns - avail_ns;
        wait_ns / 1_000_000 / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn starts_full_and_rejects_the_301st_of_a_burst() {
        let spec = BucketSpec::new(300, 300, Duration::from_secs(60));
        let tat = AtomicU64::new(0);
        let now = 5 * SEC;
        for i in 0..300 {
            let c = spec.try_consume(&tat, now);
            assert!(c.allowed, "request {i}");
            assert_eq!(c.remaining, 299 - i);
        }
        let c = spec.try_consume(&tat, now);
        assert!(!c.allowed);
        assert_eq!(c.remaining, 0);
        assert_eq!(spec.available(&tat, now), 0);
    }

    #[test]
    fn refills_continuously_at_the_configured_rate() {
        // 10 per minute: one token every 6 s.
        let spec = BucketSpec::new(10, 10, Duration::from_secs(60));
        let tat = AtomicU64::new(0);
        let mut now = 100 * SEC;
        for _ in 0..10 {
            assert!(spec.try_consume(&tat, now).allowed);
        }
        let denied = spec.try_consume(&tat, now);
        assert!(!denied.allowed);
        assert_eq!(denied.reset_secs, 6);
        now += 6 * SEC - 1;
        assert!(!spec.try_consume(&tat, now).allowed);
        now += 1;
        let c = spec.try_consume(&tat, now);
        assert!(c.allowed);
        assert_eq!(c.remaining, 0);
        assert!(!spec.try_consume(&tat, now).allowed);
        // A long idle period refills to max, never above.
        now += 3600 * SEC;
        assert_eq!(spec.available(&tat, now), 10);
        assert!(BucketSpec::is_idle(&tat, now));
    }

    #[test]
    fn burst_smaller_than_fill() {
        // max 2, refill 10/s: a burst of 2 then one every 100 ms.
        let spec = BucketSpec::new(2, 10, Duration::from_secs(1));
        let tat = AtomicU64::new(0);
        let now = SEC;
        assert!(spec.try_consume(&tat, now).allowed);
        assert!(spec.try_consume(&tat, now).allowed);
        assert!(!spec.try_consume(&tat, now).allowed);
        assert!(spec.try_consume(&tat, now + SEC / 10).allowed);
        assert!(!spec.try_consume(&tat, now + SEC / 10).allowed);
    }

    #[test]
    fn concurrent_consumers_never_overdraw() {
        let spec = BucketSpec::new(300, 300, Duration::from_secs(60));
        let tat = AtomicU64::new(0);
        let allowed = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        if spec.try_consume(&tat, 7 * SEC).allowed {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(allowed.load(Ordering::Relaxed), 300);
    }
}
