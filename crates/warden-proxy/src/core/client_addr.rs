//! The trusted client address, following the `use_remote_address` / `xff_num_trusted_hops`
//! table of Envoy's `x-forwarded-for` docs. Pure, so the tests below hold every row of it.

use std::net::IpAddr;

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
    // Headers are few and short; collecting the entries keeps right-to-left order simple.
    let mut entries: Vec<&[u8]> = Vec::new();
    for value in xff {
        entries.extend(value.split(|&b| b == b','));
    }
    let entry = *entries.iter().rev().nth(skip)?;
    let text = std::str::from_utf8(entry).ok()?.trim();
    text.parse().ok()
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
}
