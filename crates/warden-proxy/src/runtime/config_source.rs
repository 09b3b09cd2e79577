//! Loading the configured source (files/directories or inline text).

use crate::runtime::options::ConfigSource;
use warden_config::{ConfigErrors, LoadOptions, Loaded};

pub fn load(source: &ConfigSource) -> Result<Loaded, ConfigErrors> {
    load_with(source, &LoadOptions::default())
}

/// [`load`] with the operator's choices (`--skip-kind`).
pub fn load_with(source: &ConfigSource, options: &LoadOptions) -> Result<Loaded, ConfigErrors> {
    match source {
        ConfigSource::Paths(paths) => warden_config::load_paths_with(paths, options),
        ConfigSource::Inline { name, text } => warden_config::load_str_with(name, text, options),
    }
}
