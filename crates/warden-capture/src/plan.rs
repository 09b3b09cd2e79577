//! From what is installed to what should be: the changes, as data, that install or remove
//! capture. Pure; [`crate::apply`] reads the current table and applies the result.

use crate::rules::{is_capture_chain, Rule, Table, CHAINS};
use crate::saved::SavedTable;

/// One change to a table, as an `iptables` / `iptables-restore` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    NewChain(Table, String),
    FlushChain(Table, String),
    DeleteChain(Table, String),
    Append(Rule),
    Delete(Rule),
}

impl Op {
    pub fn table(&self) -> Table {
        match self {
            Op::NewChain(t, _) | Op::FlushChain(t, _) | Op::DeleteChain(t, _) => *t,
            Op::Append(r) | Op::Delete(r) => r.table,
        }
    }

    /// The command's flag, its chain and, for rule commands, the rule's arguments.
    pub fn parts(&self) -> (&'static str, &str, Option<&[String]>) {
        match self {
            Op::NewChain(_, c) => ("-N", c, None),
            Op::FlushChain(_, c) => ("-F", c, None),
            Op::DeleteChain(_, c) => ("-X", c, None),
            Op::Append(r) => ("-A", &r.chain, Some(&r.args)),
            Op::Delete(r) => ("-D", &r.chain, Some(&r.args)),
        }
    }
}

/// Rules outside capture's chains that jump into them (the PREROUTING and OUTPUT hooks).
fn hooks<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> Vec<&'a Rule> {
    rules
        .into_iter()
        .filter(|r| !is_capture_chain(&r.chain) && r.is_capture())
        .collect()
}

/// The changes that turn `saved` into a table holding exactly `desired` as capture's rules
/// (every other rule untouched); empty when it already does. An existing install is replaced
/// in the same transaction: its chains are flushed and refilled, and its hooks are only
/// deleted and re-added when they differ, so they keep their place otherwise.
pub fn plan_install(saved: &SavedTable, desired: &[Rule]) -> Vec<Op> {
    let table = desired.first().map_or(Table::Nat, |r| r.table);
    let (have_hooks, want_hooks) = (hooks(&saved.rules), hooks(desired));
    let hooks_same = have_hooks == want_hooks;
    let chain_same = |chain: &str| {
        saved.has_chain(chain)
            && saved
                .chain_rules(chain)
                .eq(desired.iter().filter(|r| r.chain == chain))
    };
    if hooks_same && CHAINS.iter().all(|c| chain_same(c)) {
        return Vec::new();
    }

    let mut ops = Vec::new();
    if !hooks_same {
        ops.extend(have_hooks.iter().map(|r| Op::Delete((*r).clone())));
    }
    for chain in CHAINS {
        ops.push(if saved.has_chain(chain) {
            Op::FlushChain(table, chain.to_string())
        } else {
            Op::NewChain(table, chain.to_string())
        });
    }
    ops.extend(
        desired
            .iter()
            .filter(|r| is_capture_chain(&r.chain))
            .map(|r| Op::Append(r.clone())),
    );
    if !hooks_same {
        ops.extend(want_hooks.iter().map(|r| Op::Append((*r).clone())));
    }
    ops
}

/// The changes that remove capture from `saved`: the rules jumping into its chains, then the
/// chains (flushed first, as they jump into each other). Empty when nothing is installed.
pub fn plan_clean(saved: &SavedTable, table: Table) -> Vec<Op> {
    let present: Vec<&str> = CHAINS.into_iter().filter(|c| saved.has_chain(c)).collect();
    let mut ops: Vec<Op> = hooks(&saved.rules)
        .into_iter()
        .map(|r| Op::Delete(r.clone()))
        .collect();
    ops.extend(present.iter().map(|c| Op::FlushChain(table, c.to_string())));
    ops.extend(
        present
            .iter()
            .map(|c| Op::DeleteChain(table, c.to_string())),
    );
    ops
}
