//! What a load run measured: the [`Report`], its text rendering and its fortio-style JSON.

mod buckets;
mod fortio_json;
mod text;

pub use buckets::{buckets, Bucket};

use crate::load::Protocol;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Percentiles shown in the text report and listed in the JSON.
pub const PERCENTILES: [f64; 5] = [50.0, 75.0, 90.0, 99.0, 99.9];

#[derive(Debug, Clone)]
pub struct Report {
    pub target: String,
    pub protocol: Protocol,
    pub connections: usize,
    /// 0 = as fast as possible.
    pub requested_qps: f64,
    pub requested_duration: Option<Duration>,
    pub requested_requests: Option<u64>,
    pub start_time: SystemTime,
    /// From the first request's start until the last connection finished.
    pub duration: Duration,
    /// Completed exchanges, in microseconds.
    pub latency: Histogram<u64>,
    /// Failed requests (connect errors, timeouts...), in microseconds.
    pub error_latency: Histogram<u64>,
    pub status_codes: BTreeMap<u16, u64>,
    pub errors: BTreeMap<String, u64>,
    /// Body bytes (HTTP) or payload bytes (TCP).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Connections opened.
    pub sockets: u64,
    /// Latency counted from each request's intended send time (fixed-rate runs).
    pub latency_corrected: bool,
}

impl Report {
    /// Every request that was attempted: completed plus failed.
    pub fn requests(&self) -> u64 {
        self.latency.len() + self.error_latency.len()
    }

    /// Requests that got a response (any status) or a full TCP echo.
    pub fn completed(&self) -> u64 {
        self.latency.len()
    }

    pub fn failed(&self) -> u64 {
        self.error_latency.len()
    }

    pub fn achieved_rps(&self) -> f64 {
        self.requests() as f64 / self.duration.as_secs_f64().max(1e-9)
    }

    /// Latency at a percentile (0..=100) of completed requests.
    pub fn percentile(&self, p: f64) -> Duration {
        Duration::from_micros(self.latency.value_at_percentile(p))
    }

    pub fn min(&self) -> Duration {
        Duration::from_micros(self.latency.min())
    }

    pub fn max(&self) -> Duration {
        Duration::from_micros(self.latency.max())
    }

    pub fn mean(&self) -> Duration {
        Duration::from_secs_f64(self.latency.mean() / 1e6)
    }

    /// True when requests were attempted and none got an answer (the CLI exits non-zero).
    pub fn all_failed(&self) -> bool {
        self.completed() == 0 && self.failed() > 0
    }
}
