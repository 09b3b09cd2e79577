//! `warden capture`: the sidecar's transparent capture. Installs, in the current network
//! namespace, the nat rules `istio-iptables` installs in REDIRECT mode (ISTIO_INBOUND,
//! ISTIO_IN_REDIRECT, ISTIO_OUTPUT, ISTIO_REDIRECT), or removes exactly them.
//!
//! The rules are data: [`capture_rules`] builds them from a [`CaptureConfig`] (pure),
//! [`plan_install`] / [`plan_clean`] compare them with what `iptables-save` shows, and the
//! resulting [`Op`]s are applied as one `iptables-restore --noflush` transaction per family
//! ([`install`], [`clean`]) through a [`Runner`], which tests point into a network namespace.
//!
//! Modules: `options` (the validated choices), `args` (the CLI), `rules` (building the rules),
//! `saved` (reading iptables-save), `plan` (the changes), `render` (text for iptables-restore,
//! dry runs and reports), `runner` (where tools run), `apply` (reading and applying).

// One libc call without a safe wrapper: geteuid in `effective_uid`, allowed there alone.
#![deny(unsafe_code)]

mod apply;
mod args;
mod error;
mod options;
mod plan;
mod render;
mod rules;
mod runner;
mod saved;

#[cfg(test)]
mod golden;

pub use apply::{clean, install, plan_removal, read_nat, Applied, Outcome};
pub use args::{CaptureArgs, SelectionArgs};
pub use error::CaptureError;
pub use options::{
    CaptureConfig, CidrList, CidrSelection, PortList, PortSelection, ISTIO_EXCLUDED_INBOUND_PORTS,
    TUNNEL_PORT,
};
pub use plan::{plan_clean, plan_install, Op};
pub use render::{render_commands, render_restore, render_save};
pub use rules::{
    capture_rules, inbound_exclusions, Family, Rule, Table, CHAINS, ISTIO_INBOUND,
    ISTIO_IN_REDIRECT, ISTIO_OUTPUT, ISTIO_REDIRECT,
};
pub use runner::{locate, Host, InNetns, Runner};
pub use saved::{parse_save, SavedTable};

use std::process::ExitCode;

/// `warden capture`: install (or `--clean`) capture in the current network namespace, or print
/// what that would do with `--dry-run`.
pub fn run(args: CaptureArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.config()?;
    if args.dry_run && !args.clean {
        // Printing the rules needs neither root nor iptables.
        print!("{}", dry_run(&cfg));
        return Ok(ExitCode::SUCCESS);
    }
    require_root(effective_uid())?;
    if args.clean && args.dry_run {
        for (family, ops) in plan_removal(&Host, args.ipv6)? {
            println!("# {}: {}", family.label(), removal_summary(&ops));
            for line in render_commands(family.iptables(), &ops) {
                println!("{line}");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let applied = if args.clean {
        clean(&Host, args.ipv6)?
    } else {
        install(&Host, &cfg)?
    };
    for result in &applied {
        println!("{}", report(result));
    }
    Ok(ExitCode::SUCCESS)
}

/// Every family's rules, iptables-save style, each under a comment naming it.
pub fn dry_run(cfg: &CaptureConfig) -> String {
    let families: &[Family] = if cfg.ipv6 {
        &[Family::V4, Family::V6]
    } else {
        &[Family::V4]
    };
    families
        .iter()
        .map(|&family| {
            format!(
                "# {} ({}): the rules warden capture installs\n{}",
                family.label(),
                family.iptables(),
                render_save(&capture_rules(cfg, family))
            )
        })
        .collect()
}

fn removal_summary(ops: &[Op]) -> &'static str {
    if ops.is_empty() {
        "capture is not installed, nothing to remove"
    } else {
        "warden capture --clean would run"
    }
}

/// One line per family for the person who ran the command.
fn report(applied: &Applied) -> String {
    let (rules, ops) = (applied.rules, &applied.ops);
    let what = match applied.outcome {
        Outcome::Installed => format!("installed {rules} nat rules"),
        Outcome::Replaced => format!("replaced the previous capture rules ({rules} nat rules)"),
        Outcome::Unchanged => format!("the same {rules} capture rules are already installed"),
        Outcome::Removed => {
            let chains: Vec<&str> = ops
                .iter()
                .filter_map(|op| match op {
                    Op::DeleteChain(_, chain) => Some(chain.as_str()),
                    _ => None,
                })
                .collect();
            let jumps = ops.iter().filter(|op| matches!(op, Op::Delete(_))).count();
            format!(
                "removed {jumps} jump rules and chains {}",
                chains.join(", ")
            )
        }
        Outcome::NotInstalled => "capture is not installed, nothing to remove".into(),
    };
    format!(
        "{} ({}): {what}",
        applied.family.label(),
        applied.family.iptables()
    )
}

/// Refuse to run as anyone but root: iptables would fail later with a less helpful message.
pub fn require_root(euid: u32) -> Result<(), CaptureError> {
    if euid == 0 {
        Ok(())
    } else {
        Err(CaptureError::NotRoot(euid))
    }
}

#[allow(unsafe_code)]
fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_root_is_told_so() {
        let err = require_root(1000).unwrap_err().to_string();
        assert!(
            err.contains("must run as root") && err.contains("1000"),
            "{err}"
        );
        assert!(require_root(0).is_ok());
    }

    #[test]
    fn dry_run_names_each_family() {
        let text = dry_run(&CaptureConfig {
            ipv6: true,
            ..CaptureConfig::default()
        });
        assert!(text.contains("# IPv4 (iptables)") && text.contains("# IPv6 (ip6tables)"));
        assert_eq!(text.matches("COMMIT").count(), 2);
    }
}
