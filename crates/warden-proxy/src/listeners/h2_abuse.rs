//! HTTP/2 abuse limits of the downstream server (CVE-2023-44487 "rapid reset" and its kin).
//!
//! h2's own limits come first ([`configure`]): streams reset by the client before they were
//! accepted, and streams the server had to reset, are bounded per connection (GOAWAY
//! ENHANCE_YOUR_CALM beyond), as are concurrent streams and the header list. A rapid-reset
//! client whose streams are accepted before their RST_STREAM is read gets past those, so the
//! proxy also counts premature resets itself, as Envoy does (`premature_reset_*`): once at least
//! half of a connection's streams were reset by the client before their response, and there
//! were enough of them, the connection gets a GOAWAY ENHANCE_YOUR_CALM and is closed
//! ([`ResetTracker`]; the code is set by `h2_goaway_code`).
//!
//! A stream's request is not forwarded before the stream has been seen alive once more
//! ([`settle`]): hyper drops a request's future when its stream is reset, but only between polls.

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Streams a client may reset before the server accepts them (h2's default is 20).
const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// Streams the server may reset (protocol errors, streams refused over the concurrency limit)
/// on one connection (hyper's default 1024 is a lot of free work for a misbehaving client).
/// Above the premature-reset rule's 250, so that the rule, which sees every reset before a
/// response, acts first; this stays as h2's backstop.
const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 512;
/// Envoy's recommended edge value (its default is unbounded).
pub const MAX_CONCURRENT_STREAMS: u32 = 100;
/// A connection is judged once this many of its streams ended (Envoy's
/// `overload.premature_reset_total_stream_count`), or earlier once half this many were reset.
const PREMATURE_RESET_STREAM_COUNT: u32 = 500;
/// Pings to an idle connection, and how long its answer may take: a peer that stopped
/// answering is closed instead of being held forever.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(60);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// h2's per-connection limits on the downstream server.
pub fn configure(builder: &mut auto::Builder<TokioExecutor>, max_header_list: u32) {
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(max_header_list)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESET_STREAMS)
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
}

/// One connection's streams: how many ended, how many of them the client reset before their
/// response; [`ResetTracker::abusive`] wakes once the rule above says so.
#[derive(Default)]
pub struct ResetTracker {
    ended: AtomicU32,
    premature: AtomicU32,
    abusive: Notify,
}

impl ResetTracker {
    /// A guard for one stream: dropped without [`StreamGuard::answered`], it counts as reset.
    pub fn stream(self: &Arc<Self>) -> StreamGuard {
        StreamGuard {
            tracker: self.clone(),
            answered: false,
        }
    }

    /// Resolves once the connection has shown itself abusive.
    pub async fn abusive(&self) {
        self.abusive.notified().await
    }

    fn ended(&self, reset: bool) {
        let ended = self.ended.fetch_add(1, Ordering::Relaxed) + 1;
        let premature = self.premature.load(Ordering::Relaxed) + u32::from(reset);
        if reset {
            self.premature.fetch_add(1, Ordering::Relaxed);
        }
        let too_many = if ended < PREMATURE_RESET_STREAM_COUNT {
            premature * 2 >= PREMATURE_RESET_STREAM_COUNT
        } else {
            premature * 2 >= ended
        };
        if reset && too_many {
            // `notify_one` keeps the permit if the connection is not waiting right now.
            self.abusive.notify_one();
        }
    }
}

pub struct StreamGuard {
    tracker: Arc<ResetTracker>,
    answered: bool,
}

impl StreamGuard {
    /// The stream got its response head (what happens to its body is not counted).
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.tracker.ended(!self.answered);
    }
}

/// Let the connection task run once before a new stream's request is acted on, so that a
/// RST_STREAM that came with its HEADERS (rapid reset) has been read and hyper drops the request
/// before anything reaches an upstream.
pub async fn settle() {
    tokio::task::yield_now().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_the_streams_reset_is_abusive() {
        let check = |resets: u32, answered: u32| {
            let t = Arc::new(ResetTracker::default());
            for _ in 0..answered {
                t.stream().answered();
            }
            for _ in 0..resets {
                drop(t.stream());
            }
            // A stored permit means the connection was flagged.
            let flagged = futures_util::FutureExt::now_or_never(t.abusive()).is_some();
            flagged
        };
        assert!(!check(10, 1000));
        assert!(!check(249, 0));
        assert!(check(250, 0));
        assert!(check(600, 500));
        assert!(!check(400, 600));
    }
}
