//! A bound on what YAML aliases expand to, checked on the event stream before any value is
//! built: an alias bomb ("billion laughs": each anchor aliases the previous one ten times) is a
//! kilobyte of text that expands to gigabytes. serde-saphyr bounds aliases by replayed events,
//! not by the bytes they produce, so a 1 KB bomb still cost +256 MB while it was being built.
//!
//! The size of a node is counted as the bytes of its scalars plus a couple per node (what a
//! compact rendering of it would take); an alias counts its anchor's whole size. A file may
//! expand to at most [`FACTOR`] times its own size plus [`SLACK`] bytes, so loading any file
//! costs a bounded multiple of its size.

use granit_parser::{Event, Parser};
use std::collections::HashMap;

/// How many times its own size a file may expand to through aliases.
pub const FACTOR: u64 = 4;
/// Expansion any file may have, however small (anchors for shared snippets).
pub const SLACK: u64 = 64 * 1024;

/// Why a text is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// 1-based line of the alias that crossed the bound.
    pub line: usize,
    pub message: String,
}

/// Check `text`'s alias expansion. Syntax errors are left to the real parse, which reports them
/// with its own messages.
pub fn check(text: &str) -> Result<(), Refused> {
    // Without an anchor there is nothing to expand; most configs take this path.
    if !text.contains('&') {
        return Ok(());
    }
    let limit = (text.len() as u64)
        .saturating_mul(FACTOR)
        .saturating_add(SLACK);
    let mut anchors: HashMap<usize, u64> = HashMap::new();
    // Open collections: (anchor id, size so far).
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut total: u64 = 0;
    for item in Parser::new_from_str(text) {
        let Ok((event, span)) = item else {
            return Ok(());
        };
        let (size, part_of_parent) = match event {
            Event::Scalar(value, _, anchor, _) => {
                let size = value.len() as u64 + 1;
                if anchor != 0 {
                    anchors.insert(anchor, size);
                }
                (size, true)
            }
            // The collection's own bytes; it joins its parent's size when it ends.
            Event::SequenceStart(_, anchor, _) | Event::MappingStart(_, anchor, _) => {
                open.push((anchor, 2));
                (2, false)
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((anchor, size)) = open.pop() {
                    if anchor != 0 {
                        anchors.insert(anchor, size);
                    }
                    add_to_parent(&mut open, size);
                }
                continue;
            }
            Event::Alias(anchor) => (anchors.get(&anchor).copied().unwrap_or(1), true),
            _ => continue,
        };
        total = total.saturating_add(size);
        if part_of_parent {
            add_to_parent(&mut open, size);
        }
        if total > limit {
            return Err(refuse(span.start.line(), limit, text.len()));
        }
    }
    Ok(())
}

fn add_to_parent(open: &mut [(usize, u64)], size: u64) {
    if let Some((_, parent)) = open.last_mut() {
        *parent = parent.saturating_add(size);
    }
}

fn refuse(line: usize, limit: u64, len: usize) -> Refused {
    Refused {
        line: line.max(1),
        message: format!(
            "YAML aliases here would expand this {len}-byte file beyond {limit} bytes \
             ({FACTOR} times its size + {} KiB); refused before expanding them (an alias bomb?)",
            SLACK / 1024
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A billion-laughs document: `levels` anchors, each aliasing the previous one ten times.
    pub(crate) fn bomb(levels: usize) -> String {
        let mut text = String::from("a0: &a0 [\"lol\"]\n");
        for i in 1..levels {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        text
    }

    #[test]
    fn bombs_are_refused_at_the_alias_that_crosses_the_bound() {
        let text = bomb(10);
        assert!(text.len() < 1024, "{}", text.len());
        let refused = check(&text).unwrap_err();
        assert!(refused.message.contains("alias bomb"), "{refused:?}");
        assert!((5..=10).contains(&refused.line), "{refused:?}");
    }

    #[test]
    fn ordinary_anchors_and_texts_pass() {
        let shared = "base: &b {timeout: 5s, retries: {attempts: 3}}\n\
                      r1: {<<: *b, name: a}\nr2: {<<: *b, name: b}\nr3: *b\n";
        let cases = [
            "a: 1\n",
            "a: &x 1\nb: *x\n",
            shared,
            // Syntax errors are the parser's to report.
            "a: [1, 2\n",
            // An `&` that is no anchor.
            "a: 'x & y'\n",
            // An alias to an unknown anchor: the parser's error.
            "a: *nope\n",
        ];
        for text in cases {
            assert_eq!(check(text), Ok(()), "{text}");
        }
        // Many aliases of a small anchor are fine within the slack.
        let many = format!("a: &a [1, 2]\nb: [{}]\n", ["*a"; 1000].join(", "));
        assert_eq!(check(&many), Ok(()));
    }

    #[test]
    fn the_bound_grows_with_the_file() {
        // 4 aliases of a 40 KB scalar: 160 KB from a 40 KB file is within 4x + 64 KiB.
        let big = "x".repeat(40_000);
        let ok = format!("a: &a {big}\nb: [*a, *a, *a]\n");
        assert_eq!(check(&ok), Ok(()));
        let too_much = format!("a: &a {big}\nb: [{}]\n", ["*a"; 10].join(", "));
        assert!(check(&too_much).is_err());
    }
}
