//! The reference (envoyproxy/ratelimit) config format: model, parser with the reference's
//! validation messages, serializer, and the runtime-directory loader.

mod ban;
mod extensions;
mod loader;
mod model;
mod parse;
mod serialize;
mod yaml_v2;
mod yaml_value;

pub use ban::{format_duration, parse_duration, BanConfig};
pub use extensions::warden_extensions;
pub use loader::{load_config_set, ConfigSet, ConfigSource};
pub use model::{Algorithm, DescriptorConfig, RateLimitConfig, RlsConfig, Unit};
pub use parse::parse_config;
pub use serialize::to_yaml;

/// A config error in the reference's form: `"<file-key>: <message>"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    /// The runtime key of the file (relative path with `/` replaced by `.`), or the path given.
    pub file: String,
    pub message: String,
}
