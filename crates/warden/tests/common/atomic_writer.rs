//! A folder laid out as the kubelet writes ConfigMap, Secret and downward-API volumes
//! (kubernetes pkg/volume/util/atomic_writer.go): each version of the files in a hidden
//! timestamped directory, `..data` a symlink to the current one, and every key a symlink
//! `key -> ..data/key`. An update writes the new version beside the old, points `..data_tmp`
//! at it and renames that over `..data` (one atomic step for every file), then removes the old
//! version.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static VERSION: AtomicU64 = AtomicU64::new(0);

pub struct AtomicWriterDir {
    path: PathBuf,
    current: Option<PathBuf>,
}

impl AtomicWriterDir {
    /// `path` (created, 0755 so a container's non-root user can read it) holding `files`.
    pub fn new(path: &Path, files: &[(&str, &str)]) -> AtomicWriterDir {
        std::fs::create_dir_all(path).expect("volume directory");
        set_mode(path, 0o755);
        let mut dir = AtomicWriterDir {
            path: path.to_path_buf(),
            current: None,
        };
        dir.update(files);
        dir
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Publish a new version holding exactly `files` (keys without `/`).
    pub fn update(&mut self, files: &[(&str, &str)]) {
        let n = VERSION.fetch_add(1, Ordering::Relaxed);
        let version = format!("..2026_12_07_06_00_00.{}{n}", std::process::id());
        let version_dir = self.path.join(&version);
        std::fs::create_dir(&version_dir).expect("version directory");
        set_mode(&version_dir, 0o755);
        for (key, contents) in files {
            let file = version_dir.join(key);
            std::fs::write(&file, contents).expect("volume file");
            set_mode(&file, 0o644);
        }
        let tmp = self.path.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(&version, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.path.join("..data")).expect("..data swapped");
        for (key, _) in files {
            let link = self.path.join(key);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(key), &link).expect("key link");
            }
        }
        // Keys that the new version no longer has lose their links.
        if let Ok(entries) = std::fs::read_dir(&self.path) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !name.starts_with("..") && !files.iter().any(|(k, _)| *k == name) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        if let Some(old) = self.current.replace(version_dir) {
            let _ = std::fs::remove_dir_all(old);
        }
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}
