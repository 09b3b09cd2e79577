//! Loopback ports for servers that must be told their port up front (redis-server, a config
//! whose YAML names the port twice, a child process).

use std::net::{Ipv4Addr, TcpListener};

/// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0). Another
/// process may take it before the caller binds it; where port 0 can be passed, pass port 0.
pub fn free_port() -> std::io::Result<u16> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()
        .map(|a| a.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
    }
}
