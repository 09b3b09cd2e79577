//! Where config files come from (the reference's goruntime layout or explicit paths), how they
//! are keyed in messages, and how they combine into one set of domains.

use super::parse::{check_descriptors, parse_config};
use super::{ConfigError, RlsConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Deepest directory nesting walked (symlinked directories could otherwise loop).
const MAX_DEPTH: usize = 16;

/// Where config files are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// The reference's goruntime layout, files keyed by their relative path with `/` replaced
    /// by `.`:
    /// - `watch_root` (`RUNTIME_WATCH_ROOT=true`, the default): every file under
    ///   `root/subdirectory` whose key starts with `"<app_directory>."` (e.g.
    ///   `config.basic.yaml`);
    /// - otherwise: every file under `root/subdirectory/app_directory`, keyed relative to it
    ///   (e.g. `basic.yaml`).
    Runtime {
        root: PathBuf,
        subdirectory: String,
        /// `RUNTIME_APPDIRECTORY` (default `config`).
        app_directory: String,
        watch_root: bool,
        ignore_dotfiles: bool,
    },
    /// `--config PATH...`: files, or directories walked recursively (dotfiles skipped).
    Paths(Vec<PathBuf>),
}

/// All loaded domains, keyed by domain name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigSet {
    pub domains: BTreeMap<String, RlsConfig>,
}

/// One file found by the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundFile {
    pub key: String,
    pub path: PathBuf,
    /// Size and mtime of the file the path resolves to: a `..data` swap changes them.
    pub stamp: (u64, Option<SystemTime>),
    pub resolved: Option<PathBuf>,
}

impl ConfigSource {
    /// Lists the files this source would load, sorted by key.
    pub(crate) fn files(&self) -> Result<Vec<FoundFile>, ConfigError> {
        let mut found = Vec::new();
        match self {
            ConfigSource::Runtime {
                root,
                subdirectory,
                app_directory,
                watch_root,
                ignore_dotfiles,
            } => {
                let mut base = root.join(subdirectory);
                if !*watch_root {
                    base.push(app_directory);
                }
                walk(&base, "", *ignore_dotfiles, 0, &mut found).map_err(|e| ConfigError {
                    file: base.display().to_string(),
                    message: format!("cannot read runtime directory: {e}"),
                })?;
                if *watch_root {
                    let prefix = format!("{app_directory}.");
                    found.retain(|f| f.key.starts_with(&prefix));
                }
            }
            ConfigSource::Paths(paths) => {
                for path in paths {
                    let io_err = |e: std::io::Error| ConfigError {
                        file: path.display().to_string(),
                        message: format!("cannot read config: {e}"),
                    };
                    let meta = std::fs::metadata(path).map_err(io_err)?;
                    if meta.is_dir() {
                        let mut inner = Vec::new();
                        walk(path, "", true, 0, &mut inner).map_err(io_err)?;
                        for mut f in inner {
                            f.key = f.path.display().to_string();
                            found.push(f);
                        }
                    } else {
                        found.push(found_file(path.display().to_string(), path.clone(), &meta));
                    }
                }
            }
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }
}

fn found_file(key: String, path: PathBuf, meta: &std::fs::Metadata) -> FoundFile {
    FoundFile {
        key,
        resolved: std::fs::canonicalize(&path).ok(),
        path,
        stamp: (meta.len(), meta.modified().ok()),
    }
}

fn walk(
    dir: &Path,
    key_prefix: &str,
    ignore_dotfiles: bool,
    depth: usize,
    out: &mut Vec<FoundFile>,
) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if ignore_dotfiles && name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        // Follow symlinks: ConfigMap files are symlinks into `..data`.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue; // dangling symlink mid-swap
        };
        let key = format!("{key_prefix}{name}");
        if meta.is_dir() {
            walk(&path, &format!("{key}."), ignore_dotfiles, depth + 1, out)?;
        } else {
            out.push(found_file(key, path, &meta));
        }
    }
    Ok(())
}

/// Reads, parses and combines every file of `source`. With `merge_domains` (the reference's
/// `MERGE_DOMAIN_CONFIG`), files naming the same domain add descriptors to it.
pub fn load_config_set(
    source: &ConfigSource,
    merge_domains: bool,
) -> Result<ConfigSet, ConfigError> {
    let files = source.files()?;
    let mut set = ConfigSet::default();
    for file in files {
        let text = std::fs::read_to_string(&file.path).map_err(|e| ConfigError {
            file: file.key.clone(),
            message: format!("error loading config file: {e}"),
        })?;
        let config = parse_config(&file.key, &text)?;
        add_domain(&mut set, &file.key, config, merge_domains)?;
    }
    Ok(set)
}

pub(crate) fn add_domain(
    set: &mut ConfigSet,
    file_key: &str,
    config: RlsConfig,
    merge_domains: bool,
) -> Result<(), ConfigError> {
    let err = |message: String| ConfigError {
        file: file_key.to_owned(),
        message,
    };
    match set.domains.get_mut(&config.domain) {
        None => {
            set.domains.insert(config.domain.clone(), config);
        }
        Some(_) if !merge_domains => {
            return Err(err(format!(
                "duplicate domain '{}' in config file",
                config.domain
            )))
        }
        Some(existing) => {
            existing.descriptors.extend(config.descriptors);
            check_descriptors(&format!("{}.", existing.domain), &existing.descriptors)
                .map_err(err)?;
        }
    }
    Ok(())
}
