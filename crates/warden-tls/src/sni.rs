//! Which of a port's servers a ClientHello's SNI selects, by the servers' host patterns as
//! Envoy's filter chain match orders them: an exact name first, then the longest matching
//! `*.suffix`, then `*` (which is also the only one a ClientHello without SNI selects).

/// How well `pattern` matches `sni`: `None` not at all; higher is more specific.
pub fn specificity(pattern: &str, sni: Option<&str>) -> Option<usize> {
    let pattern = pattern.trim_end_matches('.');
    if pattern == "*" {
        return Some(0);
    }
    let sni = sni?.trim_end_matches('.');
    if let Some(suffix) = pattern.strip_prefix('*') {
        // `*.example.com` matches `a.example.com`, not `example.com`.
        return (sni.len() > suffix.len()
            && sni
                .get(sni.len() - suffix.len()..)
                .is_some_and(|end| end.eq_ignore_ascii_case(suffix)))
        .then_some(suffix.len() + 1);
    }
    pattern.eq_ignore_ascii_case(sni).then_some(usize::MAX)
}

/// The index of the best candidate (the first of equals), each given by its host patterns.
pub fn pick<'a, I, P>(sni: Option<&str>, candidates: I) -> Option<usize>
where
    I: IntoIterator<Item = P>,
    P: IntoIterator<Item = &'a str>,
{
    let mut best: Option<(usize, usize)> = None;
    for (i, patterns) in candidates.into_iter().enumerate() {
        let score = patterns
            .into_iter()
            .filter_map(|p| specificity(p, sni))
            .max();
        if let Some(s) = score {
            if best.is_none_or(|(_, b)| s > b) {
                best = Some((i, s));
            }
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_beats_wildcard_beats_any() {
        let servers = [vec!["*"], vec!["*.example.com"], vec!["a.example.com"]];
        let p = |sni| pick(sni, servers.iter().map(|v| v.iter().copied()));
        assert_eq!(p(Some("a.example.com")), Some(2));
        assert_eq!(p(Some("B.example.com")), Some(1));
        assert_eq!(p(Some("example.com")), Some(0));
        assert_eq!(p(None), Some(0));
        let strict = [vec!["a.example.com"]];
        assert_eq!(pick(None, strict.iter().map(|v| v.iter().copied())), None);
        assert_eq!(
            pick(Some("other"), strict.iter().map(|v| v.iter().copied())),
            None
        );
    }
}
