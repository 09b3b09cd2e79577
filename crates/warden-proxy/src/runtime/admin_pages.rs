//! The admin pages Envoy's users read by hand: `/stats` (every counter and gauge as
//! `name: value`), `/clusters` (Envoy's `cluster::endpoint::stat::value` lines, with each
//! endpoint's health and outlier state) and `/server_info` (version, state, uptime, command
//! line). Rendered at request time from the text exposition and the snapshot.

use crate::upstream::cluster::Cluster;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// `/stats`: the samples of a text 0.0.4 exposition as Envoy's `name: value` lines, sorted;
/// histograms by their `_count` and `_sum` (buckets are for `/stats/prometheus`). `filter`
/// (Envoy's `?filter=` regex) keeps the lines whose name matches.
pub fn stats(text004: &str, filter: Option<&regex::Regex>) -> String {
    let mut lines: Vec<String> = text004
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = series.split('{').next().unwrap_or(series);
            if name.ends_with("_bucket") || filter.is_some_and(|f| !f.is_match(series)) {
                return None;
            }
            Some(format!("{series}: {value}"))
        })
        .collect();
    lines.sort();
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// `/clusters`: Envoy's text lines per cluster and endpoint.
pub fn clusters<'a>(clusters: impl Iterator<Item = &'a Cluster>, now: Instant) -> String {
    let mut out = String::new();
    for c in clusters {
        let name = &c.name;
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{name}::observability_name::{name}");
        if c.max_requests != u32::MAX {
            let _ = writeln!(
                out,
                "{name}::default_priority::max_requests::{}",
                c.max_requests
            );
        }
        if c.outlier.is_some() {
            let _ = writeln!(out, "{name}::outlier::detection::consecutive_errors");
        }
        for (i, e) in c.endpoints.iter().enumerate() {
            let at = &e.authority;
            let (ejected, times) = c
                .outlier
                .as_ref()
                .map_or((false, 0), |o| o.ejection(i, now));
            let health = if ejected {
                "/failed_outlier_check"
            } else {
                "healthy"
            };
            let _ = writeln!(out, "{name}::{at}::rq_active::{}", e.active());
            let _ = writeln!(out, "{name}::{at}::health_flags::{health}");
            let _ = writeln!(out, "{name}::{at}::outlier_ejections::{times}");
            let _ = writeln!(out, "{name}::{at}::weight::1");
        }
    }
    out
}

/// `/server_info`: what Envoy's holds that warden has.
pub fn server_info(
    state: &str,
    uptime: Duration,
    args: &[String],
    identity: &crate::core::identity::ProxyIdentity,
) -> serde_json::Value {
    let uptime = format!("{}s", uptime.as_secs());
    serde_json::json!({
        "version": concat!("warden/", env!("CARGO_PKG_VERSION")),
        "state": state,
        "uptime_current_epoch": uptime,
        "uptime_all_epochs": uptime,
        "command_line_options": { "argv": args },
        "node": {
            "namespace": identity.namespace,
            "labels": identity.labels,
            "mode": if identity.sidecar.is_some() { "sidecar" } else { "gateway" },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::cluster::{Endpoint, LbPolicy, UpstreamProtocol};

    #[test]
    fn stats_lines_are_envoys_name_value() {
        let text = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 3\n\
                    b 2\nh_bucket{le=\"1\"} 1\nh_sum 0.5\nh_count 1\n";
        assert_eq!(
            stats(text, None),
            "a_total{x=\"1\"}: 3\nb: 2\nh_count: 1\nh_sum: 0.5\n"
        );
        let f = regex::Regex::new("^h_").expect("regex");
        assert_eq!(stats(text, Some(&f)), "h_count: 1\nh_sum: 0.5\n");
    }

    #[test]
    fn clusters_list_endpoints_with_health() {
        let c = Cluster::new(
            "outbound|80||a.ns.svc.cluster.local".into(),
            vec![Endpoint::new("10.0.0.1:8080".parse().expect("authority"))],
            LbPolicy::RoundRobin,
            UpstreamProtocol::Http1,
            u32::MAX,
        );
        let text = clusters(std::iter::once(&c), Instant::now());
        assert!(text.contains(
            "outbound|80||a.ns.svc.cluster.local::10.0.0.1:8080::health_flags::healthy\n"
        ));
        assert!(text.contains("::10.0.0.1:8080::rq_active::0\n"));
    }
}
