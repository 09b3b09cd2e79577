//! docs/config.md stays true to the loader: for each kind it documents, its list of the fields
//! the loader reads equals what warden's types accept, and its list of the Istio fields warden
//! does not read equals Istio's fields (from its CRDs) that warden's types lack.

use std::collections::BTreeSet;
use warden_config::kind_schema::{istio_paths, warden_schema};

const READS: &str = "**Fields the loader reads**";
const LACKS: &str = "**Istio fields warden does not read**";
const KINDS: &[&str] = &[
    "Gateway",
    "VirtualService",
    "ServiceEntry",
    "DestinationRule",
];

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md");
    std::fs::read_to_string(path).expect("docs/config.md")
}

/// The text of the `## {kind} (` section.
fn section<'a>(doc: &'a str, kind: &str) -> &'a str {
    let start = doc
        .find(&format!("\n## {kind} ("))
        .unwrap_or_else(|| panic!("docs/config.md has no `## {kind} (` section"));
    let rest = &doc[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    &rest[..end]
}

/// The backticked names of the paragraph that starts with `label`.
fn listed(section: &str, kind: &str, label: &str) -> BTreeSet<String> {
    let start = section
        .find(label)
        .unwrap_or_else(|| panic!("the {kind} section has no {label} paragraph"));
    let para = &section[start + label.len()..];
    let para = &para[..para.find("\n\n").unwrap_or(para.len())];
    // The paragraph's own wording may quote `spec`; the lists are what follows the colon.
    let list = &para[para.find(':').map_or(0, |i| i + 1)..];
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// `a.b[].c` -> `a.b`; `a` -> ``.
fn parent(path: &str) -> &str {
    let cut = path.rfind('.').map_or("", |i| &path[..i]);
    cut.trim_end_matches("[]").trim_end_matches("{}")
}

fn expected(kind: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let reads: BTreeSet<String> = warden_schema(kind)
        .unwrap_or_else(|| panic!("no schema for {kind}"))
        .paths()
        .into_iter()
        .collect();
    let plain = |p: &str| p.replace("[]", "").replace("{}", "");
    let read_plain: BTreeSet<String> = reads.iter().map(|p| plain(p)).collect();
    // Only the outermost: below a field warden does not read, nothing is read.
    let lacks = istio_paths(kind)
        .iter()
        .filter(|p| !read_plain.contains(&plain(p)))
        .filter(|p| {
            let up = parent(p);
            up.is_empty() || read_plain.contains(&plain(up))
        })
        .cloned()
        .collect();
    (reads, lacks)
}

#[test]
fn the_documented_field_lists_are_the_loaders() {
    let doc = doc();
    let mut failures = Vec::new();
    for kind in KINDS {
        let text = section(&doc, kind);
        let (reads, lacks) = expected(kind);
        for (label, want) in [(READS, reads), (LACKS, lacks)] {
            let got = listed(text, kind, label);
            if got != want {
                let missing: Vec<&String> = want.difference(&got).collect();
                let extra: Vec<&String> = got.difference(&want).collect();
                let all: Vec<String> = want.iter().map(|p| format!("`{p}`")).collect();
                failures.push(format!(
                    "{kind}, {label}:\n  not in the doc: {missing:?}\n  not so in the loader: \
                     {extra:?}\n  the list: {}",
                    all.join(", ")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn parents_of_schema_paths() {
    assert_eq!(parent("http[].route[].weight"), "http[].route");
    assert_eq!(parent("http[].delegate"), "http");
    assert_eq!(parent("hosts"), "");
    assert_eq!(
        parent("http[].match[].headers{}.exact"),
        "http[].match[].headers"
    );
}

#[test]
fn the_documented_codes_are_the_loaders() {
    let doc = doc();
    let rows: BTreeSet<(String, String)> = doc
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let id = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let name = cells.get(2)?;
            let code = id.starts_with("IST") || id.starts_with("WDN");
            code.then(|| (id.to_owned(), (*name).to_owned()))
        })
        .collect();
    let want: BTreeSet<(String, String)> = warden_config::Code::ALL
        .iter()
        .map(|c| (c.id().to_owned(), c.name().to_owned()))
        .collect();
    assert_eq!(rows, want);
}
