//! Scripts checked once per config load: syntax errors carry the script's line, so a caller can
//! place them in the file they came from.

use std::fmt;
use std::sync::Arc;

/// A script that parsed: its name (for log lines and errors) and source.
#[derive(Debug, Clone)]
pub struct Script {
    pub name: Arc<str>,
    pub source: Arc<str>,
}

/// A syntax error at a line of a script (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: Option<u32>,
    pub message: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(
                f,
                "Lua syntax error at script line {line}: {}",
                self.message
            ),
            None => write!(f, "Lua syntax error: {}", self.message),
        }
    }
}

impl Script {
    /// Parse `source` (nothing runs); `name` names it in errors and log lines.
    pub fn compile(name: &str, source: &str) -> Result<Script, SyntaxError> {
        let lua = mlua::Lua::new();
        let chunk = lua.load(source).set_name(format!("={name}"));
        match chunk.into_function() {
            Ok(_) => Ok(Script {
                name: name.into(),
                source: source.into(),
            }),
            Err(mlua::Error::SyntaxError { message, .. }) => Err(locate(name, &message)),
            Err(e) => Err(SyntaxError {
                line: None,
                message: e.to_string(),
            }),
        }
    }
}

/// `name:LINE: message` (Lua's form for a `=name` chunk) split into line and message.
pub(crate) fn locate(name: &str, message: &str) -> SyntaxError {
    let rest = message
        .strip_prefix(name)
        .and_then(|r| r.strip_prefix(':'))
        .and_then(|r| r.split_once(':'));
    match rest.and_then(|(line, msg)| Some((line.parse().ok()?, msg))) {
        Some((line, msg)) => SyntaxError {
            line: Some(line),
            message: msg.trim().to_string(),
        },
        None => SyntaxError {
            line: None,
            message: message.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_name_the_script_line() {
        let cases: &[(&str, Option<u32>, &str)] = &[
            (
                "function envoy_on_request(h)\n  h:headers():add(\"a\", \"b\")\nend\n",
                None,
                "",
            ),
            (
                "function envoy_on_request(h)\n  local x = \n  if then\nend\n",
                Some(3),
                "unexpected symbol near 'if'",
            ),
            ("function envoy_on_request(h)\n", Some(2), "'end' expected"),
            ("x = = 1", Some(1), "unexpected symbol near '='"),
        ];
        for (src, line, msg) in cases {
            match Script::compile("envoy.lua", src) {
                Ok(_) => assert!(line.is_none(), "{src:?} should fail"),
                Err(e) => {
                    assert_eq!(e.line, *line, "{src:?}: {e}");
                    assert!(e.message.contains(msg), "{src:?}: {e}");
                }
            }
        }
    }

    #[test]
    fn a_message_without_a_line_is_kept_whole() {
        assert_eq!(locate("s", "odd").line, None);
        assert_eq!(locate("s", "s:12: bad").line, Some(12));
        assert_eq!(locate("s", "s:12: bad").message, "bad");
    }
}
