//! Client sockets, optionally bound to a chosen source address (e.g. 127.0.0.2) so per-IP limits
//! can be exercised from one machine.

use super::RequestError;
use std::net::{IpAddr, SocketAddr};
use tokio::net::{TcpSocket, TcpStream};

pub async fn connect(addr: SocketAddr, source: Option<IpAddr>) -> Result<TcpStream, RequestError> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(RequestError::Socket)?;
    if let Some(ip) = source {
        socket
            .bind(SocketAddr::new(ip, 0))
            .map_err(RequestError::Bind)?;
    }
    let stream = socket.connect(addr).await.map_err(RequestError::Connect)?;
    // Small requests must not wait for Nagle.
    stream.set_nodelay(true).map_err(RequestError::Socket)?;
    Ok(stream)
}
