//! The rules for real: installed into a fresh network namespace with its iptables, read back
//! with iptables-save, installed again, replaced and cleaned. Never the host's tables.

mod common;

use common::{nat_table, skip};
use warden_capture::{
    capture_rules, clean, install, parse_save, CaptureConfig, Family, InNetns, Outcome,
    PortSelection, Table, CHAINS,
};
use warden_testkit::netns::NetNs;

/// Capture's rules as iptables-save shows them in `table`, per chain, plus the hooks.
fn installed_capture(table: &str) -> Vec<(String, Vec<String>)> {
    let saved = parse_save(table, Table::Nat).expect("parse iptables-save");
    saved
        .rules
        .into_iter()
        .filter(|r| r.is_capture())
        .map(|r| (r.chain, r.args))
        .collect()
}

fn expected_capture(cfg: &CaptureConfig, family: Family) -> Vec<(String, Vec<String>)> {
    let mut rules: Vec<_> = capture_rules(cfg, family)
        .into_iter()
        .map(|r| (r.chain, r.args))
        .collect();
    // iptables-save lists built-in chains first, then user chains by name; order within a
    // chain is what matters, so compare chain by chain.
    rules.sort_by_key(|(chain, _)| chain_rank(chain));
    rules
}

fn chain_rank(chain: &str) -> usize {
    ["PREROUTING", "OUTPUT"]
        .iter()
        .chain(CHAINS.iter())
        .position(|c| *c == chain)
        .unwrap_or(usize::MAX)
}

fn by_chain(mut rules: Vec<(String, Vec<String>)>) -> Vec<(String, Vec<String>)> {
    rules.sort_by_key(|(chain, _)| chain_rank(chain));
    rules
}

#[test]
fn install_shows_in_iptables_save_twice_is_a_no_op_and_clean_keeps_other_rules() {
    if let Some(why) = skip() {
        eprintln!("{why}");
        return;
    }
    let ns = NetNs::new("caprules").expect("namespace");
    // Someone else's rules, in the chains capture hooks into and in a chain of their own.
    for args in [
        &["-t", "nat", "-N", "KEEP_ME"][..],
        &[
            "-t",
            "nat",
            "-A",
            "KEEP_ME",
            "-m",
            "comment",
            "--comment",
            "not capture's",
            "-j",
            "RETURN",
        ],
        &[
            "-t", "nat", "-A", "OUTPUT", "-p", "udp", "--dport", "53", "-j", "KEEP_ME",
        ],
        &[
            "-t",
            "nat",
            "-A",
            "PREROUTING",
            "-p",
            "tcp",
            "--dport",
            "2222",
            "-j",
            "RETURN",
        ],
    ] {
        ns.exec("iptables", args).expect("a pre-existing rule");
    }
    let before = nat_table(&ns, "iptables-save");
    let runner = InNetns::new(ns.path());
    let cfg = CaptureConfig::default();

    let first = install(&runner, &cfg).expect("install");
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].outcome, Outcome::Installed);
    let after_first = nat_table(&ns, "iptables-save");
    assert_eq!(
        by_chain(installed_capture(&after_first)),
        expected_capture(&cfg, Family::V4),
        "installed:\n{after_first}"
    );
    for kept in before.lines().filter(|l| l.starts_with("-A")) {
        assert!(
            after_first.contains(kept),
            "{kept} went missing:\n{after_first}"
        );
    }

    let second = install(&runner, &cfg).expect("install again");
    assert_eq!(second[0].outcome, Outcome::Unchanged, "{:?}", second[0].ops);
    assert_eq!(nat_table(&ns, "iptables-save"), after_first);

    let cleaned = clean(&runner, false).expect("clean");
    assert_eq!(cleaned[0].outcome, Outcome::Removed);
    let after_clean = nat_table(&ns, "iptables-save");
    assert!(!after_clean.contains("ISTIO_"), "{after_clean}");
    assert_eq!(
        after_clean, before,
        "clean must leave exactly what was there"
    );
    assert_eq!(
        clean(&runner, false).expect("clean again")[0].outcome,
        Outcome::NotInstalled
    );
}

#[test]
fn other_options_replace_the_install_in_one_transaction() {
    if let Some(why) = skip() {
        eprintln!("{why}");
        return;
    }
    let ns = NetNs::new("capreplace").expect("namespace");
    let runner = InNetns::new(ns.path());
    install(&runner, &CaptureConfig::default()).expect("install");

    let other = CaptureConfig {
        outbound_port: 16001,
        inbound_ports: PortSelection::Only(vec![]),
        exclude_outbound_cidrs: vec!["10.96.0.0/12".parse().expect("cidr")],
        ..CaptureConfig::default()
    };
    let replaced = install(&runner, &other).expect("replace");
    assert_eq!(replaced[0].outcome, Outcome::Replaced);
    let table = nat_table(&ns, "iptables-save");
    assert_eq!(
        by_chain(installed_capture(&table)),
        expected_capture(&other, Family::V4),
        "{table}"
    );
    assert!(
        !table.contains("-A PREROUTING"),
        "inbound capture is off:\n{table}"
    );
    assert_eq!(table.matches("-j ISTIO_OUTPUT").count(), 1, "{table}");
    assert_eq!(
        install(&runner, &other).expect("again")[0].outcome,
        Outcome::Unchanged
    );
}

#[test]
fn ipv6_programs_ip6tables_and_a_plain_clean_removes_both() {
    if let Some(why) = skip() {
        eprintln!("{why}");
        return;
    }
    let ns = NetNs::new("capv6").expect("namespace");
    let runner = InNetns::new(ns.path());
    let cfg = CaptureConfig {
        ipv6: true,
        ..CaptureConfig::default()
    };
    let results = install(&runner, &cfg).expect("install");
    let outcomes: Vec<_> = results.iter().map(|r| (r.family, r.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            (Family::V4, Outcome::Installed),
            (Family::V6, Outcome::Installed)
        ]
    );
    let v6 = nat_table(&ns, "ip6tables-save");
    assert_eq!(
        by_chain(installed_capture(&v6)),
        expected_capture(&cfg, Family::V6),
        "{v6}"
    );
    assert!(
        v6.contains("-A ISTIO_OUTPUT -s ::6/128 -o lo -j RETURN"),
        "{v6}"
    );
    assert!(v6.contains("-A ISTIO_OUTPUT -d ::1/128 -j RETURN"), "{v6}");
    assert!(install(&runner, &cfg)
        .expect("again")
        .iter()
        .all(|r| r.outcome == Outcome::Unchanged));

    clean(&runner, false).expect("clean");
    assert!(!nat_table(&ns, "iptables-save").contains("ISTIO_"));
    assert!(!nat_table(&ns, "ip6tables-save").contains("ISTIO_"));
}
