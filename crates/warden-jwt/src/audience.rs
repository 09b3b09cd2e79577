//! `jwt_verify_lib`'s `CheckAudience`: audiences compared without an `http://` or `https://`
//! scheme and without a trailing `/`; a rule without audiences allows any.

/// A short list, compared one by one: rules name one to three audiences, and a hash of each
/// token audience (checked on every request, cached tokens too) costs more than the scan.
#[derive(Debug, Clone, Default)]
pub struct Audiences(Vec<String>);

fn sanitize(aud: &str) -> &str {
    let a = aud
        .strip_prefix("http://")
        .or_else(|| aud.strip_prefix("https://"))
        .unwrap_or(aud);
    a.strip_suffix('/').unwrap_or(a)
}

impl Audiences {
    pub fn new<'a>(configured: impl IntoIterator<Item = &'a String>) -> Audiences {
        let mut list: Vec<String> = Vec::new();
        for a in configured {
            let a = sanitize(a);
            if !list.iter().any(|b| b == a) {
                list.push(a.to_owned());
            }
        }
        Audiences(list)
    }

    /// Whether a token with these `aud` values is allowed.
    pub fn allow(&self, token_audiences: &[String]) -> bool {
        self.0.is_empty()
            || token_audiences
                .iter()
                .any(|a| self.0.iter().any(|b| b == sanitize(a)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audiences_compare_without_scheme_and_slash() {
        let configured = vec![
            "https://api.example.com/".to_owned(),
            "bookstore".to_owned(),
        ];
        let a = Audiences::new(&configured);
        let cases: [(&[&str], bool); 6] = [
            (&["api.example.com"], true),
            (&["http://api.example.com"], true),
            (&["bookstore/"], true),
            (&["other", "bookstore"], true),
            (&["other"], false),
            (&[], false),
        ];
        for (token, want) in cases {
            let t: Vec<String> = token.iter().map(|s| s.to_string()).collect();
            assert_eq!(a.allow(&t), want, "{token:?}");
        }
        assert!(Audiences::new(&[]).allow(&[]));
    }
}
