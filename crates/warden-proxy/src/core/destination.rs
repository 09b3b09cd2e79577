//! Where a connection was headed. A gateway listener's port says it; a sidecar's listeners
//! receive connections redirected by capture rules, whose real destination the kernel keeps
//! (`SO_ORIGINAL_DST`, from conntrack's NAT entry).

use socket2::SockRef;
use std::net::SocketAddr;

/// Which side of the proxy a listener serves; it picks the routes and policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Side {
    /// A Gateway server's port.
    Gateway,
    /// The sidecar's outbound listener (15001): the pod's own calls to other services.
    Outbound,
    /// The sidecar's inbound listener (15006): calls to the pod.
    Inbound,
}

/// The destination a redirected connection was opened to (IPv4 or IPv6). An error when the
/// connection was not redirected (no NAT entry), e.g. a client that dialed 15001 itself.
pub fn original_dst(stream: &tokio::net::TcpStream) -> std::io::Result<SocketAddr> {
    let sock = SockRef::from(stream);
    let local = stream.local_addr()?;
    let addr = if local.is_ipv4() {
        sock.original_dst_v4()?
    } else {
        sock.original_dst_v6()?
    };
    addr.as_socket()
        .ok_or_else(|| std::io::Error::other("original destination is not an IP address"))
}

/// `ip:port` (`[v6]:port`) as an upstream authority.
pub fn authority_of(addr: SocketAddr) -> Option<http::uri::Authority> {
    addr.to_string().parse().ok()
}
