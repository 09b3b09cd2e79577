//! Helpers the namespace tests share: running code on a thread inside a namespace, accepting
//! with a deadline, reading a redirected connection's original destination.

// Each test file uses its own subset.
#![allow(dead_code)]

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Output};
use std::time::{Duration, Instant};
use warden_testkit::NetNs;

pub const WAIT: Duration = Duration::from_secs(5);

/// Why these tests cannot run here (printed, then the test returns), or `None`.
pub fn skip() -> Option<String> {
    warden_testkit::netns::unavailable().map(|why| format!("skipped: {why}"))
}

/// Run `f` on a thread that has entered `ns`'s network namespace: sockets it creates live
/// there (and stay there when handed back). Only that thread moves; the test process does not.
pub fn in_netns<T: Send>(ns: &NetNs, f: impl FnOnce() -> T + Send) -> T {
    ns.run_in(f)
        .expect("entering the namespace (or the thread in it panicked)")
}

/// A listener on `addr`, non-blocking so accepts can give up.
pub fn listen(addr: &str) -> TcpListener {
    let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    listener.set_nonblocking(true).expect("non-blocking");
    listener
}

pub fn connect(addr: &str) -> io::Result<TcpStream> {
    let addr: SocketAddr = addr.parse().expect("a socket address");
    TcpStream::connect_timeout(&addr, WAIT)
}

/// The next connection on `listener` within [`WAIT`], or `None`.
pub fn accept_within(listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    let deadline = Instant::now() + WAIT;
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                stream.set_nonblocking(false).expect("blocking");
                return Some((stream, peer));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Whether a connection is waiting on `listener` right now.
pub fn has_pending(listener: &TcpListener) -> bool {
    listener.accept().is_ok()
}

/// Where a connection REDIRECT sent to us was going (`SO_ORIGINAL_DST`).
pub fn original_dst(stream: &TcpStream) -> SocketAddr {
    socket2::SockRef::from(stream)
        .original_dst_v4()
        .expect("SO_ORIGINAL_DST")
        .as_socket()
        .expect("an IP address")
}

/// The child's output once it exits, killing it if it takes longer than [`WAIT`].
pub fn output_within(mut child: Child) -> Output {
    let deadline = Instant::now() + WAIT;
    while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait_with_output().expect("output")
}

/// `iptables-save -t nat` (or ip6tables-save) inside `ns`, without its timestamped comments.
pub fn nat_table(ns: &NetNs, save: &str) -> String {
    let out = ns
        .exec(save, &["-t", "nat"])
        .expect("iptables-save in the namespace");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}
