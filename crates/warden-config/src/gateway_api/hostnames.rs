//! Which hostnames a route serves on a listener: the Gateway API's intersection of the
//! listener's `hostname` and the route's `hostnames` (`*.example.com` covers one or more
//! labels in front of `example.com`, never `example.com` itself).

/// Whether `pattern` (a hostname, or a `*.` wildcard) covers `host` (which may itself be a
/// wildcard: `*.a.example.com` is covered by `*.example.com`). Case-insensitive.
pub fn covers(pattern: &str, host: &str) -> bool {
    if pattern.eq_ignore_ascii_case(host) {
        return true;
    }
    match pattern.strip_prefix('*') {
        Some(suffix) if suffix.starts_with('.') => {
            host.len() > suffix.len()
                && host
                    .get(host.len() - suffix.len()..)
                    .is_some_and(|tail| tail.eq_ignore_ascii_case(suffix))
        }
        _ => false,
    }
}

/// The hostnames a route with `route_hostnames` serves on a listener with `listener`
/// hostname: each route hostname the listener covers, and the listener's own hostname where a
/// route wildcard covers it. `["*"]` when neither sets any. Empty: they do not intersect
/// (the route is not accepted there: `NoMatchingListenerHostname`).
pub fn intersect(listener: Option<&str>, route_hostnames: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |h: &str| {
        let h = h.to_ascii_lowercase();
        if !out.contains(&h) {
            out.push(h);
        }
    };
    match (listener, route_hostnames.is_empty()) {
        (None, true) => push("*"),
        (None, false) => route_hostnames.iter().for_each(|h| push(h)),
        (Some(l), true) => push(l),
        (Some(l), false) => {
            for h in route_hostnames {
                if covers(l, h) {
                    push(h);
                } else if covers(h, l) {
                    push(l);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_cover_one_or_more_labels_not_the_apex() {
        let cases = [
            ("*.example.com", "foo.example.com", true),
            ("*.example.com", "a.b.example.com", true),
            ("*.example.com", "example.com", false),
            ("*.example.com", "*.foo.example.com", true),
            ("*.foo.example.com", "*.example.com", false),
            ("foo.example.com", "FOO.example.com", true),
            ("foo.example.com", "*.example.com", false),
            ("*.example.com", "fooexample.com", false),
        ];
        for (pattern, host, want) in cases {
            assert_eq!(covers(pattern, host), want, "{pattern} covers {host}");
        }
    }

    /// The spec's examples (HTTPRouteSpec.hostnames, Listener.hostname).
    #[test]
    fn listener_and_route_hostnames_intersect() {
        let s = |v: &[&str]| v.iter().map(|h| h.to_string()).collect::<Vec<_>>();
        let cases: [(Option<&str>, &[&str], &[&str]); 9] = [
            (None, &[], &["*"]),
            (None, &["foo.example.com"], &["foo.example.com"]),
            (Some("foo.example.com"), &[], &["foo.example.com"]),
            (
                Some("*.example.com"),
                &["foo.example.com", "bar.test.com"],
                &["foo.example.com"],
            ),
            (
                Some("foo.example.com"),
                &["*.example.com"],
                &["foo.example.com"],
            ),
            (
                Some("*.example.com"),
                &["*.example.com"],
                &["*.example.com"],
            ),
            (
                Some("*.example.com"),
                &["*.foo.example.com"],
                &["*.foo.example.com"],
            ),
            (Some("foo.example.com"), &["bar.example.com"], &[]),
            (Some("*.example.com"), &["example.com"], &[]),
        ];
        for (listener, route, want) in cases {
            assert_eq!(
                intersect(listener, &s(route)),
                s(want),
                "{listener:?} x {route:?}"
            );
        }
    }
}
