//! Counter stores behind the limiter: in-process memory (default) or Redis (single, sentinel or
//! cluster), both using the reference's keys and fixed windows.

mod memory;
mod redis;

pub use self::memory::MemoryStore;
pub use self::redis::{RedisPool, RedisSettings, RedisStore, RedisTls, RedisType};

use std::sync::Arc;

/// One counter update: `INCRBY key hits` + `EXPIRE key ttl`, optionally reading the previous
/// window's counter (sliding window).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterOp {
    pub key: String,
    pub hits: u64,
    pub ttl_secs: u64,
    pub prev_key: Option<String>,
    /// SECOND-unit keys go to the per-second Redis when one is configured.
    pub per_second: bool,
}

/// Counts after an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CounterResult {
    /// The counter after `INCRBY` (the reference's "after").
    pub after: u64,
    /// The previous window's count (0 when not requested or absent).
    pub prev: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Text of the Redis error, returned to clients as the gRPC UNKNOWN message.
    #[error("{0}")]
    Redis(String),
    #[error("redis timeout after {0} ms")]
    Timeout(u128),
}

/// The configured store.
#[derive(Debug, Clone)]
pub enum Store {
    Memory(Arc<MemoryStore>),
    Redis(Arc<RedisStore>),
}

impl Store {
    /// Applies all updates of one request (one round trip per Redis client).
    ///
    /// The Redis round trip's state (pipelines, timers, two clients) is boxed: inline it made
    /// every decision's future, memory ones too, over 2 KiB, and each call boxes that future
    /// (allocations of 1 KiB and more take glibc's slow path, with heap consolidation).
    pub async fn apply(
        &self,
        ops: &[CounterOp],
        now_millis: u64,
    ) -> Result<Vec<CounterResult>, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.apply(ops, now_millis)),
            Store::Redis(r) => Box::pin(r.apply(ops)).await,
        }
    }

    /// Current counts of `keys` (0 when absent), for `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub async fn get(&self, ops: &[CounterOp], now_millis: u64) -> Result<Vec<u64>, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.get(ops, now_millis)),
            Store::Redis(r) => Box::pin(r.get(ops)).await,
        }
    }

    /// False while Redis is unreachable; memory is always healthy.
    pub fn healthy(&self) -> bool {
        match self {
            Store::Memory(_) => true,
            Store::Redis(r) => r.healthy(),
        }
    }
}
