//! One multiplexed connection that is re-made when it breaks, without failing the request that
//! finds it broken:
//! - before a request is written: a connection whose driver ended (the server closed it, e.g.
//!   a Redis restart), that a request marked broken, or that is older than the last failed
//!   health probe (half-open connections never see the close) is re-made first;
//! - after a connection error: the request is sent once more on a fresh connection only if
//!   the old stream accepted no byte since it was queued, so it cannot have been executed (a
//!   request that may have reached Redis is never counted twice).

use super::super::StoreError;
use super::dial::{Conn, Dialer};
use arc_swap::ArcSwapOption;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(super) struct ConnSlot {
    dialer: Arc<Dialer>,
    /// Bumped by the pool when a health probe fails: connections made before are suspect.
    generation: Arc<AtomicU64>,
    current: ArcSwapOption<Conn>,
    /// One connect at a time; the others wait for its result.
    connecting: tokio::sync::Mutex<()>,
}

/// Errors after which the connection cannot be trusted.
fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

fn redis_error(e: redis::RedisError) -> StoreError {
    StoreError::Redis(e.to_string())
}

impl ConnSlot {
    /// A slot that connects on first use.
    pub fn new(dialer: Arc<Dialer>, generation: Arc<AtomicU64>) -> Self {
        ConnSlot {
            dialer,
            generation,
            current: ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    fn fresh(&self, c: &Conn) -> bool {
        c.state.usable() && c.state.generation >= self.generation.load(Ordering::Relaxed)
    }

    /// The current connection, re-made first when it is not fresh.
    async fn conn(&self) -> Result<Arc<Conn>, StoreError> {
        if let Some(c) = self.current.load_full().filter(|c| self.fresh(c)) {
            return Ok(c);
        }
        let _guard = self.connecting.lock().await;
        if let Some(c) = self.current.load_full().filter(|c| self.fresh(c)) {
            return Ok(c);
        }
        let generation = self.generation.load(Ordering::Relaxed);
        let c = Arc::new(self.dialer.connect(generation).await?);
        self.current.store(Some(c.clone()));
        Ok(c)
    }

    /// Sends `pipe` and reads its replies (no timeout here; the pool applies it).
    pub async fn query<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        let c = self.conn().await?;
        let written = c.state.written();
        let err = match pipe.query_async::<T>(&mut c.conn.clone()).await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if is_connection_error(&err) {
            c.state.mark_broken();
            if c.state.written() == written {
                tracing::debug!(error = %err, "redis request not sent; resending on a new connection");
                let fresh = self.conn().await?;
                return pipe
                    .query_async::<T>(&mut fresh.conn.clone())
                    .await
                    .map_err(|e| {
                        if is_connection_error(&e) {
                            fresh.state.mark_broken();
                        }
                        redis_error(e)
                    });
            }
        } else if err.code() == Some("READONLY") {
            // A demoted master (sentinel failover): find the new one on the next call.
            c.state.mark_broken();
        }
        Err(redis_error(err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::settings::RedisSettings;
    use std::time::Duration;

    fn slot(redis: &warden_testkit::RedisServer) -> ConnSlot {
        let settings = RedisSettings {
            socket_type: "tcp".into(),
            url: redis.addr(),
            timeout: Duration::from_secs(2),
            ..RedisSettings::default()
        };
        let dialer = Dialer::new(settings.dial_plan().expect("plan")).expect("dialer");
        ConnSlot::new(Arc::new(dialer), Arc::new(AtomicU64::new(0)))
    }

    fn incr() -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.cmd("INCRBY").arg("k").arg(1);
        pipe
    }

    /// The driver ended but the request did not know: nothing reached the socket, so it is
    /// sent once more on a new connection, and counted once.
    #[tokio::test]
    async fn a_request_queued_on_a_dead_connection_is_resent_once() {
        let redis = warden_testkit::RedisServer::start().expect("redis");
        let slot = slot(&redis);
        let (n,): (u64,) = slot.query(&incr()).await.expect("first");
        assert_eq!(n, 1);
        let old = slot.current.load_full().expect("connected");
        let mut admin = redis::Client::open(redis.url())
            .and_then(|c| c.get_connection())
            .expect("admin");
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query(&mut admin)
            .expect("kill");
        for _ in 0..200 {
            if !old.state.alive() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!old.state.alive(), "the driver saw the close");
        old.state.pretend_alive();
        let (n,): (u64,) = slot.query(&incr()).await.expect("resent");
        assert_eq!(n, 2, "counted once");
        let new = slot.current.load_full().expect("reconnected");
        assert!(!Arc::ptr_eq(&old, &new), "on a new connection");
        let count: u64 = redis::cmd("GET").arg("k").query(&mut admin).expect("get");
        assert_eq!(count, 2);
    }
}
