//! Errors of starting, reloading and stopping a proxy.

use warden_config::ConfigErrors;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        what: String,
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot open access log {path}: {source}")]
    AccessLog {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {what}: {source}")]
    Thread {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("cannot watch config files: {0}")]
    Watch(#[from] notify::Error),
}
