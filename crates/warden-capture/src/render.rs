//! Rules and changes as text: `iptables-save`-style listings (what `--dry-run` prints),
//! `iptables-restore` transactions (what is applied) and shell commands (what is reported).

use crate::plan::Op;
use crate::rules::{Rule, Table, CHAINS};
use std::fmt::Write;

/// The rules as `iptables-save` shows them: per table, capture's chains declared, then every
/// rule. Valid `iptables-restore --noflush` input for an empty table.
pub fn render_save(rules: &[Rule]) -> String {
    let mut out = String::new();
    for table in tables(rules.iter().map(|r| r.table)) {
        let _ = writeln!(out, "*{}", table.as_str());
        let in_table: Vec<&Rule> = rules.iter().filter(|r| r.table == table).collect();
        for chain in CHAINS {
            if in_table
                .iter()
                .any(|r| r.chain == chain || r.target() == Some(chain))
            {
                let _ = writeln!(out, ":{chain} - [0:0]");
            }
        }
        for rule in in_table {
            let _ = writeln!(out, "-A {} {}", rule.chain, restore_args(&rule.args));
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// One `iptables-restore` transaction carrying out `ops`: the kernel sees all of it or none.
pub fn render_restore(ops: &[Op]) -> String {
    let mut out = String::new();
    for table in tables(ops.iter().map(Op::table)) {
        let _ = writeln!(out, "*{}", table.as_str());
        for op in ops.iter().filter(|op| op.table() == table) {
            let (flag, chain, args) = op.parts();
            match args {
                Some(args) => {
                    let _ = writeln!(out, "{flag} {chain} {}", restore_args(args));
                }
                None => {
                    let _ = writeln!(out, "{flag} {chain}");
                }
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// `ops` as the shell commands that do the same one by one (`iptables -t nat -A ...`).
pub fn render_commands(program: &str, ops: &[Op]) -> Vec<String> {
    ops.iter()
        .map(|op| {
            let (flag, chain, args) = op.parts();
            let mut line = format!("{program} -t {} {flag} {chain}", op.table().as_str());
            for arg in args.into_iter().flatten() {
                line.push(' ');
                line.push_str(&shell_quote(arg));
            }
            line
        })
        .collect()
}

/// The distinct tables, in order of first appearance.
fn tables(all: impl Iterator<Item = Table>) -> Vec<Table> {
    let mut seen = Vec::new();
    for table in all {
        if !seen.contains(&table) {
            seen.push(table);
        }
    }
    seen
}

/// Arguments for an iptables-save/restore line, quoted as iptables-save quotes them (a
/// comment with spaces, say), so a rule read back from `iptables-save` can be deleted exactly.
fn restore_args(args: &[String]) -> String {
    args.iter()
        .map(|arg| {
            if needs_quotes(arg) {
                format!("\"{}\"", arg.replace('\\', "\\\\").replace('"', "\\\""))
            } else {
                arg.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:,!=+@%".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

fn needs_quotes(arg: &str) -> bool {
    arg.is_empty()
        || arg
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\\')
}
