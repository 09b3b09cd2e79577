//! The capture rules as data: [`capture_rules`] turns a [`CaptureConfig`] into the nat rules
//! istio-iptables installs in REDIRECT mode, in its order. Pure: nothing here runs iptables.
//!
//! Arguments are written the way `iptables-save` prints them (`-s`, `-d`, `-i`, `-o`, `-p`, then
//! the matches, `-m tcp` spelled out), so an installed rule set reads back equal to this one and
//! a second install is a no-op.

use crate::options::{CaptureConfig, CidrSelection, PortSelection, TUNNEL_PORT};
use ipnet::IpNet;

pub const ISTIO_INBOUND: &str = "ISTIO_INBOUND";
pub const ISTIO_REDIRECT: &str = "ISTIO_REDIRECT";
pub const ISTIO_IN_REDIRECT: &str = "ISTIO_IN_REDIRECT";
pub const ISTIO_OUTPUT: &str = "ISTIO_OUTPUT";

/// The chains capture owns, in the order istio-iptables creates them. `--clean` removes these
/// and the rules elsewhere that jump to them, nothing else.
pub const CHAINS: [&str; 4] = [
    ISTIO_INBOUND,
    ISTIO_REDIRECT,
    ISTIO_IN_REDIRECT,
    ISTIO_OUTPUT,
];

/// The address family a rule set is for: iptables or ip6tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn label(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// `iptables` or `ip6tables`; `-save` and `-restore` are appended for the other tools.
    pub fn iptables(self) -> &'static str {
        match self {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        }
    }

    /// The source Envoy's inbound passthrough binds (`127.0.0.6`, `::6`), so the proxy's
    /// connections to the app are told apart from the app's own.
    fn passthrough_source(self) -> &'static str {
        match self {
            Family::V4 => "127.0.0.6/32",
            Family::V6 => "::6/128",
        }
    }

    fn loopback(self) -> &'static str {
        match self {
            Family::V4 => "127.0.0.1/32",
            Family::V6 => "::1/128",
        }
    }

    fn holds(self, net: &IpNet) -> bool {
        matches!(
            (self, net),
            (Family::V4, IpNet::V4(_)) | (Family::V6, IpNet::V6(_))
        )
    }
}

/// An iptables table. Only `nat` so far (REDIRECT mode); TPROXY mode would add `mangle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    Nat,
}

impl Table {
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Nat => "nat",
        }
    }
}

/// One rule: appended (`-A chain args...`) to `chain` of `table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub table: Table,
    pub chain: String,
    pub args: Vec<String>,
}

impl Rule {
    /// A nat rule from an argument line; the arguments capture writes never contain spaces.
    pub fn nat(chain: &str, args: &str) -> Rule {
        Rule {
            table: Table::Nat,
            chain: chain.to_string(),
            args: args.split_whitespace().map(str::to_string).collect(),
        }
    }

    /// The chain this rule jumps (`-j`) or goes (`-g`) to, when it names one.
    pub fn target(&self) -> Option<&str> {
        self.args
            .windows(2)
            .find(|w| w[0] == "-j" || w[0] == "-g")
            .map(|w| w[1].as_str())
    }

    /// Whether this is one of capture's rules: in one of its chains, or jumping into one.
    pub fn is_capture(&self) -> bool {
        is_capture_chain(&self.chain) || self.target().is_some_and(is_capture_chain)
    }
}

pub fn is_capture_chain(chain: &str) -> bool {
    CHAINS.contains(&chain)
}

/// The inbound ports returned before the catch-all redirect: the tunnel port, the user's
/// exclusions, Istio's defaults (always), then the proxy's own listeners (a connection straight
/// to them must not be redirected to the proxy as if for the app); each once, in that order.
pub fn inbound_exclusions(cfg: &CaptureConfig) -> Vec<u16> {
    let mut ports = vec![TUNNEL_PORT];
    for port in cfg
        .exclude_inbound_ports
        .iter()
        .copied()
        .chain(crate::options::ISTIO_EXCLUDED_INBOUND_PORTS)
        .chain([cfg.outbound_port, cfg.inbound_port])
    {
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// The nat rules istio-iptables (REDIRECT mode) installs for `cfg`, for one family. Grouped by
/// chain as `iptables-save` shows them; within each chain, Istio's order (it is first match).
pub fn capture_rules(cfg: &CaptureConfig, family: Family) -> Vec<Rule> {
    let mut rules = Vec::new();
    let mut push = |chain: &str, args: String| rules.push(Rule::nat(chain, &args));

    // Inbound is only hooked when some port is captured (Istio skips the jump otherwise).
    if !cfg.inbound_ports.is_none() {
        push("PREROUTING", format!("-p tcp -j {ISTIO_INBOUND}"));
    }
    push("OUTPUT", format!("-p tcp -j {ISTIO_OUTPUT}"));

    push(
        ISTIO_INBOUND,
        format!("-p tcp -m tcp --dport {TUNNEL_PORT} -j RETURN"),
    );
    match &cfg.inbound_ports {
        PortSelection::All => {
            for port in inbound_exclusions(cfg).into_iter().skip(1) {
                push(
                    ISTIO_INBOUND,
                    format!("-p tcp -m tcp --dport {port} -j RETURN"),
                );
            }
            push(ISTIO_INBOUND, format!("-p tcp -j {ISTIO_IN_REDIRECT}"));
        }
        PortSelection::Only(ports) => {
            for port in ports {
                push(
                    ISTIO_INBOUND,
                    format!("-p tcp -m tcp --dport {port} -j {ISTIO_IN_REDIRECT}"),
                );
            }
        }
    }
    push(
        ISTIO_IN_REDIRECT,
        format!("-p tcp -j REDIRECT --to-ports {}", cfg.inbound_port),
    );

    // Port exclusions come before anything that could send a connection back to the proxy.
    for port in &cfg.exclude_outbound_ports {
        push(
            ISTIO_OUTPUT,
            format!("-p tcp -m tcp --dport {port} -j RETURN"),
        );
    }
    // The proxy's inbound passthrough to the app (from 127.0.0.6 over lo) reaches the app.
    push(
        ISTIO_OUTPUT,
        format!("-s {} -o lo -j RETURN", family.passthrough_source()),
    );
    // When loopback is explicitly included, the app's own loopback traffic is captured too.
    let includes_loopback = matches!(&cfg.include_outbound_cidrs,
        CidrSelection::Only(nets) if nets.iter().any(|n| n.network().is_loopback()));
    for owner in [
        format!("--uid-owner {}", cfg.proxy_uid),
        format!("--gid-owner {}", cfg.proxy_gid),
    ] {
        // The proxy calling this pod through a service VIP: its outbound side connects to the
        // pod's own address over lo, which must reach the inbound listener (app -> outbound ->
        // inbound -> app), not the app directly.
        push(
            ISTIO_OUTPUT,
            format!(
                "! -d {} -o lo -p tcp -m tcp ! --dport {TUNNEL_PORT} -m owner {owner} -j {ISTIO_IN_REDIRECT}",
                family.loopback()
            ),
        );
        // The app calling itself over lo (by its pod address) goes straight to itself.
        if !includes_loopback {
            push(ISTIO_OUTPUT, format!("-o lo -m owner ! {owner} -j RETURN"));
        }
        // Everything else the proxy sends leaves as is: no capture loop.
        push(ISTIO_OUTPUT, format!("-m owner {owner} -j RETURN"));
    }
    // Localhost traffic (Envoy-aware apps, container to container) is never captured.
    push(ISTIO_OUTPUT, format!("-d {} -j RETURN", family.loopback()));
    for net in cfg
        .exclude_outbound_cidrs
        .iter()
        .filter(|n| family.holds(n))
    {
        push(ISTIO_OUTPUT, format!("-d {net} -j RETURN"));
    }
    match &cfg.include_outbound_cidrs {
        CidrSelection::All => push(ISTIO_OUTPUT, format!("-j {ISTIO_REDIRECT}")),
        CidrSelection::Only(nets) => {
            for net in nets.iter().filter(|n| family.holds(n)) {
                push(ISTIO_OUTPUT, format!("-d {net} -j {ISTIO_REDIRECT}"));
            }
        }
    }
    push(
        ISTIO_REDIRECT,
        format!("-p tcp -j REDIRECT --to-ports {}", cfg.outbound_port),
    );
    rules
}
