//! Waiting for config files to be stable before a file-change reload reads them: a writer that
//! truncates and then writes, or writes a large file in pieces, would otherwise be caught
//! half-way (and a half-written file may well parse).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;

/// No change event for this long, and the files' sizes and times the same at both ends of it.
pub const QUIET: Duration = Duration::from_millis(250);
/// A file that keeps changing is read after this long anyway (the reload guard and the parser
/// still stand between it and the running config).
pub const MAX_WAIT: Duration = Duration::from_secs(5);

/// Size and modification time of every config file (absent files included, as `None`).
type Fingerprint = Vec<(PathBuf, Option<(u64, Option<SystemTime>)>)>;

fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    warden_config::config_files(paths)
        .into_iter()
        .map(|f| {
            let meta = std::fs::metadata(&f)
                .ok()
                .map(|m| (m.len(), m.modified().ok()));
            (f, meta)
        })
        .collect()
}

/// After a change event: return once the files under `paths` have been stable for [`QUIET`]
/// (or [`MAX_WAIT`] has passed), with every event received meanwhile consumed.
pub async fn settle(changes: &mut mpsc::UnboundedReceiver<()>, paths: &[PathBuf]) {
    let give_up = Instant::now() + MAX_WAIT;
    let mut before = fingerprint(paths);
    loop {
        let quiet = tokio::time::timeout(QUIET, changes.recv()).await.is_err();
        while changes.try_recv().is_ok() {}
        let now = fingerprint(paths);
        if (quiet && now == before) || Instant::now() >= give_up {
            return;
        }
        before = now;
    }
}
