//! Dev-only helpers shared by warden's integration tests.
//!
//! [`RedisServer`] starts a private `redis-server` on a free loopback port (no persistence), waits
//! until it answers `PING`, can be stopped and restarted on the same port (to simulate an outage),
//! and kills the process when dropped. [`RedisSentinel`] runs a master, replicas and
//! `redis-server --sentinel` processes that fail over within seconds. [`netns`] makes network
//! namespaces, veth pairs and child cgroups for sidecar and capture tests, and removes them on
//! drop. [`Nginx`] runs a private nginx on a free loopback port for side-by-side probes;
//! [`h2_frames`] builds and reads raw HTTP/2 frames for abuse probes; [`pki`] makes test CAs
//! and certificates (rcgen) as PEM files in a temp folder.

pub mod h2_frames;
pub mod netns;
mod nginx;
pub mod pki;
mod redis_cluster;
mod redis_sentinel;
mod redis_server;
mod temp_dir;

pub use netns::{Cgroup, NetNs, NetNsError};
pub use nginx::{Nginx, NginxError};
pub use redis_cluster::{RedisCluster, RedisClusterError};
pub use redis_sentinel::{RedisSentinel, RedisSentinelError, MASTER_NAME};
pub use redis_server::{RedisServer, RedisServerError};
pub use temp_dir::TempDir;
