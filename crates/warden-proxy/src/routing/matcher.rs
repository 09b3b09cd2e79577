//! Compiled Istio `StringMatch` (exact / prefix / regex), so matching allocates nothing.

use regex::Regex;
use warden_config::kinds::virtual_service::StringMatch;

#[derive(Debug, Clone)]
pub enum StringMatcher {
    Exact(Box<str>),
    Prefix(Box<str>),
    /// Anchored: Istio/Envoy regexes must match the whole value.
    Regex(Regex),
    /// `{}` in YAML: the value must be present, anything goes.
    Present,
}

impl StringMatcher {
    /// Compile; `ignore_case` lowercases literals (the value is lowercased by the caller).
    pub fn compile(m: &StringMatch, ignore_case: bool) -> Result<Self, String> {
        let fold = |s: &str| -> Box<str> {
            if ignore_case {
                s.to_ascii_lowercase().into()
            } else {
                s.into()
            }
        };
        match (&m.exact, &m.prefix, &m.regex) {
            (Some(e), None, None) => Ok(StringMatcher::Exact(fold(e))),
            (None, Some(p), None) => Ok(StringMatcher::Prefix(fold(p))),
            (None, None, Some(r)) => {
                let pattern = if ignore_case {
                    format!("^(?i:{r})$")
                } else {
                    format!("^(?:{r})$")
                };
                Regex::new(&pattern)
                    .map(StringMatcher::Regex)
                    .map_err(|e| format!("invalid regex {r:?}: {e}"))
            }
            (None, None, None) => Ok(StringMatcher::Present),
            _ => Err("exactly one of exact, prefix or regex must be set".into()),
        }
    }

    pub fn matches(&self, value: &str) -> bool {
        match self {
            StringMatcher::Exact(e) => value == &**e,
            StringMatcher::Prefix(p) => value.starts_with(&**p),
            StringMatcher::Regex(r) => r.is_match(value),
            StringMatcher::Present => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sm(exact: Option<&str>, prefix: Option<&str>, regex: Option<&str>) -> StringMatch {
        StringMatch {
            exact: exact.map(Into::into),
            prefix: prefix.map(Into::into),
            regex: regex.map(Into::into),
        }
    }

    #[test]
    fn exact_prefix_regex() {
        let e = StringMatcher::compile(&sm(Some("/a"), None, None), false).unwrap();
        assert!(e.matches("/a") && !e.matches("/ab"));
        let p = StringMatcher::compile(&sm(None, Some("/a"), None), false).unwrap();
        assert!(p.matches("/ab") && !p.matches("/b"));
        let r = StringMatcher::compile(&sm(None, None, Some("/u/[0-9]+")), false).unwrap();
        assert!(r.matches("/u/42") && !r.matches("/u/42/x") && !r.matches("x/u/42"));
    }

    #[test]
    fn rejects_bad_regex_and_ambiguous_match() {
        assert!(StringMatcher::compile(&sm(None, None, Some("(")), false).is_err());
        assert!(StringMatcher::compile(&sm(Some("a"), Some("b"), None), false).is_err());
    }

    #[test]
    fn ignore_case_folds_literals() {
        let p = StringMatcher::compile(&sm(None, Some("/API"), None), true).unwrap();
        assert!(p.matches("/api/x"));
    }
}
