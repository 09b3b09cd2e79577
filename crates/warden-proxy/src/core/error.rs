//! Errors of starting, reloading and stopping a proxy.
//! The OS error is each variant's `source`, not part of its message: `warden` prints the chain
//! (`{err:#}`), which would repeat it.

use warden_config::ConfigErrors;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    #[error("cannot bind {what} on {addr}")]
    Bind {
        what: String,
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot open access log {path}")]
    AccessLog {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {what}")]
    Thread {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("cannot watch config files")]
    Watch(#[from] notify::Error),
    #[error(
        "the config gives this proxy no listener ({skipped} Gateway(s) not served by it: \
         `warden check` with the same flags says why); start with --allow-empty-config to run \
         without one"
    )]
    NoListener { skipped: usize },
    #[error(
        "the mesh config's warden.xffTrustedCidrs and numTrustedProxies {hops} (from {from}) \
         both say which proxies to trust; Envoy refuses both, so keep one"
    )]
    TrustedProxiesTwice { hops: u32, from: String },
}
