//! Redis counters with the reference's commands: per request one pipeline of
//! `INCRBY key hits` + `EXPIRE key ttl` per descriptor, over multiplexed connections owned by
//! the serving thread (concurrent requests are pipelined on each), with a strict timeout and
//! reconnects that do not fail the request that finds a connection broken (`conn_slot`).
//! Single servers, sentinel-managed masters (`REDIS_TYPE=sentinel`) and TLS (`REDIS_TLS`) use
//! warden's dialer; cluster mode uses redis-rs's cluster client and sends each key's commands
//! to its node concurrently.

mod conn_slot;
mod dial;
mod lane;
mod settings;
mod tls;

pub use self::settings::{RedisSettings, RedisTls, RedisType};

use self::lane::{Lane, LaneFactory};
use super::{CounterOp, CounterResult, StoreError};
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
                let futures = ops
                    .iter()
                    .map(|op| self.apply_pipeline(std::slice::from_ref(op)));
                let results = futures_util::future::try_join_all(futures).await?;
                Ok(results.into_iter().flatten().collect())
            }
        }
    }

    async fn apply_pipeline(&self, ops: &[&CounterOp]) -> Result<Vec<CounterResult>, StoreError> {
        let mut pipe = redis::pipe();
        for op in ops {
            pipe.cmd("INCRBY").arg(&op.key).arg(op.hits);
            pipe.cmd("EXPIRE").arg(&op.key).arg(op.ttl_secs).ignore();
            if let Some(prev) = &op.prev_key {
                pipe.cmd("GET").arg(prev);
            }
        }
        let values: Vec<Option<i64>> = self.run(&pipe).await?;
        let mut values = values.into_iter();
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            let after = values.next().flatten().unwrap_or(0).max(0) as u64;
            let prev = if op.prev_key.is_some() {
                values.next().flatten().unwrap_or(0).max(0) as u64
            } else {
                0
            };
            results.push(CounterResult { after, prev });
        }
        Ok(results)
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
}

impl RedisStore {
    /// See [`RedisPool::new`].
    pub fn new(
        main: &RedisSettings,
        per_second: Option<&RedisSettings>,
        serving_threads: usize,
    ) -> Result<Self, StoreError> {
        Ok(RedisStore {
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
}
