//! Binding listener sockets: one per worker per port with SO_REUSEPORT, so the kernel spreads
//! connections over workers without a shared accept queue.

use crate::routing::ports::{ListenerProtocol, ListenerSpec};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{SocketAddr, TcpListener};

/// A bound listener as `/listeners` and [`crate::RunningProxy::listeners`] report it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ListenerInfo {
    pub name: String,
    pub port_in_config: u16,
    pub protocol: ListenerProtocol,
    pub addr: SocketAddr,
}

/// Bind `count` sockets on `addr`; port 0 picks a free port for the first and reuses it.
pub fn bind_group(addr: SocketAddr, count: usize) -> std::io::Result<Vec<TcpListener>> {
    let mut out = Vec::with_capacity(count);
    let mut addr = addr;
    for _ in 0..count.max(1) {
        let l = bind_one(addr, count > 1)?;
        addr = l.local_addr()?;
        out.push(l);
    }
    Ok(out)
}

pub fn bind_one(addr: SocketAddr, reuse_port: bool) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_tcp_nodelay(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// A listener's sockets, bound but not yet served by any worker.
pub struct BoundListener {
    pub info: ListenerInfo,
    pub spec: ListenerSpec,
    pub sockets: Vec<TcpListener>,
}

/// Bind `spec` on `addr` once per worker; `info` carries the actual address (port 0 resolved).
pub fn bind_listener(
    addr: SocketAddr,
    spec: &ListenerSpec,
    workers: usize,
) -> std::io::Result<BoundListener> {
    let sockets = bind_group(addr, workers)?;
    let bound = match sockets.first() {
        Some(s) => s.local_addr()?,
        None => addr,
    };
    Ok(BoundListener {
        info: ListenerInfo {
            name: spec.name.clone(),
            port_in_config: spec.port,
            protocol: spec.protocol,
            addr: bound,
        },
        spec: spec.clone(),
        sockets,
    })
}
