//! Counter stores behind the limiter: in-process memory (default) or Redis (single, sentinel or
//! cluster), both using the reference's keys and fixed windows.

mod memory;
mod memory_bans;
mod redis;

pub use self::memory::MemoryStore;
pub use self::memory_bans::MemoryBans;
pub use self::redis::{RedisPool, RedisSettings, RedisStore, RedisTls, RedisType};

use crate::ban::{BanRecord, BanState};
use crate::config::BanConfig;
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
    /// The limit has a ban schedule: the ban state is read with the count (a call found banned
    /// is refused and not counted) and a count over the limit starts the next ban.
    pub ban: Option<BanOp>,
}

/// The ban part of a [`CounterOp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanOp {
    /// The client's ban state key (`<prefix>warden_ban:<domain>_<k>_<v>_...`).
    pub key: String,
    pub config: Arc<BanConfig>,
    /// Over this count (after the call's hits) is an offence.
    pub limit: u32,
    /// The call's descriptor index: who the ban is for, as [`SubjectOf`] writes it.
    pub descriptor: usize,
    /// The limiter's clock.
    pub now_ms: u64,
}

/// Who a ban is for ([`crate::ban::BanSubject`] as JSON, stored with the state for listing),
/// by [`BanOp::descriptor`]: written only when an offence stores a ban, not on every decision.
pub type SubjectOf<'a> = &'a (dyn Fn(usize) -> String + Sync);

/// What a ban did to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanOutcome {
    /// Refused: banned for this much longer (the call was not counted).
    Refused { remaining_ms: u64, strikes: u32 },
    /// This call's offence started a ban of this length.
    Started { duration_ms: u64, strikes: u32 },
}

impl BanOutcome {
    /// The ban state this outcome says is stored, seen at `now_ms`.
    pub fn state_at(self, now_ms: u64) -> BanState {
        let (ms, strikes) = match self {
            BanOutcome::Refused {
                remaining_ms,
                strikes,
            } => (remaining_ms, strikes),
            BanOutcome::Started {
                duration_ms,
                strikes,
            } => (duration_ms, strikes),
        };
        BanState {
            until_ms: now_ms.saturating_add(ms),
            strikes,
        }
    }
}

/// Counts after an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CounterResult {
    /// The counter after `INCRBY` (the reference's "after").
    pub after: u64,
    /// The previous window's count (0 when not requested or absent).
    pub prev: u64,
    /// The ban's effect, for ops with one.
    pub ban: Option<BanOutcome>,
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
        subject_of: SubjectOf<'_>,
    ) -> Result<Vec<CounterResult>, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.apply(ops, now_millis, subject_of)),
            Store::Redis(r) => Box::pin(r.apply(ops, subject_of)).await,
        }
    }

    /// Current counts of `keys` (0 when absent), for `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub async fn get(&self, ops: &[CounterOp], now_millis: u64) -> Result<Vec<u64>, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.get(ops, now_millis)),
            Store::Redis(r) => Box::pin(r.get(ops)).await,
        }
    }

    /// Bans in force at `now_ms`.
    pub async fn list_bans(&self, now_ms: u64) -> Result<Vec<BanRecord>, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.bans().list(now_ms)),
            Store::Redis(r) => Box::pin(r.list_bans(now_ms)).await,
        }
    }

    /// Lifts the ban of `key` (and forgets its strikes); whether there was one.
    pub async fn lift_ban(&self, key: &str) -> Result<bool, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.bans().lift(key)),
            Store::Redis(r) => Box::pin(r.lift_ban(key)).await,
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
