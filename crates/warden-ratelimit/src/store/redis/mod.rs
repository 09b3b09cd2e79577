//! Redis counters with the reference's commands: per request one pipeline of
//! `INCRBY key hits` + `EXPIRE key ttl` per descriptor, over multiplexed connections owned by
//! the serving thread (concurrent requests are pipelined on each), with a strict timeout and
//! reconnects that do not fail the request that finds a connection broken (`conn_slot`).
//! Single servers, sentinel-managed masters (`REDIS_TYPE=sentinel`) and TLS (`REDIS_TLS`) use
//! warden's dialer; cluster mode uses redis-rs's cluster client and sends each key's commands
//! to its node concurrently.

mod ban_followup;
mod ban_script;
mod ban_state_cache;
mod conn_slot;
mod dial;
mod lane;
mod settings;
mod tls;

pub use self::settings::{RedisSettings, RedisTls, RedisType};

use self::ban_followup::FollowUp;
use self::ban_state_cache::BanStateCache;
use self::lane::{Lane, LaneFactory};
use super::{BanOutcome, CounterOp, CounterResult, StoreError, SubjectOf};
use crate::ban::{BanRecord, BanState};
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
    /// Ban states read lately (`BAN_STATE_CACHE_MS`), so most calls skip their `GET`.
    ban_states: Option<BanStateCache>,
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
    pub fn new(
        settings: &RedisSettings,
        serving_threads: usize,
        ban_state_cache_ms: u64,
    ) -> Result<Self, StoreError> {
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
            ban_states: BanStateCache::new(ban_state_cache_ms),
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
            // A Redis that stopped answering may come back without its data (a restart
            // without persistence): the ban states read from it are read again.
            if let Some(cache) = &self.ban_states {
                cache.clear();
            }
        }
        ok
    }

    async fn apply(
        &self,
        ops: &[&CounterOp],
        subject_of: SubjectOf<'_>,
    ) -> Result<Vec<CounterResult>, StoreError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let counted = match &self.factory {
            LaneFactory::Single { .. } => self.count_pipeline(ops).await?,
            LaneFactory::Cluster { .. } => {
                // Keys live on different nodes: one pipeline per key, all in flight at once.
                let futures = ops.iter().map(|op| self.count_in_cluster(op));
                futures_util::future::try_join_all(futures).await?
            }
        };
        let (mut results, stored): (Vec<CounterResult>, Vec<Option<BanState>>) =
            counted.into_iter().unzip();
        self.settle_bans(ops, &mut results, &stored, subject_of)
            .await?;
        Ok(results)
    }

    /// One pipeline for `ops`: per op the ban state's `GET` (ops with a ban), `INCRBY` +
    /// `EXPIRE`, and the previous window's `GET` (sliding window).
    async fn count_pipeline(
        &self,
        ops: &[&CounterOp],
    ) -> Result<Vec<(CounterResult, Option<BanState>)>, StoreError> {
        let mut pipe = redis::pipe();
        let cached: Vec<Option<BanState>> = ops.iter().map(|op| self.cached_ban(op)).collect();
        for (op, cached) in ops.iter().zip(&cached) {
            if let (Some(ban), None) = (&op.ban, cached) {
                pipe.cmd("GET").arg(&ban.key);
            }
            add_count(&mut pipe, op);
        }
        let values: Vec<redis::Value> = self.run(&pipe).await?;
        let mut values = values.into_iter();
        let mut out = Vec::with_capacity(ops.len());
        for (op, cached) in ops.iter().zip(cached) {
            let stored = op.ban.as_ref().map(|ban| {
                cached.unwrap_or_else(|| {
                    let read = values
                        .next()
                        .map_or_else(BanState::default, |v| ban_script::stored_state(&v));
                    self.remember_ban(&ban.key, read, ban.now_ms);
                    read
                })
            });
            out.push((parse_count(&mut values, op), stored));
        }
        Ok(out)
    }

    /// Cluster mode, one op: the counter and the ban key hash to different slots, so their
    /// pipelines go out at once.
    async fn count_in_cluster(
        &self,
        op: &CounterOp,
    ) -> Result<(CounterResult, Option<BanState>), StoreError> {
        let Some(ban) = &op.ban else {
            let mut pipe = redis::pipe();
            add_count(&mut pipe, op);
            let values: Vec<redis::Value> = self.run(&pipe).await?;
            return Ok((parse_count(&mut values.into_iter(), op), None));
        };
        let counter = CounterOp {
            ban: None,
            ..op.clone()
        };
        if let Some(state) = self.cached_ban(op) {
            let counted = self.count_in_cluster_plain(&counter).await?;
            return Ok((counted, Some(state)));
        }
        let mut get = redis::pipe();
        get.cmd("GET").arg(&ban.key);
        let (stored, counted) = tokio::try_join!(
            self.run::<(redis::Value,)>(&get),
            self.count_in_cluster_plain(&counter)
        )?;
        let state = ban_script::stored_state(&stored.0);
        self.remember_ban(&ban.key, state, ban.now_ms);
        Ok((counted, Some(state)))
    }

    /// `op`'s ban state when it was read lately ([`ban_state_cache`]).
    fn cached_ban(&self, op: &CounterOp) -> Option<BanState> {
        let ban = op.ban.as_ref()?;
        self.ban_states.as_ref()?.get(&ban.key, ban.now_ms)
    }

    fn remember_ban(&self, key: &str, state: BanState, now_ms: u64) {
        if let Some(cache) = &self.ban_states {
            cache.put(key, state, now_ms);
        }
    }

    async fn count_in_cluster_plain(&self, op: &CounterOp) -> Result<CounterResult, StoreError> {
        let mut pipe = redis::pipe();
        add_count(&mut pipe, op);
        let values: Vec<redis::Value> = self.run(&pipe).await?;
        Ok(parse_count(&mut values.into_iter(), op))
    }

    /// The bans' second round trip, for the calls that need one ([`ban_followup`]): offences
    /// recorded by the script, banned calls' counts taken back. A call whose offence another
    /// service recorded first (the script reports its ban) is taken back in a third.
    async fn settle_bans(
        &self,
        ops: &[&CounterOp],
        results: &mut [CounterResult],
        stored: &[Option<BanState>],
        subject_of: SubjectOf<'_>,
    ) -> Result<(), StoreError> {
        let mut offences = Vec::new();
        let mut uncount = Vec::new();
        for (i, (op, state)) in ops.iter().zip(stored).enumerate() {
            let (Some(ban), Some(state), Some(result)) = (&op.ban, state, results.get_mut(i))
            else {
                continue;
            };
            match ban_followup::follow_up(
                *state,
                ban.config.forget_after_ms,
                ban.now_ms,
                ban.limit,
                op.hits,
                result.after,
            ) {
                FollowUp::Done => {}
                FollowUp::Uncount {
                    remaining_ms,
                    strikes,
                } => {
                    result.ban = Some(BanOutcome::Refused {
                        remaining_ms,
                        strikes,
                    });
                    uncount.push(i);
                }
                FollowUp::Offend => offences.push(i),
            }
        }
        if offences.is_empty() && uncount.is_empty() {
            return Ok(());
        }
        let mut cmds: Vec<redis::Cmd> = offences
            .iter()
            .filter_map(|&i| {
                let ban = ops.get(i)?.ban.as_ref()?;
                Some(ban_script::offend(ban, &subject_of(ban.descriptor)))
            })
            .collect();
        cmds.extend(
            uncount
                .iter()
                .filter_map(|&i| ops.get(i).map(|op| uncount_cmd(op))),
        );
        let answers = self.run_each(cmds).await?;
        let mut raced = Vec::new();
        for (&i, answer) in offences.iter().zip(&answers) {
            let outcome = ban_script::parse_offend(answer);
            if matches!(outcome, Some(BanOutcome::Refused { .. })) {
                raced.push(i);
            }
            if let (Some(ban), Some(outcome)) = (ops.get(i).and_then(|op| op.ban.as_ref()), outcome)
            {
                self.remember_ban(&ban.key, outcome.state_at(ban.now_ms), ban.now_ms);
            }
            if let Some(result) = results.get_mut(i) {
                result.ban = outcome;
            }
        }
        if !raced.is_empty() {
            let cmds = raced
                .iter()
                .filter_map(|&i| ops.get(i).map(|op| uncount_cmd(op)));
            self.run_each(cmds.collect()).await?;
        }
        Ok(())
    }

    /// Runs commands that touch one key each: one pipeline on a single server; on a cluster,
    /// one pipeline per command (each to its key's node), all at once. Answers in order.
    async fn run_each(&self, cmds: Vec<redis::Cmd>) -> Result<Vec<redis::Value>, StoreError> {
        match &self.factory {
            LaneFactory::Single { .. } => {
                let mut pipe = redis::pipe();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                self.run(&pipe).await
            }
            LaneFactory::Cluster { .. } => {
                let futures = cmds.into_iter().map(|cmd| async move {
                    let mut pipe = redis::pipe();
                    pipe.add_command(cmd);
                    let (value,): (redis::Value,) = self.run(&pipe).await?;
                    Ok::<_, StoreError>(value)
                });
                futures_util::future::try_join_all(futures).await
            }
        }
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
        if let Some(cache) = &self.ban_states {
            cache.forget(key);
        }
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

/// `INCRBY key hits` + `EXPIRE key ttl` (+ `GET` of the previous window) for `op`.
fn add_count(pipe: &mut redis::Pipeline, op: &CounterOp) {
    pipe.cmd("INCRBY").arg(&op.key).arg(op.hits);
    pipe.cmd("EXPIRE").arg(&op.key).arg(op.ttl_secs).ignore();
    if let Some(prev) = &op.prev_key {
        pipe.cmd("GET").arg(prev);
    }
}

/// [`add_count`]'s answers for `op`, taken from `values`.
fn parse_count(values: &mut impl Iterator<Item = redis::Value>, op: &CounterOp) -> CounterResult {
    let after = values.next().map_or(0, |v| int_of(&v));
    let prev = match op.prev_key {
        Some(_) => values.next().map_or(0, |v| int_of(&v)),
        None => 0,
    };
    CounterResult {
        after,
        prev,
        ban: None,
    }
}

/// Takes a refused call's hits back off its counter.
fn uncount_cmd(op: &CounterOp) -> redis::Cmd {
    let mut cmd = redis::cmd("DECRBY");
    cmd.arg(&op.key).arg(op.hits);
    cmd
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
        ban_state_cache_ms: u64,
        ban_prefix: String,
    ) -> Result<Self, StoreError> {
        Ok(RedisStore {
            ban_prefix,
            main: RedisPool::new(main, serving_threads, ban_state_cache_ms)?,
            per_second: per_second
                .map(|s| RedisPool::new(s, serving_threads, ban_state_cache_ms))
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

    pub async fn apply(
        &self,
        ops: &[CounterOp],
        subject_of: SubjectOf<'_>,
    ) -> Result<Vec<CounterResult>, StoreError> {
        // Written out rather than through `on_pools`: an async closure capturing `subject_of`
        // makes rustc lose the future's `Send` (a higher-ranked lifetime it cannot prove).
        let (main_ops, second_ops) = self.split(ops);
        let (main, second) = match &self.per_second {
            None => (self.main.apply(&main_ops, subject_of).await?, Vec::new()),
            Some(ps) => {
                let (a, b) = tokio::join!(
                    self.main.apply(&main_ops, subject_of),
                    ps.apply(&second_ops, subject_of)
                );
                (a?, b?)
            }
        };
        Ok(Self::merge(ops, self.per_second.is_some(), main, second))
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
