//! Which request goes next and when: a schedule shared by all connections.
//!
//! At a fixed rate, request `i` is due at `start + i / qps` whichever connection sends it, so
//! when the server stalls, requests queue up behind it and their latency counts from when they
//! were due (wrk2's correction of coordinated omission). At max rate, requests go as soon as a
//! connection is free. `-n` is an exact count: each slot is claimed by one atomic increment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug)]
pub struct Schedule {
    start: Instant,
    /// Requests per second; `None` = as fast as possible.
    qps: Option<f64>,
    limit: Option<u64>,
    deadline: Option<Instant>,
    claimed: AtomicU64,
}

/// When the claimed request should start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Due at this time (fixed rate); latency counts from it.
    At(Instant),
    /// Go now (max rate).
    Now,
}

/// How late tokio's millisecond timer may wake a sleeping connection without that counting as
/// latency: it is the generator's artifact, not the server's.
pub const TIMER_SLACK: Duration = Duration::from_millis(2);

impl Slot {
    /// Wait until the slot is due; returns the time latency counts from. A slot already due
    /// (the connection was busy: the server is behind) counts from its due time. A connection
    /// that slept counts from when it woke, unless it woke more than [`TIMER_SLACK`] late (the
    /// generator itself is overloaded), which again counts from the due time.
    pub async fn wait(self) -> Instant {
        match self {
            Slot::At(due) => {
                if Instant::now() >= due {
                    return due;
                }
                tokio::time::sleep_until(due).await;
                let woke = Instant::now();
                if woke - due <= TIMER_SLACK {
                    woke
                } else {
                    due
                }
            }
            Slot::Now => Instant::now(),
        }
    }
}

impl Schedule {
    pub fn new(
        start: Instant,
        qps: f64,
        limit: Option<u64>,
        duration: Option<Duration>,
    ) -> Schedule {
        Schedule {
            start,
            qps: (qps > 0.0).then_some(qps),
            limit,
            deadline: duration.map(|d| start + d),
            claimed: AtomicU64::new(0),
        }
    }

    pub fn is_fixed_rate(&self) -> bool {
        self.qps.is_some()
    }

    /// Claim the next request; `None` when the count or the duration is used up.
    pub fn next(&self) -> Option<Slot> {
        let index = self.claimed.fetch_add(1, Ordering::Relaxed);
        if self.limit.is_some_and(|limit| index >= limit) {
            return None;
        }
        match self.qps {
            Some(qps) => {
                let due = self.start + Duration::from_secs_f64(index as f64 / qps);
                match self.deadline {
                    Some(deadline) if due >= deadline => None,
                    _ => Some(Slot::At(due)),
                }
            }
            None => match self.deadline {
                Some(deadline) if Instant::now() >= deadline => None,
                _ => Some(Slot::Now),
            },
        }
    }

    /// Requests the schedule will hand out in total, when known in advance.
    pub fn expected(&self) -> Option<u64> {
        let by_rate = match (self.qps, self.deadline) {
            (Some(qps), Some(deadline)) => {
                Some(((deadline - self.start).as_secs_f64() * qps).ceil() as u64)
            }
            _ => None,
        };
        match (self.limit, by_rate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn fixed_rate_slots_are_evenly_spaced_and_end_at_the_deadline() {
        let start = Instant::now();
        let s = Schedule::new(start, 100.0, None, Some(Duration::from_secs(1)));
        let slots: Vec<_> = std::iter::from_fn(|| s.next()).collect();
        assert_eq!(slots.len(), 100);
        assert_eq!(slots[0], Slot::At(start));
        assert_eq!(slots[50], Slot::At(start + Duration::from_millis(500)));
        assert_eq!(s.expected(), Some(100));
    }

    #[tokio::test(start_paused = true)]
    async fn exact_count_wins_over_duration() {
        let s = Schedule::new(Instant::now(), 0.0, Some(7), Some(Duration::from_secs(60)));
        assert_eq!(std::iter::from_fn(|| s.next()).count(), 7);
        assert!(s.next().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn max_rate_stops_at_the_deadline() {
        let s = Schedule::new(Instant::now(), 0.0, None, Some(Duration::from_secs(1)));
        assert_eq!(s.next(), Some(Slot::Now));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(s.next(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_claimed_after_its_due_time_counts_from_its_due_time() {
        let start = Instant::now();
        let s = Schedule::new(start, 10.0, Some(3), None);
        let _ = s.next();
        let second = s.next().unwrap();
        tokio::time::advance(Duration::from_millis(450)).await;
        assert_eq!(second.wait().await, start + Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_future_slot_returns_its_due_time() {
        let start = Instant::now();
        let s = Schedule::new(start, 10.0, Some(3), None);
        let _ = s.next();
        let second = s.next().unwrap();
        assert_eq!(second.wait().await, start + Duration::from_millis(100));
        assert_eq!(Instant::now(), start + Duration::from_millis(100));
    }
}
