//! The human-readable report (hey/fortio layout): summary, latency percentiles, a histogram drawn
//! with bars, status codes, errors, bytes.

use super::{buckets, Report, PERCENTILES};
use std::fmt::Write;
use std::time::Duration;

const BAR_WIDTH: u64 = 40;

/// `1.234 ms`, `12.3 s`, `850 µs`.
pub fn format_latency(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.3} ms", us / 1e3)
    } else {
        format!("{:.3} s", us / 1e6)
    }
}

fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

impl Report {
    pub fn requested_rate_text(&self) -> String {
        if self.requested_qps > 0.0 {
            format!("{} req/s", self.requested_qps)
        } else {
            "max".to_string()
        }
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_text(&mut out);
        out
    }

    fn write_text(&self, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "Target       {} ({}), {} connections, {} sockets opened",
            self.target, self.protocol, self.connections, self.sockets
        )?;
        writeln!(
            out,
            "Requests     {} in {:.3} s: {} completed, {} failed",
            self.requests(),
            self.duration.as_secs_f64(),
            self.completed(),
            self.failed()
        )?;
        writeln!(
            out,
            "Rate         achieved {:.1} req/s, requested {}",
            self.achieved_rps(),
            self.requested_rate_text()
        )?;
        if self.completed() > 0 {
            writeln!(
                out,
                "Latency      min {}, avg {}, max {}",
                format_latency(self.min()),
                format_latency(self.mean()),
                format_latency(self.max())
            )?;
            let pcts: Vec<String> = PERCENTILES
                .iter()
                .map(|p| format!("p{p} {}", format_latency(self.percentile(*p))))
                .collect();
            writeln!(out, "             {}", pcts.join(", "))?;
            if self.latency_corrected {
                writeln!(
                    out,
                    "             (from each request's intended send time: coordinated omission corrected)"
                )?;
            }
            writeln!(out, "Histogram")?;
            let bars = buckets(&self.latency, 12);
            let peak = bars.iter().map(|b| b.count).max().unwrap_or(1).max(1);
            for b in &bars {
                let len = (b.count * BAR_WIDTH).div_ceil(peak);
                writeln!(
                    out,
                    "  {:>11} .. {:<11} {:>9}  {:5.1}% |{}",
                    format_latency(Duration::from_micros(b.start)),
                    format_latency(Duration::from_micros(b.end)),
                    b.count,
                    b.cumulative_percent,
                    "■".repeat(len as usize)
                )?;
            }
        }
        if !self.status_codes.is_empty() {
            let codes: Vec<String> = self
                .status_codes
                .iter()
                .map(|(code, n)| format!("{code}: {n}"))
                .collect();
            writeln!(out, "Status codes {}", codes.join(", "))?;
        }
        if !self.errors.is_empty() {
            let errors: Vec<String> = self
                .errors
                .iter()
                .map(|(kind, n)| format!("{kind}: {n}"))
                .collect();
            writeln!(out, "Errors       {}", errors.join(", "))?;
        }
        writeln!(
            out,
            "Bytes        sent {}, received {} ({})",
            format_bytes(self.bytes_sent),
            format_bytes(self.bytes_received),
            if self.protocol == crate::load::Protocol::Tcp {
                "payload"
            } else {
                "bodies"
            }
        )
    }
}
