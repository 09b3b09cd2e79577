//! Reading the installed nat table and applying a plan to it, one `iptables-restore
//! --noflush` transaction per family.

use crate::error::CaptureError;
use crate::options::CaptureConfig;
use crate::plan::{plan_clean, plan_install, Op};
use crate::render::render_restore;
use crate::rules::{capture_rules, Family, Table, ISTIO_OUTPUT};
use crate::runner::Runner;
use crate::saved::{parse_save, SavedTable};
use std::path::PathBuf;

/// What a family's table went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No capture was installed; now it is.
    Installed,
    /// A different capture install (other options) was replaced by this one.
    Replaced,
    /// The same rules were already installed; nothing was changed.
    Unchanged,
    /// `--clean` removed capture.
    Removed,
    /// `--clean` found nothing to remove.
    NotInstalled,
}

/// One family's result: what happened, the changes made (empty when none were) and how many
/// capture rules the table holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub family: Family,
    pub outcome: Outcome,
    pub ops: Vec<Op>,
    pub rules: usize,
}

/// The three tools of one family, found.
struct Tools {
    save: PathBuf,
    restore: PathBuf,
}

fn tools(runner: &dyn Runner, family: Family) -> Result<Tools, CaptureError> {
    let base = family.iptables();
    let find = |tool: String| runner.locate(&tool).ok_or(CaptureError::Missing(tool));
    // `iptables` itself first: it is what the message should name when nothing is installed.
    find(base.to_string())?;
    Ok(Tools {
        save: find(format!("{base}-save"))?,
        restore: find(format!("{base}-restore"))?,
    })
}

/// The nat table as `iptables-save -t nat` shows it now.
pub fn read_nat(runner: &dyn Runner, family: Family) -> Result<SavedTable, CaptureError> {
    let tools = tools(runner, family)?;
    read_with(runner, &tools, family)
}

fn read_with(
    runner: &dyn Runner,
    tools: &Tools,
    family: Family,
) -> Result<SavedTable, CaptureError> {
    let text = runner.run(&tools.save, &["-t", "nat"], None)?;
    parse_save(&text, Table::Nat).map_err(|reason| CaptureError::Unparsable {
        command: format!("{}-save -t nat", family.iptables()),
        reason,
    })
}

fn apply_with(
    runner: &dyn Runner,
    tools: &Tools,
    family: Family,
    ops: &[Op],
) -> Result<(), CaptureError> {
    let input = render_restore(ops);
    // --noflush: only the listed chains change; -w: wait for the xtables lock (legacy).
    runner
        .run(&tools.restore, &["--noflush", "-w"], Some(&input))
        .map(drop)
        .map_err(|e| match e {
            CaptureError::Command { command, stderr } => CaptureError::Command {
                command: format!("{} (on {})", command, family.label()),
                stderr: format!("{stderr}\ninput was:\n{input}"),
            },
            other => other,
        })
}

/// The families `cfg` programs: IPv4, and IPv6 with `--ipv6`.
fn families(ipv6: bool) -> Vec<Family> {
    if ipv6 {
        vec![Family::V4, Family::V6]
    } else {
        vec![Family::V4]
    }
}

/// Install capture for `cfg` (replacing any other capture install, no-op when the same one is
/// there). Every tool is looked up before anything changes.
pub fn install(runner: &dyn Runner, cfg: &CaptureConfig) -> Result<Vec<Applied>, CaptureError> {
    let found = families(cfg.ipv6)
        .into_iter()
        .map(|f| tools(runner, f).map(|t| (f, t)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut results = Vec::new();
    for (family, tools) in found {
        let saved = read_with(runner, &tools, family)?;
        let desired = capture_rules(cfg, family);
        let ops = plan_install(&saved, &desired);
        let outcome = if ops.is_empty() {
            Outcome::Unchanged
        } else if saved.has_chain(ISTIO_OUTPUT) {
            Outcome::Replaced
        } else {
            Outcome::Installed
        };
        if !ops.is_empty() {
            apply_with(runner, &tools, family, &ops)?;
        }
        results.push(Applied {
            family,
            outcome,
            ops,
            rules: desired.len(),
        });
    }
    Ok(results)
}

/// The changes `--clean` would make, per family. IPv6 is included when asked for (then
/// ip6tables must be installed) or whenever ip6tables is installed, so a `--ipv6` install is
/// removed by a plain `--clean` too.
pub fn plan_removal(
    runner: &dyn Runner,
    ipv6: bool,
) -> Result<Vec<(Family, Vec<Op>)>, CaptureError> {
    let mut plans = Vec::new();
    for family in [Family::V4, Family::V6] {
        let read = tools(runner, family).and_then(|t| read_with(runner, &t, family));
        match read {
            Ok(saved) => plans.push((family, plan_clean(&saved, Table::Nat))),
            // Without --ipv6, a host without ip6tables (or IPv6 nat) has nothing to remove.
            Err(_) if family == Family::V6 && !ipv6 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(plans)
}

/// Remove capture (its hooks and chains, nothing else); see [`plan_removal`] for the families.
pub fn clean(runner: &dyn Runner, ipv6: bool) -> Result<Vec<Applied>, CaptureError> {
    let mut results = Vec::new();
    for (family, ops) in plan_removal(runner, ipv6)? {
        let outcome = if ops.is_empty() {
            Outcome::NotInstalled
        } else {
            apply_with(runner, &tools(runner, family)?, family, &ops)?;
            Outcome::Removed
        };
        results.push(Applied {
            family,
            outcome,
            ops,
            rules: 0,
        });
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::path::Path;

    /// A table held in memory: `-save` prints it, `-restore` records its input and, as the
    /// kernel would for an install, makes the table what the dry run shows.
    struct FakeTables {
        installed: Vec<&'static str>,
        table: RefCell<String>,
        restored: RefCell<Vec<String>>,
    }

    impl FakeTables {
        fn new(installed: &[&'static str], table: &str) -> Self {
            FakeTables {
                installed: installed.to_vec(),
                table: RefCell::new(table.to_string()),
                restored: RefCell::new(Vec::new()),
            }
        }
    }

    impl Runner for FakeTables {
        fn run(
            &self,
            program: &Path,
            _args: &[&str],
            stdin: Option<&str>,
        ) -> Result<String, CaptureError> {
            if program.to_string_lossy().ends_with("-save") {
                return Ok(self.table.borrow().clone());
            }
            self.restored
                .borrow_mut()
                .push(stdin.unwrap_or_default().to_string());
            let cfg = CaptureConfig::default();
            *self.table.borrow_mut() = crate::render::render_save(&capture_rules(&cfg, Family::V4));
            Ok(String::new())
        }

        fn locate(&self, tool: &str) -> Option<PathBuf> {
            self.installed
                .contains(&tool)
                .then(|| PathBuf::from("/usr/sbin").join(tool))
        }
    }

    const ALL_V4: [&str; 3] = ["iptables", "iptables-save", "iptables-restore"];

    #[test]
    fn missing_iptables_names_the_package() {
        let none = FakeTables::new(&[], "");
        let err = install(&none, &CaptureConfig::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "iptables is not installed (apt-get install iptables)"
        );
    }

    #[test]
    fn ipv6_without_ip6tables_fails_before_changing_anything() {
        let v4_only = FakeTables::new(&ALL_V4, "*nat\nCOMMIT\n");
        let cfg = CaptureConfig {
            ipv6: true,
            ..CaptureConfig::default()
        };
        let err = install(&v4_only, &cfg).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ip6tables is not installed (apt-get install iptables)"
        );
        assert!(v4_only.restored.borrow().is_empty());
        // A plain --clean on that host only looks at IPv4.
        let cleaned = clean(&v4_only, false).unwrap();
        assert_eq!(cleaned.len(), 1);
        assert_eq!(cleaned[0].outcome, Outcome::NotInstalled);
    }

    #[test]
    fn second_install_changes_nothing() {
        let fake = FakeTables::new(&ALL_V4, "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n");
        let cfg = CaptureConfig::default();
        assert_eq!(install(&fake, &cfg).unwrap()[0].outcome, Outcome::Installed);
        assert_eq!(install(&fake, &cfg).unwrap()[0].outcome, Outcome::Unchanged);
        assert_eq!(fake.restored.borrow().len(), 1);
        let other = CaptureConfig {
            proxy_uid: 1,
            ..cfg
        };
        assert_eq!(
            install(&fake, &other).unwrap()[0].outcome,
            Outcome::Replaced
        );
    }
}
