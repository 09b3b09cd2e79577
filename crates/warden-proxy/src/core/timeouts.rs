//! A downstream connection's timeouts, with Envoy's names: `request_headers_timeout` (a
//! request head must be complete this long after its first byte: slowloris), `idle_timeout`
//! (a keep-alive connection with no request in progress is closed after this long; Envoy's
//! default is 1 h), `max_connection_duration` (closed between requests after this long) and
//! `stream_idle_timeout` (a request whose body stops arriving for this long is ended: 408 if
//! nothing was answered yet, else the stream is reset; Envoy's default is 5 min; applied by
//! `upstream::body` to HTTP/1 bodies and HTTP/2 streams alike).
//!
//! The fast path keeps one timer per connection and re-arms it only when it fires
//! ([`ConnClock`]): re-arming a timer for every request, as hyper's header timeout does, cost
//! about a tenth of a direct response.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub request_headers: Option<Duration>,
    pub idle: Option<Duration>,
    pub max_connection_duration: Option<Duration>,
    pub stream_idle: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            request_headers: Some(Duration::from_secs(10)),
            idle: Some(Duration::from_secs(3600)),
            max_connection_duration: None,
            stream_idle: Some(Duration::from_secs(300)),
        }
    }
}

/// Which timeout ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// Answer 408 and close.
    RequestHeaders,
    /// Close.
    Idle,
    MaxDuration,
    /// A request body stalled (answered 408 when nothing was answered yet).
    StreamIdle,
}

/// When a connection started, was last active, and when the head it is reading began.
#[derive(Debug, Clone, Copy)]
pub struct ConnClock {
    started: Instant,
    last_active: Instant,
    head_started: Option<Instant>,
}

impl ConnClock {
    pub fn new(now: Instant) -> Self {
        ConnClock {
            started: now,
            last_active: now,
            head_started: None,
        }
    }

    /// After a read and the answers to it: `answered` if a request was taken from the buffer,
    /// `partial` if bytes of an unfinished head are left in it.
    pub fn after_read(&mut self, now: Instant, answered: bool, partial: bool) {
        self.last_active = now;
        self.head_started = match (partial, answered) {
            (false, _) => None,
            (true, true) => Some(now),
            (true, false) => self.head_started.or(Some(now)),
        };
    }

    /// The earliest deadline that applies now, and what runs out then.
    pub fn deadline(&self, t: &Timeouts) -> Option<(Instant, Expired)> {
        let head = match self.head_started {
            Some(at) => t.request_headers.map(|d| (at + d, Expired::RequestHeaders)),
            None => t.idle.map(|d| (self.last_active + d, Expired::Idle)),
        };
        let max = t
            .max_connection_duration
            .map(|d| (self.started + d, Expired::MaxDuration));
        match (head, max) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

/// What a request-head timeout answers before closing (Envoy: 408, `request_header_timeout`).
pub const REQUEST_TIMEOUT_RESPONSE: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_follows_the_connection_state() {
        let t = Timeouts {
            request_headers: Some(Duration::from_secs(10)),
            idle: Some(Duration::from_secs(60)),
            max_connection_duration: Some(Duration::from_secs(100)),
            stream_idle: None,
        };
        let t0 = Instant::now();
        let s = |n| t0 + Duration::from_secs(n);
        let mut c = ConnClock::new(t0);
        assert_eq!(c.deadline(&t), Some((s(60), Expired::Idle)));
        // A trickled head keeps its first byte's deadline.
        c.after_read(s(1), false, true);
        c.after_read(s(5), false, true);
        assert_eq!(c.deadline(&t), Some((s(11), Expired::RequestHeaders)));
        // Answered, nothing left: idle from then.
        c.after_read(s(6), true, false);
        assert_eq!(c.deadline(&t), Some((s(66), Expired::Idle)));
        // Pipelined: a request answered and the next one's start left over.
        c.after_read(s(7), true, true);
        assert_eq!(c.deadline(&t), Some((s(17), Expired::RequestHeaders)));
        c.after_read(s(95), true, false);
        assert_eq!(c.deadline(&t), Some((s(100), Expired::MaxDuration)));
        let none = Timeouts {
            request_headers: None,
            idle: None,
            max_connection_duration: None,
            stream_idle: None,
        };
        assert_eq!(c.deadline(&none), None);
    }
}
