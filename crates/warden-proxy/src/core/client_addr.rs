//! The trusted client address, following the `use_remote_address` / `xff_num_trusted_hops`
//! table of Envoy's `x-forwarded-for` docs, or Envoy's `xff_trusted_cidrs` (trusted proxies
//! named by address: [`client_addr_by_cidrs`]). Pure, so the tests below hold every row.

use ipnet::IpNet;
use std::net::IpAddr;

/// Envoy's `xff_trusted_cidrs` (XffConfig of its `original_ip_detection_extensions`): the
/// proxies in front of this one, named by address rather than counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedCidrs {
    pub cidrs: Vec<IpNet>,
    /// Walk the whole XFF list past trusted entries (`recurse`); else only its last entry.
    pub recurse: bool,
}

impl TrustedCidrs {
    pub fn trusts(&self, ip: IpAddr) -> bool {
        // A dual-stack listener sees IPv4 clients as IPv4-mapped IPv6 addresses.
        let ip = ip.to_canonical();
        self.cidrs.iter().any(|c| c.contains(&ip))
    }
}

/// Envoy refuses to walk longer `x-forwarded-for` lists than this (the client is then the
/// peer): each entry costs a parse.
const MAX_XFF_ENTRIES: usize = 20;

/// The client address by [`TrustedCidrs`], as Envoy's XFF detection with `xff_trusted_cidrs`:
/// a peer outside them is the client (its XFF is not believed); from a trusted peer, the last
/// XFF entry, or with `recurse` the last entry outside them (all inside: the first entry).
/// An entry that does not parse, a missing header or more than 20 entries: the peer.
pub fn client_addr_by_cidrs<'a, I>(
    peer: IpAddr,
    xff: impl FnOnce() -> I,
    trusted: &TrustedCidrs,
) -> IpAddr
where
    I: IntoIterator<Item = &'a [u8]>,
{
    if !trusted.trusts(peer) {
        return peer;
    }
    if !trusted.recurse {
        return nth_from_right(xff(), 0).unwrap_or(peer);
    }
    let entries = xff_entries(xff());
    if entries.len() > MAX_XFF_ENTRIES {
        return peer;
    }
    let mut leftmost = None;
    for entry in entries.iter().rev() {
        let Some(ip) = parse_entry(entry) else {
            return peer;
        };
        if !trusted.trusts(ip) {
            return ip;
        }
        leftmost = Some(ip);
    }
    leftmost.unwrap_or(peer)
}

/// The address Envoy would call the downstream "remote address" of a request.
///
/// * `peer`: the TCP peer of the connection.
/// * `xff`: gives the incoming `x-forwarded-for` values (several headers are read as one
///   list); only called when they matter, so the common gateway case never looks them up.
/// * `use_remote_address`: true for gateways (Istio always sets it there).
/// * `trusted_hops`: `xff_num_trusted_hops` (`numTrustedProxies`).
///
/// Any unparsable or missing entry falls back to the peer.
pub fn trusted_client_addr<'a, I>(
    peer: IpAddr,
    xff: impl FnOnce() -> I,
    use_remote_address: bool,
    trusted_hops: u32,
) -> IpAddr
where
    I: IntoIterator<Item = &'a [u8]>,
{
    // Entries skipped from the right before the one we trust.
    let skip = match (use_remote_address, trusted_hops) {
        (true, 0) => return peer,
        (true, n) => n as usize - 1,
        (false, n) => n as usize,
    };
    nth_from_right(xff(), skip).unwrap_or(peer)
}

/// The `skip`-th (0-based) entry from the right of the comma-separated lists, parsed as an IP.
fn nth_from_right<'a, I>(xff: I, skip: usize) -> Option<IpAddr>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    parse_entry(xff_entries(xff).iter().rev().nth(skip)?)
}

/// The comma-separated entries of the headers, as one list in order.
fn xff_entries<'a, I>(xff: I) -> Vec<&'a [u8]>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    // Headers are few and short; collecting the entries keeps right-to-left order simple.
    let mut entries: Vec<&[u8]> = Vec::new();
    for value in xff {
        entries.extend(value.split(|&b| b == b','));
    }
    entries
}

fn parse_entry(entry: &[u8]) -> Option<IpAddr> {
    std::str::from_utf8(entry).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const PEER: &str = "10.0.0.1";

    fn addr(xff: &[&str], use_remote: bool, n: u32) -> IpAddr {
        trusted_client_addr(ip(PEER), || xff.iter().map(|s| s.as_bytes()), use_remote, n)
    }

    #[test]
    fn remote_address_without_trusted_hops_is_the_peer() {
        assert_eq!(addr(&["1.1.1.1, 2.2.2.2"], true, 0), ip(PEER));
        assert_eq!(addr(&[], true, 0), ip(PEER));
    }

    #[test]
    fn remote_address_with_trusted_hops_takes_nth_from_right() {
        assert_eq!(addr(&["1.1.1.1, 2.2.2.2, 3.3.3.3"], true, 1), ip("3.3.3.3"));
        assert_eq!(addr(&["1.1.1.1, 2.2.2.2, 3.3.3.3"], true, 2), ip("2.2.2.2"));
        assert_eq!(addr(&["1.1.1.1, 2.2.2.2, 3.3.3.3"], true, 3), ip("1.1.1.1"));
        // Fewer entries than hops: the peer.
        assert_eq!(addr(&["1.1.1.1"], true, 2), ip(PEER));
    }

    #[test]
    fn without_remote_address_takes_entry_after_trusted_hops() {
        assert_eq!(addr(&["1.1.1.1, 2.2.2.2"], false, 0), ip("2.2.2.2"));
        assert_eq!(addr(&["1.1.1.1, 2.2.2.2"], false, 1), ip("1.1.1.1"));
        assert_eq!(addr(&["1.1.1.1, 2.2.2.2"], false, 2), ip(PEER));
        assert_eq!(addr(&[], false, 0), ip(PEER));
    }

    #[test]
    fn several_headers_form_one_list() {
        assert_eq!(
            addr(&["1.1.1.1", "2.2.2.2,3.3.3.3"], true, 3),
            ip("1.1.1.1")
        );
    }

    #[test]
    fn invalid_entries_fall_back_to_peer() {
        assert_eq!(addr(&["1.1.1.1, not-an-ip"], true, 1), ip(PEER));
        assert_eq!(addr(&["1.1.1.1,"], true, 1), ip(PEER));
        assert_eq!(addr(&[" 2001:db8::1 "], true, 1), ip("2001:db8::1"));
    }

    fn by_cidrs(peer: &str, xff: &[&str], cidrs: &[&str], recurse: bool) -> IpAddr {
        let trusted = TrustedCidrs {
            cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            recurse,
        };
        client_addr_by_cidrs(ip(peer), || xff.iter().map(|s| s.as_bytes()), &trusted)
    }

    /// Envoy's `xff_trusted_cidrs` rows: (peer, XFF headers, recurse, client).
    #[test]
    fn trusted_cidrs_name_the_proxies_whose_xff_is_believed() {
        const LB: &[&str] = &["10.0.0.0/8", "192.168.1.0/24", "2001:db8::/32"];
        let long: Vec<String> = (0..21).map(|i| format!("203.0.113.{i}")).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        let long = [long.join(",")];
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        let rows: &[(&str, &[&str], bool, &str)] = &[
            // An untrusted peer is the client, whatever it claims.
            ("198.51.100.7", &["1.1.1.1"], false, "198.51.100.7"),
            ("198.51.100.7", &["1.1.1.1"], true, "198.51.100.7"),
            // A trusted peer: its last entry (without recurse, even a trusted one).
            ("10.1.2.3", &["1.1.1.1, 2.2.2.2"], false, "2.2.2.2"),
            ("10.1.2.3", &["1.1.1.1, 10.9.9.9"], false, "10.9.9.9"),
            // With recurse: the last entry outside the trusted ranges.
            ("10.1.2.3", &["1.1.1.1, 2.2.2.2, 10.9.9.9"], true, "2.2.2.2"),
            (
                "10.1.2.3",
                &["1.1.1.1", "192.168.1.5,10.9.9.9"],
                true,
                "1.1.1.1",
            ),
            // Every entry trusted: the first one.
            ("10.1.2.3", &["10.5.5.5, 10.9.9.9"], true, "10.5.5.5"),
            // No header, an unparsable entry on the way, too many entries: the peer.
            ("10.1.2.3", &[], false, "10.1.2.3"),
            ("10.1.2.3", &[], true, "10.1.2.3"),
            ("10.1.2.3", &["1.1.1.1, junk, 10.9.9.9"], true, "10.1.2.3"),
            ("10.1.2.3", &["1.1.1.1, junk"], false, "10.1.2.3"),
            ("10.1.2.3", &long, true, "10.1.2.3"),
            // IPv6, and IPv4 clients seen through a dual-stack socket.
            ("2001:db8::1", &["2001:db9::5"], true, "2001:db9::5"),
            ("::ffff:10.1.2.3", &["1.1.1.1"], false, "1.1.1.1"),
        ];
        for (peer, xff, recurse, want) in rows {
            assert_eq!(
                by_cidrs(peer, xff, LB, *recurse),
                ip(want),
                "peer {peer} xff {xff:?} recurse {recurse}"
            );
        }
    }
}
