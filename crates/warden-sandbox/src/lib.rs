//! What a test or a `warden lab` run borrows from this host, given back on drop (also when it
//! fails or is interrupted):
//!
//! - [`netns`]: network namespaces (`warden-<prefix>-<pid>-<n>`), veth pairs, the two-pod layout
//!   ([`netns::pod_pair`]) and threads or processes that enter a namespace;
//! - [`cgroup`]: child cgroups of the cgroup2 hierarchy (never the root);
//! - [`TempDir`]: a temp directory;
//! - [`free_port`]: a loopback port for servers that must be told theirs;
//! - [`RunAs`]: a program another uid (a sidecar's 1337) can execute, wherever it was built.
//!
//! A crate of its own so that the shipped binary (through `warden lab`) and the tests share these
//! guards without the binary linking the test helpers of `warden-testkit`.

// `netns` enters a namespace with setns(2) on a thread of its own (`NetNs::run_in`); libc has
// no safe wrapper. Everything else is safe code.
#![deny(unsafe_code)]

pub mod cgroup;
pub mod netns;
mod ports;
pub mod run_as;
mod temp_dir;

pub use cgroup::Cgroup;
pub use netns::{NetNs, NetNsError};
pub use ports::free_port;
pub use run_as::RunAs;
pub use temp_dir::TempDir;
