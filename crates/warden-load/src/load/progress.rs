//! A progress line on stderr while a run is going (only when stderr is a terminal).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Completed-request counter; a no-op when progress is off, so the hot path pays nothing.
#[derive(Debug, Default)]
pub struct Progress {
    done: Option<AtomicU64>,
}

impl Progress {
    pub fn new(enabled: bool) -> Progress {
        Progress {
            done: enabled.then(|| AtomicU64::new(0)),
        }
    }

    pub fn tick(&self) {
        if let Some(done) = &self.done {
            done.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn done(&self) -> Option<u64> {
        self.done.as_ref().map(|d| d.load(Ordering::Relaxed))
    }
}

/// Draws the bar until aborted; [`clear`] wipes the line afterwards.
pub fn spawn(
    progress: Arc<Progress>,
    start: Instant,
    expected: Option<u64>,
    duration: Option<Duration>,
) -> Option<JoinHandle<()>> {
    progress.done()?;
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let done = progress.done().unwrap_or(0);
            let elapsed = start.elapsed();
            let by_count = expected.map(|n| done as f64 / n.max(1) as f64);
            let by_time = duration.map(|d| elapsed.as_secs_f64() / d.as_secs_f64().max(1e-9));
            let fraction = by_count
                .into_iter()
                .chain(by_time)
                .fold(0.0f64, f64::max)
                .min(1.0);
            let width = 30;
            let filled = (fraction * width as f64) as usize;
            let rate = done as f64 / elapsed.as_secs_f64().max(1e-9);
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r[{}{}] {:3.0}%  {done} requests  {rate:.0} req/s ",
                "#".repeat(filled),
                " ".repeat(width - filled),
                fraction * 100.0
            );
            let _ = err.flush();
        }
    }))
}

pub fn clear() {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
}
