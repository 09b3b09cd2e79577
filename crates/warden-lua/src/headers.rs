//! A header map as Envoy's Lua API sees it: ordered entries, names lower-cased, several values
//! per name kept apart, pseudo-headers (`:path`, `:method`, `:authority`, `:scheme`, `:status`)
//! first, in the same list.

/// Ordered header entries. Values are bytes: Lua strings need not be UTF-8.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderList {
    entries: Vec<(String, Vec<u8>)>,
    /// How many entries the list was handed over with ([`HeaderList::mark_original`]).
    original: usize,
    /// Whether an edit replaced or removed one of those (else edits only appended).
    touched: bool,
}

impl HeaderList {
    pub fn new() -> Self {
        HeaderList::default()
    }

    pub const fn empty() -> Self {
        HeaderList {
            entries: Vec::new(),
            original: 0,
            touched: false,
        }
    }

    pub fn with_capacity(n: usize) -> Self {
        HeaderList {
            entries: Vec::with_capacity(n),
            ..HeaderList::empty()
        }
    }

    /// Remember the entries so far as the message's own: [`HeaderList::appended`] then tells
    /// whether later edits only added entries, and which.
    pub fn mark_original(&mut self) {
        self.original = self.entries.len();
        self.touched = false;
    }

    /// The entries added since [`HeaderList::mark_original`], when no edit replaced or
    /// removed an original one (the caller can then append them instead of rewriting all).
    pub fn appended(&self) -> Option<impl Iterator<Item = (&str, &[u8])>> {
        (!self.touched).then(|| {
            self.entries[self.original.min(self.entries.len())..]
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_slice()))
        })
    }

    /// Whether an original entry named `name` exists (an edit of it is a rewrite).
    fn touches_original(&self, name: &str) -> bool {
        self.entries[..self.original.min(self.entries.len())]
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
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
        self.touched |= self.touches_original(&name);
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
        self.touched |= self.touches_original(name);
        self.original -= self.entries[..self.original.min(self.entries.len())]
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count();
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
    fn appends_are_told_from_rewrites() {
        type Case<'a> = (&'a str, fn(&mut HeaderList), Option<&'a [&'a str]>);
        let cases: &[Case] = &[
            ("nothing", |_| {}, Some(&[])),
            ("add", |h| h.add("x-new", "1"), Some(&["x-new"])),
            (
                "add then replace the added",
                |h| {
                    h.add("x-new", "1");
                    h.replace("x-new", "2");
                },
                Some(&["x-new"]),
            ),
            (
                "add then remove the added",
                |h| {
                    h.add("x-new", "1");
                    h.remove("x-new");
                },
                Some(&[]),
            ),
            ("replace an original", |h| h.replace("x-a", "2"), None),
            ("remove an original", |h| h.remove("x-a"), None),
            ("remove a missing one", |h| h.remove("x-none"), Some(&[])),
        ];
        for (what, edit, want) in cases {
            let mut h = list(&[("x-a", "1")]);
            h.mark_original();
            edit(&mut h);
            let got: Option<Vec<&str>> = h.appended().map(|a| a.map(|(n, _)| n).collect());
            assert_eq!(got.as_deref(), *want, "{what}");
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
