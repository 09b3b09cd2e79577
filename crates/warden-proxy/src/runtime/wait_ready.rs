//! `warden wait` (Istio's `pilot-agent wait`): block until the sidecar answers 200 on its
//! readiness URL, so a container's postStart hook can hold the app containers back until the
//! proxy is ready (`holdApplicationUntilProxyStarts`; the kubelet starts the next container
//! only once a container's postStart hook has returned).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The status code of one `GET path` to `addr`, or why there was none.
fn status(addr: SocketAddr, path: &str, timeout: Duration) -> Result<u16, String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut head = [0u8; 256];
    let n = s.read(&mut head).map_err(|e| e.to_string())?;
    crate::runtime::app_probers::status_of(&head[..n]).ok_or_else(|| "no HTTP status".into())
}

/// Polls `GET path` on `addr` every `period` until it answers 200 (`Ok`), or `timeout` has
/// passed (`Err` with the last answer).
pub fn wait_ready(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
    period: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match status(addr, path, period.max(Duration::from_millis(100))) {
            Ok(200) => return Ok(()),
            Ok(code) => format!("status {code}"),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "http://{addr}{path} not ready after {timeout:?} ({last})"
            ));
        }
        std::thread::sleep(period);
    }
}
