//! Golden text: the rules for representative options, compared with what istio-iptables
//! installs in REDIRECT mode (istio/istio tools/istio-iptables and its golden files),
//! grouped by chain as iptables-save prints them.

use crate::options::{CaptureConfig, CidrSelection, PortSelection};
use crate::plan::{plan_clean, plan_install, Op};
use crate::render::{render_commands, render_restore, render_save};
use crate::rules::{capture_rules, Family, Table};
use crate::saved::parse_save;

/// `istio-iptables -p 15001 -z 15006 -u 1337 -g 1337 -m REDIRECT -i '*' -b '*' -d 15090,15021,15020`,
/// plus the proxy's own ports returned inbound.
const DEFAULT_V4: &str = "\
*nat
:ISTIO_INBOUND - [0:0]
:ISTIO_REDIRECT - [0:0]
:ISTIO_IN_REDIRECT - [0:0]
:ISTIO_OUTPUT - [0:0]
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A OUTPUT -p tcp -j ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15090 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15021 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15020 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15001 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15006 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
COMMIT
";

#[test]
fn defaults_are_istios_rules_in_istios_order() {
    let text = render_save(&capture_rules(&CaptureConfig::default(), Family::V4));
    assert_eq!(text, DEFAULT_V4, "got:\n{text}");
}

#[test]
fn ipv6_uses_the_v6_passthrough_source_and_loopback() {
    let v6 = render_save(&capture_rules(&CaptureConfig::default(), Family::V6));
    let expected = DEFAULT_V4
        .replace("127.0.0.6/32", "::6/128")
        .replace("127.0.0.1/32", "::1/128");
    assert_eq!(v6, expected, "got:\n{v6}");
}

#[test]
fn options_change_the_rules_where_istio_puts_them() {
    let cfg = CaptureConfig {
        proxy_uid: 1337,
        proxy_gid: 1338,
        outbound_port: 16001,
        inbound_port: 16006,
        inbound_ports: PortSelection::Only(vec![8080, 9090]),
        exclude_outbound_ports: vec![5432],
        exclude_outbound_cidrs: vec!["10.96.0.0/12".parse().unwrap(), "fd00::/8".parse().unwrap()],
        include_outbound_cidrs: CidrSelection::Only(vec![
            "10.0.0.0/8".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ]),
        ..CaptureConfig::default()
    };
    let text = render_save(&capture_rules(&cfg, Family::V4));
    let expected = "\
*nat
:ISTIO_INBOUND - [0:0]
:ISTIO_REDIRECT - [0:0]
:ISTIO_IN_REDIRECT - [0:0]
:ISTIO_OUTPUT - [0:0]
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A OUTPUT -p tcp -j ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 8080 -j ISTIO_IN_REDIRECT
-A ISTIO_INBOUND -p tcp -m tcp --dport 9090 -j ISTIO_IN_REDIRECT
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 16006
-A ISTIO_OUTPUT -p tcp -m tcp --dport 5432 -j RETURN
-A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --gid-owner 1338 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1338 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1338 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -d 10.96.0.0/12 -j RETURN
-A ISTIO_OUTPUT -d 10.0.0.0/8 -j ISTIO_REDIRECT
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 16001
COMMIT
";
    assert_eq!(text, expected, "got:\n{text}");
    // Each family gets only its own CIDRs.
    let v6 = render_save(&capture_rules(&cfg, Family::V6));
    assert!(v6.contains("-A ISTIO_OUTPUT -d fd00::/8 -j RETURN\n"));
    assert!(v6.contains("-A ISTIO_OUTPUT -d fd00::/8 -j ISTIO_REDIRECT\n"));
    assert!(!v6.contains("10.") && !text.contains("fd00"));
}

#[test]
fn no_inbound_ports_means_no_prerouting_jump_and_user_exclusions_add_to_istios() {
    let none = CaptureConfig {
        inbound_ports: PortSelection::Only(vec![]),
        ..CaptureConfig::default()
    };
    let text = render_save(&capture_rules(&none, Family::V4));
    assert!(!text.contains("PREROUTING"));
    assert!(text.contains("-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN\n"));
    assert!(!text.contains("-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT"));

    let ssh = CaptureConfig {
        exclude_inbound_ports: vec![22, 15090],
        ..CaptureConfig::default()
    };
    let ports: Vec<u16> = crate::rules::inbound_exclusions(&ssh);
    assert_eq!(ports, [15008, 22, 15090, 15021, 15020, 15001, 15006]);
}

#[test]
fn included_loopback_captures_the_apps_own_loopback_traffic() {
    let cfg = CaptureConfig {
        include_outbound_cidrs: CidrSelection::Only(vec!["127.0.0.1/32".parse().unwrap()]),
        ..CaptureConfig::default()
    };
    let text = render_save(&capture_rules(&cfg, Family::V4));
    assert!(!text.contains("! --uid-owner"), "{text}");
    assert!(!text.contains("! --gid-owner"), "{text}");
}

#[test]
fn install_on_an_empty_table_creates_chains_then_rules_then_hooks() {
    let saved = parse_save(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n",
        Table::Nat,
    )
    .unwrap();
    let ops = plan_install(
        &saved,
        &capture_rules(&CaptureConfig::default(), Family::V4),
    );
    let text = render_restore(&ops);
    assert!(text.starts_with("*nat\n-N ISTIO_INBOUND\n-N ISTIO_REDIRECT\n-N ISTIO_IN_REDIRECT\n-N ISTIO_OUTPUT\n-A ISTIO_INBOUND "));
    assert!(text.ends_with(
        "-A PREROUTING -p tcp -j ISTIO_INBOUND\n-A OUTPUT -p tcp -j ISTIO_OUTPUT\nCOMMIT\n"
    ));
}

#[test]
fn installed_rules_read_back_are_a_no_op_and_other_options_replace_them() {
    let cfg = CaptureConfig::default();
    let installed = format!(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n{}",
        &DEFAULT_V4["*nat\n".len()..]
    );
    let saved = parse_save(&installed, Table::Nat).unwrap();
    assert!(plan_install(&saved, &capture_rules(&cfg, Family::V4)).is_empty());

    let other = CaptureConfig {
        outbound_port: 16001,
        ..cfg.clone()
    };
    let ops = plan_install(&saved, &capture_rules(&other, Family::V4));
    // Chains flushed and refilled; the hooks are the same, so they keep their place.
    assert!(ops.contains(&Op::FlushChain(Table::Nat, "ISTIO_REDIRECT".into())));
    assert!(!ops
        .iter()
        .any(|op| matches!(op, Op::NewChain(..) | Op::Delete(_))));
    assert!(
        render_restore(&ops).contains("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 16001\n")
    );

    let inbound_off = CaptureConfig {
        inbound_ports: PortSelection::Only(vec![]),
        ..cfg
    };
    let text = render_restore(&plan_install(
        &saved,
        &capture_rules(&inbound_off, Family::V4),
    ));
    assert!(
        text.contains("-D PREROUTING -p tcp -j ISTIO_INBOUND\n-D OUTPUT -p tcp -j ISTIO_OUTPUT\n")
    );
    assert!(!text.contains("-A PREROUTING"));
    assert!(text.contains("-A OUTPUT -p tcp -j ISTIO_OUTPUT\nCOMMIT\n"));
}

#[test]
fn clean_removes_hooks_then_chains_and_nothing_else() {
    let installed = format!(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KEEP - [0:0]\n-A OUTPUT -p udp -j KEEP\n{}",
        &DEFAULT_V4["*nat\n".len()..]
    );
    let saved = parse_save(&installed, Table::Nat).unwrap();
    let ops = plan_clean(&saved, Table::Nat);
    let commands = render_commands("iptables", &ops);
    assert_eq!(
        commands,
        [
            "iptables -t nat -D PREROUTING -p tcp -j ISTIO_INBOUND",
            "iptables -t nat -D OUTPUT -p tcp -j ISTIO_OUTPUT",
            "iptables -t nat -F ISTIO_INBOUND",
            "iptables -t nat -F ISTIO_REDIRECT",
            "iptables -t nat -F ISTIO_IN_REDIRECT",
            "iptables -t nat -F ISTIO_OUTPUT",
            "iptables -t nat -X ISTIO_INBOUND",
            "iptables -t nat -X ISTIO_REDIRECT",
            "iptables -t nat -X ISTIO_IN_REDIRECT",
            "iptables -t nat -X ISTIO_OUTPUT",
        ]
    );
    let empty = parse_save("*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", Table::Nat).unwrap();
    assert!(plan_clean(&empty, Table::Nat).is_empty());
}

#[test]
fn commands_quote_what_the_shell_would_split() {
    let rule = crate::rules::Rule {
        table: Table::Nat,
        chain: "OUTPUT".into(),
        args: vec![
            "-m".into(),
            "comment".into(),
            "--comment".into(),
            "it's here".into(),
        ],
    };
    assert_eq!(
        render_commands("iptables", &[Op::Delete(rule.clone())]),
        ["iptables -t nat -D OUTPUT -m comment --comment 'it'\\''s here'"]
    );
    assert_eq!(
        render_restore(&[Op::Delete(rule)]),
        "*nat\n-D OUTPUT -m comment --comment \"it's here\"\nCOMMIT\n"
    );
}
