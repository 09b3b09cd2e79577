//! A `redis-server` child process guard for tests.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long we wait for a freshly started server to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RedisServerError {
    #[error("cannot find a free loopback port: {0}")]
    Port(std::io::Error),
    #[error("cannot start redis-server (is it installed? test.sh installs it): {0}")]
    Spawn(std::io::Error),
    #[error("redis-server on port {port} did not answer PING within {timeout:?}")]
    NotReady { port: u16, timeout: Duration },
}

/// A running `redis-server` bound to 127.0.0.1; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    extra_args: Vec<String>,
}

impl RedisServer {
    /// Starts redis-server on a free loopback port and waits until it answers PING.
    pub fn start() -> Result<Self, RedisServerError> {
        Self::start_with_args(Vec::new())
    }

    /// As [`RedisServer::start`] with extra `redis-server` arguments (e.g. cluster mode).
    pub fn start_with_args(extra_args: Vec<String>) -> Result<Self, RedisServerError> {
        // A cluster node also listens on port + 10000 (the cluster bus): that one must be free too.
        let cluster = extra_args.iter().any(|a| a == "--cluster-enabled");
        let port = if cluster {
            free_port_with_bus()?
        } else {
            crate::free_port().map_err(RedisServerError::Port)?
        };
        let mut server = RedisServer {
            port,
            child: None,
            extra_args,
        };
        server.spawn()?;
        Ok(server)
    }

    /// The TCP port the server listens on (stable across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, the form `REDIS_URL` takes with `REDIS_SOCKET_TYPE=tcp`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:PORT/`, the form redis-rs clients take.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Whether the process is currently running.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (all data is lost: persistence is off). Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and waits until it answers PING.
    pub fn restart(&mut self) -> Result<(), RedisServerError> {
        self.stop();
        self.spawn()
    }

    fn spawn(&mut self) -> Result<(), RedisServerError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        // The port may linger briefly after a stop; retry the spawn until the deadline.
        loop {
            let mut child = Command::new("redis-server")
                .args([
                    "--port",
                    &self.port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--protected-mode",
                    "no",
                    "--loglevel",
                    "warning",
                ])
                .args(&self.extra_args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(RedisServerError::Spawn)?;
            loop {
                if ping(self.port) {
                    self.child = Some(child);
                    return Ok(());
                }
                if let Ok(Some(_exited)) = child.try_wait() {
                    break; // e.g. port still in use: spawn again
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(RedisServerError::NotReady {
                        port: self.port,
                        timeout: READY_TIMEOUT,
                    });
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if Instant::now() > deadline {
                return Err(RedisServerError::NotReady {
                    port: self.port,
                    timeout: READY_TIMEOUT,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free port below 55535 whose cluster-bus port (port + 10000) is free as well.
fn free_port_with_bus() -> Result<u16, RedisServerError> {
    for _ in 0..100 {
        let port = crate::free_port().map_err(RedisServerError::Port)?;
        if port < 55_535 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    crate::free_port().map_err(RedisServerError::Port)
}

/// Inline-protocol PING; true when the server answers `+PONG`.
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(stream.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_stops_and_restarts_on_the_same_port() {
        let mut server = RedisServer::start().expect("start");
        let port = server.port();
        assert!(ping(port));
        server.stop();
        assert!(!ping(port));
        server.restart().expect("restart");
        assert_eq!(server.port(), port);
        assert!(ping(port));
        drop(server);
        assert!(!ping(port));
    }
}
