//! `*` wildcards of descriptor values: each `*` matches zero or more characters, anywhere in the
//! pattern, any number of times. Matched against `key_value` as the reference does.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wildcard {
    pattern: String,
}

impl Wildcard {
    pub fn new(pattern: impl Into<String>) -> Self {
        Wildcard {
            pattern: pattern.into(),
        }
    }

    /// Greedy glob match with single-star backtracking: O(len(text) * len(pattern)) worst case.
    pub fn matches(&self, text: &str) -> bool {
        let p = self.pattern.as_bytes();
        let t = text.as_bytes();
        let (mut pi, mut ti) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && p[pi] == b'*' {
                star = Some((pi, ti));
                pi += 1;
            } else if pi < p.len() && p[pi] == t[ti] {
                pi += 1;
                ti += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == b'*')
    }
}

#[cfg(test)]
mod tests {
    use super::Wildcard;

    #[test]
    fn stars_match_anywhere() {
        let cases = [
            ("k_foo*", "k_foo", true),
            ("k_foo*", "k_foobar", true),
            ("k_foo*", "k_fo", false),
            ("k_*bar", "k_foobar", true),
            ("k_*bar", "k_foobaz", false),
            ("k_a*b*c", "k_aXXbYYc", true),
            ("k_a*b*c", "k_aXXcYYb", false),
            ("k_*", "k_", true),
            ("k_/api/*/login", "k_/api/v1/login", true),
            ("k_/api/*/login", "k_/api/v1/logout", false),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(
                Wildcard::new(pattern).matches(text),
                want,
                "{pattern} vs {text}"
            );
        }
    }
}
