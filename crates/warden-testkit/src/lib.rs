//! Dev-only helpers shared by warden's integration tests.
//!
//! [`RedisServer`] starts a private `redis-server` on a free loopback port (no persistence), waits
//! until it answers `PING`, can be stopped and restarted on the same port (to simulate an outage),
//! and kills the process when dropped. [`RedisSentinel`] runs a master, replicas and
//! `redis-server --sentinel` processes that fail over within seconds. [`Nginx`] runs a private
//! nginx on a free loopback port for side-by-side probes; [`h2_frames`] builds and reads raw
//! HTTP/2 frames for abuse probes; [`pki`] makes test CAs and certificates (rcgen) as PEM files
//! in a temp folder; [`KillOnDrop`] holds a child process, [`spawn_listening`] starts an app in a
//! pod's namespace and waits for its ports; [`wait_until`] polls a condition.
//!
//! The host guards (network namespaces, veth pairs, child cgroups, temp dirs, free ports, a
//! program another uid can execute) live in `warden-sandbox`, which `warden lab` uses too, and
//! are re-exported here: tests name them all through the testkit.

#![forbid(unsafe_code)]

pub mod h2_frames;
mod kill_on_drop;
mod nginx;
pub mod pki;
mod pod_app;
mod redis_cluster;
mod redis_sentinel;
mod redis_server;
mod wait;

pub use kill_on_drop::KillOnDrop;
pub use nginx::{Nginx, NginxError};
pub use pod_app::spawn_listening;
pub use redis_cluster::{RedisCluster, RedisClusterError};
pub use redis_sentinel::{RedisSentinel, RedisSentinelError, MASTER_NAME};
pub use redis_server::{RedisServer, RedisServerError};
pub use wait::wait_until;
pub use warden_sandbox::{
    cgroup, free_port, netns, run_as, Cgroup, NetNs, NetNsError, RunAs, TempDir,
};
