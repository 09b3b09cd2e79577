//! Redis counters with the reference's commands: per request one pipeline of
//! `INCRBY key hits` + `EXPIRE key ttl` per descriptor, over multiplexed connections owned by
//! the serving thread (concurrent requests are pipelined on each), with a strict timeout and
//! reconnects that do not fail the request that finds a connection broken (`conn_slot`).
//! Single servers, sentinel-managed masters (`REDIS_TYPE=sentinel`) and TLS (`REDIS_TLS`) use
//! warden's dialer; cluster mode uses redis-rs's cluster client and sends each key's commands
//! to its node concurrently.

mod ban_script;
mod conn_slot;
mod dial;
mod lane;
mod settings;
mod tls;

pub use self::settings::{RedisSettings, RedisTls, RedisType};

use self::lane::{Lane, LaneFactory};
use super::{BanOutcome, CounterOp, CounterResult, StoreError};
use crate::ban::BanRecord;
use crate::serving_thread;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// One Redis client: a lane of connections per gRPC serving thread, made on that thread when
/// it first decides, and a shared lane for every other caller (health probe, HTTP `/json`,
/// in-process `decide`).
///
/// `REDIS_POOL_SIZE` counts multiplexed connections in all: it is capped at the number of cores
/// (more connections than cores only split the pipelines; measured: 10 connections gave ~40%
/// fewer decisions/s than 2 on 2 cores) and split evenly over the serving threads, at least one
/// each. The shared lane has one connection. Cluster mode: one cluster connection per lane.
pub struct RedisPool {
    factory: LaneFactory,
    shared: Lane,
    /// Indexed by [`serving_thread::current`].
    per_thread: Box<[OnceLock<Lane>]>,
    conns_per_thread: usize,
    timeout: Duration,
    healthy: AtomicBool,
}

impl std::fmt::Debug for RedisPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPool")
            .field("serving_threads", &self.per_thread.len())
            .field("conns_per_thread", &self.conns_per_thread)
            .field("timeout", &self.timeout)
            .field("healthy", &self.healthy)
            .finish_non_exhaustive()
    }
}

impl RedisPool {
    /// Creates the pool for `serving_threads` gRPC threads without connecting (connections are
    /// made lazily and re-made after failures), so the service starts even while Redis is down.
    /// Must be called inside a tokio runtime (the shared lane lives on it).
    pub fn new(settings: &RedisSettings, serving_threads: usize) -> Result<Self, StoreError> {
        let factory = LaneFactory::new(settings)?;
        let shared = factory.lane(1);
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = serving_threads.max(1);
        Ok(RedisPool {
            shared,
            per_thread: (0..threads).map(|_| OnceLock::new()).collect(),
            conns_per_thread: (settings.pool_size.clamp(1, cores) / threads).max(1),
            factory,
            timeout: settings.timeout,
            healthy: AtomicBool::new(false),
        })
    }

    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// The current thread's lane.
    fn lane(&self) -> &Lane {
        let Some(slot) = serving_thread::current().and_then(|i| self.per_thread.get(i)) else {
            return &self.shared;
        };
        slot.get_or_init(|| self.factory.lane(self.conns_per_thread))
    }

    /// Runs `pipe` with the strict timeout, tracking health.
    async fn run<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T, StoreError> {
        let result = match tokio::time::timeout(self.timeout, self.lane().query(pipe)).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(self.timeout.as_millis())),
        };
        self.healthy.store(result.is_ok(), Ordering::Relaxed);
        result
    }

    /// PING, for the health probe. A failure makes every connection of this client suspect:
    /// each is re-made before its next request (a half-open connection would otherwise fail
    /// that request, or hang it until the timeout).
    pub async fn ping(&self) -> bool {
        let mut pipe = redis::pipe();
        pipe.cmd("PING");
        let ok = self.run::<(String,)>(&pipe).await.is_ok();
        if !ok {
            self.factory.distrust_connections();
        }
        ok
    }

    async fn apply(&self, ops: &[&CounterOp]) -> Result<Vec<CounterResult>, StoreError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        match &self.factory {
            LaneFactory::Single { .. } => self.apply_pipeline(ops).await,
            LaneFactory::Cluster { .. } => {
                // Keys live on different nodes: one pipeline per key, all in flight at once.
                let futures = ops.iter().map(|op| async move {
                    match &op.ban {
                        None => self.apply_pipeline(std::slice::from_ref(op)).await,
                        Some(_) => Ok(vec![self.apply_banned_in_cluster(op).await?]),
                    }
                });
                let results = futures_util::future::try_join_all(futures).await?;
                Ok(results.into_iter().flatten().collect())
            }
        }
    }

    /// One pipeline for `ops`: `INCRBY` + `EXPIRE` (+ `GET` of the previous window) per op, or
    /// the ban script ([`ban_script::CHECK_COUNT_OFFEND`]) for an op with a ban.
    async fn apply_pipeline(&self, ops: &[&CounterOp]) -> Result<Vec<CounterResult>, StoreError> {
        let mut pipe = redis::pipe();
        for op in ops {
            if let Some(ban) = &op.ban {
                ban_script::add_check_count_offend(&mut pipe, op, ban);
                continue;
            }
            pipe.cmd("INCRBY").arg(&op.key).arg(op.hits);
            pipe.cmd("EXPIRE").arg(&op.key).arg(op.ttl_secs).ignore();
            if let Some(prev) = &op.prev_key {
                pipe.cmd("GET").arg(prev);
            }
        }
        let values: Vec<redis::Value> = self.run(&pipe).await?;
        let mut values = values.into_iter();
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            if op.ban.is_some() {
                let (after, ban) = values
                    .next()
                    .map_or((0, None), |v| ban_script::parse_check_count_offend(&v));
                results.push(CounterResult {
                    after,
                    prev: 0,
                    ban,
                });
                continue;
            }
            let after = values.next().map_or(0, |v| int_of(&v));
            let prev = if op.prev_key.is_some() {
                values.next().map_or(0, |v| int_of(&v))
            } else {
                0
            };
            results.push(CounterResult {
                after,
                prev,
                ban: None,
            });
        }
        Ok(results)
    }

    /// Cluster mode: the counter and the ban key are on different slots, so the check (`GET`),
    /// the count and the offence ([`ban_script::OFFEND`]) are three round trips.
    async fn apply_banned_in_cluster(&self, op: &CounterOp) -> Result<CounterResult, StoreError> {
        let Some(ban) = &op.ban else {
            return Ok(CounterResult::default());
        };
        let mut get = redis::pipe();
        get.cmd("GET").arg(&ban.key);
        let (stored,): (redis::Value,) = self.run(&get).await?;
        let state = ban_script::stored_state(&stored);
        if let crate::ban::BanCheck::Banned {
            remaining_ms,
            strikes,
        } = crate::ban::schedule::check(state, ban.config.forget_after_ms, ban.now_ms)
        {
            return Ok(CounterResult {
                ban: Some(BanOutcome::Refused {
                    remaining_ms,
                    strikes,
                }),
                ..CounterResult::default()
            });
        }
        let counted = CounterOp {
            ban: None,
            ..op.clone()
        };
        let mut result = self
            .apply_pipeline(&[&counted])
            .await?
            .into_iter()
            .next()
            .unwrap_or_default();
        if op.hits > 0 && result.after > u64::from(ban.limit) {
            let mut offend = redis::pipe();
            ban_script::add_offend(&mut offend, ban);
            let (answer,): (redis::Value,) = self.run(&offend).await?;
            result.ban = ban_script::parse_offend(&answer);
        }
        Ok(result)
    }

    /// Ban states whose key starts with `pattern`'s prefix (`SCAN`, bounded), in force at
    /// `now_ms`. Cluster mode scans the node the connection reaches first (a debug listing).
    async fn list_bans(&self, pattern: &str, now_ms: u64) -> Result<Vec<BanRecord>, StoreError> {
        const MAX_ROUNDS: usize = 1000;
        let mut out = Vec::new();
        let mut cursor: u64 = 0;
        for _ in 0..MAX_ROUNDS {
            let mut scan = redis::pipe();
            scan.cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000);
            let ((next, keys),): ((u64, Vec<String>),) = self.run(&scan).await?;
            if !keys.is_empty() {
                let mut get = redis::pipe();
                for key in &keys {
                    get.cmd("GET").arg(key);
                }
                let values: Vec<Option<String>> = self.run(&get).await?;
                for (key, value) in keys.into_iter().zip(values) {
                    if let Some(record) = value.and_then(|v| BanRecord::parse(key, &v)) {
                        if record.state.until_ms > now_ms {
                            out.push(record);
                        }
                    }
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        Ok(out)
    }

    async fn lift_ban(&self, key: &str) -> Result<bool, StoreError> {
        let mut del = redis::pipe();
        del.cmd("DEL").arg(key);
        let (removed,): (i64,) = self.run(&del).await?;
        Ok(removed > 0)
    }

    async fn get(&self, ops: &[&CounterOp]) -> Result<Vec<u64>, StoreError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let run_one = |chunk: &[&CounterOp]| {
            let mut pipe = redis::pipe();
            for op in chunk {
                pipe.cmd("GET").arg(&op.key);
            }
            async move {
                let values: Vec<Option<i64>> = self.run(&pipe).await?;
                Ok::<_, StoreError>(
                    values
                        .into_iter()
                        .map(|v| v.unwrap_or(0).max(0) as u64)
                        .collect::<Vec<_>>(),
                )
            }
        };
        match &self.factory {
            LaneFactory::Single { .. } => run_one(ops).await,
            LaneFactory::Cluster { .. } => {
                let futures = ops.iter().map(|op| run_one(std::slice::from_ref(op)));
                let results = futures_util::future::try_join_all(futures).await?;
                Ok(results.into_iter().flatten().collect())
            }
        }
    }
}

/// The Redis store: the main client and the optional per-second client (`REDIS_PERSECOND`).
#[derive(Debug)]
pub struct RedisStore {
    main: RedisPool,
    per_second: Option<RedisPool>,
    /// Where ban keys start (`CACHE_KEY_PREFIX` + `warden_ban:`), for listing them.
    ban_prefix: String,
}

/// A counter's value (`INCRBY`, `GET`): 0 when absent or not a number.
fn int_of(value: &redis::Value) -> u64 {
    match value {
        redis::Value::Int(i) => (*i).max(0) as u64,
        redis::Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .map_or(0, |i| i.max(0) as u64),
        _ => 0,
    }
}

/// `text` as a literal in a `SCAN MATCH` pattern.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl RedisStore {
    /// See [`RedisPool::new`].
    pub fn new(
        main: &RedisSettings,
        per_second: Option<&RedisSettings>,
        serving_threads: usize,
        ban_prefix: String,
    ) -> Result<Self, StoreError> {
        Ok(RedisStore {
            ban_prefix,
            main: RedisPool::new(main, serving_threads)?,
            per_second: per_second
                .map(|s| RedisPool::new(s, serving_threads))
                .transpose()?,
        })
    }

    pub fn healthy(&self) -> bool {
        self.main.healthy() && self.per_second.as_ref().is_none_or(RedisPool::healthy)
    }

    /// Probes every client once; updates health.
    pub async fn probe(&self) -> bool {
        let main = self.main.ping().await;
        let per_second = match &self.per_second {
            Some(p) => p.ping().await,
            None => true,
        };
        main && per_second
    }

    fn split<'a>(&self, ops: &'a [CounterOp]) -> (Vec<&'a CounterOp>, Vec<&'a CounterOp>) {
        if self.per_second.is_none() {
            return (ops.iter().collect(), Vec::new());
        }
        ops.iter().partition(|op| !op.per_second)
    }

    /// Puts results back in `ops` order after the per-second split.
    fn merge<T: Copy>(
        ops: &[CounterOp],
        has_per_second: bool,
        main: Vec<T>,
        second: Vec<T>,
    ) -> Vec<T> {
        if !has_per_second {
            return main;
        }
        let (mut m, mut s) = (main.into_iter(), second.into_iter());
        ops.iter()
            .filter_map(|op| if op.per_second { s.next() } else { m.next() })
            .collect()
    }

    /// `call` on each pool with its share of `ops` (both at once), results in `ops` order.
    async fn on_pools<T: Copy>(
        &self,
        ops: &[CounterOp],
        call: impl AsyncFn(&RedisPool, &[&CounterOp]) -> Result<Vec<T>, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let (main_ops, second_ops) = self.split(ops);
        let (main, second) = match &self.per_second {
            None => (call(&self.main, &main_ops).await?, Vec::new()),
            Some(ps) => {
                let (a, b) = tokio::join!(call(&self.main, &main_ops), call(ps, &second_ops));
                (a?, b?)
            }
        };
        Ok(Self::merge(ops, self.per_second.is_some(), main, second))
    }

    pub async fn apply(&self, ops: &[CounterOp]) -> Result<Vec<CounterResult>, StoreError> {
        self.on_pools(ops, async |pool, ops| pool.apply(ops).await)
            .await
    }

    pub async fn get(&self, ops: &[CounterOp]) -> Result<Vec<u64>, StoreError> {
        self.on_pools(ops, async |pool, ops| pool.get(ops).await)
            .await
    }

    /// Bans in force on every client (a SECOND-unit limit's bans live on the per-second one).
    pub async fn list_bans(&self, now_ms: u64) -> Result<Vec<BanRecord>, StoreError> {
        let pattern = format!("{}*", glob_escape(&self.ban_prefix));
        let mut out = self.main.list_bans(&pattern, now_ms).await?;
        if let Some(ps) = &self.per_second {
            out.extend(ps.list_bans(&pattern, now_ms).await?);
        }
        Ok(out)
    }

    pub async fn lift_ban(&self, key: &str) -> Result<bool, StoreError> {
        let mut lifted = self.main.lift_ban(key).await?;
        if let Some(ps) = &self.per_second {
            lifted |= ps.lift_ban(key).await?;
        }
        Ok(lifted)
    }
}
