//! "Did you mean" for misspelt names: the closest candidate by edit distance (transpositions
//! count as one edit), when it is close enough to be a typo rather than another word.

/// The candidate closest to `word`, if it is within a typo's distance: one edit for names of up
/// to 4 letters, two up to 8, three beyond. Ties go to the first candidate.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = match word.chars().count() {
        0..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    let lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| {
            (
                strsim::damerau_levenshtein(&lower, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn suggests_the_nearest_name_within_a_typos_distance() {
        let http_route = [
            "name",
            "match",
            "route",
            "redirect",
            "directResponse",
            "delegate",
            "rewrite",
            "timeout",
            "retries",
            "fault",
            "mirror",
            "mirrors",
            "corsPolicy",
            "headers",
        ];
        let cases = [
            ("rout", &http_route[..], Some("route")),
            ("matchs", &http_route[..], Some("match")),
            ("mirors", &http_route[..], Some("mirrors")),
            ("retires", &http_route[..], Some("retries")),
            ("timout", &http_route[..], Some("timeout")),
            (
                "destnation",
                &["destination", "weight", "headers"][..],
                Some("destination"),
            ),
            (
                "hots",
                &["hosts", "gateways", "http", "tcp", "tls", "exportTo"][..],
                Some("hosts"),
            ),
            ("prefx", &["exact", "prefix", "regex"][..], Some("prefix")),
            (
                "locaton",
                &["hosts", "addresses", "ports", "location", "resolution"][..],
                Some("location"),
            ),
            ("Route", &http_route[..], Some("route")),
            ("xyz", &http_route[..], None),
            ("sourceLabels", &http_route[..], None),
            ("", &http_route[..], None),
        ];
        for (word, candidates, want) in cases {
            assert_eq!(closest(word, candidates.iter().copied()), want, "{word}");
        }
    }
}
