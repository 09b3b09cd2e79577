//! A sentinel-managed Redis on loopback for tests: a master, replicas of it, and
//! `redis-server --sentinel` processes watching them, all on free ports and killed on drop.
//! The sentinels are tuned to fail over within a few seconds (down after 300 ms).

use crate::{RedisServer, RedisServerError, TempDir};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The master name the sentinels monitor.
pub const MASTER_NAME: &str = "mymaster";

/// How long setup steps (replication, sentinel discovery) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum RedisSentinelError {
    #[error(transparent)]
    Server(#[from] RedisServerError),
    #[error("sentinel setup failed: {0}")]
    Setup(String),
}

fn setup(e: impl std::fmt::Display) -> RedisSentinelError {
    RedisSentinelError::Setup(e.to_string())
}

/// One `redis-server --sentinel` process; killed on drop.
#[derive(Debug)]
struct SentinelProcess {
    port: u16,
    child: Child,
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A master, its replicas and the sentinels watching them.
#[derive(Debug)]
pub struct RedisSentinel {
    /// The master first, then the replicas (the roles change after a failover).
    servers: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
    _dir: TempDir,
}

/// `redis-cli -p PORT args...`, its stdout.
fn cli(port: u16, args: &[&str]) -> Result<String, RedisSentinelError> {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| setup(format!("redis-cli: {e}")))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Polls `check` every 50 ms until it holds or `timeout` passes.
fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<bool, RedisSentinelError>,
) -> Result<(), RedisSentinelError> {
    let deadline = Instant::now() + timeout;
    loop {
        if check()? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(setup(format!("{what}: not within {timeout:?}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl RedisSentinel {
    /// Starts a master, `replicas` replicas (at least one) and `sentinels` sentinels (quorum:
    /// a majority of them), and waits until the replicas are in sync and every sentinel knows
    /// the replicas and the other sentinels (a failover needs their votes).
    pub fn start(replicas: usize, sentinels: usize) -> Result<Self, RedisSentinelError> {
        let dir = TempDir::new("redis-sentinel").map_err(setup)?;
        let master = RedisServer::start()?;
        let master_port = master.port();
        let mut servers = vec![master];
        for _ in 0..replicas.max(1) {
            servers.push(RedisServer::start_with_args(vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                master_port.to_string(),
            ])?);
        }
        let quorum = sentinels.max(1) / 2 + 1;
        let mut procs = Vec::new();
        for i in 0..sentinels.max(1) {
            procs.push(spawn_sentinel(&dir, i, master_port, quorum)?);
        }
        let cluster = RedisSentinel {
            servers,
            sentinels: procs,
            _dir: dir,
        };
        let want_replicas = cluster.servers.len() - 1;
        wait_until("replicas in sync", SETUP_TIMEOUT, || {
            let info = cli(master_port, &["INFO", "replication"])?;
            Ok(info.matches("state=online").count() == want_replicas)
        })?;
        let others = cluster.sentinels.len() - 1;
        for s in &cluster.sentinels {
            wait_until("sentinels know each other", SETUP_TIMEOUT, || {
                let master = cli(s.port, &["SENTINEL", "master", MASTER_NAME])?;
                let known = |field: &str| {
                    let lines: Vec<&str> = master.lines().collect();
                    lines
                        .iter()
                        .position(|l| l.trim() == field)
                        .and_then(|i| lines.get(i + 1))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                };
                Ok(known("num-slaves") == Some(want_replicas)
                    && known("num-other-sentinels") == Some(others))
            })?;
        }
        Ok(cluster)
    }

    /// `mymaster,127.0.0.1:p1,...`: the form `REDIS_URL` takes with `REDIS_TYPE=sentinel`.
    pub fn url(&self) -> String {
        let mut url = MASTER_NAME.to_owned();
        for s in &self.sentinels {
            url.push_str(&format!(",127.0.0.1:{}", s.port));
        }
        url
    }

    /// The data servers: the first master, then its replicas.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The master's port as the first sentinel that answers names it.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = cli(
                s.port,
                &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
            )
            .ok()?;
            reply.lines().nth(1)?.trim().parse().ok()
        })
    }

    /// Kills the current master; returns its port.
    pub fn kill_master(&mut self) -> Result<u16, RedisSentinelError> {
        let port = self
            .master_port()
            .ok_or_else(|| setup("no sentinel names a master"))?;
        let server = self
            .servers
            .iter_mut()
            .find(|s| s.port() == port)
            .ok_or_else(|| setup(format!("the master on {port} is not one of ours")))?;
        server.stop();
        Ok(port)
    }

    /// Waits until every sentinel names a master other than `old_port` and that server says
    /// it is a master; returns its port.
    pub fn wait_for_failover(
        &self,
        old_port: u16,
        timeout: Duration,
    ) -> Result<u16, RedisSentinelError> {
        let mut new_port = None;
        wait_until("failover", timeout, || {
            let ports: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|s| {
                    let reply = cli(
                        s.port,
                        &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
                    )
                    .ok()?;
                    reply.lines().nth(1)?.trim().parse().ok()
                })
                .collect();
            let Some(Some(port)) = ports.first().copied() else {
                return Ok(false);
            };
            if port == old_port || ports.iter().any(|p| *p != Some(port)) {
                return Ok(false);
            }
            new_port = Some(port);
            Ok(cli(port, &["ROLE"])?.starts_with("master"))
        })?;
        new_port.ok_or_else(|| setup("failover without a port"))
    }
}

fn spawn_sentinel(
    dir: &TempDir,
    index: usize,
    master_port: u16,
    quorum: usize,
) -> Result<SentinelProcess, RedisSentinelError> {
    // A port can be taken between choosing and binding it: a few tries.
    let mut last = None;
    for attempt in 0..3 {
        let port = crate::free_port().map_err(setup)?;
        let work = dir.path().join(format!("s{index}-{attempt}"));
        std::fs::create_dir_all(&work).map_err(setup)?;
        let conf = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {}\nloglevel warning\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {MASTER_NAME} 300\n\
             sentinel failover-timeout {MASTER_NAME} 1000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            work.display()
        );
        let conf_path = work.join("sentinel.conf");
        std::fs::write(&conf_path, conf).map_err(setup)?;
        let mut child = Command::new("redis-server")
            .arg(&conf_path)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| RedisSentinelError::Server(RedisServerError::Spawn(e)))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if cli(port, &["PING"])?.trim() == "PONG" {
                return Ok(SentinelProcess { port, child });
            }
            if let Ok(Some(status)) = child.try_wait() {
                last = Some(format!("sentinel exited with {status}"));
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                last = Some(format!("sentinel on {port} did not answer PING"));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Err(setup(
        last.unwrap_or_else(|| "sentinel did not start".into()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_master_is_replaced() {
        let mut sentinel = RedisSentinel::start(1, 3).expect("start");
        let first = sentinel.master_port().expect("a master");
        assert_eq!(first, sentinel.servers()[0].port());
        let killed = sentinel.kill_master().expect("kill");
        let new = sentinel
            .wait_for_failover(killed, Duration::from_secs(15))
            .expect("failover");
        assert_eq!(new, sentinel.servers()[1].port());
    }
}
