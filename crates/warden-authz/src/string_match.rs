//! Istio's string values: `v` exact, `v*` prefix, `*v` suffix, `*` present and non-empty.

/// One value of `hosts`, `paths`, `methods`, a header or SNI condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pattern {
    Exact(Box<[u8]>),
    Prefix(Box<[u8]>),
    Suffix(Box<[u8]>),
    Present,
}

impl Pattern {
    /// Parse like Istio's matcher: only a leading or trailing `*` is special.
    pub(crate) fn parse(value: &str) -> Pattern {
        if value == "*" {
            Pattern::Present
        } else if let Some(rest) = value.strip_prefix('*') {
            Pattern::Suffix(rest.as_bytes().into())
        } else if let Some(rest) = value.strip_suffix('*') {
            Pattern::Prefix(rest.as_bytes().into())
        } else {
            Pattern::Exact(value.as_bytes().into())
        }
    }

    /// Hosts compare case-insensitively (CVE-2021-39155); store them lowercased.
    pub(crate) fn parse_host(value: &str) -> Pattern {
        Pattern::parse(&value.to_ascii_lowercase())
    }

    pub(crate) fn matches(&self, value: &[u8]) -> bool {
        match self {
            Pattern::Exact(v) => value == &v[..],
            Pattern::Prefix(v) => value.starts_with(v),
            Pattern::Suffix(v) => value.ends_with(v),
            Pattern::Present => !value.is_empty(),
        }
    }

    /// For patterns built with [`Pattern::parse_host`].
    pub(crate) fn matches_ignore_case(&self, value: &[u8]) -> bool {
        let eq = |a: &[u8], b: &[u8]| a.eq_ignore_ascii_case(b);
        match self {
            Pattern::Exact(v) => eq(value, v),
            Pattern::Prefix(v) => value.len() >= v.len() && eq(&value[..v.len()], v),
            Pattern::Suffix(v) => value.len() >= v.len() && eq(&value[value.len() - v.len()..], v),
            Pattern::Present => !value.is_empty(),
        }
    }
}

pub(crate) fn any_match(patterns: &[Pattern], value: &[u8]) -> bool {
    patterns.iter().any(|p| p.matches(value))
}

pub(crate) fn any_match_ignore_case(patterns: &[Pattern], value: &[u8]) -> bool {
    patterns.iter().any(|p| p.matches_ignore_case(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istio_string_forms() {
        let cases = [
            ("/admin", "/admin", true),
            ("/admin", "/admin/", false),
            ("/api/*", "/api/v1", true),
            ("/api/*", "/api", false),
            ("*.png", "/a/b.png", true),
            ("*.png", "/a/b.jpg", false),
            ("*", "x", true),
            ("*", "", false),
            ("a*b", "a*b", true),
            ("a*b", "axb", false),
        ];
        for (pattern, value, expected) in cases {
            assert_eq!(
                Pattern::parse(pattern).matches(value.as_bytes()),
                expected,
                "{pattern} vs {value}"
            );
        }
    }

    #[test]
    fn hosts_ignore_case_but_not_ports() {
        let p = Pattern::parse_host("Example.COM");
        assert!(p.matches_ignore_case(b"example.com"));
        assert!(p.matches_ignore_case(b"EXAMPLE.com"));
        assert!(!p.matches_ignore_case(b"example.com:80"));
        assert!(Pattern::parse_host("example.com:*").matches_ignore_case(b"EXAMPLE.com:8080"));
        assert!(Pattern::parse_host("*.Example.com").matches_ignore_case(b"a.example.COM"));
    }
}
