//! An `nginx` child process guard for side-by-side probes: a private nginx on a free loopback
//! port with a temp config (the caller's `http {}` servers), killed on drop.

use crate::TempDir;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum NginxError {
    #[error("nginx setup")]
    Io(#[from] std::io::Error),
    #[error("cannot start nginx (is it installed?): {0}")]
    Spawn(std::io::Error),
    #[error("nginx did not listen on {0} in time; error log:\n{1}")]
    NotReady(SocketAddr, String),
}

/// A running nginx (one process, no daemon, no master) on `127.0.0.1:port`; killed on drop.
#[derive(Debug)]
pub struct Nginx {
    addr: SocketAddr,
    child: Child,
    dir: TempDir,
}

impl Nginx {
    /// Start nginx with `servers` inside its `http {}` block; every `{listen}` in them becomes
    /// `127.0.0.1:PORT` of a free port.
    pub fn start(servers: &str) -> Result<Self, NginxError> {
        Self::start_with_connections(servers, 256)
    }

    /// [`Nginx::start`] with room for `worker_connections` connections (scale probes; nginx
    /// needs as many open files, which it inherits).
    pub fn start_with_connections(
        servers: &str,
        worker_connections: usize,
    ) -> Result<Self, NginxError> {
        let port = crate::free_port()?;
        Self::start_at(
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            servers,
            worker_connections,
        )
    }

    /// [`Nginx::start_with_connections`] on a given address: a server brought back where it
    /// was (a restart after an outage).
    pub fn start_at(
        addr: SocketAddr,
        servers: &str,
        worker_connections: usize,
    ) -> Result<Self, NginxError> {
        let dir = TempDir::new("nginx")?;
        let d = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {d}/error.log info;\npid {d}/nginx.pid;\n\
             worker_rlimit_nofile {rlimit};\nevents {{ worker_connections {worker_connections}; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{}\n}}\n",
            servers.replace("{listen}", &addr.to_string()),
            rlimit = worker_connections + 64,
        );
        let conf_path = dir.write("nginx.conf", &conf)?;
        let child = Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(NginxError::Spawn)?;
        let mut nginx = Nginx { addr, child, dir };
        let deadline = Instant::now() + READY_TIMEOUT;
        while TcpStream::connect(addr).is_err() {
            if Instant::now() > deadline || matches!(nginx.child.try_wait(), Ok(Some(_))) {
                let log =
                    std::fs::read_to_string(nginx.dir.path().join("error.log")).unwrap_or_default();
                nginx.stop();
                return Err(NginxError::NotReady(addr, log));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(nginx)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}
