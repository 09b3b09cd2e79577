//! A DestinationRule's `outlierDetection`: Envoy's consecutive-error ejection. An endpoint
//! that answers `consecutive5xxErrors` 5xx in a row (or `consecutiveGatewayErrors` 502/503/504;
//! connect failures, resets and timeouts count as both, Envoy's default without split local
//! origin errors) is left out of load balancing for `baseEjectionTime` x the times it was
//! ejected (capped at max(300 s, base), Envoy's `max_ejection_time`), while at most
//! `maxEjectionPercent` of the endpoints are out (at least one may always be). Below
//! `minHealthPercent` healthy endpoints ejection is ignored (Envoy's panic threshold; Istio's
//! default 0 disables it, so with every endpoint out requests get 503 UH).
//!
//! Times are passed in (`now`), so the rules are tested without waiting.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use warden_config::kinds::destination_rule::OutlierDetection;

#[derive(Debug, Clone, PartialEq)]
pub struct OutlierPolicy {
    /// 0: off.
    pub consecutive_5xx: u32,
    pub consecutive_gateway: u32,
    pub base_ejection: Duration,
    pub max_ejection_percent: u32,
    pub min_health_percent: u32,
}

impl OutlierPolicy {
    /// Istio's translation: an unset count keeps Envoy's default (5 consecutive 5xx enforced,
    /// gateway errors not); the deprecated `consecutiveErrors` is gateway errors.
    pub fn from_config(od: &OutlierDetection) -> Result<Self, String> {
        let duration = |t: &Option<String>, default: Duration| match t {
            Some(t) => warden_config::parse_duration(t),
            None => Ok(default),
        };
        Ok(OutlierPolicy {
            consecutive_5xx: od.consecutive_5xx_errors.unwrap_or(5),
            consecutive_gateway: od
                .consecutive_gateway_errors
                .or(od.consecutive_errors)
                .unwrap_or(0),
            base_ejection: duration(&od.base_ejection_time, Duration::from_secs(30))?,
            max_ejection_percent: od.max_ejection_percent.unwrap_or(10),
            min_health_percent: od.min_health_percent.unwrap_or(0),
        })
    }

    fn max_ejection(&self) -> Duration {
        self.base_ejection.max(Duration::from_secs(300))
    }
}

/// What an attempt to an endpoint came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Status(u16),
    /// Connect failure, reset or timeout: counted as a 503.
    LocalFailure,
}

#[derive(Debug, Default)]
struct EndpointState {
    consecutive_5xx: AtomicU32,
    consecutive_gateway: AtomicU32,
    /// Milliseconds since the detector's epoch; 0: not ejected.
    ejected_until: AtomicU64,
    times_ejected: AtomicU32,
}

/// One cluster's detector: a state per endpoint, by index.
#[derive(Debug)]
pub struct OutlierDetector {
    pub policy: OutlierPolicy,
    epoch: Instant,
    endpoints: Box<[EndpointState]>,
}

impl OutlierDetector {
    pub fn new(policy: OutlierPolicy, endpoints: usize, epoch: Instant) -> Self {
        OutlierDetector {
            policy,
            epoch,
            endpoints: (0..endpoints).map(|_| EndpointState::default()).collect(),
        }
    }

    fn millis(&self, now: Instant) -> u64 {
        // 0 means "not ejected", so the epoch's own millisecond counts as 1.
        u64::try_from(now.saturating_duration_since(self.epoch).as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn ejected_at(&self, i: usize, now_ms: u64) -> bool {
        self.endpoints
            .get(i)
            .is_some_and(|e| e.ejected_until.load(Ordering::Relaxed) > now_ms)
    }

    fn ejected_count(&self, now_ms: u64) -> usize {
        (0..self.endpoints.len())
            .filter(|&i| self.ejected_at(i, now_ms))
            .count()
    }

    /// Whether endpoint `i` is ejected now, and how many times it has been (the admin
    /// `/clusters`' health flag).
    pub fn ejection(&self, i: usize, now: Instant) -> (bool, u32) {
        let times = self
            .endpoints
            .get(i)
            .map_or(0, |e| e.times_ejected.load(Ordering::Relaxed));
        (self.ejected_at(i, self.millis(now)), times)
    }

    /// Whether load balancing should skip endpoint `i` now.
    pub fn skips(&self, i: usize, now: Instant) -> bool {
        let now_ms = self.millis(now);
        if !self.ejected_at(i, now_ms) {
            return false;
        }
        let n = self.endpoints.len();
        let healthy = n - self.ejected_count(now_ms);
        // Panic mode: too few healthy endpoints, so ejection is ignored.
        healthy * 100 >= n * self.policy.min_health_percent as usize
    }

    pub fn record(&self, i: usize, outcome: Outcome, now: Instant) {
        let Some(state) = self.endpoints.get(i) else {
            return;
        };
        let status = match outcome {
            Outcome::Status(s) => s,
            Outcome::LocalFailure => 503,
        };
        let bump = |counter: &AtomicU32, hit: bool| {
            if hit {
                counter.fetch_add(1, Ordering::Relaxed) + 1
            } else {
                counter.store(0, Ordering::Relaxed);
                0
            }
        };
        let five = bump(&state.consecutive_5xx, status >= 500);
        let gateway = bump(&state.consecutive_gateway, matches!(status, 502..=504));
        let p = &self.policy;
        let tripped = (p.consecutive_5xx > 0 && five >= p.consecutive_5xx)
            || (p.consecutive_gateway > 0 && gateway >= p.consecutive_gateway);
        if tripped {
            self.eject(i, state, now);
        }
    }

    fn eject(&self, i: usize, state: &EndpointState, now: Instant) {
        let now_ms = self.millis(now);
        if self.ejected_at(i, now_ms) {
            return;
        }
        let n = self.endpoints.len();
        let out = self.ejected_count(now_ms);
        let allowed = out == 0 || (out + 1) * 100 <= n * self.policy.max_ejection_percent as usize;
        if !allowed {
            return;
        }
        let times = state.times_ejected.fetch_add(1, Ordering::Relaxed) + 1;
        let ejection = self
            .policy
            .base_ejection
            .saturating_mul(times)
            .min(self.policy.max_ejection());
        let until = now_ms.saturating_add(u64::try_from(ejection.as_millis()).unwrap_or(u64::MAX));
        state.ejected_until.store(until, Ordering::Relaxed);
        state.consecutive_5xx.store(0, Ordering::Relaxed);
        state.consecutive_gateway.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(five: u32, percent: u32) -> OutlierPolicy {
        OutlierPolicy {
            consecutive_5xx: five,
            consecutive_gateway: 0,
            base_ejection: Duration::from_secs(30),
            max_ejection_percent: percent,
            min_health_percent: 0,
        }
    }

    #[test]
    fn consecutive_5xx_eject_for_base_times_count() {
        let t0 = Instant::now();
        let d = OutlierDetector::new(policy(2, 100), 2, t0);
        d.record(0, Outcome::Status(500), t0);
        assert!(!d.skips(0, t0));
        // A success in between resets the run.
        d.record(0, Outcome::Status(200), t0);
        d.record(0, Outcome::Status(503), t0);
        assert!(!d.skips(0, t0));
        d.record(0, Outcome::LocalFailure, t0);
        assert!(d.skips(0, t0));
        assert!(d.skips(0, t0 + Duration::from_secs(29)));
        assert!(!d.skips(0, t0 + Duration::from_secs(31)));
        // Ejected a second time: twice as long.
        let t1 = t0 + Duration::from_secs(40);
        d.record(0, Outcome::Status(500), t1);
        d.record(0, Outcome::Status(500), t1);
        assert!(d.skips(0, t1 + Duration::from_secs(59)));
        assert!(!d.skips(0, t1 + Duration::from_secs(61)));
        assert!(!d.skips(1, t1));
    }

    #[test]
    fn max_ejection_percent_keeps_endpoints_in_but_one_may_always_go() {
        let t0 = Instant::now();
        let d = OutlierDetector::new(policy(1, 10), 3, t0);
        d.record(0, Outcome::Status(500), t0);
        d.record(1, Outcome::Status(500), t0);
        assert!(d.skips(0, t0), "at least one endpoint may be ejected");
        assert!(!d.skips(1, t0), "a second would exceed 10%");
    }

    #[test]
    fn gateway_errors_count_502_to_504_only() {
        let t0 = Instant::now();
        let mut p = policy(0, 100);
        p.consecutive_gateway = 2;
        let d = OutlierDetector::new(p, 1, t0);
        d.record(0, Outcome::Status(500), t0);
        d.record(0, Outcome::Status(502), t0);
        assert!(!d.skips(0, t0));
        d.record(0, Outcome::Status(504), t0);
        assert!(d.skips(0, t0));
    }

    #[test]
    fn min_health_percent_ignores_ejection_below_it() {
        let t0 = Instant::now();
        let mut p = policy(1, 100);
        p.min_health_percent = 60;
        let d = OutlierDetector::new(p, 2, t0);
        d.record(0, Outcome::Status(500), t0);
        // One of two healthy is 50% < 60%: panic mode, both stay in.
        assert!(!d.skips(0, t0));
    }
}
