//! The `--json` output: fortio's result JSON (`periodic.RunnerResults` + `fhttp.HTTPRunnerResults`
//! / `tcprunner.RunnerResults`) so tools that read fortio results read ours, plus a `Warden`
//! object with what fortio has no field for. Durations are in seconds, as fortio writes them,
//! except `ActualDuration` (nanoseconds, a Go `time.Duration`). Schema: crates/warden-load/README.md.

use super::{buckets, Report, PERCENTILES};
use crate::load::Protocol;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FortioResult {
    pub run_type: &'static str,
    pub labels: String,
    pub start_time: String,
    #[serde(rename = "RequestedQPS")]
    pub requested_qps: String,
    pub requested_duration: String,
    #[serde(rename = "ActualQPS")]
    pub actual_qps: f64,
    pub actual_duration: u64,
    pub num_threads: usize,
    pub version: &'static str,
    pub duration_histogram: FortioHistogram,
    pub errors_duration_histogram: FortioHistogram,
    pub exactly: u64,
    pub jitter: bool,
    pub uniform: bool,
    pub no_catch_up: bool,
    /// HTTP: status code -> count, with -1 for requests that got no response (fortio's
    /// convention). TCP: "OK" and each error kind.
    pub ret_codes: BTreeMap<String, u64>,
    #[serde(rename = "URL")]
    pub url: String,
    pub socket_count: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub abort_on: i32,
    pub warden: WardenExtras,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FortioHistogram {
    pub count: u64,
    pub min: f64,
    pub max: f64,
    pub sum: f64,
    pub avg: f64,
    pub std_dev: f64,
    pub data: Vec<FortioBucket>,
    pub percentiles: Vec<FortioPercentile>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FortioBucket {
    pub start: f64,
    pub end: f64,
    /// Cumulative percentage up to the end of this bucket.
    pub percent: f64,
    pub count: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FortioPercentile {
    pub percentile: f64,
    pub value: f64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct WardenExtras {
    pub protocol: String,
    pub connections: usize,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    /// Error kind -> count ("connection refused", "timeout", ...).
    pub errors: BTreeMap<String, u64>,
    /// True when latency counts from intended send times (fixed-rate runs).
    pub latency_corrected: bool,
}

fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}

fn histogram(hist: &Histogram<u64>) -> FortioHistogram {
    if hist.is_empty() {
        return FortioHistogram {
            count: 0,
            min: 0.0,
            max: 0.0,
            sum: 0.0,
            avg: 0.0,
            std_dev: 0.0,
            data: Vec::new(),
            percentiles: Vec::new(),
        };
    }
    FortioHistogram {
        count: hist.len(),
        min: seconds(hist.min()),
        max: seconds(hist.max()),
        sum: hist.mean() * hist.len() as f64 / 1e6,
        avg: hist.mean() / 1e6,
        std_dev: hist.stdev() / 1e6,
        data: buckets(hist, 20)
            .into_iter()
            .map(|b| FortioBucket {
                start: seconds(b.start),
                end: seconds(b.end),
                percent: b.cumulative_percent,
                count: b.count,
            })
            .collect(),
        percentiles: PERCENTILES
            .iter()
            .map(|p| FortioPercentile {
                percentile: *p,
                value: seconds(hist.value_at_percentile(*p)),
            })
            .collect(),
    }
}

impl Report {
    pub fn to_fortio(&self) -> FortioResult {
        let mut ret_codes: BTreeMap<String, u64> = BTreeMap::new();
        if self.protocol == Protocol::Tcp {
            if self.completed() > 0 {
                ret_codes.insert("OK".into(), self.completed());
            }
            for (kind, n) in &self.errors {
                ret_codes.insert(kind.clone(), *n);
            }
        } else {
            for (code, n) in &self.status_codes {
                ret_codes.insert(code.to_string(), *n);
            }
            if self.failed() > 0 {
                ret_codes.insert("-1".into(), self.failed());
            }
        }
        let requested_duration = match (self.requested_requests, self.requested_duration) {
            (Some(n), _) => format!("exactly {n} calls"),
            (None, Some(d)) => format!("{}s", d.as_secs_f64()),
            (None, None) => String::new(),
        };
        FortioResult {
            run_type: if self.protocol == Protocol::Tcp {
                "TCP"
            } else {
                "HTTP"
            },
            labels: String::new(),
            start_time: humantime::format_rfc3339_millis(self.start_time).to_string(),
            requested_qps: self.requested_rate_text().replace(" req/s", ""),
            requested_duration,
            actual_qps: self.achieved_rps(),
            actual_duration: u64::try_from(self.duration.as_nanos()).unwrap_or(u64::MAX),
            num_threads: self.connections,
            version: concat!("warden-load ", env!("CARGO_PKG_VERSION")),
            duration_histogram: histogram(&self.latency),
            errors_duration_histogram: histogram(&self.error_latency),
            exactly: self.requested_requests.unwrap_or(0),
            jitter: false,
            uniform: false,
            no_catch_up: false,
            ret_codes,
            url: self.target.clone(),
            socket_count: self.sockets,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            abort_on: 0,
            warden: WardenExtras {
                protocol: self.protocol.to_string(),
                connections: self.connections,
                requests: self.requests(),
                completed: self.completed(),
                failed: self.failed(),
                errors: self.errors.clone(),
                latency_corrected: self.latency_corrected,
            },
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.to_fortio()).unwrap_or_default()
    }
}
