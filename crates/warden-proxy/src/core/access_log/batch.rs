//! Lines rendered where the request ends, on its worker, and appended to one shared batch;
//! the writer thread takes the whole batch every [`DRAIN_EVERY`] (a swap under the lock) and
//! writes it with one call. A worker renders into its own line first, so the lock is held
//! only for a copy; lines keep the order their requests were logged in, as Envoy's file log
//! keeps it. A record is never sent to another thread: its memory is reused by the worker
//! that made it (`record::recycle`).

use super::write_text::LineCaches;
use super::{LineFormat, LineWriter, Record};
use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

/// How often the writer takes the batch.
pub const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// The batch's bound: lines past it are dropped (and counted) until the writer takes it, so a
/// slow disk never blocks a request nor grows the proxy without end (16k lines of ~500 bytes).
const BATCH_LIMIT: usize = 8 * 1024 * 1024;

/// Unique per opened log, so a worker's renderer knows which log its caches are for.
static NEXT_LOG: AtomicU64 = AtomicU64::new(1);

/// What the workers share with one log's writer.
pub struct Shared {
    id: u64,
    writer: LineWriter,
    hostname: String,
    batch: Arc<Mutex<String>>,
    pub dropped: AtomicU64,
}

/// A worker's rendering state: START_TIME's text of the current second and the last line's
/// addresses, the scratch for computed values and the line being rendered, all kept from
/// request to request.
struct Renderer {
    log: u64,
    caches: RefCell<LineCaches>,
    scratch: String,
    line: String,
}

impl Renderer {
    const fn new() -> Self {
        Renderer {
            log: 0,
            caches: RefCell::new(LineCaches::new()),
            scratch: String::new(),
            line: String::new(),
        }
    }
}

thread_local! {
    static RENDERER: RefCell<Renderer> = const { RefCell::new(Renderer::new()) };
}

impl Shared {
    /// Render `record`'s line and append it to the batch (or count it dropped when full).
    pub fn log(&self, record: &Record) {
        // A record queued while its thread ends (a body dropped with its runtime) renders
        // with caches of its own.
        let appended = RENDERER
            .try_with(|renderer| match renderer.try_borrow_mut() {
                Ok(mut renderer) => self.append(&mut renderer, record),
                Err(_) => self.append(&mut Renderer::new(), record),
            })
            .unwrap_or_else(|_| self.append(&mut Renderer::new(), record));
        if !appended {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `false` when the batch is full.
    fn append(&self, renderer: &mut Renderer, record: &Record) -> bool {
        let Renderer {
            log,
            caches,
            scratch,
            line,
        } = renderer;
        if *log != self.id {
            // Another log's caches (tests open several in one process).
            *log = self.id;
            *caches = RefCell::new(LineCaches::new());
        }
        line.clear();
        self.writer
            .render(&self.hostname, caches, record, line, scratch);
        let mut batch = self.batch.lock().unwrap_or_else(PoisonError::into_inner);
        if batch.len() + line.len() > BATCH_LIMIT {
            return false;
        }
        batch.push_str(line);
        true
    }
}

/// The workers' side of a log whose writer thread `open` started on `out`.
pub fn open(
    format: LineFormat,
    hostname: String,
    mut out: Box<dyn Write + Send>,
) -> std::io::Result<Arc<Shared>> {
    let batch = Arc::new(Mutex::new(String::with_capacity(64 * 1024)));
    let shared = Arc::new(Shared {
        id: NEXT_LOG.fetch_add(1, Ordering::Relaxed),
        writer: LineWriter::new(&format),
        hostname,
        batch: batch.clone(),
        dropped: AtomicU64::new(0),
    });
    let alive: Weak<Shared> = Arc::downgrade(&shared);
    std::thread::Builder::new()
        .name("warden-access-log".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            // The buffer the batch is swapped with: two buffers go back and forth, so a
            // batch allocates nothing once they have grown.
            let mut taken = String::with_capacity(64 * 1024);
            // The writer takes the batch every `DRAIN_EVERY` instead of being woken per
            // line: a wake-up is a futex call and a context switch per request on the
            // worker's side (bench/telemetry.sh: 0.56 of the throughput without a log).
            // Envoy's own access log flushes on an interval too.
            loop {
                // Checked before the swap: a line appended by the last worker still logging
                // is in the batch this pass takes.
                let open = alive.strong_count() > 0;
                std::mem::swap(
                    &mut *batch.lock().unwrap_or_else(PoisonError::into_inner),
                    &mut taken,
                );
                if !taken.is_empty()
                    && out
                        .write_all(taken.as_bytes())
                        .and_then(|_| out.flush())
                        .is_err()
                {
                    tracing::warn!("access log write failed");
                }
                taken.clear();
                if !open {
                    return;
                }
                std::thread::sleep(DRAIN_EVERY);
            }
        })?;
    Ok(shared)
}
