//! The loop every connection task runs, whatever the protocol: claim a slot from the shared
//! schedule, wait until it is due, do one exchange under the timeout, record it.

use super::stats::ConnStats;
use super::{RequestError, Shared};
use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;

/// What one successful exchange moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    /// HTTP status; `None` for TCP.
    pub status: Option<u16>,
    pub sent: u64,
    pub received: u64,
}

/// One client connection of some protocol; (re)connects by itself when it has none.
pub trait Client: Send {
    /// One request/response (or TCP round trip). `sockets` counts connections opened.
    fn exchange(
        &mut self,
        shared: &Shared,
        sockets: &mut u64,
    ) -> impl Future<Output = Result<Exchange, RequestError>> + Send;

    /// Drop the connection (after an error or a timeout, or when keep-alive is off).
    fn close(&mut self);
}

pub async fn run_connection<C: Client>(shared: Arc<Shared>, mut client: C) -> ConnStats {
    let mut stats = ConnStats::new(shared.connections);
    // One timer per connection, moved forward per request: extending a tokio timer does not
    // touch the timer wheel, arming a fresh one per request would.
    let deadline = tokio::time::sleep(shared.timeout);
    tokio::pin!(deadline);
    while let Some(slot) = shared.schedule.next() {
        let start = slot.wait().await;
        deadline.as_mut().reset(Instant::now() + shared.timeout);
        let outcome = tokio::select! {
            biased;
            outcome = client.exchange(&shared, &mut stats.sockets) => Some(outcome),
            _ = &mut deadline => None,
        };
        let latency = Instant::now() - start;
        match outcome {
            Some(Ok(x)) => stats.record_ok(x.status, latency, x.sent, x.received),
            Some(Err(err)) => {
                client.close();
                stats.record_error(err.kind(), latency);
            }
            None => {
                client.close();
                stats.record_error("timeout", latency);
            }
        }
        if !shared.keepalive {
            client.close();
        }
        shared.progress.tick();
    }
    stats
}
