//! A small Redis Cluster (masters only) on loopback for tests, built from [`RedisServer`]s.

use crate::{RedisServer, RedisServerError, TempDir};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum RedisClusterError {
    #[error(transparent)]
    Server(#[from] RedisServerError),
    #[error("cluster setup failed: {0}")]
    Setup(String),
}

/// `n` cluster-enabled redis-servers joined with `redis-cli --cluster create`; killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    _dir: TempDir,
}

impl RedisCluster {
    /// Starts `masters` (at least 3) nodes and waits until the cluster state is ok.
    pub fn start(masters: usize) -> Result<Self, RedisClusterError> {
        let dir =
            TempDir::new("redis-cluster").map_err(|e| RedisClusterError::Setup(e.to_string()))?;
        let mut nodes = Vec::new();
        for i in 0..masters.max(3) {
            let node_dir = dir.path().join(format!("n{i}"));
            std::fs::create_dir_all(&node_dir)
                .map_err(|e| RedisClusterError::Setup(e.to_string()))?;
            let args = vec![
                "--cluster-enabled".into(),
                "yes".into(),
                "--dir".into(),
                node_dir.display().to_string(),
                "--cluster-node-timeout".into(),
                "2000".into(),
            ];
            // A port can be taken between choosing it and binding it (tests run in parallel):
            // try a few fresh ports before giving up.
            let mut node = RedisServer::start_with_args(args.clone());
            for _ in 0..3 {
                if node.is_ok() {
                    break;
                }
                node = RedisServer::start_with_args(args.clone());
            }
            nodes.push(node?);
        }
        let addrs: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| RedisClusterError::Setup(format!("redis-cli: {e}")))?;
        if !out.status.success() {
            return Err(RedisClusterError::Setup(
                String::from_utf8_lossy(&out.stdout).into_owned(),
            ));
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for node in &nodes {
            loop {
                let info = Command::new("redis-cli")
                    .args(["-p", &node.port().to_string(), "cluster", "info"])
                    .output()
                    .map_err(|e| RedisClusterError::Setup(e.to_string()))?;
                if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(RedisClusterError::Setup(
                        "cluster_state never became ok".into(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(RedisCluster { nodes, _dir: dir })
    }

    /// `127.0.0.1:p1,127.0.0.1:p2,...`: the form `REDIS_URL` takes with `REDIS_TYPE=cluster`.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(RedisServer::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}
