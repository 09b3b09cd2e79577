//! From the reference's statsd stat names to the Prometheus series its exporter makes of them:
//! `SanitizeStatName` (`:` and `|` to `_`, the dots of IPv4 addresses to `_`), then the
//! mappings of `src/stats/prom/default_mapper.yaml` as statsd_exporter applies them (globs
//! first, whole-name and one segment per `*`; then the regexes in order, unanchored), and
//! statsd_exporter's `EscapeMetricName` for names no mapping takes.

/// A Prometheus series: metric name and labels (sorted by name, as client_golang writes them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Series {
    pub name: String,
    pub labels: Vec<(&'static str, String)>,
}

/// The per-limit stats the mapper knows, in the order of its regex mappings.
const MAPPED_LIMIT_STATS: [&str; 7] = [
    "near_limit",
    "over_limit",
    "total_hits",
    "within_limit",
    "shadow_mode",
    // warden's ban stats (docs/ratelimit-bans.md), labelled like the reference's.
    "banned",
    "ban_started",
];

const PREFIX: &str = "ratelimit.service.rate_limit.";

/// `utils.SanitizeStatName`.
pub fn sanitize(name: &str) -> String {
    let replaced = name.replace([':', '|'], "_");
    let bytes = replaced.as_bytes();
    let mut out = String::with_capacity(replaced.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match ipv4_at(bytes, i) {
            Some(end) => {
                out.push_str(&replaced[copied..i]);
                out.push_str(&replaced[i..end].replace('.', "_"));
                copied = end;
                i = end;
            }
            None => i += 1,
        }
    }
    out.push_str(&replaced[copied..]);
    out
}

/// The end of a match of `\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}` starting at `start` (Go's
/// leftmost-first semantics: the last group takes up to three digits).
fn ipv4_at(b: &[u8], start: usize) -> Option<usize> {
    let mut pos = start;
    for group in 0..4 {
        let run = b[pos..].iter().take_while(|c| c.is_ascii_digit()).count();
        if run == 0 {
            return None;
        }
        if group < 3 {
            // A shorter run would leave a digit where the dot must be.
            if run > 3 || b.get(pos + run) != Some(&b'.') {
                return None;
            }
            pos += run + 1;
        } else {
            pos += run.min(3);
        }
    }
    Some(pos)
}

/// statsd_exporter's `EscapeMetricName`: characters outside `[a-zA-Z0-9_]` become `_` (the
/// second of two dashes is dropped), and a leading digit gets a `_` before it.
pub fn escape_metric_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    let mut prev = '\0';
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else if c == '-' && prev == '-' {
            continue; // prev stays '-', as in the Go code
        } else {
            out.push('_');
        }
        prev = c;
    }
    out
}

/// The series of the per-limit stat `stat` of the (unsanitized) stats key `key`
/// (`domain.k1_v1.k2...`).
pub fn limit_series(key: &str, stat: &str) -> Series {
    map(&format!("{PREFIX}{}.{stat}", sanitize(key)))
}

/// The series of `ratelimit.service.rate_limit.<domain>.domain_not_found`.
pub fn domain_not_found_series(domain: &str) -> Series {
    map(&format!("{PREFIX}{}.domain_not_found", sanitize(domain)))
}

/// The mapper applied to one full statsd counter name.
pub fn map(name: &str) -> Series {
    if let Some(rest) = name.strip_prefix(PREFIX) {
        let segments: Vec<&str> = rest.split('.').collect();
        // Globs `ratelimit.service.rate_limit.*.*.<stat>`: exactly two segments before it.
        if let [domain, key1, stat] = segments.as_slice() {
            if MAPPED_LIMIT_STATS.contains(stat) {
                return Series {
                    name: format!("ratelimit_service_rate_limit_{stat}"),
                    labels: vec![("domain", (*domain).into()), ("key1", (*key1).into())],
                };
            }
        }
        // Regexes `rate_limit\.([^.]*)\.([^.]*)\.([^.]*)(\..*)?\.<stat>`, unanchored: three
        // segments, then `.<stat>` anywhere in what follows (deeper levels are dropped).
        if let [domain, key1, key2, ..] = segments.as_slice() {
            let after = domain.len() + key1.len() + key2.len() + 2;
            let tail = rest.get(after..).unwrap_or("");
            for stat in MAPPED_LIMIT_STATS {
                if tail.contains(&format!(".{stat}")) {
                    return Series {
                        name: format!("ratelimit_service_rate_limit_{stat}"),
                        labels: vec![
                            ("domain", (*domain).into()),
                            ("key1", (*key1).into()),
                            ("key2", (*key2).into()),
                        ],
                    };
                }
            }
        }
    }
    Series {
        name: escape_metric_name(name),
        labels: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(s: &Series) -> Vec<(&str, &str)> {
        s.labels.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    #[test]
    fn ban_stats_are_labelled_like_the_limit_stats() {
        let one = limit_series("rl.remote_address_1.2.3.4", "banned");
        assert_eq!(one.name, "ratelimit_service_rate_limit_banned");
        let two = limit_series("rl.remote_address.PATH_/login", "ban_started");
        assert_eq!(two.name, "ratelimit_service_rate_limit_ban_started");
        assert_eq!(
            labels(&two),
            [
                ("domain", "rl"),
                ("key1", "remote_address"),
                ("key2", "PATH_/login")
            ]
        );
    }

    /// The reference's `TestFlushCounterWithDifferentLabels`: one level has no key2, deeper
    /// levels than two fold into the second one's series.
    #[test]
    fn levels_map_as_the_reference_sink_test_expects() {
        let one = limit_series("domain1.key1_val1", "over_limit");
        assert_eq!(one.name, "ratelimit_service_rate_limit_over_limit");
        assert_eq!(labels(&one), [("domain", "domain1"), ("key1", "key1_val1")]);
        let two = limit_series("domain1.key3_val3.key4_val4", "over_limit");
        let three = limit_series("domain1.key3_val3.key4_val4.key5_val5", "over_limit");
        assert_eq!(two, three);
        assert_eq!(
            labels(&two),
            [
                ("domain", "domain1"),
                ("key1", "key3_val3"),
                ("key2", "key4_val4")
            ]
        );
    }

    #[test]
    fn names_no_mapping_takes_are_escaped() {
        // The local-cache stat has no mapping of its own: one level keeps it apart under an
        // escaped name; from two levels the unanchored over_limit regex takes it.
        let one = limit_series("d.remote_address", "over_limit_with_local_cache");
        assert_eq!(
            one.name,
            "ratelimit_service_rate_limit_d_remote_address_over_limit_with_local_cache"
        );
        assert!(one.labels.is_empty());
        let two = limit_series("d.remote_address.PATH", "over_limit_with_local_cache");
        assert_eq!(two, limit_series("d.remote_address.PATH", "over_limit"));
        let nf = domain_not_found_series("my-domain");
        assert_eq!(
            nf.name,
            "ratelimit_service_rate_limit_my_domain_domain_not_found"
        );
        assert_eq!(
            map("ratelimit.service.global_shadow_mode").name,
            "ratelimit_service_global_shadow_mode"
        );
        assert_eq!(escape_metric_name("1a--b/c"), "_1a_b_c");
    }

    #[test]
    fn sanitize_as_the_reference() {
        assert_eq!(
            sanitize("d.remote_address_10.0.0.1.path_/a:b|c"),
            "d.remote_address_10_0_0_1.path_/a_b_c"
        );
        // Four digits cannot start a group: the match starts one later.
        assert_eq!(sanitize("k_1234.5.6.7"), "k_1234_5_6_7");
        assert_eq!(sanitize("k_1.2.3.45678"), "k_1_2_3_45678");
        assert_eq!(sanitize("v1.2.3"), "v1.2.3");
        // A client address as a descriptor value stays in one segment.
        let series = limit_series("d.remote_address_192.168.1.10", "total_hits");
        assert_eq!(
            labels(&series),
            [("domain", "d"), ("key1", "remote_address_192_168_1_10")]
        );
    }
}
