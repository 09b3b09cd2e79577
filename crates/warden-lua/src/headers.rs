//! A header map as Envoy's Lua API sees it: ordered entries, names lower-cased, several values
//! per name kept apart, pseudo-headers (`:path`, `:method`, `:authority`, `:scheme`, `:status`)
//! first, in the same list.
//!
//! Names and values are kept in two buffers, each entry as its ranges there: a request's list
//! is three allocations, not two per header (building it was a tenth of what the article's
//! script cost a request, callgrind).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

/// Ordered header entries. Values are bytes: Lua strings need not be UTF-8.
#[derive(Clone, Default)]
pub struct HeaderList {
    /// Every entry's name, lower-cased, one after another.
    names: String,
    /// Every entry's value, one after another (a replaced value may leave unused bytes).
    values: Vec<u8>,
    entries: Vec<Entry>,
    /// How many entries the list was handed over with ([`HeaderList::mark_original`]).
    original: usize,
    /// Whether an edit replaced or removed one of those (else edits only appended).
    touched: bool,
}

/// Where one entry's name and value are.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    name: Range<usize>,
    value: Range<usize>,
}

impl PartialEq for HeaderList {
    fn eq(&self, other: &Self) -> bool {
        self.original == other.original
            && self.touched == other.touched
            && self.iter().eq(other.iter())
    }
}

impl Eq for HeaderList {}

impl fmt::Debug for HeaderList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(n, v)| (n, String::from_utf8_lossy(v))))
            .finish()
    }
}

/// Typical lengths of a header's name and value, for [`HeaderList::with_capacity`].
const NAME_BYTES: usize = 16;
const VALUE_BYTES: usize = 32;
/// Entries a script typically adds (a regrown buffer cost an `add` about 500 instructions).
const ADDED: usize = 2;

impl HeaderList {
    pub fn new() -> Self {
        HeaderList::default()
    }

    pub const fn empty() -> Self {
        HeaderList {
            names: String::new(),
            values: Vec::new(),
            entries: Vec::new(),
            original: 0,
            touched: false,
        }
    }

    /// Room for `n` entries and the few a script adds.
    pub fn with_capacity(n: usize) -> Self {
        let n = n + ADDED;
        HeaderList {
            names: String::with_capacity(n * NAME_BYTES),
            values: Vec::with_capacity(n * VALUE_BYTES),
            entries: Vec::with_capacity(n),
            ..HeaderList::empty()
        }
    }

    /// No entries, the buffers kept (a list reused for another message).
    pub fn clear(&mut self) {
        self.names.clear();
        self.values.clear();
        self.entries.clear();
        self.original = 0;
        self.touched = false;
    }

    /// Bytes the list's buffers hold room for.
    pub fn capacity_bytes(&self) -> usize {
        self.names.capacity()
            + self.values.capacity()
            + self.entries.capacity() * size_of::<Entry>()
    }

    fn name(&self, e: &Entry) -> &str {
        &self.names[e.name.clone()]
    }

    fn value(&self, e: &Entry) -> &[u8] {
        &self.values[e.value.clone()]
    }

    /// The entries named `name` (any case), as (index, entry).
    fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (usize, &'a Entry)> + 'a {
        let names = self.names.as_bytes();
        let name = name.as_bytes();
        self.entries.iter().enumerate().filter(move |(_, e)| {
            e.name.len() == name.len()
                && names
                    .get(e.name.clone())
                    .is_some_and(|n| n.eq_ignore_ascii_case(name))
        })
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
                .map(|e| (self.name(e), self.value(e)))
        })
    }

    /// Whether an original entry named `name` exists (an edit of it is a rewrite).
    fn touches_original(&self, name: &str) -> bool {
        self.named(name).any(|(i, _)| i < self.original)
    }

    /// Append `value` to the value buffer: where it is.
    fn push_value(&mut self, value: &[u8]) -> Range<usize> {
        let start = self.values.len();
        self.values.extend_from_slice(value);
        start..self.values.len()
    }

    /// Append an entry (the name is lower-cased, as HTTP/2 and Envoy's maps keep it).
    pub fn add(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        self.add_bytes(name, &value.into());
    }

    /// [`HeaderList::add`] from borrowed bytes (no copy of them but the list's own).
    pub fn add_bytes(&mut self, name: &str, value: &[u8]) {
        let start = self.names.len();
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            self.names
                .extend(name.chars().map(|c| c.to_ascii_lowercase()));
        } else {
            self.names.push_str(name);
        }
        let name = start..self.names.len();
        let value = self.push_value(value);
        self.entries.push(Entry { name, value });
    }

    /// Append an entry whose value is `parts` one after another.
    pub fn add_parts(&mut self, name: &str, parts: &[&[u8]]) {
        let start = self.values.len();
        for p in parts {
            self.values.extend_from_slice(p);
        }
        let value = start..self.values.len();
        let name_start = self.names.len();
        self.names
            .extend(name.chars().map(|c| c.to_ascii_lowercase()));
        self.entries.push(Entry {
            name: name_start..self.names.len(),
            value,
        });
    }

    /// Envoy's `get`: the values of `name` joined by `,`, or None.
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        self.joined(name).map(Cow::into_owned)
    }

    /// [`HeaderList::get`] without a copy when `name` has one value.
    pub(crate) fn joined(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        let mut values = self.named(name).map(|(_, e)| self.value(e));
        let first = values.next()?;
        let Some(second) = values.next() else {
            return Some(Cow::Borrowed(first));
        };
        let mut out = first.to_vec();
        for v in std::iter::once(second).chain(values) {
            out.push(b',');
            out.extend_from_slice(v);
        }
        Some(Cow::Owned(out))
    }

    /// The first value of `name` (no copy, no joining).
    pub fn first(&self, name: &str) -> Option<&[u8]> {
        self.named(name).next().map(|(_, e)| self.value(e))
    }

    /// Envoy's `getAtIndex`: the `index`th (from 0) value of `name`.
    pub fn get_at_index(&self, name: &str, index: usize) -> Option<&[u8]> {
        self.named(name).nth(index).map(|(_, e)| self.value(e))
    }

    /// Envoy's `getNumValues`.
    pub fn num_values(&self, name: &str) -> usize {
        self.named(name).count()
    }

    /// Envoy's `replace`: every value of `name` goes, one `value` takes the first one's place
    /// (or is appended when there was none).
    pub fn replace(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        let value: &[u8] = &value.into();
        self.touched |= self.touches_original(name);
        let Some(first) = self.named(name).next().map(|(i, _)| i) else {
            self.add_bytes(name, value);
            return;
        };
        let old = self.entries[first].value.clone();
        self.entries[first].value = if value.len() <= old.len() {
            self.values[old.start..old.start + value.len()].copy_from_slice(value);
            old.start..old.start + value.len()
        } else {
            self.push_value(value)
        };
        let mut i = 0;
        let names = &self.names;
        self.entries.retain(|e| {
            let keep = i <= first || !names[e.name.clone()].eq_ignore_ascii_case(name);
            i += 1;
            keep
        });
    }

    /// Envoy's `remove`: every value of `name`.
    pub fn remove(&mut self, name: &str) {
        self.touched |= self.touches_original(name);
        self.original -= self.named(name).filter(|(i, _)| *i < self.original).count();
        let names = &self.names;
        self.entries
            .retain(|e| !names[e.name.clone()].eq_ignore_ascii_case(name));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries.iter().map(|e| (self.name(e), self.value(e)))
    }

    /// The `i`th entry, for Lua's `pairs`.
    pub fn entry(&self, i: usize) -> Option<(&str, &[u8])> {
        self.entries.get(i).map(|e| (self.name(e), self.value(e)))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
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
    fn replaced_values_of_any_length_read_back() {
        let cases: &[(&str, &str)] = &[("short", "x"), ("same", "abc"), ("longer", "abcdefgh")];
        for (what, value) in cases {
            let mut h = list(&[("x-a", "abc"), ("x-b", "2")]);
            h.replace("x-a", *value);
            h.add_parts(":path", &[b"/p", b"?", b"q=1"]);
            assert_eq!(
                flat(&h),
                [("x-a", *value), ("x-b", "2"), (":path", "/p?q=1")]
                    .map(|(n, v)| (n.to_string(), v.to_string())),
                "{what}"
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
