//! What can go wrong, worded for the person running `warden capture`.

/// An error from building, reading or applying the capture rules.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("warden capture changes iptables rules and must run as root (running as uid {0})")]
    NotRoot(u32),
    /// Every iptables tool (ip6tables too) is in Debian's `iptables` package.
    #[error("{0} is not installed (apt-get install iptables)")]
    Missing(String),
    #[error("{0}")]
    InvalidOptions(String),
    #[error("cannot understand `{command}` output: {reason}")]
    Unparsable { command: String, reason: String },
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("cannot run `{command}`")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
}
