//! A header map as Envoy's Lua API sees it: ordered entries, names lower-cased, several values
//! per name kept apart, pseudo-headers (`:path`, `:method`, `:authority`, `:scheme`, `:status`)
//! first, in the same list.

/// Ordered header entries. Values are bytes: Lua strings need not be UTF-8.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderList {
    entries: Vec<(String, Vec<u8>)>,
}

impl HeaderList {
    pub fn new() -> Self {
        HeaderList::default()
    }

    pub const fn empty() -> Self {
        HeaderList {
            entries: Vec::new(),
        }
    }

    pub fn with_capacity(n: usize) -> Self {
        HeaderList {
            entries: Vec::with_capacity(n),
        }
    }

    /// Append an entry (the name is lower-cased, as HTTP/2 and Envoy's maps keep it).
    pub fn add(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        self.entries.push((lower(name), value.into()));
    }

    /// Envoy's `get`: the values of `name` joined by `,`, or None.
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        let name = lower(name);
        let mut values = self.entries.iter().filter(|(n, _)| *n == name);
        let first = values.next()?;
        let mut out = first.1.clone();
        for (_, v) in values {
            out.push(b',');
            out.extend_from_slice(v);
        }
        Some(out)
    }

    /// The first value of `name` (no copy, no joining).
    pub fn first(&self, name: &str) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// Envoy's `getAtIndex`: the `index`th (from 0) value of `name`.
    pub fn get_at_index(&self, name: &str, index: usize) -> Option<&[u8]> {
        self.entries
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .nth(index)
            .map(|(_, v)| v.as_slice())
    }

    /// Envoy's `getNumValues`.
    pub fn num_values(&self, name: &str) -> usize {
        self.entries
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    }

    /// Envoy's `replace`: every value of `name` goes, one `value` takes the first one's place
    /// (or is appended when there was none).
    pub fn replace(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        let name = lower(name);
        let value = value.into();
        match self.entries.iter().position(|(n, _)| *n == name) {
            Some(i) => {
                self.entries[i].1 = value;
                let mut j = 0;
                self.entries.retain(|(n, _)| {
                    let keep = j <= i || *n != name;
                    j += 1;
                    keep
                });
            }
            None => self.entries.push((name, value)),
        }
    }

    /// Envoy's `remove`: every value of `name`.
    pub fn remove(&mut self, name: &str) {
        self.entries.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_slice()))
    }

    /// The `i`th entry, for Lua's `pairs`.
    pub fn entry(&self, i: usize) -> Option<(&str, &[u8])> {
        self.entries.get(i).map(|(n, v)| (n.as_str(), v.as_slice()))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn lower(name: &str) -> String {
    name.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> HeaderList {
        let mut h = HeaderList::new();
        for (n, v) in pairs {
            h.add(n, v.as_bytes());
        }
        h
    }

    fn flat(h: &HeaderList) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v).into_owned()))
            .collect()
    }

    #[test]
    fn reads_as_envoy_does() {
        let h = list(&[(":path", "/a?b"), ("X-A", "1"), ("x-b", "2"), ("x-a", "3")]);
        let cases: &[(&str, Option<&str>, usize, Option<&str>)] = &[
            // name, get, getNumValues, getAtIndex(name, 1)
            ("x-a", Some("1,3"), 2, Some("3")),
            ("X-B", Some("2"), 1, None),
            (":path", Some("/a?b"), 1, None),
            ("missing", None, 0, None),
        ];
        for (name, get, n, at1) in cases {
            assert_eq!(
                h.get(name)
                    .map(|v| String::from_utf8(v).unwrap())
                    .as_deref(),
                *get,
                "{name}"
            );
            assert_eq!(h.num_values(name), *n, "{name}");
            assert_eq!(
                h.get_at_index(name, 1)
                    .map(|v| std::str::from_utf8(v).unwrap()),
                *at1,
                "{name}"
            );
        }
    }

    #[test]
    fn edits_keep_order() {
        type Case<'a> = (&'a str, fn(&mut HeaderList), &'a [(&'a str, &'a str)]);
        let cases: &[Case] = &[
            (
                "add appends",
                |h| h.add("X-C", "9"),
                &[("x-a", "1"), ("x-b", "2"), ("x-a", "3"), ("x-c", "9")],
            ),
            (
                "replace keeps the first's place",
                |h| h.replace("x-a", "new"),
                &[("x-a", "new"), ("x-b", "2")],
            ),
            (
                "replace of a missing one appends",
                |h| h.replace("x-z", "z"),
                &[("x-a", "1"), ("x-b", "2"), ("x-a", "3"), ("x-z", "z")],
            ),
            (
                "remove takes every value",
                |h| h.remove("X-A"),
                &[("x-b", "2")],
            ),
        ];
        for (what, edit, want) in cases {
            let mut h = list(&[("x-a", "1"), ("x-b", "2"), ("x-a", "3")]);
            edit(&mut h);
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            assert_eq!(flat(&h), want, "{what}");
        }
    }
}
