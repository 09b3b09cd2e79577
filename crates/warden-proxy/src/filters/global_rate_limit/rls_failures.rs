//! Failed rate limit service calls, logged without flooding: the first failure at once with
//! the service's address and the error, then at most one summary per interval with the counts
//! by reason (written when the next failure comes after the interval; quiet while the service
//! answers). Counting by reason for `/stats/prometheus` is the caller's.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_local_ratelimit::Clock;

/// How often a failing service is summarised.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(10);

/// Why a call failed, as counted and logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    Timeout,
    /// No connection (refused, unreachable, DNS).
    Unavailable,
    /// The service answered with a gRPC error status.
    Status,
    /// Neither OK nor OVER_LIMIT.
    UnknownCode,
    Embedded,
}

impl FailureReason {
    pub const ALL: [FailureReason; 5] = [
        Self::Timeout,
        Self::Unavailable,
        Self::Status,
        Self::UnknownCode,
        Self::Embedded,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
            Self::Status => "grpc_status",
            Self::UnknownCode => "unknown_code",
            Self::Embedded => "embedded",
        }
    }
}

/// What [`FailureLog::record`] says to write, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogLine {
    /// The first failure after a quiet interval: address and error.
    First { address: String, error: String },
    /// The failures of the interval that just ended, by reason, and the latest error.
    Summary {
        address: String,
        over: Duration,
        counts: Vec<(&'static str, u64)>,
        last_error: String,
    },
}

impl std::fmt::Display for LogLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogLine::First { address, error } => {
                write!(f, "rate limit service {address}: call failed: {error}")
            }
            LogLine::Summary {
                address,
                over,
                counts,
                last_error,
            } => {
                let total: u64 = counts.iter().map(|(_, n)| n).sum();
                let by: Vec<String> = counts.iter().map(|(r, n)| format!("{r}={n}")).collect();
                write!(
                    f,
                    "rate limit service {address}: {total} failed call(s) in the last {:.0?} \
                     ({}); last error: {last_error}",
                    over,
                    by.join(", ")
                )
            }
        }
    }
}

#[derive(Debug, Default)]
struct Window {
    /// When the current interval began (clock nanos); None before the first failure.
    started: Option<u64>,
    counts: [u64; 5],
    last_error: String,
}

/// The log state of one rate limit service.
pub struct FailureLog {
    address: String,
    interval: Duration,
    clock: Arc<dyn Clock>,
    window: Mutex<Window>,
}

impl std::fmt::Debug for FailureLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailureLog")
            .field("address", &self.address)
            .field("interval", &self.interval)
            .finish()
    }
}

impl FailureLog {
    pub fn new(address: String, interval: Duration, clock: Arc<dyn Clock>) -> Self {
        FailureLog {
            address,
            interval,
            clock,
            window: Mutex::new(Window::default()),
        }
    }

    /// Count one failure; returns the line to log now, if any.
    pub fn record(&self, reason: FailureReason, error: &dyn std::fmt::Display) -> Option<LogLine> {
        let now = self.clock.now_nanos();
        let interval = self.interval.as_nanos() as u64;
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let slot = FailureReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        match w.started {
            Some(start) if now.saturating_sub(start) < interval => {
                w.counts[slot] += 1;
                w.last_error = error.to_string();
                None
            }
            Some(_) if w.counts.iter().all(|n| *n == 0) => {
                // Quiet for a whole interval: this is a first failure again.
                *w = Window {
                    started: Some(now),
                    ..Window::default()
                };
                Some(LogLine::First {
                    address: self.address.clone(),
                    error: error.to_string(),
                })
            }
            Some(start) => {
                // The interval is over: summarise it (this failure included), start the next.
                w.counts[slot] += 1;
                let counts = FailureReason::ALL
                    .iter()
                    .zip(w.counts)
                    .filter(|(_, n)| *n > 0)
                    .map(|(r, n)| (r.label(), n))
                    .collect();
                let line = LogLine::Summary {
                    address: self.address.clone(),
                    over: Duration::from_nanos(now.saturating_sub(start)),
                    counts,
                    last_error: error.to_string(),
                };
                *w = Window {
                    started: Some(now),
                    ..Window::default()
                };
                Some(line)
            }
            None => {
                w.started = Some(now);
                Some(LogLine::First {
                    address: self.address.clone(),
                    error: error.to_string(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_local_ratelimit::ManualClock;

    #[test]
    fn first_failure_at_once_then_one_summary_per_interval() {
        let clock = Arc::new(ManualClock::new());
        let log = FailureLog::new("127.0.0.1:8081".into(), SUMMARY_INTERVAL, clock.clone());
        let first = log.record(FailureReason::Unavailable, &"connection refused");
        assert_eq!(
            first,
            Some(LogLine::First {
                address: "127.0.0.1:8081".into(),
                error: "connection refused".into()
            })
        );
        for _ in 0..99 {
            clock.advance(Duration::from_millis(50));
            assert_eq!(log.record(FailureReason::Timeout, &"timed out"), None);
        }
        // 4.95 s in: still the first interval.
        clock.advance(Duration::from_secs(6));
        let Some(LogLine::Summary { counts, over, .. }) =
            log.record(FailureReason::Unavailable, &"connection refused")
        else {
            panic!("a summary once the interval is over");
        };
        assert_eq!(counts, vec![("timeout", 99), ("unavailable", 1)]);
        assert!(over >= SUMMARY_INTERVAL);
        // The next interval counts on; after a quiet one, a failure is a first one again.
        clock.advance(Duration::from_secs(1));
        assert_eq!(log.record(FailureReason::Timeout, &"timed out"), None);
        clock.advance(Duration::from_secs(10));
        assert!(matches!(
            log.record(FailureReason::Timeout, &"timed out"),
            Some(LogLine::Summary { .. })
        ));
        clock.advance(Duration::from_secs(60));
        assert!(matches!(
            log.record(FailureReason::Timeout, &"timed out"),
            Some(LogLine::First { .. })
        ));
    }
}
