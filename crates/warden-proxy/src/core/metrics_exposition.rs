//! Which Prometheus exposition a scrape gets, and the classic text format (0.0.4) made from
//! the OpenMetrics text `prometheus-client` writes.
//!
//! A scraper that does not ask for OpenMetrics in `Accept` (curl, older Prometheus, Envoy's
//! users' tooling) gets text 0.0.4, as Envoy's `/stats/prometheus` serves it: a counter's
//! `# TYPE`/`# HELP` name the series (`x_total`), no `# UNIT`, no `# EOF`. This runs once per
//! scrape, never on the request path.

use std::fmt::Write as _;

/// The two expositions, and their `content-type`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    Text004,
    OpenMetrics,
}

impl Exposition {
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::Text004 => "text/plain; version=0.0.4; charset=utf-8",
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// OpenMetrics only when `accept` lists it with a non-zero q (Prometheus' own scrapes
    /// do); anything else, no header included, gets text 0.0.4.
    pub fn negotiate(accept: Option<&[u8]>) -> Exposition {
        let Some(accept) = accept.and_then(|a| std::str::from_utf8(a).ok()) else {
            return Exposition::Text004;
        };
        let asks = accept.split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            media.eq_ignore_ascii_case("application/openmetrics-text")
                && parts.all(|p| {
                    p.strip_prefix("q=")
                        .is_none_or(|q| q.parse::<f32>().is_ok_and(|q| q > 0.0))
                })
        });
        if asks {
            Exposition::OpenMetrics
        } else {
            Exposition::Text004
        }
    }
}

/// The same samples as text 0.0.4: counters' metadata named for their `_total` series,
/// info metrics as gauges named `_info`, other OpenMetrics-only types as gauges, `unknown` as
/// `untyped`; `# UNIT` and `# EOF` dropped.
pub fn to_text004(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // `# HELP` comes before its `# TYPE`, whose type decides the name: held until then.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, help.take());
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (suffix, kind) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                "stateset" | "gaugehistogram" => ("", "gauge"),
                "unknown" => ("", "untyped"),
                other => ("", other),
            };
            let full = series_name(name, suffix);
            match help.take() {
                Some((h, text)) if h == name => {
                    let _ = writeln!(out, "# HELP {full} {text}");
                }
                other => flush_help(&mut out, other),
            }
            let _ = writeln!(out, "# TYPE {full} {kind}");
            continue;
        }
        flush_help(&mut out, help.take());
        out.push_str(line);
        out.push('\n');
    }
    flush_help(&mut out, help);
    out
}

/// `name` with `suffix`, unless it ends with it already (a counter registered as `x_total`).
fn series_name(name: &str, suffix: &str) -> String {
    if suffix.is_empty() || name.ends_with(suffix) {
        name.to_owned()
    } else {
        format!("{name}{suffix}")
    }
}

fn flush_help(out: &mut String, help: Option<(&str, &str)>) {
    if let Some((name, text)) = help {
        let _ = writeln!(out, "# HELP {name} {text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_accept_asks_for_it() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let cases: &[(Option<&str>, Exposition)] = &[
            (None, Exposition::Text004),
            (Some("*/*"), Exposition::Text004),
            (Some("text/plain"), Exposition::Text004),
            (Some(prometheus), Exposition::OpenMetrics),
            (
                Some("Application/OpenMetrics-Text; version=1.0.0"),
                Exposition::OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0, text/plain"),
                Exposition::Text004,
            ),
        ];
        for (accept, want) in cases {
            assert_eq!(
                Exposition::negotiate(accept.map(str::as_bytes)),
                *want,
                "{accept:?}"
            );
        }
    }

    #[test]
    fn text004_names_counters_by_their_series_and_drops_openmetrics_lines() {
        let om = "# HELP warden_http_requests HTTP requests.\n\
                  # TYPE warden_http_requests counter\n\
                  warden_http_requests_total{route=\"a\",code=\"200\"} 3\n\
                  # HELP istio_requests_total Requests.\n\
                  # TYPE istio_requests_total counter\n\
                  istio_requests_total 1\n\
                  # HELP warden_build Build.\n\
                  # TYPE warden_build info\n\
                  warden_build_info{version=\"1\"} 1\n\
                  # HELP d Duration.\n\
                  # TYPE d histogram\n\
                  # UNIT d seconds\n\
                  d_bucket{le=\"+Inf\"} 0\n\
                  # TYPE u unknown\n\
                  u 1\n\
                  # EOF\n";
        let want = "# HELP warden_http_requests_total HTTP requests.\n\
                    # TYPE warden_http_requests_total counter\n\
                    warden_http_requests_total{route=\"a\",code=\"200\"} 3\n\
                    # HELP istio_requests_total Requests.\n\
                    # TYPE istio_requests_total counter\n\
                    istio_requests_total 1\n\
                    # HELP warden_build_info Build.\n\
                    # TYPE warden_build_info gauge\n\
                    warden_build_info{version=\"1\"} 1\n\
                    # HELP d Duration.\n\
                    # TYPE d histogram\n\
                    d_bucket{le=\"+Inf\"} 0\n\
                    # TYPE u untyped\n\
                    u 1\n";
        assert_eq!(to_text004(om), want);
    }
}
