//! Opening an upstream TCP connection: within the connect timeout, from a chosen local address
//! when the cluster has one (a sidecar's inbound passthrough connects from `127.0.0.6`, which
//! the capture rules let through so it is not captured again).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::{TcpSocket, TcpStream};

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("timed out")]
    Timeout,
}

/// Connect to `host:port` (an address, or a name resolved here), from `source` when given.
pub async fn connect(
    host: &str,
    port: u16,
    source: Option<IpAddr>,
    timeout: Duration,
) -> Result<TcpStream, ConnectError> {
    let attempt = async {
        let Some(source) = source else {
            return TcpStream::connect((host, port)).await;
        };
        let target: SocketAddr = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port),
            Err(_) => tokio::net::lookup_host((host, port))
                .await?
                .next()
                .ok_or_else(|| std::io::Error::other("no address"))?,
        };
        let socket = if target.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.bind(SocketAddr::new(source, 0))?;
        socket.connect(target).await
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(ConnectError::Io(e)),
        Err(_) => Err(ConnectError::Timeout),
    }
}
