//! `warden capture`'s command line.

use crate::error::CaptureError;
use crate::options::{CaptureConfig, CidrList, CidrSelection, PortList, PortSelection};

/// What is captured, as istio-iptables' `-b -d -x -o -i` (and the pod annotations
/// `traffic.sidecar.istio.io/*` that set them); eBPF capture (`--capture ebpf`) takes the
/// same flags.
#[derive(Debug, Clone, clap::Args)]
pub struct SelectionArgs {
    /// Inbound ports to capture: '*' for all, a comma list for only those, '' for none.
    #[arg(long, default_value = "*", value_name = "PORTS")]
    pub inbound_ports: PortSelection,
    /// Inbound ports never captured (with '*'). 15090, 15021, 15020, the tunnel port 15008 and
    /// the proxy's own ports are always excluded.
    #[arg(long, default_value = "15090,15021,15020", value_name = "PORTS")]
    pub exclude_inbound_ports: PortList,
    /// Outbound destinations never captured (comma list of CIDRs).
    #[arg(long, default_value = "", value_name = "CIDRS")]
    pub exclude_outbound_cidrs: CidrList,
    /// Outbound destination ports never captured (comma list).
    #[arg(long, default_value = "", value_name = "PORTS")]
    pub exclude_outbound_ports: PortList,
    /// Outbound destinations captured: '*' for all, a comma list of CIDRs, '' for none.
    #[arg(long, default_value = "*", value_name = "CIDRS")]
    pub include_outbound_cidrs: CidrSelection,
}

impl Default for SelectionArgs {
    /// The flags' defaults.
    fn default() -> Self {
        let d = CaptureConfig::default();
        SelectionArgs {
            inbound_ports: d.inbound_ports,
            exclude_inbound_ports: PortList(d.exclude_inbound_ports),
            exclude_outbound_cidrs: CidrList(d.exclude_outbound_cidrs),
            exclude_outbound_ports: PortList(d.exclude_outbound_ports),
            include_outbound_cidrs: d.include_outbound_cidrs,
        }
    }
}

impl SelectionArgs {
    /// Whether every flag has its default (capture everything outbound, every inbound port
    /// but Istio's own).
    pub fn is_default(&self) -> bool {
        let d = CaptureConfig::default();
        self.inbound_ports == d.inbound_ports
            && self.exclude_inbound_ports.0 == d.exclude_inbound_ports
            && self.exclude_outbound_cidrs.0.is_empty()
            && self.exclude_outbound_ports.0.is_empty()
            && self.include_outbound_cidrs == CidrSelection::All
    }

    /// `base` (the proxy's identity and ports) with these selections, validated.
    pub fn apply(&self, base: CaptureConfig) -> Result<CaptureConfig, CaptureError> {
        let cfg = CaptureConfig {
            inbound_ports: self.inbound_ports.clone(),
            exclude_inbound_ports: self.exclude_inbound_ports.0.clone(),
            exclude_outbound_ports: self.exclude_outbound_ports.0.clone(),
            exclude_outbound_cidrs: self.exclude_outbound_cidrs.0.clone(),
            include_outbound_cidrs: self.include_outbound_cidrs.clone(),
            ..base
        };
        cfg.validate().map_err(CaptureError::InvalidOptions)?;
        Ok(cfg)
    }
}

/// Install, in the current network namespace, the nat rules istio-iptables installs for a
/// sidecar (REDIRECT mode), or remove them with `--clean`.
#[derive(Debug, Clone, clap::Args)]
pub struct CaptureArgs {
    /// uid the proxy runs as: its own traffic is never captured.
    #[arg(long, default_value_t = 1337)]
    pub proxy_uid: u32,
    /// gid the proxy runs as, excluded like the uid [default: --proxy-uid].
    #[arg(long)]
    pub proxy_gid: Option<u32>,
    /// Port of the proxy's outbound listener (the app's outgoing connections land there).
    #[arg(long, default_value_t = 15001)]
    pub outbound_port: u16,
    /// Port of the proxy's inbound listener (connections to the pod land there).
    #[arg(long, default_value_t = 15006)]
    pub inbound_port: u16,
    #[command(flatten)]
    pub selection: SelectionArgs,
    /// Also program ip6tables (::6 passthrough source, ::1 loopback).
    #[arg(long)]
    pub ipv6: bool,
    /// Remove the capture rules (the PREROUTING/OUTPUT jumps and the ISTIO_* chains) instead.
    #[arg(long)]
    pub clean: bool,
    /// Print the rules (iptables-save style; with --clean, the commands) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl CaptureArgs {
    /// The options as a validated [`CaptureConfig`].
    pub fn config(&self) -> Result<CaptureConfig, CaptureError> {
        self.selection.apply(CaptureConfig {
            proxy_uid: self.proxy_uid,
            proxy_gid: self.proxy_gid.unwrap_or(self.proxy_uid),
            outbound_port: self.outbound_port,
            inbound_port: self.inbound_port,
            ipv6: self.ipv6,
            ..CaptureConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CaptureArgs,
    }

    fn parse(argv: &[&str]) -> CaptureArgs {
        Cli::try_parse_from(std::iter::once("capture").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn no_flags_are_istio_defaults() {
        assert_eq!(parse(&[]).config().unwrap(), CaptureConfig::default());
        assert!(parse(&[]).selection.is_default());
        let d = SelectionArgs::default();
        assert!(d.is_default());
        assert_eq!(d.inbound_ports, parse(&[]).selection.inbound_ports);
        assert!(!parse(&["--exclude-outbound-ports", "5432"])
            .selection
            .is_default());
    }

    #[test]
    fn gid_follows_uid_and_empty_lists_are_accepted() {
        let cfg = parse(&[
            "--proxy-uid",
            "2000",
            "--inbound-ports",
            "",
            "--include-outbound-cidrs=",
        ])
        .config()
        .unwrap();
        assert_eq!((cfg.proxy_uid, cfg.proxy_gid), (2000, 2000));
        assert!(cfg.inbound_ports.is_none());
        assert_eq!(cfg.include_outbound_cidrs, CidrSelection::Only(vec![]));
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let err = Cli::try_parse_from(["capture", "--exclude-outbound-cidrs", "10.0.0.0/33"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("10.0.0.0/33"), "{err}");
        let err = parse(&["--outbound-port", "15006"]).config().unwrap_err();
        assert!(err.to_string().contains("15006"), "{err}");
    }
}
