//! The proxy's layers follow a request, and each folder of `src/` imports only the folders
//! before it. This test reads every source file's `crate::` paths (in `use` lines and inline)
//! and fails on one that reaches a later layer; ARCHITECTURE.md draws the same order.

use std::path::{Path, PathBuf};

/// The layers, in request order. `cli.rs` sits on top of all of them.
const LAYERS: &[&str] = &[
    "core",
    "upstream",
    "routing",
    "filters",
    "snapshot",
    "pipeline",
    "listeners",
    "runtime",
    "cli",
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == module)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a line of code names through `crate::`: `crate::a::…`, and each
/// name of a `crate::{a, b::c}` group.
fn crate_modules(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found
}

/// `use crate::{…}` groups may span lines: join each statement that opens a brace.
fn statements(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if let Some((start, mut acc)) = open.take() {
            acc.push_str(code);
            if code.contains('}') {
                out.push((start, acc));
            } else {
                open = Some((start, acc));
            }
            continue;
        }
        if code.contains("crate::{") && !code.contains('}') {
            open = Some((n + 1, code.to_string()));
        } else {
            out.push((n + 1, code.to_string()));
        }
    }
    out
}

#[test]
fn each_layer_imports_only_the_layers_before_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    let mut layered = 0;
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let first = rel.components().next().expect("a component");
        let layer = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if layer == "lib" {
            continue;
        }
        let own = rank(&layer)
            .unwrap_or_else(|| panic!("{}: folder `{layer}` is not in LAYERS", rel.display()));
        layered += 1;
        let text = std::fs::read_to_string(file).expect("read source");
        for (line, code) in statements(&text) {
            for module in crate_modules(&code) {
                match rank(&module) {
                    Some(r) if r > own => violations.push(format!(
                        "{}:{line}: {layer} imports the later layer {module}",
                        rel.display()
                    )),
                    // Re-exports at the crate root (`crate::Snapshot`) hide a layer.
                    None if module.chars().next().is_some_and(char::is_uppercase) => violations
                        .push(format!(
                            "{}:{line}: names `crate::{module}`; use its layer's path",
                            rel.display()
                        )),
                    _ => {}
                }
            }
        }
    }
    assert!(
        layered > 50,
        "only {layered} files read: is src/ laid out in layers?"
    );
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn the_reader_sees_groups_and_inline_paths() {
    assert_eq!(crate_modules("use crate::core::conn::ConnCtx;"), ["core"]);
    assert_eq!(
        crate_modules("use crate::{routing::Route, filters::Filters};"),
        ["routing", "filters"]
    );
    assert_eq!(
        crate_modules("let x = crate::runtime::state::Control::new(crate::core::a());"),
        ["runtime", "core"]
    );
    let joined = statements("use crate::{\n    a::B,\n    c,\n};\nfn f() {}");
    assert_eq!(crate_modules(&joined[0].1), ["a", "c"]);
}
