//! What one connection measured; merged into a [`crate::report::Report`] at the end.

use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::time::Duration;

/// Latencies are recorded in microseconds.
pub fn new_histogram(connections: usize) -> Histogram<u64> {
    // 3 significant digits cost ~100 KiB per histogram; with thousands of connections drop to 2.
    let sigfig = if connections <= 256 { 3 } else { 2 };
    // Sized for 60 s up front: merging into an auto-resized histogram lost its max in hdrhistogram
    // 7.5 (seen in this crate's tests); auto stays on for the rare longer value.
    let mut hist = Histogram::new_with_bounds(1, 60_000_000, sigfig)
        .expect("constant bounds and 2 or 3 significant digits are valid");
    hist.auto(true);
    hist
}

pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

#[derive(Debug, Clone)]
pub struct ConnStats {
    pub latency: Histogram<u64>,
    pub error_latency: Histogram<u64>,
    pub status_codes: BTreeMap<u16, u64>,
    pub errors: BTreeMap<&'static str, u64>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub sockets: u64,
}

impl ConnStats {
    pub fn new(connections: usize) -> ConnStats {
        ConnStats {
            latency: new_histogram(connections),
            error_latency: new_histogram(connections),
            status_codes: BTreeMap::new(),
            errors: BTreeMap::new(),
            bytes_sent: 0,
            bytes_received: 0,
            sockets: 0,
        }
    }

    /// A completed exchange; `status` is `None` for TCP.
    pub fn record_ok(&mut self, status: Option<u16>, latency: Duration, sent: u64, received: u64) {
        self.latency.saturating_record(micros(latency));
        if let Some(code) = status {
            *self.status_codes.entry(code).or_default() += 1;
        }
        self.bytes_sent += sent;
        self.bytes_received += received;
    }

    pub fn record_error(&mut self, kind: &'static str, latency: Duration) {
        self.error_latency.saturating_record(micros(latency));
        *self.errors.entry(kind).or_default() += 1;
    }

    pub fn merge(&mut self, other: &ConnStats) {
        // Same construction on both sides and auto-resize on, so `add` cannot fail on range.
        let _ = self.latency.add(&other.latency);
        let _ = self.error_latency.add(&other.error_latency);
        for (code, n) in &other.status_codes {
            *self.status_codes.entry(*code).or_default() += n;
        }
        for (kind, n) in &other.errors {
            *self.errors.entry(kind).or_default() += n;
        }
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
        self.sockets += other.sockets;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_everything() {
        let mut a = ConnStats::new(1);
        let mut b = ConnStats::new(1);
        a.record_ok(Some(200), Duration::from_millis(1), 10, 20);
        b.record_ok(Some(200), Duration::from_millis(3), 1, 2);
        b.record_ok(Some(503), Duration::from_millis(2), 1, 2);
        b.record_error("timeout", Duration::from_secs(1));
        b.sockets = 2;
        a.merge(&b);
        assert_eq!(a.latency.len(), 3);
        assert_eq!(a.error_latency.len(), 1);
        assert_eq!(a.status_codes, BTreeMap::from([(200, 2), (503, 1)]));
        assert_eq!(a.errors, BTreeMap::from([("timeout", 1)]));
        assert_eq!((a.bytes_sent, a.bytes_received, a.sockets), (12, 24, 2));
        let max = a.latency.max();
        assert!((2990..=3010).contains(&max), "max {max}");
    }
}
