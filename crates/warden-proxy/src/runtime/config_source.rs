//! Loading the configured source (files/directories or inline text).

use crate::runtime::options::ConfigSource;
use warden_config::{ConfigErrors, Loaded};

pub fn load(source: &ConfigSource) -> Result<Loaded, ConfigErrors> {
    match source {
        ConfigSource::Paths(paths) => warden_config::load_paths(paths),
        ConfigSource::Inline { name, text } => warden_config::load_str(name, text),
    }
}
